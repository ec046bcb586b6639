"""The studies' work–precision section: classical methods at the learned models' cost, as Markdown.

Formatting only: the table and its equal-cost reading ([`at_equal_cost`][vpintegrator.data.work_precision.at_equal_cost],
re-exported here) are ``vpintegrator.data.work_precision``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..data.work_precision import at_equal_cost
from .stats import fmt_num, md_table

__all__ = ["at_equal_cost", "equal_cost_section"]


def equal_cost_section(path: str | Path, methods: Sequence[str] | None = None, title: str = "At equal cost") -> list[str]:
    """Markdown lines: ``at_equal_cost`` as a table (one row per model, one column per method)."""
    pairs = at_equal_cost(path, methods)
    if not pairs:
        return []
    meths = list(dict.fromkeys(p["method"] for p in pairs))
    f = lambda v: fmt_num(v, 3, small=1e-2, missing="–")  # noqa: E731
    trained = any(p["break_even_method"] or p["train_seconds"] == p["train_seconds"] for p in pairs)  # not NaN
    body = []
    for model in dict.fromkeys(p["model"] for p in pairs):
        sel = {p["method"]: p for p in pairs if p["model"] == model}
        first = next(iter(sel.values()))
        body.append([model, f(first["model_h"]), f(first["model_cost"]), f(first["model_error"]),
                     *[(f(sel[m]["error"]) + ("" if sel[m]["how"] == "interpolated" else f" ({sel[m]['how']} rung)"))
                       if m in sel else "–" for m in meths],
                     *([f(first["train_seconds"]), _break_even_text(first)] if trained else [])])
    note = (" Training: the CPU seconds of the model's training and the break-even number of rollouts of length T "
            "after which it has paid for them against the cheapest classical method at its error (never: that "
            "method is cheaper and at least as accurate). It charges the training alone: the table records neither "
            "the training data's generation nor the tuning runs, so a break-even charged in full is larger (the "
            "reduction study draws one)." if trained else "")
    return [f"### {title}", "",
            "Error at the final time against the exact flow (median over the ICs) of each model at its own step, and of "
            "each classical method at the model's cost (CPU s per unit time, one trajectory, batch 1): log–log "
            "interpolation along the method's step ladder (a '(cheapest rung)' or '(dearest rung)' entry: the ladder "
            "does not reach that cost, the nearest rung is shown)." + note, "",
            *md_table(["model", "h", "CPU s / unit time", "model error", *meths,
                       *(["training CPU s", "break-even rollouts"] if trained else [])], body), ""]


def _break_even_text(pair: dict) -> str:
    """``"1.2e+03 (rk4)"``, ``"never (rk4)"``, or ``"–"`` (not recorded, or no classical ladder reaches the error)."""
    n, method = pair["break_even"], pair["break_even_method"]
    if not method or n != n:
        return "–"
    return f"never ({method})" if n == float("inf") else f"{n:.3g} ({method})"
