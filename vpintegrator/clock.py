"""The package's one clock and its one cost meter: CPU time, which a loaded machine does not bend.

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

**The cost meter** ([`meter`][vpintegrator.clock.meter]): every equal-cost comparison the package prints
(work–precision rows, the reduction study's rows, the benchmarks) prices its rows with it, alike. Each row is
a call that produces the output the comparison scores (the same states, at the same stride, in the same space:
decoding included where the row needs it to be scored). The meter runs every call once cold (compilation,
first-call work, caches: reported apart as ``setup_seconds``), then ``repeats`` rounds in which every row runs
once in turn (interleaved, so that a slow spell of the machine hits every row alike), and prices each row at
the minimum over its rounds (the run least disturbed) on one clock. A [`Cost`][vpintegrator.clock.Cost] says
how it was taken.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, TypeVar

__all__ = ["thread_cpu", "process_cpu", "min_thread_cpu", "meter", "meter_surviving", "meter_one", "Cost", "CLOCKS", "THREAD_CPU",
           "PROCESS_CPU", "METER_RULE"]

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


#: how the meter prices a row, in one sentence (written beside every cost column it fills)
METER_RULE = ("warm: the minimum over interleaved repeats of {clock} seconds, after one cold call whose extra "
              "(compilation, first-call work) is reported apart as set-up")


@dataclass(frozen=True)
class Cost:
    """One row's price on the meter ([`meter`][vpintegrator.clock.meter]).

    Attributes
    ----------
    seconds : float
        The warm cost of one call: the minimum over ``repeats`` interleaved rounds, on ``clock``.
    setup_seconds : float
        What the first (cold) call cost beyond a warm one (compilation, first-call work, filling caches):
        ``max(first_seconds − seconds, 0)``; never part of ``seconds``.
    first_seconds : float
        The cold call's seconds.
    repeats : int
        Warm rounds taken.
    clock : str
        ``"thread_cpu"`` or ``"process_cpu"`` ([`CLOCKS`][vpintegrator.clock.CLOCKS]).
    """

    seconds: float
    setup_seconds: float
    first_seconds: float
    repeats: int
    clock: str = THREAD_CPU

    def per(self, units: float) -> float:
        """``seconds`` per unit (e.g. per unit of simulated time: ``cost.per(t_end)``)."""
        return self.seconds / float(units)

    def record(self, prefix: str = "") -> dict[str, Any]:
        """The fields as a flat record (``{prefix}seconds``, ..., ``{prefix}clock``), for a JSON row or HDF5 attributes."""
        return {f"{prefix}seconds": self.seconds, f"{prefix}setup_seconds": self.setup_seconds,
                f"{prefix}first_seconds": self.first_seconds, f"{prefix}repeats": self.repeats,
                f"{prefix}clock": self.clock}


def _reading(clock: str) -> Callable[[], float]:
    if clock not in CLOCKS:
        from .errors import VPIntegratorError

        raise VPIntegratorError(f"clock must be one of {list(CLOCKS)}; got {clock!r}", key="clock")
    return process_cpu if clock == PROCESS_CPU else thread_cpu


def _timed(call: Callable[[], object], read: Callable[[], float]) -> float:
    """Seconds of one ``call()`` on ``read``; a call that returns a float returns the seconds of the work it
    measured itself on the same clock (a rollout engine's seconds spent producing states, its set-up left out)."""
    tic = read()
    out = call()
    spent = read() - tic
    return float(out) if isinstance(out, float) else spent


#: a row's name in a comparison (any hashable: a label, an index)
K = TypeVar("K", bound=Hashable)


def meter(calls: Mapping[K, Callable[[], object]], repeats: int = 3, clock: str = THREAD_CPU) -> dict[K, Cost]:
    """Price every row of a comparison alike: ``{name: Cost}`` of the calls ``{name: call}``.

    Each ``call()`` produces one row's output once. Every call runs once cold (its cost beyond a warm call is
    ``setup_seconds``), then ``repeats`` rounds run every call once in the order given, and each row's
    ``seconds`` is its minimum over the rounds, on ``clock`` (``"thread_cpu"``: the calling thread's CPU
    seconds, the cost of batch-1 work; ``"process_cpu"``: every thread's). A call may return a float: the
    seconds of the work it measured itself on the same clock (a rollout engine's time spent producing states),
    used in place of the meter's reading around the whole call. A call that raises stops the meter with its error
    ([`meter_surviving`][vpintegrator.clock.meter_surviving] prices the others instead).
    """
    return _meter(calls, repeats, clock, keep_going=False)[0]


def meter_surviving(calls: Mapping[K, Callable[[], object]], repeats: int = 3,
                    clock: str = THREAD_CPU) -> tuple[dict[K, Cost], dict[K, Exception]]:
    """[`meter`][vpintegrator.clock.meter] of the calls whose cold call returns, and ``{name: error}`` of those
    whose cold call raised (a model whose rollout fails has no cost: it produces no output to price), left out of
    the rounds."""
    return _meter(calls, repeats, clock, keep_going=True)


def _meter(calls: Mapping[K, Callable[[], object]], repeats: int, clock: str,
           keep_going: bool) -> tuple[dict[K, Cost], dict[K, Exception]]:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        from .errors import VPIntegratorError

        raise VPIntegratorError(f"repeats must be an integer >= 1; got {repeats!r}", key="repeats")
    read = _reading(clock)
    first: dict[K, float] = {}
    failed: dict[K, Exception] = {}
    for name, call in calls.items():
        try:
            first[name] = _timed(call, read)
        except Exception as exc:
            if not keep_going:
                raise
            failed[name] = exc
    best = {name: math.inf for name in first}
    for _ in range(repeats):
        for name in first:
            best[name] = min(best[name], _timed(calls[name], read))
    return ({name: Cost(best[name], max(first[name] - best[name], 0.0), first[name], repeats, clock)
             for name in first}, failed)


def meter_one(call: Callable[[], object], repeats: int = 3, clock: str = THREAD_CPU) -> Cost:
    """[`meter`][vpintegrator.clock.meter] of one row."""
    return meter({"row": call}, repeats, clock)["row"]


def min_thread_cpu(call: Callable[[], object], repeats: int) -> float:
    """The warm ``thread_cpu`` seconds of ``call()`` on the meter (one cold call, then the minimum over
    ``repeats`` runs): ``meter_one(call, repeats).seconds``."""
    return meter_one(call, max(1, int(repeats))).seconds
