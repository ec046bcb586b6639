"""vpintegrator: structure-preserving neural integrators.

The public API is re-exported flat from here. Names are imported lazily (PEP 562) so that light entry
points such as ``vp-gen`` never import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

from ._version import __version__
from .errors import VPIntegratorError
from .data.trajectories import Trajectories

# The one list of the root names (the block below is written from it): public name -> module that defines
# it (relative to this package), what a user types daily. Everything else lives in the submodules (vpintegrator.systems, .integrators, .data, .nn, .models, .training,
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
    "generate": ".data.generation",
    "load_spec": ".data.spec",
    "list_specs": ".data.spec",
    "read_trajectories": ".data.trajectory_files",
    "write_trajectories": ".data.trajectory_files",
    "read_metadata": ".data.trajectory_files",
    # models
    "VolumePreservingFeedForward": ".models",
    "VolumePreservingTransformer": ".models",
    "StandardTransformerIntegrator": ".models",
    "build_model": ".models",
    "list_models": ".models",
    "save_model": ".models",
    "load_model": ".models",
    "list_pretrained": ".models",
    "pretrained_info": ".models",
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

# Written from _LAZY by `python scripts/write_exports.py` (tests/test_api.py checks it is current): what type
# checkers and IDEs see (they do not run __getattr__), and the literal __all__ (the three names imported above,
# then _LAZY's). At run time nothing here is imported.
if TYPE_CHECKING:  # pragma: no cover
    from .data.generation import generate as generate
    from .data.integration import integrate as integrate
    from .data.rollouts import RolloutResult as RolloutResult
    from .data.rollouts import read_rollout as read_rollout
    from .data.spec import list_specs as list_specs
    from .data.spec import load_spec as load_spec
    from .data.trajectory_files import read_metadata as read_metadata
    from .data.trajectory_files import read_trajectories as read_trajectories
    from .data.trajectory_files import write_trajectories as write_trajectories
    from .integrators import get_integrator as get_integrator
    from .integrators import list_integrators as list_integrators
    from .metrics import invariant_drift as invariant_drift
    from .metrics import relative_error as relative_error
    from .metrics import valid_prediction_time as valid_prediction_time
    from .models import StandardTransformerIntegrator as StandardTransformerIntegrator
    from .models import VolumePreservingFeedForward as VolumePreservingFeedForward
    from .models import VolumePreservingTransformer as VolumePreservingTransformer
    from .models import build_model as build_model
    from .models import count_parameters as count_parameters
    from .models import list_models as list_models
    from .models import list_pretrained as list_pretrained
    from .models import load_model as load_model
    from .models import pretrained_info as pretrained_info
    from .models import save_model as save_model
    from .plotting import plot_all as plot_all
    from .plotting import plot_rollout as plot_rollout
    from .plotting import plot_training as plot_training
    from .rollout import IntegratorStep as IntegratorStep
    from .rollout import ModelStep as ModelStep
    from .rollout import RolloutConfig as RolloutConfig
    from .rollout import initial_window as initial_window
    from .rollout import run_rollouts as run_rollouts
    from .systems import System as System
    from .systems import get_system as get_system
    from .systems import list_systems as list_systems
    from .systems import register_system as register_system
    from .training import FitResult as FitResult
    from .training import TrainConfig as TrainConfig
    from .training import fit as fit

__all__ = [
    "__version__",
    "VPIntegratorError",
    "Trajectories",
    "System",
    "get_system",
    "list_systems",
    "register_system",
    "integrate",
    "get_integrator",
    "list_integrators",
    "generate",
    "load_spec",
    "list_specs",
    "read_trajectories",
    "write_trajectories",
    "read_metadata",
    "VolumePreservingFeedForward",
    "VolumePreservingTransformer",
    "StandardTransformerIntegrator",
    "build_model",
    "list_models",
    "save_model",
    "load_model",
    "list_pretrained",
    "pretrained_info",
    "count_parameters",
    "fit",
    "TrainConfig",
    "FitResult",
    "ModelStep",
    "IntegratorStep",
    "initial_window",
    "run_rollouts",
    "RolloutConfig",
    "read_rollout",
    "RolloutResult",
    "relative_error",
    "valid_prediction_time",
    "invariant_drift",
    "plot_all",
    "plot_rollout",
    "plot_training",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
