"""The coupled-oscillator study's results file from before it became a preset of the engine (``presets/
coupled_oscillator.toml``, ``vp-study coupled_oscillator``), read and drawn: its run of 2026-11-26 (5 seeds, 10⁴
steps; ``docs/data/archive/coupled_oscillator_study.json``) redraws byte for byte,
``vp-study coupled_oscillator --table-only --results docs/data/archive/coupled_oscillator_study.json --out DIR``.
Nothing here runs: the preset's runs write the engine's ``compare.json``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .schema import INTERVAL, Each, Obj, ResultsSchema, Values, numbers, read_results as read_checked
from .stats import fmt_num, md_table, unplain

__all__ = ["SCHEMA", "format_results", "format_table", "read_results"]

DT = 0.4  # the specs' step (coupled_oscillator, coupled_oscillator_box)
EVAL_SETS = ("default", "heldout")

_NAMES = {
    "vpt": "VPT (volume-preserving transformer)",
    "st": "standard transformer",
    "symplectic_transformer": "symplectic transformer",
    "g_sympnet": "G-SympNet",
    "la_sympnet": "LA-SympNet",
    "stormer_verlet": "Störmer–Verlet",
    "stormer_verlet_y6": "Yoshida 6 (Störmer–Verlet)",
    "rk4": "RK4",
}


def _budget_text(settings: dict) -> str:
    """How each model's training was budgeted (the archived run: its plateau or its step budget)."""
    steps = ", ".join(f"{m} {n}" for m, n in (settings.get("max_steps") or {}).items())
    return (f"each training to its validation plateau (patience {settings.get('patience')} epochs) or a step "
            f"budget of {settings.get('train_seconds')} CPU s in measured epoch costs ({steps} optimiser steps)")


#: (results key, metrics column in rollout CSV, header)
ROLLOUT_COLUMNS = (
    ("max_rel_energy_drift", "max_rel_drift_energy", "max rel. energy drift"),
    ("energy_drift_slope", "drift_slope_energy", "energy drift slope (1/t)"),
    ("final_rel_error", "final_rel_error", "rel. error at t_end"),
    ("valid_time", "valid_time", "valid prediction time"),
    ("max_abs_cum_log_det_J", "max_abs_cum_log_det_J", "max abs cum. log det J"),
)

TRAIN_COLUMNS = (
    ("train_loss", "train loss"),
    ("val_loss", "best validation score"),
    ("train_seconds", "training s"),
)


def _fmt(v: float, blowup: bool = False) -> str:
    text = fmt_num(v, 3, small=1e-2, missing="–")
    return "inf (blew up)" if blowup and text == "inf" else text


