"""``vp-rollout --scheduler ADDRESS``: the blocks of a comparison run on a ``dask.distributed`` cluster.

``rollout_on_cluster`` cuts the selected trajectories into shards (``vpintegrator.rollout.blocks``),
sends one task per shard to the scheduler, each task writing its own shard file (and its table) with
[`run_rollouts`][vpintegrator.rollout.compare.run_rollouts] on the worker that runs it, and, once all are done, writes the
index file at ``out`` and the whole run's table beside it (nothing else on the client). As for ``vp-gen
--scheduler`` (``vpintegrator.data.cluster``): the workers must see the data file, the models and
``out``'s folder (a shared file system), a worker that dies mid-task loses only its block (the scheduler
runs the task again elsewhere; shard files are written atomically and replaced whole), and
``dask-jobqueue`` clusters are reached by their scheduler address.

Needs the optional extra ``vpintegrator[dask]`` (``dask[distributed]``).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from .._outputs import check_output, output_lock
from ..data.cluster import _client, close_client, cluster_address, gather_or_one_line, quiet_dask_logs, shard_count
from ..data.rollout_shards import rollout_bounds
from ..data.shards import shard_path
from .blocks import _index_if_complete
from .checks import check_outputs
from .compare import RolloutReport, run_rollouts, select_planned
from .config import RolloutConfig

__all__ = ["rollout_on_cluster"]


def _shard_task(config: RolloutConfig, shard: tuple[int, int]) -> str:
    """One block, run on a dask worker: its shard file (replaced when a dead worker had finished it)."""
    return str(run_rollouts(config, shard=shard, overwrite=True, write_index=False).out)


def rollout_on_cluster(config: RolloutConfig, scheduler: Any = None, *, n_shards: int | None = None,
                       inputs=(), overwrite: bool = False) -> RolloutReport:
    """Run ``config`` as ``n_shards`` shards on a dask cluster; write the index file ``config.out`` and the
    whole run's table beside it.

    Parameters
    ----------
    config : RolloutConfig
        ``workers`` applies on each dask worker (its processes for the classical methods).
    scheduler : str or distributed.Client, optional
        The scheduler's address (default: ``$DASK_SCHEDULER_ADDRESS``), or a connected client.
    n_shards : int, optional
        Number of blocks (default: one per worker of the cluster, at most one per trajectory).
    inputs : paths, optional
        More files the run must not write over (its config file).
    overwrite : bool, default False
        The overwrite rule applies, on the client and before anything is sent, to the index, its table and
        every shard file and shard table.

    Returns
    -------
    RolloutReport
        ``out`` (the index; [`read_rollout`][vpintegrator.data.rollouts.read_rollout] of it equals the unsharded
        rollout bit for bit, the timings apart) and the whole run's table.
    """
    scheduler = cluster_address(scheduler, n_shards)
    config.validate()
    outs = check_outputs(config, inputs, overwrite)  # the index and the whole run's table
    n_sel = int(select_planned(config)[4].size)
    out = Path(config.out)
    with quiet_dask_logs():
        return _rollout_on_cluster(config, scheduler, n_shards, inputs, overwrite, n_sel, outs, out)


def _rollout_on_cluster(config: RolloutConfig, scheduler: Any, n_shards: int | None, inputs, overwrite: bool,
                        n_sel: int, outs: list[Path], out: Path) -> RolloutReport:
    client, owned = _client(scheduler)
    try:
        n_shards = shard_count(client, n_shards, n_sel)
        shards = [(i, n_shards) for i in range(1, n_shards + 1)]
        for s in shards:
            rollout_bounds(n_sel, s)  # shards of at least one trajectory
            path = shard_path(out, s)
            check_outputs(dataclasses.replace(config, out=str(path)), inputs, overwrite)
        with output_lock(outs[0]):
            futures = [client.submit(_shard_task, config, s, pure=False,
                                     key=f"vp-rollout-{out.name}-{s[0]}-of-{s[1]}-{uuid.uuid4().hex}") for s in shards]
            gather_or_one_line(client, futures, scheduler, [shard_path(out, s) for s in shards], "vp-rollout")
        check_output(out, "rollout", True)
        rows = _index_if_complete(out, n_shards)
    finally:
        if owned:
            close_client(client)
    return RolloutReport(out=out, csv=out.with_suffix(".csv"), markdown=out.with_suffix(".md"), rows=rows or [])
