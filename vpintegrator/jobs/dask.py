"""The Dask executor: one task per shard on a ``dask.distributed`` cluster (``vp-gen``/``vp-rollout --scheduler``).

``run_on_cluster`` connects (or uses a given client), skips the shards a finished earlier run of the same
job left (``vpintegrator.jobs.shards.finished_shard``), sends one task per remaining shard, each writing
its own shard file on the worker that runs it, and, once all are done, removes the temporary files of
writers killed with their worker and calls the file kind's index writer. A worker that dies mid-task
loses only its block (the scheduler runs the task again elsewhere; shard files are written atomically and
replaced whole); a cluster lost during the run is one line naming how many shards were written
(``gather_or_one_line``), and the same command then computes only the missing ones.

Needs the optional extra ``vpintegrator[dask]`` (``dask[distributed]``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

from .._io import remove_orphans
from .._outputs import output_lock
from ..errors import VPIntegratorError

__all__ = ["ShardJob", "run_on_cluster", "cluster_address", "connect", "close_client", "gather_or_one_line",
           "quiet_dask_logs"]

T = TypeVar("T")

logger: logging.Logger = logging.getLogger(__name__)


def cluster_address(scheduler: Any, n_shards: Any) -> Any:
    """The scheduler to use (``scheduler``, else ``$DASK_SCHEDULER_ADDRESS``), after the checks of the
    cluster arguments shared by ``vp-gen`` and ``vp-rollout`` (one-line errors naming ``scheduler`` or
    ``n_shards``)."""
    if scheduler is None or scheduler is True:  # (True: the entry points' "on the cluster of the environment")
        scheduler = os.environ.get("DASK_SCHEDULER_ADDRESS")
    if scheduler is None:
        raise VPIntegratorError("scheduler not given and DASK_SCHEDULER_ADDRESS not set; give the address of "
                                "a dask scheduler (tcp://HOST:PORT)", key="scheduler")
    if n_shards is not None and (isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1):
        raise VPIntegratorError(f"n_shards must be an integer >= 1; got {n_shards!r}", key="n_shards")
    return scheduler


def connect(scheduler: Any) -> tuple[Any, bool]:
    """``(client, owned)``: a ``distributed.Client`` of ``scheduler`` (an address, or a client, returned as
    is with ``owned`` False); one-line errors when dask is missing or the scheduler cannot be reached."""
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


@dataclass(frozen=True)
class ShardJob:
    """One shard of a command's run for a dask worker: ``task(*args)`` writes the shard file ``files[0]`` (and
    its siblings, the rest of ``files``); ``task`` None: a shard an earlier run of the same job finished, kept."""

    shard: tuple[int, int]
    files: tuple[Path, ...]
    task: Callable[..., str] | None = None
    args: tuple = ()


def run_on_cluster(scheduler: Any, n_shards: int | None, tool: str, out: Path, lock: Path,
                   jobs: Callable[[int], Sequence[ShardJob]], finish: Callable[[int], T]) -> T:
    """The one cluster path of ``vp-gen`` and ``vp-rollout``: connect to ``scheduler`` (checked by
    ``cluster_address``), ask the command for its shards' jobs (``jobs(n)``: ``n`` is ``n_shards``, else one
    per worker of the cluster; the command may cut fewer, and applies its overwrite rule to the shards it
    computes), run every job not finished by an earlier run (a lost cluster one line), remove the temporary
    files of writers killed with their worker, and return ``finish(count)`` (the command's index), all under
    the lock of ``lock`` (the index file); the client is closed at the end unless it was given."""
    with quiet_dask_logs():
        client, owned = connect(scheduler)
        try:
            n = n_shards if n_shards is not None else max(1, len(client.scheduler_info().get("workers", {})))
            shards = list(jobs(n))
            with output_lock(lock):
                _submit(client, scheduler, tool, out, shards)
                return finish(len(shards))
        finally:
            if owned:
                close_client(client)


def _submit(client: Any, scheduler: Any, tool: str, out: Path, jobs: Sequence[ShardJob]) -> None:
    """Run every job of ``jobs`` with a task on the cluster, a lost cluster one line; then remove the
    temporary files of writers killed with their worker (of each shard file and its siblings)."""
    done = [j.shard for j in jobs if j.task is None]
    if done:
        logger.info("%s %s: shard(s) %s written by an earlier run of this job are kept; computing the %d "
                    "others", tool, out, ", ".join(str(s[0]) for s in done), len(jobs), len(jobs) - len(done))
    todo = [j for j in jobs if j.task is not None]
    futures = [client.submit(j.task, *j.args, pure=False,
                             key=f"{tool}-{Path(out).name}-{j.shard[0]}-of-{j.shard[1]}-{uuid.uuid4().hex}")
               for j in todo]
    gather_or_one_line(client, futures, scheduler, [j.files[0] for j in todo], tool)
    for j in jobs:
        for p in j.files:
            remove_orphans(p)


#: names of the errors by which a dask client learns that its scheduler or workers are gone
_LOSS = ("CommClosedError", "FutureCancelledError", "CancelledError", "KilledWorker", "TimeoutError",
         "StreamClosedError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError")


def gather_or_one_line(client: Any, futures: list[Any], scheduler: Any, files: list[Path],
                       tool: str) -> list[Any]:
    """``client.gather(futures)``; a cluster lost meanwhile (its scheduler, or the workers a block kept dying
    on) is one line saying which of ``files`` were written (they are complete: shards are written
    atomically) and that the same command computes only the missing ones. A task's own error passes."""
    try:
        return client.gather(futures)
    except VPIntegratorError:
        raise
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt) or not _is_loss(err):
            raise
        written = [p for p in files if p.is_file()]
        address = scheduler if isinstance(scheduler, str) else getattr(getattr(client, "scheduler", None), "address",
                                                                        "the scheduler")
        raise VPIntegratorError(
            f"scheduler {address}: the dask cluster was lost during the run ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200] or 'no detail'}); {len(written)} of the {len(files)} shard(s) sent "
            f"were written whole, none half: run the same {tool} command again (with a running cluster) to compute "
            "only the missing ones", key="scheduler") from None


def _is_loss(err: BaseException) -> bool:
    names = {c.__name__ for c in type(err).__mro__}
    return bool(names & set(_LOSS)) or type(err).__module__.split(".")[0] in ("distributed", "tornado")


@contextlib.contextmanager
def quiet_dask_logs() -> Iterator[None]:
    """While a client runs: dask's own log records below CRITICAL are dropped (a lost scheduler is logged by
    its client as tracebacks on stderr, besides the one-line error the run raises)."""
    with contextlib.suppress(ImportError):  # (its loggers exist once it is imported)
        import distributed  # noqa: F401
    names = ["distributed", "tornado", *(n for n in list(logging.root.manager.loggerDict)
                                         if n.startswith(("distributed.", "tornado.")))]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def close_client(client: Any) -> None:
    """Close ``client``; with its scheduler gone this may itself fail or time out: never a traceback."""
    try:
        client.close(timeout=5)
    except BaseException as err:  # noqa: BLE001 - the run's own result or error is what counts
        if isinstance(err, KeyboardInterrupt):
            raise
