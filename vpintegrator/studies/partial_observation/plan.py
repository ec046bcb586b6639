"""The partial-observation study's options and its plan: the options resolved once (``build_plan``) into the
frozen ``PartialObservationPlan`` every other module reads."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...config import key
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, name_list, number_list
from ..runner import StudyError
from ..step_budget import VALVE_FACTOR, StepBudget, nearest_cost, step_budget, stop_keys
from .design import APPROACHES, DEFAULTS, FULL_STATE, H, QUICK, STEP_COSTS, STEPS_PER_EPOCH, SYSTEMS, windows_of


@dataclass
class PartialObservationOptions(StudyOptions):
    """The partial-observation study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (seeds 0,1; T in 1,4; vpt, vpt_mix, delay_mlp, delay_mlp2, delay_vpff, fullstate; 60 training and 30
        held-out trajectories; 10 CPU s per training run): the same code path in under ten minutes.
    systems : list of str
        Comma list out of coupled_oscillator, rigid_body, toda (default coupled_oscillator,rigid_body; --quick
        all three; toda: the Toda lattice of 50 sites observed in 4 PSD coordinates, its 11 training and 10
        held-out conditions fixed by its specs, no ``fullstate`` row; at the default size its 135 training runs
        took 2 h 4 min of training CPU, 73 min on 2 cores, re-made on 2026-11-28).
    windows : list of int
        The window lengths T (default 1,2,4,8).
    approaches : list of str
        Comma list out of vpt, vpt_mix, st, sympt, delay_mlp, delay_mlp2, delay_vpff, fullstate, gru, lru (default
        all but the recurrent gru and lru, which the shipped results were made without: add them by naming them,
        e.g. --set approaches=gru,lru,delay_mlp2, or approaches in the plan file; trained and scored as the other
        learned rows).
    n_train : int
        Training trajectories per system (to t_train; default 200).
    n_test : int
        Held-out initial conditions per system (default 100).
    t_train : float
        The training trajectories' horizon (default 20).
    budget_seconds : float
        The CPU seconds every training run may cost on its way to the plateau (default 30: the default size's 280
        training runs took 3 h 45 min of training CPU in all, re-made on 2026-11-28, so about 2 hours on 2 cores
        with ``--jobs 2``). With ``--budget plateau`` (the default) they become a step budget per run, whole
        epochs of its measured cost (``STEP_COSTS``; ``--max-steps`` gives the steps instead), the same on any
        machine under any load; with ``--budget cpu`` they are process CPU seconds, with a wall ceiling of
        ``--wall-ceiling`` times them.
    patience : int
        Epochs (of 10 Levenberg–Marquardt iterations) without a better validation score that count as the plateau
        (default 20).
    """

    quick: bool = key(False, type=bool)
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    systems: list[str] | None = key(None, optional=True, check=name_list("systems", list(SYSTEMS)), metavar="LIST")
    windows: list[int] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(int, "windows", 1, "window lengths >= 1"))
    approaches: list[str] | None = key(None, optional=True, check=name_list("approaches", list(APPROACHES)),
                                       metavar="LIST")
    n_train: int | None = key(None, optional=True, type=int, low=5)
    n_test: int | None = key(None, optional=True, type=int, low=1)
    t_train: float | None = key(None, optional=True, type=float, low=1.0)
    budget_seconds: float | None = key(None, optional=True, type=float, low=0.5)
    patience: int | None = key(None, optional=True, type=int, low=1)  # type: ignore[assignment]


@dataclass(frozen=True)
class PartialObservationPlan:
    """The study's options resolved once (``build_plan``): what every function below reads.

    Attributes
    ----------
    out : Path
    table_only, overwrite : bool
    systems, approaches : tuple of str
    seeds, windows : tuple of int
    n_train, n_test, patience : int
    jobs : int
        Training processes at a time (``--jobs``; ``train_runs``).
    t_train, budget_seconds : float
    command : str
        The command line, recorded in the JSON.
    budget : str
        What stops a training (``--budget``: ``plateau``, the default: its plateau or its step budget, with a
        safety valve; ``cpu``; ``wall``; ``vpintegrator.studies.step_budget``).
    wall_ceiling : float
        ``--wall-ceiling``: the wall limit as a multiple of the CPU one.
    max_steps : int or None
        ``--max-steps``: every run's step budget (None: each run's from ``STEP_COSTS``).
    results : Path or None
        With ``table_only``: the results file to draw the tables from (``--results``: a shipped
        ``docs/data/partial_observation/*.json``) into a new OUT (``redraw_from``: ``OUT/results.md``,
        ``OUT/results.json`` and the plateau figure) instead of OUT's own JSON.
    """

    out: Path
    table_only: bool
    overwrite: bool
    systems: tuple[str, ...]
    approaches: tuple[str, ...]
    seeds: tuple[int, ...]
    windows: tuple[int, ...]
    n_train: int
    n_test: int
    t_train: float
    budget_seconds: float
    patience: int
    jobs: int
    command: str
    results: Path | None = None
    budget: str = "plateau"
    wall_ceiling: float = 4.0
    max_steps: int | None = None

    def training_runs(self, system: str | None = None) -> list[tuple[str, int]]:
        """The (approach, T) pairs trained per system and seed (``windows_of``); for ``system``, without the
        approaches it leaves out (its ``exclude``: the Toda lattice has no ``fullstate``)."""
        skip = SYSTEMS[system].get("exclude", ()) if system is not None else ()
        return [(approach, T) for approach in self.approaches if approach not in skip
                for T in windows_of(approach, self.windows)]

    def step_budget(self, system: str, approach: str, T: int) -> StepBudget | None:
        """The step budget of one training under ``--budget plateau`` (None under another budget):
        ``budget_seconds`` as whole epochs of its ``STEP_COSTS`` (a window never measured: the nearest shorter
        one's cost scaled by the windows' ratio), or ``--max-steps``."""
        if self.budget != "plateau":
            return None
        cost, source = nearest_cost(STEP_COSTS, (system, approach), int(T))
        return step_budget(self.budget_seconds, cost, STEPS_PER_EPOCH, given=self.max_steps, source=source,
                           what=f"{approach} T = {T} on {system}")

    def estimated_costs(self) -> list[str]:
        """The trainings whose step budget rests on a cost never measured (``nearest_cost``'s guess from a shorter
        window), one ``"APPROACH T = k on SYSTEM (extrapolated from T = w)"`` each: the guess can be far off (the
        default size's ``delay_vpff`` at T = 8 cost about 16 times the guess per epoch), so such a run may end on
        the safety valve, which its row then shows."""
        out = []
        for system in self.systems:
            for approach, T in self.training_runs(system):
                budget = self.step_budget(system, approach, T)
                if budget is not None and budget.source.startswith("extrapolated"):
                    out.append(f"{approach} T = {T} on {system} ({budget.source})")
        return out

    def stop_keys(self, system: str, approach: str, T: int) -> dict[str, Any]:
        """The ``fit`` keys that stop that training (``vpintegrator.studies.step_budget.stop_keys``)."""
        return stop_keys(self.budget, self.budget_seconds, self.wall_ceiling, self.step_budget(system, approach, T))

    def budget_line(self) -> str:
        """How the trainings are stopped, in one sentence (the tables and the JSON say it)."""
        if self.budget == "plateau":
            steps = (f"{self.max_steps} optimiser steps" if self.max_steps is not None else
                     f"a step budget of {self.budget_seconds:g} CPU s in whole epochs of each run's measured cost "
                     f"(STEP_COSTS)")
            return (f"each training stops at its plateau ({self.patience} epochs without improvement) or after "
                    f"{steps}; a limit of {VALVE_FACTOR * self.budget_seconds:g} CPU s of its own is a safety valve "
                    "only (a run it stops is cut)")
        if self.budget == "cpu":
            return (f"each training stops at its plateau ({self.patience} epochs) or after {self.budget_seconds:g} "
                    f"process CPU s (wall ceiling {self.wall_ceiling:g} x)")
        return f"each training stops at its plateau ({self.patience} epochs) or after {self.budget_seconds:g} wall s"


def build_plan(options: PartialObservationOptions, argv: Sequence[str] = ()) -> PartialObservationPlan:
    """The plan of the checked ``options``: the size's values (``QUICK`` or ``DEFAULTS``) where an option is not
    given; ``argv``, the command line as given, is recorded in the JSON."""
    a = options
    if a.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the partial_observation study ships no pretrained model (its runs are "
                         "under OUT/runs)")
    if a.skip_existing:
        raise StudyError("--skip-existing: the partial_observation study always keeps the finished training runs in "
                         "OUT (those with a complete.json); run the same command again to resume, without the flag")
    size = QUICK if a.quick else DEFAULTS

    def pick(name: str) -> Any:
        return getattr(a, name) if getattr(a, name, None) is not None else size[name]

    return _check_windows(PartialObservationPlan(
        out=Path(a.out), table_only=bool(a.table_only), overwrite=bool(a.overwrite),
        systems=tuple(a.systems or size["systems"]), approaches=tuple(pick("approaches")),
        seeds=tuple(int(s) for s in (a.seeds or size["seeds"])), windows=tuple(int(T) for T in pick("windows")),
        n_train=int(pick("n_train")), n_test=int(pick("n_test")), t_train=float(pick("t_train")),
        budget_seconds=float(pick("budget_seconds")), patience=int(pick("patience")), jobs=int(a.jobs),
        results=None if a.results is None else Path(a.results),
        command=" ".join(["vp-study partial_observation", *argv]) if argv else
        " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        budget=str(a.budget), wall_ceiling=float(a.wall_ceiling),
        max_steps=None if a.max_steps is None else int(a.max_steps)))


def _check_windows(plan: PartialObservationPlan) -> PartialObservationPlan:
    """``plan``, once every window it trains fits the training trajectories (to ``t_train`` at ``H``): a window of
    T states and the model's prediction window after it (T for a VPT, 1 for a delay model). Refused at plan time,
    before any data is generated, in one line naming ``--windows``."""
    if plan.table_only:
        return plan
    for system in plan.systems:  # every run's step budget known before anything runs (a config never measured: one line)
        for approach, T in plan.training_runs(system):
            plan.step_budget(system, approach, T)
    from ...models import build_model

    n_states = int(round(plan.t_train / H)) + 1
    for approach in plan.approaches:
        for T in ([] if approach in FULL_STATE else windows_of(approach, plan.windows)):
            span = T + int(getattr(build_model(**{**APPROACHES[approach], "dim": 2, "seq_len": T}), "pred_window", 1))
            if span > n_states:
                raise StudyError(f"--windows: T = {T} for {approach} needs {span} states per training window (T and "
                                 f"the {span - T} it predicts) but the training trajectories (--t-train "
                                 f"{plan.t_train:g} at h = {H:g}) have {n_states}; give shorter windows or a longer "
                                 "--t-train")
    return plan

