"""The memory study's results file (its schema), its summary over seeds, its Markdown tables and the verdict, all
drawn from the rows alone (``--table-only`` redraws them from the JSON)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..rigid_body_results.values import stop_cell, stop_token
from ..runner import StudyError
from ..schema import INTERVAL, Each, Obj, ResultsSchema, check_results
from ..stats import bootstrap_ci, fmt_num, md_table, read_json, unplain
from .plan import ATTENTION, HORIZONS, LEAST_SQUARES, WINDOW_MLPS

__all__ = ["ROW", "SCHEMA", "read_doc", "horizons", "summarize_rows", "summary_table", "verdict", "tables", "work_precision",
           "FIGURE_PREFIX"]

#: a row of memory.json: one (case, row, window, seed, noise)
ROW = Obj(required={"system": "str", "arena": "str", "approach": "str", "label": "str", "T": "int", "kind": "str",
                    "seed": "int?", "noise": "number"},
          optional={"N": "int?", "observe": "str?", "fit_cpu": "number?", "cost": "number?", "cost_clock": "str?",
                    "cost_per_step": "number?", "cost_seconds": "number?", "cost_of": "str?", "skill": "bool?",
                    "note": "str?", "fit_budget": "str?",
                    "steps": "int?", "stopped": "str?", "stop_clock": "str?", "n_params": "int?", "run": "str?",
                    **{f"err_t{t:g}": INTERVAL for t in HORIZONS}})
#: what memory.json holds
SCHEMA = ResultsSchema("memory", {"rows": Each(ROW)})
#: the kinds that learn from data only (no equations)
DATA_ONLY = ("fitted", "model")
#: a data-only row is the cheapest at its accuracy only if every row that knows the equations and is as accurate
#: costs more than this many times as much (the cost meter's run-to-run spread on shared cores is ~30 %)
COST_MARGIN = 1.5
#: the study's figures in OUT start with this (``memory_work_precision_ARENA.png``)
FIGURE_PREFIX = "memory_"


def read_doc(path: Path) -> dict[str, Any]:
    """A memory.json, checked against ``SCHEMA`` (one line naming the file, row and key otherwise), its numbers back
    (``unplain``)."""
    doc = read_json(path)
    if doc is None:
        raise StudyError(f"--table-only: {path} not found; give the --out of an earlier memory study or --results "
                         "FILE (a memory.json)")
    return unplain(check_results(doc, path, SCHEMA))


def horizons(rows: list[dict[str, Any]]) -> tuple[float, ...]:
    """The times a results file's rows are scored at: their ``err_tX`` keys (a row of the summary: its ``tX`` keys),
    so a file of an earlier run (t = 10 and 100, before ``score_times``) draws as it was drawn."""
    times = set()
    for r in rows:
        for k in r:
            head = "err_t" if k.startswith("err_t") else "t" if k[:1] == "t" and k[1:2].isdigit() else None
            if head is not None:
                times.add(float(k[len(head):]))
    return tuple(sorted(times))


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (case, noise, approach, T): the per-seed medians over conditions at each horizon, their median over seeds
    with a 95 % bootstrap interval (``bootstrap_ci``), the medians over seeds of the 10-90 % bounds, the fit or
    training CPU and the batch-1 cost per unit time."""
    times = horizons(rows)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], float(r["noise"]), r["approach"], int(r["T"])), []).append(r)
    out = []
    for (system, noise, approach, T), rs in groups.items():
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else r["seed"])
        e: dict[str, Any] = {"system": system, "arena": rs[0]["arena"], "N": rs[0].get("N"), "noise": noise,
                             "observe": rs[0].get("observe"),
                             "approach": approach, "T": T, "kind": rs[0]["kind"], "seeds": [r.get("seed") for r in rs]}
        for t in times:
            cells = [r.get(f"err_t{t:g}") or {} for r in rs]
            per = [c.get("median") for c in cells]
            vals = [v for v in per if v is not None]
            e[f"t{t:g}"] = {"per_seed": per, "median": float(np.median(vals)) if vals else None,
                            "ci": list(bootstrap_ci(vals)) if len(vals) > 1 else [None, None],
                            "lo": _median([c.get("lo") for c in cells]), "hi": _median([c.get("hi") for c in cells])}
        e["fit_cpu"] = _median([r.get("fit_cpu") for r in rs])
        e["cost"] = _median([r.get("cost") for r in rs])
        e["cost_per_step"] = _median([r.get("cost_per_step") for r in rs])
        e["skill"] = False if any(r.get("skill") is False for r in rs) else rs[0].get("skill")
        e["notes"] = sorted({r["note"] for r in rs if r.get("note")})
        e["stopped"] = sorted({stop_token(r) for r in rs if r.get("stopped") is not None})
        e["steps"] = _median([r.get("steps") for r in rs])
        out.append(e)
    return sorted(out, key=lambda e: (e["system"], e["noise"], _key(e, max(times)), e["approach"], e["T"]))


