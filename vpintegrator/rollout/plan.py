"""The plan of a comparison run (``vp-rollout``, [`run_rollouts`][vpintegrator.rollout.run.run_rollouts]): its
[`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] turned once into one frozen, typed
``vpintegrator.rollout.plan.RolloutPlan`` by ``vpintegrator.rollout.plan.build_plan``, in three steps, each made
once, on that one record: **resolve** (the keys read once, with what the data file's metadata and the models say,
every default resolved: which trajectories, ``traj``/``n_traj``, else the trained models' test split, plus
``heldout`` new conditions; the horizon; the rows; the splits; the reference's kind; how the run is cut,
``vpintegrator.rollout.plan.Blocks``: a shard, worker processes), **check** (``check``: every refusal before
anything runs, ``vpintegrator.rollout.preflight``'s), then **plan** (``plan_of``: the held-out conditions drawn,
the rows' step maps, the ``split`` labels, the reference's description). Nothing below the
builder reads a configuration: the writer (``vpintegrator.rollout.write``) and the runner
(``vpintegrator.rollout.run``) take the plan, and a shard, a dask task or a worker process gets the plan of its
block (``RolloutPlan.part`` cuts a worker's).

Library messages name keys (``t_end``, ``traj``, ``models``), never flags; each error carries its key so
that a CLI names its own flag.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..data.observation import Observation
from ..data.trajectories import state_names, state_periods
from ..errors import VPIntegratorError
from ..jobs.executors import default_workers
from ..metrics import VPT_THRESHOLD, offset_note, spread
from ..protocols import SystemProtocol
from .config import RolloutConfig, integrator_names, model_entries, use_device_engine
from .engine import StepMap
from .family import run_family, step_for
from .methods import (FitSplit, Method, StepSettings, check_fit_finite, check_trained_on, fit_split, fitted_rows,
                      fitted_rows_split, parse_model_entry, prepare_methods)
from .observed import ObservedSystem
from .preflight import input_files
from .splits import ModelSplit
from .steps import SCALAR_MAX_BATCH, ExactFlowStep, IntegratorStep, ModelStep

if TYPE_CHECKING:
    from ..data.trajectories import Trajectories

__all__ = ["RolloutPlan", "Blocks", "MIN_WORK", "build_plan", "check", "plan_of", "data_method", "describe_reference", "volume_default",
           "VOLUME_MAX_DIM", "ORACLE_INTEGRATORS"]

#: trajectory-steps of classical methods below which unset ``workers`` runs in this process only
MIN_WORK = 20_000_000

#: the classical rows of a parametric run that names no integrator (those the system supports)
ORACLE_INTEGRATORS = ("rk4", "implicit_midpoint", "gauss_legendre4")

#: the largest state dimension whose volume metric is on by default (the ``volume`` key unset): above it
#: ``log|det J|`` of every step is a dense dim x dim determinant of the step's Jacobian (O(dim³) per step and
#: trajectory; measured on a Toda lattice of N = 200, dim 400: 10 trajectories x 100 steps took 29 s with it,
#: under 1 s without)
VOLUME_MAX_DIM = 64


@dataclass(frozen=True)
class Blocks:
    """How a run is cut (``vp-rollout --shard I/N`` and ``--workers N``): ``n_whole`` trajectories in the whole
    selection (the runners' rule), the root attributes of a shard (``attrs``; with them the per-trajectory
    values are written), ``workers``, and ``index``: where a shard's run writes the index once every shard
    file exists (None: a whole run, or a shard whose scheduler writes the index itself).

    Every method and metric of a rollout is computed trajectory by trajectory (checked bitwise by
    ``tests/test_rollout_shards.py``), so the selection can be cut into contiguous blocks, each computed alone,
    without changing a bit, provided every block runs the runner the whole selection would (the compiled
    single-trajectory runners serve selections of at most ``SCALAR_MAX_BATCH`` trajectories:
    ``same_runners``). A shard (``build_plan(config, shard=(I, N))``) writes ``<out stem>.shard-I-of-N.h5``
    with the per-trajectory values of the table; the last shard to finish writes the index file at ``out`` and
    the whole run's table beside it (``vpintegrator.data.rollout_shards``). ``workers``: the classical
    integrators and the exact flow (and the reference, continued beyond the data by its generator) run as
    shards of the selection on that many processes (the NumPy integrators hold the GIL, and the compiled
    kernels do not release it), copied into the one rollout file in order; models run after them in this
    process. With one worker, a selection of at most ``SCALAR_MAX_BATCH`` trajectories, held-out conditions,
    no classical method, or a model on the device engine, the run stays in one process. Unset, ``workers`` is
    every core, used only when the work repays starting processes (``MIN_WORK`` trajectory-steps); given, it
    is used whenever there are two blocks. Worker processes die with the process that started them; their
    folder is removed by the next run of the same output (``vpintegrator.jobs.executors``).
    """

    n_whole: int
    attrs: Mapping[str, Any] = field(default_factory=dict)
    workers: int | None = 1
    index: Path | None = None  # a shard's run: where the index comes once every shard file exists

    @property
    def per_traj(self) -> bool:
        return bool(self.attrs)

    def same_runners(self, step_maps: Sequence[StepMap | None]) -> None:
        """The runner the whole selection would use: no compiled single-trajectory runner in a block of a
        selection too large for it."""
        for step_map in step_maps:
            if isinstance(step_map, IntegratorStep) and self.n_whole > step_map.compiled_max_batch:
                step_map.compiled_max_batch = 0
            elif isinstance(step_map, ModelStep) and self.n_whole > step_map.scalar_max_batch:
                step_map.scalar_max_batch = 0

    def part_labels(self, plan: RolloutPlan) -> list[str]:
        """The methods of ``plan`` worker processes would run: the classical integrators and the exact flow."""
        return [m.label for m in plan.methods if m.step_map.kind in ("integrator", "flow")]

    def n_parts(self, plan: RolloutPlan, labels: Sequence[str]) -> int:
        """Worker processes for the classical methods ``labels`` of ``plan`` (1: none)."""
        workers = self.workers if self.workers is not None else default_workers()
        n_traj = plan.n_traj
        if workers <= 1 or not labels or n_traj <= SCALAR_MAX_BATCH or plan.n_new:
            return 1  # (held-out conditions are drawn once, by this process: no blocks of them)
        if any(use_device_engine(plan.steps.engine, m.step_map, plan.system) for m in plan.methods
               if m.step_map.kind == "model"):
            return 1
        if self.workers is None and n_traj * plan.n_steps * len(labels) < MIN_WORK:
            return 1
        return min(workers, n_traj)


@dataclass(frozen=True)
class RolloutPlan:
    """Everything a comparison run does, resolved, checked and planned before anything is computed
    (``vpintegrator.rollout.plan.build_plan``); the one record between the configuration and the run.

    Attributes
    ----------
    data : Path
        The data file; ``data_meta`` its metadata, ``data_n_states`` its states per trajectory and
        ``data_t_end`` its last time.
    system : System, SystemFamily or UnknownSystem
        The system of the rows (planned: a ``SystemFamily``, each row its own parameters, held-out conditions
        last; an ``ObservedSystem`` for an observed run).
    dt, t0 : float
    n_steps : int
        The horizon in steps (states ``0 .. n_steps``); ``t_end`` the key as given (None: the data's).
    idx : ndarray of int64, shape (n_data,)
        The data file's trajectories rolled out (first rows), then ``n_new`` new conditions (``heldout_y0``,
        (n_new, dim), drawn with ``heldout_seed`` by the plan step).
    integrators, models : tuple
        The classical and registered rows named (the oracle's for a parametric run that names none), and the
        models loaded: ``(label, model, source)`` each.
    splits, fit_split : tuple of ModelSplit, FitSplit or None
        The models' (and fitted rows') recorded splits, and what the fitted rows fit on.
    observation : Observation or None
        The observed channels every row is scored on (None: the whole state); ``parametric``: the data has
        per-trajectory parameters (read only for the oracle rows and an observed run: else False).
    reference : str
        The ``reference`` key (``exact`` or ``data``); ``exact_from_ics``: the reference is DOP853 from the
        initial conditions; ``reference_desc`` the line above the table, ``reference_attrs`` the file's
        ``reference*`` attributes.
    out, inputs : Path, tuple of Path
        The rollout file and every file the run reads (never written over).
    steps : StepSettings
        How the models' step maps run.
    init, blowup, chunk_steps, volume, vpt_threshold, lyapunov : the keys of those names (``volume`` resolved: unset, on up
        to ``VOLUME_MAX_DIM`` dimensions; ``volume_note`` says why it is off then)
    spread : ndarray, shape (dim,), or None
        Each component's standard deviation over the training data, the NRMSE's scale (``data_spread``); planned,
        with ``table_notes`` (lines below the table: an offset that dominates ‖y‖,
        ``vpintegrator.metrics.offset_note``).
    period : ndarray, shape (dim,), or None
        Each scored component's period, 0 where not periodic (the data's or the system's ``periodic``,
        ``vpintegrator.data.trajectories.state_periods``): every error wraps those components; planned.
    blocks : Blocks
        How the run is cut (``attrs`` empty and ``workers`` the key's value for a whole run).
    notes, warnings : tuple of str
        Lines for the log once the plan stands; the warnings also go to the report.
    methods, labels, run_labels : planned
        Every row (label, step map, source) in the order they run; method label -> its ``split`` label per
        rolled-out row, and the run's own.
    """

    data: Path
    data_meta: Mapping[str, Any]
    data_n_states: int
    system: SystemProtocol
    dt: float
    t0: float
    n_steps: int
    t_end: float | None
    idx: np.ndarray
    n_new: int
    heldout_seed: int | None
    integrators: tuple[str, ...]
    models: tuple[tuple[str, Any, str], ...]
    splits: tuple[ModelSplit, ...]
    fit_split: FitSplit | None
    observation: Observation | None
    parametric: bool
    reference: str
    exact_from_ics: bool
    out: Path
    inputs: tuple[Path, ...]
    steps: StepSettings
    init: str
    blowup: float
    chunk_steps: int
    volume: bool
    blocks: Blocks
    volume_note: str = ""
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # made by the plan step (plan_of)
    data_t_end: float = math.nan
    heldout_y0: np.ndarray | None = None
    methods: tuple[Method, ...] = ()
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    run_labels: tuple[str, ...] = ()
    reference_desc: str = ""
    reference_attrs: Mapping[str, str | float] = field(default_factory=dict)
    vpt_threshold: float = VPT_THRESHOLD
    lyapunov: bool | None = None
    spread: np.ndarray | None = None
    period: np.ndarray | None = None
    table_notes: tuple[str, ...] = ()

    @property
    def t(self) -> np.ndarray:
        return self.t0 + self.dt * np.arange(self.n_steps + 1)

    @property
    def n_data(self) -> int:
        return int(self.idx.size)

    @property
    def n_traj(self) -> int:
        return self.n_data + self.n_new

    @property
    def traj_index(self) -> np.ndarray:
        """``/traj_index`` of the rollout file: data-file rows, then -1 for each held-out condition."""
        return np.concatenate([self.idx, np.full(self.n_new, -1, dtype=np.int64)]).astype(np.int64)

    @property
    def model_files(self) -> tuple[Path, ...]:
        """Every model file read (hashed into the provenance)."""
        files = dict.fromkeys(getattr(m, "source_file", None) for _, m, _ in self.models)
        return tuple(Path(f) for f in files if isinstance(f, str) and Path(f).is_file())

    @property
    def generator(self) -> str | None:
        """The data's generator as a row of its own (its method name; None: none): with the exact flow as the
        reference, a data file made by a classical method or a looser DOP853 that ``integrators`` does not name
        (an observed run: no full-state row)."""
        from ..integrators import list_integrators

        method = data_method(self.data_meta)[0]
        if (not self.exact_from_ics or not method or method in self.integrators or self.observation is not None
                or not (method in list_integrators() or method == "dop853")):
            return None
        return method

    def part(self, labels: Sequence[str], shard: tuple[int, int], out: Path) -> RolloutPlan:
        """Block ``shard`` of this plan's rows with the methods ``labels`` only, into the file ``out``: what a
        worker process computes (its per-trajectory values, one worker, the whole selection's runners);
        every row is stepped as in the whole plan (a family's step maps cut to the block's rows). Plans
        with held-out conditions are not cut (``Blocks.n_parts``)."""
        from ..data.rollout_shards import rollout_bounds, selection_digest
        from ..systems.family import SystemFamily
        from .family import for_rows

        a, b = rollout_bounds(self.n_data, shard)
        rows = slice(a, b)
        attrs = dict(shard_index=shard[0], shard_count=shard[1], shard_traj_start=a, shard_traj_stop=b,
                     shard_n_traj=self.n_data, shard_selection=selection_digest(self.idx))
        return dataclasses.replace(
            self, idx=self.idx[rows], system=self.system[rows] if isinstance(self.system, SystemFamily) else self.system,
            methods=tuple(Method(m.label, for_rows(m.step_map, rows), m.source) for m in self.methods
                          if m.label in labels), models=(),  # (the models run in this process)
            labels={k: v[rows] for k, v in self.labels.items() if k in labels}, run_labels=self.run_labels[rows],
            out=out, notes=(), warnings=(), blocks=Blocks(n_whole=self.blocks.n_whole, attrs=attrs, workers=1))


def build_plan(config: RolloutConfig, inputs: Sequence[Any] = (), overwrite: bool = False, *,
               shard: str | tuple[int, int] | None = None, write_index: bool = True,
               run_key: str | None = None) -> tuple[RolloutPlan, Trajectories]:
    """The plan of a run of ``config``: resolved (here: the keys read once, with what the data file's metadata
    and first states and the models say, every default resolved, into one frozen ``RolloutPlan``), checked
    (``check`` of that plan: every refusal), then planned (``plan_of``); each step once, nothing computed,
    nothing written. What a key cannot be read as (``traj``, ``n_traj``, ``t_end``, a model entry, a fitted row's
    split, a shard of held-out conditions) is refused while resolving, one line naming its key.

    Parameters
    ----------
    config : RolloutConfig
    inputs : paths, optional
        More files the run must not write over (its config file).
    overwrite : bool
        The overwrite rule of the outputs (checked before anything is computed).
    shard : "I/N" or (I, N), optional
        Plan only the I-th of N contiguous blocks of the selection (``Blocks``), into
        ``<out stem>.shard-I-of-N.h5``; with ``write_index`` the index at ``out`` and its table are checked
        too (they come once every shard exists). Refused with ``heldout``.
    run_key : str, optional
        A shard of a cluster run (``vpintegrator.rollout.run.run_digest``): ``N`` cut to at most one shard per
        trajectory, and ``run_key`` recorded in the shard as ``shard_run``.

    Returns
    -------
    (RolloutPlan, Trajectories)
        The plan, and the data file's selected trajectories (n_data, data_n_states, dim), the reference's
        file part: handed to the writer apart from the plan, so that it is freed once written.
    """
    from ..data import read_trajectories
    from ..data.trajectories import first_states_digest
    from ..jobs.shards import parse_shard, shard_path
    from ..systems.unknown import UnknownSystem
    from . import splits as sp
    from .family import is_parametric
    from .observed import run_observation

    config.validate()
    shard = parse_shard(shard) if shard is not None else None
    models, names = tuple(model_entries(config.models)), integrator_names(config.integrators)
    inputs = tuple(input_files(config.data, models, [*inputs, config.fit_data]))  # fit_data: never written
    data, t_end, n_new = Path(config.data), config.t_end, int(config.heldout or 0)
    # the system (a SystemFamily once per-trajectory parameters are read: the plan step), the rows and the horizon
    meta, system, dt, idx_given, t0, n_steps = sp.select(data, config.traj, config.n_traj, t_end)
    n_file_traj, n_file = int(meta["n_traj"]), int(meta["n_states"])
    explicit = config.traj is not None or config.n_traj is not None
    idx = idx_given if explicit else None  # (else: the models' test split, or every trajectory)
    unknown = isinstance(system, UnknownSystem)
    entries: list[tuple[str, Any, str]] = []  # every model loaded, then each checked against the data
    notes: list[str | None] = []
    for entry in models:
        entries.append(parse_model_entry(entry))
    for label, model, src in entries:
        notes.append(check_trained_on(label, src, model, meta, data, bool(config.allow_dt_mismatch)))
    observation, observed_lines = run_observation(config.observe, meta, system, entries, data)
    # per-trajectory parameters (read from the file only where they matter: the oracle rows, an observed run)
    parametric = not unknown and (not names or observation is not None) and is_parametric(data)
    digest = None  # of the data file's first states, for the models' recorded splits
    if any(getattr(m, "training_split", None) is not None for _, m, _ in entries):
        first = read_trajectories(data, steps=[0])
        digest = (first.n_traj, first_states_digest(first.y[:, 0]))
    model_splits = [sp.model_split(label, model, digest, data) for label, model, _ in entries]
    lines = [ms.note for ms in model_splits if ms.note] + [n for n in notes if n] + observed_lines
    warnings: list[str] = []
    # the fitted rows (sindy+METHOD, parrot; rollout/methods.py) learn from the models' split, else vp-train's default
    fitted = fitted_rows(names)
    row_split = (fitted_rows_split(fitted, entries, model_splits, data, meta, config.fit_data,
                                   bool(config.fit_on_data), scores_file=explicit or not n_new) if fitted else None)
    if row_split is not None:
        check_fit_finite(row_split)  # NaN/Inf where the rows fit: refused before any row runs
        own = row_split.data == data  # fitted on the scored file (fit_on_data): its split labels their rows
        model_splits += [sp.ModelSplit(name, row_split.as_record() if own else None, None) for name in fitted]
        lines.append(f"{', '.join(fitted)}: fitted on {row_split.source} of {row_split.data} ({row_split.train.size} "
                     f"training, {row_split.val.size} validation trajectories), scored on {data}")
    if idx is None:
        idx = np.zeros(0, dtype=np.int64) if n_new else sp.default_traj(model_splits)
        if idx is None:
            idx = np.arange(n_file_traj)
        elif not n_new:
            lines.append(f"rolling out the test split: {idx.size} of {n_file_traj} trajectories of {data.name}")
            shrank = sp.shrink_note(model_splits, idx)  # the models' test splits differ: say so
            if shrank:
                lines.append(shrank)
                warnings.append(shrank)
    if shard is not None and n_new:
        raise VPIntegratorError(f"shard {shard[0]}/{shard[1]} with heldout = {n_new}: each shard would draw its own "
                                "new conditions; roll out the held-out conditions without --shard", key="shard")
    n_whole, attrs, out = int(idx.size) + n_new, dict[str, Any](), Path(config.out)
    if shard is not None:  # the block of the selection, into a file of its own
        idx, shard, attrs = _cut(idx, shard, run_key)
        out = shard_path(Path(config.out), shard)
    # the reference: the exact flow unless the data is (DOP853 at <= 1e-12) or reference = "data"
    exact_from_ics = config.reference == "exact" and not data_method(meta)[1] and not unknown
    if not names and parametric:  # the oracle: classical methods with each trajectory's true parameters
        from ..integrators import supported_integrators

        names = list(supported_integrators(ORACLE_INTEGRATORS, system))
        lines.append(f"parametric data: the classical methods {', '.join(names)} with each trajectory's true "
                     "parameters are rows of the table (the oracle); give integrators to choose others")
    volume, volume_note = volume_default(config.volume, system.dim)
    if volume_note:
        lines.append(volume_note)
    plan = RolloutPlan(
        data=data, data_meta=meta, data_n_states=n_file, system=system, dt=dt, t0=t0, n_steps=n_steps, t_end=t_end,
        idx=idx, n_new=n_new, heldout_seed=sp.heldout_seed(meta, config.heldout_seed) if n_new else None,
        integrators=tuple(names), models=tuple(entries), splits=tuple(model_splits), fit_split=row_split,
        observation=observation, parametric=parametric, reference=str(config.reference),
        exact_from_ics=exact_from_ics, out=out, inputs=inputs,
        steps=StepSettings(device=str(config.device), overlap=bool(config.overlap), fast_step=str(config.fast_step),
                           engine=str(config.engine), context_len=int(config.context_len),
                           context_noise=float(config.context_noise)),
        init=str(config.init), blowup=float(config.blowup), chunk_steps=int(config.chunk_steps), volume=volume,
        vpt_threshold=float(config.vpt_threshold), lyapunov=config.lyapunov,
        blocks=Blocks(n_whole=n_whole, attrs=attrs, workers=config.workers,
                      index=Path(config.out) if shard is not None and write_index else None),
        volume_note=volume_note, notes=tuple(lines), warnings=tuple(warnings))
    ref_file = check(plan, overwrite)
    return plan_of(plan, ref_file), ref_file


def check(plan: RolloutPlan, overwrite: bool) -> Trajectories:
    """Every refusal of a resolved ``plan``, in one pass, before anything is computed or written: the outputs
    (the rollout file and its table, a shard's file and, with ``write_index``, the index and its table; the
    overwrite rule); the rows an observed file, an observed run or trajectories without a system cannot run
    (the rows the plan names); the work's memory and disk; then the data file's selected trajectories, read
    and refused when not finite. Returns them (the reference's file part)."""
    from .._outputs import check_output
    from ..data import read_trajectories
    from ..data.observation import observation_of
    from ..systems.unknown import UnknownSystem
    from .observed import check_observed_rows
    from .preflight import check_fits, check_outputs, check_reference, check_without_system, integrates_equations

    data, system, names, n_traj = plan.data, plan.system, list(plan.integrators), plan.n_traj
    n_methods = len(names) + len(plan.models) + (plan.generator is not None)
    held = observation_of(plan.data_meta)  # a file of observed channels only
    index = plan.blocks.index  # a shard's run with write_index: the index and its table come at out at the end
    if index is not None:
        for path in (index, *(index.with_suffix(s) for s in (".csv", ".md", ".tex"))):
            check_output(path, "rollout" if path == index else "table", overwrite, key="out")
    check_outputs(plan.out, plan.inputs, overwrite)
    integrating = [n for n in names if integrates_equations(n)] if held is not None or plan.observation is not None else []
    if held is not None:
        check_observed_rows(held, names, integrating, system, data, init=plan.init, parametric=False)
    if isinstance(system, UnknownSystem):  # trajectories from elsewhere: what needs the equations is refused
        check_without_system(system, names, plan.n_steps, plan.data_n_states, plan.t0, plan.dt, heldout=plan.n_new,
                             t_end=plan.t_end, init=plan.init)
    if plan.observation is not None and held is None:
        check_observed_rows(plan.observation, names, integrating, system, data, init=plan.init,
                            parametric=plan.parametric)
    check_fits(n_traj, plan.n_steps + 1, system, max(1, n_methods), plan.data_n_states, data,
               t_end=plan.t_end, chunk_steps=plan.chunk_steps, volume=plan.volume, out=plan.out)
    ref_file = read_trajectories(data, traj=plan.idx)
    check_reference(ref_file, plan.idx, data)
    return ref_file


def plan_of(plan: RolloutPlan, ref_file: Trajectories) -> RolloutPlan:
    """The third step of ``build_plan``: the resolved, checked ``plan`` planned (``ref_file``: the data file's
    selected trajectories, checked): the held-out conditions drawn, the system of every row (a family for
    per-trajectory parameters, observed channels), the rows' step maps, the ``split`` labels and the reference's
    description."""
    from ..data import read_trajectories
    from ..integrators import list_integrators
    from ..systems.unknown import UnknownSystem
    from . import splits as sp

    data, meta, dt, system, n_new = plan.data, plan.data_meta, plan.dt, plan.system, plan.n_new
    lines, warnings = list(plan.notes), list(plan.warnings)
    t0, n_steps, seed, heldout_y0 = plan.t0, plan.n_steps, plan.heldout_seed, None
    unknown, gen_name, (method, tight) = isinstance(system, UnknownSystem), plan.generator, data_method(meta)
    if n_new:  # drawn once the run is known to fit (--heldout 1000000000 drew 24 GB)
        assert seed is not None  # (resolved whenever n_new)
        heldout_y0 = sp.draw_heldout(meta, system, n_new, seed, read_trajectories(data, steps=[0]).y[:, 0], data)
        lines.append(f"heldout: {n_new} new initial conditions from sampler {meta.get('sampler')!r}, seed {seed}")
    if unknown:
        lines.append(f"{data.name} names no system: errors against its own trajectories; no oracle, exact-flow or "
                     "classical rows (they need the equations), no invariants")
    elif ref_file.params is not None:  # a parametric data set: each row (and held-out condition) its own system
        system = run_family(ref_file, meta, system, n_new, seed, data)
        lines.append(f"parameters per trajectory ({', '.join(ref_file.param_names)}): the reference, the classical "
                     "methods and the invariants use each trajectory's own"
                     + (f"; the {n_new} heldout conditions have new ones from the file's parameter_dists, seed {seed}"
                        if n_new else ""))
    if float(ref_file.t[0]) != t0:
        t0 = float(ref_file.t[0])
        n_steps = sp.horizon(plan.t_end, t0, dt, plan.data_n_states)
    full_system = system
    observation = plan.observation
    if observation is not None and not unknown:  # every row scored on the observed channels (rollout/observed.py)
        system = ObservedSystem(dim=observation.dim, source=str(data), full=system, observation=observation)
        lines.append(f"observe {observation.describe()}: the reference in the full state, then observed; models on "
                     "observed windows; estimate+METHOD rows from the first context_len observed states")
    methods = prepare_methods(list(plan.integrators), list(plan.models), system, dt, t0, n_steps, data, plan.steps,
                              plan.fit_split)
    if gen_name is not None:
        label = gen_name if gen_name not in {m.label for m in methods} else "data_generator"
        make = (partial(IntegratorStep, integrator=gen_name, dt=dt) if gen_name in list_integrators() else
                partial(ExactFlowStep, dt=dt, rtol=float(meta["rtol"]), atol=float(meta["atol"])))
        methods.append(Method(label, step_for(system, make), f"the generator of {data.name}"))
    fitted = fitted_rows(plan.integrators) if plan.fit_split is not None else []  # labelled by their training split
    labelled = [*plan.models, *((n, None, n) for n in fitted)]
    run_labels, labels, trained = sp.label_rows(plan.idx, n_new, list(plan.splits), labelled,
                                                [m.label for m in methods])
    if trained:
        warnings.append(trained)
        lines.append(trained)
    data_t_end = float(ref_file.t[-1])
    desc, ref_attrs = describe_reference(data, meta, full_system, plan.exact_from_ics, plan.reference, method, tight,
                                         data_t_end=data_t_end, beyond=n_steps + 1 > plan.data_n_states, n_new=n_new,
                                         t_end=t0 + n_steps * dt)
    if observation is not None:
        desc += f"; observed in {observation.spec} ({', '.join(observation.names)})"
    period = state_periods(system, system.dim, None if observation is not None else meta)  # (channels: none)
    mean, std, source = data_spread(plan, system, period)
    lines.append(f"mean_nrmse and vpt (NRMSE > {plan.vpt_threshold:g}) against each component's spread over {source}")
    offset = offset_note(mean, std, source)
    wrapped = wrapped_note(period, state_names(system, system.dim))
    notes = tuple(n for n in (offset, wrapped) if n)
    lines.extend(notes)
    if offset:
        warnings.append(offset)
    return dataclasses.replace(
        plan, data_t_end=data_t_end, system=system, t0=t0, n_steps=n_steps, spread=std, period=period,
        heldout_y0=heldout_y0, methods=tuple(methods), labels=labels, run_labels=run_labels, reference_desc=desc,
        reference_attrs=ref_attrs, notes=tuple(lines), warnings=tuple(warnings),
        table_notes=notes)


#: at most this many states of the training trajectories give the NRMSE's spread (the first trajectories)
SPREAD_MAX_STATES = 1_000_000


def wrapped_note(period: np.ndarray, names: tuple[str, ...]) -> str | None:
    """The line that says which components every error wraps (None: none periodic)."""
    on = [f"{names[i]} (period {p:.6g})" for i, p in enumerate(period) if p > 0]
    return (f"wrapped: {', '.join(on)}: every error, mean_nrmse and vpt take those differences in (-P/2, P/2] and "
            "their spread is circular; the states are stored unwrapped") if on else None


def data_spread(plan: RolloutPlan, system: Any, period: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """Each component's mean and spread (``vpintegrator.metrics.spread``) over the training data, in the
    channels the rows are scored on (``system``'s): the fitted rows' training trajectories, else those of the
    first model whose recorded split applies to the data file, else vp-train's default split of it (every
    trajectory of a file of fewer than 3); at most ``SPREAD_MAX_STATES`` states; circular for the components
    with a ``period``. (mean, std, where from)."""
    from ..data import read_trajectories

    n_file = int(plan.data_meta["n_traj"])
    try:
        split = plan.fit_split or fit_split(plan.splits, n_file)
        data, idx, source = split.data or plan.data, split.train, f"the training split of {{}} ({split.source})"
    except VPIntegratorError:  # a file too small to split
        data, idx = plan.data, np.zeros(0, dtype=np.int64)
    if not idx.size:
        data, idx, source = plan.data, np.arange(n_file), "every trajectory of {}"
    idx = idx[: max(1, SPREAD_MAX_STATES // plan.data_n_states)]

    def blocks() -> Any:
        for a in range(0, idx.size, 256):
            y = read_trajectories(data, traj=idx[a : a + 256]).y  # (n, n_states, dim)
            yield plan.observation.apply(y) if plan.observation is not None and y.shape[-1] != system.dim else y

    mean, std = spread(blocks(), period)
    return mean, std, source.format(Path(data).name)


def data_method(meta: Mapping[str, Any]) -> tuple[str, bool]:
    """The data's generator (its ``method`` attribute; "" when unrecorded) and whether the data is the exact
    flow (DOP853 at rtol and atol <= 1e-12)."""
    method = str(meta.get("method", "")) if meta.get("method") is not None else ""
    tight = (method == "dop853" and meta.get("rtol") is not None and meta.get("atol") is not None
             and float(meta["rtol"]) <= 1e-12 and float(meta["atol"]) <= 1e-12)
    return method, tight


def _cut(idx: np.ndarray, shard: tuple[int, int], run_key: str | None) -> tuple[np.ndarray, tuple[int, int],
                                                                            dict[str, Any]]:
    """Shard ``shard`` of the selection ``idx`` (of a cluster run, ``run_key`` its digest: the count at most one
    per trajectory): its indices, the shard, and the shard file's attributes."""
    from ..data.rollout_shards import rollout_bounds, selection_digest

    if run_key is not None:
        shard = (shard[0], min(shard[1], int(idx.size)))
    a, b = rollout_bounds(int(idx.size), shard)
    attrs: dict[str, Any] = dict(shard_index=shard[0], shard_count=shard[1], shard_traj_start=a, shard_traj_stop=b,
                                 shard_n_traj=int(idx.size), shard_selection=selection_digest(idx))
    if run_key is not None:  # (a shard of a cluster run: the whole run's digest)
        attrs["shard_run"] = run_key
    return idx[a:b], shard, attrs


def describe_reference(data: Path, meta: Mapping[str, Any], system: Any, exact_from_ics: bool, reference: str,
                       method: str, tight: bool, *, data_t_end: float, beyond: bool,
                       n_new: int, t_end: float | None = None) -> tuple[str, dict[str, str | float]]:
    """What the errors are measured against: the line above the table and the rollout file's ``reference*``
    attributes.

    ``reference = "exact"`` (the default): the exact flow, DOP853 at rtol = atol = 1e-12 integrated from the
    initial conditions over the whole horizon (``exact_from_ics``), unless the data file was itself made by
    DOP853 at tolerances <= 1e-12 (``tight``: then the data is the exact flow within its horizon, continued by
    the same DOP853 beyond). ``reference = "data"``: the data file, continued beyond its horizon (``beyond``)
    with the data's own generator ``method``. Held-out conditions are integrated from their initial conditions
    by the exact flow or, with ``"data"``, the data's generator. Data that names no system (``system`` an
    ``UnknownSystem``): the data file itself, whatever ``reference`` says. ``t_end`` (the horizon asked,
    ``t0 + n_steps dt``): where the line says the data reference ends, when that is within the data."""
    from ..provenance import redact_path
    from ..systems.unknown import UnknownSystem

    data = type(data)(redact_path(data))  # as shown and recorded: no absolute path of this machine
    end = data_t_end if t_end is None or beyond else min(data_t_end, t_end)  # the horizon asked, within the data
    gen = method or "dop853"
    attrs: dict[str, str | float]
    if isinstance(system, UnknownSystem):
        desc = (f"data: {data} (its own trajectories; the file names no system, so there is no exact flow) for "
                f"t <= {end:g}")
        attrs = {"reference_mode": "data", "reference_method": "none (no system)"}
    elif exact_from_ics:
        desc = (f"exact flow: DOP853 (rtol = atol = 1e-12) from the initial conditions of {data}, over the whole "
                f"horizon ({data.name} itself was made with {method or 'an unrecorded method'})")
        attrs = {"reference_mode": "exact", "reference_method": "dop853", "reference_rtol": 1e-12,
                 "reference_atol": 1e-12}
    else:
        kind = "exact flow" if tight else "data"
        how = (f"DOP853, rtol = {float(meta['rtol']):g}, atol = {float(meta['atol']):g}"
               if gen == "dop853" and meta.get("rtol") is not None else gen)
        desc = f"{kind}: {data} ({how}) for t <= {end:g}" + (f", continued with {gen} beyond" if beyond else "")
        attrs = {"reference_mode": "exact" if (tight and reference == "exact") else "data", "reference_method": gen}
        if gen == "dop853" and meta.get("rtol") is not None:
            attrs.update(reference_rtol=float(meta["rtol"]), reference_atol=float(meta["atol"]))
        if n_new:
            desc += f"; the {n_new} heldout conditions integrated with {gen}"
    return desc, attrs


def volume_default(volume: bool | None, dim: int) -> tuple[bool, str]:
    """The ``volume`` key resolved for a state of ``dim`` dimensions: (on, the note that says why it is off
    when unset: "" otherwise). Unset, it is on up to ``VOLUME_MAX_DIM`` dimensions."""
    if volume is not None:
        return bool(volume), ""
    if dim <= VOLUME_MAX_DIM:
        return True, ""
    return False, (f"volume: off by default for dim {dim} > {VOLUME_MAX_DIM} (log|det J| of every step is a dense "
                   f"{dim} x {dim} determinant, O(dim^3) per step); give volume = true to compute it")
