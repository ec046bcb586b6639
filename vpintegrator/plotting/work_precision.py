"""The work–precision diagram: error and invariant drift against cost, log–log (``vp-plot --kind work_precision``).

The figure only: rows come from ``vpintegrator.rollout.precision`` (in memory) or a CSV, read through the
table module ``vpintegrator.data.work_precision``. Each classical method is a line through its step ladder
(DOP853 through its tolerances), each model a single marker; the colours, dashes and markers are the package's
fixed method styles, so a method looks the same here as in every other figure. With ``amortise_over`` = N (or a
table written with one), a model whose training time is recorded also gets an arrow from its bare cost to its
cost with training spread over N rollouts of length T, ending in a hollow marker (the break-even N* in its
legend entry; ``vpintegrator.data.work_precision``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..data.work_precision import WorkPrecisionRow, amortised_cost, check_rollouts, work_precision_rows
from .style import WIDTH, legend, method_styles, styled, target_axes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_work_precision"]

_PANELS = (("error_median", "relative error at T (median over ICs)"),
           ("drift_max", "max. relative invariant drift on [0, T]"))


@styled
def plot_work_precision(source: str | Path | Iterable[WorkPrecisionRow], axes: Any = None,
                        style: Any = None, amortise_over: float | None = None,
                        method_names: dict[str, str] | None = None) -> Figure:
    """Error vs cost and invariant drift vs cost, log–log, one point per method and step.

    Parameters
    ----------
    source : list of WorkPrecisionRow, or path of a work-precision CSV
    axes : two matplotlib Axes, optional
        Draw into them (error, drift) instead of a new figure.
    style : str, optional
        A journal preset or style file: see [`figure_style`][vpintegrator.plotting.figure_style].
    amortise_over : float, optional
        N: draw each model's cost with its training spread over N rollouts of length T (an arrow from the bare
        cost to a hollow marker). Default: the N the table was written with, if any (none: bare costs only).
    method_names : dict, optional
        What the legend calls a method, over [`display_name`][vpintegrator.plotting.display_name].

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.ticker import NullFormatter

    rows = work_precision_rows(source)
    if amortise_over is not None:
        amortise_over = check_rollouts(amortise_over)
    fig, panels, own = target_axes(axes, 2, WIDTH, 2.8, name="axes")
    labels = list(dict.fromkeys(r.method for r in rows))
    kinds = [next(r.kind for r in rows if r.method == label) for label in labels]
    styles = method_styles(labels, ["flow" if k == "dop853" else k for k in kinds])
    t_end = rows[0].t_end
    amortised = []  # (model row, amortised cost, N)
    for r in rows:
        n = amortise_over if amortise_over is not None else r.amortise_over
        if r.kind == "model" and n is not None and math.isfinite(n):
            cost = amortised_cost(r, n)  # NaN: no training time recorded
            if math.isfinite(cost) and cost > 0:
                amortised.append((r, cost, n))
    for ax, (key, title) in zip(panels, _PANELS):
        for label in labels:
            # along the ladder (largest step or loosest tolerance first), not by the measured cost, which is noisy
            ladder = sorted((r for r in rows if r.method == label),
                            key=lambda r: -(r.rtol if r.kind == "dop853" else r.h))
            points = [(r.seconds_per_time, getattr(r, key)) for r in ladder]
            points = [(c, v) for c, v in points if math.isfinite(c) and c > 0 and math.isfinite(v) and v > 0]
            if not points:
                continue
            st = styles[label]
            x, y = zip(*points)
            kw = {"color": st.color, "linestyle": st.linestyle if len(points) > 1 else "none",
                  "marker": st.marker or "o", "label": st.name}
            ax.plot(x, y, **kw)
        for r, cost, n in amortised:
            value = getattr(r, key)
            if not (math.isfinite(value) and value > 0):
                continue
            st = styles[r.method]
            ax.annotate("", xy=(cost, value), xytext=(r.seconds_per_time, value),
                        arrowprops={"arrowstyle": "->", "color": st.color, "lw": 0.8})
            ax.plot([cost], [value], linestyle="none", marker=st.marker or "o", markerfacecolor="none",
                    color=st.color, label=f"{st.name} + training / {n:g} rollouts{_n_star(r)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones collide
        ax.set_xlabel("CPU seconds per unit time (batch 1)")
        ax.set_ylabel(title)
        ax.grid(True, which="major", alpha=0.3)
    panels[0].set_title(f"error vs the exact flow at T = {t_end:g}")
    panels[1].set_title("invariant drift")
    legend(fig, panels, ncols=4, own=own)
    return fig


def _n_star(row: WorkPrecisionRow) -> str:
    """The legend's break-even note: ``", N* = 1.2e+03 (vs rk4)"``, ``", never (rk4)"`` or nothing."""
    n, method = row.break_even_rollouts, row.break_even_method
    if not method:
        return ""
    if math.isinf(n):
        return f", never pays vs {method}"
    return f", N* = {n:.3g} vs {method}" if math.isfinite(n) else ""
