"""The rigid-body study's setup constants, the numbers it extracts from a run directory, its results table
(``results.md``/``results.json``) and its CPU-timing summary (``timing/timing.json``, ``timing.md``).

See ``vpintegrator.studies.rigid_body`` for the study itself. Every read of a rollout file goes through
``vpintegrator.studies._rollouts``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..rundir import read_log
from . import _rollouts, attention
from .runner import StudyError
from .schema import INTERVAL, STAT, Each, Either, Obj, ResultsSchema, Values, read_results as read_checked
from .stats import (bootstrap_ci, fmt_num, md_row, md_table, median_interval, read_json, results_provenance,
                    summarize, write_if_changed, write_json, write_text)
from ..quantiles import median

IM_MODELS = ("vpff", "vpt", "vpt_arb", "st")
ALL_MODELS = (*IM_MODELS, "vpt_exact")
QUICK_MODELS = ("vpff", "vpt", "st")  # the README main job: the three shipped kinds
INTEGRATORS = ("implicit_midpoint", "gauss_legendre4", "rk4", "splitting")
#: the paper's "trajectory 1" (sin 1.1, 0, cos 1.1) and "trajectory 4" (0, sin 1.1, cos 1.1): rows of im.h5
PAPER_TRAJ = {"traj1": 100, "traj4": 719}
HELDOUT_SEED = 20251  # the sampler seed of the held-out ICs; training uses the deterministic paper set
#: the paper's VPT training loss (≈ 5e-4): the "time to target" column is the time to reach it
LOSS_TARGET = 5e-4
#: the quality targets set to beat the paper's VPT (error ≈ 0.2–0.3, band ≤ 5e-3 at t = 100):
BAND_TARGET = 1e-3  # ||z|| within 1 ± 0.001 on [0, 100]
ERROR_TARGET = 0.05  # relative error at t = 100
PAPER_T = 100.0
DT = 0.2
PAPER_REF = "Brantner, de Romemont, Kraus, Li, ESAIM Proc. 81 (2025), arXiv 2312.11166"
REFERENCE = ("the exact flow (DOP853, rtol = atol = 1e-12: vp-rollout's default), never the data's generator; "
             "implicit midpoint, which made the training data, is a row with its true error")

#: the paper's numbers (arXiv 2312.11166: the rigid-body section's training table, figures and CPU
#: timings). Strings where the paper gives a range or a figure reading, numbers where it gives a value.
PAPER: dict[str, Any] = {
    "vpt": {"train_loss": "≈ 5e-4", "train_time": "5 h 59 min (RTX 4090, 500 000 epochs)",
            "band": "≤ 5e-3 (traj 1)", "err100": "≈ 0.2–0.3", "cpu_50000": 0.71},
    "vpff": {"train_loss": "≈ 5e-4", "train_time": "4 h 02 min (RTX 4090)",
             "band": "≈ 7e-2 (drifts to 0.93)", "err100": "≈ 1.1–1.3", "cpu_50000": 6.44},
    "st": {"train_loss": "≈ 5e-2", "train_time": "3 h 58 min (RTX 4090)",
           "band": "≈ 0.6 (grows to 1.6)", "err100": "—", "cpu_50000": 0.20},
    "implicit_midpoint": {"band": "0 (exactly 1)", "err100": "0 (the reference)", "cpu_50000": 2.51},
}

COLUMNS = {
    # key: (heading, models only)
    "train_loss_best": ("train loss (best.pt epoch)", True),
    "time_to_target": (f"CPU s to train loss ≤ {LOSS_TARGET:g}", True),
    "train_time": ("training CPU s", True),
    "best_val": ("best validation", True),
    "band_traj1": ("‖z‖ band traj 1", False),
    "band_traj4": ("‖z‖ band traj 4", False),
    "err100_traj1": ("rel. error t = 100 traj 1", False),
    "err100_traj4": ("rel. error t = 100 traj 4", False),
    "vpt_traj1": ("valid pred. time traj 1", False),
    "vpt_traj4": ("valid pred. time traj 4", False),
    "heldout_mean": ("held-out rel. error t = 100, mean", False),
    "heldout_median": ("held-out rel. error t = 100, median", False),
    "long_energy": ("max rel. energy drift (long)", False),
    "long_casimir": ("max rel. Casimir drift (long)", False),
    "long_cum_logdet": ("max abs. cum. log det J (long)", False),
    "cpu_marginal": ("CPU s to timing t_end (steps only)", False),
    "cpu_process": ("CPU s to timing t_end (whole process)", False),
}


def _num(x, digits: int = 3) -> str:
    return fmt_num(x, digits)


# --------------------------------------------------------------------------- timing


#: the smallest CPU difference (as a fraction of the short run's whole-process CPU) taken as the steps' cost
RESOLUTION = 0.05


def write_timing(run: str | Path, t_end: float | None = None) -> dict[str, Any]:
    """Collect the timing runs of ``run`` into ``timing/timing.json`` and ``timing/timing.md``; return the dict.

    Per method: the child process's CPU seconds (user + sys, ``wait4``) and wall seconds for the run to
    ``t_end`` and for the short run to ``t_end / 10``; ``cpu_marginal_s`` = the CPU cost of the steps alone,
    extrapolated to ``t_end`` from the difference of the two (start-up, imports, model loading and tracing
    taken out), None (``cpu_marginal_note``: "below resolution") when that difference is within
    ``RESOLUTION`` of the short run's CPU, i.e. not resolved by two process measurements; ``engine_s`` = the rollout engine's own seconds per step (the csv's
    ``seconds_per_step``: CPU seconds of the rolling-out thread, wall seconds in files written before the engine
    timed CPU) times the steps.
    """
    run = Path(run)
    td = run / "timing"
    out: dict = {"t_end": t_end, "dt": DT, "trajectory": PAPER_TRAJ["traj1"], "batch": 1, "methods": {}}
    labels = [csv_.stem for csv_ in sorted(td.glob("*.csv")) if not csv_.stem.endswith("_short")]
    order = {m: i for i, m in enumerate((*ALL_MODELS, *INTEGRATORS))}
    labels.sort(key=lambda m: order.get(m, 99))
    n_steps = int(round((t_end or 0.0) / DT)) if t_end else None
    for label in labels:
        full = read_json(run / ".tasks" / f"timing_{label}.json")
        short = read_json(run / ".tasks" / f"timing_{label}_short.json")
        row = _rollouts.metrics_table(td / f"{label}.csv")[0]
        short_csv = td / f"{label}_short.csv"
        short_rows = _rollouts.metrics_table(short_csv) if short_csv.exists() else None
        entry = {"seconds_per_step": row.get("seconds_per_step"), "failed": row.get("failed")}
        if full:
            entry.update(cpu_s=full["cpu_s"], wall_s=full["wall_s"])
        if full and short:
            entry.update(cpu_short_s=short["cpu_s"], wall_short_s=short["wall_s"])
            if n_steps:
                n_short = int(round(max(t_end / 10.0, 2.0) / DT))
                diff = full["cpu_s"] - short["cpu_s"]
                # the difference of two whole-process CPU times resolves the steps' cost only when it stands
                # clear of the start-up's run-to-run noise (RESOLUTION of the short run's CPU); below that it
                # can even be negative (the quick job's -0.009 s), so it is not reported: engine_s stands
                if diff > RESOLUTION * short["cpu_s"]:
                    entry["cpu_marginal_s"] = diff / max(n_steps - n_short, 1) * n_steps
                else:
                    entry["cpu_marginal_s"] = None
                    entry["cpu_marginal_note"] = "below resolution"
        if n_steps and isinstance(row.get("seconds_per_step"), float):
            entry["engine_s"] = row["seconds_per_step"] * n_steps
        if short_rows:
            entry["seconds_per_step_short"] = short_rows[0].get("seconds_per_step")
        entry["paper_julia_s"] = PAPER.get(label, {}).get("cpu_50000")
        out["methods"][label] = entry
    if not out["methods"]:
        return out
    write_json(td / "timing.json", out)
    lines = [f"CPU seconds to t = {t_end:g} ({n_steps} steps), trajectory 1, batch 1, one process per method, "
             "OMP_NUM_THREADS=1.\n",
             *md_table(["method", "process CPU s", "process wall s", "CPU s without start-up", "engine CPU s",
                        "paper (Julia, t = 50 000) s"],
                       [[label, _num(e.get("cpu_s")), _num(e.get("wall_s")), _num(e.get("cpu_marginal_s")),
                         _num(e.get("engine_s")), _num(e.get("paper_julia_s"))]
                        for label, e in out["methods"].items()])]
    if any(e.get("cpu_marginal_note") for e in out["methods"].values()):
        lines += ["", f"'—' without start-up: the two runs' CPU times differ by less than {RESOLUTION:.0%} of the "
                  "short run's, so the steps' own cost is below what two process measurements resolve; the engine's "
                  "CPU seconds (timed around the steps) stand for it."]
    write_text(td / "timing.md", "\n".join(lines) + "\n")
    return out


# --------------------------------------------------------------------------- values of one run


def write_heldout_spec(path: Path, n: int, seed: int, method: str, study: str) -> Path:
    """The held-out ICs' spec of a rigid-body study (a small TOML, so the data can be remade): ``n`` ICs uniform
    on the unit sphere with ``seed`` (no training run uses it: training uses the paper's deterministic 1238
    points), h = DT, t ∈ [0, PAPER_T], integrated by ``method``."""
    import json

    from vpintegrator.data import load_spec

    inertia = load_spec("rigid_body_paper").params["inertia"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(path, f"""\
