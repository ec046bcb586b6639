"""The look shared by every figure: one fixed style per method, display names, journal presets, legends,
atomic saving.

Colours are Okabe & Ito's colour-universal-design palette (Okabe and Ito 2008, "Color Universal Design
(CUD): how to make figures and presentations that are friendly to colorblind people",
https://jfly.uni-koeln.de/color/): its eight colours stay apart under simulated protanopia,
deuteranopia and tritanopia (``tests/test_plotting.py`` checks a minimum CIE ΔE between them). Colour is
not the only cue: every method also has its own line style and marker ([`MethodStyle`][vpintegrator.plotting.MethodStyle]), so that
curves lying on top of each other (RK4 under Gauss–Legendre 4) stay visible in print and in grey.

Figures are built without pyplot (no global state; any backend, Agg included) under [`STYLE`][vpintegrator.plotting.STYLE], or
under a preset (``"single"``/``"double"`` journal columns) or the user's ``.mplstyle`` file (``style=``).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar, cast

import numpy as np

from ..errors import VPIntegratorError
from .display import enable_notebook_display

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_F = TypeVar("_F", bound=Callable[..., Any])

#: Okabe–Ito's eight colours (Okabe & Ito 2008), by their names
OKABE_ITO = {
    "black": "#000000",
    "orange": "#e69f00",
    "sky_blue": "#56b4e9",
    "bluish_green": "#009e73",
    "yellow": "#f0e442",
    "blue": "#0072b2",
    "vermillion": "#d55e00",
    "reddish_purple": "#cc79a7",
}
_OI = OKABE_ITO
REFERENCE_COLOR = "black"
_FLOW_COLOR = "#666666"  # exact flows (reference-like): a neutral grey

#: (colour, line style, marker) of every shipped integrator and flow, fixed whatever else is drawn. The four
#: of the paper's figures (implicit midpoint, RK4, Gauss–Legendre 4, VP splitting) have four colours; the
#: others share their family's colour (Runge–Kutta, Gauss, splitting, Störmer–Verlet) with their own dash
#: and marker. Models are drawn solid, integrators dashed, the reference solid black without markers.
INTEGRATOR_STYLES: dict[str, tuple[str, Any, str]] = {
    "implicit_midpoint": (_OI["blue"], "--", "o"),
    "rk4": (_OI["vermillion"], "-.", "s"),
    "gauss_legendre4": (_OI["bluish_green"], (0, (1, 1.2)), "^"),
    "splitting": (_OI["reddish_purple"], (0, (5, 1, 1, 1, 1, 1)), "D"),
    "euler": (_OI["vermillion"], (0, (6, 2)), "v"),
    "gauss_legendre2": (_OI["bluish_green"], "--", "<"),
    "gauss_legendre6": (_OI["bluish_green"], "-.", ">"),
    "gauss_legendre8": (_OI["bluish_green"], (0, (6, 2)), "p"),
    "implicit_midpoint_tj4": (_OI["blue"], "-.", "h"),
    "implicit_midpoint_suzuki4": (_OI["blue"], (0, (1, 1.2)), "*"),
    "implicit_midpoint_y6": (_OI["blue"], (0, (6, 2)), "X"),
    "splitting_mclachlan2": (_OI["reddish_purple"], "--", "<"),
    "splitting_blanes_moan4": (_OI["reddish_purple"], "-.", ">"),
    "splitting_tj4": (_OI["reddish_purple"], (0, (1, 1.2)), "h"),
    "splitting_suzuki4": (_OI["reddish_purple"], (0, (6, 2)), "*"),
    "splitting_y6": (_OI["reddish_purple"], (0, (3, 1, 1, 1, 1, 1, 1, 1)), "X"),
    "stormer_verlet": (_OI["sky_blue"], "--", "P"),
    "stormer_verlet_tj4": (_OI["sky_blue"], "-.", "h"),
    "stormer_verlet_suzuki4": (_OI["sky_blue"], (0, (1, 1.2)), "*"),
    "stormer_verlet_y6": (_OI["sky_blue"], (0, (6, 2)), "X"),
    # the rigid body's Lie-Poisson rotation splittings (orange, which no other integrator uses)
    "rotation_splitting": (_OI["orange"], "--", "d"),
    "rotation_splitting_tj4": (_OI["orange"], "-.", "h"),
    "rotation_splitting_suzuki4": (_OI["orange"], (0, (1, 1.2)), "*"),
    "rotation_splitting_y6": (_OI["orange"], (0, (6, 2)), "X"),
    "rotation_splitting_centred": (_OI["orange"], (0, (5, 1, 1, 1, 1, 1)), "8"),
    "rotation_splitting_centred_tj4": (_OI["orange"], (0, (3, 1, 1, 1, 1, 1, 1, 1)), "p"),
    "rotation_splitting_centred_suzuki4": (_OI["orange"], (0, (8, 2, 1, 2)), "P"),
    "rotation_splitting_centred_y6": (_OI["orange"], (0, (2, 2)), "s"),
    # the lattices' exponential splitting (Strang, the linear part exact): yellow, which no other integrator uses
    "exponential_splitting": (_OI["yellow"], "--", "H"),
    "exponential_splitting_tj4": (_OI["yellow"], "-.", "h"),
    "exponential_splitting_suzuki4": (_OI["yellow"], (0, (1, 1.2)), "*"),
    "exponential_splitting_y6": (_OI["yellow"], (0, (6, 2)), "X"),
    "exact_flow": (_FLOW_COLOR, (0, (1, 1.2)), "x"),
    "dop853": (_FLOW_COLOR, (0, (6, 2)), "+"),
}
#: one fixed colour per classical method (from ``INTEGRATOR_STYLES``)
INTEGRATOR_COLORS = {name: style[0] for name, style in INTEGRATOR_STYLES.items()}
#: colours of models (and of anything else that is not a shipped integrator), in the order of their labels;
#: the three that no paper-figure integrator uses come first
MODEL_PALETTE = (_OI["orange"], _OI["sky_blue"], _OI["yellow"], _OI["blue"], _OI["vermillion"],
                 _OI["bluish_green"], _OI["reddish_purple"])
#: markers of models, in the same order (8 against 7 colours: the first 56 models have distinct pairs)
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MODEL_LINESTYLE = "-"
#: colours and markers of runs in training-curve figures, in the order the runs are given
RUN_PALETTE = (_OI["blue"], _OI["vermillion"], _OI["bluish_green"], _OI["orange"], _OI["reddish_purple"],
               _OI["sky_blue"], _OI["black"], _OI["yellow"])
RUN_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")
#: about this many markers along each curve (staggered between methods so overlapping curves show all)
MARKS_PER_LINE = 8

#: what legends and titles call a method; any other label (a model's own label) is shown as it is
DISPLAY_NAMES: dict[str, str] = {
    "reference": "reference",
    "euler": "explicit Euler",
    "rk4": "RK4",
    "implicit_midpoint": "implicit midpoint",
    "gauss_legendre2": "Gauss–Legendre 2",
    "gauss_legendre4": "Gauss–Legendre 4",
    "gauss_legendre6": "Gauss–Legendre 6",
    "gauss_legendre8": "Gauss–Legendre 8",
    "stormer_verlet": "Störmer–Verlet",
    "splitting": "VP splitting",
    "splitting_mclachlan2": "VP splitting (McLachlan 2)",
    "splitting_blanes_moan4": "VP splitting (Blanes–Moan 4)",
    "rotation_splitting": "rotation splitting",
    "rotation_splitting_centred": "rotation splitting, centred",
    "exponential_splitting": "exponential splitting",
    "exact_flow": "exact flow",
    "dop853": "DOP853",
    "vpff": "VPFF",
    "vpt": "VPT",
    "st": "standard transformer",
    "la_sympnet": "LA-SympNet",
    "g_sympnet": "G-SympNet",
    "symplectic_transformer": "symplectic transformer",
}
for _base in ("implicit_midpoint", "splitting", "stormer_verlet", "rotation_splitting", "rotation_splitting_centred",
              "exponential_splitting"):
    for _suffix, _what in (("tj4", "triple jump 4"), ("suzuki4", "Suzuki 4"), ("y6", "Yoshida 6")):
        DISPLAY_NAMES[f"{_base}_{_suffix}"] = f"{DISPLAY_NAMES[_base]} ({_what})"


def system_name(name: str) -> str:
    """What titles call a system: ``"rigid_body"`` -> ``"rigid body"``."""
    return name.replace("_", " ")


def system_title(meta: Mapping[str, Any]) -> str:
    """What a figure's title calls the system of a rollout whose metadata is ``meta``: ``"rigid body"``; for data
    that names no system, its file (``"data obs.h5"``), never a literal ``?``."""
    name = meta.get("system")
    if name and name != "?":
        return system_name(str(name))
    file = meta.get("data_file")
    return f"data {Path(str(file)).name}" if file else "data of no named system"


def display_name(label: str) -> str:
    """What figures call ``label``: ``"gauss_legendre4"`` -> ``"Gauss–Legendre 4"``, ``"vpt"`` -> ``"VPT"``;
    a label not in [`DISPLAY_NAMES`][vpintegrator.plotting.DISPLAY_NAMES] (a model's own label) as it is."""
    return DISPLAY_NAMES.get(label, label)


#: the paper look: small fonts, thin lines (applied to every figure made here)
STYLE: dict[str, Any] = {
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 8,
    "figure.titlesize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "lines.linewidth": 1.0,
    "lines.markersize": 3.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,
}

WIDTH = 6.3  # inches: a full text width
#: file formats ``save_figure`` writes by default
FORMATS = ("pdf", "png")

#: journal presets: figure width (inches; None: each figure its own) and the rcParams on top of ``STYLE``.
#: Widths are those of one and two columns of the common two-column journals (3.5 in ≈ 89 mm, 7.2 in ≈ 183
#: mm); the file is exactly that wide (no tight cropping).
PRESETS: dict[str, tuple[float | None, dict[str, Any]]] = {
    "default": (None, {}),
    "single": (3.5, {"font.size": 7, "axes.labelsize": 7, "axes.titlesize": 7, "figure.titlesize": 7,
                     "legend.fontsize": 6,
                     "xtick.labelsize": 6, "ytick.labelsize": 6, "lines.linewidth": 0.9, "lines.markersize": 2.5,
                     "savefig.bbox": "standard"}),
    "double": (7.2, {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "figure.titlesize": 8,
                     "legend.fontsize": 7,
                     "xtick.labelsize": 7, "ytick.labelsize": 7, "lines.linewidth": 1.0, "lines.markersize": 3.0,
                     "savefig.bbox": "standard"}),
}


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn in every figure: colour, line style, marker and the name legends show."""

    color: str
    linestyle: Any
    marker: str | None
    name: str

    def line(self, n_points: int, slot: int = 0, n_slots: int = 1, linestyle: Any = None) -> dict[str, Any]:
        """``Axes.plot`` keywords for a curve of ``n_points`` points: markers about every
        ``n_points / MARKS_PER_LINE`` points, offset by ``slot`` of ``n_slots`` so that curves lying on
        top of each other put their markers in different places."""
        kw: dict[str, Any] = {"color": self.color, "linestyle": self.linestyle if linestyle is None else linestyle}
        if self.marker is not None and n_points > 1:
            step = max(1, n_points // MARKS_PER_LINE)
            kw.update(marker=self.marker, markevery=((slot * step) // max(1, n_slots), step))
        return kw


def method_styles(labels: Sequence[str], kinds: Sequence[str | None] | None = None) -> dict[str, MethodStyle]:
    """The fixed style of each method.

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
        label -> [`MethodStyle`][vpintegrator.plotting.MethodStyle]. The reference is solid black without markers; each shipped
        integrator has its own (colour, dash, marker) from [`INTEGRATOR_STYLES`][vpintegrator.plotting.INTEGRATOR_STYLES] whatever else is
        drawn; the other labels (models) are solid and take [`MODEL_PALETTE`][vpintegrator.plotting.MODEL_PALETTE] and
        [`MODEL_MARKERS`][vpintegrator.plotting.MODEL_MARKERS] in their order in ``labels``, so one call styles a method the same in every
        figure it makes.
    """
    kinds = list(kinds) if kinds is not None else [None] * len(labels)
    if len(kinds) != len(labels):
        raise VPIntegratorError(f"method_styles: {len(labels)} labels but {len(kinds)} kinds")
    styles: dict[str, MethodStyle] = {}
    others: list[str] = []
    for label, kind in zip(labels, kinds):
        if label in styles or label in others:
            continue
        if label == "reference" or kind == "reference":
            styles[label] = MethodStyle(REFERENCE_COLOR, "-", None, shown_name(label))
        elif label in INTEGRATOR_STYLES and kind in (None, "integrator", "flow"):
            styles[label] = MethodStyle(*INTEGRATOR_STYLES[label], shown_name(label))
        else:
            others.append(label)
    for i, label in enumerate(others):
        styles[label] = MethodStyle(MODEL_PALETTE[i % len(MODEL_PALETTE)], MODEL_LINESTYLE,
                                    MODEL_MARKERS[i % len(MODEL_MARKERS)], shown_name(label))
    return styles


def method_colors(labels: Sequence[str], kinds: Sequence[str | None] | None = None) -> dict[str, str]:
    """label -> the fixed colour of each method (the colours of [`method_styles`][vpintegrator.plotting.method_styles])."""
    return {label: style.color for label, style in method_styles(labels, kinds).items()}


# --------------------------------------------------------------------------- presets and user styles


@dataclass(frozen=True)
class FigureStyle:
    """A resolved ``style=``: the rcParams figures are built under, and the width of every figure in
    inches (None: each kind its own width, as in ``WIDTH``)."""

    width: float | None
    rc: Any  # dict of rcParams


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _rc_from(item, where: str) -> dict:
    import warnings

    import matplotlib

    logger = logging.getLogger("matplotlib")
    collect = _Collect()  # matplotlib logs (and skips) the bad lines of a style file
    logger.addHandler(collect)
    try:
        with warnings.catch_warnings(record=True) as caught:  # ... and warns of deprecated keys
            warnings.simplefilter("always")
            if isinstance(item, Mapping):
                params = matplotlib.RcParams(item)  # validates keys and values
            else:
                params = matplotlib.rc_params_from_file(str(item), use_default_template=False)
    except (KeyError, ValueError, TypeError, OSError, UnicodeDecodeError) as err:
        raise VPIntegratorError(f"style {where}: {' '.join(str(err).split())[:200]}", key="style") from None
    finally:
        logger.removeHandler(collect)
    problems = collect.messages + [str(w.message) for w in caught]
    if problems:
        raise VPIntegratorError(f"style {where}: {' '.join(problems[0].split())[:200]}; give a .mplstyle file of "
                                "'key: value' lines (matplotlibrc syntax)", key="style")
    return {str(k): v for k, v in params.items()}


def figure_style(style: Any = None) -> FigureStyle:
    """Resolve ``style``: None or ``"default"`` ([`STYLE`][vpintegrator.plotting.STYLE], each figure its own width), ``"single"``
    (one journal column, 3.5 in) or ``"double"`` (two columns, 7.2 in) from [`PRESETS`][vpintegrator.plotting.PRESETS], the path of
    a ``.mplstyle`` file, a matplotlib style name, a dict of rcParams, or a list of these applied in
    order (``["single", "paper.mplstyle"]``). A user style that sets ``figure.figsize`` sets the width of
    every figure (heights follow)."""
    import matplotlib.style

    items = [] if style is None else list(style) if isinstance(style, (list, tuple)) else [style]
    width: float | None = None
    rc = dict(STYLE)
    for item in items:
        if isinstance(item, str) and item in PRESETS:
            preset_width, extra = PRESETS[item]
            width = preset_width
            rc.update(extra)
            continue
        if isinstance(item, Mapping):
            extra = _rc_from(item, "(dict)")
        elif isinstance(item, (str, os.PathLike)) and Path(item).is_file():
            extra = _rc_from(item, str(item))
        elif isinstance(item, str) and item in matplotlib.style.library:
            extra = {str(k): v for k, v in matplotlib.style.library[item].items()}
        else:
            raise VPIntegratorError(
                f"style {item!r} is not a preset ({', '.join(PRESETS)}), an existing .mplstyle file, a "
                "matplotlib style name or a dict of rcParams", key="style")
        rc.update(extra)
        if "figure.figsize" in extra:
            width = float(extra["figure.figsize"][0])
    return FigureStyle(width=width, rc=rc)


_CURRENT: contextvars.ContextVar[FigureStyle] = contextvars.ContextVar("vpintegrator_figure_style")
#: the ``title=`` and ``method_names=`` of the figure being built (see ``styled``)
_TITLE: contextvars.ContextVar[Any] = contextvars.ContextVar("vpintegrator_figure_title", default=True)
_NAMES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("vpintegrator_figure_names", default={})


def check_title(title: Any) -> bool | str:
    """``title=``: True (the figure says what it shows), False (no figure title) or a text of your own."""
    if title is None:
        return False
    if not isinstance(title, (bool, str)):
        raise VPIntegratorError(f"title must be true, false or a text; got {title!r}", key="title")
    return title


def check_names(names: Any) -> dict[str, str]:
    """``method_names=``: a mapping ``{label: shown text}`` over [`display_name`][vpintegrator.plotting.display_name]
    (``{"vpt": "VPT (ours)", "gauss_legendre4": "GL4"}``)."""
    if names is None:
        return {}
    if not isinstance(names, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise VPIntegratorError(f"method_names must map method labels to texts, e.g. {{vpt = \"VPT (ours)\"}}; got {names!r}",
                                key="method_names")
    return dict(names)


def shown_name(label: str) -> str:
    """What the figure being built calls ``label``: its ``method_names=`` entry, else [`display_name`][vpintegrator.plotting.display_name]."""
    return _NAMES.get().get(label) or display_name(label)


def set_title(target: Figure | Axes, text: str) -> None:
    """Give ``target`` (a Figure: its suptitle; an Axes: its title) the figure's descriptive title ``text``,
    unless the figure is built with ``title=False``; ``title="..."`` replaces it."""
    title = _TITLE.get()
    if title is False:
        return
    text = title if isinstance(title, str) else text
    (target.suptitle if hasattr(target, "suptitle") else target.set_title)(text)
#: figure -> the savefig rcParams of the style it was made under (a column preset is saved uncropped)
_SAVEFIG_RC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def figure(width: float, height: float) -> Figure:
    """A constrained-layout ``matplotlib.figure.Figure`` (no pyplot), ``width`` × ``height``
    inches, or the width of the current style ([`figure_style`][vpintegrator.plotting.figure_style]) with the height scaled to suit."""
    import matplotlib
    from matplotlib.figure import Figure

    current = _CURRENT.get(None) or figure_style()
    if current.width is not None:
        height = height * (current.width / width) ** 0.5  # narrower: a little lower, not squashed
        width = current.width
    with matplotlib.rc_context(current.rc):
        fig = Figure(figsize=(width, height), layout="constrained")
    _SAVEFIG_RC[fig] = {k: v for k, v in current.rc.items() if k.startswith("savefig.")}
    enable_notebook_display()  # a notebook cell shows the figure, not "<Figure size ...>"
    return fig


def styled(fn: _F) -> _F:
    """Build the figure under ``style=`` (a keyword argument of ``fn``; see [`figure_style`][vpintegrator.plotting.figure_style]): fonts
    and lines are read when artists are created; ``title=`` (``set_title``) and ``method_names=`` (``shown_name``)
    hold while it is built."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        current = figure_style(kwargs.get("style"))
        token = _CURRENT.set(current)
        title = _TITLE.set(check_title(kwargs.get("title", True)))
        names = _NAMES.set(check_names(kwargs.get("method_names")))
        try:
            with matplotlib.rc_context(current.rc):
                fig = fn(*args, **kwargs)
                if fig in _SAVEFIG_RC:  # a figure made here (not the user's Axes): nothing outside the canvas
                    fit_to_canvas(fig)
                return fig
        finally:
            _CURRENT.reset(token)
            _TITLE.reset(title)
            _NAMES.reset(names)

    return cast(_F, wrapper)


#: how far (pixels) an element may reach past the canvas edge before it counts as cropped
_SLACK = 1.0


def _renderer(fig, draw: bool = True):
    """A renderer measuring ``fig`` as it is saved, after its layout (constrained layout runs at draw)."""
    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):  # a figure built without pyplot: measure with Agg
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
    if draw:
        fig.draw_without_rendering()
    return canvas.get_renderer()


