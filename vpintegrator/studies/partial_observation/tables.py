"""The partial-observation study's results: its rows merged, summarized over seeds, the tables, the plateau
figure, and the results file they are drawn from (``RESULTS``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..rigid_body_results.values import stop_cell, stop_token
from ..schema import INTERVAL, Each, Obj, ResultsFile, ResultsSchema
from ..stats import fmt_num, interval_cell, md_table, median_of, merge_keyed, over_seeds
from ..step_budget import valve_line, valve_record, valve_sum
from .design import HORIZONS, SYSTEMS, TARGET


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with the rows of the same (system, seed, label) as a new one replaced by it."""
    return merge_keyed(old, new, lambda r: (r["system"], r.get("seed"), r["label"]))


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (system, approach, T): the per-seed medians at each horizon (``tH``; in the full state ``full_tH``,
    None in rows from before those columns), their median over seeds with its bootstrap interval, the
    training's stop reasons and CPU, the coupling, the batch-1 cost (median over seeds; None in rows from before
    it was measured)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], r["approach"], int(r["T"])), []).append(r)
    out = []
    for (system, approach, T), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else r["seed"])
        entry: dict[str, Any] = {"system": system, "approach": approach, "T": T, "kind": rs[0]["kind"],
                                 "seeds": [r.get("seed") for r in rs]}
        for t in HORIZONS:
            for prefix, name in (("err", "t"), ("full_err", "full_t")):
                entry[f"{name}{t:g}"] = over_seeds([(r.get(f"{prefix}_t{t:g}") or {}).get("median") for r in rs])
        entry["stopped"] = sorted({stop_token(r) for r in rs if r.get("stopped") is not None})
        entry["valve"] = valve_record(rs)
        for name in ("train_cpu", "coupling", "cost"):
            entry[name] = median_of(r.get(name) for r in rs)
        out.append(entry)
    return out


def _target(summary: list[dict[str, Any]]) -> str:
    """The verdict of ``TARGET`` from the summary: the best learned approach and T by median, its seeds <= the bound."""
    t = f"t{TARGET['t']:g}"
    learned = [e for e in summary if e["system"] == TARGET["system"] and e["kind"] == "model"
               and e[t]["median"] is not None]
    if not learned:
        return "no learned model on the coupled oscillator in these results"
    best = min(learned, key=lambda e: e[t]["median"])
    seeds = [v for v in best[t]["per_seed"] if v is not None]
    hits = sum(1 for v in seeds if v <= TARGET["error"])
    verdict = "met" if hits >= TARGET["seeds_needed"] and len(seeds) >= TARGET["of"] else "not met"
    return (f"Target (coupled oscillator observed in q, best learned model on windows, median <= {TARGET['error']:g} at "
            f"t = {TARGET['t']:g} on >= {TARGET['seeds_needed']} of {TARGET['of']} seeds): **{verdict}** here: the best "
            f"is {best['approach']} at T = {best['T']}, median {fmt_num(best[t]['median'])}, "
            f"{hits} of {len(seeds)} seeds <= {TARGET['error']:g}.")


#: what the cost column says (drawn where a row has it)
COST_NOTE = ("Batch-1 CPU s / unit time: each learned row's rollout of the first held-out condition to t = 100 on the "
             "cost meter (warm, the minimum over 3 interleaved repeats, thread CPU, one torch thread) per unit time, "
             "the median over seeds; — for the rows that are not trained.")


#: the summary table's kinds (``vpintegrator.studies.summary_table``; no full-order row: no speed-up)
KINDS: dict[str, Any] = {"with the equations": lambda e: e["kind"] == "known",
                         "data only": lambda e: e["kind"] in ("model", "fitted"),
                         "VPT family": lambda e: e["kind"] == "model" and str(e["approach"]).startswith("vpt")}


