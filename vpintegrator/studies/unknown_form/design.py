"""The unknown-form study's design: what it runs (systems, approaches, training recipes, the stop rule), its
options and the typed plan built from them once (``build_plan``), and the planned CPU before it runs (``plan``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...config import key
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, StudyPlan, name_list, number_list
from ..runner import StudyError

#: the data step (the issue's probe)
H = 0.2
#: the horizons of the error tables (the held-out exact flow runs to the last)
HORIZONS = (1.0, 2.0, 5.0, 10.0)
#: the issue's targets: the best flow map's median at t = 10 on rigid_body_exp, its Casimir drift, and the
#: Casimir drift of lphnn + implicit midpoint over CASIMIR_STEPS steps
TARGETS: dict[str, Any] = {"t": 10.0, "error": 1e-4, "casimir": 1e-12, "seeds_needed": 4}
CASIMIR_STEPS = 10_000
#: study system -> the vp-gen spec of its data, its structure measure, its class
SYSTEMS: dict[str, dict[str, str]] = {
    "rigid_body_exp": {"spec": "rigid_body_exp", "structure": "casimir", "form": "Lie–Poisson, exp term in H: "
                       "outside every library"},
    "coupled_oscillator": {"spec": "coupled_oscillator_box", "structure": "energy", "form": "canonical, sigmoid "
                           "coupling: outside the polynomial library"},
    "rigid_body": {"spec": "rigid_body", "structure": "casimir", "form": "Lie–Poisson, quadratic H: inside "
                   "SINDy's polynomial library (the control)"},
}
#: learned approach -> (registered model, optimizer, rollout methods (None: a flow map), vp-train --set entries
#: of every sweep point; an entry "optimizer" replaces the approach's for that point, an entry "warm_start" (the
#: Adam phase's own --set entries) makes the point two runs: Adam for WARM_FRACTION of the budget, then the
#: approach's optimizer from Adam's best.pt (``init_from``) for the rest)
LM: dict[str, Any] = {"lm_windows": 1024, "lm_resample_every": 10, "lm_iters_per_epoch": 10, "lm_lambda": 1e-3,
      "batch_size": 16384}
#: LM with check windows (a step is accepted only if it lowers the loss on 512 other windows too): the recipe
#: of the learned vector fields (docs/vector_fields.md: without them a step blew the field up)
LM_CHECK: dict[str, Any] = {**LM, "lm_iters_per_epoch": 5, "lm_check_windows": 512}
#: Adam at a constant rate: a CPU budget sets no epoch count for a decaying schedule to end at
ADAM: dict[str, Any] = {"batch_size": 128, "lr": 3e-3, "scheduler": "constant"}
#: the share of a two-phase point's budget that its Adam warm start gets
WARM_FRACTION = 0.4
GL4 = "gauss_legendre4"
RECIPES: dict[str, tuple[str, str, tuple[str, ...] | None, list[dict[str, Any]]]] = {
    # the probe's flow map: 8 layers of width 4 (128 parameters) and 28 (448: deep-narrow beats 16 x 8 at equal
    # parameters)
    "lpnet": ("lpnet", "lm", None, [{**LM, "model.n_layers": 8, "model.width": 4},
                                    {**LM, "model.n_layers": 28, "model.width": 4}]),
    "g_sympnet": ("g_sympnet", "lm", None, [{**LM, "init_scale": 0.3, "model.upscaling_dimension": 16,
                                             "model.n_layers": 8},
                                            {**LM, "init_scale": 0.3, "model.upscaling_dimension": 8,
                                             "model.n_layers": 4}]),
    # trained THROUGH Gauss–Legendre 4 and rolled out by it (a field learns its training method's modified
    # equations: through implicit midpoint it plateaus 80x worse on rigid_body_exp); LM from scratch with check
    # windows; the sweep is over the width. Its second rollout, implicit midpoint, is the Casimir check only
    # (the method keeps ‖z‖² exactly whatever the field; a cheaper method than the training one, so its error is
    # not the field's)
    "lphnn": ("lphnn", "lm", (GL4, "implicit_midpoint"),
              [{**LM_CHECK, "model.method": GL4, "model.width": 16, "model.depth": 2},
               {**LM_CHECK, "model.method": GL4, "model.width": 32, "model.depth": 2}]),
    # LM from scratch stalls near the identity's loss for hnn and node: Adam warm start, then LM with check
    # windows (10-100x better than Adam alone at the same budget)
    "hnn": ("hnn", "lm", (GL4,), [{**LM_CHECK, "model.method": GL4, "model.width": w, "model.depth": 2,
                                   "warm_start": {**ADAM, "optimizer": "adam"}} for w in (16, 32)]),
    "node": ("node", "lm", ("rk4",), [{**LM_CHECK, "model.method": "rk4", "model.width": w, "model.depth": 2,
                                       "warm_start": {**ADAM, "optimizer": "adam"}} for w in (16, 32)]),
}
#: vp-train settings of every run: 90 training / 10 validation trajectories (no test split: the held-out file
#: is the test set), best.pt and the sweep's choice by the validation trajectories' free rollout error at t = 10
#: (with this monitor the LM-trained lpnet reaches the target on rigid_body_exp)
VALIDATION: dict[str, Any] = {"val_fraction": 0.1, "test_fraction": 0.0, "monitor": "val_rollout",
                              "val_rollout_steps": 50, "val_rollout_error": "final", "patience": 0}
#: per system: the learned approaches
APPROACHES: dict[str, tuple[str, ...]] = {
    "rigid_body_exp": ("lpnet", "lphnn", "node"),
    "coupled_oscillator": ("g_sympnet", "hnn", "node"),
    "rigid_body": ("lpnet", "lphnn", "node"),
}
#: the fitted and classical rows of every system
ORACLE = "gauss_legendre4"
FLOW_MAPS = ("lpnet", "g_sympnet")
#: default and --quick sizes
#: (the default's plan, ``plan``: 180 training runs, each to its plateau, about 3.1 h on 2 free cores, or x 50 CPU s
#: with --budget cpu, about 1.6 h; --quick: 9 runs x 10 s)
DEFAULTS: dict[str, Any] = {"n_train": 100, "n_test": 100, "budget_seconds": 50.0, "sweep": 2, "noise": [0.0, 1e-3]}
QUICK: dict[str, Any] = {"n_train": 100, "n_test": 20, "budget_seconds": 10.0, "sweep": 1, "noise": [0.0]}


def phases(run: Path, approach: str, point: int) -> list[tuple[Path, dict[str, Any], float]]:
    """The runs of one sweep point: ``[(run dir, its --set entries, its share of the budget)]``; one run, or
    with a ``warm_start`` entry two: Adam in ``RUN_adam`` (WARM_FRACTION of the budget, the point's model
    settings), then the approach's optimizer in ``RUN`` from Adam's ``best.pt``."""
    settings = dict(RECIPES[approach][3][point])
    warm = settings.pop("warm_start", None)
    if warm is None:
        return [(run, settings, 1.0)]
    first = run.with_name(run.name + "_adam")
    model = {k: v for k, v in settings.items() if k.startswith("model.")}
    return [(first, {**model, **warm}, WARM_FRACTION),
            (run, {**settings, "init_from": str(first / "best.pt")}, 1.0 - WARM_FRACTION)]


@dataclass(frozen=True)
class StopRule:
    """What stops each training run of the study: ``budget`` ``"plateau"`` (the default: the validation plateau,
    ``patience`` epochs without a ``PLATEAU_REL_DELTA`` relative fall of the monitored score, or ``max_steps``
    optimiser steps by optimiser, ``MAX_STEPS``: rules no load on the machine moves), ``"cpu"`` (the
    ``budget_seconds`` CPU budget, as the shipped results were made) or ``"wall"``; a wall ceiling of
    ``ceiling`` times the budget seconds (``PLATEAU_WALL_FACTOR`` times that with the plateau rule) stays a
    safety net. Each run's ``summary.json`` records
    which stopped it (``stopped``, ``stop_clock``) and its CPU seconds."""

    budget: str = "plateau"
    patience: int = 10
    max_steps: dict[str, int] | None = None

    def flags(self, optimizer: str, seconds: float, ceiling: float) -> list[str]:
        """``vp-train --set`` entries of one phase (``optimizer``) with ``seconds`` of budget."""
        from ..runner import PLATEAU_REL_DELTA, PLATEAU_WALL_FACTOR

        if self.budget == "wall":
            return ["--set", f"time_limit={seconds:g}"]
        if self.budget == "cpu":
            return ["--set", f"cpu_time_limit={seconds:g}", "--set", f"time_limit={seconds * ceiling:g}"]
        steps = (self.max_steps or MAX_STEPS)[optimizer if optimizer in (self.max_steps or MAX_STEPS) else "lm"]
        return ["--set", f"patience={self.patience}", "--set", f"min_rel_delta={PLATEAU_REL_DELTA:g}",
                "--set", f"max_steps={steps}", "--set", f"time_limit={PLATEAU_WALL_FACTOR * seconds * ceiling:g}"]

    def describe(self) -> str:
        """The rule in one line (the tables print it)."""
        if self.budget != "plateau":
            return f"a {self.budget} budget"
        caps = ", ".join(f"{n} {opt.upper() if opt == 'lm' else opt.capitalize()} steps"
                         for opt, n in (self.max_steps or MAX_STEPS).items())
        return (f"the validation plateau: patience {self.patience} epochs without a 1 percent fall of the monitored "
                f"score, or a cap of {caps}")


#: the step caps of the plateau rule, by optimiser (default and --quick): Levenberg–Marquardt iterations, Adam
#: batches (a warm start)
MAX_STEPS: dict[str, int] = {"lm": 1000, "adam": 10000}
MAX_STEPS_QUICK: dict[str, int] = {"lm": 100, "adam": 2000}


# --------------------------------------------------------------------------- the study


#: process CPU seconds, rounded up from what --quick measured on this 2-core machine (docs/unknown_form.md): of
#: one vp-train run beyond its budget (interpreter, torch and numba start-up, data, checkpoints: about 2), of one
#: (system, σ, seed) evaluation (every row's rollouts, the SINDy selection, the costs, the Casimir check) and of
#: one system's data files (coupled_oscillator's about 30, the rigid bodies' about 1)
STARTUP_CPU = 3.0
EVAL_CPU = 20.0
DATA_CPU = 15.0
#: CPU seconds of one training (a sweep point, both phases of a warm-started one) under the default plateau
#: rule (patience 10, ``MAX_STEPS``), by system and approach, one figure per sweep point: the mean over σ and
#: seeds of what the default size measured (``PLATEAU_CPU_SOURCE``). A plateau run takes what its plateau takes,
#: so ``plan`` prices such runs with these; thread CPU moves up to ~2x with load on a shared machine, so a guide
PLATEAU_CPU: dict[str, dict[str, tuple[float, ...]]] = {
    "rigid_body_exp": {"lpnet": (12.0, 53.0), "lphnn": (118.0, 268.0), "node": (18.0, 54.0)},
    "coupled_oscillator": {"g_sympnet": (22.0, 4.0), "hnn": (266.0, 544.0), "node": (22.0, 78.0)},
    "rigid_body": {"lpnet": (21.0, 79.0), "lphnn": (131.0, 260.0), "node": (15.0, 42.0)},
}
#: where ``PLATEAU_CPU`` was measured (the plan line names it)
PLATEAU_CPU_SOURCE = "the default size's seeds 0,1,2,3,4, 2026-11-28"


def plan(systems: Sequence[str], seeds: Sequence[int], noises: Sequence[float], budget: float, sweep: int,
         jobs: int = 2, rule: StopRule | None = None) -> dict[str, Any]:
    """The study's planned CPU before it runs: ``cells`` (seed, system, σ), ``trainings`` (sweep points),
    ``processes`` (vp-train runs: a warm-started point is two), ``training_cpu`` = the trainings' CPU +
    processes · STARTUP_CPU, ``evaluation_cpu`` = cells · EVAL_CPU, ``data_cpu``, ``total_cpu`` and ``wall``
    (seconds on ``jobs`` free cores: the trainings of a cell run ``jobs`` at a time, so a cell takes at least its
    longest training; its evaluation and the data run on one).

    A training is priced at ``budget`` CPU seconds, except under ``rule``'s default plateau rule (patience 10,
    ``MAX_STEPS``), where it takes what its plateau takes: there it is priced from ``PLATEAU_CPU``, and
    ``priced`` says which (``"budget"`` or ``"plateau"``)."""
    measured = (rule is not None and rule.budget == "plateau" and rule.patience == StopRule.patience
                and (rule.max_steps or MAX_STEPS) == MAX_STEPS)
    trainings = processes = 0
    cell_cpu: dict[str, float] = {}
    cell_wall: dict[str, float] = {}
    for system in systems:
        cpus = []
        for approach in APPROACHES[system]:
            for p in range(min(sweep, len(RECIPES[approach][3]))):
                trainings += 1
                runs = len(phases(Path("run"), approach, p))
                processes += runs
                cpus.append((PLATEAU_CPU[system][approach][p] if measured else budget) + runs * STARTUP_CPU)
        cell_cpu[system] = sum(cpus)
        cell_wall[system] = max(sum(cpus) / max(1, min(jobs, 2)), max(cpus, default=0.0))
    per = len(seeds) * len(noises)
    training = per * sum(cell_cpu.values())
    evaluation = per * len(systems) * EVAL_CPU
    data = len(systems) * DATA_CPU
    return {"cells": per * len(systems), "trainings": per * trainings, "processes": per * processes,
            "budget": float(budget), "priced": "plateau" if measured else "budget", "training_cpu": training,
            "evaluation_cpu": evaluation, "data_cpu": data, "total_cpu": training + evaluation + data,
            "wall": per * sum(cell_wall.values()) + evaluation + data}


def plan_line(p: dict[str, Any]) -> str:
    """``plan``'s numbers in one line."""
    each = (f"at their plateau (CPU per run as measured by {PLATEAU_CPU_SOURCE}, a guide)" if p.get("priced") == "plateau"
            else f"x {p['budget']:g} CPU s")
    return (f"unknown_form plan: {p['cells']} (seed, system, σ) cells, {p['trainings']} training runs {each} "
            f"({p['processes']} vp-train processes, ~{STARTUP_CPU:g} s start-up each) = "
            f"{p['training_cpu']:.0f} CPU s, evaluation ~{p['evaluation_cpu']:.0f}, data ~{p['data_cpu']:.0f}: "
            f"total ~{p['total_cpu']:.0f} CPU s ({p['total_cpu'] / 3600:.2f} h), ~{p['wall'] / 3600:.2f} h of wall "
            f"time on 2 free cores")


