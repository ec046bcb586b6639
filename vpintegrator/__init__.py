"""vpintegrator: structure-preserving neural integrators.

The public API is re-exported flat from here. Names are imported lazily (PEP 562) so that light entry
points such as ``vp-gen`` never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .errors import VPIntegratorError
from .data.trajectories import Trajectories

# public name -> module that defines it (relative to this package). The function
# `vpintegrator.rollout.rollout` is not re-exported: its name is taken by the module.
_LAZY: dict[str, str] = {
    "System": ".systems",
    "RigidBody": ".systems",
    "CoupledOscillator": ".systems",
    "Volterra": ".systems",
    "ABCFlow": ".systems",
    "get_system": ".systems",
    "list_systems": ".systems",
    "sample_initial_conditions": ".systems",
    "list_samplers": ".systems",
    "paper_sphere_points": ".systems",
    "paper_trajectory_index": ".systems",
    "PAPER_TRAJECTORY_INDEX": ".systems",
    "PAPER_SPHERE_SIZE": ".systems",
    "Integrator": ".integrators",
    "ExplicitEuler": ".integrators",
    "RK4": ".integrators",
    "ImplicitMidpoint": ".integrators",
    "GaussLegendre4": ".integrators",
    "StormerVerlet": ".integrators",
    "ShearSplitting": ".integrators",
    "get_integrator": ".integrators",
    "list_integrators": ".integrators",
    "integrate": ".integrators",
    "read_trajectories": ".data.hdf5",
    "write_trajectories": ".data.hdf5",
    "read_metadata": ".data.hdf5",
    "TrajectoryWriter": ".data.hdf5",
    "SCHEMA_VERSION": ".data.hdf5",
    "GenerationSpec": ".data.spec",
    "load_spec": ".data.spec",
    "list_specs": ".data.spec",
    "generate": ".data.generate",
    "solve_flow": ".data.generate",
    "VolumePreservingAttention": ".nn",
    "MultiHeadAttention": ".nn",
    "VolumePreservingLowerLayer": ".nn",
    "VolumePreservingUpperLayer": ".nn",
    "ResNetLayer": ".nn",
    "cayley": ".nn",
    "cayley_method": ".nn",
    "compile_scalar": ".nn",
    "VolumePreservingFeedForward": ".models",
    "VolumePreservingTransformer": ".models",
    "StandardTransformerIntegrator": ".models",
    "build_model": ".models",
    "list_models": ".models",
    "save_model": ".models",
    "load_model": ".models",
    "load_checkpoint": ".models",
    "list_pretrained": ".models",
    "count_parameters": ".models",
    "fit": ".training",
    "TrainConfig": ".training",
    "FitResult": ".training",
    "EpochInfo": ".training",
    "TrainingInterrupted": ".training",
    "relative_loss": ".training",
    "make_optimizer": ".training",
    "make_scheduler": ".training",
    "list_optimizers": ".training",
    "list_schedulers": ".training",
    "resolve_device": ".training",
    "WindowDataset": ".data.windows",
    "WindowBatchSampler": ".data.windows",
    "make_window_datasets": ".data.windows",
    "load_trajectory_tensor": ".data.windows",
    "split_trajectories": ".data.windows",
    "TrajectoryData": ".data.windows",
    "Rollout": ".rollout",
    "StepMap": ".rollout",
    "IntegratorStep": ".rollout",
    "ModelStep": ".rollout",
    "ExactFlowStep": ".rollout",
    "initial_window": ".rollout",
    "RolloutConfig": ".rollout",
    "RolloutReport": ".rollout",
    "run_rollouts": ".rollout",
    "load_rollout_config": ".rollout",
    "read_rollout": ".rollout",
    "RolloutResult": ".rollout",
    "MethodRollout": ".rollout",
    "relative_error": ".metrics",
    "valid_prediction_time": ".metrics",
    "relative_drift": ".metrics",
    "invariant_drift": ".metrics",
    "drift_slope": ".metrics",
    "step_log_det_jacobian": ".metrics",
    "window_log_det_jacobian": ".metrics",
    "TrajectoryMetricsStream": ".metrics",
    "VolumeStream": ".metrics",
    "summary_row": ".metrics",
    "write_table": ".metrics",
    "read_table": ".metrics",
    "plot_trajectories3d": ".plotting",
    "plot_invariants": ".plotting",
    "plot_error": ".plotting",
    "plot_volume": ".plotting",
    "plot_phase": ".plotting",
    "plot_rollout": ".plotting",
    "plot_all": ".plotting",
    "save_figure": ".plotting",
    "method_colors": ".plotting",
}

__all__ = ["__version__", "VPIntegratorError", "Trajectories", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'vpintegrator' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
