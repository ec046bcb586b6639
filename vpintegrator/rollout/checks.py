"""Checks a comparison run makes before it starts: no output over an input, work that fits in memory
and on disk (estimated from the sizes), a finite reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import VPIntegratorError
from .config import RolloutConfig, model_entries


def _input_files(config: RolloutConfig, extra=()) -> list[Path]:
    """Every file the run reads: the data file, model checkpoints (every ``.pt`` of a run directory) and
    ``extra`` (e.g. the config file)."""
    files: list[Path] = [Path(config.data)] if isinstance(config.data, (str, Path)) else []
    for entry in model_entries(config.models):
        spec = entry[1] if isinstance(entry, (tuple, list)) and len(entry) == 2 else entry
        if not isinstance(spec, (str, Path)) or str(spec).startswith("pretrained:"):
            continue
        p = Path(spec)
        files.append(p)
        if p.is_dir():
            files += sorted(p.glob("*.pt"))
    files += [Path(e) for e in extra if e is not None]
    return files


def check_outputs(config: RolloutConfig, extra_inputs=(), overwrite: bool = False) -> list[Path]:
    """Refuse (one-line error naming the key ``out``) an output — the rollout file or its metrics table —
    that is one of the run's inputs, or an ``out`` that is a directory; before anything is read. An output
    that exists is refused unless ``overwrite``, and then replaced only if it is a rollout file (its table
    a metrics table): ``vpintegrator._outputs.check_output``. Returns the three outputs, links
    resolved."""
    from .._io import check_not_input
    from .._outputs import check_output

    if not isinstance(config.out, (str, Path)) or not str(config.out):
        raise VPIntegratorError(f"out must be a file path; got {config.out!r}", key="out")
    out = Path(config.out)
    if out.is_dir():
        raise VPIntegratorError(f"out {out} is a directory; give the path of the rollout file (e.g. {out / 'rollout.h5'})",
                                key="out")
    inputs = _input_files(config, extra_inputs)
    paths = (out, out.with_suffix(".csv"), out.with_suffix(".md"))  # rollout.shard-1-of-2.csv: the dots kept
    for path in paths:
        check_not_input(path, inputs, key="out")
    return [check_output(path, kind, overwrite) for path, kind in zip(paths, ("rollout", "table", "table"))]


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


def _check_fits(config: RolloutConfig, n_traj: int, n_states: int, system, n_methods: int, data_states: int,
                data: Path) -> None:
    """Refuse work that cannot fit in memory or on disk, before it starts, with the estimate and a way out."""
    from .. import resources
    from . import engine

    gib = resources.size_text

    memory, disk = estimate(n_traj, n_states, system.dim, len(system.invariant_names), n_methods,
                            int(config.chunk_steps), data_states, bool(config.volume))
    what = (f"t_end {config.t_end!r} ({n_states} states x {n_traj} trajectories x {n_methods} method(s), "
            f"dim {system.dim})")
    way_out = ("give a shorter t_end, fewer trajectories (n_traj or traj), a smaller chunk_steps, "
               "or volume = false")
    if config.t_end is None:
        what = f"{n_traj} trajectories x {n_states} states of {data} x {n_methods} method(s)"
    engine.check_memory(memory, what, way_out, key="t_end" if config.t_end is not None else "n_traj")
    free = resources.free_disk(Path(config.out).parent)
    if disk > free:
        raise VPIntegratorError(
            f"{what} needs about {gib(disk)} on disk for out {config.out}, but {gib(free)} are free "
            f"(refused before starting); {way_out}, or write out elsewhere",
            key="t_end" if config.t_end is not None else "out",
        )


def _check_reference(ref_file, idx: np.ndarray, data: Path) -> None:
    """A reference with NaN/Inf is an error (naming the file, trajectory and time), not an inf in the table."""
    finite = np.isfinite(ref_file.y).all(axis=-1)  # (n_traj, n_states)
    if finite.all():
        return
    i, k = (int(v) for v in np.argwhere(~finite)[0])
    raise VPIntegratorError(
        f"{data}: the reference is not finite (NaN/Inf) in trajectory {int(idx[i])} at t = {float(ref_file.t[k]):g} "
        f"(state {k}); the data file is damaged: regenerate it with vp-gen, or leave that trajectory out (traj)"
    )


def _is_parametric(data: Path) -> bool:
    """Whether the data file holds per-trajectory parameters (a ``/params`` dataset)."""
    import h5py

    try:
        with h5py.File(data, "r") as f:
            return "params" in f
    except OSError:
        return False


def check_trained_on(label: str, source: str, model, meta: dict, data: Path, allow_dt_mismatch: bool = False) -> str | None:
    """Refuse (one line naming both, key ``models``) a model trained on another system, other parameters or,
    unless ``allow_dt_mismatch``, another step than the data's (``meta``: the data file's metadata;
    ``model.trained_on``: what [`load_model`][vpintegrator.models.load_model] read from its checkpoint). Parameters
    are compared only where neither side is parametric (per-trajectory parameters). Returns a note to say
    (an allowed step mismatch), else None."""
    from ..systems.registry import system_params_from_meta

    record = getattr(model, "trained_on", None)
    source = source if str(source) != label else ""
    source = f" ({source})" if source else ""
    if not isinstance(record, dict):  # a model object, or a checkpoint of an older vpintegrator: not checked
        return None
    name, data_name = record.get("system"), meta.get("system")
    if name is not None and data_name is not None and str(name) != str(data_name):
        raise VPIntegratorError(
            f"models: {label}{source} was trained on system {name!r}, but data {data} holds {data_name!r}; "
            "roll it out on data of its own system", key="models")
    params = record.get("system_params") or {}
    if params and not record.get("parametric") and not _is_parametric(data):
        ours = system_params_from_meta(meta)
        for k, v in sorted(params.items()):
            if k not in ours:
                continue
            try:
                same = np.allclose(np.asarray(v, dtype=float), np.asarray(ours[k], dtype=float), rtol=1e-9, atol=0)
            except (TypeError, ValueError):
                same = v == ours[k]
            if not same:
                raise VPIntegratorError(
                    f"models: {label}{source} was trained on {name or 'a system'} with {k} = {v!r}, but data "
                    f"{data} has {k} = {_plain(ours[k])!r}; roll it out on data with the parameters it was "
                    "trained on", key="models")
    dt, data_dt = record.get("dt"), meta.get("dt")
    if dt is not None and data_dt is not None and not np.isclose(float(dt), float(data_dt), rtol=1e-9, atol=0):
        if not allow_dt_mismatch:
            raise VPIntegratorError(
                f"models: {label}{source} was trained at dt = {float(dt):g}, but data {data} has dt = "
                f"{float(data_dt):g}; roll it out on data with dt = {float(dt):g}, or set allow_dt_mismatch "
                "(vp-rollout --allow-dt-mismatch) to use it at this step", key="models")
        return (f"{label}: trained at dt = {float(dt):g}, rolled out at the data's dt = {float(data_dt):g} "
                "(allow_dt_mismatch)")
    return None


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value