# Held-out initial conditions of {study}: uniform on the unit sphere with a seed no training run uses
# (training uses the paper's deterministic 1238 points).
description = "Rigid body, {n} held-out random initial conditions on the unit sphere (seed {seed}), dt = {DT}, t in [0, {PAPER_T:g}]"

[system]
name = "rigid_body"
inertia = {json.dumps(inertia)}

[initial_conditions]
sampler = "sphere"
n_traj = {n}
radius = 1.0

[integration]
dt = {DT}
t_end = {PAPER_T!r}
method = "{method}"
rtol = 1e-12
atol = 1e-12
seed = {seed}
""")
    return path


def z_band(y: Any) -> Any:
    """max over t of | ||z(t)|| − 1 | per trajectory (inf where the rollout failed).

    Parameters
    ----------
    y : ndarray, shape (n_traj, n_steps, 3)
    """
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore"):
        dev = np.abs(np.linalg.norm(np.asarray(y, dtype=np.float64), axis=-1) - 1.0)
    dev = np.where(np.isfinite(dev), dev, np.inf)
    return dev.max(axis=1)


def _seeds(run: Path) -> list[int]:
    seeds = set()
    for name in [p.stem for p in (run / "rollout").glob("paper_s*.h5")] + [p.name for p in (run / "train").glob("*_s*")]:
        try:
            seeds.add(int(name.rsplit("_s", 1)[1]))
        except ValueError:
            pass
    return sorted(seeds)


def training_budget(run_dir: Path) -> dict[str, Any] | None:
    """How a vp-train run used its budget, as the run recorded it: ``{"cpu_s", "cpu_budget_s", "wall_s",
    "wall_limit_s", "stopped", "stop_clock", "wall_limited"}``. ``stopped`` and ``stop_clock`` are
    ``summary.json``'s (the training loop's own record of why it stopped and, at a time limit, by which
    clock: ``"cpu"`` or ``"wall"``); ``wall_limited`` is true when its wall-time ceiling stopped it
    (``stopped = "time_limit"`` with ``stop_clock = "wall"``), None when the run predates the record (no
    ``stop_clock``: not known, never guessed from the seconds). None without a summary or config."""
    from .._toml import tomllib

    summary = read_json(run_dir / "summary.json")
    try:
        config = tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if summary is None:
        return None
    budget, wall_limit = config.get("cpu_time_limit"), config.get("time_limit")
    stopped = summary.get("stopped")
    if stopped != "time_limit":
        limited: bool | None = False
    elif "stop_clock" in summary:
        limited = summary["stop_clock"] == "wall"
    else:
        limited = None  # written before the loop recorded its clock
    return {"cpu_s": summary.get("cpu_time"), "cpu_budget_s": None if budget is None else float(budget),
            "wall_s": summary.get("wall_time"), "wall_limit_s": None if wall_limit is None else float(wall_limit),
            "stopped": stopped, "stop_clock": summary.get("stop_clock"), "wall_limited": limited,
            "steps": summary.get("steps"), "stop_rule": summary.get("stop_rule")}


def stop_text(b: dict[str, Any]) -> str:
    """How one run stopped, in words, from its record (``training_budget``)."""
    stopped = b.get("stopped")
    if stopped == "time_limit":
        clock = b.get("stop_clock")
        return {"cpu": "CPU budget", "wall": "wall ceiling"}.get(str(clock), "time limit (clock not recorded)")
    return {"early_stopping": "plateau (patience)", "steps": "step budget", "epochs": "epochs"}.get(
        str(stopped), str(stopped))


def budget_lines(budgets: list[dict[str, Any]]) -> list[str]:
    """The results' lines on how the trainings stopped (``budgets``: ``training_budget`` with ``model`` and
    ``seed``), read from each run's record (``summary.json`` ``stopped`` and ``stop_clock``): how many
    stopped by each rule, and the runs a wall ceiling stopped with the CPU seconds they used."""
    if not budgets:
        return []
    counts: dict[str, int] = {}
    for b in budgets:
        counts[stop_text(b)] = counts.get(stop_text(b), 0) + 1
    how = ", ".join(f"{n} by their {what}" if what in ("CPU budget", "wall ceiling", "step budget") else f"{n} at {what}"
                    for what, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    cut = [b for b in budgets if b["wall_limited"]]
    if not cut:
        return [f"How the {len(budgets)} trainings stopped (each run's summary.json): {how}.", ""]
    runs = "; ".join(f"{b['model']} seed {b['seed']}: {_cpu(b)} ({b['wall_s']:.0f} s wall)" for b in cut)
    return [f"**{len(cut)} of {len(budgets)} trainings stopped at their wall-time ceiling** (a loaded machine: raise "
            f"--wall-ceiling, run with fewer --jobs, or stop by --budget plateau): {runs}. How the {len(budgets)} "
            f"trainings stopped (each run's summary.json): {how}.", ""]


def _cpu(b: dict[str, Any]) -> str:
    used = "?" if b.get("cpu_s") is None else f"{b['cpu_s']:.0f}"
    return f"{used} of {b['cpu_budget_s']:g} CPU s" if b.get("cpu_budget_s") else f"{used} CPU s"


def _training_values(run_dir: Path) -> dict:
    """Training numbers of one vp-train run directory (empty if it is missing)."""
    summary = read_json(run_dir / "summary.json")
    if summary is None or not (run_dir / "log.csv").exists():
        return {}
    log = read_log(run_dir / "log.csv")
    best_epoch = int(summary.get("best_epoch") or 0)
    at_best = next((r for r in log if int(r["epoch"]) == best_epoch), log[-1] if log else None)
    first = next((r for r in log if r.get("train_loss", math.inf) <= LOSS_TARGET), None)
    return {
        "train_loss_best": at_best["train_loss"] if at_best else math.nan,
        "train_loss_last": summary.get("train_loss"),
        # CPU seconds where the log has them (cpu_seconds), else the wall seconds of an older log; None: not reached
        "time_to_target": (first.get("cpu_seconds", first["seconds"]) if first else None),
        "train_time": summary.get("cpu_time", summary.get("wall_time")),
        "best_val": summary.get("best_loss"),
        "monitor": summary.get("monitor", "?"),
        "epochs": summary.get("epochs"),
        "n_params": summary.get("n_params"),
    }


def _errors_at(r, label: str, k: int):
    """A method's relative errors ``(n_traj, n)`` and, at state ``k``, per trajectory (NaN -> inf: blown up)."""
    import numpy as np

    rel = r.metrics[label].rel_error
    return rel, np.where(np.isnan(rel[:, k]), np.inf, rel[:, k])


