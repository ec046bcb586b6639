"""A study's own tasks on the package's one pool of worker processes (``in_pool``)."""

from __future__ import annotations

from typing import Any, Callable, Generator, Iterable


def in_pool(fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]], jobs: int) -> Generator[Any, None, None]:
    """``fn(*task)`` of every task, in the tasks' order: one after the other in this process when ``jobs`` <= 1,
    else all submitted at once to the package's one pool (``jobs.executors.worker_pool``: ``jobs`` spawned
    processes of one thread each, which die with the study), each result yielded as soon as it and those before
    it are done, while the later ones run; an error (or the caller leaving the loop) cancels the tasks not
    started. Interrupted (Ctrl-C, SIGTERM to the study or its process group), the running tasks stop (a training
    as ``interrupted``) and none starts after: also when a training took the signal and returned
    (``vpintegrator._signals.check_terminated``). ``fn`` is a module-level function, ``tasks`` picklable."""
    from .._signals import check_terminated

    if jobs <= 1:
        for task in tasks:
            check_terminated()
            result = fn(*task)
            check_terminated()
            yield result
        return
    from ..jobs.executors import worker_pool

    with worker_pool(jobs, start="spawn", threads=1) as pool:  # spawn: torch
        futures = [pool.submit(fn, *task) for task in tasks]
        try:
            for future in futures:
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
