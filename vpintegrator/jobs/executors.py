"""Where the blocks of a job run: inline, on threads, or on worker processes (Dask: ``vpintegrator.jobs.dask``).

- ``run_chunks``: ``task(start)`` for each chunk on ``workers`` threads (the compiled DOP853 and zlib
  release the GIL, so the threads run on separate cores), the results handed to ``sink`` on the calling
  thread in chunk order, at most ``workers + 1`` chunks in flight. Every block is computed by the same
  code on the same data as with one worker, so the output does not depend on ``workers``; one worker
  with ``run_chunks`` not called is the inline executor.
- ``worker_pool``: the one process pool (``in_processes`` and the studies' trainings run on it). Workers
  die with the process that started them (Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere a worker whose parent is gone exits at once), so a
  ``kill -9`` of the command leaves no worker holding an output's lock or training. Interrupted (Ctrl-C,
  SIGTERM to the command or to its process group), the pool stops its running tasks (a training as
  ``interrupted``) and starts none of the others.
- ``in_processes``: ``task(*args)`` for each block on worker processes (for work that holds the GIL),
  the results in order.
- ``parts_folder``: the temporary folder ``.<out>.parts-<pid>-*`` beside an output where worker
  processes write their part files, removed on leaving; ``remove_orphan_parts`` removes those of runs
  killed outright.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .._io import pid_alive
from .._signals import STOP_NOTICE, die_with_parent, in_pool_task, pool_worker
from ..errors import VPIntegratorError

__all__ = ["default_workers", "check_workers", "run_chunks", "worker_pool", "in_processes", "parts_folder",
           "remove_orphan_parts"]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: Any, key: str = "workers") -> int:
    """``workers`` as an int >= 1; None: ``default_workers``."""
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise VPIntegratorError(
            f"{key} must be an integer >= 1 (threads integrating at once; 1: one core; unset: every core, "
            f"{default_workers()} here); got {workers!r}", key=key)
    return int(workers)


def run_chunks(starts: Iterable[int], workers: int, task: Callable[[int], Any], sink: Callable[[int, Any], None]) -> None:
    """``sink(start, task(start))`` for every start, in order; ``task`` on ``workers`` threads.

    An error or interrupt cancels the chunks not yet started, waits for the running ones (a compiled
    chunk cannot be stopped half way) and propagates.
    """
    pending: deque[tuple[int, Future]] = deque()
    todo = iter(starts)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vp-gen-worker")
    try:
        for start in todo:
            pending.append((start, pool.submit(task, start)))
            if len(pending) > workers:
                break
        while pending:
            start, future = pending.popleft()
            result = future.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(task, nxt)))
            sink(start, result)
            del result
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


class _Pool(ProcessPoolExecutor):
    """``worker_pool``'s executor: each task runs through ``vpintegrator._signals.in_pool_task`` (a worker told
    to stop starts no further task), and leaving its block on an interrupt stops the workers (``stop``) and
    cancels what has not started before waiting for them."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return super().submit(in_pool_task, fn, *args, **kwargs)

    def stop(self) -> None:
        """Tell every worker to stop (``STOP_NOTICE``: one SIGTERM there, also when the signal that stopped
        this process reached the workers too): a running training stops as ``interrupted`` (``last.pt``
        saved), another task raises ``KeyboardInterrupt``, and no worker starts a further task."""
        pids: list[int] = []
        for _ in range(3):  # (the executor's own thread may be changing the table of its workers)
            with contextlib.suppress(RuntimeError):
                pids = list(getattr(self, "_processes", None) or {})
                break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, STOP_NOTICE)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if interrupted:
            self.stop()
        self.shutdown(wait=True, cancel_futures=exc_type is not None)


def worker_pool(workers: int, *, start: str | None = None, threads: int | None = None,
                initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """The one process pool of the package: ``workers`` processes that die with this one (``_die_with_parent``:
    the parent-death signal SIGKILL, so a ``kill -9`` of the command leaves no worker training or integrating),
    each with ``threads`` threads for OpenMP and torch (``_limit_threads``; None: as inherited), then running
    ``initializer(*initargs)``. ``start``: the start method, default ``_context``'s (fork where there is one);
    ``"spawn"`` for workers that run torch (a fork would not carry its threads). ``in_processes`` and the studies'
    trainings (``vpintegrator.studies.partial_observation.train_runs``: one thread each) run on it. Left on an
    interrupt, it stops the running tasks and starts no other (``_Pool``)."""
    context = _context() if start is None else multiprocessing.get_context(start)
    return _Pool(max_workers=workers, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), threads, initializer, tuple(initargs)))


def in_processes(task: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int) -> list[Any]:
    """``[task(*args) for args in calls]``, on ``workers`` processes that die with this one (``worker_pool``);
    the first error cancels the calls not yet started and propagates."""
    with worker_pool(workers) as pool:
        futures = [pool.submit(task, *args) for args in calls]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


@contextlib.contextmanager
def parts_folder(out: Path) -> Iterator[Path]:
    """A fresh folder ``.<out>.parts-<pid>-*`` beside ``out`` for worker processes' part files (those of
    runs killed outright removed first: call it holding ``out``'s lock); removed on leaving."""
    out = Path(out)
    remove_orphan_parts(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.parts-{os.getpid()}-", dir=out.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_orphan_parts(out: Path) -> list[Path]:
    """Remove the worker folders (``.<out>.parts-<pid>-*``) that runs of ``out`` killed outright left, whose
    process no longer runs (a folder of the older form ``.<out>.parts-<random>``, without a pid, too: call
    it holding ``out``'s lock, so no live writer of ``out`` has one); return what was removed."""
    out = Path(out)
    prefix = f".{out.name}.parts-"
    removed = []
    with contextlib.suppress(OSError):
        for p in out.parent.iterdir():
            if not p.name.startswith(prefix) or p.is_symlink() or not p.is_dir():
                continue
            pid_text = p.name[len(prefix):].split("-", 1)[0]
            pid = int(pid_text) if pid_text.isdigit() and "-" in p.name[len(prefix):] else None
            if pid is not None and (pid == os.getpid() or pid_alive(pid)):
                continue
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _die_with_parent(parent: int) -> None:
    """Killed when the process that started this worker dies (``vpintegrator._signals.die_with_parent``,
    SIGKILL: a worker holds nothing to clean up: a training's run directory is complete only once its
    complete.json is written); if it is already gone, exit at once."""
    die_with_parent(signal.SIGKILL, parent)


def _start_worker(parent: int, threads: int | None, initializer: Callable[..., Any] | None,
                  initargs: tuple[Any, ...]) -> None:
    """A ``worker_pool`` worker's initializer: the death signal first, the stop signals
    (``vpintegrator._signals.pool_worker``), its threads, then the caller's own."""
    _die_with_parent(parent)
    pool_worker()
    if threads is not None:
        _limit_threads(threads)
    if initializer is not None:
        initializer(*initargs)


def _limit_threads(threads: int) -> None:
    """``threads`` threads in this worker: OpenMP's (read when torch or NumPy's BLAS start) and, where torch is
    loaded already, torch's own (a CPU budget of a training is one thread's); this package never imports torch."""
    import sys

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(int(threads))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(threads))


def _context():
    """fork where there is one: the workers run NumPy, SciPy and numba only (never torch, whose threads a
    fork would not carry), start at once, and do not run the caller's script again (spawn would import its
    ``__main__``, and a script without ``if __name__ == "__main__"`` would start the run again)."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")
