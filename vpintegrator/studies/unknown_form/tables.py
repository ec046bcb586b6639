"""The unknown-form study's tables: its rows file (checked, merged), the summaries over seeds (medians,
bootstrap intervals, the targets' verdicts, the plateau readings), the Markdown tables and the figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..schema import Each, Obj, ResultsFile, ResultsSchema, is_number
from ..stats import as_number as _num, fmt_g, merge_keyed, quantile_cell, seed_quantiles
from ...clock import METER_RULE
from .design import CASIMIR_STEPS, FLOW_MAPS, HORIZONS, SYSTEMS, TARGETS
from ...quantiles import median

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


def _system(x: Any) -> str:
    return "" if isinstance(x, str) and x in SYSTEMS else f"one of {', '.join(SYSTEMS)}"


def _errors(x: Any) -> str:
    good = isinstance(x, dict) and x and all(
        isinstance(k, str) and is_number(_horizon(k)) and isinstance(v, list) and all(is_number(e, True) for e in v)
        for k, v in x.items())
    return "" if good else "an object {horizon: [relative errors]}"


def _sweep(x: Any) -> str:
    good = isinstance(x, list) and all(
        isinstance(p, dict) and isinstance(p.get("point"), int) and isinstance(p.get("curve") or {}, dict)
        and all(isinstance(v, list) and all(is_number(e, True) for e in v) for v in (p.get("curve") or {}).values())
        for p in x)
    return "" if good else "a list of {point, curve, ...} objects"


def _horizon(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


#: what unknown_form.json holds (``vpintegrator.studies.schema``): rows of these keys and kinds
ROW = Obj(required={"system": _system, "noise": "number", "seed": "int", "method": "str", "errors": _errors,
                    "failed": "int", "cost": "number?", "train_cpu": "number", "approach": "str"},
          optional={"structure": "number?", "structure_kind": "str?", "runner": "str",
                    "eval_cpu": "number?", "point": "int?", "n_params": "int?", "sweep": _sweep, "equations": "list?",
                    "library": "str?", "threshold": "number?", "casimir_long": "number?", "failure": "str",
                    "cost_setup": "number?", "cost_clock": "str?", "cost_repeats": "int"})
SCHEMA = ResultsSchema("unknown_form", {"rows": Each(ROW)}, label=("method",))


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``old`` whose (system, σ, seed, method) no row of ``new`` has, then ``new``."""
    return merge_keyed(old, new, lambda r: (r["system"], float(r["noise"]), int(r["seed"]), r["method"]), at_end=True)


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
            horizons[h] = seed_quantiles([_num(v) for v in r["errors"].get(h, [])] for r in mine)
        cost = median([c for c in (_num(r["cost"]) for r in mine) if math.isfinite(c)])  # NaN: none measured
        setup = [_num(r["cost_setup"]) for r in mine if r.get("cost_setup") is not None]
        train_cpu = median([_num(r["train_cpu"]) for r in mine])
        structure = [_num(r["structure"]) for r in mine if r.get("structure") is not None]
        t10 = horizons.get(f"{TARGETS['t']:g}")
        runners = sorted({str(r.get("runner", "?")) for r in mine if r.get("runner") not in (None, "?")})
        s: dict[str, Any] = {"system": system, "noise": sigma, "method": method, "approach": mine[0].get("approach"),
             "runner": ",".join(runners) or "?",
             "seeds": [int(r["seed"]) for r in mine], "horizons": horizons, "cost": cost, "train_cpu": train_cpu,
             "amortised_cost": cost + train_cpu / (amortise_over * max(HORIZONS)), "amortise_over": amortise_over,
             "cost_setup": median(setup) if setup else None,
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
                                 "stopped": p.get("stopped"), "trend_recorded": p.get("trend_recorded"),
                                 **plateau(p.get("curve") or {})})
        s["plateau"] = plateaus
        s["stop_rules"] = sorted({str(r["stop_rule"]) for r in mine if r.get("stop_rule")})
        out.append(s)
    return out


