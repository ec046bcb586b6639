"""Training budgets in work: equal CPU cost as a number of optimiser steps that no load moves.

A study that compares trainings at equal CPU cost used to stop each one after so many process CPU seconds. CPU
time is the work done, but not exactly: the same seed, config and 10-s budget gave 168–245 optimiser steps over
four runs on a loaded machine (caches, memory bandwidth, frequency), so the rows moved with the machine, though
training itself is deterministic. Here a budget of ``seconds`` becomes a number of optimiser steps: the seconds
divided by what one epoch of that training costs, measured once on the machine that made the study's shipped
runs (``scripts/step_costs.py`` prints the tables from those runs) and recorded with every row. The same command
then trains the same steps, and writes the same rows, on any machine under any load.

What stops a training under ``budget = "plateau"`` (every study's default where this module is used): its
validation plateau (``patience`` epochs without improvement) or its step budget, whichever comes first; a CPU
limit of ``VALVE_FACTOR`` times the budget stays as a safety valve only. The valve counts the training's own CPU
seconds, never wall seconds: on a loaded machine a wall valve cut runs short of their steps (8 of 11
trainings at a load of 27), so the rows were no longer the shipped rows. A run the valve stops is **cut**: its
``stopped`` says ``time_limit`` (``stop_clock`` ``cpu``), and every results file and table says how many were cut
and by which clock (``valve_record``, ``valve_line``), never a quiet stop. ``budget = "cpu"`` (the old rule: CPU
seconds, a wall ceiling of ``wall_ceiling`` times them) and ``"wall"`` stay for whoever asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .runner import StudyError

__all__ = ["VALVE_FACTOR", "StepBudget", "step_budget", "step_budgets", "stop_keys", "nearest_cost", "valve_record",
           "valve_sum", "valve_line"]

#: the safety valve of a step budget: the training's own CPU seconds, this many times the budget's
VALVE_FACTOR = 10.0


@dataclass(frozen=True)
class StepBudget:
    """One training's step budget: ``max_steps`` optimiser steps, made of ``seconds`` of budget at ``epoch_cost``
    CPU seconds per epoch of ``steps_per_epoch`` steps; ``source`` says where the cost came from (``"measured"``,
    ``"extrapolated from T = k"``) or ``"--max-steps"`` when the steps were given."""

    max_steps: int
    seconds: float
    epoch_cost: float | None
    steps_per_epoch: int
    source: str

    def record(self) -> dict[str, Any]:
        """The budget as the results rows record it."""
        return {"max_steps": self.max_steps, "budget_seconds": self.seconds, "epoch_cost": self.epoch_cost,
                "step_cost_source": self.source}


def step_budget(seconds: float, epoch_cost: float | None, steps_per_epoch: int, *, given: int | None = None,
                source: str = "measured", what: str = "this training") -> StepBudget:
    """``seconds`` of CPU as whole epochs of ``epoch_cost`` CPU seconds (at least one), in optimiser steps;
    ``given`` (``--max-steps``) wins. No cost and no ``given``: a one-line ``StudyError`` asking for
    ``--max-steps`` (a configuration the shipped runs never trained)."""
    if given is not None:
        return StepBudget(int(given), float(seconds), epoch_cost, int(steps_per_epoch), "--max-steps")
    if epoch_cost is None or not (epoch_cost > 0 and math.isfinite(epoch_cost)):
        raise StudyError(f"{what}: no measured step cost to turn {seconds:g} CPU s into a step budget; give "
                         "--max-steps N (optimiser steps) or --budget cpu")
    epochs = max(1, int(math.floor(float(seconds) / float(epoch_cost) + 1e-9)))
    return StepBudget(epochs * int(steps_per_epoch), float(seconds), float(epoch_cost), int(steps_per_epoch), source)


def step_budgets(names: Any, seconds: float, costs: Mapping[str, float], steps_per_epoch: int,
                 given: int | None = None) -> dict[str, int]:
    """Each of ``names``' step budget (``step_budget``): ``seconds`` of CPU in whole epochs of its measured cost in
    ``costs``; ``given`` (``--max-steps``) for every one when set."""
    return {n: step_budget(seconds, costs.get(n), steps_per_epoch, given=given, what=f"the {n} training").max_steps
            for n in names}


def stop_keys(budget: str, seconds: float, wall_ceiling: float, steps: StepBudget | None) -> dict[str, Any]:
    """The ``fit`` keys that stop a training under ``budget`` (``"plateau"``: ``steps``' step budget and the
    valve, ``VALVE_FACTOR`` times ``seconds`` of the training's CPU, no wall limit; ``"cpu"``: ``seconds`` of CPU,
    a wall ceiling ``wall_ceiling`` times them; ``"wall"``: ``seconds`` of wall time). The plateau rule itself
    (``patience``) is the caller's."""
    if budget == "wall":
        return {"time_limit": float(seconds)}
    if budget == "cpu":
        return {"cpu_time_limit": float(seconds), "time_limit": float(wall_ceiling) * float(seconds)}
    if budget != "plateau" or steps is None:
        raise StudyError(f"--budget must be plateau, cpu or wall; got {budget!r}")
    return {"max_steps": int(steps.max_steps), "cpu_time_limit": VALVE_FACTOR * float(seconds)}