def rollout_values(path: Path, labels: Any = None) -> dict[str, Any]:
    """label -> per-trajectory numbers of a paper-style rollout (trajectories 1 and 4); ``labels`` None:
    every method of the file."""
    import numpy as np

    from vpintegrator.metrics import valid_prediction_time

    r = _rollouts.read(path)
    if r is None:
        return {}
    pos = {name: int(np.flatnonzero(r.traj_index == idx)[0]) for name, idx in PAPER_TRAJ.items()
           if np.any(r.traj_index == idx)}
    k100 = int(np.argmin(np.abs(r.t - PAPER_T)))
    in_band = r.t <= PAPER_T + 1e-9
    out = {}
    for label in r.methods if labels is None else labels:
        m = r.methods.get(label)
        if m is None:
            continue
        rel, err = _errors_at(r, label, k100)
        band = z_band(m.y[:, in_band])
        vpt = valid_prediction_time(rel[:, in_band], r.t[in_band])
        v = {}
        for name, i in pos.items():
            v[f"band_{name}"] = float(band[i])
            v[f"err100_{name}"] = float(err[i])
            v[f"vpt_{name}"] = float(vpt[i])
        row = next((x for x in r.table if x.get("method") == label), {})
        v["cum_logdet"] = row.get("max_abs_cum_log_det_J")
        out[label] = v
    return out


