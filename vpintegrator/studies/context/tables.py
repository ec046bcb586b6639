"""The context study's results: the rows of ``context_study.json`` (schema, rounding, merging over
invocations), their summary over seeds, the tables and the figures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import VPIntegratorError
from ...rundir import read_own_json
from ..runner import StudyError
from ..schema import Each, Obj, ResultsSchema, Values, check_results
from ..stats import fmt_g, merge_keyed, quantile_cell, seed_quantiles, write_text
from .design import SETUPS, TARGET


#: significant digits of the per-pair errors in ``context_study.json`` (the tables show 2; the file stays ~1 MB)
ERROR_DIGITS = 4


def rounded_errors(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its per-pair errors rounded to ``ERROR_DIGITS`` significant digits (inf, or the "inf" a
    written file holds, stays inf)."""
    errors = {h: [float(f"{float(e):.{ERROR_DIGITS}g}") for e in v] for h, v in row["errors"].items()}
    return {**row, "errors": errors}


def write_compact_json(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as strict JSON on one line (no indentation: 100 errors per row), atomically."""
    import json

    from ..stats import plain

    write_text(path, json.dumps(plain(doc), allow_nan=False, separators=(",", ":")) + "\n")


def merge_rows(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``old`` whose key (system, split, k, σ, seed, method) no row of ``new`` has, then ``new``:
    a re-run replaces its own rows and keeps every other (rows without ``system`` are the rigid body's)."""
    return merge_keyed(old, new, lambda r: (r.get("system", "rigid_body"), r["split"], int(r["context_len"]),
                                            float(r["noise"]), int(r["seed"]), r["method"]), at_end=True)


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (split, k, σ, method, horizon): the per-seed medians and 10–90 % intervals, their median over
    seeds with a bootstrap 95 % interval, the seeds within the target and the largest per-state Casimir change."""
    def key(r: dict) -> tuple:
        return (r.get("system", "rigid_body"), r["split"], r["context_len"], r["noise"], r["method"])

    out = []
    for system, split, k, sigma, method in sorted({key(r) for r in rows}):
        mine = [r for r in rows if key(r) == (system, split, k, sigma, method)]
        horizons = sorted({h for r in mine for h in r["errors"]}, key=float)
        for h in horizons:
            q = seed_quantiles(r["errors"][h] for r in mine)
            kind = SETUPS[system]["structure"]
            cas = [r[f"{kind}_per_state"] for r in mine if r.get(f"{kind}_per_state") is not None]
            out.append({"system": system, "split": split, "context_len": k, "noise": sigma, "method": method, "t": float(h),
                        "seeds": [r["seed"] for r in mine], **q,
                        "within_target": int(sum(p["median"] <= TARGET[1] for p in q["per_seed"])),
                        f"{kind}_per_state": max(cas) if cas else None,
                        "failed": int(sum(r["failed"] for r in mine))})
    return out


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: one per (system, split, k, σ), a row per method at each horizon (the rigid body's
    headings without the system's name)."""
    lines = []
    settings = sorted({(s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"]) for s in summary})
    for system, split, k, sigma in settings:
        mine = [s for s in summary
                if (s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"]) == (system, split, k, sigma)]
        hs = sorted({s["t"] for s in mine})
        kind = SETUPS[system]["structure"]
        label = "max ΔCasimir per state" if kind == "casimir" else "max relative energy error"
        title = "" if system == "rigid_body" else f"{system}: "
        lines += ["", f"### {title}{split}, context_len {k}, noise σ = {sigma:g}", "",
                  "| method | " + " | ".join(f"t = {h:g}" for h in hs) + f" | seeds ≤ 1e-3 at t = 10 | {label} | failed |",
                  "|---|" + "---|" * (len(hs) + 3)]
        for method in sorted({s["method"] for s in mine}, key=_order):
            cells = []
            row10 = None
            for h in hs:
                s = next((x for x in mine if x["method"] == method and x["t"] == h), None)
                row10 = s if s is not None and h == TARGET[0] else row10
                cells.append("—" if s is None else quantile_cell(s))
            last = row10 or next(x for x in mine if x["method"] == method)
            lines.append(f"| {method} | " + " | ".join(cells) +
                         f" | {last['within_target']}/{len(last['seeds'])} | {fmt_g(last.get(kind + '_per_state'))} | {last['failed']} |")
    head = ("Cells: the median over seeds of the per-seed median error [bootstrap 95 % interval over seeds] "
            "(the smallest 10 % and largest 90 % quantile over pairs of any seed).")
    return head + "\n" + "\n".join(["", "### Summary", "", *summary_table(summary)[:-1], *lines]) + "\n"


#: the summary table's kinds (``vpintegrator.studies.summary_table``): identification + a classical method (the
#: equations' form known, the parameters fitted to the context), the learned maps and parroting (data only; not a
#: model handed the true parameters, ``oracle context``), the VPT family, the oracle (the true equations and
#: parameters on the full state)
KINDS: dict[str, Any] = {"with the equations": lambda m: m.startswith(("fd+", "shooting+")),
                         "data only": lambda m: "oracle" not in m and not m.startswith(("fd+", "shooting+")),
                         "VPT family": lambda m: m.startswith("vpt"), "full order": lambda m: m.startswith("oracle ")}


def summary_table(summary: list[dict[str, Any]]) -> list[str]:
    """One line per (system, split, k, σ): the most accurate row at t = 10 of each of ``KINDS`` the results hold,
    with its error (the rows carry no cost: no cost or speed-up column)."""
    from ..summary_table import summary_table as draw

    at = [s for s in summary if s["t"] == TARGET[0]]
    settings = sorted({(s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"]) for s in at})
    cases = [(f"{'' if system == 'rigid_body' else system + ': '}{split}, context_len {k}, noise σ = {sigma:g}",
              [s for s in at if (s.get("system", "rigid_body"), s["split"], s["context_len"], s["noise"])
               == (system, split, k, sigma)]) for system, split, k, sigma in settings]
    kinds = [k for k, pick in KINDS.items() if any(pick(s["method"]) for s in at)]
    return draw(cases, kinds, lambda s: [k for k, pick in KINDS.items() if pick(s["method"])], lambda s: s["median"],
                None, lambda s: s["method"], f"at t = {TARGET[0]:g}", "median error over seeds")


_ORDER = ["lpnet_ctx", "lpnet_ctx oracle context", "lpnet_ctx_attention", "lpnet", "vpt", "g_sympnet_ctx",
          "g_sympnet_ctx oracle context", "g_sympnet", "st", "parrot", "fd+rk4", "shooting+rk4", "oracle rk4",
          "fd+gauss_legendre4", "shooting+gauss_legendre4", "oracle gauss_legendre4"]


def _order(method: str) -> int:
    return _ORDER.index(method) if method in _ORDER else len(_ORDER)


def figures(summary: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per system, one figure per axis: error vs horizon (interpolation, the base k, σ = 0), error at t = 10
    vs noise and vs context length; PNG and SVG under ``out`` (``context_<axis>`` for the rigid body,
    ``context_<system>_<axis>`` for another)."""
    paths: list[Path] = []
    for system in sorted({s.get("system", "rigid_body") for s in summary}):
        mine = [s for s in summary if s.get("system", "rigid_body") == system]
        paths += _system_figures(mine, out, "context" if system == "rigid_body" else f"context_{system}",
                                 SETUPS[system]["k"])
    return paths


def _system_figures(summary: list[dict], out: Path, prefix: str, k0: int) -> list[Path]:
    from ...plotting.style import figure, save_figure, styled

    paths: list[Path] = []

    @styled
    def draw(xkey: str, select, xlabel: str, stem: str, logx: bool = True, style=None):
        fig = figure(4.5, 3.0)
        ax = fig.add_subplot()
        rows = [s for s in summary if select(s)]
        for method in sorted({s["method"] for s in rows}, key=_order):
            pts = sorted((s[xkey], s["median"], s["boot_lo"], s["boot_hi"]) for s in rows if s["method"] == method)
            if not pts:
                continue
            x = np.array([p[0] for p in pts], dtype=float)
            if xkey == "noise":
                x = np.where(x == 0, 1e-4, x)  # σ = 0 drawn at 1e-4 (labelled)
            y = np.array([p[1] for p in pts])
            lo = np.array([p[2] if np.isfinite(p[2]) else p[1] for p in pts])
            hi = np.array([p[3] if np.isfinite(p[3]) else p[1] for p in pts])
            line, = ax.plot(x, y, marker="o", label=method)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median relative error")
        ax.axhline(TARGET[1], color="0.5", linestyle=":", linewidth=0.8)
        ax.legend(fontsize=6, ncols=2)
        return fig

    specs = [
        ("t", lambda s: s["split"] == "interpolation" and s["context_len"] == k0 and s["noise"] == 0, "t",
         f"{prefix}_horizon", True),
        ("noise", lambda s: s["split"] == "interpolation" and s["context_len"] == k0 and s["t"] == 10.0,
         "observation noise σ (σ = 0 at 1e-4)", f"{prefix}_noise", True),
        ("context_len", lambda s: s["split"] == "interpolation" and s["noise"] == 0 and s["t"] == 10.0,
         "context length k (error at t = 10)", f"{prefix}_length", False),
    ]
    for xkey, select, xlabel, stem, logx in specs:
        if len({s[xkey] for s in summary if select(s)}) < 2:
            continue
        fig = draw(xkey, select, xlabel, stem, logx)
        paths += save_figure(fig, out / stem, formats=("png", "svg"), overwrite=True)
    return paths


#: a row of context_study.json (``vpintegrator.studies.schema``): one method, split, context length, noise, seed
ROW = Obj(required={"system": "str", "split": "str", "context_len": "int", "noise": "number", "seed": "int?",
                    "method": "str", "errors": Values(Each("number?"))},
          optional={"energy_per_state": "number?", "failed": "int?", "cpu_seconds": "number?"})
#: what context_study.json holds
SCHEMA = ResultsSchema("context", {"rows": Each(ROW)})


def read_study_json(path: Path) -> dict[str, Any]:
    """``context_study.json`` as this study wrote it (``{"commands": [...], "rows": [{...}, ...]}``), checked
    against ``SCHEMA``: a missing, empty, damaged or foreign file, a row without a key or with a string for a
    number, is a one-line error naming it (and the row and key) and saying to delete it."""
    fix = (f"delete it and run the study again without --figures-only (the finished runs in {path.parent / 'runs'} "
           "are kept)")
    doc = read_own_json(path, "the context study's results", fix)
    try:
        return check_results(doc, path, replace(SCHEMA, fix=fix))
    except StudyError as err:
        raise VPIntegratorError(str(err)) from None
