"""The rigid-body structure study's results: the numbers of each rollout file (errors, drifts, the energy drift's
growth), the targets met, the table and ``results.json`` (its schema, written and read back)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import _rollouts, attention
from ..rigid_body_results import PAPER_TRAJ, _errors_at
from ..runner import StudyError
from ..schema import Each, Obj, ResultsSchema, Values, numbers, read_results as read_checked
from ..stats import bootstrap_ci, drift_growth, fmt_num, md_table, median_interval, read_json, write_results_files
from ..work_precision import equal_cost_section
from .design import (CASIMIR_TARGET, DT, ENERGY_GROWTH_TARGET, EQUAL_COST_TITLE, HELDOUT_SEED, MEDIAN_TARGET,
                     P90_TARGET, ROUNDOFF, SHIPPED_VPT, T_EVAL)

def _drifts(r, label: str, name: str):
    """Relative drift of invariant ``name``, shape (n_traj, n); inf where blown up.

    The Casimir of a window model (T states to the next T) is measured against each state's own first-window
    value ([`vpintegrator.metrics.relative_drift`][vpintegrator.metrics.relative_drift] with ``period = T``): the first window comes from the exact
    flow (DOP853 at rtol 1e-12), whose own Casimir error is not the model's. Everything else against I(z_0).
    """
    import numpy as np

    from vpintegrator.metrics import relative_drift

    meta = r.methods[label].meta if label in r.methods else {}
    T = int(meta.get("seq_len", 1) or 1)
    period = (T if name == "casimir" and T > 1 and int(meta.get("pred_window", T) or T) == T
              and not meta.get("overlap") else None)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(relative_drift(r.metrics[label].invariants[name], period=period))
    return np.where(np.isfinite(d), d, np.inf)


def heldout_values(path: Path) -> dict[str, Any]:
    """label -> the t = 100 error over the held-out ICs (median, 10–90 %, mean, per IC) and the worst ‖z‖ band,
    Casimir and energy drift on [0, 100]."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    out = {}
    for label, m in r.methods.items():
        _, err = _errors_at(r, label, T_EVAL)
        out[label] = {**median_interval(err), "mean": float(np.mean(err)), "errors": [float(e) for e in err],
                      "casimir_100": float(_drifts(r, label, "casimir").max()),
                      "energy_100_heldout": float(_drifts(r, label, "energy").max()),
                      "failed": int(np.sum(m.failed_step >= 0)),
                      "seconds_per_step": float(m.meta.get("seconds_per_step", math.nan))}
    return out


