"""The plan of a comparison run (``vp-rollout``, [`run_rollouts`][vpintegrator.rollout.run.run_rollouts]): its
[`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] turned once into a frozen, typed
``vpintegrator.rollout.plan.RolloutPlan`` by ``vpintegrator.rollout.plan.build_plan``, with
every check made and every default resolved there: which trajectories (``traj``/``n_traj``, else the trained
models' test split, plus ``heldout`` new conditions), the horizon, the rows and their step maps
(``vpintegrator.rollout.methods``), the ``split`` labels, the reference and how the run is cut
(``vpintegrator.rollout.plan.Blocks``: a shard, worker processes), and what is refused before anything runs
(outputs over inputs, work that does not fit in memory or on disk, a reference that is not finite: the checks
of ``vpintegrator.rollout.preflight``, which the builder calls). Nothing below the builder reads a configuration: the writer
(``vpintegrator.rollout.write``) and the runner (``vpintegrator.rollout.run``) take the plan, and a shard, a
dask task or a worker process gets the plan of its block (``RolloutPlan.part`` cuts a worker's).

Library messages name keys (``t_end``, ``traj``, ``models``), never flags; each error carries its key so
that a CLI names its own flag.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import VPIntegratorError
from ..jobs.executors import default_workers
from .config import RolloutConfig, model_entries, use_device_engine
from .engine import StepMap
from .family import is_parametric, run_family, step_for
from .methods import (Method, StepSettings, check_trained_on, fitted_rows, fitted_rows_split, integrator_names,
                      parse_model_entry, prepare_methods)
from .preflight import (check_fits, check_outputs, check_reference, check_without_system, input_files,
                        integrates_equations)
from .observed import ObservedSystem, check_observed_rows, run_observation
from .steps import SCALAR_MAX_BATCH, ExactFlowStep, IntegratorStep, ModelStep

if TYPE_CHECKING:
    from ..data.trajectories import Trajectories

__all__ = ["RolloutPlan", "Blocks", "MIN_WORK", "ORACLE_INTEGRATORS", "build_plan", "select", "run_digest"]

#: trajectory-steps of classical methods below which unset ``workers`` runs in this process only
MIN_WORK = 20_000_000

#: the classical rows of a parametric run that names no integrator (those the system supports)
ORACLE_INTEGRATORS = ("rk4", "implicit_midpoint", "gauss_legendre4")


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
    init, overlap, blowup, chunk_steps, volume : the keys of those names
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
    system: Any  # System, SystemFamily or UnknownSystem (no common base class)
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


def _select_traj(traj: Any, n_traj: Any, n_file: int, where: Path) -> np.ndarray:
    """The trajectories the keys ``traj`` / ``n_traj`` select of a file of ``n_file`` (all when neither)."""
    if traj is not None:
        try:
            idx = np.array([int(i) for i in traj], dtype=np.int64)
        except (TypeError, ValueError):
            raise VPIntegratorError(f"traj must be integer indices; got {traj!r}", key="traj") from None
        if idx.size == 0:
            raise VPIntegratorError("traj is empty; give trajectory indices into the data file", key="traj")
        bad = idx[(idx < 0) | (idx >= n_file)]
        if bad.size:
            raise VPIntegratorError(
                f"traj index {int(bad[0])} is out of range: {where} has {n_file} trajectories (0 .. {n_file - 1})",
                key="traj",
            )
        if np.unique(idx).size != idx.size:
            raise VPIntegratorError(f"traj lists an index twice: {traj!r}", key="traj")
        return idx
    if n_traj is not None:
        n = n_traj
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= n_file:
            raise VPIntegratorError(
                f"n_traj must be an int in 1 .. {n_file} (trajectories in {where}); got {n!r}", key="n_traj"
            )
        return np.arange(int(n))
    return np.arange(n_file)


def _horizon(t_end_key: Any, t0: float, dt: float, n_file: int) -> int:
    """Steps of ``dt`` from ``t0`` to the key ``t_end`` (None: the file's last state)."""
    if t_end_key is None:
        return n_file - 1
    try:
        t_end = float(t_end_key)
    except (TypeError, ValueError):
        raise VPIntegratorError(f"t_end must be a number; got {t_end_key!r}", key="t_end") from None
    n_steps = int(round((t_end - t0) / dt)) if math.isfinite(t_end) else 0
    if not math.isfinite(t_end) or n_steps < 1:
        raise VPIntegratorError(
            f"t_end {t_end_key!r} gives {n_steps} steps of dt = {dt:g} from t0 = {t0:g}; give at least {t0 + dt:g}",
            key="t_end",
        )
    return n_steps



def select(data: Path, traj: Any, n_traj: Any, t_end: Any) -> tuple[dict[str, Any], Any, float, np.ndarray, float,
                                                                   int]:
    """What the keys ``traj``/``n_traj``/``t_end`` select of the data file ``data``, read from its metadata
    only: ``(meta, system, dt, trajectory indices, t0, n_steps)`` (one-line errors naming the key)."""
    from ..data import read_metadata
    from ..systems.unknown import system_or_unknown

    meta = read_metadata(data)
    system = system_or_unknown(meta, data)
    dt = float(meta["dt"])
    idx = _select_traj(traj, n_traj, int(meta["n_traj"]), data)
    t0 = float(meta.get("t0", 0.0))
    return meta, system, dt, idx, t0, _horizon(t_end, t0, dt, int(meta["n_states"]))


def _cut(idx: np.ndarray, shard: tuple[int, int], cluster: bool, run_key: str | None
         ) -> tuple[np.ndarray, tuple[int, int], dict[str, Any]]:
    """Shard ``shard`` of the selection ``idx`` (a cluster's count at most one per trajectory): its indices,
    the shard, and the shard file's attributes."""
    from ..data.rollout_shards import rollout_bounds, selection_digest

    if cluster:
        shard = (shard[0], min(shard[1], int(idx.size)))
    a, b = rollout_bounds(int(idx.size), shard)
    attrs: dict[str, Any] = dict(shard_index=shard[0], shard_count=shard[1], shard_traj_start=a, shard_traj_stop=b,
                                 shard_n_traj=int(idx.size), shard_selection=selection_digest(idx))
    if run_key is not None:  # (a shard of a cluster run: the whole run's digest)
        attrs["shard_run"] = run_key
    return idx[a:b], shard, attrs


def run_digest(fields: Mapping[str, Any], data: Any, models: Any) -> str:
    """What tells a rollout run from any other: its keys ``fields`` (the output and ``workers`` apart), the
    sha256 of its data file and model files ``models`` (a run directory's ``config.toml`` and checkpoints)
    and this version; stored in each shard of a cluster run as ``shard_run`` so that a run continued after a
    lost cluster keeps the shards already written (same code, same inputs: the same bits)."""
    import hashlib
    import json

    from .._version import __version__
    from ..provenance import file_sha256

    def digest(path: Any) -> Any:
        p = Path(str(path))
        if p.is_dir():
            return {n: file_sha256(p / n) for n in ("config.toml", "best.pt", "last.pt") if (p / n).is_file()}
        return file_sha256(p) if p.is_file() else str(path)

    keys = {k: v for k, v in fields.items() if k not in ("out", "workers")}
    items = models.items() if isinstance(models, dict) else enumerate(models or [])
    record = {"config": keys, "data": digest(data), "models": {str(k): digest(v) for k, v in items},
              "version": __version__}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]


