"""``vp-gen --scheduler ADDRESS``: the blocks of a data set on a ``dask.distributed`` cluster.

``generate_on_cluster`` cuts the data set into shards (``vpintegrator.data.shards``), sends one
task per shard to the scheduler, each task writing its own shard file with
[`generate`][vpintegrator.data.generation.generate] on the worker that runs it, and, once all are done, writes the index
file at ``out`` (nothing else on the client). The workers must see ``out``'s folder (a shared file
system, as on a cluster; or the same machine). A worker that dies mid-task loses only its block: the
scheduler runs the task again elsewhere, the shard file is written atomically (a half-written one
never appears; the temporary file of the dead writer is removed by the next one) and replaced whole if
the dead worker had finished it, so no trajectory is lost or written twice. ``dask-jobqueue`` clusters
(Slurm, PBS, ...) are reached by their scheduler address like any other.

Needs the optional extra ``vpintegrator[dask]`` (``dask[distributed]``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .._io import check_not_input
from .._outputs import check_output, output_lock
from ..errors import VPIntegratorError
from ..jobs.dask import (close_client, cluster_address, connect, gather_or_one_line, quiet_dask_logs, shard_count,
                         submit_shards)
from ..jobs.shards import finished_shard, shard_path
from .generation import generate, plan_chunks
from .hdf5 import check_output_path
from .shards import GEN, write_shard_index
from .spec import GenerationSpec, load_spec

__all__ = ["generate_on_cluster", "cluster_address", "shard_count", "gather_or_one_line", "quiet_dask_logs", "close_client"]


def _shard_task(spec: GenerationSpec, out: str, shard: tuple[int, int], workers: int | None) -> str:
    """One block, run on a dask worker: its shard file (replaced when a dead worker had finished it)."""
    return str(generate(spec, out, shard=shard, workers=workers, overwrite=True, write_index=False))


def generate_on_cluster(
    spec: GenerationSpec | str | os.PathLike[str],
    out: str | os.PathLike[str],
    scheduler: Any = None,
    *,
    n_shards: int | None = None,
    workers: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Generate ``spec`` as ``n_shards`` shards on a dask cluster and write the index file ``out``.

    Parameters
    ----------
    spec : GenerationSpec, or a spec name / TOML path
    out : str or PathLike
        The index file; the shards go beside it (``<stem>.shard-I-of-N.h5``). The overwrite rule applies
        to it and to every shard file, on the client, before anything is sent.
    scheduler : str or distributed.Client, optional
        The scheduler's address (default: ``$DASK_SCHEDULER_ADDRESS``), or a connected client.
    n_shards : int, optional
        Number of blocks (default: one per worker of the cluster, at most one per chunk).
    workers : int, optional
        Threads each task integrates on (default: every core of the worker's machine).
    overwrite : bool, default False

    Returns
    -------
    Path
        ``out``; [`read_trajectories`][vpintegrator.data.hdf5.read_trajectories] of it equals ``generate(spec, ...)`` bit for bit.
    """
    if not isinstance(spec, GenerationSpec):
        spec = load_spec(spec)
    if out is None or not isinstance(out, (str, os.PathLike)):
        raise VPIntegratorError(f"out must be a file path (the index file; the shards go beside it); got {out!r}",
                                key="out")
    scheduler = cluster_address(scheduler, n_shards)
    check_not_input(out, [spec.source] if spec.source else [], key="out")
    check_output_path(out, key="out")
    index = check_output(out, "trajectories", overwrite)
    n_traj, chunk = plan_chunks(spec)
    with quiet_dask_logs():
        return _generate_on_cluster(spec, out, index, scheduler, n_shards, (n_traj, chunk), workers, overwrite)


def _generate_on_cluster(spec: GenerationSpec, out: Any, index: Path, scheduler: Any, n_shards: int | None,
                         plan: tuple[int, int], workers: int | None, overwrite: bool) -> Path:
    n_traj, chunk = plan
    n_chunks = -(-n_traj // chunk)
    client, owned = connect(scheduler)
    try:
        n_shards = shard_count(client, n_shards, n_chunks)
        shards = [(i, n_shards) for i in range(1, n_shards + 1)]
        expected = {**_expected_meta(spec), "shard_n_traj": n_traj, "chunk_size": chunk}
        done = [s for s in shards if _finished_shard(shard_path(out, s), expected, s)]
        for s in shards:
            if s not in done:
                check_output(shard_path(out, s), "trajectories", overwrite, key="out")
        with output_lock(index):
            submit_shards(client, scheduler, "vp-gen", Path(out), shards, done, _shard_task,
                          lambda s: (spec, str(out), s, workers))
            write_shard_index(index, n_shards)
    finally:
        if owned:
            close_client(client)
    return Path(out)


def _expected_meta(spec: GenerationSpec) -> dict[str, Any]:
    """The attributes that tell a shard of ``spec`` (computed by this version) from any other."""
    import json

    from .._version import __version__
    from ..systems import get_system, system_meta

    system = get_system(spec.system, **spec.params)
    extra: dict[str, Any] = {}
    if spec.parameters:
        from .param_dists import check_parameters

        extra["parameter_dists"] = json.dumps(check_parameters(system, spec.parameters))
    return {**system_meta(system), **extra, "spec": spec.name, "dt": spec.dt, "t_end": float(spec.t[-1]),
            "method": spec.method, "rtol": spec.rtol, "atol": spec.atol, "seed": spec.seed, "sampler": spec.sampler,
            "sampler_args": json.dumps(spec.sampler_args), "vpintegrator_version": __version__}


def _finished_shard(path: Path, expected: dict[str, Any], shard: tuple[int, int]) -> bool:
    """Whether ``path`` is shard ``shard`` of the data set ``expected`` describes, complete (shards are
    renamed into place only when complete): the same code then computes the same bits, so it is kept."""
    return finished_shard(path, shard, expected, GEN)
