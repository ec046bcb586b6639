"""The unknown-form study's data and trainings: the vp-gen files (a noisy copy per σ), each approach's sweep
trained by vp-train under the stop rule, and the chosen point of each sweep (validation data only)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..._signals import run_child
from ...errors import VPIntegratorError
from ..stats import read_json
from .design import H, HORIZONS, RECIPES, SYSTEMS, VALIDATION, StopRule, phases

# --------------------------------------------------------------------------- data


def _vp_gen(spec: str, out: Path, n: int, t_end: float, seed: int) -> Path:
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "vpintegrator.cli.gen", spec, "--n-traj", str(n), "--t-end", f"{t_end:g}",
           "--dt", f"{H:g}", "--seed", str(seed), "--rtol", "1e-12", "--atol", "1e-12", "--out", str(out)]
    run_child(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def noisy_copy(clean: Path, sigma: float) -> Path:
    """The training file with one Gaussian draw of σ added to every state (seeded; written once)."""
    import dataclasses

    from ...data import read_trajectories, write_trajectories

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


def run_dir(out: Path, system: str, sigma: float, approach: str, point: int, seed: int) -> Path:
    return out / "runs" / f"{system}_noise{sigma:g}" / f"{approach}_p{point}_seed{seed}"



def train_one(data: Path, run: Path, approach: str, point: int, seed: int, budget: float, ceiling: float,
               overwrite: bool = False, rule: StopRule | None = None) -> Path:
    """``vp-train`` of one sweep point (each of its phases, ``_phases``, skipped when finished: its
    ``complete.json``, ``vpintegrator.rundir.is_complete``; an interrupted run is trained again; ``overwrite``
    retrains), each phase stopped by ``rule`` (default: ``StopRule()``, the plateau rule)."""
    from ...rundir import is_complete

    rule = rule if rule is not None else StopRule()
    model, optimizer, _, _ = RECIPES[approach]
    for path, phase, share in phases(run, approach, point):
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
    from ...rundir import CPU_COLUMN, ROLLOUT_COLUMN, read_log

    rows = [r for r in read_log(run / "log.csv") if CPU_COLUMN in r]
    return {"cpu": [r[CPU_COLUMN] for r in rows], "val": [r.get(ROLLOUT_COLUMN, r["val_loss"]) for r in rows]}


def point(out: Path, approach: str, p: int, run: Path) -> dict[str, Any]:
    """One finished sweep point: its phases' CPU seconds summed, its curve (the phases' curves end to end on
    the CPU axis), and the phase whose ``best.pt`` scored best on the validation trajectories (``model_run``)."""
    from ..rigid_body_results import stop_text, training_budget

    cpu: list[float] = []
    val: list[float] = []
    total, best_loss, model_run, n_params = 0.0, math.inf, run, None
    flags: list[bool | None] = []
    stopped: list[str] = []
    recorded: list[bool] = []  # per phase: its summary.json says whether a plateau still fell and LM got stuck
    for path, _, _ in phases(run, approach, p):
        s = read_json(path / "summary.json") or {}
        budget = training_budget(path)
        flags.append(None if budget is None else budget["wall_limited"])
        stopped.append("not recorded" if budget is None else stop_text(budget))
        recorded.append(budget is not None and bool(budget["trend_recorded"]))
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
            "wall_limited": wall_limited, "stopped": stopped, "trend_recorded": recorded,
            "curve": {"cpu": cpu, "val": val}}


def chosen(out: Path, approach: str, runs: Sequence[Path]) -> dict[str, Any]:
    """The sweep of ``approach`` from its finished runs (point i in ``runs[i]``) and the point with the lowest
    validation score (``summary.json`` ``best_loss``: the monitored validation rollout error)."""
    sweep = [point(out, approach, p, run) for p, run in enumerate(runs)]
    best = min(sweep, key=lambda r: r["best_loss"] if math.isfinite(r["best_loss"]) else math.inf)
    return {"run": out / best["model_run"], "point": best["point"], "sweep": sweep,
            "train_cpu": float(np.nansum([r["cpu_seconds"] for r in sweep]))}