def _heldout_values(path: Path, labels) -> dict:
    """label -> the held-out numbers of one seed's rollout: mean and median error at t = 100, and per IC the
    error (``heldout_errors``) and the ‖z‖ band on [0, 100] (``heldout_bands``), for the per-IC statistics."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    k100 = int(np.argmin(np.abs(r.t - PAPER_T)))
    in_band = r.t <= PAPER_T + 1e-9
    out = {}
    for label in labels:
        m = r.methods.get(label)
        if m is None:
            continue
        _, err = _errors_at(r, label, k100)
        out[label] = {"heldout_mean": float(np.mean(err)), "heldout_median": median(err),
                      "heldout_failed": int(np.sum(m.failed_step >= 0)), "heldout_n": int(err.size),
                      "heldout_errors": [float(e) for e in err],
                      "heldout_bands": [float(b) for b in z_band(m.y[:, in_band])]}
    return out


PER_IC = ("heldout_errors", "heldout_bands")  # per-seed lists of per-IC values: heldout_statistics, not summarize


def heldout_statistics(errors: list[Any], bands: list[Any]) -> dict[str, Any]:
    """Over held-out ICs, from per-seed lists (one list of per-IC values per seed): the error at t = 100 and
    the ‖z‖ band, median and 10–90 % interval over every (seed, IC) pair; per seed the median error and band,
    whether that seed meets each target on the held-out conditions (its median within the bound) and the share
    of its ICs within both bounds; a bootstrap 95 % interval over seeds of the per-seed median error."""
    import numpy as np

    per_seed = []
    for e, b in zip(errors, bands):
        e, b = np.asarray(e, dtype=np.float64), np.asarray(b, dtype=np.float64)
        per_seed.append({"error": median(e), "band": median(b),
                         "error_met": bool(median(e) <= ERROR_TARGET), "band_met": bool(median(b) <= BAND_TARGET),
                         "share_within": float(np.mean((e <= ERROR_TARGET) & (b <= BAND_TARGET)))})
    return {"error": median_interval([v for e in errors for v in e]), "band": median_interval([v for b in bands for v in b]),
            "per_seed": per_seed, "error_ci": bootstrap_ci([p["error"] for p in per_seed])}


def _long_values(path: Path, labels) -> dict:
    r = _rollouts.read(path)
    if r is None:
        return {}
    out: dict = {}
    # a method has one table row per split label of its trajectories (vp-rollout's split column, e.g. traj1 in
    # the training split and traj4 in the test split): these columns are worst-trajectory values, so take the max
    for row in r.table:
        if row.get("method") not in labels:
            continue
        vals = {"long_energy": row.get("max_rel_drift_energy"), "long_casimir": row.get("max_rel_drift_casimir"),
                "long_cum_logdet": row.get("max_abs_cum_log_det_J")}
        prev = out.setdefault(row["method"], {**vals, "long_t_end": float(r.meta["t_end"])})
        for k, v in vals.items():
            if v is not None and (prev[k] is None or not v <= prev[k]):
                prev[k] = v
    return out


# --------------------------------------------------------------------------- the table


def build_results(run_dir: str | Path) -> dict[str, Any]:
    """Read a study's run directory and compute the results table (mean ± std over seeds).

    Returns
    -------
    dict
        ``rows`` (method -> column -> {mean, std, n, values}), ``columns``, ``paper``, ``targets`` (one
        dict per quality target, model and trajectory), ``meta``.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise StudyError(f"--out {run}: no such run directory")
    seeds = _seeds(run)
    models = [m for m in ALL_MODELS if any((run / "train" / f"{m}_s{s}").exists() for s in seeds)]
    per_seed: dict[str, dict[str, list]] = {}

    def put(method, key, value):
        per_seed.setdefault(method, {}).setdefault(key, []).append(value)

    labels = [*models, *INTEGRATORS]
    attention: list = []
    for s in seeds:
        for m in models:
            for k, v in _training_values(run / "train" / f"{m}_s{s}").items():
                if k in ("train_loss_best", "train_time", "best_val"):
                    put(m, k, v)
                elif k == "time_to_target":
                    put(m, k, v if v is not None else math.inf)
                elif k in ("monitor", "n_params"):
                    per_seed.setdefault(m, {})[f"_{k}"] = v
        paper = rollout_values(run / "rollout" / f"paper_s{s}.h5", labels)
        paper_exact = rollout_values(run / "rollout" / f"paper_exact_s{s}.h5", ["vpt_exact"])
        for label, vals in {**paper, **paper_exact}.items():
            for k, v in vals.items():
                if k != "cum_logdet":
                    put(label, k, v)
        held = _heldout_values(run / "rollout" / f"heldout_s{s}.h5", labels)
        held.update(_heldout_values(run / "rollout" / f"heldout_exact_s{s}.h5", ["vpt_exact"]))
        for part in (held, _long_values(run / "rollout" / f"long_s{s}.h5", labels)):
            for label, vals in part.items():
                for k, v in vals.items():
                    put(label, k, v)
        for m in models:
            att = read_json(run / "attention" / f"{m}_s{s}.json")
            if att:
                attention.append((f"{m} s{s}", att))
    timing = read_json(run / "timing" / "timing.json") or {}
    for label, e in timing.get("methods", {}).items():
        put(label, "cpu_marginal", e.get("cpu_marginal_s"))
        put(label, "cpu_process", e.get("cpu_s"))

    rows = {}
    for label in labels:
        src = per_seed.get(label, {})
        row: dict[str, Any] = {k: summarize(v) for k, v in src.items() if not k.startswith("_") and k not in PER_IC}
        if "time_to_target" in src:
            reached = [v for v in src["time_to_target"] if v is not None and math.isfinite(v)]
            row["time_to_target"] = {**summarize(reached), "reached": len(reached), "runs": len(src["time_to_target"])}
        for k in ("_monitor", "_n_params"):
            if k in src:
                row[k[1:]] = src[k]
        for k in ("heldout_n", "heldout_failed", "long_t_end"):
            if k in row:
                row[k] = row[k]["values"]
        if src.get("heldout_errors"):
            k = len(src["heldout_errors"]) if label in models else 1  # an integrator: the same run in every seed's file
            row["heldout"] = heldout_statistics(src["heldout_errors"][:k], src["heldout_bands"][:k])
        if row:
            rows[label] = row

    targets = []
    for label in models:
        row = rows.get(label, {})
        for traj in PAPER_TRAJ:
            for key, limit, what in ((f"band_{traj}", BAND_TARGET, "max |‖z‖−1| on [0, 100]"),
                                     (f"err100_{traj}", ERROR_TARGET, "relative error at t = 100")):
                st = row.get(key)
                if not st or not st["n"]:
                    continue
                seeds_met = sum(1 for v in st["values"] if v <= limit)
                targets.append({
                    "model": label, "traj": traj, "metric": what, "key": key, "limit": limit,
                    "mean": st["mean"], "std": st["std"], "n": st["n"],
                    "seeds_met": seeds_met,
                    # met: by every seed (a mean within the limit can hide a seed that misses it)
                    "met": seeds_met == st["n"] == len(st["values"]),
                    "mean_met": st["mean"] is not None and st["mean"] <= limit,
                    "ratio": (st["mean"] / limit) if st["mean"] is not None else None,
                })
    budgets = [{"model": m, "seed": s, **b} for s in seeds for m in models
               if (b := training_budget(run / "train" / f"{m}_s{s}")) is not None]
    meta = {"run": str(run), "seeds": seeds, "models": models, "integrators": list(INTEGRATORS),
            "timing_t_end": timing.get("t_end"), "reference": REFERENCE, "budgets": budgets}
    return {"meta": meta, "columns": {k: v[0] for k, v in COLUMNS.items()}, "rows": rows,
            "paper": PAPER, "targets": targets, "attention": attention}


