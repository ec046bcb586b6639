"""The reduction study's results: its records merged, summarized per row (break-even included), the tables with
who wins, the work-precision figures, and the results file they are drawn from (``RESULTS``). Break-even
N* = charge / ((c_full - c_row) T), charged two ways: the row's own offline CPU (data + SVD + hyper-reduction fit +
training), and in full (``_full_charge``: with the tuning runs the row was chosen among)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..schema import INTERVAL, Each, Obj, ResultsFile, ResultsSchema
from ..stats import fmt_num, interval_cell, md_table, median_of, merge_keyed, over_seeds
from ..step_budget import valve_line, valve_record, valve_sum
from .plan import HORIZONS, USEFUL, T


def _key(r: Mapping[str, Any]) -> tuple:
    return (r["system"], int(r["N"]), r["label"], r.get("seed"))


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with the records of the same (system, N, label, seed) as a new one replaced by it."""
    return merge_keyed(old, new, _key)


def summarize_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (system, N, label): the error at each horizon (the median over held-out mu; over seeds, the
    median of the per-seed medians with its 95 % bootstrap interval), the cost and offline CPU (medians over
    seeds) and the break-even number of rollouts (module docstring)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], int(r["N"]), r["label"]), []).append(r)
    out = []
    for (system, n, label), rs in groups.items():
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else int(r["seed"]))
        e: dict[str, Any] = {"system": system, "N": n, "label": label, "row": rs[0]["row"],
                             "seeds": [r.get("seed") for r in rs if r.get("seed") is not None],
                             "cost": median_of([r.get("cost") for r in rs]),
                             "offline_cpu": median_of([r.get("offline_cpu") for r in rs]),
                             "data_cpu": median_of([r.get("data_cpu") for r in rs]), "valve": valve_record(rs)}
        for t in HORIZONS:
            e[f"t{t:g}"] = over_seeds([r[f"err_t{t:g}"]["median"] for r in rs])
        out.append(e)
    for e in out:
        lattice = [x for x in out if x["system"] == e["system"] and x["N"] == e["N"]]
        full = [x for x in lattice if x["row"] == "full_order"]
        e["full_charge"] = _full_charge(e, lattice)
        e["break_even"] = _break_even(e, full)
        e["break_even_full"] = None if e["full_charge"] is None else _break_even(e, full, e["full_charge"])
    out.sort(key=lambda e: (e["system"], e["N"], _ROW_ORDER.get(e["row"], 9), _num(e["t120"]["median"])))
    return out


_ROW_ORDER = {"full_order": 0, "psd_floor": 1, "psd_floor_balanced": 1.5, "psd_galerkin": 2,
              "psd_galerkin_balanced": 2.5}
#: the row families that are reconstruction floors (no model, no cost)
_FLOORS = ("psd_floor", "psd_floor_balanced")


def _num(x: Any) -> float:
    return math.inf if x is None else float(x)


def _fit_of(label: str) -> str:
    """A row's fit: its label less the rollout step (``stormer_verlet h = 1.2``, ``rk4 h = 0.5``: the same fit rolled
    out at another step); a flow map's ``Delta`` is its training step and stays."""
    import re

    return re.sub(r", (\w+ )?h = [^,]*$", "", label)


def _full_charge(e: Mapping[str, Any], lattice: Sequence[Mapping[str, Any]]) -> float | None:
    """CPU s charged in full to a reduced row: the data generation once, plus the offline CPU less the data of every
    fit of the row's family on the lattice (its own and the tuning runs, each fit once, ``_fit_of``; medians over
    seeds). None: not a reduced row with an offline CPU, or the file does not record the data's CPU apart."""
    if e["row"] == "full_order" or e["offline_cpu"] is None or e.get("data_cpu") is None:
        return None
    fits = {_fit_of(x["label"]): float(x["offline_cpu"]) - float(x["data_cpu"]) for x in lattice
            if x["row"] == e["row"] and x["offline_cpu"] is not None and x.get("data_cpu") is not None}
    return float(e["data_cpu"]) + sum(fits.values())


def _break_even(e: Mapping[str, Any], full: Sequence[Mapping[str, Any]], charge: float | None = None
                ) -> float | None:
    """Rollouts (to T) after which ``charge`` (default: the row's offline CPU) is paid back against the cheapest
    full-order row as accurate at T; inf: never; None: not a reduced row with a cost."""
    if e["row"] == "full_order" or e["cost"] is None or e["offline_cpu"] is None:
        return None
    charge = float(e["offline_cpu"]) if charge is None else float(charge)
    err = _num(e[f"t{T:g}"]["median"])
    rivals = [_num(f["cost"]) for f in full if _num(f[f"t{T:g}"]["median"]) <= err and f["cost"] is not None]
    if not rivals or min(rivals) <= e["cost"]:
        return math.inf
    return charge / ((min(rivals) - float(e["cost"])) * T)


