"""The memory study's rows, sizes and options, resolved once into a frozen ``MemoryPlan`` (``build_plan``): every
check (a window longer than the data or reaching past the first horizon, an unknown system, a bath size out of
range, a negative noise) is a one-line ``StudyError`` naming the flag, before any data is generated."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...config import key
from ..options import BUDGETS, PLATEAU_HELP, StudyOptions, name_list, number_list
from ..partial_observation import APPROACHES, RECIPE, TRAINING
from ..runner import StudyError
from ..step_budget import VALVE_FACTOR, StepBudget, step_budget, stop_keys

__all__ = ["H", "HORIZONS", "ARENAS", "FITTED", "LEARNED", "MIN_T", "ATTENTION", "WINDOW_MLPS", "LEAST_SQUARES",
           "SINDY_MAX_T", "SINDY_LIBRARIES", "ESTIMATE_CONTEXT", "HELDOUT_SEED", "NOISE_SEED", "RECIPE", "TRAINING", "STEPS_PER_EPOCH",
           "MAX_BATH", "QUICK", "DEFAULTS", "CPU_BASIS", "MemoryOptions", "MemoryPlan", "build_plan", "windows_of",
           "observe_of"]

#: the study step (data, rows and learned maps alike)
H = 0.2
#: the horizons the errors are scored at by default (``score_times``; every one past every window the plan allows: a
#: window ends before t = 10): t = 10 and 20 while a bath's particle still moves (by t = 100 it rests in a well, where
#: a predictor that knows only the well scores well), t = 100 the long horizon the rows are priced to
HORIZONS = (10.0, 20.0, 100.0)
#: arena -> its vp-gen spec, the observation, whether N applies, the known-equations / full-order rows
ARENAS: dict[str, dict[str, Any]] = {
    "coupled_oscillator": {"spec": "coupled_oscillator_box", "observe": "q", "bath": False,
                           "known": ("estimate+gauss_legendre4", "estimate+exact_flow")},
    "kac_zwanzig": {"spec": "kac_zwanzig", "observe": "q0,p0", "bath": True,
                    "known": ("gle", "bath+stormer_verlet", "bath+bath_splitting_y6")},
    "particle_chain": {"spec": "particle_chain", "observe": "q0,p0", "bath": True,
                       "known": ("bath+stormer_verlet", "bath+stormer_verlet_y6")},
}
#: the fitted rows of the ladder (``vp-rollout`` rows, fitted on the training split of the study's file)
FITTED = ("arx", "delay_dmd", "narx", "delay_sindy+rk4", "parrot")
#: the learned window models, each the [model] table ``fit`` trains (seq_len added per T): the window MLPs and the
#: VPT with position mixing as the partial-observation study's, the recurrent models at their registry defaults
LEARNED: dict[str, dict[str, Any]] = {"delay_mlp": APPROACHES["delay_mlp"], "delay_mlp2": APPROACHES["delay_mlp2"],
                                      "gru": {"name": "gru"}, "lru": {"name": "lru"},
                                      "vpt_mix": APPROACHES["vpt_mix"]}
#: approaches (fitted or learned) that need at least this window; delay SINDy is fitted up to ``SINDY_MAX_T`` (its
#: library grows as (T k)^3: 969 terms at T = 8, k = 2) on the polynomial libraries ``SINDY_LIBRARIES`` (NARX's
#: degrees; the row's default grid adds trig, exp and poly4: at T = 4 on the quick data its fit took 167 CPU s, the
#: polynomials 42 s, and the oscillator's field is polynomial)
MIN_T = {"delay_mlp2": 2}
SINDY_MAX_T = 4
SINDY_LIBRARIES = ("poly1", "poly2", "poly3")
#: the verdict's groups
ATTENTION = ("vpt_mix",)
WINDOW_MLPS = ("delay_mlp", "delay_mlp2")
LEAST_SQUARES = ("arx", "delay_dmd", "narx", "delay_sindy+rk4")
#: observed states the estimation rows read (the coupled oscillator observed in q needs 3)
ESTIMATE_CONTEXT = 3
#: the held-out conditions' seed (the training file's sampler, another stream) and the observation noise's
HELDOUT_SEED = 7919
NOISE_SEED = 4242
#: Levenberg-Marquardt iterations (optimiser steps) per epoch of ``RECIPE``
STEPS_PER_EPOCH = int(RECIPE["lm_iters_per_epoch"])
#: the basis of ``MemoryPlan.cpu_estimate``, CPU seconds (process and training workers) measured on the quick runs
#: (``cpu_parts`` of docs/data/memory/quick.json and bath_quick.json, 2 shared cores at load 5-10) and rounded up:
#: one Levenberg-Marquardt step per training trajectory (``train_step_traj``: 18 trainings x 20 steps x 40
#: trajectories took 249 CPU s, 6 x 20 x 40 took 95 s); a row's fixed work (``row``: building, its cost meter) and
#: its rollout per held-out condition and noise level (``row_test``: the estimate's least squares included); a
#: fitted row's fit per training trajectory (``fit_traj``); a bath's data per oscillator, trajectory and unit time
#: (``gen_osc_time``: 40 trajectories to t = 20 at N = 10^4 took 23 CPU s) and its per-oscillator work per training
#: trajectory a fitted row reads and per held-out condition rolled out (``bath_osc``: the full state is read, the
#: reference and the full-order rows are O(N); the rows of N = 10^4 took 44 CPU s more than those of N = 10^3)
CPU_BASIS: dict[str, float] = {"train_step_traj": 0.02, "row": 1.0, "row_test": 0.02, "fit_traj": 0.05,
                               "gen_osc_time": 4e-6, "bath_osc": 1e-5}
#: the largest bath (``vpintegrator.systems.kac_zwanzig.MAX_OSCILLATORS``)
MAX_BATH = 10_000

QUICK: dict[str, Any] = {"systems": ["coupled_oscillator", "kac_zwanzig"], "bath_sizes": [100], "seeds": [0],
                         "windows": [1, 4], "noise": [0.0, 1e-3], "n_train": 40, "n_test": 20, "t_train": 20.0,
                         "max_steps": 20, "budget_seconds": 10.0, "patience": 5, "approaches": list(LEARNED),
                         "score_times": list(HORIZONS)}
DEFAULTS: dict[str, Any] = {"systems": ["coupled_oscillator", "kac_zwanzig"], "bath_sizes": [100, 1000, 10000],
                            "seeds": [0, 1, 2, 3, 4], "windows": [1, 4], "noise": [0.0, 1e-3], "n_train": 40,
                            "n_test": 100, "t_train": 20.0, "max_steps": 30, "budget_seconds": 30.0, "patience": 20,
                            "approaches": list(LEARNED), "score_times": list(HORIZONS)}


def observe_of(arena: str, n: int | None) -> str:
    """The ``observe`` spec of a case: the arena's names, for a bath the particle's indices 0 and N + 1 (q0, p0: the
    names hold at the spec's N = 100 only where a training resolves them from the system class)."""
    return f"0,{int(n) + 1}" if ARENAS[arena]["bath"] and n is not None else str(ARENAS[arena]["observe"])


def windows_of(approach: str, windows: Sequence[int]) -> list[int]:
    """The windows of ``windows`` that ``approach`` runs at (those >= its ``MIN_T``, <= ``SINDY_MAX_T`` for delay
    SINDy)."""
    top = SINDY_MAX_T if approach.startswith("delay_sindy") else max(windows)
    return [int(T) for T in windows if MIN_T.get(approach, 1) <= int(T) <= top]


@dataclass
class MemoryOptions(StudyOptions):
    """The memory study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (seed 0; T in 1,4; 40 training and 20 held-out trajectories; the bath at N = 100; 20 optimiser
        steps per learned row): the same code path in under ten CPU minutes.
    dry_run : bool
        Print the plan's size and its CPU estimate by part (``MemoryPlan.cpu_estimate``) and run nothing.
    systems : list of str
        Comma list out of coupled_oscillator, kac_zwanzig, particle_chain (default coupled_oscillator,kac_zwanzig).
    bath_sizes : list of int
        The bath sizes N of kac_zwanzig and particle_chain, 1 ... 10000 (default 100,1000,10000; --quick 100).
    windows : list of int
        The window lengths T (default 1,4: the memoryless row and one window; the estimate over the longest
        window is the batch smoother); every window ends before t = 10.
    noise : list of float
        Observation noise sigmas on the first window every row reads (default 0,0.001, --quick too).
    score_times : list of float
        The times the errors are scored at, multiples of h = 0.2 past every window (default 10,20,100: a bath's
        particle still moves at t = 10-20 and rests in a well by t = 100); the rows roll out and are priced to the
        last.
    approaches : list of str
        Learned window models out of delay_mlp, delay_mlp2, gru, lru, vpt_mix (default all).
    n_train : int
        Training trajectories per system (default 40, --quick too).
    n_test : int
        Held-out initial conditions per system (default 100; --quick 20).
    t_train : float
        The training trajectories' horizon (default 20).
    budget_seconds : float
        With --budget plateau, the CPU seconds whose 10 times cut a training as a safety valve (its budget is
        --max-steps optimiser steps, default 30, --quick 20); with --budget cpu or wall, the budget itself.

    The default size is chosen to fit 2 CPU hours by ``MemoryPlan.cpu_estimate`` (``--dry-run`` prints it).
    """

    quick: bool = key(False, type=bool)
    dry_run: bool = key(False, type=bool, help="Print the plan's size and CPU estimate by part (plan.CPU_BASIS) and "
                        "run nothing.")
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    systems: list[str] | None = key(None, optional=True, check=name_list("systems", list(ARENAS)), metavar="LIST")
    bath_sizes: list[int] | None = key(None, optional=True, metavar="LIST",
                                       check=number_list(int, "bath_sizes", 1, "bath sizes N >= 1"))
    windows: list[int] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(int, "windows", 1, "window lengths >= 1"))
    noise: list[float] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(float, "noise", 0.0, "noise sigmas >= 0"))
    approaches: list[str] | None = key(None, optional=True, check=name_list("approaches", list(LEARNED)),
                                       metavar="LIST")
    score_times: list[float] | None = key(None, optional=True, metavar="LIST",
                                          check=number_list(float, "score_times", H, f"times >= {H:g}"))
    n_train: int | None = key(None, optional=True, type=int, low=5)
    n_test: int | None = key(None, optional=True, type=int, low=1)
    t_train: float | None = key(None, optional=True, type=float, low=1.0)
    budget_seconds: float | None = key(None, optional=True, type=float, low=0.5)
    patience: int | None = key(None, optional=True, type=int, low=1)  # type: ignore[assignment]