def _cell(st: dict | None) -> str:
    if not st or not st.get("n"):
        if st and "runs" in st and st["runs"]:
            return f"not reached (0/{st['runs']})"
        return "—"
    text = _num(st["mean"])
    if st.get("std") is not None:
        text += f" ± {_num(st['std'], 2)}"
    n = st["n"]
    if "runs" in st:
        return text + (f" ({st['reached']}/{st['runs']} reached)" if st["reached"] < st["runs"] else f" (n={n})")
    return text + f" (n={n})"


def _heldout_section(rows: dict, methods: list, models: list) -> list[str]:
    """The held-out table: per-IC medians and 10–90 % intervals (all seeds), a bootstrap CI over seeds."""
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    body = []
    for m in methods:
        h = rows[m]["heldout"]
        e, b = h["error"], h["band"]
        lo, hi = h["error_ci"]
        n_seeds = len(h["per_seed"]) if m in models else 0
        body.append([m, str(n_seeds) if n_seeds else "–", f"{f(e['median'])} [{f(e['lo'])}, {f(e['hi'])}]",
                     f"[{f(lo)}, {f(hi)}]" if n_seeds > 1 and math.isfinite(lo) else "–",
                     f"{f(b['median'])} [{f(b['lo'])}, {f(b['hi'])}]"])
    n_ic = int(next(iter(rows[methods[0]].get("heldout_n", [0])), 0))
    return [f"## Held-out random initial conditions ({n_ic} on the unit sphere, never trained on), t = 100", "",
            "Error: relative error at t = 100 against the exact flow; band: max over t ≤ 100 of |‖z‖ − 1|; "
            "median [10–90 %] over every seed and IC (a blown-up rollout counts as inf); CI: bootstrap 95 % "
            "interval over seeds of each seed's median error. Integrators: one run (no seeds).", "",
            *md_table(["method", "seeds", "error median [10–90 %]", "CI over seeds", "‖z‖ band median [10–90 %]"],
                      body), ""]