def long_values(path: Path) -> dict[str, Any]:
    """label -> worst Casimir and energy drift to the file's horizon, the energy drift's growth (per IC its max
    over [0, t_end] over its max over [0, 100]; the worst IC) and its fit (``vpintegrator.studies.stats.drift_growth`` of the
    worst-IC envelope)."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    early = r.t <= T_EVAL + 1e-9
    out = {}
    for label in r.methods:
        e, c = _drifts(r, label, "energy"), _drifts(r, label, "casimir")
        with np.errstate(invalid="ignore", divide="ignore"):
            growth = e.max(axis=1) / e[:, early].max(axis=1)
        growth = np.where(np.isnan(growth), np.inf, growth)
        envelope = np.maximum.accumulate(e.max(axis=0))
        fit = drift_growth(r.t[1:], envelope[1:])
        if np.isfinite(envelope[-1]) and envelope[-1] <= ROUNDOFF:
            fit = {**fit, "kind": "round-off"}  # conserved to rounding: its growth is the rounding's
        out[label] = {"t_end": float(r.t[-1]), "casimir_long": float(c.max()), "energy_long": float(e.max()),
                      "energy_100": float(e[:, early].max()),
                      "energy_growth": float(growth.max()), "energy_fit": fit}
    return out


def paper_values(path: Path) -> dict[str, Any]:
    """label -> {traj1, traj4: t = 100 error} and the split labels of the two rows."""
    import numpy as np

    r = _rollouts.read(path)
    if r is None:
        return {}
    k = int(np.argmin(np.abs(r.t - T_EVAL)))
    pos = {name: int(np.flatnonzero(r.traj_index == idx)[0]) for name, idx in PAPER_TRAJ.items()
           if np.any(r.traj_index == idx)}
    out = {}
    for label in r.methods:
        rel = r.metrics[label].rel_error[:, k]
        splits = {row["split"] for row in r.table if row.get("method") == label and row.get("split")}
        out[label] = {**{name: float(rel[i]) for name, i in pos.items()}, "split": ",".join(sorted(splits))}
    return out


def _met(v: dict[str, Any]) -> dict[str, Any]:
    return {"error": v.get("median") is not None and v["median"] <= MEDIAN_TARGET and v["hi"] <= P90_TARGET,
            "casimir": v.get("casimir_long", math.inf) <= CASIMIR_TARGET,
            "energy": (v.get("energy_growth", math.inf) <= ENERGY_GROWTH_TARGET
                       or v.get("energy_long", math.inf) <= ROUNDOFF)}


def build_results(run: Path) -> dict[str, Any]:
    settings = read_json(run / "settings.json") or {}
    rd = run / "rollout"
    rows = []
    for d in sorted((run / "train").glob("*_s*"), key=lambda p: (p.name.rsplit("_s", 1)[0], int(p.name.rsplit("_s", 1)[1]))):
        model, seed = d.name.rsplit("_s", 1)
        summary = read_json(d / "summary.json") or {}
        v: dict[str, Any] = {"model": model, "seed": int(seed), "train_loss": summary.get("train_loss"),
             "val_score": summary.get("best_loss"), "best_epoch": summary.get("best_epoch"),
             "wall_time": summary.get("wall_time"), "n_params": summary.get("n_params"),
             "cpu_time": (read_json(run / ".tasks" / f"train_{d.name}.json") or {}).get("cpu_s")}
        v.update(heldout_values(rd / f"heldout_{d.name}.h5").get(model, {}))
        v.update(long_values(rd / f"long_{d.name}.h5").get(model, {}))
        v["paper"] = paper_values(rd / f"paper_{d.name}.h5").get(model, {})
        v["attention"] = read_json(run / "attention" / f"{model}_s{seed}.json")
        v["met"] = _met(v)
        rows.append(v)
    classical: dict[str, dict[str, Any]] = heldout_values(rd / "heldout_classical.h5")
    for label, lv in long_values(rd / "long_classical.h5").items():
        classical.setdefault(label, {}).update(lv)
    for v in classical.values():
        v["met"] = _met(v)
    per_model: dict[str, dict[str, Any]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        sel = [r for r in rows if r["model"] == model and r.get("median") is not None]
        per_model[model] = {
            "seeds": len(sel), **{f"met_{k}": sum(r["met"][k] for r in sel) for k in ("error", "casimir", "energy")},
            "met_all": sum(all(r["met"].values()) for r in sel),
            "median_ci": bootstrap_ci([r["median"] for r in sel]),
            "selected_seed": min(sel, key=lambda r: r["val_score"] if r["val_score"] is not None else math.inf)["seed"]
            if sel else None,
        }
    wp = rd / "work_precision_work_precision.csv"
    equal_cost = equal_cost_section(wp, title=EQUAL_COST_TITLE) if wp.is_file() else []
    return {"settings": {**settings, "run": str(run)}, "rows": rows, "classical": classical, "per_model": per_model,
            "equal_cost": equal_cost}


#: a row of results.json (``vpintegrator.studies.schema``): one model and seed
ROW = numbers("val_score", "median",
              optional=("train_loss", "wall_time", "cpu_time", "lo", "hi", "mean", "casimir_100", "energy_100_heldout",
                        "seconds_per_step", "t_end", "casimir_long", "energy_long", "energy_100", "energy_growth"),
              model="str", seed="int", met=Values("bool?"), n="int?", best_epoch="int?", n_params="int?", failed="int?",
              errors=Each("number?"), energy_fit="object?", paper="object?", attention="object?")
#: what results.json holds
SCHEMA = ResultsSchema("rigid_body_structure", {
    "settings": "object", "rows": Each(Obj(required={"model": "str", "seed": "int", "met": Values("bool?"),
                                                     **ROW.required}, optional=ROW.optional)),
    "classical": Values(numbers(optional=("median", "lo", "hi", "mean"), n="int?", errors=Each("number?"))),
    "per_model": Values("object")}, fix="give the results.json of a vp-study rigid_body_structure run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` this study wrote (the shipped one: ``docs/data/rigid_body_structure_study_plateau.json``) as
    [`build_results`][vpintegrator.studies.rigid_body_structure.build_results] gives it (±inf restored), so that
    [`format_results`][vpintegrator.studies.rigid_body_structure.format_results] draws its tables without the
    run directory."""
    return read_checked(path, ("settings", "rows", "classical", "per_model"),
                             "vp-study rigid_body_structure", SCHEMA)