# --------------------------------------------------------------------------- command line


@dataclass
class UnknownFormOptions(StudyOptions):
    """The unknown-form study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (seed 0, σ = 0, 20 held-out conditions, 10 CPU s per training, one sweep point): the same
        code path in a few minutes.
    systems : list of str
        Comma list out of rigid_body_exp, coupled_oscillator, rigid_body (default all three).
    noise : list of float
        Observation noise values σ (default 0,0.001).
    n_train : int
        Training trajectories per system (to t = 20; default 100).
    n_test : int
        Held-out initial conditions per system (default 100).
    budget_seconds : float
        CPU seconds of every training run with --budget cpu (each sweep point, both phases of a warm-started one;
        default 50); with --budget plateau the wall ceiling is 10 times --wall-ceiling times it.
    sweep : int
        Sweep points per approach (1 or 2; default 2).
    amortise_over : float
        Rollouts of length 10 the training CPU is spread over on the amortised cost axis (default 1e5).
    figures_only : bool
        The same as --table-only: rebuild the tables and figures from OUT/unknown_form.json.
    estimate : bool
        Print the planned CPU total (``plan``: training runs x budget + start-up + evaluation + data) and stop;
        every run prints it before it starts.
    data : str
        A training file of your own (in place of the generated one) for the one system given by --systems; it
        must name that system (the held-out exact flow and the oracle row need its equations).
    """

    #: the shared key, with this study's default: each training stops at its validation plateau or step cap
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    quick: bool = key(False, type=bool)
    systems: list[str] | None = key(None, optional=True, check=name_list("systems", list(SYSTEMS)), metavar="LIST")
    noise: list[float] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(float, "noise", 0.0, "noise values >= 0"))
    n_train: int | None = key(None, optional=True, type=int, low=10)
    n_test: int | None = key(None, optional=True, type=int, low=1)
    budget_seconds: float | None = key(None, optional=True, type=float, low=0.5, open_low=False)
    sweep: int | None = key(None, optional=True, type=int, low=1, high=2)
    amortise_over: float = key(1e5, type=float, low=1.0)
    figures_only: bool = key(False, type=bool)
    data: str | None = key(None, optional=True, type=str, metavar="H5")
    estimate: bool = key(False, type=bool)


