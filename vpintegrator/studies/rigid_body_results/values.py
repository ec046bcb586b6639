"""The numbers the rigid-body study reads from one run directory: its seeds, each training's values and how it
stopped, and each rollout file's band, errors and drifts. Every read of a rollout file goes through
``vpintegrator.studies._rollouts``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import _rollouts
from ...quantiles import median
from ...rundir import read_log
from ..stats import bootstrap_ci, median_interval, read_json
from .design import BAND_TARGET, ERROR_TARGET, LOSS_TARGET, PAPER_T, PAPER_TRAJ

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
    from ..._toml import tomllib

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
            "steps": summary.get("steps"), "stop_rule": summary.get("stop_rule"),
            # the plateau rule's trend verdict and LM's stuck stop: recorded by runs that wrote still_improving
            "still_improving": summary.get("still_improving"), "trend_recorded": "still_improving" in summary}


def stop_text(b: dict[str, Any]) -> str:
    """How one run stopped, in words, from its record (``training_budget``): a plateau stop whose score still
    fell clearly (``still_improving``) and Levenberg–Marquardt stuck at its damping cap (``lm_stuck``) say so."""
    stopped = b.get("stopped")
    if stopped == "time_limit":
        clock = b.get("stop_clock")
        return {"cpu": "CPU budget", "wall": "wall ceiling"}.get(str(clock), "time limit (clock not recorded)")
    if stopped == "early_stopping" and b.get("still_improving"):
        return STILL_IMPROVING
    return {"early_stopping": "plateau (patience)", "steps": "step budget", "epochs": "epochs",
            "lm_stuck": LM_STUCK}.get(str(stopped), str(stopped))


#: ``stop_text`` of a plateau stop whose trend still fell, and of Levenberg–Marquardt stuck at its damping cap
STILL_IMPROVING, LM_STUCK = "plateau (patience) while still improving", "LM damping stuck at its cap"


def stop_token(r: dict[str, Any]) -> str:
    """A run's stop as a study table keeps it (a row with ``stop_record``'s keys): ``summary.json``'s ``stopped``
    (``early_stopping``, ``steps``, ``time_limit``), but a plateau stop whose trend still fell and Levenberg–Marquardt
    stuck at its damping cap in ``stop_text``'s words (``STILL_IMPROVING``, ``LM_STUCK``), never ``lm_stuck`` raw."""
    text = stop_text(r)
    return text if text in (STILL_IMPROVING, LM_STUCK) else str(r.get("stopped"))


def stop_cell(stops: Any, empty: str = "—") -> str:
    """A study table's ``stopped`` cell: the distinct ``stop_token`` of a row's runs, in order (a results file
    written before the words were kept holds ``lm_stuck``: said the same way)."""
    return ", ".join(dict.fromkeys(stop_token({"stopped": s}) if s == "lm_stuck" else s for s in stops or ())) or empty


def stop_record(summary: dict[str, Any]) -> dict[str, Any]:
    """What a study's row keeps of a run's ``summary.json`` to say how it stopped (``stop_text``)."""
    return {k: summary.get(k) for k in ("stopped", "stop_clock", "still_improving")}


def budget_lines(budgets: list[dict[str, Any]]) -> list[str]:
    """The results' lines on how the trainings stopped (``budgets``: ``training_budget`` with ``model`` and
    ``seed``), read from each run's record (``summary.json`` ``stopped`` and ``stop_clock``): how many
    stopped by each rule, and the runs a wall ceiling stopped with the CPU seconds they used."""
    if not budgets:
        return []
    counts: dict[str, int] = {}
    for b in budgets:
        counts[stop_text(b)] = counts.get(stop_text(b), 0) + 1
    how = ", ".join(f"{n} by their {what}" if what in ("CPU budget", "wall ceiling", "step budget")
                    else f"{n} with their {what}" if what == LM_STUCK else f"{n} at {what}"
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


def _errors_at(r, label: str, t: float):
    """A method's relative errors ``(n_traj, n)`` and, at the state nearest time ``t``, per trajectory (NaN -> inf:
    blown up)."""
    import numpy as np

    rel, k = r.metrics[label].rel_error, int(np.argmin(np.abs(r.t - t)))
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
    in_band = r.t <= PAPER_T + 1e-9
    out = {}
    for label in r.methods if labels is None else labels:
        m = r.methods.get(label)
        if m is None:
            continue
        rel, err = _errors_at(r, label, PAPER_T)
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
    in_band = r.t <= PAPER_T + 1e-9
    out = {}
    for label in labels:
        m = r.methods.get(label)
        if m is None:
            continue
        _, err = _errors_at(r, label, PAPER_T)
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