def format_results(res: dict[str, Any]) -> str:
    """The results as Markdown: training table, rollout tables with the paper's numbers, targets."""
    rows, meta = res["rows"], res["meta"]
    models = [m for m in meta["models"] if m in rows]
    integ = [i for i in meta["integrators"] if i in rows]
    seeds = meta["seeds"]
    out = [f"# Rigid-body study: {meta['run']}", "",
           f"Seeds {', '.join(map(str, seeds))}; every value mean ± std over seeds (std with ddof = 1; n = seeds "
           "with that value). Reference of the relative errors: " + meta["reference"] + f". Paper: {PAPER_REF} "
           "(italic rows: its numbers for the rigid body).", ""]

    def table(title, keys, methods, paper_keys=None):
        out.extend([f"## {title}", ""])
        out.extend(md_table(["method", *(res["columns"][k] for k in keys)], []))
        for m in methods:
            extra = f" ({rows[m]['n_params']} p.)" if rows[m].get("n_params") else ""
            out.append(md_row([f"{m}{extra}", *(_cell(rows[m].get(k)) for k in keys)]))
            if paper_keys and m in PAPER:
                cells = [str(PAPER[m].get(paper_keys.get(k, ""), "")) for k in keys]
                if any(cells):
                    out.append(md_row([f"*paper {m}*", *cells]))
        out.append("")

    if models:
        mons = {rows[m].get("monitor") for m in models if rows[m].get("monitor")}
        table("Training", ["train_loss_best", "time_to_target", "train_time", "best_val"], models,
              {"train_loss_best": "train_loss", "train_time": "train_time"})
        out.append(f"Train loss: full training loss logged at the epoch of best.pt (the checkpoint rolled out); "
                   f"best validation: summary.json best_loss (monitor: {', '.join(sorted(mons)) or '?'}). "
                   f"Time to ≤ {LOSS_TARGET:g} (the paper's VPT training loss): `cpu_seconds` of the first log.csv "
                   "row at or below it (the training process's CPU time, one thread; a log written before "
                   "cpu_seconds was recorded gives its wall `seconds`); training: summary.json `cpu_time` "
                   "(`wall_time` for such runs).")
        out.append("")
        out.extend(budget_lines(meta.get("budgets", [])))
    table("The paper's trajectories 1 and 4 (in-sample: rows 100 and 719 of the training data), t ∈ [0, 100]", ["band_traj1", "band_traj4", "err100_traj1", "err100_traj4",
                                                "vpt_traj1", "vpt_traj4"], [*models, *integ],
          {"band_traj1": "band", "err100_traj1": "err100"})
    out.append("‖z‖ band: max over t ∈ [0, 100] of abs(‖z(t)‖ − 1) (the Casimir is ‖z‖²; inf: the rollout blew up). "
               "Valid prediction time: first t with relative error > 0.1.")
    out.append("")
    held = [m for m in [*models, *integ] if rows[m].get("heldout")]
    if held:
        out.extend(_heldout_section(rows, held, models))
    long_ = [m for m in [*models, *integ] if "long_energy" in rows[m] or "cpu_process" in rows[m]]
    if long_:
        lt = next((rows[m]["long_t_end"][0] for m in long_ if rows[m].get("long_t_end")), None)
        tt = meta.get("timing_t_end")
        out.append(f"Long run: trajectories 1 and 4 to t = {lt or math.nan:g} (worst of the two); cum. log det J: the "
                   f"volume change of all step/window maps, 0 for a volume-preserving map; inf for a map that is "
                   f"singular somewhere (det J = 0, log det J = −∞: its volume change is not defined, not 0, as for the "
                   f"standard transformer). CPU: t = {tt or math.nan:g}, "
                   f"trajectory 1, batch 1, one process per method, OMP_NUM_THREADS=1, seed {seeds[0] if seeds else '?'}'s "
                   "models (timing/timing.md); 'steps only' takes the process start-up out. Paper: Julia, t = 50 000.")
        out.append("")
        table("Long run and cost", ["long_energy", "long_casimir", "long_cum_logdet", "cpu_marginal", "cpu_process"],
              long_, {"cpu_marginal": "cpu_50000"})

    out.append("## Targets on held-out conditions, per seed (median over the held-out ICs within the bound)")
    out.append("")
    for m in (m for m in models if rows[m].get("heldout")):
        ps = rows[m]["heldout"]["per_seed"]
        both = sum(p["error_met"] and p["band_met"] for p in ps)
        shares = ", ".join(f"{p['share_within']:.0%}" for p in ps)
        out.append(f"- {m}: error ≤ {ERROR_TARGET:g} for {sum(p['error_met'] for p in ps)} of {len(ps)} seeds, band ≤ "
                   f"{BAND_TARGET:g} for {sum(p['band_met'] for p in ps)}, both for {both}; share of held-out ICs "
                   f"within both bounds per seed: {shares}")
    out.append("")
    out.extend(attention.section(res.get("attention", [])))
    out.append(f"## In-sample targets (the paper's trajectories): beat the paper's VPT (band ≤ {BAND_TARGET:g}, relative error at t = 100 ≤ {ERROR_TARGET:g}; "
               "paper: ≤ 5e-3 and ≈ 0.2–0.3)")
    out.append("")
    for t in res["targets"]:
        verdict = "met by every seed" if t["met"] else (
            f"NOT met ({t['n'] - t['seeds_met']} of {t['n']} seeds miss it"
            + (", though the mean is within)" if t.get("mean_met") else ")") if t["seeds_met"] else "NOT met")
        num = _num(t["mean"]) + (f" ± {_num(t['std'], 2)}" if t["std"] is not None else "")
        how = "" if t["met"] or t.get("mean_met") else (
            ", the rollout blew up" if not math.isfinite(t["ratio"] or math.nan) else f", the mean {t['ratio']:.2g}× the limit")
        lead = "**" if t["model"] == "vpt" else ""
        out.append(f"- {lead}{t['model']} {t['traj']}: {t['metric']} = {num} (n={t['n']}, {t['seeds_met']}/{t['n']} "
                   f"seeds within) vs ≤ {t['limit']:g}: {verdict}{how}{lead}")
    if not res["targets"]:
        out.append("- no rollouts yet")
    return "\n".join(out) + "\n"


