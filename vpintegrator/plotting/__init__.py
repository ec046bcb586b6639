"""Figures for papers: rollouts (from files or from memory) and training curves.

- :mod:`.style`: one fixed colour per method (:func:`method_colors`), the paper style, atomic
  :func:`save_figure` (PDF and PNG).
- :mod:`.source`: what a rollout figure accepts — a ``RolloutResult``, the path of a rollout file, a
  ``Trajectories`` or a dict ``{label: Trajectories}`` (e.g. from :func:`vpintegrator.integrate` or
  :func:`vpintegrator.generate`) with an optional ``reference=``.
- :mod:`.rollout`: :func:`plot_trajectories3d`, :func:`plot_invariants`, :func:`plot_error`,
  :func:`plot_volume`, :func:`plot_phase`, :func:`plot_rollout` (by kind), :func:`plot_all` (write them).
- :mod:`.training`: :func:`plot_training` (training curves of ``vp-train`` run directories).

Every figure is a :class:`matplotlib.figure.Figure` built without pyplot (any backend, Agg included).
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
from .style import INTEGRATOR_COLORS, MODEL_PALETTE, REFERENCE_COLOR, STYLE, method_colors, save_figure
from .training import plot_training, read_run_log, training_figure

__all__ = [
    "KINDS",
    "CLIP_FACTOR",
    "MAX_CURVES",
    "STYLE",
    "REFERENCE_COLOR",
    "INTEGRATOR_COLORS",
    "MODEL_PALETTE",
    "method_colors",
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