def _outside(box, fig) -> bool:
    return box.x0 < -_SLACK or box.y0 < -_SLACK or box.x1 > fig.bbox.width + _SLACK or \
        box.y1 > fig.bbox.height + _SLACK


def _wrap(text, size: float, renderer, vertical: bool) -> bool:
    """Break ``text`` (a Text artist, centred where it stands) at the space nearest its middle, line by line,
    until it lies within ``[0, size]`` pixels (vertically for a rotated y label); False when unchanged."""
    box = text.get_window_extent(renderer)
    centre = (box.y0 + box.y1) / 2 if vertical else (box.x0 + box.x1) / 2
    limit = 2 * min(centre, size - centre) - 2 * _SLACK

    def length() -> float:
        box = text.get_window_extent(renderer)
        return box.height if vertical else box.width

    changed = False
    for _ in range(3):
        if length() <= limit:
            break
        lines = text.get_text().split("\n")
        longest = max(range(len(lines)), key=lambda i: len(lines[i]))
        line = lines[longest]
        spaces = [i for i, c in enumerate(line) if c == " " and line[:i].count("$") % 2 == 0]  # not inside math
        if not spaces:
            break
        cut = min(spaces, key=lambda i: abs(i - len(line) / 2))
        lines[longest:longest + 1] = [line[:cut], line[cut + 1:]]
        text.set_text("\n".join(lines))
        changed = True
    return changed


