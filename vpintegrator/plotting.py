"""Figures for papers from a rollout file: trajectories, invariants, error, volume, phase portraits.

Every ``plot_*`` function takes a :class:`~vpintegrator.rollout.RolloutResult` (from
:func:`~vpintegrator.rollout.read_rollout`) and returns a :class:`matplotlib.figure.Figure` built without
pyplot (no global state; works under any backend, Agg included). :func:`save_figure` writes PDF and PNG.

Colours are fixed per method across all figures (:func:`method_colors`): the reference is black, each
classical integrator has its own colour, models take colours from a palette in the order of their labels.
Quantities that span decades (relative error, invariant drift, volume) are on log axes; values that are
exactly 0 (a conserved invariant at t = 0, an exactly volume-preserving map) cannot show on a log axis and
are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .errors import VPIntegratorError

#: figure kinds of :func:`plot_rollout` / ``vp-plot --kind``
KINDS = ("trajectories3d", "invariants", "error", "volume", "phase")

REFERENCE_COLOR = "black"
#: one fixed colour per classical method (matplotlib's tab10, by method)
INTEGRATOR_COLORS = {
    "implicit_midpoint": "#1f77b4",
    "rk4": "#ff7f0e",
    "gauss_legendre4": "#2ca02c",
    "splitting": "#9467bd",
    "euler": "#8c564b",
    "stormer_verlet": "#bcbd22",
    "exact_flow": "#7f7f7f",
}
#: colours of models, assigned in the order of their labels
MODEL_PALETTE = ("#d62728", "#17becf", "#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")

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

_COORDS = {"coupled_oscillator": ("q_1", "q_2", "p_1", "p_2")}
_INVARIANT_SYMBOLS = {"energy": "H", "casimir": "C", "sum": "S", "product": "P"}
_WIDTH = 6.3  # inches: a full text width


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
        label -> matplotlib colour. Models are coloured in the order of their labels.
    """
    kinds = list(kinds) if kinds is not None else [None] * len(labels)
    colors: dict[str, str] = {}
    models = []
    for label, kind in zip(labels, kinds):
        if label == "reference" or kind == "reference":
            colors[label] = REFERENCE_COLOR
        elif label in INTEGRATOR_COLORS and kind in (None, "integrator", "flow"):
            colors[label] = INTEGRATOR_COLORS[label]
        else:
            models.append(label)
    for i, label in enumerate(models):
        colors[label] = MODEL_PALETTE[i % len(MODEL_PALETTE)]
    return colors


# --------------------------------------------------------------------------- helpers


def _figure(width: float, height: float):
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
    return fig


