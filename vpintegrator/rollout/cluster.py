"""``vp-rollout --scheduler ADDRESS``: the blocks of a comparison run on a ``dask.distributed`` cluster.

``rollout_on_cluster`` cuts the selected trajectories into shards (``vpintegrator.rollout.run.run_shard``),
sends one task per shard to the scheduler, each task writing its own shard file (and its table) with
[`run_rollouts`][vpintegrator.rollout.run.run_rollouts] on the worker that runs it, and, once all are done, writes the
index file at ``out`` and the whole run's table beside it (nothing else on the client), on the job runtime's
Dask executor (``vpintegrator.jobs.dask``), as ``vp-gen --scheduler`` (``vpintegrator.data.cluster``): the workers must see the data file, the models and
``out``'s folder (a shared file system), a worker that dies mid-task loses only its block (the scheduler
runs the task again elsewhere; shard files are written atomically and replaced whole), and
``dask-jobqueue`` clusters are reached by their scheduler address.

Needs the optional extra ``vpintegrator[dask]`` (``dask[distributed]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._outputs import check_output, output_lock
from ..data.rollout_shards import ROLLOUT, rollout_bounds
from ..jobs.dask import close_client, cluster_address, connect, quiet_dask_logs, shard_count, submit_shards
from ..jobs.shards import finished_shard, shard_path
from .plan import select_planned
from .preflight import check_outputs, input_files
from .report import RolloutReport
from .run import run_digest, run_shard, write_index_if_complete
from .config import RolloutConfig

__all__ = ["rollout_on_cluster"]


def _shard_task(config: RolloutConfig, shard: tuple[int, int], run_key: str | None = None) -> str:
    """One block, run on a dask worker: its shard file (replaced when a dead worker had finished it), marked
    with ``run_key`` (``run_digest``: a later run of the same configuration keeps it)."""
    return str(run_shard(config, None, overwrite=True, shard=shard, write_index=False, run_key=run_key).out)


def _finished_shard(path: Path, run_key: str, shard: tuple[int, int]) -> bool:
    """Whether ``path`` is shard ``shard`` of the run ``run_key``, complete (written atomically)."""
    return finished_shard(path, shard, {"shard_run": run_key}, ROLLOUT)


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
    outs = check_outputs(config.out, input_files(config.data, config.models, inputs), overwrite)  # the index, its table
    n_sel = int(select_planned(config).size)
    out = Path(config.out)
    with quiet_dask_logs():
        return _rollout_on_cluster(config, scheduler, n_shards, inputs, overwrite, n_sel, outs, out)


def _rollout_on_cluster(config: RolloutConfig, scheduler: Any, n_shards: int | None, inputs, overwrite: bool,
                        n_sel: int, outs: list[Path], out: Path) -> RolloutReport:
    client, owned = connect(scheduler)
    try:
        n_shards = shard_count(client, n_shards, n_sel)
        shards = [(i, n_shards) for i in range(1, n_shards + 1)]
        run_key = run_digest(config)
        done = [s for s in shards if _finished_shard(shard_path(out, s), run_key, s)]
        for s in shards:
            rollout_bounds(n_sel, s)  # shards of at least one trajectory
            path = shard_path(out, s)
            if s not in done:  # (one an earlier run of this configuration finished is kept)
                check_outputs(path, input_files(config.data, config.models, inputs), overwrite)
        with output_lock(outs[0]):
            submit_shards(client, scheduler, "vp-rollout", out, shards, done, _shard_task,
                          lambda s: (config, s, run_key),
                          lambda p: (p, p.with_suffix(".csv"), p.with_suffix(".md")))
        check_output(out, "rollout", True)
        rows, reference = write_index_if_complete(out, n_shards) or ([], "")
    finally:
        if owned:
            close_client(client)
    return RolloutReport(out=out, csv=out.with_suffix(".csv"), markdown=out.with_suffix(".md"), rows=rows,
                         reference=reference)