_ORDER = ["lpnet", "g_sympnet", "lphnn@gauss_legendre4", "lphnn@implicit_midpoint", "hnn@gauss_legendre4",
          "node@rk4", "sindy+gauss_legendre4", "poly2+gauss_legendre4", "oracle gauss_legendre4"]


def _order(method: str) -> int:
    return _ORDER.index(method) if method in _ORDER else len(_ORDER)


def _setup(x: dict[str, Any]) -> str:
    return "" if x.get("cost_setup") is None else f"; set-up {fmt_g(x['cost_setup'])} s"


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: per (system, σ) a row per method (errors at the horizons, cost, amortised cost,
    structure, failures), then the per-seed target verdicts and the plateau check of every training run."""
    metered = sum(x.get("cost_setup") is not None for x in summary)
    how = (" Costs: the minimum over 3 separate rollouts of each row, set-up excluded (results from before the cost "
           "meter).")
    if metered:
        how = (" Where the cost says set-up, it was taken on the cost meter (" + METER_RULE.format(clock="thread CPU")
               + ": every row of a (system, σ, seed) in turn, one batch-1 rollout each; set-up in seconds, median over "
               "seeds)" + ("." if metered == len(summary) else "; the other rows are the minimum over 3 separate "
                           "rollouts each (before the meter)."))
    lines = ["Cells: the median over seeds of the per-seed median relative error over held-out initial conditions "
             "[bootstrap 95 % interval over seeds] (the smallest 10 % and largest 90 % quantile of any seed). "
             "Cost: batch-1 thread CPU seconds per unit time (median over seeds), with the stepper that ran it "
             "(numba: the compiled kernel, a fitted SINDy field's included; numpy: the NumPy path, which runs "
             "a fitted SINDy field in results recorded before its compiled kernel existed); amortised: + training "
             "CPU / (N · 10) with N the rollouts it is spread over." + how, "", "### Summary", "",
             *summary_table(summary)[:-1]]
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
                    cells.append("—" if c is None else quantile_cell(c))
                failed = str(x["failed"]) + (f" ({'; '.join(x['failures'])})" if x["failures"] else "")
                lines.append(f"| {x['method']} | " + " | ".join(cells) + f" | {fmt_g(x['cost'])} ({x.get('runner', '?')}{_setup(x)}) | {fmt_g(x['train_cpu'])} "
                             f"| {fmt_g(x['amortised_cost'])} | {fmt_g(x['structure'])} | {failed} |")
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
                             f"{'yes' if p['chosen'] else ''} | {fmt_g(p.get('cpu_end'))} | {fmt_g(p.get('best'))} | "
                             f"{fmt_g(p.get('gain_last_half'))} | "
                             f"{'—' if p.get('plateaued') is None else ('yes' if p['plateaued'] else 'no')} | "
                             f"{' + '.join(p['stopped']) if p.get('stopped') else 'not recorded'} |")
        lines += ["", wall_ceiling_line(plateaus), *stop_count_lines(plateaus)]
    return "\n".join([*stop_rule_lines(summary), *lines]) + "\n"


def summary_table(summary: list[dict[str, Any]]) -> list[str]:
    """One line per (system, σ) (``vpintegrator.studies.summary_table``): the most accurate row learned or fitted
    from data at the last horizon and the oracle (the true equations on the full state, the full-order row), each
    with its error and cost, and the data row's speed-up against the oracle (its cost over the data row's)."""
    from ..summary_table import summary_table as draw

    h = max((h for x in summary for h in x["horizons"]), key=float, default="10")
    cases = [(f"{system}, noise σ = {sigma:g}", [x for x in summary if x["system"] == system and x["noise"] == sigma])
             for system in SYSTEMS for sigma in sorted({x["noise"] for x in summary if x["system"] == system})]
    return draw(cases, ("data only", "full order"),
                lambda x: ["full order" if x.get("approach") == "oracle" else "data only"],
                lambda x: (x["horizons"].get(h) or {}).get("median"), lambda x: x["cost"], lambda x: x["method"],
                f"at t = {float(h):g}", "median error over seeds", "batch-1 thread CPU s per unit time")


def stop_count_lines(summary: Sequence[dict[str, Any]]) -> list[str]:
    """Per row (system, σ, approach): how its vp-train runs stopped, from each run's own record -- at the plateau,
    at the plateau while the score's trend still fell clearly (``summary.json`` ``still_improving``), with
    Levenberg–Marquardt stuck at its damping cap (``lm_stuck``), or by another rule. The last two are counted
    only from runs that recorded them (``trend_recorded``); runs from before say "not recorded", never a guess."""
    from ..rigid_body_results.values import LM_STUCK, STILL_IMPROVING

    out: list[str] = []
    for x in summary:
        runs = [(s, bool(r[i]) if i < len(r) else False) for p in x["plateau"]
                for r in [p.get("trend_recorded") or []] for i, s in enumerate(p.get("stopped") or [])]
        if not runs:
            continue
        unknown = sum(not rec for _, rec in runs)

        def count(what: str) -> str:
            n = sum(s == what for s, rec in runs if rec)
            return "not recorded" if unknown == len(runs) else f"{n} (+{unknown} not recorded)" if unknown else str(n)

        rule = sum(s in ("plateau (patience)", STILL_IMPROVING) for s, _ in runs)
        other = sum(s not in ("plateau (patience)", STILL_IMPROVING, LM_STUCK) for s, _ in runs)
        out.append(f"| {x['system']} | {x['noise']:g} | {x['approach']} | {len(runs)} | {rule} | {count(STILL_IMPROVING)} "
                   f"| {count(LM_STUCK)} | {other} |")
    if not out:  # no run recorded how it stopped: stop_rule_lines says so
        return []
    return ["", "How each row's vp-train runs stopped (each run's summary.json). Plateau rule: stopped by patience; still "
            "improving: of those, the runs whose log score's least-squares trend over the patience window still fell "
            "clearly;", "LM stuck: Levenberg–Marquardt's damping at its cap again after its restarts (not a plateau). "
            "Runs from before these were recorded say not recorded.", "",
            "| system | σ | approach | runs | plateau rule | of them still improving | LM stuck | other stops |",
            "|---|---|---|---|---|---|---|---|", *out]


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
                      f"{fmt_g(p.get('cpu_seconds'))} CPU s" for x, p in cut)
    return (f"**{len(cut)} of {len(recorded)} training runs stopped at their wall-time ceiling** (a loaded machine: "
            f"raise --wall-ceiling, or run with fewer --jobs){note}: {which}.")


def figures(summary: list[dict[str, Any]], out: Path, rows: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """Per system: error at t = 10 against batch-1 cost (filled: the rollout alone, open: amortised), one
    marker per (method, σ); and the plateau curves (the monitored validation score, ``_curve``, vs CPU seconds
    of the chosen run of every approach and seed, σ = 0). PNG and SVG under ``out``."""
    from ...plotting.style import figure, save_figure

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


def results(amortise_over: float = 1e5) -> ResultsFile:
    """The study's results file (``vpintegrator.studies.schema.ResultsFile``): ``OUT/unknown_form.json``, its rows
    checked against ``SCHEMA`` before any table is drawn, the tables ``OUT/unknown_form.md`` (training amortised
    over ``amortise_over`` rollouts) and the figures, drawn from the rows alone."""
    return ResultsFile("unknown_form", SCHEMA, lambda rows: summarize_rows(rows, amortise_over), tables,
                       lambda rows, summary, out: figures(summary, out, rows), figure_prefix="unknown_form_")
