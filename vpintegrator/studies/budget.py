"""What stops a study's trainings: ``Budget`` and ``budget_flags``, the ``vp-train`` flags of a budget.

Training budgets (``budget_flags``) are CPU seconds by default
(``vp-train --cpu-time-limit``; each child runs one thread, so on an idle machine a CPU second is a wall
second), with a wall-time ceiling of ``--wall-ceiling`` times the budget (``--time-limit``): a study on
a loaded machine trains each model as long as on an idle one, only later. ``--budget wall`` restores the
wall-time budget. ``--budget plateau`` stops each training by rules no load moves: its validation plateau
(``--patience`` epochs without a ``PLATEAU_REL_DELTA`` relative fall of the score) or a count of optimiser
steps (``--max-steps``), the wall ceiling kept as a safety net; the CPU seconds each run took are recorded
beside (``summary.json`` ``cpu_time``, with ``stopped`` and ``stop_clock`` saying which rule stopped it).
"""

from __future__ import annotations

from dataclasses import dataclass

#: default wall-time ceiling of a CPU-time training budget, as a multiple of the budget
WALL_CEILING = 4.0
#: the plateau rule of ``--budget plateau``: a training stops once its validation score has not fallen below
#: (1 − PLATEAU_REL_DELTA) of the score that last reset patience for ``--patience`` epochs (vp-train's
#: ``patience`` and ``min_rel_delta``)
PLATEAU_REL_DELTA = 0.01
#: the default ``--patience`` of ``--budget plateau``, in epochs
PLATEAU_PATIENCE = 10
#: ``--budget plateau``'s wall ceiling, a safety net that should never be what stops a run: this many times the
#: CPU budget's (``--wall-ceiling`` times the seconds): a run to its plateau may take several times a budget's CPU
PLATEAU_WALL_FACTOR = 10.0


@dataclass(frozen=True)
class Budget:
    """What stops a study's trainings (``--budget``, ``--wall-ceiling``, ``--patience``, ``--max-steps``)."""

    kind: str = "cpu"  # cpu, wall or plateau
    wall_ceiling: float = WALL_CEILING
    patience: int = PLATEAU_PATIENCE
    max_steps: int | None = None


def budget_flags(plan: Budget, seconds: float, wall_seconds: float | None = None,
                 max_steps: int | None = None) -> list[str]:
    """vp-train flags for a training budget of ``seconds`` (as ``plan.kind`` says: CPU or wall seconds, or
    ``plateau``); with a CPU budget the wall ceiling is ``plan.wall_ceiling`` times ``wall_seconds`` (default
    ``seconds``). ``plateau``: stop by rules no load moves, the plateau rule (``plan.patience`` epochs,
    ``PLATEAU_REL_DELTA``) and a step budget (``plan.max_steps``, else the study's ``max_steps``), a wall
    ceiling ``PLATEAU_WALL_FACTOR`` times the CPU budget's kept as a safety net; each run's ``summary.json`` records which stopped it, and its CPU seconds."""
    if plan.kind == "wall":
        return ["--time-limit", f"{seconds:g}"]
    ceiling = plan.wall_ceiling * (seconds if wall_seconds is None else wall_seconds)
    if plan.kind == "plateau":
        steps = plan.max_steps or max_steps
        return ["--set", f"patience={int(plan.patience)}",
                "--set", f"min_rel_delta={PLATEAU_REL_DELTA:g}",
                *(["--set", f"max_steps={int(steps)}"] if steps else []),
                "--time-limit", f"{PLATEAU_WALL_FACTOR * ceiling:g}"]
    return ["--cpu-time-limit", f"{seconds:g}", "--time-limit", f"{ceiling:g}"]
