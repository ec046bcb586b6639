"""The work–precision diagram: error and invariant drift against cost, log–log (``vp-plot --kind work_precision``).

Rows come from ``vpintegrator.rollout.precision`` (in memory) or the CSV of
[`vpintegrator.rollout.write_work_precision`][vpintegrator.rollout.precision.write_work_precision]. Each classical method is a line through its step ladder
(DOP853 through its tolerances), each model a single marker; the colours, dashes and markers are the package's
fixed method styles, so a method looks the same here as in every other figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..data.work_precision import WorkPrecisionRow, read_work_precision
from ..errors import VPIntegratorError
from .style import WIDTH, legend, method_styles, styled, target_axes

__all__ = ["plot_work_precision"]

_PANELS = (("error_median", "relative error at T (median over ICs)"),
           ("drift_max", "max. relative invariant drift on [0, T]"))


def _rows(source) -> list[WorkPrecisionRow]:
    if isinstance(source, (str, Path)):
        return read_work_precision(source)
    rows = list(source)
    if not rows or not all(isinstance(r, WorkPrecisionRow) for r in rows):
        raise VPIntegratorError("rows: expected WorkPrecisionRow objects (vpintegrator.rollout.work_precision()) or "
                                "the path of a work-precision CSV", key="rows")
    return rows


@styled
def plot_work_precision(source, axes=None, style=None, method_names: dict[str, str] | None = None):
    """Error vs cost and invariant drift vs cost, log–log, one point per method and step.

    Parameters
    ----------
    source : list of WorkPrecisionRow, or path of a work-precision CSV
    axes : two matplotlib Axes, optional
        Draw into them (error, drift) instead of a new figure.
    style : see [`vpintegrator.plotting.figure_style`][vpintegrator.plotting.figure_style]
    method_names : dict, optional
        What the legend calls a method, over [`display_name`][vpintegrator.plotting.display_name].

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.ticker import NullFormatter

    rows = _rows(source)
    fig, panels, own = target_axes(axes, 2, WIDTH, 2.8, name="axes")
    labels = list(dict.fromkeys(r.method for r in rows))
    kinds = [next(r.kind for r in rows if r.method == label) for label in labels]
    styles = method_styles(labels, ["flow" if k == "dop853" else k for k in kinds])
    t_end = rows[0].t_end
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
