"""The rigid-body study's results: the table over seeds (``build_results``), its Markdown and ``results.json``
(its schema, written and read back)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import attention
from ..runner import StudyError
from ..schema import INTERVAL, STAT, Each, Either, Obj, ResultsSchema, Values, read_results as read_checked
from ..stats import fmt_num, md_row, md_table, read_json, summarize, write_results_files
from .design import (ALL_MODELS, BAND_TARGET, COLUMNS, ERROR_TARGET, INTEGRATORS, LOSS_TARGET, PAPER, PAPER_REF,
                     PAPER_TIMING_T, PAPER_TRAJ, REFERENCE)
from .values import (PER_IC, _heldout_values, _long_values, _seeds, _training_values, budget_lines, heldout_statistics,
                     rollout_values, training_budget)

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
        put(label, "cpu_meter", e.get("meter_paper_s"))
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
    metered: dict[str, Any] = next((e for e in timing.get("methods", {}).values() if e.get("meter_t_end")), {})
    cost_t_end: float | None = metered.get("meter_t_end")
    meta = {"run": str(run), "seeds": seeds, "models": models, "integrators": list(INTEGRATORS),
            "timing_t_end": timing.get("t_end"), "reference": REFERENCE, "budgets": budgets,
            "cost_t_end": metered.get("meter_t_end"), "cost_repeats": metered.get("meter_repeats")}
    columns = {k: v[0] for k, v in COLUMNS.items()}
    if cost_t_end is not None and cost_t_end != PAPER_TIMING_T:  # the heading says the figure is scaled, and from where
        columns["cpu_meter"] = (f"CPU s to t = {PAPER_TIMING_T:g}, steps only (cost meter; measured to "
                                f"t = {cost_t_end:g}, × {PAPER_TIMING_T / cost_t_end:g})")
    return {"meta": meta, "columns": columns, "rows": rows,
            "paper": PAPER, "targets": targets, "attention": attention}


def _cell(st: dict | None) -> str:
    if not st or not st.get("n"):
        if st and "runs" in st and st["runs"]:
            return f"not reached (0/{st['runs']})"
        return "—"
    text = fmt_num(st["mean"])
    if st.get("std") is not None:
        text += f" ± {fmt_num(st['std'], 2)}"
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


def summary_section(res: dict[str, Any]) -> list[str]:
    """``## Summary`` (``vpintegrator.studies.summary_table``): on the held-out initial conditions, the most accurate
    model (data only), the most accurate of the VPT family and the most accurate classical integrator (the true
    equations on the full state: the full-order row), each with its median error at t = 100 and its CPU seconds to
    t = 50 000, and the speed-up against that integrator; nothing before the held-out rollouts."""
    from ..summary_table import summary_table

    rows, meta = res["rows"], res["meta"]
    held = [m for m in [*meta["models"], *meta["integrators"]] if m in rows and rows[m].get("heldout")]
    if not held:
        return []
    metered = any("cpu_meter" in rows[m] for m in held)
    key = "cpu_meter" if metered else "cpu_marginal"

    def cost(m: str) -> float | None:
        st = rows[m].get(key)
        return st.get("mean") if isinstance(st, dict) else st

    kinds = {"data only": set(meta["models"]), "VPT family": {m for m in meta["models"] if m.startswith("vpt")},
             "full order": set(meta["integrators"])}
    n_ic = int(next(iter(rows[held[0]].get("heldout_n", [0])), 0))
    unit = f"CPU s to t = {PAPER_TIMING_T:g}, steps only" + ("" if metered else " (two processes' difference)")
    return ["## Summary", "", *summary_table(
        [(f"rigid body, {n_ic} held-out ICs", held)], list(kinds), lambda m: [k for k, ms in kinds.items() if m in ms],
        lambda m: rows[m]["heldout"]["error"]["median"], cost, str, "at t = 100",
        "median relative error over every seed and IC", unit)]


def format_results(res: dict[str, Any]) -> str:
    """The results as Markdown: training table, rollout tables with the paper's numbers, targets."""
    rows, meta = res["rows"], res["meta"]
    models = [m for m in meta["models"] if m in rows]
    integ = [i for i in meta["integrators"] if i in rows]
    seeds = meta["seeds"]
    out = [f"# Rigid-body study: {meta['run']}", "",
           f"Seeds {', '.join(map(str, seeds))}; every value mean ± std over seeds (std with ddof = 1; n = seeds "
           "with that value). Reference of the relative errors: " + meta["reference"] + f". Paper: {PAPER_REF} "
           "(italic rows: its numbers for the rigid body).", "", *summary_section(res)]

    def table(title, keys, methods, paper_keys=None):
        out.extend([f"## {title}", ""])
        out.extend(md_table(["method", *(res["columns"].get(k) or COLUMNS[k][0] for k in keys)], []))
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
        # a results file written before the cost meter priced these rows holds the difference of two processes
        old = not any("cpu_meter" in rows[m] for m in long_) and any("cpu_marginal" in rows[m] for m in long_)
        cost = "cpu_marginal" if old else "cpu_meter"
        if cost == "cpu_meter":
            ct = meta.get("cost_t_end") or math.nan
            how = (f"Cost: steps only, on the package's cost meter (vpintegrator.clock.meter): every row rolls out "
                   f"trajectory 1 at batch 1 to t = {ct:g} in one process, one cold call, then the minimum over "
                   f"{meta.get('cost_repeats') or '?'} interleaved rounds of the engine's thread CPU seconds "
                   f"(timing/cost.json), priced at the paper's horizon t = {PAPER_TIMING_T:g}"
                   + ("" if ct == PAPER_TIMING_T else f" (× {PAPER_TIMING_T / ct:g}, per step as measured)")
                   + f"; whole process: one vp-rollout of the row to t = {tt or math.nan:g} (interpreter start-up, "
                   "imports, model loading and the steps; timing/timing.md). OMP_NUM_THREADS=1, seed "
                   f"{seeds[0] if seeds else '?'}'s models. Paper: Julia, t = 50 000.")
        else:
            how = (f"CPU: t = {tt or math.nan:g}, trajectory 1, batch 1, one process per method, OMP_NUM_THREADS=1, "
                   f"seed {seeds[0] if seeds else '?'}'s models (timing/timing.md); 'steps only' takes the process "
                   "start-up out as the difference of two whole-process CPU times, a run to t_end and one to t_end/10 "
                   "(a file written before the cost meter priced these rows). Paper: Julia, t = 50 000.")
        out.append(f"Long run: trajectories 1 and 4 to t = {lt or math.nan:g} (worst of the two); cum. log det J: the "
                   f"volume change of all step/window maps, 0 for a volume-preserving map; inf for a map that is "
                   f"singular somewhere (det J = 0, log det J = −∞: its volume change is not defined, not 0, as for the "
                   f"standard transformer). {how}")
        out.append("")
        table("Long run and cost", ["long_energy", "long_casimir", "long_cum_logdet", cost, "cpu_process"],
              long_, {cost: "cpu_50000"})

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
        num = fmt_num(t["mean"]) + (f" ± {fmt_num(t['std'], 2)}" if t["std"] is not None else "")
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
          "long_cum_logdet", "cpu_meter", "cpu_marginal", "cpu_process")  # cpu_marginal: files before the cost meter
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
    """A ``results.json`` this study wrote (the shipped one: ``docs/data/rigid_body_study_plateau.json``) as
    [`build_results`][vpintegrator.studies.rigid_body_results.build_results] gives it (±inf restored), so that
    [`format_results`][vpintegrator.studies.rigid_body_results.format_results] draws its tables without the run
    directory."""
    return read_checked(path, ("meta", "rows", "targets", "columns"), "vp-study rigid_body", SCHEMA)


def write_results(run_dir: str | Path) -> tuple[dict[str, Any], str]:
    """Build the results of ``run_dir`` and write ``results.json`` (strict JSON) and ``results.md``."""
    run = Path(run_dir)
    res = build_results(run)
    return res, write_results_files(run, format_results(res), res)
