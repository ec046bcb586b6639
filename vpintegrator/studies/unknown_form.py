"""The study "when the equations are unknown": every approach that
does not know the equations, against the oracle that does, at equal batch-1 CPU cost.

Systems (``SYSTEMS``): ``rigid_body_exp`` (Lie–Poisson, H with an exp term: outside every library),
``coupled_oscillator`` (canonical, the sigmoid coupling outside the polynomial library; data from the
``coupled_oscillator_box`` spec) and ``rigid_body`` (the control: its quadratic field is in SINDy's
polynomial library). Data: ``vp-gen`` at h = 0.2, ``n_train`` (default 100) trajectories to t = 20, DOP853
at 1e-12; ``n_test`` (default 100) held-out initial conditions from the same spec with another seed (no
model sees them), their exact flow (DOP853, 1e-12) to t = 10. With noise σ > 0 the training file is a noisy
copy (one Gaussian draw of σ per state) and every approach, the oracle included, starts from the noisy
initial condition; errors are against the exact flow from the clean one.

Approaches (rows, ``APPROACHES``): the flow maps (``lpnet`` for the Lie–Poisson systems, ``g_sympnet`` for
the canonical one), the vector-field models rolled out by the classical method they were trained through
(``lphnn@gauss_legendre4``, ``hnn@gauss_legendre4``, the unstructured control ``node@rk4``; a learned field
learns its training method's modified equations, so it is never rolled out by a cheaper method), the
Casimir check ``lphnn@implicit_midpoint`` (the same GL4-trained field rolled out by implicit midpoint, which
keeps ‖z‖² whatever the field; over CASIMIR_STEPS steps), SINDy with its library and threshold chosen by
validation (``sindy+gauss_legendre4``, ``vpintegrator.rollout.sindy``), the wrong model class (SINDy
restricted to the degree-2 polynomial library → Gauss–Legendre 4: ``poly2+gauss_legendre4``; for
``rigid_body`` that class is the right one) and the oracle (the true equations → ``gauss_legendre4``).

Training (``RECIPES``): every training run of every learned approach, at each point of its small validation
sweep (two settings each), stops by the same rule (``StopRule``): by default its validation plateau (vp-train's
``patience`` with ``min_rel_delta``) or a cap of optimiser steps, rules no load on the machine moves, with its CPU
seconds recorded beside; ``--budget cpu`` gives each the same process CPU budget instead (``vp-train --set
cpu_time_limit``, as the shipped results were made). The tables print the rule and how each run stopped (its
own ``summary.json``), and say whether the gaps between the rows are at plateau. Levenberg–Marquardt
for the flow maps and for ``lphnn`` (trained through Gauss–Legendre 4, with check windows); for ``hnn`` and
``node`` (LM from scratch stalls) an Adam warm start (WARM_FRACTION of a CPU budget, or to its own plateau),
then LM with check windows from Adam's ``best.pt`` for the rest. The point with the lowest validation score (``summary.json``
``best_loss``, the validation trajectories' rollout error at t = 10) is the approach's model, never chosen on
the held-out set. The fitted rows (SINDy) fit on the same training trajectories and choose on the same
validation trajectories. ``plan`` gives the planned CPU total before anything runs (``--estimate``).

Cost: batch-1 thread CPU seconds per unit time of the row's rollout (the engine's ``seconds``, min over
repeats, ``vpintegrator.clock.thread_cpu``), and the amortised cost ``cost + training CPU / (N · t_end)``
(``amortise_over`` = N rollouts of length t_end = 10; the training CPU of a learned approach is that of
its whole sweep, of a fitted row its fit and selection), as the work–precision CSV's
``amortised_cpu_seconds_per_time``.

Numbers per (system, σ, approach, horizon): per seed the median over held-out initial conditions with its
10–90 % interval (``median_interval``), over seeds the median with a percentile-bootstrap 95 % interval
(``bootstrap_ci``). Structure per row: the largest change of the Casimir ‖z‖² along the rollouts
(Lie–Poisson) or the largest relative energy error of the true H (canonical). Per-seed verdicts of the
issue's targets (``TARGETS``). Plateau curves: validation loss against the run's CPU seconds (``log.csv``).

    python -m vpintegrator.studies.unknown_form --out runs/unknown_form --quick
    vp-study unknown_form --out runs/unknown_form --seeds 0,1,2

Writes ``OUT/unknown_form.json`` (every per-seed number; it accumulates: an invocation's rows replace the
rows with the same (system, σ, seed, method) and keep the others), ``OUT/unknown_form.md`` (the tables) and
the figures ``OUT/unknown_form_cost_<system>.png``/``.svg`` (error at t = 10 against cost) and
``OUT/unknown_form_plateau_<system>.png``/``.svg``; ``--table-only`` (or ``--figures-only``) rebuilds them
from the JSON. Finished training runs are kept and reused (the study resumes by itself: run the same
command again); ``--overwrite`` trains them again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .._signals import run_child
from ..config import key
from ..errors import VPIntegratorError
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, comma_list, number_list
from .runner import StudyError, check_out_dir
from .stats import bootstrap_ci, median_interval, read_json, redraw_from, write_json, write_text

__all__ = ["H", "HORIZONS", "SYSTEMS", "APPROACHES", "RECIPES", "TARGETS", "StopRule", "MAX_STEPS", "MAX_STEPS_QUICK",
           "stop_rule_lines", "make_data", "train_approach",
           "evaluate_seed", "plateau", "plan", "plan_line", "run_study", "merge_rows", "summarize_rows", "tables", "figures",
           "UnknownFormOptions", "STUDY", "run"]

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
FITTED = ("sindy+gauss_legendre4", "poly2+gauss_legendre4", "oracle gauss_legendre4")
FLOW_MAPS = ("lpnet", "g_sympnet")
#: default and --quick sizes
#: (the default's plan, ``plan``: 180 training runs x 50 CPU s, about 1.6 h on 2 free cores; --quick: 9 runs x 10 s)
DEFAULTS: dict[str, Any] = {"n_train": 100, "n_test": 100, "budget_seconds": 50.0, "sweep": 2, "noise": [0.0, 1e-3]}
QUICK: dict[str, Any] = {"n_train": 100, "n_test": 20, "budget_seconds": 10.0, "sweep": 1, "noise": [0.0]}


# --------------------------------------------------------------------------- data


def _vp_gen(spec: str, out: Path, n: int, t_end: float, seed: int) -> Path:
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "vpintegrator.cli.gen", spec, "--n-traj", str(n), "--t-end", f"{t_end:g}",
           "--dt", f"{H:g}", "--seed", str(seed), "--rtol", "1e-12", "--atol", "1e-12", "--out", str(out)]
    run_child(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _noisy_copy(clean: Path, sigma: float) -> Path:
    """The training file with one Gaussian draw of σ added to every state (seeded; written once)."""
    import dataclasses

    from ..data import read_trajectories, write_trajectories

    path = clean.with_name(f"{clean.stem}_noise{sigma:g}.h5")
    if sigma == 0 or path.exists():
        return clean if sigma == 0 else path
    traj = read_trajectories(clean)
    rng = np.random.default_rng(np.random.SeedSequence([43, 5, int(round(sigma * 1e9))]))
    noisy = dataclasses.replace(traj, y=traj.y + sigma * rng.normal(size=traj.y.shape),
                                meta={**traj.meta, "observation_noise": float(sigma)})
    write_trajectories(path, noisy)
    return path


def make_data(out: Path, system: str, n_train: int, n_test: int) -> tuple[Path, Path]:
    """The training file (``n_train`` trajectories to t = 20) and the held-out file (``n_test`` new initial
    conditions, exact flow to t = max(HORIZONS)) of ``system`` under ``out/data`` (reused when present)."""
    if system not in SYSTEMS:
        raise VPIntegratorError(f"systems: unknown system {system!r}; valid: {', '.join(SYSTEMS)}", key="systems")
    spec = SYSTEMS[system]["spec"]
    train = _vp_gen(spec, out / "data" / f"{system}_train{n_train}.h5", n_train, 20.0, 4301)
    test = _vp_gen(spec, out / "data" / f"{system}_heldout{n_test}.h5", n_test, max(HORIZONS), 4399)
    return train, test


# --------------------------------------------------------------------------- training


def _run_dir(out: Path, system: str, sigma: float, approach: str, point: int, seed: int) -> Path:
    return out / "runs" / f"{system}_noise{sigma:g}" / f"{approach}_p{point}_seed{seed}"


def _phases(run: Path, approach: str, point: int) -> list[tuple[Path, dict[str, Any], float]]:
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
        from .runner import PLATEAU_REL_DELTA, PLATEAU_WALL_FACTOR

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


def _train_one(data: Path, run: Path, approach: str, point: int, seed: int, budget: float, ceiling: float,
               overwrite: bool = False, rule: StopRule | None = None) -> Path:
    """``vp-train`` of one sweep point (each of its phases, ``_phases``, skipped when finished: its
    ``complete.json``, ``vpintegrator.rundir.is_complete``; an interrupted run is trained again; ``overwrite``
    retrains), each phase stopped by ``rule`` (default: ``StopRule()``, the plateau rule)."""
    from ..rundir import is_complete

    rule = rule if rule is not None else StopRule()
    model, optimizer, _, _ = RECIPES[approach]
    for path, phase, share in _phases(run, approach, point):
        if not overwrite and is_complete(path):
            continue
        settings = dict(phase)
        opt = str(settings.pop("optimizer", optimizer))
        cmd = [sys.executable, "-m", "vpintegrator.cli.train", "--data", str(data), "--model", model, "--optimizer",
               opt, "--epochs", "100000", "--dtype", "float64", "--seed", str(seed), "-q", "--out", str(path),
               "--overwrite", *rule.flags(opt, budget * share, ceiling), "--set", "device='cpu'"]
        for k, v in {**({k: v for k, v in VALIDATION.items() if k != "patience"} if rule.budget == "plateau"
                        else VALIDATION), **settings}.items():
            cmd += ["--set", f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        run_child(cmd, check=True, stdout=subprocess.DEVNULL, env=env)  # dies with the study
        overwrite = True  # a retrained warm start retrains what follows it
    return run


def _curve(run: Path) -> dict[str, list[float]]:
    """The run's monitored validation score (``val_rollout``: the validation trajectories' rollout error at
    t = 10; ``val_loss`` where the run has no such column) against its CPU seconds (``log.csv``, read by
    ``vpintegrator.rundir.read_log``)."""
    from ..rundir import CPU_COLUMN, ROLLOUT_COLUMN, read_log

    rows = [r for r in read_log(run / "log.csv") if CPU_COLUMN in r]
    return {"cpu": [r[CPU_COLUMN] for r in rows], "val": [r.get(ROLLOUT_COLUMN, r["val_loss"]) for r in rows]}


def train_approach(data: Path, out: Path, system: str, sigma: float, approach: str, seed: int, budget: float,
                   n_points: int, ceiling: float = 3.0, jobs: int = 1, rule: StopRule | None = None) -> dict[str, Any]:
    """Train the first ``n_points`` sweep points of ``approach`` (same CPU budget each) and choose the one
    with the lowest validation loss: ``{"run", "point", "sweep": [{point, settings, best_loss, cpu_seconds,
    n_params}], "train_cpu": the whole sweep's CPU seconds, "curves"}``."""
    points = list(range(min(n_points, len(RECIPES[approach][3]))))
    runs = [_run_dir(out, system, sigma, approach, p, seed) for p in points]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(lambda pr: _train_one(data, pr[1], approach, pr[0], seed, budget, ceiling, rule=rule),
                      zip(points, runs)))
    return chosen(out, approach, runs)


