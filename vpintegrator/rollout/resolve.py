"""The first step of a comparison run's plan (``vpintegrator.rollout.plan.build_plan``: resolve, check, plan):
its keys read once into a frozen, typed [`RolloutRequest`][vpintegrator.rollout.resolve.RolloutRequest], then
[`resolve`][vpintegrator.rollout.resolve.resolve] of the request: what the data file's metadata and the models
say (the system, the selection, the horizon, the rows, the splits, the reference's kind), every default resolved,
in a frozen [`Resolved`][vpintegrator.rollout.resolve.Resolved]. Nothing here refuses what the preflight checks
(``vpintegrator.rollout.preflight.check``: outputs, observation, a run without a system, work that does not fit,
the reference); what is refused here is a key that cannot be read (``traj``, ``n_traj``, ``t_end``, a model
entry, a fitted row's split) — each one line naming its key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from ..errors import VPIntegratorError
from ..protocols import SystemProtocol
from .methods import StepSettings, check_trained_on, fitted_rows, fitted_rows_split, parse_model_entry

if TYPE_CHECKING:
    from ..data.observation import Observation
    from ..data.trajectories import Trajectories
    from .methods import FitSplit
    from .splits import ModelSplit

__all__ = ["RolloutRequest", "Resolved", "resolve", "input_files", "select", "run_digest", "VOLUME_MAX_DIM", "ORACLE_INTEGRATORS"]

#: the classical rows of a parametric run that names no integrator (those the system supports)
ORACLE_INTEGRATORS = ("rk4", "implicit_midpoint", "gauss_legendre4")

#: the largest state dimension whose volume metric is on by default (the ``volume`` key unset): above it
#: ``log|det J|`` of every step is a dense dim x dim determinant of the step's Jacobian (O(dim³) per step and
#: trajectory; measured on a Toda lattice of N = 200, dim 400: 10 trajectories x 100 steps took 29 s with it,
#: under 1 s without)
VOLUME_MAX_DIM = 64


@dataclass(frozen=True)
class RolloutRequest:
    """The keys of a [`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig], read once and typed, with
    the call's own arguments (``inputs``, ``shard``, ``write_index``, ``cluster``, ``run_key``): what
    ``resolve`` and everything below it read instead of the config. ``index`` is ``out`` (a shard's run
    writes its own file beside it); ``volume`` None: on up to ``VOLUME_MAX_DIM`` dimensions."""

    data: Path
    index: Path
    inputs: tuple[Path, ...]
    models: tuple[Any, ...]
    names: tuple[str, ...]
    traj: Any
    n_traj: Any
    t_end: Any
    heldout: int
    heldout_seed: int | None
    reference: str
    init: str
    overlap: bool
    blowup: float
    chunk_steps: int
    volume: bool | None
    workers: int | None
    steps: StepSettings
    observe: str | None
    allow_dt_mismatch: bool
    fit_data: str | None
    fit_on_data: bool
    shard: tuple[int, int] | None = None
    write_index: bool = True
    cluster: bool = False
    run_key: str | None = None


@dataclass(frozen=True)
class Resolved:
    """What a request's data file and models say, every default resolved (``resolve``); checked next by
    ``vpintegrator.rollout.preflight.check``, then turned into the plan.

    ``idx`` the data file's rows rolled out (a shard's block of them, ``out`` then the shard's file and
    ``attrs`` its attributes; ``n_whole`` the whole selection's rows, held-out conditions included);
    ``names`` the classical rows (the oracle's when a parametric run names none); ``generator`` the data's
    generator as a row of its own (None: none); ``n_methods`` every row; ``lines``/``warnings`` what the log
    (and the report) say once the plan stands; ``volume`` the ``volume`` key resolved; ``parametric``: the data
    has per-trajectory parameters (read only for the oracle rows and an observed run: else False)."""

    meta: dict[str, Any]
    system: SystemProtocol
    unknown: bool
    dt: float
    t0: float
    n_steps: int
    n_file: int
    idx: np.ndarray
    n_new: int
    n_whole: int
    out: Path
    attrs: Mapping[str, Any]
    names: tuple[str, ...]
    entries: tuple[tuple[str, Any, str], ...]
    entries_labelled: tuple[tuple[str, Any, str], ...]
    model_splits: tuple[ModelSplit, ...]
    row_split: FitSplit | None
    held: Observation | None
    observation: Observation | None
    first: Trajectories | None
    method: str
    tight: bool
    exact_from_ics: bool
    generator: str | None
    n_methods: int
    volume: bool
    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    volume_note: str = ""
    parametric: bool = False


def input_files(data: Any, entries: Iterable[Any], extra: Iterable[Any] = ()) -> list[Path]:
    """Every file a run reads: the data file, model checkpoints (every ``.pt`` of a run directory; ``entries``
    the ``models`` key's entries, ``vpintegrator.rollout.config.model_entries``) and ``extra`` (e.g. the config
    file)."""
    files: list[Path] = [Path(data)] if isinstance(data, (str, Path)) else []
    for entry in entries:
        spec = entry[1] if isinstance(entry, (tuple, list)) and len(entry) == 2 else entry
        if not isinstance(spec, (str, Path)) or str(spec).startswith("pretrained:"):
            continue
        p = Path(spec)
        files.append(p)
        if p.is_dir():
            files += sorted(p.glob("*.pt"))
    files += [Path(e) for e in extra if e is not None]
    return files



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


def horizon(t_end_key: Any, t0: float, dt: float, n_file: int) -> int:
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
    return meta, system, dt, idx, t0, horizon(t_end, t0, dt, int(meta["n_states"]))


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


def volume_default(volume: bool | None, dim: int) -> tuple[bool, str]:
    """The ``volume`` key resolved for a state of ``dim`` dimensions: (on, the note that says why it is off
    when unset: "" otherwise). Unset, it is on up to ``VOLUME_MAX_DIM`` dimensions."""
    if volume is not None:
        return bool(volume), ""
    if dim <= VOLUME_MAX_DIM:
        return True, ""
    return False, (f"volume: off by default for dim {dim} > {VOLUME_MAX_DIM} (log|det J| of every step is a dense "
                   f"{dim} x {dim} determinant, O(dim^3) per step); give volume = true to compute it")


def resolve(request: RolloutRequest) -> Resolved:
    """What the request's data file (its metadata and first states only) and models say, every default
    resolved: the system, the selection (``traj``/``n_traj``, else the models' test split; a shard's block of
    it), the horizon, the models loaded (each checked against the data: ``check_trained_on``), the observation,
    the splits and the fitted rows' training data, the classical rows (the oracle's for a parametric run that
    names none), the reference's kind and the data's generator as a row, and the ``volume`` key."""
    from ..data import read_metadata, read_trajectories
    from ..data.observation import observation_of
    from ..integrators import list_integrators
    from ..jobs.shards import shard_path
    from ..systems.unknown import UnknownSystem, system_or_unknown
    from . import splits as sp
    from .family import is_parametric
    from .observed import run_observation

    data = request.data
    meta = read_metadata(data)
    system = system_or_unknown(meta, data)  # a SystemFamily once per-trajectory parameters are read (the plan)
    dt = float(meta["dt"])
    n_file_traj, n_file = int(meta["n_traj"]), int(meta["n_states"])
    explicit = request.traj is not None or request.n_traj is not None
    idx = _select_traj(request.traj, request.n_traj, n_file_traj, data) if explicit else None
    t0 = float(meta.get("t0", 0.0))
    n_steps = horizon(request.t_end, t0, dt, n_file)
    names = list(request.names)
    unknown = isinstance(system, UnknownSystem)
    held = observation_of(meta)  # a file of observed channels only
    entries = [parse_model_entry(entry) for entry in request.models]
    notes = [check_trained_on(label, src, model, meta, data, request.allow_dt_mismatch) for label, model, src in entries]
    observation, observed_lines = run_observation(request.observe, meta, system, entries, data)
    # per-trajectory parameters (read from the file only where they matter: the oracle rows, an observed run)
    parametric = not unknown and (not names or observation is not None) and is_parametric(data)
    n_new = int(request.heldout or 0)
    has_split = any(getattr(m, "training_split", None) is not None for _, m, _ in entries)
    first = read_trajectories(data, steps=[0]) if (has_split or n_new) else None
    digest = None
    if first is not None:
        from ..data.trajectories import first_states_digest

        digest = (first.n_traj, first_states_digest(first.y[:, 0]))
    model_splits = [sp.model_split(label, model, digest, data) for label, model, _ in entries]
    lines = [ms.note for ms in model_splits if ms.note] + [n for n in notes if n] + observed_lines
    warnings: list[str] = []
    # the fitted rows (sindy+METHOD, parrot; rollout/methods.py) learn from the models' split, else vp-train's default
    fitted = fitted_rows(names)
    row_split = (fitted_rows_split(fitted, entries, model_splits, data, meta, request.fit_data, request.fit_on_data,
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
    n_whole, attrs, out = int(idx.size) + n_new, dict[str, Any](), request.index
    if request.shard is not None and not n_new:  # the block of the selection, into a file of its own
        idx, shard, attrs = _cut(idx, request.shard, request.cluster, request.run_key)
        out = shard_path(request.index, shard)
    # the reference: the exact flow unless the data is (DOP853 at <= 1e-12) or reference = "data"
    method = str(meta.get("method", "")) if meta.get("method") is not None else ""
    tight = (method == "dop853" and meta.get("rtol") is not None and meta.get("atol") is not None
             and float(meta["rtol"]) <= 1e-12 and float(meta["atol"]) <= 1e-12)
    exact_from_ics = request.reference == "exact" and not tight and not unknown
    # the oracle: classical methods with each trajectory's true parameters (none without a system)
    if not names and parametric and not isinstance(system, UnknownSystem):
        from ..integrators import supported_integrators

        names = list(supported_integrators(ORACLE_INTEGRATORS, system))
        lines.append(f"parametric data: the classical methods {', '.join(names)} with each trajectory's true "
                     "parameters are rows of the table (the oracle); give integrators to choose others")
    generator = None  # the data's generator as a row of its own (an observed run: no full-state row)
    if (exact_from_ics and method and method not in names and (method in list_integrators() or method == "dop853")
            and observation is None):
        generator = method
    volume, volume_note = volume_default(request.volume, system.dim)
    if volume_note:
        lines.append(volume_note)
    return Resolved(
        meta=meta, system=system, unknown=unknown, dt=dt, t0=t0, n_steps=n_steps, n_file=n_file, idx=idx, n_new=n_new,
        n_whole=n_whole, out=out, attrs=attrs, names=tuple(names), entries=tuple(entries), entries_labelled=tuple(entries_labelled),
        model_splits=tuple(model_splits), row_split=row_split, held=held, observation=observation, first=first,
        method=method, tight=tight, exact_from_ics=exact_from_ics, generator=generator,
        n_methods=len(names) + len(entries) + (generator is not None), volume=volume, lines=tuple(lines),
        warnings=tuple(warnings), volume_note=volume_note, parametric=parametric)
