"""Rollout figures: trajectories in state space, invariant drift, relative error, volume, phase portraits.

Every ``plot_*`` function takes a *source* (see ``vpintegrator.plotting.source``: a ``RolloutResult``,
the path of a rollout file, a ``Trajectories`` or a dict ``{label: Trajectories}`` with an optional
``reference=``) and returns a ``matplotlib.figure.Figure``: a new one, or the one holding the Axes
given by ``ax=`` (one-panel kinds) or ``axes=`` (one Axes per panel), drawn into as they are (the legend
then goes into the first of them, and there is no figure title). ``style=`` picks a journal preset or a
``.mplstyle`` file ([`figure_style`][vpintegrator.plotting.figure_style]).

Methods are named as [`display_name`][vpintegrator.plotting.display_name] says ("Gauss–Legendre 4") and keep
one colour, dash and marker in every figure; where several trajectories are drawn one curve each, the
dash tells the trajectory and colour and marker the method.

``traj`` selects trajectories by their index in the data file (as ``vp-rollout --traj``); by default every
trajectory is shown: one curve each where there are few (at most [`MAX_CURVES`][vpintegrator.plotting.MAX_CURVES]), else the median and
the 10-90 % band. State-space figures (``trajectories3d``, ``phase``) cannot show a band; of many
trajectories they draw [`MAX_CURVES`][vpintegrator.plotting.MAX_CURVES] evenly spread ones, and say so in the title. Titles say what is
shown; on the paper's rigid-body set trajectories carry the paper's names ("trajectory 1" is data row 100).

Quantities that span decades (relative error, invariant drift, volume) are on log axes; values that are
exactly 0 cannot show there, and a method with nothing to show is named in a note instead of the legend.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from ..arrays import relative_drift
from .._outputs import output_lock
from ..errors import VPIntegratorError
from ..data.rollouts import RolloutResult
from ..data.trajectories import Trajectories
from .display import FigureFiles
from .source import MAX_CURVES, PlotSource, TrajSelection, describe, methods_to_draw, plot_data, select, traj_names
from .style import (FORMATS, call_tag, WIDTH, MethodStyle, legend, method_styles, save_figure,
                    set_title, styled, system_title, target_axes)

#: figure kinds of ``plot_rollout`` / ``vp-plot --kind``
KINDS = ("trajectories3d", "invariants", "error", "volume", "phase")
#: states farther out than this many times the reference's extent are not drawn in state-space plots
#: (a blown-up method would otherwise shrink everything else to a dot)
CLIP_FACTOR = 3.0
#: line styles that tell individual trajectories apart in time-series figures (colour tells the method)
TRAJ_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))

#: line style of the vertical tick that marks where a method failed (blow-up or non-finite)
BLOWUP_STYLE = (0, (2, 1.5))

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_COORDS = {"coupled_oscillator": ("q_1", "q_2", "p_1", "p_2")}
_INVARIANT_SYMBOLS = {"energy": "H", "casimir": "C", "sum": "S", "product": "P"}


# --------------------------------------------------------------------------- helpers


def _prepare(source, traj, reference, max_points) -> tuple[RolloutResult, bool]:
    data = plot_data(source, reference=reference, max_points=max_points)
    return select(data, traj)


def _styles(data: RolloutResult) -> dict[str, MethodStyle]:
    labels = data.all_labels
    kinds = ["reference" if k == "reference" else data.kinds.get(k) for k in labels]
    return method_styles(labels, kinds)


def _banded(data: RolloutResult, band: bool | None) -> bool:
    return data.n_traj > MAX_CURVES if band is None else bool(band) and data.n_traj > 1


def _positive(values: np.ndarray) -> np.ndarray:
    """|values| with zeros as NaN (a log axis cannot show 0)."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    return np.where(a > 0, a, np.nan)


def _running_max(values: np.ndarray) -> np.ndarray:
    """The running maximum over time (the last axis) of ``|values|``, zeros as NaN until the first nonzero
    value (``_positive``): the largest volume error so far. A cumulative sum that oscillates over decades
    (the implicit midpoint rule's, Gauss–Legendre's) then reads as its envelope and covers no other line."""
    return np.fmax.accumulate(_positive(values), axis=-1)