def _rollouts(n: float | None) -> str:
    return "—" if n is None else "never" if math.isinf(n) else f"{n:.3g}"


def _verdict(mine: Sequence[Mapping[str, Any]], horizon: float) -> str:
    """Who wins on one lattice at ``horizon``, said plainly: the reduced rows with an error of at most ``USEFUL``
    that no full-order row beats at both error and cost, else that the full-order method wins; a line, then the
    rows, the cheapest full-order row and the floors as short bullets."""
    t = f"t{horizon:g}"
    full = [e for e in mine if e["row"] == "full_order" and e["cost"] is not None]
    def beaten(e: Mapping[str, Any]) -> bool:
        return any(_num(f[t]["median"]) <= _num(e[t]["median"]) and f["cost"] <= e["cost"] for f in full)

    winners = [e for e in mine if e["row"] not in ("full_order", *_FLOORS) and e["cost"] is not None
               and _num(e[t]["median"]) <= USEFUL and not beaten(e)]
    ref = min(full, key=lambda e: _num(e["cost"])) if full else None
    where = f"At t = {horizon:g}"
    if not winners:
        head = (f"{where}: **the full-order method wins**: every reduced or learned row is matched or beaten at once "
                f"in error and in CPU per unit time by a full-order row, or has an error above {USEFUL:g}")
        text = []
    else:
        def against(e: Mapping[str, Any]) -> str:
            if ref is None or not ref[t]["median"]:
                return ""
            return (f", {_num(e[t]['median']) / _num(ref[t]['median']):.2g} x the error and "
                    f"{_num(e['cost']) / _num(ref['cost']):.2g} x the cost of the cheapest full-order row")

        head = f"{where}: **not beaten by any full-order row at both error and cost**"
        text = [f"{e['label']} ({fmt_num(e[t]['median'])} at {fmt_num(e['cost'])} s{against(e)})" for e in winners]
    if ref is not None:
        text.append(f"the cheapest full-order row is {ref['label']} ({fmt_num(ref[t]['median'])} at "
                    f"{fmt_num(ref['cost'])} s per unit time)")
    for family, name in zip(_FLOORS, ("PSD floor", "balanced PSD floor")):
        floors = [e for e in mine if e["row"] == family]
        if floors:
            best_floor = min(floors, key=lambda e: _num(e[t]["median"]))
            text.append(f"the lowest {name} is {fmt_num(best_floor[t]['median'])} "
                        f"({best_floor['label'].split(', ')[-1]})")
    return "\n".join([f"{head}:", "", *(f"- {line}" for line in text)]) if text else f"{head}."