@dataclass(frozen=True)
class MemoryPlan:
    """The study's options resolved once: what every function of the study reads.

    ``cases()`` are the (case, arena, N) triples (a bath arena once per N: ``kac_zwanzig_N100``); ``max_steps``
    is every learned row's step budget (optimiser steps, the same for all); ``budget_seconds`` the CPU base of the
    safety valve (``VALVE_FACTOR`` times it cuts a run) under ``budget = "plateau"``.
    """

    out: Path
    table_only: bool
    overwrite: bool
    systems: tuple[str, ...]
    bath_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    windows: tuple[int, ...]
    noise: tuple[float, ...]
    approaches: tuple[str, ...]
    n_train: int
    n_test: int
    t_train: float
    max_steps: int
    budget: str
    budget_seconds: float
    wall_ceiling: float
    patience: int
    jobs: int
    command: str
    results: Path | None = None
    dry_run: bool = False
    score_times: tuple[float, ...] = HORIZONS

    def cases(self) -> list[tuple[str, str, int | None]]:
        return [(f"{s}_N{n}" if ARENAS[s]["bath"] else s, s, n if ARENAS[s]["bath"] else None)
                for s in self.systems for n in (self.bath_sizes if ARENAS[s]["bath"] else (None,))]

    def training_runs(self) -> list[tuple[str, int]]:
        """The (approach, T) pairs trained per case and seed."""
        return [(a, T) for a in self.approaches for T in windows_of(a, self.windows)]

    def stop_keys(self) -> dict[str, Any]:
        """The ``fit`` keys that stop every training (``vpintegrator.studies.step_budget.stop_keys``)."""
        steps: StepBudget | None = None
        if self.budget == "plateau":
            steps = step_budget(self.budget_seconds, None, STEPS_PER_EPOCH, given=self.max_steps)
        return stop_keys(self.budget, self.budget_seconds, self.wall_ceiling, steps)

    def budget_line(self) -> str:
        """How the trainings stop, in one sentence (the tables and the JSON say it)."""
        if self.budget == "plateau":
            return (f"every learned row trains {self.max_steps} Levenberg-Marquardt steps (counted at the ends of "
                    f"epochs of {STEPS_PER_EPOCH}; or stops at its plateau, "
                    f"{self.patience} epochs of {STEPS_PER_EPOCH} steps without improvement); a CPU limit of "
                    f"{VALVE_FACTOR * self.budget_seconds:g} s is a safety valve only (a run it stops is cut)")
        return f"every learned row trains until its plateau or {self.budget_seconds:g} {self.budget} seconds"

    def cpu_estimate(self) -> dict[str, float]:
        """The plan's CPU seconds by part, from ``CPU_BASIS`` (measured on the quick runs): the trainings (optimiser
        steps x training trajectories), each case's rows (row rollouts x held-out conditions x noise levels, and
        the fits on the training file) and each bath's data and reference (oscillators x trajectories); ``total``
        their sum."""
        b = CPU_BASIS
        n_runs = len(self.cases()) * len(self.seeds) * len(self.training_runs())
        out = {"trainings": n_runs * self.max_steps * self.n_train * b["train_step_traj"]}
        for case, arena, n in self.cases():
            fitted = sum(len(windows_of(a, self.windows)) for a in FITTED)
            rollouts = len(ARENAS[arena]["known"]) + 2 + fitted + len(self.seeds) * len(self.training_runs())
            rows = rollouts * (b["row"] + b["row_test"] * self.n_test * len(self.noise)) \
                + fitted * self.n_train * b["fit_traj"]
            bath = 0.0 if n is None else n * (self.n_train * self.t_train * b["gen_osc_time"]
                                              + (fitted * self.n_train + self.n_test * (1 + len(self.noise)))
                                              * b["bath_osc"])
            out[f"case {case}"] = rows + bath
        out["total"] = sum(out.values())
        return out

    def size_line(self) -> str:
        """The plan's size in one line (printed before anything runs)."""
        cases = self.cases()
        runs = len(cases) * len(self.seeds) * len(self.training_runs())
        fitted = sum(len(windows_of(a, self.windows)) for a in FITTED) * len(cases)
        gb = sum((2 * n + 2 if n else 4) * self.n_train * (round(self.t_train / H) + 1) * 8 for _, _, n in cases) / 1e9
        return (f"memory: {len(cases)} cases ({', '.join(c for c, _, _ in cases)}), windows {list(self.windows)}, "
                f"seeds {list(self.seeds)}, noise {list(self.noise)}: {runs} trainings of "
                f"{f'{self.max_steps} steps' if self.budget == 'plateau' else f'{self.budget_seconds:g} {self.budget} s'}, "
                f"{fitted} fitted rows, {self.n_test} held-out conditions scored at t = "
                f"{', '.join(f'{t:g}' for t in self.score_times)}; training "
                f"data {gb:.2g} GB; estimated {self.cpu_estimate()['total'] / 3600:.2g} CPU h (the quick runs' "
                "costs, plan.CPU_BASIS)")