def _series(ax, x, values, banded: bool, style: MethodStyle, slot: int = 0, n_slots: int = 1, **kw) -> bool:
    """Draw ``values`` (n_traj, n) against ``x``: one line per row, or median + band over all rows, in the
    method's ``style`` (markers staggered by ``slot`` of ``n_slots``; several rows: the dash tells the row).

    Returns False (and draws nothing) when there is no finite value to show.
    """
    values = np.asarray(values, dtype=np.float64)
    if not np.isfinite(values).any():
        return False
    n = values.shape[-1]
    if banded:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, med, hi = np.nanpercentile(values, [10, 50, 90], axis=0)
        ax.plot(x, med, label=style.name, **style.line(n, slot, n_slots), **kw)
        ax.fill_between(x, lo, hi, color=style.color, alpha=0.15, linewidth=0)
        return True
    several = values.shape[0] > 1
    for j in range(values.shape[0]):
        dash = TRAJ_STYLES[j % len(TRAJ_STYLES)] if several else None
        ax.plot(x, values[j], label=style.name if j == 0 else None, **style.line(n, slot, n_slots, dash), **kw)
    return True


def _traj_key(data: RolloutResult, banded: bool) -> list:
    """Legend entries for the line styles of individual trajectories (when more than one is drawn)."""
    if banded or data.n_traj < 2:
        return []
    from matplotlib.lines import Line2D

    return [
        (Line2D([], [], color="0.55", linestyle=TRAJ_STYLES[j % len(TRAJ_STYLES)]), name)
        for j, name in enumerate(traj_names(data))
    ]


def _note_missing(ax, missing: list[str], why: str, y: float = 0.01, prefix: str = "not shown ") -> None:
    from .style import display_name

    if missing:
        names = ", ".join(display_name(k) for k in missing)
        ax.text(0.01, y, f"{prefix}({why}): {names}" if prefix else f"{why}: {names}", transform=ax.transAxes, fontsize=6,
                color="0.35", va="bottom", ha="left")


def _volume_notes(values: dict[str, np.ndarray], missing: list[str]) -> list[tuple[list[str], str]]:
    """The notes of a volume panel: (methods, why) for the methods not drawn (``missing``) or drawn only in
    part. A map with det J = 0 has log|det J| = −inf: its volume change is not defined (never "exactly 0")."""
    singular = [k for k, v in values.items() if np.isinf(v).any()]
    gone = [k for k in missing if k in singular]
    part = [k for k in singular if k not in missing]
    nan = [k for k in missing if k not in singular and np.isnan(v := values[k]).any() and not np.isfinite(v).any()]
    zero = [k for k in missing if k not in singular and k not in nan]
    return [(names, why) for names, why in (
        (zero, "not shown (exactly 0)"),
        (gone, "not shown (det J = 0: not defined)"),
        (part, "det J = 0 at some maps (not drawn)"),
        (nan, "not shown (not defined: NaN)"),
    ) if names]


def _failure_times(data: RolloutResult, label: str) -> np.ndarray:
    """Times at which the drawn trajectories of ``label`` failed (blow-up or non-finite), sorted, unique."""
    traj = data.methods.get(label)
    failed = None if traj is None else traj.failed_step
    if failed is None:
        return np.empty(0)
    failed = np.asarray(failed)
    failed = failed[failed >= 0]
    if not failed.size:
        return np.empty(0)
    dt = traj.meta.get("dt", data.meta.get("dt"))
    if dt is None:
        t = np.asarray(traj.t, dtype=np.float64)
        if t.size < 2:
            return np.empty(0)
        dt = t[1] - t[0]  # only right when not thinned; rollouts and integrate() record dt
    t0 = float(data.t[0])
    return np.unique(t0 + float(dt) * failed)


def _mark_failures(ax, data: RolloutResult, labels, styles, banded: bool) -> bool:
    """A vertical tick at each failure time of each method in ``labels`` (banded: the first one only);
    returns whether any was drawn (the legend then gets a "blow-up" entry)."""
    drawn = False
    for label in labels:
        times = _failure_times(data, label)
        if banded:
            times = times[:1]
        for tf in times[: 2 * MAX_CURVES]:
            ax.axvline(tf, color=styles[label].color, linestyle=BLOWUP_STYLE, linewidth=0.9, gid="blow-up")
            drawn = True
    return drawn


