"""Figures for papers: rollouts (from files or from memory) and training curves.

- ``vpintegrator.plotting.style``: one fixed colour-blind-safe colour (Okabe–Ito), dash and marker per method
  ([`method_styles`][vpintegrator.plotting.method_styles], [`method_colors`][vpintegrator.plotting.method_colors]), display names ([`display_name`][vpintegrator.plotting.display_name]), the paper style and
  journal presets ([`figure_style`][vpintegrator.plotting.figure_style]: ``"single"`` column, 3.5 in ≈ 89 mm wide, 7-pt text;
  ``"double"`` column, 7.2 in ≈ 183 mm, 8-pt text: the file is exactly that wide; or a ``.mplstyle`` file), atomic
  [`save_figure`][vpintegrator.plotting.save_figure] (PDF and PNG).
- ``vpintegrator.plotting.source``: what a rollout figure accepts — a ``RolloutResult``, the path of a rollout file, a
  ``Trajectories`` or a dict ``{label: Trajectories}`` (e.g. from [`vpintegrator.integrate`][vpintegrator.data.integration.integrate] or
  [`vpintegrator.generate`][vpintegrator.data.generation.generate]) with an optional ``reference=``.
- ``vpintegrator.plotting.rollout``: [`plot_trajectories3d`][vpintegrator.plotting.plot_trajectories3d], [`plot_invariants`][vpintegrator.plotting.plot_invariants], [`plot_error`][vpintegrator.plotting.plot_error],
  [`plot_volume`][vpintegrator.plotting.plot_volume], [`plot_phase`][vpintegrator.plotting.plot_phase], [`plot_rollout`][vpintegrator.plotting.plot_rollout] (by kind), [`plot_all`][vpintegrator.plotting.plot_all] (write them).
- ``vpintegrator.plotting.training``: [`plot_training`][vpintegrator.plotting.plot_training] (training curves of ``vp-train`` run directories).
- ``vpintegrator.plotting.display``: [`enable_notebook_display`][vpintegrator.plotting.enable_notebook_display] (figures
  shown inline in Jupyter; every figure made here turns it on) and [`FigureFiles`][vpintegrator.plotting.FigureFiles] (the
  files ``plot_all`` and ``plot_training`` wrote, shown in a notebook as the figures).
- ``vpintegrator.plotting.work_precision``: [`plot_work_precision`][vpintegrator.plotting.plot_work_precision] (error and invariant drift against cost, log–log).

Every figure is a ``matplotlib.figure.Figure`` built without pyplot (any backend, Agg included); every
``plot_*`` function and [`training_figure`][vpintegrator.plotting.training_figure] also draws into existing Axes (``ax=`` / ``axes=``) and
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
from .display import FigureFiles, enable_notebook_display
from .source import MAX_CURVES, plot_data
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
    "FigureFiles",
    "enable_notebook_display",
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
