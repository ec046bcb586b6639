"""vpintegrator: structure-preserving neural integrators.

The public API is re-exported flat from here. Names are imported lazily (PEP 562) so that light entry
points such as ``vp-gen`` never import torch.
"""

from __future__ import annotations

from ._lazy import lazy_exports


from ._version import __version__
from .errors import VPIntegratorError
from .data.trajectories import Trajectories

# public name -> module that defines it (relative to this package): what a user types daily. Everything
# else lives in the submodules (vpintegrator.systems, .integrators, .data, .nn, .models, .training,
# .rollout, .metrics, .plotting, .testing, .studies). The function `vpintegrator.rollout.rollout` is not
# re-exported: its name is taken by the subpackage.
_LAZY: dict[str, str] = {
    # systems
    "System": ".systems",
    "get_system": ".systems",
    "list_systems": ".systems",
    "register_system": ".systems",
    # classical integrators
    "integrate": ".data.integration",
    "get_integrator": ".integrators",
    "list_integrators": ".integrators",
    # data
    "generate": ".data.generate",
    "load_spec": ".data.spec",
    "list_specs": ".data.spec",
    "read_trajectories": ".data.hdf5",
    "write_trajectories": ".data.hdf5",
    "read_metadata": ".data.hdf5",
    # models
    "VolumePreservingFeedForward": ".models",
    "VolumePreservingTransformer": ".models",
    "StandardTransformerIntegrator": ".models",
    "build_model": ".models",
    "list_models": ".models",
    "save_model": ".models",
    "load_model": ".models",
    "list_pretrained": ".models",
    "count_parameters": ".models",
    # training
    "fit": ".training",
    "TrainConfig": ".training",
    "FitResult": ".training",
    # rollout
    "ModelStep": ".rollout",
    "IntegratorStep": ".rollout",
    "initial_window": ".rollout",
    "run_rollouts": ".rollout",
    "RolloutConfig": ".rollout",
    "read_rollout": ".data.rollouts",
    "RolloutResult": ".data.rollouts",
    # metrics and figures
    "relative_error": ".metrics",
    "valid_prediction_time": ".metrics",
    "invariant_drift": ".metrics",
    "plot_all": ".plotting",
    "plot_rollout": ".plotting",
    "plot_training": ".plotting",
}

__all__ = ["__version__", "VPIntegratorError", "Trajectories", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