def fit_to_canvas(fig: Any) -> None:
    """Keep every element of ``fig`` inside its canvas (a column preset saves exactly the figure, uncropped):
    fewer legend columns, titles and axis labels broken over lines, a smaller 3-D box. Text and data stay."""
    renderer = _renderer(fig)
    if not _outside(fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans), fig):
        return
    width, height = fig.bbox.width, fig.bbox.height  # (the legend's columns were fitted when it was made)
    texts = [(fig._suptitle, width, False)] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [(ax.title, width, False), (ax.xaxis.label, width, False), (ax.yaxis.label, height, True)]
    if any([_wrap(t, size, renderer, vertical) for t, size, vertical in texts if t.get_text()]):
        renderer = _renderer(fig)
    zoom = 1.0
    for _ in range(6):  # a 3-D box reaches past the canvas with its tick labels: shrink it a little
        axes3d = [ax for ax in fig.axes if ax.name == "3d"]
        if not axes3d or not _outside(fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans), fig):
            break
        zoom *= 0.92
        for ax in axes3d:
            ax.set_box_aspect(None, zoom=zoom)
        renderer = _renderer(fig)


def target_axes(ax: Any, n: int, width: float, height: float, name: str = "ax",
                projection: str | None = None) -> tuple[Any, list[Any], bool]:
    """``(fig, axes, own)``: ``n`` Axes to draw on, in a new figure (``ax`` None) or the given ones.

    ``ax`` is one ``matplotlib.axes.Axes`` or, for figures of several panels, a sequence of exactly
    ``n``; a 3-D figure needs 3-D Axes. Wrong ones are a one-line error naming ``name``.
    """
    if ax is None:
        fig = figure(width, height)
        if projection is not None:
            return fig, [fig.add_subplot(projection=projection)], True
        return fig, list(fig.subplots(1, n, squeeze=False)[0]), True
    from matplotlib.axes import Axes

    given = [ax] if isinstance(ax, Axes) else list(np.ravel(np.asarray(ax, dtype=object)))
    if len(given) != n or not all(isinstance(a, Axes) for a in given):
        what = "one matplotlib Axes" if n == 1 else f"{n} matplotlib Axes (one per panel)"
        got = f"{len(given)} Axes" if all(isinstance(a, Axes) for a in given) else f"a {type(ax).__name__}"
        raise VPIntegratorError(f"{name}: this figure draws {n} panel{'s' if n > 1 else ''}; give {what}, got {got}",
                                key=name)
    if projection is not None and any(a.name != projection for a in given):
        raise VPIntegratorError(f"{name}: give {projection.upper()} Axes (add_subplot(projection={projection!r})); "
                                f"got a {given[0].name!r} Axes", key=name)
    return given[0].get_figure(root=True), given, False


