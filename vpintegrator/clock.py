"""The package's one clock for cost figures: CPU time, which a loaded machine does not bend.

Every cost the package records (the engine's ``seconds``, the work–precision table's CPU seconds per unit
time, a training's ``cpu_time``, the benchmarks) is CPU time, never wall time: on a machine shared with
other work, a call that is preempted has a wall time that counts the other processes' turns (5–6× too high
at a load average of 8–10), while its CPU time is the work it did.

Two clocks, each named where it is used:

- [`thread_cpu`][vpintegrator.clock.thread_cpu] (``time.thread_time``): the calling thread's CPU seconds. The
  cost of a batch-1 rollout, a compiled kernel, one trajectory's solve: work that runs in this thread. Other
  threads of the process (a progress bar, a Dask worker, a second rollout in a thread pool) do not count.
- [`process_cpu`][vpintegrator.clock.process_cpu] (``time.process_time``): every thread of the process. The
  cost of work that torch spreads over its intra-op threads (training, large-batch device rollouts, and a
  host rollout of a torch model that torch runs with more than one thread: the step map's ``cpu_clock``
  chooses, ``vpintegrator.stepping.StepMap.cpu_clock``, so that no thread's work is left out).

``CLOCKS`` names them as the files do (``"thread_cpu"``, ``"process_cpu"``), so that a column or attribute
says which clock it holds.
"""

from __future__ import annotations

import math
import time
from typing import Callable

__all__ = ["thread_cpu", "process_cpu", "min_thread_cpu", "CLOCKS", "THREAD_CPU", "PROCESS_CPU"]

#: the names written beside a cost (an attribute ``clock``, a column's description)
THREAD_CPU = "thread_cpu"
PROCESS_CPU = "process_cpu"
CLOCKS = {THREAD_CPU: "CPU seconds of the calling thread (time.thread_time)",
          PROCESS_CPU: "CPU seconds of every thread of the process (time.process_time)"}


def thread_cpu() -> float:
    """CPU seconds of the calling thread (``time.thread_time``)."""
    return time.thread_time()


def process_cpu() -> float:
    """CPU seconds of the whole process, every thread (``time.process_time``)."""
    return time.process_time()


def min_thread_cpu(call: Callable[[], object], repeats: int) -> float:
    """The minimum ``thread_cpu`` seconds of ``call()`` over ``repeats`` runs, after one untimed run (the cost
    of a batch-1 rollout as the studies and benchmarks time it: the minimum is the run least disturbed)."""
    call()
    best = math.inf
    for _ in range(repeats):
        tic = thread_cpu()
        call()
        best = min(best, thread_cpu() - tic)
    return best