def build_plan(config: RolloutConfig, inputs: Sequence[Any] = (), overwrite: bool = False, *,
               shard: str | tuple[int, int] | None = None, write_index: bool = True, cluster: bool = False,
               run_key: str | None = None) -> tuple[RolloutPlan, Trajectories]:
    """The plan of a run of ``config``: every key checked, every model loaded and checked against the data,
    every default resolved; nothing computed, nothing written.

    Parameters
    ----------
    config : RolloutConfig
    inputs : paths, optional
        More files the run must not write over (its config file).
    overwrite : bool
        The overwrite rule of the outputs (checked here, before anything is read).
    shard : "I/N" or (I, N), optional
        Plan only the I-th of N contiguous blocks of the selection (``Blocks``), into
        ``<out stem>.shard-I-of-N.h5``; with ``write_index`` the index at ``out`` and its table are checked
        here too (they come once every shard exists). Refused with ``heldout``.
    cluster : bool
        A shard of a cluster run: ``N`` cut to at most one shard per trajectory, and the run's digest
        (``run_key``, default ``run_digest`` of ``config``) recorded in the shard as ``shard_run``.

    Returns
    -------
    (RolloutPlan, Trajectories)
        The plan, and the data file's selected trajectories (n_data, data_n_states, dim), the reference's
        file part: handed to the writer apart from the plan, so that it is freed once written.
    """
    from .._outputs import check_output
    from ..data import read_metadata, read_trajectories
    from ..data.observation import observation_of
    from ..integrators import list_integrators
    from ..jobs.shards import parse_shard, shard_path
    from ..systems.unknown import UnknownSystem, system_or_unknown
    from . import splits as sp

    shard = parse_shard(shard)
    config.validate()
    index = out = Path(config.out)
    inputs = tuple(input_files(config.data, config.models, [*inputs, config.fit_data]))  # fit_data: never written
    if shard is None:
        check_outputs(out, inputs, overwrite)
    elif config.heldout:
        raise VPIntegratorError(f"shard {shard[0]}/{shard[1]} with heldout = {config.heldout}: each shard would draw "
                                "its own new conditions; roll out the held-out conditions without --shard",
                                key="shard")
    elif write_index:  # the index and the table come at out at the end: the overwrite rule applies now
        for path, kind in ((out, "rollout"), (out.with_suffix(".csv"), "table"), (out.with_suffix(".md"), "table")):
            check_output(path, kind, overwrite, key="out")
    if cluster and run_key is None:
        run_key = run_digest(dataclasses.asdict(config), config.data, config.models)
    data = Path(config.data)
    meta = read_metadata(data)
    system: Any = system_or_unknown(meta, data)  # a SystemFamily once per-trajectory parameters are read
    dt = float(meta["dt"])
    n_file_traj, n_file = int(meta["n_traj"]), int(meta["n_states"])
    explicit = config.traj is not None or config.n_traj is not None
    idx = _select_traj(config.traj, config.n_traj, n_file_traj, data) if explicit else None  # refused first
    t0 = float(meta.get("t0", 0.0))
    n_steps = _horizon(config.t_end, t0, dt, n_file)
    names = integrator_names(config.integrators)
    unknown = isinstance(system, UnknownSystem)
    held = observation_of(meta)  # a file of observed channels only: what needs the full state is refused first
    if held is not None:
        check_observed_rows(held, names, [n for n in names if integrates_equations(n)], system, data,
                            init=config.init, parametric=False)
    if unknown:  # trajectories from elsewhere: what needs the equations is refused, in one line
        check_without_system(system, names, n_steps, n_file, t0, dt, heldout=config.heldout, t_end=config.t_end,
                              init=config.init)
    entries = [parse_model_entry(entry) for entry in model_entries(config.models)]
    notes = [check_trained_on(label, src, model, meta, data, config.allow_dt_mismatch) for label, model, src in entries]
    observation, observed_lines = run_observation(config.observe, meta, system, entries, data)
    if observation is not None and held is None:
        check_observed_rows(observation, names, [n for n in names if integrates_equations(n)], system, data,
                            init=str(config.init), parametric=is_parametric(data))
    n_new = int(config.heldout or 0)
    has_split = any(getattr(m, "training_split", None) is not None for _, m, _ in entries)
    first = read_trajectories(data, steps=[0]) if (has_split or n_new) else None
    digest = None
    if first is not None:
        from ..data.trajectories import first_states_digest

        digest = (first.n_traj, first_states_digest(first.y[:, 0]))
    model_splits = [sp.model_split(label, model, digest, data) for label, model, _ in entries]
    lines = [ms.note for ms in model_splits if ms.note] + [n for n in notes if n] + observed_lines  # said once the plan stands
    warnings: list[str] = []
    # the fitted rows (sindy+METHOD, parrot; rollout/methods.py) learn from the models' split, else vp-train's default
    fitted = fitted_rows(names)
    row_split = (fitted_rows_split(fitted, entries, model_splits, data, meta, config.fit_data, config.fit_on_data,
                                   scores_file=explicit or not n_new) if fitted else None)
    entries_labelled: list[tuple[str, Any, str]] = list(entries)
    if row_split is not None:
        own = row_split.data == data  # fitted on the scored file (fit_on_data): its split labels their rows
        model_splits += [sp.ModelSplit(name, row_split.as_record() if own else None, None) for name in fitted]
        entries_labelled += [(n, None, n) for n in fitted]
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
    n_whole, attrs = int(idx.size) + n_new, dict[str, Any]()
    if shard is not None:  # the block of the selection, into a file of its own (the outputs checked now)
        idx, shard, attrs = _cut(idx, shard, cluster, run_key)
        out = shard_path(index, shard)
        check_outputs(out, inputs, overwrite)
    # the reference: the exact flow unless the data is (DOP853 at <= 1e-12) or reference = "data"
    method = str(meta.get("method", "")) if meta.get("method") is not None else ""
    tight = (method == "dop853" and meta.get("rtol") is not None and meta.get("atol") is not None
             and float(meta["rtol"]) <= 1e-12 and float(meta["atol"]) <= 1e-12)
    exact_from_ics = config.reference == "exact" and not tight and not unknown
    generator = None  # the data's generator as a row of its own
    # the oracle: classical methods with each trajectory's true parameters (none without a system)
    if not names and not unknown and is_parametric(data):
        from ..integrators import supported_integrators

        names = supported_integrators(ORACLE_INTEGRATORS, system)
        lines.append(f"parametric data: the classical methods {', '.join(names)} with each trajectory's true "
                     "parameters are rows of the table (the oracle); give integrators to choose others")
    if (exact_from_ics and method and method not in names and (method in list_integrators() or method == "dop853")
            and observation is None):  # (an observed run: no full-state row)
        generator = method
    n_methods = len(names) + len(entries) + (generator is not None)
    check_fits(int(idx.size) + n_new, n_steps + 1, system, max(1, n_methods), n_file, data, t_end=config.t_end,
               chunk_steps=int(config.chunk_steps), volume=bool(config.volume), out=out)
    # the held-out conditions are drawn once the run is known to fit (--heldout 1000000000 drew 24 GB)
    heldout_y0 = seed = None
    if n_new:
        seed = sp.heldout_seed(meta, config.heldout_seed)
        assert first is not None  # read above whenever n_new
        heldout_y0 = sp.draw_heldout(meta, system, n_new, seed, first.y[:, 0], data)
        lines.append(f"heldout: {n_new} new initial conditions from sampler {meta.get('sampler')!r}, seed {seed}")
    ref_file = read_trajectories(data, traj=idx)
    check_reference(ref_file, idx, data)
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
        n_steps = _horizon(config.t_end, t0, dt, ref_file.n_states)
    full_system = system
    if observation is not None and not unknown:  # every row scored on the observed channels (rollout/observed.py)
        system = ObservedSystem(dim=observation.dim, source=str(data), full=system, observation=observation)
        lines.append(f"observe {observation.describe()}: the reference in the full state, then observed; models on "
                     "observed windows; estimate+METHOD rows from the first context_len observed states")
    settings = StepSettings(device=str(config.device), overlap=bool(config.overlap), fast_step=str(config.fast_step),
                            engine=str(config.engine), context_len=int(config.context_len),
                            context_noise=float(config.context_noise))
    methods = prepare_methods(names, entries, system, dt, t0, n_steps, data, settings, row_split)
    if generator is not None:
        label = generator if generator not in {m.label for m in methods} else "data_generator"
        gen_name = generator

        def make_generator(s) -> StepMap:
            if gen_name in list_integrators():
                return IntegratorStep(s, gen_name, dt)
            return ExactFlowStep(s, dt, rtol=float(meta["rtol"]), atol=float(meta["atol"]))

        methods.append(Method(label, step_for(system, make_generator), f"the generator of {data.name}"))
    model_files = tuple(Path(f) for f in dict.fromkeys(getattr(m, "source_file", None) for _, m, _ in entries)
                        if isinstance(f, str) and Path(f).is_file())
    run_labels, labels, trained = sp.label_rows(idx, n_new, model_splits, entries_labelled, [m.label for m in methods])
    if trained:
        warnings.append(trained)
        lines.append(trained)
    data_t_end, data_n_states = float(ref_file.t[-1]), int(ref_file.n_states)
    desc, ref_attrs = describe_reference(data, meta, full_system, exact_from_ics, config.reference, method, tight,
                                     data_t_end=data_t_end, beyond=n_steps + 1 > data_n_states, n_new=n_new,
                                     t_end=t0 + n_steps * dt)
    if observation is not None:
        desc += f"; observed in {observation.spec} ({', '.join(observation.names)})"
    plan = RolloutPlan(
        data=data, data_meta=meta, data_n_states=data_n_states, data_t_end=data_t_end, system=system, dt=dt, t0=t0,
        n_steps=n_steps, idx=idx, heldout_y0=heldout_y0, heldout_seed=seed, methods=tuple(methods), labels=labels,
        run_labels=run_labels, reference=str(config.reference), exact_from_ics=exact_from_ics, reference_desc=desc,
        reference_attrs=ref_attrs, out=out, inputs=inputs, steps=settings, init=str(config.init),
        overlap=bool(config.overlap), blowup=float(config.blowup), chunk_steps=int(config.chunk_steps),
        volume=bool(config.volume),
        blocks=Blocks(n_whole=n_whole, attrs=attrs, workers=config.workers,
                      index=index if shard is not None and write_index else None),
        notes=tuple(lines), warnings=tuple(warnings), model_files=model_files)
    return plan, ref_file


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
