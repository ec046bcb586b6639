"""Data: the trajectory container, generation specs, generation with SciPy or a classical integrator ([`integrate`][vpintegrator.data.integration.integrate]),
HDF5 trajectory files and rollout files.

Names are imported lazily (PEP 562): ``import vpintegrator.data`` is cheap, and nothing here imports
torch (``vpintegrator.data.windows``, which does, is never imported from this file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports


# public name -> submodule that defines it
_LAZY: dict[str, str] = {
    "Trajectories": ".trajectories",
    "ROLLOUT_SCHEMA": ".rollouts",
    "MethodMetrics": ".rollouts",
    "RolloutResult": ".rollouts",
    "read_rollout": ".rollouts",
    "RolloutWriter": ".rollouts",
    "SCHEMA_VERSION": ".trajectory_reader",
    "TrajectoryWriter": ".trajectory_files",
    "read_metadata": ".trajectory_files",
    "read_trajectories": ".trajectory_files",
    "write_trajectories": ".trajectory_files",
    "GenerationSpec": ".spec",
    "list_specs": ".spec",
    "load_spec": ".spec",
    "generate": ".generation",
    "integrate": ".integration",
    "IntegratorMap": ".integration",
    "solve_flow": ".flow",
    "WorkPrecisionRow": ".work_precision",
    "read_work_precision": ".work_precision",
    "break_even": ".work_precision",
    "amortised_cost": ".work_precision",
    "with_training_cost": ".work_precision",
    "write_work_precision": ".work_precision",
    "at_equal_cost": ".work_precision",
    "training_seconds": ".work_precision",
}


# what type checkers and IDEs see (they do not run __getattr__): the same names as _LAZY, from the same
# modules (tests/test_api.py keeps the two in step). At run time nothing here is imported.
if TYPE_CHECKING:  # pragma: no cover
    from .flow import solve_flow as solve_flow
    from .generation import generate as generate
    from .integration import IntegratorMap as IntegratorMap
    from .integration import integrate as integrate
    from .rollouts import MethodMetrics as MethodMetrics
    from .rollouts import ROLLOUT_SCHEMA as ROLLOUT_SCHEMA
    from .rollouts import RolloutResult as RolloutResult
    from .rollouts import RolloutWriter as RolloutWriter
    from .rollouts import read_rollout as read_rollout
    from .spec import GenerationSpec as GenerationSpec
    from .spec import list_specs as list_specs
    from .spec import load_spec as load_spec
    from .trajectories import Trajectories as Trajectories
    from .trajectory_files import TrajectoryWriter as TrajectoryWriter
    from .trajectory_files import read_metadata as read_metadata
    from .trajectory_files import read_trajectories as read_trajectories
    from .trajectory_files import write_trajectories as write_trajectories
    from .trajectory_reader import SCHEMA_VERSION as SCHEMA_VERSION
    from .work_precision import WorkPrecisionRow as WorkPrecisionRow
    from .work_precision import amortised_cost as amortised_cost
    from .work_precision import at_equal_cost as at_equal_cost
    from .work_precision import break_even as break_even
    from .work_precision import read_work_precision as read_work_precision
    from .work_precision import training_seconds as training_seconds
    from .work_precision import with_training_cost as with_training_cost
    from .work_precision import write_work_precision as write_work_precision

__all__ = [
    "Trajectories",
    "ROLLOUT_SCHEMA",
    "MethodMetrics",
    "RolloutResult",
    "read_rollout",
    "RolloutWriter",
    "SCHEMA_VERSION",
    "TrajectoryWriter",
    "read_metadata",
    "read_trajectories",
    "write_trajectories",
    "GenerationSpec",
    "list_specs",
    "load_spec",
    "generate",
    "integrate",
    "IntegratorMap",
    "solve_flow",
    "WorkPrecisionRow",
    "read_work_precision",
    "break_even",
    "amortised_cost",
    "with_training_cost",
    "write_work_precision",
    "at_equal_cost",
    "training_seconds",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