def _point(out: Path, approach: str, p: int, run: Path) -> dict[str, Any]:
    """One finished sweep point: its phases' CPU seconds summed, its curve (the phases' curves end to end on
    the CPU axis), and the phase whose ``best.pt`` scored best on the validation trajectories (``model_run``)."""
    from .rigid_body_results import stop_text, training_budget

    cpu: list[float] = []
    val: list[float] = []
    total, best_loss, model_run, n_params = 0.0, math.inf, run, None
    flags: list[bool | None] = []
    stopped: list[str] = []
    for path, _, _ in _phases(run, approach, p):
        s = read_json(path / "summary.json") or {}
        budget = training_budget(path)
        flags.append(None if budget is None else budget["wall_limited"])
        stopped.append("not recorded" if budget is None else stop_text(budget))
        c = _curve(path) if (path / "log.csv").is_file() else {"cpu": [], "val": []}
        cpu += [total + x for x in c["cpu"]]
        val += c["val"]
        total += float(s.get("cpu_time") or math.nan)
        loss = s.get("best_loss")
        if loss is not None and math.isfinite(float(loss)) and float(loss) <= best_loss:
            best_loss, model_run = float(loss), path
        n_params = s.get("n_params", n_params)
    # the runs' own record (summary.json stopped, stop_clock): cut by a wall ceiling, None where not recorded
    wall_limited = True if any(f is True for f in flags) else (None if any(f is None for f in flags) else False)
    return {"point": p, "settings": RECIPES[approach][3][p], "best_loss": best_loss, "cpu_seconds": total,
            "n_params": n_params, "run": str(run.relative_to(out)), "model_run": str(model_run.relative_to(out)),
            "wall_limited": wall_limited, "stopped": stopped, "curve": {"cpu": cpu, "val": val}}