def tables(summary: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown tables: per (system, N), every row with its errors at T and 8 T, cost, offline CPU and
    break-even rollouts, and who wins."""
    lines = ["# Reduction study: results", "",
             "Error: median over the 10 held-out mu of |y(t) - y_ref(t)| / |y_ref(t)| of the full state (over seeds: "
             "the median of the per-seed medians [95 % bootstrap interval]); cost: batch-1 thread CPU s per unit "
             "time; offline: CPU s of data + SVD (+ hyper-reduction fit, + training); break-even: rollouts to T "
             "after which the offline CPU is paid back against the cheapest full-order row as accurate at T; full "
             "charge: the data once + every fit of the row's family on the lattice (its own and the tuning runs it "
             "was chosen among: other 2n, hyper-reduced or not, other Delta; a fit sharing its family's SVD is "
             "charged it again, so an upper bound), and its break-even." +
             ("" if any(e.get("data_cpu") is not None for e in summary) else
              " This file does not record the data generation's CPU apart from the offline CPU (data_cpu, written "
              "by newer runs), so the full charge, which counts the data once over the tuning runs, is '—'."), ""]
    lines += [f"Training: {valve_line(valve_sum(e.get('valve') for e in summary))}.", ""]
    lines += ["## Summary", "", *summary_table(summary)]
    for system in dict.fromkeys(e["system"] for e in summary):
        for n in sorted({int(e["N"]) for e in summary if e["system"] == system}):
            mine = [e for e in summary if e["system"] == system and int(e["N"]) == n]
            lines += [f"## {system}, N = {n}", ""]
            lines += [line for h in HORIZONS for line in (_verdict(mine, h), "")]
            body = []
            for e in mine:
                body.append([e["label"], interval_cell(e["t120"]), interval_cell(e["t960"]), fmt_num(e["cost"]),
                             fmt_num(e["offline_cpu"]), _rollouts(e.get("break_even")),
                             fmt_num(e.get("full_charge")), _rollouts(e.get("break_even_full")),
                             len(e["seeds"]) or "—"])
            lines += md_table(["row", "error at T = 120", "error at 8T = 960", "s / unit time", "offline CPU s",
                               "break-even rollouts", "full charge CPU s", "break-even, full charge", "seeds"],
                              body) + [""]
    return "\n".join(lines)


#: the summary table's kinds (``vpintegrator.studies.summary_table``): the row families of each
KINDS = {"with the equations": ("psd_galerkin", "psd_galerkin_balanced"),
         "data only": ("psd_flow_map", "autoencoder_flow_map", "psd_sindy"), "full order": ("full_order",)}


def summary_table(summary: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per (system, N): the most accurate row at T of each of ``KINDS`` (reduced models of the equations,
    reduced models learned from data, the full-order steppers; the floors are no model), its error and cost, and
    its speed-up against the lattice's most accurate full-order row (full-order cost / the row's cost)."""
    from ..summary_table import summary_table as draw

    cases = [(f"{system}, N = {n}", [e for e in summary if e["system"] == system and int(e["N"]) == n])
             for system, n in dict.fromkeys((e["system"], int(e["N"])) for e in summary)]
    return draw(cases, list(KINDS), lambda e: [k for k, rows in KINDS.items() if e["row"] in rows],
                lambda e: e[f"t{T:g}"]["median"], lambda e: e["cost"], lambda e: e["label"], f"at T = {T:g}",
                "median error over held-out mu and seeds", "batch-1 thread CPU s per unit time")


def _family(label: str) -> str:
    """A row's series in the figures: its label without the step, the stride and the bond count."""
    import re

    label = re.sub(r" \(\d+ of \d+ bonds\)", "", label)
    return re.sub(r", (\w+ h|h|Delta) = [^,]*$", "", label)


def figures(summary: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """Per (system, N): the work-precision figure, error at T against batch-1 CPU per unit time, one series per
    row family (the PSD floors as horizontal lines: dotted, the balanced lift's dash-dot). PNG and SVG under
    ``out``."""
    from ...plotting.style import figure, save_figure

    paths: list[Path] = []
    for system, n in dict.fromkeys((e["system"], int(e["N"])) for e in summary):
        mine = [e for e in summary if e["system"] == system and int(e["N"]) == n]
        fig = figure(6.4, 3.6)
        ax = fig.add_subplot()
        series: dict[str, list[tuple[float, float]]] = {}
        for e in mine:
            err = e["t120"]["median"]
            if e["row"] in _FLOORS:
                if err is not None:
                    ax.axhline(err, color="0.7", linewidth=0.6, linestyle=":" if e["row"] == "psd_floor" else "-.")
                continue
            if err is None or e["cost"] is None or not math.isfinite(err):
                continue
            family = _family(e["label"])
            series.setdefault(family, []).append((float(e["cost"]), float(err)))
        for i, (family, pts) in enumerate(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=0.8,
                    color=f"C{i % 10}", label=family)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch-1 CPU s per unit time")
        ax.set_ylabel("median relative error at T = 120")
        balanced = ", dash-dot: balanced" if any(e["row"] == "psd_floor_balanced" for e in mine) else ""
        ax.set_title(f"{system}, N = {n} (dotted: PSD floors{balanced})", fontsize=8)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        paths += save_figure(fig, out / f"reduction_{system}_N{n}", formats=("png", "svg"), overwrite=True)
    return paths


#: a row of reduction.json (``vpintegrator.studies.schema``): what the tables and figures read
ROW = Obj(required={"system": "str", "N": "int", "row": "str", "label": "str", "seed": "int?",
                    **{f"err_t{t:g}": Obj(required={"median": "number?"}, optional=INTERVAL.optional) for t in HORIZONS}},
          optional={"cost": "number?", "offline_cpu": "number?", "data_cpu": "number?", "method": "str?", "h": "number?",
                    "reduced_dim": "int?", "bonds": "int?", "train_cpu": "number?", "stopped": "str?", "stop_clock": "str?", "epochs": "int?",
                    "n_params": "int?",
                    "best_val": "number?", "library": "str?", "n_terms": "int?"})
#: what reduction.json holds
SCHEMA = ResultsSchema("reduction", {"rows": Each(ROW)})


#: the study's results file: ``OUT/reduction.json``, its tables ``OUT/reduction.md`` and the work-precision figures
RESULTS = ResultsFile("reduction", SCHEMA, summarize_rows, tables, lambda rows, summary, out: figures(summary, out),
                      figure_prefix="reduction_")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a reduction.json at ``path``, checked against ``SCHEMA`` before any table is drawn; a missing
    file, another study's JSON, a row without a key or with a string for a number is one line naming the file,
    row and key (``ResultsFile.read_rows``)."""
    return RESULTS.read_rows(path)