def _wrap_label(label: str, chars: int) -> str:
    """``label`` broken into lines of at most ``chars`` characters (at spaces, ``/`` or ``_`` where it can)."""
    import re
    import textwrap

    if len(label) <= chars:
        return label
    parts = re.split(r"(?<=[/_ ])", label)  # break after a separator, keeping it
    lines, line = [], ""
    for part in parts:
        while len(part) > chars:  # a piece longer than a line: cut it
            if line:
                lines.append(line)
                line = ""
            lines.append(part[:chars])
            part = part[chars:]
        if len(line) + len(part) > chars:
            lines.append(line)
            line = ""
        line += part
    lines.append(line)
    return "\n".join(x.rstrip() for x in lines if x.strip()) or textwrap.fill(label, chars)


def legend(fig: Any, axes: Any, ncols: int = 6, extra: Sequence[Any] = (), own: bool = True) -> None:
    """One legend with each label once, only for artists that were drawn with a label: below the figure
    (``own``), else in the first of the given Axes."""
    handles, labels = [], []
    for ax in np.atleast_1d(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    if not handles:
        return
    if own:
        fits = max(2, int(fig.get_figwidth() / 1.05))  # a narrow (single-column) figure: fewer columns
        columns = min(len(labels), ncols, fits)
        renderer = None
        # text measured at the figure's 100 dpi is hinted narrower than it prints at 300 dpi (up to ~5 % at
        # the single-column 6-pt size): leave that much room, so that no saved resolution clips the legend
        room = (fig.bbox.width - 2 * _SLACK) * 0.93
        shown = list(labels)
        while True:  # as many columns as fit the figure's width (long names: fewer, then wrapped)
            leg = fig.legend(handles, shown, loc="outside lower center", ncols=columns, frameon=False)
            renderer = renderer or _renderer(fig, draw=False)
            width = leg.get_window_extent(renderer).width
            if width <= room:
                break
            longest = max(len(x) for lab in shown for x in lab.split("\n"))
            if columns == 1 and longest <= 8:
                break
            leg.remove()
            if columns > 1:
                columns -= 1
            else:  # one column still too wide (a single-column figure, a long run name): wrap the labels
                chars = max(8, min(longest - 1, int(longest * room / width)))
                shown = [_wrap_label(lab, chars) for lab in labels]
    else:
        np.atleast_1d(axes)[0].legend(handles, labels, loc="best", frameon=False)


#: the largest dpi: a raster figure of up to ~10 inches stays within matplotlib's 65535 pixels a side (and a
#: few GiB of memory); a larger request is refused before anything is drawn
MAX_DPI = 6000


def check_dpi(dpi: Any) -> int:
    """``dpi`` as an int in (0, ``MAX_DPI``], else a one-line error naming the key ``dpi``."""
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer, float)) or not dpi > 0 or dpi != int(dpi):
        raise VPIntegratorError(f"dpi must be a whole number > 0 (PNG resolution, e.g. 200); got {dpi!r}", key="dpi")
    if dpi > MAX_DPI:
        raise VPIntegratorError(
            f"dpi must be a whole number > 0 and at most {MAX_DPI} (a raster figure of {dpi:g} dpi would need tens "
            f"of GiB, and matplotlib draws at most 65535 pixels a side); got {dpi!r}", key="dpi")
    return int(dpi)


