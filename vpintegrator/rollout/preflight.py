"""The refusals of a comparison run, made by the second step of its plan (``vpintegrator.rollout.plan.check``:
resolve, check, plan), before anything is computed or written: an output over an input (``check_outputs``;
``input_files``: every file a run reads), what a run on trajectories without a system cannot do
(``check_without_system``), work that does not fit in memory or on disk (``estimate``, ``check_fits``) and a
reference that is not finite (``check_reference``). Each refusal is one line naming its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from ..errors import VPIntegratorError
from .methods import parse_row

if TYPE_CHECKING:
    from ..data.trajectories import Trajectories

__all__ = ["input_files", "check_outputs", "estimate", "check_fits", "check_reference",
           "check_without_system"]


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


def check_outputs(out: Any, inputs: Sequence[Path], overwrite: bool = False) -> list[Path]:
    """Refuse (one-line error naming the key ``out``) an output — the rollout file or its metrics table —
    that is one of the run's ``inputs`` (``input_files``), or an
    ``out`` that is a directory; before anything is read. An output
    that exists is refused unless ``overwrite``, and then replaced only if it is a rollout file (its table
    a metrics table): ``vpintegrator._outputs.check_output``. Returns the four outputs (the file, its table's
    ``.csv``, ``.md`` and ``.tex``), links resolved."""
    from .._io import check_not_input
    from .._outputs import check_output

    if not isinstance(out, (str, Path)) or not str(out):
        raise VPIntegratorError(f"out must be a file path; got {out!r}", key="out")
    out = Path(out)
    if out.is_dir():
        raise VPIntegratorError(f"out {out} is a directory; give the path of the rollout file (e.g. {out / 'rollout.h5'})",
                                key="out")
    paths = (out, *(out.with_suffix(s) for s in (".csv", ".md", ".tex")))  # rollout.shard-1-of-2.csv: the dots kept
    for path in paths:
        check_not_input(path, inputs, key="out")
    return [check_output(path, kind, overwrite) for path, kind in zip(paths, ("rollout", "table", "table", "table"))]


def estimate(n_traj: int, n_states: int, dim: int, n_invariants: int, n_methods: int, chunk_steps: int,
             data_states: int, volume: bool = True) -> tuple[int, int]:
    """(memory, disk) in bytes of a comparison run of these sizes.

    Memory: everything held at once — the reference as read from the data file (n_traj × data_states ×
    dim), the time grid and map index (a few × n_states), the engine's and the metric streams' per-chunk
    buffers (n_traj × chunk × (dim + invariants + 1), a few copies each) and the HDF5 chunk caches.
    Disk, per method: states, relative error, invariants (n_traj × n_states × (dim + 1 + n_invariants))
    and the volume (log det J and its running sum per map, the map index); plus the reference and ``/t``.
    """
    f = 8
    chunk = min(int(chunk_steps), n_states)
    per_chunk = n_traj * chunk * (dim + n_invariants + 1) * f
    memory = (
        n_traj * data_states * dim * f  # the reference's file part, read whole
        + 4 * n_states * f  # /t, the time grid of the metric streams, the volume's map index
        + 8 * per_chunk  # engine stage + copies, step map output, metric streams, reference chunk
        + 2 * (3 + n_invariants) * max(1 << 16, 2 * min(n_traj, 64) * chunk * dim * f)  # HDF5 chunk caches
        + (64 << 20)  # the interpreter, torch and h5py themselves
    )
    per_method = n_traj * n_states * (dim + 1 + n_invariants) * f
    if volume:
        per_method += 2 * n_traj * n_states * f + n_states * f
    disk = n_methods * per_method + n_traj * n_states * (dim + n_invariants) * f + n_states * f
    return memory, disk


def check_fits(n_traj: int, n_states: int, system: Any, n_methods: int, data_states: int, data: Path, *,
               t_end: Any, chunk_steps: int, volume: bool, out: Path) -> None:
    """Refuse work that cannot fit in memory or on disk, before it starts, with the estimate and a way out."""
    from .. import resources
    from . import engine

    gib = resources.size_text

    memory, disk = estimate(n_traj, n_states, system.dim, len(system.invariant_names), n_methods,
                            int(chunk_steps), data_states, bool(volume))
    what = (f"t_end {t_end!r} ({n_states} states x {n_traj} trajectories x {n_methods} method(s), "
            f"dim {system.dim})")
    way_out = ("give a shorter t_end, fewer trajectories (n_traj or traj), a smaller chunk_steps, "
               "or volume = false")
    if t_end is None:
        what = f"{n_traj} trajectories x {n_states} states of {data} x {n_methods} method(s)"
    engine.check_memory(memory, what, way_out, key="t_end" if t_end is not None else "n_traj")
    free = resources.free_disk(Path(out).parent)
    if disk > free:
        raise VPIntegratorError(
            f"{what} needs about {gib(disk)} on disk for out {out}, but {gib(free)} are free "
            f"(refused before starting); {way_out}, or write out elsewhere",
            key="t_end" if t_end is not None else "out",
        )


def check_reference(ref_file: Trajectories, idx: np.ndarray, data: Path) -> None:
    """A reference with NaN/Inf is an error (naming the file, trajectory and time), not an inf in the table."""
    finite = np.isfinite(ref_file.y).all(axis=-1)  # (n_traj, n_states)
    if finite.all():
        return
    i, k = (int(v) for v in np.argwhere(~finite)[0])
    raise VPIntegratorError(
        f"{data}: the reference is not finite (NaN/Inf) in trajectory {int(idx[i])} at t = {float(ref_file.t[k]):g} "
        f"(state {k}); the data file is damaged: regenerate it with vp-gen, or leave that trajectory out (traj)"
    )


def integrates_equations(name: str) -> bool:
    """Whether the row ``name`` integrates the system's equations (classical integrators, ``exact_flow``, the
    rows of ``ROW_KINDS`` that are not fitted to data); other names have their own rules ("unknown integrator")."""
    from ..integrators import list_integrators

    row = parse_row(name)
    return (name == "exact_flow" or name in list_integrators()) if row is None else not row[0].fitted


def check_without_system(system: Any, names: list[str], n_steps: int, n_file: int, t0: float, dt: float, *,
                         heldout: Any, t_end: Any, init: str) -> None:
    """Refuse, in one line each and before anything runs, what a run on trajectories without a system
    (``vpintegrator.systems.unknown.UnknownSystem``) cannot do: rows that integrate the system's equations
    (classical integrators, ``exact_flow``, identification rows ``METHOD+INTEGRATOR``; all of them named in
    one line), new held-out conditions, a horizon beyond the file (the reference is the file itself) and a
    first window made by an integrator. Rows that learn their equations from the data are not refused here."""
    names = [n for n in names if integrates_equations(n)]
    if names:
        raise VPIntegratorError(
            f"integrators: {', '.join(names)}: {system.source} names no system (a file of /t and /y only), so no row "
            "can integrate its equations (no oracle, exact_flow or classical rows); give models only (their errors "
            "are against the file's own trajectories), or write the file with vp-gen", key="integrators")
    if heldout:
        raise VPIntegratorError(
            f"heldout: {system.source} names no system, so new initial conditions cannot be integrated; roll out "
            "trajectories of the file itself (a trained model's test split by default, or traj)", key="heldout")
    if n_steps + 1 > n_file:
        raise VPIntegratorError(
            f"t_end: {t_end!r} is beyond the last time {t0 + (n_file - 1) * dt:g} of {system.source}, which names "
            f"no system: the reference (the file itself) cannot be continued past it; give t_end <= "
            f"{t0 + (n_file - 1) * dt:g}", key="t_end")
    if init != "reference":
        raise VPIntegratorError(
            f"init: {init!r} integrates the first window, but {system.source} names no system; use init = "
            "'reference' (the file's own first states)", key="init")
