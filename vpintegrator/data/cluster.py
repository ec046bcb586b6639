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
import uuid
from pathlib import Path
from typing import Any

from .._io import check_not_input
from .._outputs import check_output, output_lock
from ..errors import VPIntegratorError
from .generation import generate, plan_chunks
from .hdf5 import check_output_path
from .shards import shard_path, write_shard_index
from .spec import GenerationSpec, load_spec

__all__ = ["generate_on_cluster", "cluster_address", "shard_count"]


def cluster_address(scheduler: Any, n_shards: Any) -> Any:
    """The scheduler to use (``scheduler``, else ``$DASK_SCHEDULER_ADDRESS``), after the checks of the
    cluster arguments shared by ``vp-gen`` and ``vp-rollout`` (one-line errors naming ``scheduler`` or
    ``n_shards``)."""
    scheduler = scheduler if scheduler is not None else os.environ.get("DASK_SCHEDULER_ADDRESS")
    if scheduler is None:
        raise VPIntegratorError("scheduler not given and DASK_SCHEDULER_ADDRESS not set; give the address of "
                                "a dask scheduler (tcp://HOST:PORT)", key="scheduler")
    if n_shards is not None and (isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1):
        raise VPIntegratorError(f"n_shards must be an integer >= 1; got {n_shards!r}", key="n_shards")
    return scheduler


def shard_count(client: Any, n_shards: int | None, limit: int) -> int:
    """``n_shards`` (default: one per worker of the cluster), at most ``limit`` (blocks of work)."""
    if n_shards is None:
        n_shards = max(1, len(client.scheduler_info().get("workers", {})))
    return min(n_shards, limit)


def _client(scheduler: Any):
    try:
        from distributed import Client
    except ImportError:
        raise VPIntegratorError(
            "scheduler needs dask.distributed, which is not installed; pip install 'vpintegrator[dask]' "
            "(or 'dask[distributed]')", key="scheduler") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise VPIntegratorError(f"scheduler must be the address of a dask scheduler (tcp://HOST:PORT) or a "
                                f"distributed.Client; got {scheduler!r}", key="scheduler")
    try:
        return Client(scheduler, timeout="20s"), True
    except (OSError, TimeoutError) as err:
        raise VPIntegratorError(f"scheduler {scheduler}: cannot connect ({' '.join(str(err).split())}); is the "
                                "dask scheduler running there?", key="scheduler") from None


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
    n_chunks = -(-n_traj // chunk)
    client, owned = _client(scheduler)
    try:
        n_shards = shard_count(client, n_shards, n_chunks)
        shards = [(i, n_shards) for i in range(1, n_shards + 1)]
        for s in shards:
            check_output(shard_path(out, s), "trajectories", overwrite, key="out")
        with output_lock(index):
            futures = [client.submit(_shard_task, spec, str(out), s, workers, pure=False,
                                     key=f"vp-gen-{Path(out).name}-{s[0]}-of-{s[1]}-{uuid.uuid4().hex}") for s in shards]
            client.gather(futures)
            write_shard_index(index, n_shards)
    finally:
        if owned:
            client.close()
    return Path(out)