def _median(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def _key(e: dict[str, Any], t: float) -> float:
    """The row's median error at ``t``; inf for a row without skill (``skill`` False: no result, never a winner)."""
    m = None if e.get("skill") is False else e[f"t{t:g}"]["median"]
    return math.inf if m is None or (isinstance(m, float) and math.isnan(m)) else float(m)


def _best(entries: list[dict[str, Any]], t: float) -> dict[str, Any] | None:
    scored = [e for e in entries if math.isfinite(_key(e, t))]
    return min(scored, key=lambda e: _key(e, t)) if scored else None


#: the estimation row the verdict compares over the first states and the whole window, the first present: the exact
#: flow's, else (a bath) the near-round-off full-order model's, else the GLE's
SMOOTHED = ("estimate+exact_flow", "estimate+bath+bath_splitting_y6", "estimate+bath+stormer_verlet_y6",
            "estimate+gle")


def _estimate(e: dict[str, Any]) -> bool:
    """Whether a row is an estimation row (``estimate+METHOD``: its window is the number of states it reads)."""
    return str(e["approach"]).startswith("estimate+")


def row_name(e: dict[str, Any]) -> str:
    """A row's name: its approach, with its window where it has one (data-only and estimation rows)."""
    return e["approach"] + ("" if e["kind"] not in DATA_ONLY and not _estimate(e) else f" at T = {e['T']}")


def _said(e: dict[str, Any] | None, t: float) -> str:
    return "none" if e is None else f"{row_name(e)} ({fmt_num(e[f't{t:g}']['median'])})"


def verdict(summary: list[dict[str, Any]]) -> list[str]:
    """The plain verdict, one bullet per case and noise with a sub-bullet per finding, computed from the summary: who wins at each horizon
    among all rows and among the networks, whether attention beat the window MLP, whether a least-squares fit beat
    every network, what a window adds over the memoryless T = 1; then, over the bath sizes N, where a data-only row
    is the cheapest at its accuracy."""
    lines = []
    for system, noise in dict.fromkeys((e["system"], e["noise"]) for e in summary):
        mine = [e for e in summary if e["system"] == system and e["noise"] == noise]
        nets = [e for e in mine if e["kind"] == "model"]
        said = []
        for t in horizons(mine):
            best, net = _best(mine, t), _best(nets, t)
            lsq, att = _best([e for e in mine if e["approach"] in LEAST_SQUARES], t), \
                _best([e for e in nets if e["approach"] in ATTENTION], t)
            mlp = _best([e for e in nets if e["approach"] in WINDOW_MLPS], t)
            data = [e for e in mine if e["kind"] in ("fitted", "model")]
            mem, flat = _best([e for e in data if e["T"] > 1], t), _best([e for e in data if e["T"] == 1], t)
            part = [f"the best row is {_said(best, t)} ({best['kind'] if best else '-'}); the best network "
                    f"is {_said(net, t)}"]
            if att is not None and mlp is not None:
                part.append(f"attention {'beat' if _key(att, t) < _key(mlp, t) else 'did not beat'} the window MLP "
                            f"({_said(att, t)} against {_said(mlp, t)})")
            if lsq is not None and net is not None:
                part.append(f"a least-squares fit {'beats every network' if _key(lsq, t) < _key(net, t) else 'does not beat every network'} "
                            f"({_said(lsq, t)})")
            smooth = [e for e in mine if _estimate(e)]  # one method's estimate from the first states and the whole window
            how = next((a for a in SMOOTHED if any(e["approach"] == a for e in smooth)),
                       next((e["approach"] for e in smooth), None))
            same = sorted((e for e in smooth if e["approach"] == how), key=lambda e: e["T"])
            # a bath's row over the whole window (estimate+ROW) against the row from the first observed state (ROW)
            alone = [e for e in mine if how is not None and e["approach"] == how.removeprefix("estimate+")]
            short, whole = (None, None) if not same else (same[0], same[-1]) if len(same) > 1 or not alone else \
                (alone[0], same[-1])
            if short is not None and whole is not None and whole["T"] > short["T"]:
                part.append(f"the estimate over the whole window {'beats' if _key(whole, t) < _key(short, t) else 'does not beat'} "
                            f"the one from the first states ({_said(whole, t)} against {_said(short, t)})")
            if mem is not None and flat is not None:
                part.append(f"memory {'helps' if _key(mem, t) < _key(flat, t) else 'does not help'} the data-only "
                            f"rows ({_said(mem, t)} against the memoryless {_said(flat, t)})")
            said += [f"At t = {t:g} {part[0]}."] + [f"At t = {t:g}, {p}." for p in part[1:]]
        lines += [f"- **{system}, noise {fmt_num(noise)}**:", *(f"  - {s}" for s in said), ""]
    return lines + _bath_verdict(summary)


def _bath_verdict(summary: list[dict[str, Any]]) -> list[str]:
    """Per bath arena and N (noise 0, the last horizon): the most accurate data-only row and the cheapest row at least
    as accurate; the data-only rows that are the cheapest at their accuracy (no row that knows the equations or the
    full state is at least as accurate for at most ``COST_MARGIN`` times their cost); and the first N (if any) where
    there is one."""
    t = max(horizons(summary), default=0.0)
    lines = []
    for arena in dict.fromkeys(e["arena"] for e in summary if e.get("N") is not None):
        said, first = [], None
        for n in sorted({int(e["N"]) for e in summary if e["arena"] == arena and e.get("N") is not None}):
            mine = [e for e in summary if e["arena"] == arena and e.get("N") == n and e["noise"] == 0.0
                    and e["cost"] is not None and math.isfinite(_key(e, t))]
            data = [e for e in mine if e["kind"] in DATA_ONLY]
            best = _best(data, t)
            if best is None:
                continue
            rivals = [e for e in mine if _key(e, t) <= _key(best, t)]
            cheapest = min(rivals, key=lambda e: e["cost"])
            known = [e for e in mine if e["kind"] not in DATA_ONLY]
            front = sorted((d for d in data if not any(_key(o, t) <= _key(d, t) and o["cost"] <= COST_MARGIN * d["cost"]
                                                        for o in known)), key=lambda e: _key(e, t))
            first = n if front and first is None else first
            part = (f"N = {n}: the best data-only row is {_said(best, t)} at {fmt_num(best['cost'])} CPU s per unit "
                    f"time{_step(best)}; the cheapest row at least as accurate is {_said(cheapest, t)} at "
                    f"{fmt_num(cheapest['cost'])}{_step(cheapest)} ({cheapest['kind']})")
            said.append(part + ".")
            if front:
                said.append(f"N = {n}: no row that knows the equations is as accurate for at most {COST_MARGIN:g} times "
                            "the cost of " + ", ".join(f"{_said(d, t)} at {fmt_num(d['cost'])}" for d in front[:3]) + ".")
        if said:
            said.append(f"A data-only row is first the cheapest at its accuracy at N = {first}." if first is not None
                        else "At no N measured is a data-only row the cheapest at its accuracy.")
            lines += [f"- **{arena}, t = {t:g}, who is cheapest at equal accuracy**:", *(f"  - {s}" for s in said), ""]
    return lines


def _step(e: dict[str, Any]) -> str:
    """`` (X CPU s per step)`` where the row is priced per step (a results file priced by the engine's seconds)."""
    return "" if e.get("cost_per_step") is None else f" ({fmt_num(e['cost_per_step'])} per step)"


#: the summary table's kinds (``summary_table.KINDS``): which rows each picks among
GROUPS: dict[str, Any] = {
    "with the equations": lambda e: e["kind"] == "known",
    "data only": lambda e: e["kind"] in DATA_ONLY,
    "VPT family": lambda e: e["approach"] in ATTENTION,
    "full order": lambda e: e["kind"] == "full_order"}


def summary_table(summary: list[dict[str, Any]]) -> list[str]:
    """One line per case and noise (``vpintegrator.studies.summary_table``): the most accurate row at the last
    horizon of each of ``GROUPS`` (the known equations, data only, the VPT family, the full-order model), its error
    and its cost, and its speed-up against the case's full-order row (full-order cost / the row's cost; ``—`` where
    the case has none, as the oscillator)."""
    from ..summary_table import summary_table as draw

    t = max(horizons(summary), default=0.0)
    cases = [(f"{system}, noise {fmt_num(noise)}",
              [e for e in summary if e["system"] == system and e["noise"] == noise])
             for system, noise in dict.fromkeys((e["system"], e["noise"]) for e in summary)]
    return draw(cases, list(GROUPS), lambda e: [k for k, pick in GROUPS.items() if pick(e)],
                lambda e: None if e.get("skill") is False else e[f"t{t:g}"]["median"], lambda e: e["cost"], row_name,
                f"at t = {t:g}",
                "median error over seeds", "batch-1 CPU s per unit time")


def tables(summary: list[dict[str, Any]], budget: str = "", commands: list[str] | None = None) -> str:
    """The Markdown: the summary table (``summary_table``), the verdict, then per case and noise one table of every
    row (most accurate at the last horizon first)."""
    lines = ["# The memory ladder: results", "", *([f"Commands: {'; '.join(f'`{c}`' for c in commands)}.", ""]
                                                 if commands else []),
             *([f"Training: {budget}.", ""] if budget else []), "## Summary", "", *summary_table(summary),
             "## Verdict", "", *verdict(summary)]
    for system, noise in dict.fromkeys((e["system"], e["noise"]) for e in summary):
        rows = [e for e in summary if e["system"] == system and e["noise"] == noise]
        times = horizons(rows)
        per_step = any(e.get("cost_per_step") is not None for e in rows)  # files priced by the engine's step seconds
        cost = ("Cost: batch-1 CPU s of the row's start and steps (the engine's own seconds: its per-call fixed cost "
                "left out) per unit time and per step, on the meter (warm, min over interleaved repeats of every row "
                "of the case, thread CPU)." if per_step else
                "Cost: batch-1 CPU s per unit time on the meter (warm, min over interleaved repeats, thread CPU).")
        lines += [f"## {system}, observed in {rows[0].get('observe') or '?'}, noise {fmt_num(noise)}", "",
                  "Relative error of the observed state against the exact flow from the held-out conditions: per seed "
                  "the median over conditions, then the median over seeds [95 % bootstrap interval over seeds]; 10-90 %: "
                  "the interval over conditions (median over seeds). Fit CPU s: the fit with its validation (fitted "
                  f"rows) or the training (networks), process CPU. {cost}", ""]
        head = ["row", "T", "kind", *[f"t = {t:g}" for t in times], f"10-90 % at t = {max(times):g}",
                "fit CPU s", "cost (CPU s / unit time)", *(["CPU s / step"] if per_step else []), "steps", "stopped"]
        body = [[e["approach"], e["T"], e["kind"], *[_cell(e, t) for t in times],
                 "-" if e.get("skill") is False else
                 f"{fmt_num(e[f't{max(times):g}']['lo'])} - {fmt_num(e[f't{max(times):g}']['hi'])}",
                 fmt_num(e["fit_cpu"]), fmt_num(e["cost"]), *([fmt_num(e.get("cost_per_step"))] if per_step else []),
                 fmt_num(e["steps"]), stop_cell(e["stopped"], "-")]
                for e in rows]
        notes = [f"- {row_name(e)}: {n}" for e in rows for n in e.get("notes") or ()]
        lines += md_table(head, body) + [""] + (["Rows without skill (no result):", "", *notes, ""] if notes else [])
    return "\n".join(lines)


def _cell(e: dict[str, Any], t: float) -> str:
    if e.get("skill") is False:
        return "no skill"
    m, (lo, hi) = e[f"t{t:g}"]["median"], e[f"t{t:g}"]["ci"]
    ok = lo is not None and hi is not None and not (isinstance(lo, float) and math.isnan(lo))
    return fmt_num(m) + (f" [{fmt_num(lo)}, {fmt_num(hi)}]" if ok else "")


def work_precision(summary: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per bath arena with a cost: the work-precision figure at the last horizon, noise 0: the median error against
    the batch-1 CPU seconds per unit time, one series per row (its points the bath sizes N, labelled for the rows
    that know the equations), the data-only rows dashed. PNG under ``out`` (``memory_work_precision_ARENA.png``); none without a bath."""
    from matplotlib import colormaps

    from ...plotting.style import figure, save_figure

    t = max(horizons(summary), default=0.0)
    colors = colormaps["tab20"]
    paths: list[Path] = []
    for arena in dict.fromkeys(e["arena"] for e in summary if e.get("N") is not None):
        mine = [e for e in summary if e["arena"] == arena and e.get("N") is not None and e["noise"] == 0.0
                and e["cost"] is not None and math.isfinite(_key(e, t))]
        if not mine:
            continue
        fig = figure(6.4, 3.8)
        ax = fig.add_subplot()
        series: dict[str, list[dict[str, Any]]] = {}
        for e in mine:
            name = e["approach"] if e["kind"] not in DATA_ONLY else f"{e['approach']} T = {e['T']}"
            series.setdefault(name, []).append(e)
        for i, (name, es) in enumerate(sorted(series.items())):
            es.sort(key=lambda e: int(e["N"]))
            data = es[0]["kind"] in DATA_ONLY
            ax.plot([e["cost"] for e in es], [_key(e, t) for e in es], marker="o" if data else "s", markersize=3,
                    linewidth=0.8, linestyle="--" if data else "-", color=colors(i % 20), label=name)
            for e in ([] if data else es):  # (the data-only rows barely move with N: their N are not written)
                ax.annotate(f"{int(e['N'])}", (e["cost"], _key(e, t)), fontsize=5, xytext=(2, 2),
                            textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch-1 CPU s per unit time (cost meter)")
        ax.set_ylabel(f"median relative error at t = {t:g}")
        ax.set_title(f"{arena}: work-precision over the bath size N (rows that know the equations labelled by N; "
                     "dashed: data only, one point per N)",
                     fontsize=7)
        ax.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        paths += save_figure(fig, out / f"{FIGURE_PREFIX}work_precision_{arena}", formats=("png",), overwrite=True)
    return paths