def _blowup_key(drawn: bool) -> list:
    if not drawn:
        return []
    from matplotlib.lines import Line2D

    return [(Line2D([], [], color="0.3", linestyle=BLOWUP_STYLE, linewidth=0.9), "blow-up")]


def _coord_names(data: RolloutResult) -> tuple[str, ...]:
    names = _COORDS.get(data.system_name)
    if names is None or len(names) != data.dim:
        names = tuple(f"z_{i + 1}" for i in range(data.dim))
    return names


def _state_rows(data: RolloutResult, given: bool) -> tuple[RolloutResult, str]:
    """The trajectories a state-space figure draws (at most MAX_CURVES of many) and their description."""
    if given or data.n_traj <= MAX_CURVES:
        return data, describe(data, False)
    rows = np.unique(np.round(np.linspace(0, data.n_traj - 1, MAX_CURVES)).astype(int))
    sub, _ = select(data, data.traj_index[rows])
    return sub, f"{describe(sub, False)} ({len(rows)} of {data.n_traj})"


def _clip_states(data: RolloutResult, labels) -> tuple[float, dict]:
    """A common half-width for state-space axes and each method's drawn states (NaN beyond it)."""
    base = data.reference if data.reference is not None else data.states(labels[0])
    ref = np.asarray(base.y, dtype=np.float64)
    extent = float(np.nanmax(np.abs(ref))) if np.isfinite(ref).any() else 1.0
    cap = CLIP_FACTOR * extent
    reach = extent
    clipped = {}
    for label in labels:
        y = np.asarray(data.states(label).y, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            far = ~(np.abs(y) <= cap).all(axis=-1, keepdims=True)
        y = np.where(far, np.nan, y)
        if np.isfinite(y).any():
            reach = max(reach, float(np.nanmax(np.abs(y))))
        clipped[label] = y
    return 1.08 * reach, clipped


def _with_reference(data: RolloutResult, methods) -> list[str]:
    return (["reference"] if data.reference is not None else []) + methods_to_draw(data, methods)


def _span(data: RolloutResult) -> str:
    return f"$t \\in [{data.t[0]:g}, {data.t[-1]:g}]$"


# --------------------------------------------------------------------------- figures


@styled
def plot_trajectories3d(source: PlotSource, traj: TrajSelection = None, methods: Iterable[str] | None = None, sphere: bool | None = None,
                        reference: Trajectories | None = None, max_points: int | None = None, ax: Any = None, style: Any = None,
        title: bool | str = True, method_names: dict[str, str] | None = None) -> Figure:
    """Trajectories in state space (the first three coordinates), every method and the reference.

    Parameters
    ----------
    source : RolloutResult, path, Trajectories or dict of Trajectories
    traj : int or list of int, optional
        Indices in the data file; default: all, or [`MAX_CURVES`][vpintegrator.plotting.MAX_CURVES] evenly spread ones of many.
    methods : list of str, optional
        Labels to draw (default all).
    sphere : bool, optional
        Draw the sphere ``|z| = |z_0|`` the rigid body's motion stays on (default: for the rigid body).
    reference : Trajectories, optional
        For trajectories in memory: the reference, drawn dashed in black.
    max_points : int, optional
        At most about this many time points per curve.
    ax : matplotlib Axes (3-D), optional
        Draw into this Axes (``fig.add_subplot(projection="3d")``) instead of a new figure.
    style : str, path, dict or list, optional
        ``"single"``/``"double"`` journal column, a ``.mplstyle`` file, ...: see
        [`figure_style`][vpintegrator.plotting.figure_style].
    title : bool or str, default True
        The figure's title saying what it shows; False: none (panel names stay); a text: that title.
    method_names : dict, optional
        What the legend calls a method, over [`display_name`][vpintegrator.plotting.display_name]:
        ``{"vpt": "VPT (ours)"}``.

    Notes
    -----
    States beyond [`CLIP_FACTOR`][vpintegrator.plotting.CLIP_FACTOR] times the reference's extent are not drawn.
    """
    data, given = _prepare(source, traj, reference, max_points)
    if data.dim < 3:
        raise VPIntegratorError(
            f"kind trajectories3d needs dim >= 3; the trajectories have dim {data.dim} (draw kind phase)", key="kind"
        )
    data, what = _state_rows(data, given)
    styles = _styles(data)
    names = _coord_names(data)
    fig, (ax,), own = target_axes(ax, 1, 0.6 * WIDTH, 0.6 * WIDTH + 0.3, projection="3d")
    labels = _with_reference(data, methods)
    first = data.states(labels[0]).y
    if sphere if sphere is not None else data.system_name == "rigid_body":
        radius = float(np.linalg.norm(first[0, 0]))
        u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 37), np.linspace(0, np.pi, 19))
        ax.plot_wireframe(radius * np.cos(u) * np.sin(v), radius * np.sin(u) * np.sin(v), radius * np.cos(v),
                          color="0.6", linewidth=0.3, alpha=0.35)
    half, clipped = _clip_states(data, labels)
    for slot, label in enumerate(labels):
        ref = label == "reference"
        for j in range(data.n_traj):
            y = clipped[label][j]
            kw = styles[label].line(len(y), slot, len(labels), "--" if ref else None)
            ax.plot(y[:, 0], y[:, 1], y[:, 2], label=styles[label].name if j == 0 else None,
                    linewidth=1.4 if ref else 0.9, **kw)
    ax.set_xlabel(f"${names[0]}$")
    ax.set_ylabel(f"${names[1]}$")
    ax.set_zlabel(f"${names[2]}$")
    for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
        setter(-half, half)
    ax.set_box_aspect((1, 1, 1))
    set_title(ax, f"{system_title(data.meta)}, {what}, {_span(data)}")
    legend(fig, [ax], ncols=4, own=own)
    return fig