def valve_record(rows: Any) -> dict[str, Any]:
    """How many of the trainings ``rows`` (records with ``stopped`` and ``stop_clock``, as ``summary.json`` has
    them; rows without ``stopped`` are not trainings and not counted) a time limit cut: ``{"cut": k, "of": n,
    "by": {clock: count}}``, the clock ``cpu``, ``wall`` or ``not recorded`` (a run older than the record)."""
    trained = [r for r in rows if r.get("stopped") is not None]
    by: dict[str, int] = {}
    for r in trained:
        if r["stopped"] == "time_limit":
            clock = str(r.get("stop_clock") or "not recorded")
            by[clock] = by.get(clock, 0) + 1
    return {"cut": sum(by.values()), "of": len(trained), "by": dict(sorted(by.items()))}


def valve_sum(records: Any) -> dict[str, Any]:
    """``valve_record`` s (of a table's entries, say) added up, one record."""
    records = [r for r in records if r]
    by: dict[str, int] = {}
    for r in records:
        for clock, k in r["by"].items():
            by[clock] = by.get(clock, 0) + int(k)
    return {"cut": sum(r["cut"] for r in records), "of": sum(r["of"] for r in records), "by": dict(sorted(by.items()))}


def valve_line(record: Mapping[str, Any]) -> str:
    """``valve_record``'s count in one line: ``cut by the valve: k of n trainings (cpu k)``."""
    by = ", ".join(f"{clock} {k}" for clock, k in record["by"].items())
    return f"cut by the valve: {record['cut']} of {record['of']} trainings" + (f" ({by})" if by else "")


def nearest_cost(costs: Mapping[Any, float], key: tuple[Any, ...], size: int, *, below_only: bool = True,
                 label: str = "T") -> tuple[float | None, str]:
    """The epoch cost of ``key + (size,)`` in ``costs`` (keys: a configuration and a size last, a window length or
    a reduced dimension); where it was never measured, the cost at the nearest measured size scaled by the sizes'
    ratio: the largest size below it (``below_only``: a longer guess for a longer window), else the nearest on
    either side; (None, "") when there is none. The second item says where the cost came from (``"measured"``,
    ``"extrapolated from {label} = k"``). The linear scaling is a guess, not a law: a Levenberg–Marquardt epoch
    grows faster than the window where the parameters grow with it (the partial-observation ``delay_vpff`` at
    T = 8 cost 126 CPU s per epoch against the 7.6 s scaled from T = 4), and a run on such a guess may end on the
    safety valve (``stop_keys``)."""
    if (*key, size) in costs:
        return float(costs[(*key, size)]), "measured"
    sizes = [k[-1] for k in costs if tuple(k[:-1]) == tuple(key) and (k[-1] < size or not below_only)]
    if not sizes:
        return None, ""
    w = max(sizes) if below_only else min(sizes, key=lambda d: abs(d - size))
    return float(costs[(*key, w)]) * size / w, f"extrapolated from {label} = {w}"