def _styled(fn):
    """Build the figure under :data:`STYLE` (fonts and lines are read when artists are created)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper


def _methods(rollout, methods: Iterable[str] | None, need: str | None = None) -> list:
    """The methods to draw, in file order, each a MethodRollout; ``need`` filters on an attribute."""
    if methods is None:
        chosen = list(rollout.methods.values())
    else:
        chosen = []
        for label in methods:
            if label not in rollout.methods:
                raise VPIntegratorError(
                    f"{rollout.path}: no method {label!r}; methods in the file: {', '.join(rollout.methods)}"
                )
            chosen.append(rollout.methods[label])
    if need is not None:
        chosen = [m for m in chosen if getattr(m, need) is not None]
    return chosen


def _colors(rollout) -> dict[str, str]:
    labels = ["reference", *rollout.methods]
    kinds = ["reference", *(m.kind for m in rollout.methods.values())]
    return method_colors(labels, kinds)


def _rows(rollout, traj) -> list[int] | None:
    """Positions of the trajectories to draw; None: aggregate over all (median and 10-90 % band)."""
    if traj is None:
        return None
    rows = [int(i) for i in np.atleast_1d(traj)]
    for i in rows:
        if not 0 <= i < rollout.n_traj:
            raise VPIntegratorError(
                f"traj {i} is out of range: the rollout holds {rollout.n_traj} trajectories (0 .. {rollout.n_traj - 1})"
            )
    return rows


def _traj_title(rollout, rows) -> str:
    if rows is None:
        return f"median over {rollout.n_traj} trajectories (band: 10-90 %)"
    idx = ", ".join(str(int(rollout.traj_index[i])) for i in rows)
    return f"trajectory {idx}" if len(rows) == 1 else f"trajectories {idx}"


def _series(ax, x, values, rows, color, label, **kw) -> None:
    """Draw ``values`` (n_traj, n) against ``x``: chosen rows as lines, or median + band over all rows."""
    if rows is None and values.shape[0] > 1:
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, med, hi = np.nanpercentile(values, [10, 50, 90], axis=0)
        ax.plot(x, med, color=color, label=label, **kw)
        ax.fill_between(x, lo, hi, color=color, alpha=0.15, linewidth=0)
        return
    for j, i in enumerate(rows if rows is not None else [0]):
        ax.plot(x, values[i], color=color, label=label if j == 0 else None, **kw)


def _coord_names(rollout) -> tuple[str, ...]:
    dim = rollout.reference.y.shape[-1]
    names = _COORDS.get(rollout.system)
    if names is None or len(names) != dim:
        names = tuple(f"z_{i + 1}" for i in range(dim))
    return names


def _legend(fig, axes) -> None:
    handles, labels = [], []
    for ax in np.atleast_1d(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6), frameon=False)


#: states farther out than this many times the reference's extent are not drawn in state-space plots
#: (a blown-up method would otherwise shrink everything else to a dot)
CLIP_FACTOR = 3.0


def _clip_states(rollout, ms, rows) -> tuple[float, dict]:
    """A common half-width for state-space axes and each method's drawn states (NaN beyond it)."""
    ref = rollout.reference.y[rows]
    extent = float(np.nanmax(np.abs(ref))) if np.isfinite(ref).any() else 1.0
    cap = CLIP_FACTOR * extent
    reach = extent
    clipped = {}
    for m in ms:
        y = m.y[rows]
        with np.errstate(invalid="ignore"):
            far = ~(np.abs(y) <= cap).all(axis=-1, keepdims=True)
        y = np.where(far, np.nan, y)
        if np.isfinite(y).any():
            reach = max(reach, float(np.nanmax(np.abs(y))))
        clipped[m.label] = y
    return 1.08 * reach, clipped


def _positive(values: np.ndarray) -> np.ndarray:
    """|values| with zeros as NaN (a log axis cannot show 0)."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    return np.where(a > 0, a, np.nan)


# --------------------------------------------------------------------------- figures


@_styled
def plot_trajectories3d(rollout, traj=0, methods: Iterable[str] | None = None, sphere: bool | None = None):
    """Trajectories in state space (the first three coordinates), every method and the reference.

    Parameters
    ----------
    rollout : RolloutResult
    traj : int or list of int
        Positions in the rollout file (0 .. n_traj − 1).
    methods : list of str, optional
        Labels to draw (default all).
    sphere : bool, optional
        Draw the sphere ``|z| = |z_0|`` the rigid body's motion stays on (default: for the rigid body).

    States beyond :data:`CLIP_FACTOR` times the reference's extent are not drawn.

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = _rows(rollout, 0 if traj is None else traj)
    dim = rollout.reference.y.shape[-1]
    if dim < 3:
        raise VPIntegratorError(f"trajectories3d needs dim >= 3; the rollout has dim {dim} (use --kind phase)")
    colors = _colors(rollout)
    names = _coord_names(rollout)
    fig = _figure(0.6 * _WIDTH, 0.6 * _WIDTH)
    ax = fig.add_subplot(projection="3d")
    if sphere if sphere is not None else rollout.system == "rigid_body":
        radius = float(np.linalg.norm(rollout.reference.y[rows[0], 0]))
        u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 37), np.linspace(0, np.pi, 19))
        ax.plot_wireframe(
            radius * np.cos(u) * np.sin(v), radius * np.sin(u) * np.sin(v), radius * np.cos(v),
            color="0.6", linewidth=0.3, alpha=0.35,
        )
    ms = [rollout.reference, *_methods(rollout, methods)]
    half, clipped = _clip_states(rollout, ms, rows)
    for m in ms:
        for j in range(len(rows)):
            y = clipped[m.label][j]
            ax.plot(
                y[:, 0], y[:, 1], y[:, 2], color=colors[m.label], label=m.label if j == 0 else None,
                linewidth=1.4 if m.label == "reference" else 0.9,
                linestyle="--" if m.label == "reference" else "-",
            )
    ax.set_xlabel(f"${names[0]}$")
    ax.set_ylabel(f"${names[1]}$")
    ax.set_zlabel(f"${names[2]}$")
    for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
        setter(-half, half)
    ax.set_box_aspect((1, 1, 1))
    ax.set_title(f"{rollout.system}, {_traj_title(rollout, rows)}, $t \\in [{rollout.t[0]:g}, {rollout.t[-1]:g}]$")
    _legend(fig, [ax])
    return fig