def build_plan(options: MemoryOptions, argv: Sequence[str] = ()) -> MemoryPlan:
    """The plan of the checked ``options``: the size's values (``QUICK`` or ``DEFAULTS``) where an option is not
    given; every refusal here, in one line naming the flag."""
    a = options
    if a.out is None:
        raise StudyError("--out is required (the flag, or out in the --plan file)")
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the memory study ships no pretrained model (its runs are under OUT/runs)")
    if a.skip_existing:
        raise StudyError("--skip-existing: the memory study always keeps finished training runs (complete.json); run "
                         "the same command again to resume, without the flag")
    size = QUICK if a.quick else DEFAULTS

    def pick(name: str) -> Any:
        return getattr(a, name) if getattr(a, name, None) is not None else size[name]

    plan = MemoryPlan(
        out=Path(a.out), table_only=bool(a.table_only), overwrite=bool(a.overwrite),
        systems=tuple(pick("systems")), bath_sizes=tuple(int(n) for n in pick("bath_sizes")),
        seeds=tuple(int(s) for s in pick("seeds")), windows=tuple(sorted(int(T) for T in pick("windows"))),
        noise=tuple(float(s) for s in pick("noise")), approaches=tuple(pick("approaches")),
        n_train=int(pick("n_train")), n_test=int(pick("n_test")), t_train=float(pick("t_train")),
        max_steps=int(pick("max_steps")), budget=str(a.budget), budget_seconds=float(pick("budget_seconds")),
        wall_ceiling=float(a.wall_ceiling), patience=int(pick("patience")), jobs=int(a.jobs),
        results=None if a.results is None else Path(a.results), dry_run=bool(a.dry_run),
        score_times=tuple(sorted(float(t) for t in pick("score_times"))),
        command=" ".join(["vp-study memory", *argv]) if argv else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    if plan.table_only:
        return plan
    for n in plan.bath_sizes:
        if n > MAX_BATH:
            raise StudyError(f"--bath-sizes: N = {n} is out of range; give bath sizes 1 ... {MAX_BATH}")
    for t in a.score_times or ():
        if abs(t / H - round(t / H)) > 1e-9:
            raise StudyError(f"--score-times: t = {t:g} is not a whole number of steps h = {H:g}; give multiples of "
                             f"{H:g}")
    n_states = int(round(plan.t_train / H)) + 1
    first = int(round(min(plan.score_times) / H))
    for T in plan.windows:
        need = 2 * T if "vpt_mix" in plan.approaches else T + 2  # the VPT predicts T; delay SINDy needs 2 beyond
        if need > n_states:
            raise StudyError(f"--windows: T = {T} needs {need} states per training window but the training "
                             f"trajectories (--t-train {plan.t_train:g} at h = {H:g}) have {n_states}; give shorter "
                             "windows or a longer --t-train")
        if T >= first:
            raise StudyError(f"--windows: T = {T} reaches t = {min(plan.score_times):g} (step {first}), where the "
                             f"errors are first scored (--score-times); give windows shorter than {first} or later "
                             "score times")
    return plan