def chosen(out: Path, approach: str, runs: Sequence[Path]) -> dict[str, Any]:
    """The sweep of ``approach`` from its finished runs (point i in ``runs[i]``) and the point with the lowest
    validation score (``summary.json`` ``best_loss``: the monitored validation rollout error)."""
    sweep = [_point(out, approach, p, run) for p, run in enumerate(runs)]
    best = min(sweep, key=lambda r: r["best_loss"] if math.isfinite(r["best_loss"]) else math.inf)
    return {"run": out / best["model_run"], "point": best["point"], "sweep": sweep,
            "train_cpu": float(np.nansum([r["cpu_seconds"] for r in sweep]))}


# --------------------------------------------------------------------------- evaluation


def _structure(kind: str, y: np.ndarray, system) -> float | None:
    """Largest Casimir change |‖z_n‖² − ‖z_0‖²| or relative energy error |H(z_n) − H(z_0)| / |H(z_0)| (the
    true H) over the rollouts that stayed finite; None when none did."""
    ok = np.isfinite(y).all(axis=(1, 2))
    if not ok.any():
        return None
    y = y[ok]
    if kind == "casimir":
        c = np.sum(y ** 2, axis=-1)
        return float(np.abs(c - c[:, :1]).max())
    e = np.stack([system.hamiltonian(row) for row in y])
    return float((np.abs(e - e[:, :1]) / np.abs(e[:, :1])).max())


def _batch1_cost(make: Callable[[], Any], y0: np.ndarray, n_steps: int, repeats: int = 3) -> tuple[float, str]:
    """Batch-1 thread CPU seconds per unit time of a step map's rollout of ``n_steps`` steps (the engine's
    ``seconds``: set-up and compilation excluded; min over ``repeats``) and its runner."""
    from ..clock import thread_cpu
    from ..rollout import rollout

    best, runner = math.inf, "?"
    for _ in range(repeats):
        step = make()
        tic = thread_cpu()
        tr = rollout(step, y0[None, None], H, n_steps, chunk_steps=16384)
        best = min(best, float(tr.meta.get("seconds", thread_cpu() - tic)))
        runner = str(step.describe().get("runner", "?"))
    return best / (n_steps * H), runner


def _casimir_long(model, y0: np.ndarray) -> float:
    """|‖z_n‖² − ‖z_0‖²| max over CASIMIR_STEPS steps of lphnn + implicit midpoint from a few initial
    conditions (batch 1: the compiled stepper)."""
    from ..rollout import rollout
    from ..rollout.field import field_step

    worst = 0.0
    for z in y0:
        y = rollout(field_step(model, H, "implicit_midpoint"), z[None, None], H, CASIMIR_STEPS).y[0]
        if not np.isfinite(y).all():
            return math.inf
        c = np.sum(y ** 2, axis=-1)
        worst = max(worst, float(np.abs(c - c[0]).max()))
    return worst


