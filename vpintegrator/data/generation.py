"""Generate trajectory data sets: SciPy's DOP853 (the "exact flow", ``vpintegrator.data.flow``) or any classical
integrator.

[`generate`][vpintegrator.data.generation.generate] turns a [`GenerationSpec`][vpintegrator.data.spec.GenerationSpec] into its
plan once (``vpintegrator.data.generation_plan.build_plan``), runs the plan chunk by chunk and writes each
chunk to HDF5 as it is produced (on the compiled path the next chunk is integrated, on the main thread,
while a helper thread compresses and writes the previous one), so data sets larger than memory are fine.
With ``workers > 1`` (the default: every core) chunks are integrated, measured and compressed on that
many threads at once (``vpintegrator.jobs.executors``) and stored in order; with ``shard="I/N"`` only the I-th block of
whole chunks is computed (``vpintegrator.jobs.shards``). Neither changes a bit of any trajectory.
"""

from __future__ import annotations

import gc
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .. import resources
from ..arrays import relative_drift
from .._io import check_not_input
from .._outputs import check_output, output_lock
from .._signals import check_terminated
from ..errors import VPIntegratorError
from ..provenance import provenance_record
from ..systems import System, sample_initial_conditions, system_meta
from .trajectories import Trajectories
from .trajectory_files import TrajectoryWriter
from .h5checks import check_output_path
from ..jobs.executors import check_workers, run_chunks
from ..jobs.shards import index_when_complete, parse_shard, shard_bounds, shard_path
from ._parallel import encode_chunks
from .shards import write_shard_index
from .flow import _solve_compiled, compiled_kernel, solve_flow
from .generation_plan import GenerationPlan, build_plan
from .spec import DOP853, GenerationSpec, load_spec
from ..compiled import dop853 as _dop853

__all__ = ["estimate_resources", "generate", "plan_chunks"]

# Share of the available memory a run may plan to use (the estimate is rough: keep a generous margin).
MEMORY_FRACTION = 0.5
# Working copies of one chunk's states, (chunk, n_states, dim) float64, alive at once: solve_ivp keeps
# its dense-output samples as a list and as an array, solve_flow its output, and the invariant drift
# its temporaries; a classical integrator its output plus the drift's temporaries.
_CHUNK_COPIES = {DOP853: 5, "classical": 3}