#: a row of results.json (``vpintegrator.studies.schema``): one model or integrator, its metrics over seeds
_STATS = ("train_loss_best", "time_to_target", "train_time", "best_val", "band_traj1", "err100_traj1", "vpt_traj1",
          "band_traj4", "err100_traj4", "vpt_traj4", "heldout_mean", "heldout_median", "long_energy", "long_casimir",
          "long_cum_logdet", "cpu_marginal", "cpu_process")
ROW = Obj(optional={**{k: Either(("number?", STAT)) for k in _STATS},
                    **{k: Each("number?") for k in ("heldout_failed", "heldout_n", "long_t_end")},
                    "monitor": "str?", "n_params": "int?", "method": "str?",
                    "heldout": Obj(optional={"error": INTERVAL, "band": INTERVAL, "per_seed": Each("object"),
                                             "error_ci": Each("number?")})})
#: what results.json holds
SCHEMA = ResultsSchema("rigid_body", {
    "meta": "object", "columns": Values("str"), "rows": Values(ROW),
    "targets": Each(Obj(required={"model": "str", "key": "str"},
                        optional={"traj": "str?", "metric": "str?", "limit": "number?", "mean": "number?",
                                  "std": "number?", "n": "int?", "seeds_met": "int?", "met": "bool?",
                                  "mean_met": "bool?", "ratio": "number?"}))},
    fix="give the results.json of a vp-study rigid_body run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` this study wrote (the shipped one: ``docs/data/rigid_body_study.json``) as
    [`build_results`][vpintegrator.studies.rigid_body_results.build_results] gives it (±inf restored), so that
    [`format_results`][vpintegrator.studies.rigid_body_results.format_results] draws its tables without the run
    directory."""
    return read_checked(path, ("meta", "rows", "targets", "columns"), "vp-study rigid_body", SCHEMA)


def write_results(run_dir: str | Path) -> tuple[dict[str, Any], str]:
    """Build the results of ``run_dir`` and write ``results.json`` (strict JSON) and ``results.md``."""
    run = Path(run_dir)
    res = build_results(run)
    text = format_results(res)
    write_json(run / "results.json", {**res, "provenance": results_provenance(run)})
    write_text(run / "results.md", text)
    return res, text
