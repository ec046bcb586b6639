"""The plot options as one ``Config``: ``vp-plot``'s ``--set`` keys and flags, and ``plot_all``'s options.

Each option is declared once on ``PlotOptions`` (``vpintegrator.config.key``: its check, help and whether
it has a flag of its own): ``vp-plot`` derives ``--max-points`` and ``--dpi``, the ``--set`` keys and their
help from it, and ``check_options`` (used by ``plot_all`` and ``vp-plot``) checks any of them with the
declared checks. Nothing here imports matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ..config import Config, declared, key
from ..errors import VPIntegratorError

__all__ = ["PlotOptions", "check_options", "set_help"]


def _methods(value: Any) -> Any:
    if isinstance(value, str) or (isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)):
        return value
    raise VPIntegratorError(f"methods must be a label or a list of labels; got {value!r}", key="methods")


def _threshold(value: Any) -> float:
    from ..errors import finite_float

    return finite_float(value, "threshold", positive=True, key="threshold")


def _formats(value: Any) -> Any:
    from .style import check_formats

    return check_formats(value)


def _style(value: Any) -> Any:
    from .style import figure_style

    figure_style(value)  # an unknown preset or a missing file: an error before anything is drawn
    return value


def _title(value: Any) -> Any:
    from .style import check_title

    return check_title(value)


def _names(value: Any) -> Any:
    from .style import check_names

    return check_names(value)


def _max_points(value: Any) -> Any:
    from .source import check_max_points

    return check_max_points(value)


def _dpi(value: Any) -> Any:
    from .style import check_dpi

    return check_dpi(value)


@dataclass
class PlotOptions(Config):
    """What a figure may be asked for beyond its source: the ``--set`` keys of ``vp-plot`` and the options
    of ``plot_all`` (``None``: the figure's own default)."""

    _source_in_messages: ClassVar[bool] = False  # the checks name the key themselves

    methods: Any = key(None, optional=True, check=_methods, flag="",
                       help='methods to draw, e.g. ["vpt","rk4"]')
    threshold: float | None = key(None, optional=True, check=_threshold, flag="", help="the error line, e.g. 0.1")
    band: bool | None = key(None, type=bool, optional=True, flag="",
                            help="true: the median and the 10-90 % band; false: single curves")
    sphere: bool | None = key(None, type=bool, optional=True, flag="", help="false: no invariant sphere")
    formats: Any = key(None, optional=True, check=_formats, flag="", help='e.g. ["png"]')
    traj: Any = key(None, optional=True, flag="", help="trajectory indices, e.g. [100,719] (as --traj)")
    max_points: int = key(20000, type=int, check=_max_points, help="Time points per curve, at most (>= 2).")
    dpi: int = key(200, type=int, check=_dpi, help="PNG resolution (> 0).")
    style: Any = key(None, optional=True, check=_style, flag="",
                     help="single|double|PATH.mplstyle (journal column width or your own style)")
    title: Any = key(None, optional=True, check=_title, flag="", help='false or "TEXT"')
    method_names: Any = key(None, optional=True, check=_names, flag="", help='{vpt="VPT (ours)"} (as --label)')


def check_options(options: Mapping[str, Any]) -> None:
    """Check each plot option in ``options`` by its declaration on ``PlotOptions`` (the values are not
    changed; keys that are not plot options are left to the caller)."""
    keys = declared(PlotOptions)
    for name, value in options.items():
        if name in keys:
            keys[name].validate(name, value)


def set_help() -> str:
    """``vp-plot --set``'s help, from the declarations."""
    items = "; ".join(f"{name}: {k.help.rstrip('.')}" for name, k in declared(PlotOptions).items())
    return ("A plot option, VALUE in TOML syntax; repeatable: " + items +
            ". A key that has its own flag is given once, by the flag or by --set.")