def summary_section(res: dict[str, Any]) -> list[str]:
    """``## Summary`` (``vpintegrator.studies.summary_table``): on the held-out initial conditions, the most accurate
    learned map (data only; per model the median over seeds of its median error), the most accurate of the VPT family
    and the most accurate classical method (the full-order row), each with its median error at t = 100 (no cost
    column: the rows hold one rollout's wall seconds per step, no metered cost)."""
    from ...quantiles import median
    from ..summary_table import summary_table

    def med(values: list[Any]) -> float | None:
        vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        return median(vals) if vals else None

    entries = [{"name": m, "model": True, "error": med([r.get("median") for r in res["rows"] if r["model"] == m])}
               for m in dict.fromkeys(r["model"] for r in res["rows"])]
    entries += [{"name": label, "model": label == "vpt_shipped", "error": v.get("median")}
                for label, v in res["classical"].items()]
    kinds = {"data only": lambda e: e["model"], "VPT family": lambda e: e["model"] and e["name"].startswith("vpt"),
             "full order": lambda e: not e["model"]}
    return ["## Summary", "", *summary_table(
        [(f"rigid body, {res['settings'].get('n_heldout', '?')} held-out ICs", entries)], list(kinds),
        lambda e: [k for k, pick in kinds.items() if pick(e)], lambda e: e["error"], None, lambda e: e["name"],
        f"at t = {T_EVAL:g}", "median relative error; a model's: the median over its seeds")]