@_styled
def plot_invariants(rollout, traj=0, methods: Iterable[str] | None = None):
    """Relative drift ``|I(t) − I(0)| / |I(0)|`` of every invariant, log scale, one panel each.

    Parameters
    ----------
    rollout : RolloutResult
    traj : int, list of int, or None
        Trajectories to draw; None: median and 10-90 % band over all.
    methods : list of str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    names = rollout.invariant_names
    if not names:
        raise VPIntegratorError(f"system {rollout.system!r} has no invariants; nothing to plot for --kind invariants")
    rows = _rows(rollout, traj)
    colors = _colors(rollout)
    fig = _figure(_WIDTH, 2.3)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        sym = _INVARIANT_SYMBOLS.get(name, name)
        for m in [rollout.reference, *_methods(rollout, methods)]:
            values = m.invariants[name]
            i0 = values[:, :1]
            scale = np.where(i0 == 0, 1.0, np.abs(i0))
            drift = _positive((values - i0) / scale)
            ls = "--" if m.label == "reference" else "-"
            _series(ax, rollout.t, drift, rows, colors[m.label], m.label, linestyle=ls)
        ax.set_yscale("log")
        ax.set_xlabel("time $t$")
        ax.set_ylabel(f"$|{sym}(t) - {sym}(0)|\\,/\\,|{sym}(0)|$")
        ax.set_title(f"{name} ({_traj_title(rollout, rows)})")
    _legend(fig, axes)
    return fig


@_styled
def plot_error(rollout, traj=0, methods: Iterable[str] | None = None, threshold: float = 0.1):
    """Relative error ``‖ẑ(t) − z(t)‖ / ‖z(t)‖`` against the reference, log scale.

    The dotted line marks ``threshold``, whose first crossing is the valid prediction time.

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = _rows(rollout, traj)
    colors = _colors(rollout)
    fig = _figure(0.7 * _WIDTH, 2.6)
    ax = fig.add_subplot()
    for m in _methods(rollout, methods, need="rel_error"):
        _series(ax, rollout.t, _positive(m.rel_error), rows, colors[m.label], m.label)
    ax.axhline(threshold, color="0.4", linestyle=":", linewidth=0.8, label=f"valid-time threshold {threshold:g}")
    ax.set_yscale("log")
    ax.set_xlabel("time $t$")
    ax.set_ylabel(r"$\|\hat z(t) - z(t)\|\,/\,\|z(t)\|$")
    ax.set_title(f"relative error vs reference ({_traj_title(rollout, rows)})")
    _legend(fig, [ax])
    return fig


@_styled
def plot_volume(rollout, traj=0, methods: Iterable[str] | None = None):
    """Volume: ``|log|det J||`` of every step (window, for models) map and of its cumulative sum, log scale.

    An exactly volume-preserving map stays at rounding level (≈1e-16 per step); values that are exactly 0
    do not show.

    Returns
    -------
    matplotlib.figure.Figure
    """
    chosen = _methods(rollout, methods, need="log_det_J")
    if not chosen:
        raise VPIntegratorError(f"{rollout.path}: no volume data (was it written with --no-volume?)")
    rows = _rows(rollout, traj)
    colors = _colors(rollout)
    fig = _figure(_WIDTH, 2.4)
    ax1, ax2 = fig.subplots(1, 2)
    for m in chosen:
        _series(ax1, m.map_t, _positive(m.log_det_J), rows, colors[m.label], m.label, linewidth=0.7)
        _series(ax2, m.map_t, _positive(m.cum_log_det_J), rows, colors[m.label], m.label)
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.set_xlabel("time $t$")
    ax1.set_ylabel(r"$|\log|\det J||$ per step / window map")
    ax2.set_ylabel(r"$|\sum \log|\det J||$ (log volume ratio)")
    ax1.set_title(f"volume change per map ({_traj_title(rollout, rows)})")
    ax2.set_title("cumulative")
    _legend(fig, [ax1, ax2])
    return fig