def evaluate_seed(system: str, sigma: float, seed: int, trained: dict[str, dict[str, Any]], train_file: Path,
                  test_file: Path, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every row of one (system, σ, seed): per held-out initial condition the relative error at HORIZONS,
    the structure measure, batch-1 cost and training CPU; one dict per row."""
    from ..data import read_trajectories
    from ..data.trajectory_files import read_metadata
    from ..models import load_model
    from ..rollout import IntegratorStep, ModelStep, rollout
    from ..rollout.field import field_step
    from ..rollout.sindy import SindyStep, select_sindy
    from ..systems.registry import system_from_meta

    test = read_trajectories(test_file)
    truth = system_from_meta(read_metadata(test_file), where=test_file)
    ref = test.y
    n_steps = ref.shape[1] - 1
    rng = np.random.default_rng(np.random.SeedSequence([43, 6, seed, int(round(sigma * 1e9))]))
    y0 = ref[:, 0] + (sigma * rng.normal(size=ref[:, 0].shape) if sigma > 0 else 0.0)
    kind = SYSTEMS[system]["structure"]

    # the fitted rows use the training and validation trajectories of the learned runs' split
    first = next(iter(trained.values()), None)
    summary = read_json(first["run"] / "summary.json") if first else None
    data = read_trajectories(train_file).y
    if summary and "split" in summary:
        tr_idx, va_idx = summary["split"]["train"], summary["split"]["val"]
    else:  # no learned run recorded one: vp-train's split of these settings (the one rule, split_seed 0)
        from ..data.windows import DEFAULT_SPLIT, split_train_val_test

        tr_idx, va_idx, _ = split_train_val_test(len(data), VALIDATION["val_fraction"], VALIDATION["test_fraction"],
                                                 DEFAULT_SPLIT[2])
    train, val = data[np.asarray(tr_idx)], data[np.asarray(va_idx)]

    rows: list[dict[str, Any]] = []
    makers: list[tuple[str, str, Callable[[], Any], float, dict]] = []  # label, approach, make, train_cpu, extra
    for approach, info in trained.items():
        model = load_model(info["run"] / "best.pt").double()
        extra = {"point": info["point"], "n_params": info["sweep"][info["point"]]["n_params"]}
        methods = RECIPES[approach][2]
        if methods is None:
            makers.append((approach, approach, partial(ModelStep, model, device="cpu"), info["train_cpu"], extra))
        else:
            for m in methods:
                makers.append((f"{approach}@{m}", approach, partial(field_step, model, H, m), info["train_cpu"],
                               extra))
    tic = time.process_time()
    sindy = SindyStep(train, val, ORACLE, H)
    fit = sindy.fit_now()
    sindy_cpu = time.process_time() - tic
    makers.append(("sindy+gauss_legendre4", "sindy", lambda: sindy, sindy_cpu,
                   {"equations": fit.field.equations() if fit and fit.field else None,
                    "library": fit.library if fit else None, "threshold": fit.threshold if fit else None}))
    tic = time.process_time()
    wrong, _ = select_sindy(train, val, H, ORACLE, libraries=["poly2"])
    wrong_cpu = time.process_time() - tic
    if wrong is not None and wrong.field is not None:
        makers.append(("poly2+gauss_legendre4", "poly2", lambda: IntegratorStep(wrong.field, ORACLE, H), wrong_cpu,
                       {"equations": wrong.field.equations(), "threshold": wrong.threshold}))
    else:
        rows.append(_failed_row("poly2+gauss_legendre4", "no degree-2 polynomial fit has skill on the validation "
                                "trajectories", HORIZONS, wrong_cpu))
    makers.append(("oracle gauss_legendre4", "oracle", lambda: IntegratorStep(truth, ORACLE, H), 0.0, {}))

    for label, approach, make, train_cpu, extra in makers:
        tic = time.process_time()
        try:
            y = rollout(make(), y0[:, None], H, n_steps).y
        except VPIntegratorError as err:
            rows.append(_failed_row(label, str(err), HORIZONS, train_cpu))
            continue
        ok = np.isfinite(y).all(axis=(1, 2))
        errors = {}
        for t in HORIZONS:
            n = int(round(t / H))
            e = np.linalg.norm(y[:, n] - ref[:, n], axis=-1) / np.linalg.norm(ref[:, n], axis=-1)
            errors[f"{t:g}"] = np.where(np.isfinite(e), e, np.inf).tolist()
        # batch-1 cost from the first initial condition whose rollout stayed finite
        cost, runner = _batch1_cost(make, y0[int(np.argmax(ok))], n_steps) if ok.any() else (math.nan, "?")
        row = {"method": label, "approach": approach, "errors": errors, "structure": _structure(kind, y, truth),
               "structure_kind": kind, "failed": int((~ok).sum()), "cost": cost, "runner": runner,
               "train_cpu": float(train_cpu), "eval_cpu": time.process_time() - tic, **extra}
        if label == "lphnn@implicit_midpoint":
            model = load_model(trained["lphnn"]["run"] / "best.pt").double()
            row["casimir_long"] = _casimir_long(model, y0[:2])
        rows.append(row)
        log(f"{system} σ={sigma:g} seed {seed} {label}: t=10 median {np.median(errors['10']):.3g}, "
            f"{kind} {_g(row['structure'])}, cost {_g(cost)} s/unit time, failed {row['failed']}")
    for approach, info in trained.items():
        for r in rows:
            if r["approach"] == approach:
                r["sweep"] = [{k: v for k, v in p.items()} for p in info["sweep"]]
                break
    return rows


def _failed_row(label: str, why: str, horizons: Sequence[float], train_cpu: float) -> dict[str, Any]:
    return {"method": label, "approach": label.split("+")[0], "errors": {f"{t:g}": [math.inf] for t in horizons},
            "structure": None, "structure_kind": None, "failed": -1, "cost": math.nan, "runner": "?",
            "train_cpu": float(train_cpu), "failure": why}


def plateau(curve: dict[str, list[float]]) -> dict[str, Any]:
    """Did a run reach its validation plateau? From its best-so-far validation loss v(c) against CPU seconds:
    ``gain_last_half`` = v(c_end / 2) / v(c_end) (the factor the second half of the budget bought; ≈ 1 at a
    plateau) and ``plateaued`` = gain < 1.25; a doubling of the budget is estimated to buy about that factor
    again (``per_doubling``)."""
    cpu, val = np.asarray(curve.get("cpu") or [], float), np.asarray(curve.get("val") or [], float)
    keep = np.isfinite(cpu) & np.isfinite(val)
    cpu, val = cpu[keep], val[keep]
    if cpu.size < 3:
        return {"gain_last_half": None, "plateaued": None, "best": float(val.min()) if val.size else None}
    best = np.minimum.accumulate(val)
    half = best[np.searchsorted(cpu, cpu[-1] / 2, side="right") - 1] if cpu[0] <= cpu[-1] / 2 else best[0]
    gain = float(half / best[-1]) if best[-1] > 0 else math.inf
    return {"gain_last_half": gain, "plateaued": bool(gain < 1.25), "best": float(best[-1]),
            "cpu_end": float(cpu[-1])}


# --------------------------------------------------------------------------- the study


#: process CPU seconds, rounded up from what --quick measured on this 2-core machine (docs/unknown_form.md): of
#: one vp-train run beyond its budget (interpreter, torch and numba start-up, data, checkpoints: about 2), of one
#: (system, σ, seed) evaluation (every row's rollouts, the SINDy selection, the costs, the Casimir check) and of
#: one system's data files (coupled_oscillator's about 30, the rigid bodies' about 1)
STARTUP_CPU = 3.0
EVAL_CPU = 20.0
DATA_CPU = 15.0


def plan(systems: Sequence[str], seeds: Sequence[int], noises: Sequence[float], budget: float, sweep: int,
         jobs: int = 2) -> dict[str, Any]:
    """The study's planned CPU before it runs: ``cells`` (seed, system, σ), ``trainings`` (sweep points; each
    gets ``budget`` CPU seconds), ``processes`` (vp-train runs: a warm-started point is two),
    ``training_cpu`` = trainings · budget + processes · STARTUP_CPU, ``evaluation_cpu`` = cells · EVAL_CPU,
    ``data_cpu``, ``total_cpu`` and ``wall`` (seconds on ``jobs`` free cores: the trainings of a cell run
    ``jobs`` at a time, its evaluation and the data on one)."""
    trainings = processes = 0
    for system in systems:
        for approach in APPROACHES[system]:
            for p in range(min(sweep, len(RECIPES[approach][3]))):
                trainings += 1
                processes += len(_phases(Path("run"), approach, p))
    per = len(seeds) * len(noises)
    training = per * (trainings * budget + processes * STARTUP_CPU)
    evaluation = per * len(systems) * EVAL_CPU
    data = len(systems) * DATA_CPU
    return {"cells": per * len(systems), "trainings": per * trainings, "processes": per * processes,
            "budget": float(budget), "training_cpu": training, "evaluation_cpu": evaluation, "data_cpu": data,
            "total_cpu": training + evaluation + data,
            "wall": training / max(1, min(jobs, 2)) + evaluation + data}


def plan_line(p: dict[str, Any]) -> str:
    """``plan``'s numbers in one line."""
    return (f"unknown_form plan: {p['cells']} (seed, system, σ) cells, {p['trainings']} training runs x "
            f"{p['budget']:g} CPU s ({p['processes']} vp-train processes, ~{STARTUP_CPU:g} s start-up each) = "
            f"{p['training_cpu']:.0f} CPU s, evaluation ~{p['evaluation_cpu']:.0f}, data ~{p['data_cpu']:.0f}: "
            f"total ~{p['total_cpu']:.0f} CPU s ({p['total_cpu'] / 3600:.2f} h), ~{p['wall'] / 3600:.2f} h of wall "
            f"time on 2 free cores")