def check_formats(formats: str | Sequence[str]) -> tuple[str, ...]:
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


#: the formats whose files carry a ``call_tag`` (matplotlib writes their metadata as plain text)
TAGGED = ("pdf", "png", "svg")


def call_tag(call: str, inputs: Sequence[Any] = ()) -> str:
    """The tag a figure file carries of the call that wrote it: ``call`` (``"plot_all"``) and its input
    files (resolved). A later call with the same tag replaces that file without ``overwrite``
    (``replaces``): re-running a notebook cell does not fail because its own figures exist."""
    import hashlib

    key = "|".join([call, *sorted(str(Path(p).resolve()) for p in inputs if p is not None)])
    return "vpintegrator-call-" + hashlib.sha1(key.encode()).hexdigest()[:20]


def replaces(target: str | Path, overwrite: bool | None, tag: str | None) -> bool:
    """Whether to replace ``target``: ``overwrite`` when it is True or False; with ``None``, whether it
    exists and carries ``tag`` (it was written by the same call: see ``call_tag``)."""
    if overwrite is not None:
        return bool(overwrite)
    if tag is None:
        return False
    try:
        return tag.encode() in Path(target).read_bytes()
    except OSError:
        return False


def save_figure(fig: Figure, stem: str | Path, formats: Sequence[str] = FORMATS, dpi: int = 200, *,
                overwrite: bool | None = False, tag: str | None = None) -> list[Path]:
    """Write ``fig`` as ``<stem>.pdf`` and ``<stem>.png`` (each atomically: a temporary file renamed into
    place, so an interrupted call leaves no half-written figure); return the paths. A figure made with a
    column preset (``style="single"``/``"double"``) is saved exactly that wide. An existing file is
    refused unless ``overwrite``, and then replaced only if it is a figure drawn by matplotlib
    (``vpintegrator._outputs.check_output``); each file is locked while written. ``tag`` (``call_tag``)
    is written into the metadata of a PDF, PNG or SVG; with ``overwrite=None`` a file carrying the same tag
    is replaced (``replaces``), any other refused."""
    import matplotlib

    from .._io import atomic_path
    from .._outputs import check_output, output_lock

    dpi = check_dpi(dpi)
    formats = check_formats(formats)
    if any(f in ("png", "jpg") for f in formats):  # a raster image of this figure: refused before allocating it
        from ..resources import check_memory

        w, h = (float(v) * dpi for v in fig.get_size_inches())
        if max(w, h) > 65535:
            raise VPIntegratorError(
                f"dpi {dpi}: this {fig.get_size_inches()[0]:.3g} x {fig.get_size_inches()[1]:.3g} inch figure would be "
                f"{w:.0f} x {h:.0f} pixels, above matplotlib's 65535 a side; give a lower dpi", key="dpi")
        check_memory(4.0 * w * h * 2, f"a {w:.0f} x {h:.0f} pixel figure at dpi {dpi}", "give a lower dpi", key="dpi")
    stem = Path(stem)
    paths = []
    rc = {**STYLE, **_SAVEFIG_RC.get(fig, {})}  # a column-width preset is saved uncropped
    with matplotlib.rc_context(rc):
        for fmt in formats:
            target = stem.with_name(f"{stem.name}.{fmt}")
            replace = replaces(target, overwrite, tag)
            metadata = {"Keywords": tag} if tag and fmt in TAGGED else None
            with output_lock(check_output(target, "figure", replace)):
                with atomic_path(check_output(target, "figure", replace), suffix=f".{fmt}") as tmp:
                    fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
            paths.append(target)
    return paths


def check_out_dir(out_dir: str | Path, stems: Sequence[str], formats: Sequence[str], inputs: Sequence[Any] = (),
                  overwrite: bool | None = False, tag: str | None = None) -> Path:
    """Refuse, before anything is drawn, an output directory that is a file or one of ``inputs``, or a
    figure ``<out_dir>/<stem>.<format>`` that would overwrite an input, that exists (unless
    ``overwrite``, or with ``overwrite=None`` unless it carries ``tag``: ``replaces``) or that is not a figure
    drawn by matplotlib (one-line errors naming ``out``)."""
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
            target = out_dir / f"{stem}.{fmt}"
            check_output(target, "figure", replaces(target, overwrite, tag))
    return out_dir