def format_results(res: dict[str, Any]) -> str:
    s = res["settings"]
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    t_long = s.get("long_t_end", 10000.0)
    head = ["model", "seed", "train s (CPU s)", "val score", "err t=100 median [10–90 %]", "mean", "Casimir drift (long)",
            "energy drift t≤100", f"energy drift t≤{t_long:g}", "growth", "fit", "traj 1 / 4 (split)", "targets"]

    def cells(name, seed, v):
        fit = (v.get("energy_fit") or {})
        paper = v.get("paper") or {}
        met = v.get("met") or {}
        cpu = f" ({f(v['cpu_time'])})" if v.get("cpu_time") is not None else ""
        return [name, seed, f(v.get("wall_time")) + cpu, f(v.get("val_score")),
                f"{f(v.get('median'))} [{f(v.get('lo'))}, {f(v.get('hi'))}]", f(v.get("mean")),
                f(v.get("casimir_long")), f(v.get("energy_100")), f(v.get("energy_long")), f(v.get("energy_growth")),
                f"{fit.get('kind') or '–'} (p = {f(fit.get('exponent'))})",
                (f"{f(paper.get('traj1'))} / {f(paper.get('traj4'))} ({paper.get('split', '')})" if paper else "–"),
                " ".join(k for k in ("error", "casimir", "energy") if met.get(k)) or "none"]

    body = [cells(r["model"], str(r["seed"]), r) for r in res["rows"]]
    body += [cells(label, "–", v) for label, v in res["classical"].items()]
    lines = [
        "# Rigid body: structure-preserving learned maps on held-out initial conditions", "",
        f"Training: the paper's 1238 ICs by the exact flow (DOP853, rtol = atol = 1e-12), h = {DT}, t ∈ [0, 20]; "
        + (f"Levenberg–Marquardt per model and seed on one thread to its validation plateau (patience "
           f"{s.get('patience')} epochs) or a step budget of {s.get('train_seconds', '?')} CPU s in measured epoch costs "
           f"({', '.join(f'{m} {n}' for m, n in (s.get('step_budgets') or {}).items())} steps); best.pt by the "
           if s.get("budget") == "plateau" else
           f"{s.get('train_seconds', '?')} s (wall) of Levenberg–Marquardt per model and seed on one thread (the CPU "
           "seconds each got beside it); best.pt by the " if s.get("budget", "wall") == "wall" else
           f"{s.get('train_seconds', '?')} CPU s (wall ceiling {s.get('wall_ceiling')}x) of Levenberg–Marquardt per "
           "model and seed on one thread (the wall seconds each took beside it); best.pt by the ")
        + "validation trajectories' rollout (error at t = 100 + 50 × worst invariant drift). Evaluation: "
        f"{s.get('n_heldout', '?')} held-out ICs uniform on the unit sphere (seed {HELDOUT_SEED}, never trained on), "
        f"errors ‖y − y_exact‖/‖y_exact‖ against the exact flow at t = {T_EVAL:g}; long runs: the first "
        f"{s.get('n_long', '?')} of them to t = {t_long:g}. Drifts are relative, worst IC. 'growth' = max energy "
        f"drift over [0, {t_long:g}] / over [0, 100] (worst IC); 'fit' = the slope p of log(envelope) against log t "
        "over the later half (bounded if p < 0.25; round-off: the drift stays below 1e-12, conserved to rounding). Traj 1 / 4: the paper's rows 100 / 719 of the training file "
        "(split = the model's own split label: in-sample unless test). Classical methods and the shipped VPT "
        f"(`{SHIPPED_VPT}`, trained on implicit-midpoint data) at the same step h = {DT}.", "",
        f"Targets per seed: median error ≤ {MEDIAN_TARGET} and 90th percentile ≤ {P90_TARGET} ('error'), Casimir "
        f"drift ≤ {CASIMIR_TARGET:g} to t = {t_long:g} ('casimir'), growth ≤ {ENERGY_GROWTH_TARGET:g} or the energy "
        f"drift below {ROUNDOFF:g} throughout ('energy').", "",
        *summary_section(res),
        *md_table(head, body), "",
    ]
    for model, pm in res["per_model"].items():
        lo, hi = pm["median_ci"]
        lines.append(f"- {model}: error target met by {pm['met_error']} of {pm['seeds']} seeds, Casimir by "
                     f"{pm['met_casimir']}, energy growth by {pm['met_energy']}, all three by {pm['met_all']}; "
                     f"median error over seeds, bootstrap 95 % interval [{f(lo)}, {f(hi)}]; the validation score "
                     f"selects seed {pm['selected_seed']}")
    if res.get("equal_cost"):
        lines += ["", *res["equal_cost"],
                  "Figure: `figures/work_precision/` (error and invariant drift against cost; the first seed's models "
                  "and the shipped VPT as points).", ""]
    lines += ["", *attention.section((f"{r['model']} s{r['seed']}", r.get("attention")) for r in res["rows"])]
    lines += ["", "## Commands", "", "```sh", *s.get("commands", []), "```", ""]
    return "\n".join(lines)


def write_results(run: Path) -> str:
    res = build_results(run)
    if not res["rows"]:
        raise StudyError(f"{run}: no training runs (train/<model>_s<seed>); run the study first")
    return write_results_files(run, format_results(res), res)
