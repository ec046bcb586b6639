"""The studies' work–precision section: classical methods at the learned models' cost.

``vp-rollout --work-precision`` writes one row per classical method and step (and per DOP853 tolerance), and
one per model at its own step: the error at the final time against the exact flow (median over the initial
conditions), the largest invariant drift and the CPU seconds per unit of simulated time of one trajectory at
batch 1 (``vpintegrator.rollout.precision``). ``at_equal_cost`` reads, for each model, every classical
method's error at the model's own cost: log–log interpolation along the method's ladder between the two rungs
whose costs bracket the model's (``"interpolated"``), else the nearest rung (``"cheapest"`` /
``"dearest"``: the ladder does not reach that cost).
"""

from __future__ import annotations

from pathlib import Path

from .stats import fmt_num, md_table


def at_equal_cost(path, methods=None) -> list[dict]:
    """Per model row of the work-precision CSV at ``path`` and per classical method (``methods`` None: every
    method with a step ladder, DOP853 included): ``{"model", "model_error", "model_cost", "method",
    "error", "how", "train_seconds", "break_even", "break_even_method"}`` (the last three: the model row's
    training cost, NaN / "" where not recorded)."""
    from vpintegrator.data.work_precision import ladder_value, read_work_precision

    rows = read_work_precision(Path(path))
    models = [r for r in rows if r.kind == "model"]
    ladders: dict[str, list] = {}
    for r in rows:
        if r.kind != "model" and (methods is None or r.method in methods):
            ladders.setdefault(r.method, []).append(r)
    out = []
    for m in models:
        for method, ladder in ladders.items():
            e, where = ladder_value([(r.seconds_per_time, r.error_median) for r in ladder], m.seconds_per_time)
            if where == "none":
                continue
            how = {"below": "cheapest", "above": "dearest", "inside": "interpolated"}[where]
            out.append({"model": m.method, "model_error": m.error_median, "model_cost": m.seconds_per_time,
                        "model_h": m.h, "method": method, "error": e, "how": how, "train_seconds": m.train_seconds,
                        "break_even": m.break_even_rollouts, "break_even_method": m.break_even_method})
    return out


def equal_cost_section(path, methods=None, title: str = "At equal cost") -> list[str]:
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
            "method is cheaper and at least as accurate)." if trained else "")
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