def check_data(data: Path, systems: Sequence[str]) -> None:
    """A training file given with --data: one system asked for, the file's ``system`` attribute that system's;
    else a one-line error naming --data (a ``/t`` + ``/y`` file has no system: no exact flow, no oracle)."""
    import h5py

    if len(systems) != 1:
        raise StudyError(f"--data {data}: give the one system it holds with --systems (one of {', '.join(SYSTEMS)})")
    try:
        with h5py.File(data, "r") as f:
            name = f.attrs.get("system")
    except OSError as exc:
        raise StudyError(f"--data {data}: not an HDF5 trajectory file ({exc})") from None
    if name is None:
        raise StudyError(f"--data {data}: the file names no system (only /t and /y): the study's held-out errors "
                         f"against the exact flow and its oracle row need the equations; give a vp-gen file of "
                         f"{systems[0]}, or roll the file out with vp-rollout (errors against its own held-out "
                         f"trajectories)")
    want = vp_gen_system(systems[0])
    if str(name) != want:
        raise StudyError(f"--data {data}: the file holds system {str(name)!r}, not {want!r} (--systems "
                         f"{systems[0]})")


def vp_gen_system(system: str) -> str:
    """The ``system`` attribute of the files the study's spec of ``system`` writes."""
    return {"coupled_oscillator": "coupled_oscillator"}.get(system, system)