def _phase_pairs(rollout) -> list[tuple[int, int]]:
    dim = rollout.reference.y.shape[-1]
    if rollout.system == "coupled_oscillator" or (dim % 2 == 0 and dim >= 4):
        n = dim // 2
        return [(i, i + n) for i in range(n)]
    if dim == 2:
        return [(0, 1)]
    return [(0, 1), (0, 2), (1, 2)]


@_styled
def plot_phase(rollout, traj=0, methods: Iterable[str] | None = None):
    """Phase portraits: pairs of coordinates (``(q_i, p_i)`` for canonical systems, else the three planes
    of a 3-D state).

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = _rows(rollout, 0 if traj is None else traj)
    colors = _colors(rollout)
    names = _coord_names(rollout)
    pairs = _phase_pairs(rollout)
    fig = _figure(_WIDTH, _WIDTH / len(pairs) + 0.5)
    axes = fig.subplots(1, len(pairs), squeeze=False)[0]
    ms = [rollout.reference, *_methods(rollout, methods)]
    half, clipped = _clip_states(rollout, ms, rows)
    for ax, (a, b) in zip(axes, pairs):
        for m in ms:
            for j in range(len(rows)):
                y = clipped[m.label][j]
                ax.plot(
                    y[:, a], y[:, b], color=colors[m.label], label=m.label if j == 0 else None,
                    linewidth=1.4 if m.label == "reference" else 0.8,
                    linestyle="--" if m.label == "reference" else "-",
                )
        ax.set_xlabel(f"${names[a]}$")
        ax.set_ylabel(f"${names[b]}$")
        ax.set_xlim(-half, half)
        ax.set_ylim(-half, half)
        ax.set_aspect("equal")
    fig.suptitle(f"{rollout.system}, {_traj_title(rollout, rows)}", fontsize=8)
    _legend(fig, axes)
    return fig


_PLOTTERS = {
    "trajectories3d": plot_trajectories3d,
    "invariants": plot_invariants,
    "error": plot_error,
    "volume": plot_volume,
    "phase": plot_phase,
}


def plot_rollout(rollout, kind: str, **kwargs: Any):
    """The figure of one ``kind`` (see :data:`KINDS`); ``kwargs`` go to its ``plot_*`` function."""
    if kind not in _PLOTTERS:
        raise VPIntegratorError(f"unknown figure kind {kind!r}; valid kinds: {', '.join(KINDS)}, all")
    return _PLOTTERS[kind](rollout, **kwargs)


def save_figure(fig, stem: str | Path, formats: Sequence[str] = ("pdf", "png"), dpi: int = 200) -> list[Path]:
    """Write ``fig`` as ``<stem>.pdf`` and ``<stem>.png`` (atomically); return the paths."""
    import matplotlib

    from ._io import atomic_path

    stem = Path(stem)
    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt in formats:
            target = stem.with_suffix(f".{fmt}")
            with atomic_path(target, suffix=f".{fmt}") as tmp:
                fig.savefig(tmp, format=fmt, dpi=dpi)
            paths.append(target)
    return paths


def plot_all(rollout, out_dir: str | Path, kinds: Sequence[str] = KINDS, traj=0, dpi: int = 200) -> list[Path]:
    """Draw and save every figure kind in ``kinds`` into ``out_dir`` as ``<kind>.pdf`` and ``<kind>.png``.

    Kinds that do not apply (no invariants, dim < 3, no volume data) are skipped with no file.

    Returns
    -------
    list of Path
        The files written.
    """
    kinds = list(kinds)
    for kind in kinds:
        if kind not in _PLOTTERS:
            raise VPIntegratorError(f"unknown figure kind {kind!r}; valid kinds: {', '.join(KINDS)}, all")
    out_dir = Path(out_dir)
    written: list[Path] = []
    for kind in kinds:
        if kind == "invariants" and not rollout.invariant_names:
            continue
        if kind == "trajectories3d" and rollout.reference.y.shape[-1] < 3:
            continue
        if kind == "volume" and not any(m.log_det_J is not None for m in rollout.methods.values()):
            continue
        fig = plot_rollout(rollout, kind, traj=traj)
        written += save_figure(fig, out_dir / kind, dpi=dpi)
    return written
