"""One rollout engine for any step map: trained multi-step models, classical integrators, the exact flow.

- the rollout core is [`vpintegrator.stepping`][vpintegrator.stepping] (below ``data``, so that ``integrate`` is a call of it): the
  [`StepMap`][vpintegrator.stepping.StepMap] contract, the one window advance, the one failure rule, the one block loop
  (``run_blocks``) over NumPy arrays or torch tensors, which both engines run, and the one host driver (``drive``).
- ``vpintegrator.rollout.engine``: the [`StepMap`][vpintegrator.rollout.engine.StepMap] contract (re-exported), [`rollout`][vpintegrator.rollout.engine.rollout] (states in memory,
  a [`Trajectories`][vpintegrator.data.trajectories.Trajectories]), [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout] (states to a sink),
  [`initial_window`][vpintegrator.rollout.engine.initial_window]. One argument order, as ``integrate``: ``rollout(step_map, window0, dt, n_steps)``.
- ``vpintegrator.rollout.steps``: [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep], [`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep], [`ModelStep`][vpintegrator.rollout.steps.ModelStep],
  [`reference_step_map`][vpintegrator.rollout.steps.reference_step_map] (the generator a data file was made with), and how ModelStep
  runs a model (the numba kernel of ``vpintegrator.rollout.numba_model``: [`compiled_model`][vpintegrator.rollout.steps.compiled_model];
  ``torch.compile`` under ``fast_step = "compile"``: [`compile_model`][vpintegrator.rollout.steps.compile_model]; eager).
- ``vpintegrator.rollout.device``: the device engine for models: [`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout] keeps
  states and metrics (error, invariants, failures, volume) on the model's device, one copy per block to the
  host, model steps in a CUDA graph on CUDA ([`DeviceStepper`][vpintegrator.rollout.device.DeviceStepper]); [`use_device_engine`][vpintegrator.rollout.config.use_device_engine] (the
  ``engine`` key: ``auto``, ``host``, ``device``).
- ``vpintegrator.rollout.config``: [`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] (the keys of a comparison run) and
  [`load_rollout_config`][vpintegrator.rollout.config.load_rollout_config], and which engine runs a model (``use_device_engine``).
- comparison runs (``vp-rollout``): ``vpintegrator.rollout.plan`` turns a ``RolloutConfig`` into one frozen
  ``vpintegrator.rollout.plan.RolloutPlan`` (which trajectories, the horizon, the rows, the reference,
  the blocks of shards and workers) with every check made there (what is refused
  before a run starts) and the rows of ``vpintegrator.rollout.methods`` (models, classical and registered rows);
  ``vpintegrator.rollout.write`` writes the reference and each method from the plan, and
  ``vpintegrator.rollout.run`` runs it: [`run_rollouts`][vpintegrator.rollout.run.run_rollouts];
  ``vpintegrator.rollout.splits``: which conditions it rolls out (the models' test split, ``heldout``) and the
  ``split`` label of each row.
- ``vpintegrator.rollout.field``: ``LearnedField`` (a learned vector field as a System: any integrator rolls
  it out at any step) and ``field_step`` (its step map).
- ``vpintegrator.rollout.precision``: [`work_precision`][vpintegrator.rollout.precision.work_precision] (error and invariant drift against
  batch-1 cost over a ladder of steps, against the exact flow), [`write_work_precision`][vpintegrator.data.work_precision.write_work_precision] (the table: ``vpintegrator.data.work_precision``).

Rollout files are written by [`RolloutWriter`][vpintegrator.data.rollouts.RolloutWriter] and read by
[`read_rollout`][vpintegrator.data.rollouts.read_rollout] (one module, ``vpintegrator.data.rollouts``). Names are
imported lazily: ``import vpintegrator.rollout`` imports neither torch nor h5py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports


# public name -> submodule that defines it
_LAZY: dict[str, str] = {
    "BLOWUP": ".engine",
    "CHUNK_STEPS": ".engine",
    "StepMap": ".engine",
    "RolloutStats": ".engine",
    "rollout": ".engine",
    "stream_rollout": ".engine",
    "initial_window": ".engine",
    "IntegratorStep": ".steps",
    "ExactFlowStep": ".steps",
    "ModelStep": ".steps",
    "reference_step_map": ".steps",
    "work_precision": ".precision",
    "LearnedField": ".field",
    "field_step": ".field",
    "run_work_precision": ".precision",
    "WorkPrecisionRow": "..data.work_precision",
    "write_work_precision": "..data.work_precision",
    "read_work_precision": "..data.work_precision",
    "training_seconds": "..data.work_precision",
    "SCALAR_MAX_BATCH": ".steps",
    "DeviceStepper": ".device",
    "device_stream_rollout": ".device",
    "use_device_engine": ".config",
    "ENGINES": ".config",
    "RUNNERS": ".steps",
    "compiled_model": ".steps",
    "compile_model": ".steps",
    "MODEL_MAX_BATCH": ".steps",
    "RolloutConfig": ".config",
    "RolloutReport": ".report",
    "load_rollout_config": ".config",
    "run_rollouts": ".run",
    "parse_model_entry": ".methods",
    "model_label": ".methods",
    "describe_rows": ".methods",
    "ROLLOUT_SCHEMA": "..data.rollouts",
    "ROLLOUT_SCHEMA_VERSION": "..data.rollouts",
    "MethodMetrics": "..data.rollouts",
    "RolloutResult": "..data.rollouts",
    "read_rollout": "..data.rollouts",
    "ContextStep": ".context",
    "model_step": ".methods",
    "IdentifiedStep": ".identify",
    "identify_parameters": ".identify",
    "SindyStep": ".sindy",
    "select_sindy": ".sindy",
    "ParrotStep": "..models.parrot",
    "ARXStep": "..models.memory",
    "NARXStep": "..models.memory",
    "DelayDMDStep": "..models.memory",
    "DelaySindyStep": ".delay_sindy",
}


# what type checkers and IDEs see (they do not run __getattr__): the same names as _LAZY, from the same
# modules (tests/test_api.py keeps the two in step). At run time nothing here is imported.
if TYPE_CHECKING:  # pragma: no cover
    from ..data.rollouts import MethodMetrics as MethodMetrics
    from ..data.rollouts import ROLLOUT_SCHEMA as ROLLOUT_SCHEMA
    from ..data.rollouts import ROLLOUT_SCHEMA_VERSION as ROLLOUT_SCHEMA_VERSION
    from ..data.rollouts import RolloutResult as RolloutResult
    from ..data.work_precision import WorkPrecisionRow as WorkPrecisionRow
    from ..data.work_precision import read_work_precision as read_work_precision
    from ..data.work_precision import training_seconds as training_seconds
    from ..data.work_precision import write_work_precision as write_work_precision
    from ..data.rollouts import read_rollout as read_rollout
    from .report import RolloutReport as RolloutReport
    from .methods import model_label as model_label
    from .methods import describe_rows as describe_rows
    from .methods import parse_model_entry as parse_model_entry
    from .run import run_rollouts as run_rollouts
    from .config import ENGINES as ENGINES
    from .context import ContextStep as ContextStep
    from .methods import model_step as model_step
    from .identify import IdentifiedStep as IdentifiedStep
    from .identify import identify_parameters as identify_parameters
    from ..models.parrot import ParrotStep as ParrotStep
    from ..models.memory import ARXStep as ARXStep
    from ..models.memory import DelayDMDStep as DelayDMDStep
    from ..models.memory import NARXStep as NARXStep
    from .delay_sindy import DelaySindyStep as DelaySindyStep
    from .sindy import SindyStep as SindyStep
    from .sindy import select_sindy as select_sindy
    from .config import RolloutConfig as RolloutConfig
    from .config import load_rollout_config as load_rollout_config
    from .device import DeviceStepper as DeviceStepper
    from .device import device_stream_rollout as device_stream_rollout
    from .config import use_device_engine as use_device_engine
    from .engine import BLOWUP as BLOWUP
    from .engine import CHUNK_STEPS as CHUNK_STEPS
    from .engine import RolloutStats as RolloutStats
    from .engine import StepMap as StepMap
    from .engine import initial_window as initial_window
    from .engine import rollout as rollout
    from .engine import stream_rollout as stream_rollout
    from .field import LearnedField as LearnedField
    from .field import field_step as field_step
    from .precision import run_work_precision as run_work_precision
    from .precision import work_precision as work_precision
    from .steps import RUNNERS as RUNNERS
    from .steps import compiled_model as compiled_model
    from .steps import compile_model as compile_model
    from .steps import MODEL_MAX_BATCH as MODEL_MAX_BATCH
    from .steps import ExactFlowStep as ExactFlowStep
    from .steps import IntegratorStep as IntegratorStep
    from .steps import ModelStep as ModelStep
    from .steps import SCALAR_MAX_BATCH as SCALAR_MAX_BATCH
    from .steps import reference_step_map as reference_step_map

# a literal list (type checkers read __all__ only in this form): the names of _LAZY, sorted
__all__ = [
    "ARXStep",
    "BLOWUP",
    "CHUNK_STEPS",
    "ContextStep",
    "DelayDMDStep",
    "DelaySindyStep",
    "DeviceStepper",
    "ENGINES",
    "ExactFlowStep",
    "IdentifiedStep",
    "IntegratorStep",
    "LearnedField",
    "MethodMetrics",
    "ModelStep",
    "NARXStep",
    "ParrotStep",
    "ROLLOUT_SCHEMA",
    "ROLLOUT_SCHEMA_VERSION",
    "RUNNERS",
    "RolloutConfig",
    "RolloutReport",
    "RolloutResult",
    "RolloutStats",
    "SCALAR_MAX_BATCH",
    "MODEL_MAX_BATCH",
    "SindyStep",
    "select_sindy",
    "StepMap",
    "WorkPrecisionRow",
    "compiled_model",
    "compile_model",
    "describe_rows",
    "device_stream_rollout",
    "field_step",
    "identify_parameters",
    "initial_window",
    "load_rollout_config",
    "model_label",
    "model_step",
    "parse_model_entry",
    "read_rollout",
    "read_work_precision",
    "reference_step_map",
    "rollout",
    "run_rollouts",
    "run_work_precision",
    "stream_rollout",
    "training_seconds",
    "use_device_engine",
    "work_precision",
    "write_work_precision",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