@styled
def plot_invariants(source: PlotSource, traj: TrajSelection = None, methods: Iterable[str] | None = None, band: bool | None = None,
                    reference: Trajectories | None = None, max_points: int | None = None, axes: Any = None, style: Any = None,
        title: bool | str = True, method_names: dict[str, str] | None = None) -> Figure:
    """Relative drift ``|I(t) − I(0)| / |I(0)|`` of every invariant, log scale, one panel each.

    ``band``: True draws the median and 10-90 % band, False one curve per trajectory; default: the band
    for more than [`MAX_CURVES`][vpintegrator.plotting.MAX_CURVES] trajectories. ``axes``: one Axes per invariant to draw into. Other
    parameters as [`plot_trajectories3d`][vpintegrator.plotting.plot_trajectories3d].
    """
    data, _ = _prepare(source, traj, reference, max_points)
    names = data.invariant_names
    if not names:
        raise VPIntegratorError(f"system {data.system_name!r} has no invariants; nothing to plot for kind invariants",
                                key="kind")
    banded = _banded(data, band)
    styles = _styles(data)
    fig, axes, own = target_axes(axes, len(names), WIDTH, 2.5, name="axes")
    labels = _with_reference(data, methods)
    marked = False
    for ax, name in zip(axes, names):
        sym = _INVARIANT_SYMBOLS.get(name, name)
        missing = []
        for slot, label in enumerate(labels):
            values = np.asarray(data.metrics[label].invariants[name], dtype=np.float64)
            with np.errstate(all="ignore"):
                drift = _positive(relative_drift(values, values[:, :1]))
            if not _series(ax, data.t, drift, banded, styles[label], slot, len(labels)):
                missing.append(label)
        _note_missing(ax, missing, "drift exactly 0")
        marked |= _mark_failures(ax, data, [k for k in labels if k != "reference"], styles, banded)
        ax.set_yscale("log")
        ax.set_xlabel("time $t$")
        ax.set_ylabel(f"$|{sym}(t) - {sym}(0)|\\,/\\,|{sym}(0)|$")
        ax.set_title(name)
    if own:
        set_title(fig, f"invariant drift, {system_title(data.meta)}: {describe(data, banded)}")
    legend(fig, axes, extra=_traj_key(data, banded) + _blowup_key(marked), own=own)
    return fig


