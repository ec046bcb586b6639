"""The summary table a study's results open with: one line per case, the most accurate row of each kind (with the
equations, data only, the VPT family, the full-order model; a study names the kinds its rows have) with its error
and its cost, and its speed-up against the same case's full-order row (the full-order row's cost over the row's)."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from .stats import fmt_num, md_table

__all__ = ["KINDS", "FULL_ORDER", "summary_table"]

#: the kinds of row a summary may show, in its column order
KINDS = ("with the equations", "data only", "VPT family", "full order")
#: the kind the speed-up is taken against
FULL_ORDER = "full order"


def _finite(x: Any) -> bool:
    return x is not None and math.isfinite(float(x))


def summary_table(cases: Iterable[tuple[str, Sequence[Any]]], kinds: Sequence[str],
                  kind_of: Callable[[Any], Iterable[str]], error: Callable[[Any], float | None],
                  cost: Callable[[Any], float | None] | None, name: Callable[[Any], str], at: str, measure: str,
                  cost_unit: str = "") -> list[str]:
    """The summary's lines: a sentence saying what it shows, the Markdown table, a blank line.

    ``cases``: (the case's label, its entries); ``kinds``: the columns, out of ``KINDS``; ``kind_of(e)``: the kinds
    an entry belongs to; ``error(e)``: the error the best is chosen by (``at`` says where it is taken, ``measure``
    what it is); ``cost(e)``: its cost in ``cost_unit`` (None: the rows have no cost, and the table no cost or
    speed-up column); ``name(e)``: how the table names it. Per case and kind the entry of the smallest finite error;
    its speed-up: the full-order entry's cost over its cost (a speed-up column per kind when ``kinds`` holds
    ``FULL_ORDER``); ``—`` where the case has no such entry or none is finite."""
    kinds = [k for k in KINDS if k in kinds]
    priced = cost is not None
    speed = FULL_ORDER in kinds and priced
    head = ["case"]
    for k in kinds:
        head += [k, "error"] + (["cost"] if priced else []) + (["speed-up"] if speed and k != FULL_ORDER else [])
    body = []
    for label, entries in cases:
        best: dict[str, Any] = {}
        for k in kinds:
            scored = [e for e in entries if k in set(kind_of(e)) and _finite(error(e))]
            best[k] = min(scored, key=lambda e: float(error(e))) if scored else None  # type: ignore[arg-type]
        ref = best.get(FULL_ORDER)
        full = cost(ref) if ref is not None and cost is not None else None
        row = [label]
        for k in kinds:
            e = best[k]
            c = None if e is None or cost is None else cost(e)
            row += ["—" if e is None else name(e), fmt_num(None if e is None else error(e))] + \
                ([fmt_num(c)] if priced else [])
            if speed and k != FULL_ORDER:
                row.append(fmt_num(full / c if full is not None and c and _finite(full) and _finite(c) else None))
        body.append(row)
    what = measure + (f"; cost: {cost_unit}" if priced else "") + \
        ("; speed-up: the full-order row's cost over the row's" if speed else "")
    return [f"Per case, the most accurate row {at} of each kind ({what}; — where the case has no such row or none is "
            "finite):", "", *md_table(head, body), ""]