def estimate_resources(plan: GenerationPlan, n_traj: int, in_memory: bool = False,
                       workers: int = 1) -> dict[str, int]:
    """Bytes a run of ``plan`` (``n_traj`` trajectories) needs, from the sizes alone (nothing is allocated).

    Returns ``{"memory": ..., "disk": ..., "chunk": trajectories per chunk, "chunk_bytes": one chunk's
    states}``: memory = initial conditions + time grid + the working copies of one chunk (more for
    DOP853's dense output) + the whole array when kept in memory; disk = ``n_traj * n_states * dim * 8``
    (before compression; 0 when kept in memory). ``workers`` chunks are worked on at once.
    """
    n_states, dim = plan.n_states, plan.dim
    chunk = min(plan.chunk, n_traj)
    chunk_bytes = 8 * chunk * n_states * dim
    workers = max(1, min(workers, -(-n_traj // max(chunk, 1))))  # chunks in flight: no more than there are
    copies = _CHUNK_COPIES[DOP853 if plan.method == DOP853 else "classical"]
    total = 8 * n_traj * n_states * dim
    memory = 8 * n_traj * dim + 16 * n_states + workers * copies * chunk_bytes + (total if in_memory else 0)
    return {"memory": memory, "disk": 0 if in_memory else total, "chunk": chunk, "chunk_bytes": chunk_bytes}


def _check_resources(plan: GenerationPlan, n_traj: int, out, folder, workers: int = 1,
                     n_out: int | None = None) -> int:
    """Refuse a run that cannot fit in memory or on disk, before anything is allocated (``n_out``: the
    trajectories this run writes, a shard's, when not all); return the workers that fit (fewer than
    asked when their chunks in flight would not: ``workers`` is a speed setting, not a demand)."""
    limit = int(resources.available_memory() * MEMORY_FRACTION)
    while workers > 1 and estimate_resources(plan, n_traj, out is None, workers)["memory"] > limit:
        workers -= 1
    need = estimate_resources(plan, n_traj, in_memory=out is None, workers=workers)
    if n_out is not None:
        need["disk"] = need["disk"] * n_out // max(n_traj, 1)
    n_states, dim = plan.n_states, plan.dim
    if need["memory"] > limit:
        have = f"but only {resources.size_text(limit)} may be used (half of the {resources.size_text(limit / MEMORY_FRACTION)} available)"
        sizes = f"{n_traj} trajectories x {n_states} states x dim {dim} x 8 bytes"
        whole = 8 * n_traj * n_states * dim if out is None else 0
        parts = {"y0": 8 * n_traj * dim, "whole": whole, "chunk": need["memory"] - 8 * n_traj * dim - whole}
        biggest = max(parts, key=parts.get)
        if biggest == "y0":
            raise VPIntegratorError(
                f"the initial conditions of {n_traj} trajectories alone need {resources.size_text(parts['y0'])} of memory "
                f"{have}; give fewer trajectories (n_traj)",
                key="n_traj",
            )
        if biggest == "whole":
            raise VPIntegratorError(
                f"keeping {sizes} in memory needs about {resources.size_text(need['memory'])} of memory {have}; give out "
                "(a file, written chunk by chunk), fewer trajectories (n_traj) or fewer steps (a larger dt "
                "or a smaller t_end)",
                key="out",
            )
        if need["chunk"] <= 1:
            raise VPIntegratorError(
                f"one trajectory of {n_states} states needs about {resources.size_text(need['memory'])} of memory while it "
                f"is integrated, {have}; give a larger dt or a smaller t_end (or split the time range into "
                "several runs)",
                key="dt",
            )
        raise VPIntegratorError(
            f"chunks of {need['chunk']} trajectories x {n_states} states need about {resources.size_text(need['memory'])} "
            f"of memory {have}; give a smaller chunk_size, fewer steps (a larger dt or a smaller t_end) or "
            "fewer trajectories (n_traj)",
            key="chunk_size",
        )
    if out is not None and folder is not None:
        free = resources.free_disk(folder)
        if need["disk"] > free:
            raise VPIntegratorError(
                f"{n_traj} trajectories x {n_states} states x dim {dim} x 8 bytes = {resources.size_text(need['disk'])} "
                f"(before compression) would not fit on the disk of {folder} ({resources.size_text(free)} free); give "
                "fewer trajectories (n_traj), fewer steps (a larger dt or a smaller t_end), or write "
                "shards (shard I/N, one run per block) to other disks",
                key="n_traj",
            )
    return workers



def _relative_drift(system: System, y: np.ndarray) -> dict[str, float]:
    """Max over trajectories and times of |I(y_t) - I(y_0)| / |I(y_0)| (absolute where I(y_0) = 0)."""
    drift = {}
    for name in system.invariant_names:
        values = system.invariant(name, y)  # (k, n_steps)
        drift[name] = float(np.max(np.abs(relative_drift(values, values[:, :1]))))
    return drift


def generate(
    spec: GenerationSpec | str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], Any] | None = None,
    *,
    overwrite: bool = False,
    workers: int | None = None,
    shard: str | tuple[int, int] | None = None,
    write_index: bool = True,
    scheduler: Any = None,
    n_shards: int | None = None,
) -> Trajectories | Path:
    """Generate the data set a spec describes.

    Initial conditions come from ``numpy.random.default_rng(spec.seed)``; trajectories are integrated
    in chunks of at most ``spec.chunk_size`` (and about 32 MiB), with [`solve_flow`][vpintegrator.data.flow.solve_flow] (``method =
    "dop853"``) or [`vpintegrator.data.integrate`][vpintegrator.data.integration.integrate], sampled at ``t = k * dt`` exactly.

    Parameters
    ----------
    spec : GenerationSpec or str
        A spec, or a spec name / TOML path for [`load_spec`][vpintegrator.data.spec.load_spec].
    out : str or PathLike, optional
        Write to this HDF5 file chunk by chunk (atomically: no partial file on error or interrupt) and
        return its path. None: keep everything in memory and return the trajectories. An existing file
        there is refused unless ``overwrite``; even then only a trajectory file is replaced
        (``vpintegrator._outputs.check_output``). The file is locked against other writers for the
        whole run (``vpintegrator._outputs.output_lock``).
    progress : callable, optional
        ``progress(n_done, n_traj)`` after sampling (``n_done = 0``) and after each chunk.
    workers : int, optional
        Chunks integrated (and compressed) at once, on as many threads; None (default): every core of the
        machine; 1: one integrating thread beside the writing one. The output is the same, bit for bit,
        whatever ``workers`` is.
    shard : "I/N" or (I, N), optional
        Compute only the I-th (1-based) of N contiguous blocks of whole chunks of the initial conditions
        (``vpintegrator.data.shards``), into ``data.shard-I-of-N.h5`` beside ``out = data.h5``; when
        the last shard is written (and ``write_index``), the index file appears at ``out``, and
        [`read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories] of it (or of the shards' list) equals the unsharded
        data set to the last bit. Without ``out``: the block's trajectories in memory.
    write_index : bool, default True
        With ``shard``: write the index at ``out`` once every shard is there (a scheduler that writes
        the index itself passes False).
    scheduler : str, distributed.Client or True, optional
        Compute every shard on a ``dask.distributed`` cluster (``vp-gen --dask-scheduler``; docs/cluster.md):
        the scheduler's address, a connected client, or True for ``$DASK_SCHEDULER_ADDRESS``. One task per
        shard writes its shard file on the worker that runs it (``workers`` threads there); the index file at
        ``out`` comes once all are done, and a shard a finished earlier run of the same data set left is kept
        (``vpintegrator.jobs.dask.run_on_cluster``). The workers must see ``out``'s folder.
    n_shards : int, optional
        With ``scheduler``: the number of blocks (default: one per worker of the cluster, at most one per chunk).

    Returns
    -------
    Trajectories or Path
        ``y`` (n_traj, n_states, dim) with metadata (system parameters as ``param_<name>``, generator,
        tolerances, seed, sampler, and ``max_rel_drift_<invariant>``), or the path written (a shard's
        file with ``shard``).
    """
    plan = build_plan(spec if isinstance(spec, GenerationSpec) else load_spec(spec))
    if scheduler is not None:
        return _on_cluster(plan, out, scheduler, n_shards, workers, overwrite, shard)
    return _run(plan, out, progress, overwrite=overwrite, workers=workers, shard=shard, write_index=write_index)


def _run(plan: GenerationPlan, out: str | os.PathLike[str] | None, progress: Callable[[int, int], Any] | None,
         *, overwrite: bool, workers: int | None, shard: str | tuple[int, int] | None,
         write_index: bool) -> Trajectories | Path:
    """[`generate`][vpintegrator.data.generation.generate] once the plan is built: the run's own arguments
    checked, the output checked and locked, the plan run."""
    workers = check_workers(workers)
    shard = parse_shard(shard)
    import logging

    logging.getLogger(__name__).debug(
        "generate %s: system %s, %s trajectories, dt %g, t_end %g, method %s, workers %s, shard %s, out %s",
        plan.name, plan.system_name, plan.n_traj, plan.dt, plan.t_end, plan.method, workers or "auto", shard,
        out)
    if out is None:
        return _generate(plan, None, progress, workers=workers, shard=shard)
    if not isinstance(out, (str, os.PathLike)):
        raise VPIntegratorError(f"out must be a file path or None; got {out!r}", key="out")
    check_not_input(out, plan.inputs, key="out")
    folder = check_output_path(out, key="out")  # the nearest existing folder: where the disk space is checked
    if shard is not None:
        index = check_output(out, "trajectories", overwrite)  # the index comes there at the end
        out = shard_path(out, shard)
    target = check_output(out, "trajectories", overwrite)
    with output_lock(target):
        check_output(out, "trajectories", overwrite)  # again under the lock: a writer we raced may have finished
        _generate(plan, target, progress, overwrite, folder, workers, shard)
    if shard is not None and write_index:
        index_when_complete(index, shard[1], "trajectories", write_shard_index)
    return Path(out)




def _on_cluster(plan: GenerationPlan, out: Any, scheduler: Any, n_shards: int | None, workers: int | None,
                overwrite: bool, shard: Any) -> Path:
    """[`generate`][vpintegrator.data.generation.generate] with ``scheduler``: the shards' jobs, handed to the
    job runtime's one cluster path (``vpintegrator.jobs.dask.run_on_cluster``)."""
    from ..jobs.dask import ShardJob, cluster_address, run_on_cluster
    from .shards import finished_gen_shard

    if shard is not None:
        raise VPIntegratorError("shard and scheduler exclude each other: the scheduler runs every shard", key="shard")
    if out is None or not isinstance(out, (str, os.PathLike)):
        raise VPIntegratorError(f"out must be a file path (the index file; the shards go beside it); got {out!r}",
                                key="out")
    scheduler = cluster_address(scheduler, n_shards)
    check_not_input(out, plan.inputs, key="out")
    check_output_path(out, key="out")
    index = check_output(out, "trajectories", overwrite)
    n_traj, chunk = plan_chunks(plan)

    def jobs(n: int) -> list[ShardJob]:
        n = min(n, -(-n_traj // chunk))  # at most one shard per chunk
        shards = []
        for s in ((i, n) for i in range(1, n + 1)):
            path = shard_path(out, s)
            if finished_gen_shard(path, plan, n_traj, s):
                shards.append(ShardJob(s, (path,)))  # (one an earlier run of this data set finished is kept)
                continue
            check_output(path, "trajectories", overwrite, key="out")
            shards.append(ShardJob(s, (path,), task=_shard_task, args=(plan, str(out), s, workers)))
        return shards

    run_on_cluster(scheduler, n_shards, "vp-gen", Path(out), index, jobs, lambda n: write_shard_index(index, n))
    return Path(out)


def _shard_task(plan: GenerationPlan, out: str, shard: tuple[int, int], workers: int | None) -> str:
    """One block, run on a dask worker: its shard file (replaced when a dead worker had finished it)."""
    return str(_run(plan, out, None, shard=shard, workers=workers, overwrite=True, write_index=False))


def plan_chunks(plan: GenerationPlan) -> tuple[int, int]:
    """``(n_traj, chunk)`` of a run of ``plan`` (the sampler is run when the spec left n_traj to it)."""
    n_traj = plan.n_traj
    if n_traj is None:
        rng = np.random.default_rng(plan.seed)
        n_traj = sample_initial_conditions(plan.system, plan.sampler, None, rng, **plan.sampler_args).shape[0]
    return int(n_traj), plan.chunk


def _generate(plan: GenerationPlan, out: Path | None, progress, overwrite: bool = False,
              folder: Path | None = None, workers: int = 1, shard: tuple[int, int] | None = None) -> Trajectories | Path:
    """[`generate`][vpintegrator.data.generation.generate] once the output is checked and locked (``folder``: the nearest existing folder of
    ``out`` before the lock was taken)."""
    where, system = plan.where, plan.system
    # refuse work that cannot fit before anything is allocated (n_traj None: the sampler decides, later)
    workers = _check_resources(plan, plan.n_traj or 1, out, folder, workers)
    rng = np.random.default_rng(plan.seed)
    try:
        y0 = sample_initial_conditions(system, plan.sampler, plan.n_traj, rng, **plan.sampler_args)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{where}: [initial_conditions] {err}") from None
    if not np.all(np.isfinite(y0)):
        i = int(np.argmin(np.all(np.isfinite(y0), axis=1)))
        raise VPIntegratorError(f"{where}: [initial_conditions] initial condition {i} is not finite: {y0[i].tolist()}")
    n_whole, dim = y0.shape
    t, kernel, chunk = plan.t, plan.kernel, plan.chunk
    n_states = t.size
    meta = _meta(plan, n_whole)
    family, params = None, None  # [parameters]: one system per trajectory (drawn on a stream of their own)
    if plan.parameters:
        from ..systems.family import systems_from_table
        from .param_dists import draw_parameters

        columns, table = draw_parameters(system, plan.parameters, n_whole, plan.seed, f"{where}: [parameters]")
        family = systems_from_table(system, columns, table)
        params = (columns, table)
        meta["parameter_dists"] = json.dumps(dict(plan.parameter_dists))
        meta["generator"] += "; each trajectory integrated alone with its own parameters (/params)"
    if shard is not None:  # the block of whole chunks: each trajectory computed as in the unsharded run
        first, last = shard_bounds(n_whole, chunk, shard)
        y0 = y0[first:last]
        if family is not None and params is not None:
            family, params = family[first:last], (params[0], params[1][first:last])
        meta.update(shard_index=shard[0], shard_count=shard[1], shard_traj_start=first, shard_traj_stop=last,
                    shard_n_traj=n_whole)
    n_traj = meta["n_traj"] = y0.shape[0]
    if plan.n_traj is None or shard is not None:
        workers = _check_resources(plan, n_whole, out, folder, workers, n_out=n_traj)
    workers = min(workers, -(-n_traj // chunk))
    if progress is not None:
        progress(0, n_traj)

    drift = {name: 0.0 for name in system.invariant_names}

    def solve(start: int) -> tuple[np.ndarray, dict[str, float]]:
        """The chunk at ``start`` and its invariants' drift (each trajectory with its own system)."""
        if family is None:
            y = _integrate_chunk(plan, system, y0[start : start + chunk], t, kernel)
            return y, _relative_drift(system, y)
        return _integrate_rows(plan, family[start : start + chunk], y0[start : start + chunk], t)

    def integrate_chunk(start: int) -> np.ndarray:
        check_terminated()
        y, chunk_drift = solve(start)
        for name, value in chunk_drift.items():
            drift[name] = max(drift[name], value)
        return y

    def run(sink: Callable[[int, np.ndarray], None]) -> None:
        for start in range(0, n_traj, chunk):
            y = integrate_chunk(start)
            sink(start, y)
            if kernel is None:
                # solve_ivp's solver is a reference cycle (solver <-> its wrapped fun) holding the stage
                # arrays of the whole chunk; free it now, not whenever the cyclic GC next runs
                del y
                gc.collect()
            if progress is not None:
                progress(min(start + chunk, n_traj), n_traj)

    def run_pipelined(sink: Callable[[int, np.ndarray], None]) -> None:
        """As run, but chunk i is written (HDF5 compression, in a helper thread) while chunk i + 1 is
        integrated (the compiled kernel releases the GIL); at most two chunks alive."""
        pending: tuple[Future, int] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vp-gen-write") as pool:
            try:
                for start in range(0, n_traj, chunk):
                    y = integrate_chunk(start)
                    if pending is not None:
                        pending[0].result()
                        if progress is not None:
                            progress(pending[1], n_traj)
                    pending = (pool.submit(sink, start, y), min(start + chunk, n_traj))
                    del y
                if pending is not None:
                    done, pending = pending, None
                    done[0].result()
                    if progress is not None:
                        progress(done[1], n_traj)
            finally:
                if pending is not None:  # an error or interrupt here: let the write finish before the file closes
                    pending[0].cancel()
                    try:
                        pending[0].result()
                    except BaseException:
                        pass

    def run_parallel(sink: Callable[[int, np.ndarray], None], writer: TrajectoryWriter | None = None) -> None:
        """As run, on ``workers`` threads; each also measures the drift and (for a file) compresses its
        chunk, so that this thread only stores bytes."""
        direct = writer.direct if writer is not None else None
        done = [0]

        def task(start: int):
            check_terminated()
            y, chunk_drift = solve(start)
            pieces = encode_chunks(y, start, n_traj, *direct) if direct is not None else None
            return y if pieces is None else None, y.shape[0], chunk_drift, pieces

        def take(start: int, result) -> None:
            y, k, chunk_drift, pieces = result
            for name, value in chunk_drift.items():
                drift[name] = max(drift[name], value)
            if pieces is None:
                sink(start, y)
            else:
                writer.write_encoded(start, k, pieces)
            if kernel is None:
                gc.collect()  # solve_ivp's reference cycles (see run)
            done[0] += k
            if progress is not None:
                progress(done[0], n_traj)

        run_chunks(range(0, n_traj, chunk), workers, task, take)

    def drift_meta() -> dict[str, float]:
        return {f"max_rel_drift_{name}": value for name, value in drift.items()}

    if out is None:
        y_all = np.empty((n_traj, n_states, dim))

        def store(start: int, y: np.ndarray) -> None:
            y_all[start : start + y.shape[0]] = y

        run_parallel(store) if workers > 1 else run(store)
        return Trajectories(y=y_all, t=t, meta={**meta, **drift_meta()}, params=None if params is None else params[1],
                            param_names=() if params is None else params[0])
    record = provenance_record(plan.inputs)  # the spec file is the input
    with TrajectoryWriter(out, n_traj, n_states, dim, t, meta, overwrite=overwrite, provenance=record,
                          params=params, compression=plan.compression) as writer:
        if workers > 1:
            run_parallel(writer.write, writer)
        else:
            (run_pipelined if kernel is not None and n_traj > chunk else run)(writer.write)
        writer.update_meta(drift_meta())
    return Path(out)


def describe_run(plan: GenerationPlan, n_traj: int, t_end: float) -> str:
    """The spec's one-line description made true of what was run (overrides included): its
    ``N initial conditions``, ``dt = ...``, ``t in [0, ...]`` and method (``DOP853``, ending the line) are
    replaced by the values used, and the method with its tolerances is named (appended when the text
    names none), e.g. ``"..., dt = 0.2, t in [0, 20], implicit_midpoint (fixed step dt)"``."""
    import re

    if plan.method == DOP853:
        method = f"DOP853 (rtol = {plan.rtol:g}, atol = {plan.atol:g})"
    else:
        method = f"{plan.method} (fixed step dt)"
    text = plan.description.strip()
    text = re.sub(r"\b\d+ ((?:random |held-out )*initial conditions)", f"{n_traj} \\1", text)
    text = re.sub(r"\bdt = [-+0-9.eE]+", f"dt = {plan.dt:g}", text)
    text = re.sub(r"\bt in \[0, [^\]]*\]", f"t in [0, {t_end:g}]", text)
    text, named = re.subn(r"\bDOP853\b(?: \([^)]*\))?", method, text)
    if not named:
        text = f"{text}, {method}" if text else f"{plan.system_name}, {n_traj} trajectories, dt = {plan.dt:g}, {method}"
    return text


def _integrate_chunk(plan: GenerationPlan, system: System, y0: np.ndarray, t: np.ndarray,
                     kernel: tuple[int, np.ndarray] | None) -> np.ndarray:
    """``y0``'s trajectories on the grid ``t`` (``plan.t``) by the plan's method, with ``system`` (the plan's, or
    one member of a parametric family) and its compiled DOP853 ``kernel`` (None: SciPy's, or a classical
    method)."""
    if plan.method == DOP853:
        if kernel is not None:
            return _solve_compiled(kernel, y0, t, plan.rtol, plan.atol)
        return solve_flow(system, y0, t, rtol=plan.rtol, atol=plan.atol, compiled=False)
    from .integration import integrate  # here: the DOP853 path does without the integrators (start-up)

    return integrate(system, y0, plan.dt, t.size - 1, method=plan.method, compiled=False).y  # the NumPy step, bit for bit


def _integrate_rows(plan: GenerationPlan, systems: list, y0: np.ndarray,
                    t: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """Trajectories one by one, each with its own system (a parametric spec), and their invariants' drift:
    each is exactly what a separate run of its system (DOP853: a per-trajectory ``solve_ivp`` up to rounding)
    gives."""
    y = np.empty((y0.shape[0], t.size, y0.shape[1]))
    drift: dict[str, float] = {}
    for i, system in enumerate(systems):
        kernel = compiled_kernel(system) if plan.method == DOP853 else None
        y[i : i + 1] = _integrate_chunk(plan, system, y0[i : i + 1], t, kernel)
        for name, value in _relative_drift(system, y[i : i + 1]).items():
            drift[name] = max(drift.get(name, 0.0), value)
    return y, drift


def _meta(plan: GenerationPlan, n_traj: int) -> dict[str, Any]:
    import scipy

    from .._version import __version__

    system = plan.system
    if plan.method == DOP853 and plan.kernel is not None:
        import numba

        generator = f"{_dop853.GENERATOR}; vpintegrator {__version__}, numba {numba.__version__}, scipy {scipy.__version__}"
    elif plan.method == DOP853:
        generator = f"scipy {scipy.__version__} solve_ivp DOP853, vectorised over <= {plan.chunk} trajectories"
    else:
        generator = f"vpintegrator {__version__} integrators.integrate({plan.method!r}), fixed step dt"
    return {
        **system_meta(system),
        "dim": system.dim,
        "dt": plan.dt,
        "t_end": plan.t_end,
        "method": plan.method,
        "rtol": plan.rtol,
        "atol": plan.atol,
        "seed": plan.seed,
        "n_traj": n_traj,
        "n_states": plan.n_states,
        "n_steps": plan.n_states - 1,
        "invariant_names": list(system.invariant_names),
        "sampler": plan.sampler,
        "sampler_args": json.dumps(dict(plan.sampler_args)),
        "spec": plan.name,
        "description": describe_run(plan, n_traj, plan.t_end),
        "chunk_size": plan.chunk,
        "generator": generator,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({"periodic": list(plan.periodic)} if any(plan.periodic) else {}),
    }