@styled
def plot_error(source: PlotSource, traj: TrajSelection = None, methods: Iterable[str] | None = None, threshold: float = 0.1,
               band: bool | None = None, reference: Trajectories | None = None, max_points: int | None = None, ax: Any = None, style: Any = None,
        title: bool | str = True, method_names: dict[str, str] | None = None) -> Figure:
    """Relative error ``‖ẑ(t) − z(t)‖ / ‖z(t)‖`` against the reference, log scale.

    The dotted line marks ``threshold``, whose first crossing is the valid prediction time. Trajectories
    in memory need ``reference=``. ``ax``: the Axes to draw into. Other parameters as
    [`plot_invariants`][vpintegrator.plotting.plot_invariants].
    """
    data, _ = _prepare(source, traj, reference, max_points)
    labels = [k for k in methods_to_draw(data, methods) if data.metrics[k].rel_error is not None]
    if not labels:
        raise VPIntegratorError(
            f"{data.name}: no relative errors to plot (trajectories in memory need a reference=)", key="kind"
        )
    banded = _banded(data, band)
    styles = _styles(data)
    fig, (ax,), own = target_axes(ax, 1, 0.75 * WIDTH, 2.8)
    missing = [k for slot, k in enumerate(labels)
               if not _series(ax, data.t, _positive(data.metrics[k].rel_error), banded, styles[k], slot, len(labels))]
    _note_missing(ax, missing, "error exactly 0")
    marked = _mark_failures(ax, data, labels, styles, banded)
    ax.axhline(threshold, color="0.4", linestyle=":", linewidth=0.8, label=f"valid-time threshold {threshold:g}")
    ax.set_yscale("log")
    ax.set_xlabel("time $t$")
    ax.set_ylabel(r"$\|\hat z(t) - z(t)\|\,/\,\|z(t)\|$")
    set_title(ax, f"relative error vs reference, {system_title(data.meta)}: {describe(data, banded)}")
    legend(fig, [ax], ncols=4, extra=_traj_key(data, banded) + _blowup_key(marked), own=own)
    return fig


@styled
def plot_volume(source: PlotSource, traj: TrajSelection = None, methods: Iterable[str] | None = None, band: bool | None = None,
                reference: Trajectories | None = None, max_points: int | None = None, axes: Any = None, style: Any = None,
        title: bool | str = True, method_names: dict[str, str] | None = None) -> Figure:
    """Volume: ``|log|det J||`` of every step (window, for models) map, and the running maximum over time of
    ``|Σ log|det J||``, its cumulative sum (``_running_max``: an oscillating sum as its envelope), log scale.

    An exactly volume-preserving map stays at rounding level (≈1e-16 per step); a method whose values are
    all exactly 0 is named in a note, and so is one with singular maps (det J = 0: log|det J| = −inf, the
    volume change not defined, as for the standard transformer or the ``parrot`` row; "singular" when some
    maps are, the others drawn) or with no defined value at all (NaN). Needs a rollout file written with the volume (the default).
    ``axes``: two Axes (per map, cumulative) to draw into; ``style`` as [`plot_trajectories3d`][vpintegrator.plotting.plot_trajectories3d].
    """
    data, _ = _prepare(source, traj, reference, max_points)
    labels = [k for k in methods_to_draw(data, methods) if data.metrics[k].log_det_J is not None]
    if not labels:
        raise VPIntegratorError(
            f"{data.name}: no volume data (a rollout file written without the volume, or trajectories in memory)",
            key="kind",
        )
    banded = _banded(data, band)
    styles = _styles(data)
    fig, (ax1, ax2), own = target_axes(axes, 2, WIDTH, 2.6, name="axes")
    for ax, attr, lw, shown in ((ax1, "log_det_J", 0.7, _positive), (ax2, "cum_log_det_J", 1.0, _running_max)):
        missing = [k for slot, k in enumerate(labels)
                   if not _series(ax, data.metrics[k].map_t, shown(getattr(data.metrics[k], attr)), banded,
                                  styles[k], slot, len(labels), linewidth=lw)]
        notes = _volume_notes({k: np.asarray(getattr(data.metrics[k], attr), dtype=float) for k in labels}, missing)
        for i, (names, why) in enumerate(notes):
            _note_missing(ax, names, why, y=0.01 + 0.07 * i, prefix="")
        ax.set_yscale("log")
        ax.set_xlabel("time $t$")
    ax1.set_ylabel(r"$|\log|\det J||$ per step / window map")
    ax2.set_ylabel(r"$\max_{s \leq t}\,|\sum \log|\det J||$ (log volume ratio)")
    ax1.set_title("volume change per map")
    ax2.set_title("cumulative, running maximum")
    if own:
        set_title(fig, f"volume, {system_title(data.meta)}: {describe(data, banded)}")
    legend(fig, [ax1, ax2], extra=_traj_key(data, banded), own=own)
    return fig


