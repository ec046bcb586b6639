"""Figures for papers: rollouts (from files or from memory) and training curves.

- :mod:`.style`: one fixed colour-blind-safe colour (Okabe–Ito), dash and marker per method
  (:func:`method_styles`, :func:`method_colors`), display names (:func:`display_name`), the paper style and
  journal presets (:func:`figure_style`: ``"single"``/``"double"`` column, a ``.mplstyle`` file), atomic
  :func:`save_figure` (PDF and PNG).
- :mod:`.source`: what a rollout figure accepts — a ``RolloutResult``, the path of a rollout file, a
  ``Trajectories`` or a dict ``{label: Trajectories}`` (e.g. from :func:`vpintegrator.integrate` or
  :func:`vpintegrator.generate`) with an optional ``reference=``.
- :mod:`.rollout`: :func:`plot_trajectories3d`, :func:`plot_invariants`, :func:`plot_error`,
  :func:`plot_volume`, :func:`plot_phase`, :func:`plot_rollout` (by kind), :func:`plot_all` (write them).
- :mod:`.training`: :func:`plot_training` (training curves of ``vp-train`` run directories).
- :mod:`.work_precision`: :func:`plot_work_precision` (error and invariant drift against cost, log–log).

Every figure is a :class:`matplotlib.figure.Figure` built without pyplot (any backend, Agg included); every
``plot_*`` function and :func:`training_figure` also draws into existing Axes (``ax=`` / ``axes=``) and
takes ``style=``.
"""

from __future__ import annotations

from .rollout import (
    CLIP_FACTOR,
    KINDS,
    plot_all,
    plot_error,
    plot_invariants,
    plot_phase,
    plot_rollout,
    plot_trajectories3d,
    plot_volume,
)
from .source import MAX_CURVES, PlotData, plot_data
from .style import (
    DISPLAY_NAMES,
    INTEGRATOR_COLORS,
    INTEGRATOR_STYLES,
    MODEL_MARKERS,
    MODEL_PALETTE,
    OKABE_ITO,
    PRESETS,
    REFERENCE_COLOR,
    STYLE,
    FigureStyle,
    MethodStyle,
    display_name,
    figure_style,
    method_colors,
    method_styles,
    save_figure,
)
from .training import plot_training, read_run_log, training_figure
from .work_precision import plot_work_precision

__all__ = [
    "plot_work_precision",
    "KINDS",
    "CLIP_FACTOR",
    "MAX_CURVES",
    "STYLE",
    "REFERENCE_COLOR",
    "INTEGRATOR_COLORS",
    "MODEL_PALETTE",
    "method_colors",
    "method_styles",
    "MethodStyle",
    "INTEGRATOR_STYLES",
    "MODEL_MARKERS",
    "OKABE_ITO",
    "DISPLAY_NAMES",
    "display_name",
    "PRESETS",
    "FigureStyle",
    "figure_style",
    "save_figure",
    "PlotData",
    "plot_data",
    "plot_trajectories3d",
    "plot_invariants",
    "plot_error",
    "plot_volume",
    "plot_phase",
    "plot_rollout",
    "plot_all",
    "plot_training",
    "training_figure",
    "read_run_log",
]