def summary_table(summary: list[dict[str, Any]]) -> list[str]:
    """One line per system: the most accurate row at t = 10 (the target's horizon) with the equations (state
    estimation + the true flow), from data only (the learned and fitted rows; not the ablations, not the
    full-state model) and of the VPT family, each with its error and its batch-1 cost where measured."""
    from ..summary_table import summary_table as draw

    t = TARGET["t"]
    cases = [(f"{system}, observed in {SYSTEMS.get(system, {}).get('observe', '?')}",
              [e for e in summary if e["system"] == system]) for system in dict.fromkeys(e["system"] for e in summary)]
    return draw(cases, list(KINDS), lambda e: [k for k, pick in KINDS.items() if pick(e)],
                lambda e: e[f"t{t:g}"]["median"], lambda e: e.get("cost"),
                lambda e: f"{e['approach']} at T = {e['T']}", f"at t = {t:g}", "median error over seeds", "batch-1 CPU s per unit time, learned rows only")


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: the summary (``summary_table``), then per system every (approach, T) at each horizon,
    best first at t = 10."""
    valve = valve_line(valve_sum(e.get("valve") for e in summary))
    lines = ["# Partial observation: results", "", _target(summary), "", f"Training: {valve}.", "", "## Summary", "",
             *summary_table(summary)]
    for system in dict.fromkeys(e["system"] for e in summary):
        info = SYSTEMS.get(system, {})
        lines += [f"## {system}, observed in {info.get('observe', '?')}", "",
                  "Relative error on the observed channels against the exact flow, per held-out condition: the median "
                  "over conditions per seed, then the median over seeds [95 % bootstrap interval]; per-seed medians in "
                  "the last columns. `stopped`: why training ended (`early_stopping`: its validation plateau; `plateau "
                  "(patience) while still improving`: that plateau rule while the score's trend still fell; `LM damping "
                  "stuck at its cap`: no Levenberg–Marquardt step was accepted; `steps`: its step budget, whole epochs "
                  "of its measured cost, the same on any machine; `time_limit`: the CPU budget first, or under a step "
                  "budget **cut** by the safety valve). Full state: the relative error of the full state estimated "
                  "from each row's last 3 observed states by least squares on the true flow (the `estimate` rows' "
                  "estimator; a `full_state` row's own state), against the exact flow; — where the run predates the "
                  "column.", ""] + ([f"{info['note']}", ""] if info.get("note") else [])
        rows = [e for e in summary if e["system"] == system]
        rows.sort(key=lambda e: math.inf if e["t10"]["median"] is None else e["t10"]["median"])
        head = ["approach", "T", "kind", "t = 10", "t = 100", "per seed, t = 10", "per seed, t = 100",
                "full state, t = 10", "full state, t = 100", "coupling", "train CPU s", "stopped"]
        priced = any(e.get("cost") is not None for e in rows)  # results from before the cost: their tables as drawn
        if priced:
            head.insert(-1, "batch-1 CPU s / unit time")
            lines += [COST_NOTE, ""]
        body = []
        for e in rows:
            body.append([e["approach"], e["T"], e["kind"], interval_cell(e["t10"]), interval_cell(e["t100"]),
                         " ".join(fmt_num(v) for v in e["t10"]["per_seed"]),
                         " ".join(fmt_num(v) for v in e["t100"]["per_seed"]),
                         interval_cell(e["full_t10"]), interval_cell(e["full_t100"]),
                         fmt_num(e["coupling"]), fmt_num(e["train_cpu"]),
                         *([fmt_num(e.get("cost"))] if priced else []), stop_cell(e["stopped"])])
        lines += md_table(head, body) + [""]
    return "\n".join(lines)


def plateau_figure(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """The validation plateau curves (validation rollout score at t = 10 against training CPU seconds, per
    epoch; the best epoch ringed) of the first seed's learned runs, one panel per system, written as
    ``OUT/partial_observation_plateau.{png,svg}``; drawn from the rows (the JSON) alone. No figure (``[]``)
    when no row has a curve (rows from before the curves were recorded)."""
    with_curve = [r for r in rows if r.get("curve") and r["curve"].get("val")]
    if not with_curve:
        return []
    from ...plotting.style import figure, save_figure, styled

    systems = list(dict.fromkeys(r["system"] for r in with_curve))

    @styled
    def draw(style: Any = None) -> Any:
        fig = figure(3.4 * len(systems), 3.0)
        axes = fig.subplots(1, len(systems), squeeze=False)[0]
        for ax, system in zip(axes, systems):
            mine = [r for r in with_curve if r["system"] == system]
            seed = min(r["seed"] for r in mine)
            for r in sorted((r for r in mine if r["seed"] == seed), key=lambda r: (r["approach"], r["T"])):
                cpu, val = np.asarray(r["curve"]["cpu"]), np.asarray(r["curve"]["val"], dtype=float)
                val = np.where(np.isfinite(val) & (val > 0), val, np.nan)
                line, = ax.plot(cpu, val, marker=".", label=f"{r['approach']} T={r['T']}")
                if r.get("best_epoch") is not None and 0 < int(r["best_epoch"]) <= len(val):
                    k = int(r["best_epoch"]) - 1
                    ax.plot(cpu[k], val[k], "o", color=line.get_color(), markerfacecolor="none", markersize=7)
            ax.axhline(TARGET["error"], color="0.5", linestyle=":", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_xlabel("training CPU s")
            ax.set_ylabel("validation rollout error at t = 10")
            ax.set_title(f"{system} observed in {SYSTEMS.get(system, {}).get('observe', '?')}, seed {seed}")
            ax.legend(fontsize=5, ncols=2)
        return fig

    return save_figure(draw(), out / "partial_observation_plateau", formats=("png", "svg"), overwrite=True)


#: a row of partial_observation.json (``vpintegrator.studies.schema``): what the tables and the figure read
ROW = Obj(required={"system": "str", "approach": "str", "T": "int", "label": "str", "kind": "str", "seed": "int?"},
          optional={"observe": "str?", "n_params": "int?", "train_cpu": "number?", "epochs": "int?",
                    "best_epoch": "int?", "stopped": "str?", "stop_clock": "str?", "best_val": "number?", "run": "str?",
                    "curve": Obj(optional={"cpu": Each("number?"), "val": Each("number?")}, null=True),
                    "coupling": "number?", "sindy": "object?", "cost": "number?", "cost_clock": "str?",
                    **{f"{prefix}_t{t:g}": INTERVAL for t in HORIZONS for prefix in ("err", "full_err")}})
#: what partial_observation.json holds
SCHEMA = ResultsSchema("partial_observation", {"rows": Each(ROW)})


#: the study's results file: ``OUT/partial_observation.json``, its tables ``OUT/partial_observation.md`` and the
#: plateau figure, drawn from the rows alone
RESULTS = ResultsFile("partial_observation", SCHEMA, summarize_rows, tables,
                      lambda rows, summary, out: plateau_figure(rows, out), figure_prefix="partial_observation_plateau")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a study JSON at ``path``, checked against ``SCHEMA`` before any table is drawn; a missing file,
    another study's JSON, a row without a key or with a string for a number is one line naming the file, row and
    key (``ResultsFile.read_rows``)."""
    return RESULTS.read_rows(path)
