"""Data: the trajectory container, generation specs, generation with SciPy or a classical integrator ([`integrate`][vpintegrator.data.integration.integrate]),
HDF5 trajectory files and rollout files.

Names are imported lazily (PEP 562): ``import vpintegrator.data`` is cheap, and nothing here imports
torch (``vpintegrator.data.windows``, which does, is never imported from this file).
"""

from __future__ import annotations

from .._lazy import lazy_exports


# public name -> submodule that defines it
_LAZY: dict[str, str] = {
    "Trajectories": ".trajectories",
    "ROLLOUT_SCHEMA": ".rollouts",
    "MethodMetrics": ".rollouts",
    "RolloutResult": ".rollouts",
    "read_rollout": ".rollouts",
    "RolloutWriter": ".rollouts",
    "SCHEMA_VERSION": ".hdf5",
    "TrajectoryWriter": ".hdf5",
    "read_metadata": ".hdf5",
    "read_trajectories": ".hdf5",
    "write_trajectories": ".hdf5",
    "GenerationSpec": ".spec",
    "list_specs": ".spec",
    "load_spec": ".spec",
    "generate": ".generation",
    "integrate": ".integration",
    "solve_flow": ".generation",
    "WorkPrecisionRow": ".work_precision",
    "read_work_precision": ".work_precision",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