def run_study(out: Path, systems: Sequence[str], seeds: Sequence[int], noises: Sequence[float], *,
              n_train: int, n_test: int, budget: float, sweep: int, jobs: int = 2, ceiling: float = 3.0,
              data: Path | None = None, overwrite: bool = False, log: Callable[[str], None] = print,
              save: Callable[[list[dict[str, Any]]], None] | None = None,
              rule: StopRule | None = None) -> list[dict[str, Any]]:
    """Generate the data (``data``: a training file of the first system in place of the generated one), train
    every approach's sweep per (seed, system, σ) and evaluate every row. Seeds are the outer loop, and
    ``save`` (if given) receives the rows after every (seed, system, σ): a run stopped early keeps whole
    seeds of every system."""
    rows: list[dict[str, Any]] = []
    files = {}
    for system in systems:
        train_clean, test_file = make_data(out, system, n_train, n_test)
        files[system] = (data if data is not None else train_clean, test_file)
    for seed in seeds:
        for system in systems:
            train_clean, test_file = files[system]
            for sigma in noises:
                train_file = _noisy_copy(train_clean, sigma)
                jobs_list = [(a, p, _run_dir(out, system, sigma, a, p, seed)) for a in APPROACHES[system]
                             for p in range(min(sweep, len(RECIPES[a][3])))]
                with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                    list(pool.map(lambda j: _train_one(train_file, j[2], j[0], j[1], seed, budget, ceiling,
                                                       overwrite, rule), jobs_list))
                trained = {a: chosen(out, a, [r for b, _, r in jobs_list if b == a]) for a in APPROACHES[system]}
                for r in evaluate_seed(system, sigma, seed, trained, train_file, test_file, log):
                    rows.append({"system": system, "noise": float(sigma), "seed": int(seed),
                                 "stop_rule": (rule or StopRule()).describe(), **r})
                if save is not None:
                    save(rows)
    return rows


# what a row of unknown_form.json holds: key -> kind ("number?": a number, "inf"/"-inf", or null for NaN)
_ROW_REQUIRED = {"system": "system", "noise": "number", "seed": "int", "method": "str", "errors": "errors",
                 "failed": "int", "cost": "number?", "train_cpu": "number"}
_ROW_OPTIONAL = {"approach": "str", "structure": "number?", "structure_kind": "str?", "runner": "str",
                 "eval_cpu": "number?", "point": "int?", "n_params": "int?", "sweep": "sweep", "equations": "list?",
                 "library": "str?", "threshold": "number?", "casimir_long": "number?", "failure": "str"}


def _is_number(x: Any, null: bool) -> bool:
    if x is None:
        return null
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or x in ("inf", "-inf")


def _kind_problem(x: Any, kind: str) -> str:
    """Why ``x`` is not of ``kind`` ("" when it is)."""
    null = kind.endswith("?")
    base = kind.rstrip("?")
    if x is None and null:
        return ""
    if base == "number":
        return "" if _is_number(x, null) else "a number"
    if base == "int":
        return "" if isinstance(x, int) and not isinstance(x, bool) else "an integer"
    if base == "str":
        return "" if isinstance(x, str) else "a string"
    if base == "list":
        return "" if isinstance(x, list) else "a list"
    if base == "system":
        return "" if isinstance(x, str) and x in SYSTEMS else f"one of {', '.join(SYSTEMS)}"
    if base == "errors":
        good = isinstance(x, dict) and x and all(
            isinstance(k, str) and _is_number(_horizon(k), False) and isinstance(v, list)
            and all(_is_number(e, True) for e in v) for k, v in x.items())
        return "" if good else "an object {horizon: [relative errors]}"
    if base == "sweep":
        good = isinstance(x, list) and all(
            isinstance(p, dict) and isinstance(p.get("point"), int) and isinstance(p.get("curve") or {}, dict)
            and all(isinstance(v, list) and all(_is_number(e, True) for e in v) for v in (p.get("curve") or {}).values())
            for p in x)
        return "" if good else "a list of {point, curve, ...} objects"
    raise AssertionError(kind)