def _phase_pairs(data: RolloutResult) -> list[tuple[int, int]]:
    dim = data.dim
    if data.system_name == "coupled_oscillator" or (dim % 2 == 0 and dim >= 4):
        n = dim // 2
        return [(i, i + n) for i in range(n)]
    if dim == 2:
        return [(0, 1)]
    return [(0, 1), (0, 2), (1, 2)]


@styled
def plot_phase(source: PlotSource, traj: TrajSelection = None, methods: Iterable[str] | None = None, reference: Trajectories | None = None,
               max_points: int | None = None, axes: Any = None, style: Any = None,
        title: bool | str = True, method_names: dict[str, str] | None = None) -> Figure:
    """Phase portraits: pairs of coordinates (``(q_i, p_i)`` for canonical systems, else the three planes
    of a 3-D state). ``axes``: one Axes per pair to draw into. Other parameters as
    [`plot_trajectories3d`][vpintegrator.plotting.plot_trajectories3d]."""
    data, given = _prepare(source, traj, reference, max_points)
    data, what = _state_rows(data, given)
    styles = _styles(data)
    names = _coord_names(data)
    pairs = _phase_pairs(data)
    fig, axes, own = target_axes(axes, len(pairs), WIDTH, WIDTH / len(pairs) + 0.7, name="axes")
    labels = _with_reference(data, methods)
    half, clipped = _clip_states(data, labels)
    for ax, (a, b) in zip(axes, pairs):
        for slot, label in enumerate(labels):
            ref = label == "reference"
            for j in range(data.n_traj):
                y = clipped[label][j]
                kw = styles[label].line(len(y), slot, len(labels), "--" if ref else None)
                ax.plot(y[:, a], y[:, b], label=styles[label].name if j == 0 else None,
                        linewidth=1.4 if ref else 0.8, **kw)
        ax.set_xlabel(f"${names[a]}$")
        ax.set_ylabel(f"${names[b]}$")
        ax.set_xlim(-half, half)
        ax.set_ylim(-half, half)
        ax.set_aspect("equal")
    if own:
        set_title(fig, f"{system_title(data.meta)}, {what}, {_span(data)}")
    legend(fig, axes, own=own)
    return fig


_PLOTTERS: dict[str, Callable[..., Figure]] = {
    "trajectories3d": plot_trajectories3d,
    "invariants": plot_invariants,
    "error": plot_error,
    "volume": plot_volume,
    "phase": plot_phase,
}


def _check_kinds(kinds) -> list[str]:
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    for kind in kinds:
        if kind not in _PLOTTERS:
            raise VPIntegratorError(f"unknown figure kind {kind!r}; valid kinds: {', '.join(KINDS)}, all", key="kind")
    return kinds


def plot_rollout(source: PlotSource, kind: str, **kwargs: Any) -> Figure:
    """The figure of one ``kind`` (see [`KINDS`][vpintegrator.plotting.KINDS]); ``kwargs`` go to its ``plot_*`` function."""
    _check_kinds([kind])
    return _PLOTTERS[kind](source, **kwargs)


