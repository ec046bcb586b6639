"""The plan of a comparison run (``vp-rollout``, [`run_rollouts`][vpintegrator.rollout.run.run_rollouts]): its
[`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] turned once into a frozen, typed
``vpintegrator.rollout.plan.RolloutPlan`` by ``vpintegrator.rollout.plan.build_plan``, in one pass of three
steps, each made once: **resolve** (the keys read once into a ``vpintegrator.rollout.resolve.RolloutRequest``,
then what the data file and the models say, every default resolved: which trajectories, ``traj``/``n_traj``,
else the trained models' test split, plus ``heldout`` new conditions; the horizon; the rows; the reference's
kind: ``vpintegrator.rollout.resolve.resolve``), **check** (every refusal before anything runs: outputs over
inputs, what an observed run or a run without a system cannot do, work that does not fit in memory or on disk,
a reference that is not finite: ``vpintegrator.rollout.preflight.check``), then **plan** (``plan_of``: the
held-out conditions drawn, the rows' step maps, the ``split`` labels, the reference's description and how the
run is cut, ``vpintegrator.rollout.plan.Blocks``: a shard, worker processes). Nothing below the builder reads a
configuration: the writer (``vpintegrator.rollout.write``) and the runner (``vpintegrator.rollout.run``) take
the plan, and a shard, a dask task or a worker process gets the plan of its block (``RolloutPlan.part`` cuts a
worker's).

Library messages name keys (``t_end``, ``traj``, ``models``), never flags; each error carries its key so
that a CLI names its own flag.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..jobs.executors import default_workers
from ..protocols import SystemProtocol
from .config import RolloutConfig, model_entries, use_device_engine
from .engine import StepMap
from .family import run_family, step_for
from .methods import Method, StepSettings, integrator_names, prepare_methods
from .observed import ObservedSystem
from .preflight import check
from .resolve import Resolved, RolloutRequest, horizon, input_files, resolve, run_digest
from .steps import SCALAR_MAX_BATCH, ExactFlowStep, IntegratorStep, ModelStep

if TYPE_CHECKING:
    from ..data.trajectories import Trajectories

__all__ = ["RolloutPlan", "Blocks", "MIN_WORK", "build_plan", "plan_of"]

#: trajectory-steps of classical methods below which unset ``workers`` runs in this process only
MIN_WORK = 20_000_000


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
    """Everything a comparison run does, checked and resolved before anything is computed
    (``vpintegrator.rollout.plan.build_plan``).

    Attributes
    ----------
    data : Path
        The data file; ``data_meta`` its metadata, ``data_n_states`` its states per trajectory and
        ``data_t_end`` its last time.
    system : System, SystemFamily or UnknownSystem
        The system of the rows (a ``SystemFamily``: each row its own parameters, held-out conditions last).
    dt, t0 : float
    n_steps : int
        The horizon in steps (states ``0 .. n_steps``).
    idx : ndarray of int64, shape (n_data,)
        The data file's trajectories rolled out (first rows), then ``heldout_y0`` (n_new, dim) new conditions.
    methods : tuple of Method
        Every row: (label, step map, source), in the order they run.
    labels : mapping
        Method label -> its ``split`` label per rolled-out row; ``run_labels`` the run's own.
    reference : str
        The ``reference`` key (``exact`` or ``data``); ``exact_from_ics``: the reference is DOP853 from the
        initial conditions; ``reference_desc`` the line above the table, ``reference_attrs`` the file's
        ``reference*`` attributes.
    out, inputs : Path, tuple of Path
        The rollout file and every file the run reads (never written over).
    steps : StepSettings
        How the models' step maps run.
    init, overlap, blowup, chunk_steps, volume : the keys of those names (``volume`` resolved: unset, on up to
        ``vpintegrator.rollout.resolve.VOLUME_MAX_DIM`` dimensions; ``volume_note`` says why it is off then)
    blocks : Blocks
        How the run is cut (``attrs`` empty and ``workers`` the key's value for a whole run).
    notes, warnings : tuple of str
        Lines for the log once the plan stands; the warnings also go to the report.
    model_files : tuple of Path
        Every model file read (hashed into the provenance).
    """

    data: Path
    data_meta: Mapping[str, Any]
    data_n_states: int
    data_t_end: float
    system: SystemProtocol
    dt: float
    t0: float
    n_steps: int
    idx: np.ndarray
    heldout_y0: np.ndarray | None
    heldout_seed: int | None
    methods: tuple[Method, ...]
    labels: Mapping[str, tuple[str, ...]]
    run_labels: tuple[str, ...]
    reference: str
    exact_from_ics: bool
    reference_desc: str
    reference_attrs: Mapping[str, str | float]
    out: Path
    inputs: tuple[Path, ...]
    steps: StepSettings
    init: str
    overlap: bool
    blowup: float
    chunk_steps: int
    volume: bool
    blocks: Blocks
    volume_note: str = ""
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    model_files: tuple[Path, ...] = ()

    @property
    def t(self) -> np.ndarray:
        return self.t0 + self.dt * np.arange(self.n_steps + 1)

    @property
    def n_data(self) -> int:
        return int(self.idx.size)

    @property
    def n_new(self) -> int:
        return 0 if self.heldout_y0 is None else int(self.heldout_y0.shape[0])

    @property
    def n_traj(self) -> int:
        return self.n_data + self.n_new

    @property
    def traj_index(self) -> np.ndarray:
        """``/traj_index`` of the rollout file: data-file rows, then -1 for each held-out condition."""
        return np.concatenate([self.idx, np.full(self.n_new, -1, dtype=np.int64)]).astype(np.int64)

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
                          if m.label in labels),
            labels={k: v[rows] for k, v in self.labels.items() if k in labels}, run_labels=self.run_labels[rows],
            out=out, notes=(), warnings=(), blocks=Blocks(n_whole=self.blocks.n_whole, attrs=attrs, workers=1))


def build_plan(config: RolloutConfig, inputs: Sequence[Any] = (), overwrite: bool = False, *,
               shard: str | tuple[int, int] | None = None, write_index: bool = True, cluster: bool = False,
               run_key: str | None = None) -> tuple[RolloutPlan, Trajectories]:
    """The plan of a run of ``config``, in one pass: resolved (its keys read once into a
    ``vpintegrator.rollout.resolve.RolloutRequest``, then what the data file and the models say, every default
    resolved: ``vpintegrator.rollout.resolve.resolve``), checked (every refusal:
    ``vpintegrator.rollout.preflight.check``), then planned; nothing computed, nothing written.

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
    cluster : bool
        A shard of a cluster run: ``N`` cut to at most one shard per trajectory, and the run's digest
        (``run_key``, default ``run_digest`` of ``config``) recorded in the shard as ``shard_run``.

    Returns
    -------
    (RolloutPlan, Trajectories)
        The plan, and the data file's selected trajectories (n_data, data_n_states, dim), the reference's
        file part: handed to the writer apart from the plan, so that it is freed once written.
    """
    from ..jobs.shards import parse_shard

    shard = parse_shard(shard)
    config.validate()
    if cluster and run_key is None:
        run_key = run_digest(dataclasses.asdict(config), config.data, config.models)
    models = tuple(model_entries(config.models))
    request = RolloutRequest(  # the keys, read once
        data=Path(config.data), index=Path(config.out),
        inputs=tuple(input_files(config.data, models, [*inputs, config.fit_data])),  # fit_data: never written
        models=models, names=tuple(integrator_names(config.integrators)),
        traj=config.traj, n_traj=config.n_traj, t_end=config.t_end, heldout=int(config.heldout or 0),
        heldout_seed=config.heldout_seed, reference=str(config.reference), init=str(config.init),
        overlap=bool(config.overlap), blowup=float(config.blowup), chunk_steps=int(config.chunk_steps),
        volume=None if config.volume is None else bool(config.volume), workers=config.workers,
        steps=StepSettings(device=str(config.device), overlap=bool(config.overlap), fast_step=str(config.fast_step),
                           engine=str(config.engine), context_len=int(config.context_len),
                           context_noise=float(config.context_noise)),
        observe=config.observe, allow_dt_mismatch=bool(config.allow_dt_mismatch), fit_data=config.fit_data,
        fit_on_data=bool(config.fit_on_data), shard=shard, write_index=write_index, cluster=cluster,
        run_key=run_key)
    run = resolve(request)
    ref_file = check(request, run, overwrite)
    return plan_of(request, run, ref_file), ref_file


def plan_of(request: RolloutRequest, run: Resolved, ref_file: Trajectories) -> RolloutPlan:
    """The third step of ``build_plan``: the plan of a resolved, checked request (``ref_file``: the data file's
    selected trajectories, checked): the held-out conditions drawn, the system of every row (a family for
    per-trajectory parameters, observed channels), the rows' step maps, the ``split`` labels and the reference's
    description."""
    from ..integrators import list_integrators
    from . import splits as sp

    data, meta, dt, system = request.data, run.meta, run.dt, run.system
    lines, warnings = list(run.lines), list(run.warnings)
    n_new, idx, t0, n_steps = run.n_new, run.idx, run.t0, run.n_steps
    heldout_y0 = seed = None
    if n_new:  # drawn once the run is known to fit (--heldout 1000000000 drew 24 GB)
        seed = sp.heldout_seed(meta, request.heldout_seed)
        assert run.first is not None  # read whenever n_new
        heldout_y0 = sp.draw_heldout(meta, system, n_new, seed, run.first.y[:, 0], data)
        lines.append(f"heldout: {n_new} new initial conditions from sampler {meta.get('sampler')!r}, seed {seed}")
    if run.unknown:
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
        n_steps = horizon(request.t_end, t0, dt, ref_file.n_states)
    full_system = system
    observation = run.observation
    if observation is not None and not run.unknown:  # every row scored on the observed channels (rollout/observed.py)
        system = ObservedSystem(dim=observation.dim, source=str(data), full=system, observation=observation)
        lines.append(f"observe {observation.describe()}: the reference in the full state, then observed; models on "
                     "observed windows; estimate+METHOD rows from the first context_len observed states")
    methods = prepare_methods(list(run.names), list(run.entries), system, dt, t0, n_steps, data, request.steps,
                              run.row_split)
    if run.generator is not None:
        label = run.generator if run.generator not in {m.label for m in methods} else "data_generator"
        gen_name = run.generator

        def make_generator(s) -> StepMap:
            if gen_name in list_integrators():
                return IntegratorStep(s, gen_name, dt)
            return ExactFlowStep(s, dt, rtol=float(meta["rtol"]), atol=float(meta["atol"]))

        methods.append(Method(label, step_for(system, make_generator), f"the generator of {data.name}"))
    model_files = tuple(Path(f) for f in dict.fromkeys(getattr(m, "source_file", None) for _, m, _ in run.entries)
                        if isinstance(f, str) and Path(f).is_file())
    run_labels, labels, trained = sp.label_rows(idx, n_new, list(run.model_splits), list(run.entries_labelled),
                                                [m.label for m in methods])
    if trained:
        warnings.append(trained)
        lines.append(trained)
    data_t_end, data_n_states = float(ref_file.t[-1]), int(ref_file.n_states)
    desc, ref_attrs = describe_reference(data, meta, full_system, run.exact_from_ics, request.reference, run.method,
                                         run.tight, data_t_end=data_t_end, beyond=n_steps + 1 > data_n_states,
                                         n_new=n_new, t_end=t0 + n_steps * dt)
    if observation is not None:
        desc += f"; observed in {observation.spec} ({', '.join(observation.names)})"
    return RolloutPlan(
        data=data, data_meta=meta, data_n_states=data_n_states, data_t_end=data_t_end, system=system, dt=dt, t0=t0,
        n_steps=n_steps, idx=idx, heldout_y0=heldout_y0, heldout_seed=seed, methods=tuple(methods), labels=labels,
        run_labels=run_labels, reference=request.reference, exact_from_ics=run.exact_from_ics, reference_desc=desc,
        reference_attrs=ref_attrs, out=run.out, inputs=request.inputs, steps=request.steps, init=request.init,
        overlap=request.overlap, blowup=request.blowup, chunk_steps=request.chunk_steps, volume=run.volume,
        volume_note=run.volume_note,
        blocks=Blocks(n_whole=run.n_whole, attrs=run.attrs, workers=request.workers,
                      index=request.index if request.shard is not None and request.write_index else None),
        notes=tuple(lines), warnings=tuple(warnings), model_files=model_files)


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