@dataclass(frozen=True, kw_only=True)
class UnknownFormPlan(StudyPlan):
    """The study's keys resolved once (``build_plan``): the --quick sizes filled in, ``table_only`` is
    --table-only or --figures-only, ``rule`` what stops each training."""

    seeds: list[int]
    quick: bool
    systems: list[str]
    noise: list[float]
    n_train: int
    n_test: int
    budget_seconds: float
    sweep: int
    amortise_over: float
    data: str | None
    estimate: bool
    rule: StopRule


def build_plan(options: UnknownFormOptions, argv: tuple[str, ...] = ()) -> UnknownFormPlan:
    """The study's plan from its checked keys: the default or --quick sizes (``DEFAULTS``, ``QUICK``) where a
    key is not given, the stop rule's step caps (``MAX_STEPS``, ``MAX_STEPS_QUICK``, or --max-steps for every
    optimiser)."""
    o = options
    size = QUICK if o.quick else DEFAULTS

    def pick(name: str) -> Any:
        value = getattr(o, name)
        return value if value is not None else size[name]

    caps = dict(MAX_STEPS_QUICK if o.quick else MAX_STEPS)
    if o.max_steps is not None:
        caps = {opt: int(o.max_steps) for opt in caps}
    shared = StudyPlan.shared(o, argv, seeds=[0] if o.quick else [0, 1, 2, 3, 4])
    shared["table_only"] = o.table_only or o.figures_only
    return UnknownFormPlan(**shared, quick=o.quick, systems=o.systems or list(SYSTEMS), noise=pick("noise"),
                           n_train=pick("n_train"), n_test=pick("n_test"),
                           budget_seconds=float(pick("budget_seconds")), sweep=pick("sweep"),
                           amortise_over=o.amortise_over, data=o.data, estimate=o.estimate,
                           rule=StopRule(o.budget, int(o.patience), caps))