def _cell(row: dict[str, Any], key: str) -> str:
    mean, std = row.get(key, math.nan), row.get(f"{key}_std", math.nan)
    text = _fmt(mean, blowup=key in ("max_rel_energy_drift", "final_rel_error"))
    if std is not None and isinstance(std, float) and math.isfinite(std):
        text += f" ± {_fmt(std)}"
    return text


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per method; models mean ± std over seeds (ddof = 1)."""
    head = ["method", "seeds"] + [h for _, _, h in ROLLOUT_COLUMNS] + [h for _, h in TRAIN_COLUMNS] + ["params"]
    body = []
    for r in rows:
        cells = [_NAMES.get(r["method"], r["method"]), str(len(r["seeds"])) if r["seeds"] else "–"]
        cells += [_cell(r, k) for k, _, _ in ROLLOUT_COLUMNS]
        if r["kind"] == "model":
            cells += [_cell(r, k) for k, _ in TRAIN_COLUMNS] + [str(r.get("n_params", ""))]
        else:
            cells += ["–"] * (len(TRAIN_COLUMNS) + 1)
        if r.get("failed"):
            times = ", ".join(_fmt(t) for t in r.get("blowup_t", []) if not math.isnan(t))
            cells[0] += f" ({r['failed']} of {r['n_traj'] * max(1, len(r['seeds']))} rollouts blew up" + (
                f"; first at t = {times})" if times else ")")
        body.append(cells)
    return "\n".join(md_table(head, body)) + "\n"


def _statistics_section(rows: list[dict], t_end: float) -> list[str]:
    f = lambda v: _fmt(v, blowup=True)  # noqa: E731
    body = []
    for r in rows:
        e, d = r["error"], r["drift"]
        lo, hi = r["seed_ci"]
        body.append([_NAMES.get(r["method"], r["method"]), str(len(r["seeds"])) if r["seeds"] else "–",
                     f"{f(e['median'])} [{f(e['lo'])}, {f(e['hi'])}]",
                     f"[{f(lo)}, {f(hi)}]" if r["seeds"] and len(r["seeds"]) > 1 else "–",
                     f"{f(d['median'])} [{f(d['lo'])}, {f(d['hi'])}]"])
    return ["### Over the held-out initial conditions", "",
            f"Relative error at t = {t_end:g} against the exact flow and maximum relative energy drift on [0, {t_end:g}], "
            "median [10–90 %] over the ICs (models: over every seed and IC); 'seeds CI': bootstrap 95 % interval "
            "over seeds of each seed's median error.", "",
            *md_table(["method", "seeds", "error median [10–90 %]", "seeds CI (median error)",
                       "energy drift median [10–90 %]"], body), ""]


#: a row of results.json's tables (``vpintegrator.studies.schema``): a method's metrics over seeds
_METRICS = ("max_rel_energy_drift", "energy_drift_slope", "final_rel_error", "valid_time", "max_abs_cum_log_det_J")
TABLE_ROW = numbers(*_METRICS, optional=(*(f"{m}_std" for m in _METRICS), "train_loss", "train_loss_std", "val_loss",
                                         "val_loss_std", "train_seconds", "train_seconds_std"),
                    method="str", kind="str", seeds="list", n_traj="int?", failed="int?", n_params="int?",
                    blowup_t=Each("number?"), per_seed="list")
#: what results.json holds: the settings, the tables (default, held-out) and the held-out statistics
SCHEMA = ResultsSchema("coupled_oscillator", {
    "settings": "object", "tables": Values(Each(Obj(required={"method": "str", **TABLE_ROW.required},
                                                    optional=TABLE_ROW.optional))),
    "heldout_statistics": Each(Obj(required={"method": "str", "error": INTERVAL, "drift": INTERVAL},
                                   optional={"kind": "str", "seeds": "list", "n_ics": "int?",
                                             "seed_medians": Each("number?"), "seed_ci": Each("number?")}))},
    fix="give the results.json of a vp-study coupled_oscillator run")


def read_results(path: str | Path) -> dict[str, Any]:
    """A ``results.json`` the study wrote (``docs/data/archive/coupled_oscillator_study.json``) with its numbers as
    the study computed them (±inf restored, ``null`` the NaN it was), for ``format_results``."""
    doc = read_checked(path, ("settings", "tables", "heldout_statistics"), "vp-study coupled_oscillator", SCHEMA)
    return {**doc, "tables": unplain(doc["tables"], math.nan),
            "heldout_statistics": unplain(doc["heldout_statistics"], math.nan)}


def summary_section(stats: list[dict[str, Any]], t_end: Any) -> list[str]:
    """``## Summary`` (``vpintegrator.studies.summary_table``): over the held-out initial conditions, the most
    accurate model (data only), the most accurate of the VPT family and the most accurate classical integrator
    (the full-order row), each with its median error at t_end (the rows carry no rollout cost: no cost column);
    nothing without held-out statistics."""
    from .summary_table import summary_table

    if not stats:
        return []
    kinds = {"data only": lambda r: r.get("kind") == "model", "full order": lambda r: r.get("kind") == "integrator",
             "VPT family": lambda r: r.get("kind") == "model" and str(r["method"]).startswith("vpt")}
    return ["## Summary", "", *summary_table(
        [(f"coupled oscillator, {stats[0].get('n_ics', '?')} held-out ICs", stats)], list(kinds),
        lambda r: [k for k, pick in kinds.items() if pick(r)], lambda r: r["error"]["median"], None,
        lambda r: _NAMES.get(r["method"], r["method"]),
        "at t_end" if t_end is None else f"at t = {float(t_end):g}",
        "median relative error over every seed and IC")]


def format_results(doc: dict[str, Any]) -> str:
    """The Markdown of a results document (``read_results``: ``settings``, ``tables``, ``heldout_statistics``), as
    the study drew it without its run directory."""
    settings, tables, stats = doc["settings"], doc["tables"], doc["heldout_statistics"]
    commands = settings.get("commands", [])
    n_steps = settings.get("n_steps")
    t_end = settings.get("t_end")
    titles = {
        "default": "GeometricProblems' default initial condition q0 = (1, 0), p0 = (2, 0)",
        "heldout": f"{settings.get('heldout', '?')} held-out initial conditions (box, seed 1; drift: worst, "
                   "error and valid time: mean over them)",
    }
    md = [
        "# Coupled oscillator: learned integrators (" + ", ".join(
            _NAMES.get(m, m) for m in settings.get("models", ["vpt", "st"])) + ") vs Störmer–Verlet and RK4",
        "",
        f"{n_steps} steps of dt = {DT} (t in [0, {t_end}]); reference: DOP853 (rtol = atol = 1e-12). Models: "
        f"seeds {settings.get('seeds')}, {_budget_text(settings)} "
        f"({settings.get('jobs')} at a time, one thread), Levenberg–Marquardt, float64, best.pt = the epoch with the best validation score (the study configs: monitor = val_rollout, the mean relative error of a free rollout of the validation trajectories to t = 200); "
        "first window (3 states) from the reference; non-overlapping windows. Models: mean ± std over seeds "
        "(ddof = 1). Energy drift: max_t |H(t) − H(0)| / |H(0)|; slope: linear fit of the relative drift against t. "
        "Valid prediction time: first t with relative error > 0.1. log det J: per step (integrators) or per "
        "window map (models), cumulated (inf: a singular map, log|det J| = −inf somewhere). A blown-up rollout "
        "(|z| > 1000 |z0| or not finite) makes its drift and error inf; its slope is then meaningless.",
        "",
        *summary_section(stats, t_end),
    ]
    for name in EVAL_SETS:
        if tables[name]:
            md += [f"## {titles[name]}", "", format_table(tables[name]).rstrip("\n"), "",
                   f"Figures: `figures/{name}/` (invariants = energy, error, volume).", ""]
    if stats:
        md += _statistics_section(stats, float(t_end if t_end is not None else math.nan))
    md += ["## Commands", "", "```sh", *commands, "```", ""]
    return "\n".join(md)