def _horizon(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_rows(doc: Any, path: Path) -> list[dict[str, Any]]:
    """The rows of ``unknown_form.json`` (``doc``, read from ``path``), checked against this study before any
    table is drawn: a JSON object with a list ``rows``, each row an object with every key of ``_ROW_REQUIRED`` of
    its kind, the optional keys of theirs. Anything else (another study's JSON, a row missing a key or with a
    field of the wrong type) is one line naming the file, the row and the key."""
    fix = ("it was not written by this version of the unknown_form study: run the study again into this --out "
           "(without --table-only), or give the --out of an unknown_form run")
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        other = f" (its top-level keys: {', '.join(sorted(map(str, doc))[:6])})" if isinstance(doc, dict) else ""
        raise StudyError(f"{path}: not an unknown_form study's results: no list 'rows'{other}; {fix}")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise StudyError(f"{path}: row {i} is {type(row).__name__}, not an object; {fix}")
        where = f"row {i}" + (f" ({row['method']})" if isinstance(row.get("method"), str) else "")
        for key, kind in _ROW_REQUIRED.items():
            if key not in row:
                raise StudyError(f"{path}: {where} has no key {key!r}; {fix}")
        for key, kind in {**_ROW_REQUIRED, **_ROW_OPTIONAL}.items():
            why = _kind_problem(row[key], kind) if key in row else ""
            if why:
                raise StudyError(f"{path}: {where}: {key!r} is {json.dumps(row[key])[:60]}, expected {why}; {fix}")
    return doc["rows"]


def _row_key(r: dict) -> tuple:
    return (r["system"], float(r["noise"]), int(r["seed"]), r["method"])


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``old`` whose (system, σ, seed, method) no row of ``new`` has, then ``new``."""
    fresh = {_row_key(r) for r in new}
    return [r for r in old if _row_key(r) not in fresh] + list(new)


def _num(x: Any) -> float:
    if x is None:
        return math.nan
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(x, math.nan)
    return float(x)


def summarize_rows(rows: list[dict[str, Any]], amortise_over: float = 1e5) -> list[dict[str, Any]]:
    """Per (system, σ, method): per horizon the per-seed medians and 10–90 % intervals, their median over
    seeds and bootstrap 95 % interval; the median cost, training CPU, amortised cost; the largest structure
    error; the per-seed target verdicts where they apply."""
    out = []
    keys = sorted({(r["system"], float(r["noise"]), r["method"]) for r in rows})
    for system, sigma, method in keys:
        mine = sorted((r for r in rows if (r["system"], float(r["noise"]), r["method"]) == (system, sigma, method)),
                      key=lambda r: int(r["seed"]))
        horizons: dict[str, dict[str, Any]] = {}
        for h in sorted({h for r in mine for h in r["errors"]}, key=float):
            per_seed = [median_interval(_num(v) for v in r["errors"].get(h, [])) for r in mine]
            medians = [p["median"] for p in per_seed]
            lo, hi = bootstrap_ci(medians)
            horizons[h] = {"per_seed": per_seed, "median": float(np.median(medians)), "boot_lo": lo, "boot_hi": hi}
        cost = float(np.nanmedian([_num(r["cost"]) for r in mine])) if any(
            math.isfinite(_num(r["cost"])) for r in mine) else math.nan
        train_cpu = float(np.median([_num(r["train_cpu"]) for r in mine]))
        structure = [_num(r["structure"]) for r in mine if r.get("structure") is not None]
        t10 = horizons.get(f"{TARGETS['t']:g}")
        runners = sorted({str(r.get("runner", "?")) for r in mine if r.get("runner") not in (None, "?")})
        s: dict[str, Any] = {"system": system, "noise": sigma, "method": method, "approach": mine[0].get("approach"),
             "runner": ",".join(runners) or "?",
             "seeds": [int(r["seed"]) for r in mine], "horizons": horizons, "cost": cost, "train_cpu": train_cpu,
             "amortised_cost": cost + train_cpu / (amortise_over * max(HORIZONS)), "amortise_over": amortise_over,
             "structure": max(structure) if structure else None, "structure_kind": SYSTEMS[system]["structure"],
             "failed": int(sum(max(int(r["failed"]), 0) for r in mine)),
             "failures": sorted({r["failure"] for r in mine if r.get("failure")}),
             "points": [r.get("point") for r in mine], "n_params": [r.get("n_params") for r in mine]}
        if system == "rigid_body_exp" and method in FLOW_MAPS and t10 is not None:
            verdicts = [bool(p["median"] is not None and p["median"] <= TARGETS["error"]
                             and r.get("structure") is not None and _num(r["structure"]) <= TARGETS["casimir"])
                        for p, r in zip(t10["per_seed"], mine)]
            s["target"] = {"what": f"t = 10 median ≤ {TARGETS['error']:g} and Casimir ≤ {TARGETS['casimir']:g}",
                           "per_seed": verdicts, "met": int(sum(verdicts)), "of": len(verdicts),
                           "verdict": sum(verdicts) >= min(TARGETS["seeds_needed"], len(verdicts))}
        if method == "lphnn@implicit_midpoint":
            long = [_num(r.get("casimir_long")) for r in mine]
            verdicts = [bool(math.isfinite(c) and c <= TARGETS["casimir"]) for c in long]
            s["casimir_long"] = long
            s["target"] = {"what": f"Casimir ≤ {TARGETS['casimir']:g} over {CASIMIR_STEPS} steps",
                           "per_seed": verdicts, "met": int(sum(verdicts)), "of": len(verdicts),
                           "verdict": all(verdicts)}
        plateaus = []
        for r in mine:
            for p in r.get("sweep") or []:
                plateaus.append({"seed": int(r["seed"]), "point": p["point"], "chosen": p["point"] == r.get("point"),
                                 "cpu_seconds": p.get("cpu_seconds"), "wall_limited": p.get("wall_limited"),
                                 "stopped": p.get("stopped"), **plateau(p.get("curve") or {})})
        s["plateau"] = plateaus
        s["stop_rules"] = sorted({str(r["stop_rule"]) for r in mine if r.get("stop_rule")})
        out.append(s)
    return out


def _g(x: Any) -> str:
    x = _num(x) if not isinstance(x, (int, float)) else float(x)
    if math.isnan(x):
        return "—"
    return "inf" if math.isinf(x) else f"{x:.2g}"


_ORDER = ["lpnet", "g_sympnet", "lphnn@gauss_legendre4", "lphnn@implicit_midpoint", "hnn@gauss_legendre4",
          "node@rk4", "sindy+gauss_legendre4", "poly2+gauss_legendre4", "oracle gauss_legendre4"]


def _order(method: str) -> int:
    return _ORDER.index(method) if method in _ORDER else len(_ORDER)


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: per (system, σ) a row per method (errors at the horizons, cost, amortised cost,
    structure, failures), then the per-seed target verdicts and the plateau check of every training run."""
    lines = ["Cells: the median over seeds of the per-seed median relative error over held-out initial conditions "
             "[bootstrap 95 % interval over seeds] (the smallest 10 % and largest 90 % quantile of any seed). "
             "Cost: batch-1 thread CPU seconds per unit time (median over seeds), with the stepper that ran it "
             "(numba: the compiled kernel, a fitted SINDy field's included; numpy: the NumPy path, which runs "
             "a fitted SINDy field in results recorded before its compiled kernel existed); amortised: + training "
             "CPU / (N · 10) with N the rollouts it is spread over."]
    for system in [s for s in SYSTEMS if any(x["system"] == s for x in summary)]:
        for sigma in sorted({x["noise"] for x in summary if x["system"] == system}):
            mine = sorted((x for x in summary if x["system"] == system and x["noise"] == sigma),
                          key=lambda x: _order(x["method"]))
            hs = sorted({h for x in mine for h in x["horizons"]}, key=float)
            kind = SYSTEMS[system]["structure"]
            label = "max ΔCasimir" if kind == "casimir" else "max rel. energy error"
            n_amort = mine[0]["amortise_over"]
            lines += ["", f"### {system} ({SYSTEMS[system]['form']}), noise σ = {sigma:g}, seeds "
                      f"{','.join(str(s) for s in mine[0]['seeds'])}", "",
                      "| method | " + " | ".join(f"t = {float(h):g}" for h in hs) +
                      f" | cost (s / unit time) | training CPU s | amortised over {n_amort:g} | {label} | failed |",
                      "|---|" + "---|" * (len(hs) + 5)]
            for x in mine:
                cells = []
                for h in hs:
                    c = x["horizons"].get(h)
                    if c is None:
                        cells.append("—")
                        continue
                    p10 = min(_num(p["lo"]) for p in c["per_seed"])
                    p90 = max(_num(p["hi"]) for p in c["per_seed"])
                    cells.append(f"{_g(c['median'])} [{_g(c['boot_lo'])}, {_g(c['boot_hi'])}] ({_g(p10)}–{_g(p90)})")
                failed = str(x["failed"]) + (f" ({'; '.join(x['failures'])})" if x["failures"] else "")
                lines.append(f"| {x['method']} | " + " | ".join(cells) + f" | {_g(x['cost'])} ({x.get('runner', '?')}) | {_g(x['train_cpu'])} "
                             f"| {_g(x['amortised_cost'])} | {_g(x['structure'])} | {failed} |")
    verdicts = [x for x in summary if "target" in x]
    if verdicts:
        lines += ["", "### Targets (per seed)", "", "| system | σ | method | target | per seed | met | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for x in verdicts:
            t = x["target"]
            per = " ".join(f"s{s}:{'yes' if v else 'no'}" for s, v in zip(x["seeds"], t["per_seed"]))
            lines.append(f"| {x['system']} | {x['noise']:g} | {x['method']} | {t['what']} | {per} | {t['met']}/{t['of']} "
                         f"| {'met' if t['verdict'] else 'not met'} |")
    plateaus = [x for x in summary if x["plateau"]]
    if plateaus:
        lines += ["", "### Plateau check (validation score vs CPU seconds of every training run)", "",
                  "Score: the validation trajectories' rollout error at t = 10 (the monitor that chose best.pt). "
                  "gain = best score at half the run's CPU seconds / at its end (what the second half "
                  "of the CPU bought; a doubling buys about as much again); plateau: gain < 1.25. Stopped: what "
                  "stopped each phase of the run, from its own summary.json (stopped, stop_clock).",
                  "", "| system | σ | approach | seed | sweep point | chosen | CPU s | best score | gain | plateau | "
                  "stopped |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in plateaus:
            for p in x["plateau"]:
                lines.append(f"| {x['system']} | {x['noise']:g} | {x['approach']} | {p['seed']} | {p['point']} | "
                             f"{'yes' if p['chosen'] else ''} | {_g(p.get('cpu_end'))} | {_g(p.get('best'))} | "
                             f"{_g(p.get('gain_last_half'))} | "
                             f"{'—' if p.get('plateaued') is None else ('yes' if p['plateaued'] else 'no')} | "
                             f"{' + '.join(p['stopped']) if p.get('stopped') else 'not recorded'} |")
        lines += ["", wall_ceiling_line(plateaus)]
    return "\n".join([*stop_rule_lines(summary), *lines]) + "\n"


def stop_rule_lines(summary: Sequence[dict[str, Any]]) -> list[str]:
    """The tables' first lines: the stop rule the rows' trainings ran under (as the study recorded it) and
    whether the gaps between the rows are at plateau: every training run stopped by the plateau rule (each
    run's own record), or how many did not."""
    rules = sorted({r for x in summary for r in x.get("stop_rules") or []})
    runs = [p for x in summary for p in x.get("plateau") or []]
    phases = [s for p in runs for s in (p.get("stopped") or [])]
    if not runs:
        return []
    rule = ("Stop rule of the trainings: " + "; ".join(rules) + ".") if rules else (
        "Stop rule of the trainings: not recorded (rows from before the study recorded it; the shipped results "
        "ran a CPU budget per training run, --budget-seconds, see the text).")
    if not phases:
        return [rule, f"How the {len(runs)} training runs stopped is not recorded (runs from before the runs "
                      "recorded it): the gaps between the rows are at the budget, not shown to be at plateau.", ""]
    at = sum(s == "plateau (patience)" for s in phases)
    if at == len(phases):
        return [rule, f"Every vp-train run stopped at its validation plateau ({len(phases)} runs): the gaps between "
                      "the rows are at plateau.", ""]
    counts: dict[str, int] = {}
    for s in phases:
        counts[s] = counts.get(s, 0) + 1
    how = ", ".join(f"{n} by {what}" for what, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return [rule, f"{at} of {len(phases)} vp-train runs stopped at their validation plateau ({how}): the gaps "
                  "between the rows are at plateau only where every run of both rows did.", ""]


def wall_ceiling_line(summary: Sequence[dict[str, Any]]) -> str:
    """Whether a wall-time ceiling stopped a training (a loaded machine), read from the runs' own records
    (``summary.json`` ``stopped``/``stop_clock``, kept as each sweep point's ``stopped``): the runs it did, those
    whose record does not say (run before it existed: not known, never guessed from the seconds), or that none
    did."""
    runs = [(x, p) for x in summary for p in x["plateau"]]
    recorded = [(x, p) for x, p in runs if p.get("stopped") and "not recorded" not in p["stopped"]]
    cut = [(x, p) for x, p in recorded if p.get("wall_limited")]
    unknown = len(runs) - len(recorded)
    note = f" ({unknown} runs recorded before the runs said how they stopped: not known)" if unknown else ""
    if not recorded:
        return (f"Whether a wall-time ceiling stopped any of the {unknown} training runs is not known: they ran before "
                "the runs recorded how they stopped (the old rule, wall ≥ 0.99 × the ceiling, misses a run that "
                "stopped before an epoch that would have overrun it).")
    if not cut:
        return (f"No training run stopped at its wall-time ceiling ({len(recorded)} runs, each run's own record)"
                f"{note}.")
    which = "; ".join(f"{x['system']} σ = {x['noise']:g} {x['approach']} seed {p['seed']} point {p['point']}: "
                      f"{_g(p.get('cpu_seconds'))} CPU s" for x, p in cut)
    return (f"**{len(cut)} of {len(recorded)} training runs stopped at their wall-time ceiling** (a loaded machine: "
            f"raise --wall-ceiling, or run with fewer --jobs){note}: {which}.")


def figures(summary: list[dict[str, Any]], out: Path, rows: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """Per system: error at t = 10 against batch-1 cost (filled: the rollout alone, open: amortised), one
    marker per (method, σ); and the plateau curves (the monitored validation score, ``_curve``, vs CPU seconds
    of the chosen run of every approach and seed, σ = 0). PNG and SVG under ``out``."""
    from ..plotting.style import figure, save_figure

    paths: list[Path] = []
    for system in [s for s in SYSTEMS if any(x["system"] == s for x in summary)]:
        mine = [x for x in summary if x["system"] == system]
        fig = figure(7.0, 3.4)
        ax = fig.add_subplot()
        for i, x in enumerate(sorted(mine, key=lambda x: (_order(x["method"]), x["noise"]))):
            c = x["horizons"].get(f"{TARGETS['t']:g}")
            if c is None or not math.isfinite(x["cost"]) or not math.isfinite(_num(c["median"])):
                continue
            color = f"C{_order(x['method']) % 10}"
            marker = "o" if x["noise"] == 0 else "s"
            label = x["method"] + ("" if x["noise"] == 0 else f", σ = {x['noise']:g}")
            ax.plot([x["cost"]], [c["median"]], marker=marker, color=color, linestyle="none", label=label)
            if math.isfinite(x["amortised_cost"]) and x["amortised_cost"] > x["cost"]:
                ax.plot([x["amortised_cost"]], [c["median"]], marker=marker, color=color, fillstyle="none",
                        linestyle="none")
                ax.plot([x["cost"], x["amortised_cost"]], [c["median"]] * 2, color=color, linewidth=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch-1 CPU s per unit time (open: training amortised)")
        ax.set_ylabel("median relative error at t = 10")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # beside, off the points
        paths += save_figure(fig, out / f"unknown_form_cost_{system}", formats=("png", "svg"), overwrite=True)
        fig = figure(5.0, 3.4)
        ax = fig.add_subplot()
        drawn = set()
        for r in rows:
            if r["system"] != system or float(r["noise"]) != 0 or not r.get("sweep"):
                continue
            for p in r["sweep"]:
                curve = p.get("curve") or {}
                if p["point"] != r.get("point") or not curve.get("cpu"):
                    continue
                color = f"C{_order(r['method']) % 10}"
                ax.plot(curve["cpu"], np.minimum.accumulate(np.asarray(curve["val"], float)), color=color,
                        linewidth=0.8, label=None if r["approach"] in drawn else r["approach"])
                drawn.add(r["approach"])
        if drawn:
            ax.set_yscale("log")
            ax.set_xlabel("training CPU seconds")
            ax.set_ylabel("best validation score so far")
            ax.legend(fontsize=6)
            paths += save_figure(fig, out / f"unknown_form_plateau_{system}", formats=("png", "svg"), overwrite=True)
    return paths


# --------------------------------------------------------------------------- command line


def _systems(value: Any) -> list[str]:
    names = [n.strip() for n in comma_list(value, "systems").split(",") if n.strip()]
    bad = [n for n in names if n not in SYSTEMS]
    if not names or bad:
        raise VPIntegratorError(f"systems must be a comma list out of {', '.join(SYSTEMS)}; got {value!r}",
                                key="systems")
    from ..config import distinct

    return distinct(names, "systems")


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
    systems: list[str] | None = key(None, optional=True, check=_systems, metavar="LIST")
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


def _run(a: argparse.Namespace) -> int:
    out = Path(a.out)
    check_out_dir(out)
    path = out / "unknown_form.json"
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the unknown_form study ships no pretrained model (its runs are under "
                         "OUT/runs)")
    if a.results is not None:  # the tables and figures of a results file (the shipped one by name), no runs
        def read(p: Path) -> list[dict[str, Any]]:
            data = read_json(p)
            if not isinstance(data, dict) or "rows" not in data:
                raise StudyError(f"--results: {p.name} is not this study's results (no 'rows'); give an "
                                 "unknown_form.json")
            return data["rows"]

        _, rows, text = redraw_from(out, a.results, read, lambda r: tables(summarize_rows(r, a.amortise_over)),
                                    figures="unknown_form_")
        figures(summarize_rows(rows, a.amortise_over), out, rows)
        print(text)
        return 0
    if a.table_only or a.figures_only:
        data = read_json(path)
        if data is None:
            raise StudyError(f"--table-only: {path} not found; give the --out of an earlier unknown_form study")
        rows = check_rows(data, path)
    else:
        size = QUICK if a.quick else DEFAULTS

        def pick(name: str) -> Any:
            return getattr(a, name) if getattr(a, name) is not None else size[name]

        seeds = a.seeds or ([0] if a.quick else [0, 1, 2, 3, 4])
        try:
            from ..rollout.sindy import require_pysindy

            require_pysindy("sindy+gauss_legendre4")
        except VPIntegratorError as err:
            raise StudyError(str(err)) from None
        systems = a.systems or list(SYSTEMS)
        if a.data is not None:
            check_data(Path(a.data), systems)
        line = plan_line(plan(systems, seeds, pick("noise"), float(pick("budget_seconds")), pick("sweep"), a.jobs))
        print(line, flush=True)
        if a.estimate:
            return 0
        out.mkdir(parents=True, exist_ok=True)
        previous = read_json(path) or {}
        if previous:  # merged with the new rows below: checked first
            check_rows(previous, path)
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])  # no absolute path of the install

        def save(new: list[dict[str, Any]]) -> None:  # after every (seed, system, σ): nothing finished is lost
            write_json(path, {"commands": [*previous.get("commands", []), command],
                              "rows": merge_rows(previous.get("rows", []), new)})

        caps = dict(MAX_STEPS_QUICK if a.quick else MAX_STEPS)
        if a.max_steps is not None:
            caps = {opt: int(a.max_steps) for opt in caps}
        rule = StopRule(a.budget, int(a.patience), caps)
        print(f"unknown_form stop rule: {rule.describe()}", flush=True)
        try:
            new = run_study(out, systems, seeds, pick("noise"), n_train=pick("n_train"),
                            n_test=pick("n_test"), budget=float(pick("budget_seconds")), sweep=pick("sweep"),
                            jobs=a.jobs, ceiling=a.wall_ceiling, data=None if a.data is None else Path(a.data),
                            overwrite=a.overwrite, save=save, rule=rule)
        except subprocess.CalledProcessError as exc:
            what = exc.cmd[exc.cmd.index("--out") + 1] if "--out" in exc.cmd else " ".join(exc.cmd)
            raise StudyError(f"{Path(exc.cmd[2]).name if len(exc.cmd) > 2 else 'a step'} of {what} failed (exit "
                             f"{exc.returncode}; its message is above); fix it and run the same command again "
                             f"(finished runs are kept)") from None
        save(new)
        rows = merge_rows(previous.get("rows", []), new)
    summary = summarize_rows(rows, a.amortise_over)
    text = tables(summary)
    write_text(out / "unknown_form.md", text)
    figures(summary, out, rows)
    print(text)
    return 0


def run(a: argparse.Namespace) -> int:
    """The study from its resolved options (``STUDY``); bad input is a one-line ``StudyError``."""
    try:
        return _run(a)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


#: the study as the runner runs it (``vp-study unknown_form``, ``python -m vpintegrator.studies.unknown_form``)
STUDY = Study(UnknownFormOptions, run, doc=__doc__, required=("out",), prog="vp-study unknown_form",
              error_prefix="unknown_form study: error: ",
              interrupted="unknown_form study: interrupted; run the same command again (finished runs, those with "
                          "a complete.json, are kept)")


if __name__ == "__main__":
    from .driver import main as _main

    raise SystemExit(_main(STUDY))