def applicable(data: RolloutResult, kind: str) -> bool:
    """Whether ``kind`` has something to show for ``data``."""
    if kind == "invariants":
        return bool(data.invariant_names)
    if kind == "trajectories3d":
        return data.dim >= 3
    if kind == "volume":
        return data.has_volume()
    if kind == "error":
        return any(m.rel_error is not None for k, m in data.metrics.items() if k != "reference")
    return True


def _check_options(options: dict[str, Any]) -> None:
    """Types of the plot options (they may come from ``--set`` as any TOML value): their declarations on
    [`PlotOptions`][vpintegrator.plotting.options.PlotOptions]."""
    from .options import check_options

    check_options(options)


def plot_all(source: PlotSource, out_dir: str | Path, kinds: Sequence[str] = KINDS, traj: TrajSelection = None,
             dpi: int = 200, reference: Trajectories | None = None, max_points: int | None = None, formats: Sequence[str] = FORMATS,
             overwrite: bool | None = None, **options: Any) -> FigureFiles:
    """Draw and save every figure kind in ``kinds`` into ``out_dir`` as ``<kind>.pdf`` and ``<kind>.png``.

    ``source``, ``traj``, ``reference``, ``max_points`` as in the ``plot_*`` functions (the source is read
    once); ``options`` (``methods``, ``threshold``, ``band``, ``sphere``, ``style``) go to the kinds that
    take them (``style="single"`` writes every figure one journal column wide).
    Kinds that do not apply (no invariants, dim < 3, no volume data, no reference) are skipped with no
    file. Every file is written atomically. ``overwrite=None`` (the default) replaces the files an earlier
    call with the same source wrote (each PDF, PNG and SVG carries a tag of its call in its metadata:
    re-running a notebook cell works) and refuses any other existing file; ``True`` replaces any figure drawn
    by matplotlib, ``False`` refuses every existing file. ``out_dir`` is locked against other writers while
    the figures are drawn and written.

    Returns
    -------
    FigureFiles
        The files written (a list of ``Path``), shown in a notebook as the figures
        ([`FigureFiles`][vpintegrator.plotting.FigureFiles]).
    """
    import inspect

    from .style import check_dpi, check_formats

    kinds = _check_kinds(kinds)
    valid = sorted({p for fn in _PLOTTERS.values() for p in inspect.signature(fn).parameters}
                   - {"source", "traj", "reference", "max_points", "ax", "axes"})
    for key in options:
        if key not in valid:
            raise VPIntegratorError(f"unknown plot option {key!r}; valid options: {', '.join(valid)}", key=key)
    _check_options(options)
    from .style import check_out_dir

    dpi = check_dpi(dpi)
    formats = check_formats(formats)
    source_path = getattr(source, "path", None) if not isinstance(source, (str, os.PathLike)) else source
    inputs = [source_path] if source_path is not None else []
    tag = call_tag("plot_all", inputs)
    out_dir = check_out_dir(out_dir, kinds, formats, inputs, overwrite, tag)
    with output_lock(out_dir):
        check_out_dir(out_dir, kinds, formats, inputs, overwrite, tag)  # again under the lock
        return _draw_all(source, out_dir, kinds, traj, dpi, reference, max_points, formats, overwrite, options, tag)


def _draw_all(source, out_dir: Path, kinds, traj, dpi, reference, max_points, formats, overwrite, figure_kwargs,
              tag=None) -> FigureFiles:
    """[`plot_all`][vpintegrator.plotting.plot_all] once its arguments are checked and ``out_dir`` is locked."""
    import inspect

    data = plot_data(source, reference=reference, max_points=max_points)
    select(data, traj)  # a bad traj is an error before anything is drawn
    figures = []  # every figure is drawn before the first file is written: an error leaves no partial set
    for kind in kinds:
        if not applicable(data, kind):
            continue
        fn = _PLOTTERS[kind]
        accepted = inspect.signature(fn).parameters
        kw = {k: v for k, v in figure_kwargs.items() if k in accepted}
        figures.append((kind, fn(data, traj=traj, **kw)))
    written = FigureFiles()
    for kind, fig in figures:
        written += save_figure(fig, out_dir / kind, formats=formats, dpi=dpi, overwrite=overwrite, tag=tag)
    return written
