"""The look shared by every figure: fixed method colours, the paper style, legends, atomic saving.

Figures are built without pyplot (no global state; any backend, Agg included) under :data:`STYLE`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import VPIntegratorError

REFERENCE_COLOR = "black"
#: one fixed colour per classical method (matplotlib's tab10, by method name)
INTEGRATOR_COLORS = {
    "implicit_midpoint": "#1f77b4",
    "rk4": "#ff7f0e",
    "gauss_legendre4": "#2ca02c",
    "splitting": "#9467bd",
    "euler": "#8c564b",
    "stormer_verlet": "#bcbd22",
    "exact_flow": "#7f7f7f",
    "dop853": "#7f7f7f",
}
#: colours of models (and of anything else that is not a shipped integrator), in the order of their labels
MODEL_PALETTE = ("#d62728", "#17becf", "#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
#: colours of runs in training-curve figures, in the order the runs are given
RUN_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2")

#: the paper look: small fonts, thin lines (applied to every figure made here)
STYLE = {
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "lines.linewidth": 1.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,
}

WIDTH = 6.3  # inches: a full text width
#: file formats :func:`save_figure` writes by default
FORMATS = ("pdf", "png")


def method_colors(labels: Sequence[str], kinds: Sequence[str] | None = None) -> dict[str, str]:
    """The fixed colour of each method.

    Parameters
    ----------
    labels : list of str
        Method labels (``"reference"`` allowed).
    kinds : list of str, optional
        ``"reference"``, ``"integrator"``, ``"flow"`` or ``"model"`` per label; by default a label that
        names a classical integrator is one, anything else a model.

    Returns
    -------
    dict
        label -> matplotlib colour. The reference is black, each shipped integrator has its own colour
        whatever else is drawn, and the other labels take :data:`MODEL_PALETTE` in their order in
        ``labels``; so one call gives the same colour to a method in every figure it makes.
    """
    kinds = list(kinds) if kinds is not None else [None] * len(labels)
    if len(kinds) != len(labels):
        raise VPIntegratorError(f"method_colors: {len(labels)} labels but {len(kinds)} kinds")
    colors: dict[str, str] = {}
    others = []
    for label, kind in zip(labels, kinds):
        if label in colors or label in others:
            continue
        if label == "reference" or kind == "reference":
            colors[label] = REFERENCE_COLOR
        elif label in INTEGRATOR_COLORS and kind in (None, "integrator", "flow"):
            colors[label] = INTEGRATOR_COLORS[label]
        else:
            others.append(label)
    for i, label in enumerate(others):
        colors[label] = MODEL_PALETTE[i % len(MODEL_PALETTE)]
    return colors


def figure(width: float, height: float):
    """A constrained-layout :class:`~matplotlib.figure.Figure` (no pyplot)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(width, height), layout="constrained")


def styled(fn):
    """Build the figure under :data:`STYLE` (fonts and lines are read when artists are created)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper


def legend(fig, axes, ncols: int = 6, extra: Sequence = ()) -> None:
    """One legend below the figure with each label once, only for artists that were drawn with a label."""
    handles, labels = [], []
    for ax in np.atleast_1d(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), ncols), frameon=False)


def check_dpi(dpi) -> int:
    """``dpi`` as an int > 0, else a one-line error naming the key ``dpi``."""
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer, float)) or not dpi > 0 or dpi != int(dpi):
        raise VPIntegratorError(f"dpi must be a whole number > 0 (PNG resolution, e.g. 200); got {dpi!r}", key="dpi")
    return int(dpi)


def check_formats(formats) -> tuple[str, ...]:
    """``formats`` (a name or a list of names) checked against matplotlib's savers."""
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    valid = ("pdf", "png", "svg", "eps", "jpg")
    bad = [f for f in formats if f not in valid]
    if not formats or bad:
        raise VPIntegratorError(
            f"formats: unknown figure format {bad[0] if bad else '(none)'!r}; valid formats: {', '.join(valid)}",
            key="formats",
        )
    return formats


def save_figure(fig, stem: str | Path, formats: Sequence[str] = FORMATS, dpi: int = 200, *,
                overwrite: bool = False) -> list[Path]:
    """Write ``fig`` as ``<stem>.pdf`` and ``<stem>.png`` (each atomically: a temporary file renamed into
    place, so an interrupted call leaves no half-written figure); return the paths. An existing file is
    refused unless ``overwrite``, and then replaced only if it is a figure drawn by matplotlib
    (:func:`vpintegrator._outputs.check_output`); each file is locked while written."""
    import matplotlib

    from .._io import atomic_path
    from .._outputs import check_output, output_lock

    dpi = check_dpi(dpi)
    formats = check_formats(formats)
    stem = Path(stem)
    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt in formats:
            target = stem.with_name(f"{stem.name}.{fmt}")
            with output_lock(check_output(target, "figure", overwrite)):
                with atomic_path(check_output(target, "figure", overwrite), suffix=f".{fmt}") as tmp:
                    fig.savefig(tmp, format=fmt, dpi=dpi)
            paths.append(target)
    return paths


def check_out_dir(out_dir: str | Path, stems: Sequence[str], formats: Sequence[str], inputs=(),
                  overwrite: bool = False) -> Path:
    """Refuse, before anything is drawn, an output directory that is a file or one of ``inputs``, or a
    figure ``<out_dir>/<stem>.<format>`` that would overwrite an input, that exists (unless
    ``overwrite``) or that is not a figure drawn by matplotlib (one-line errors naming ``out``)."""
    from .._io import check_not_input
    from .._outputs import check_output

    out_dir = Path(out_dir)
    inputs = [Path(p) for p in inputs if p is not None]
    check_not_input(out_dir, inputs, key="out")
    if out_dir.exists() and not out_dir.is_dir():
        raise VPIntegratorError(
            f"out {out_dir} is a file, not a directory; give a directory for the figures", key="out"
        )
    for stem in stems:
        for fmt in formats:
            check_not_input(out_dir / f"{stem}.{fmt}", inputs, key="out")
            check_output(out_dir / f"{stem}.{fmt}", "figure", overwrite)
    return out_dir
