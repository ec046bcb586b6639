"""Figures shown inline in Jupyter: the figures here are built without pyplot, so IPython's inline backend
(which registers its image formatter when pyplot is imported) never sees them and a notebook cell printed
``<Figure size ...>``. [`enable_notebook_display`][vpintegrator.plotting.enable_notebook_display] registers a
PNG formatter for matplotlib figures in the running IPython shell (once; never over one the user or
``%matplotlib inline`` set); every figure made here calls it.
"""

from __future__ import annotations

import sys

__all__ = ["enable_notebook_display"]

_MIMES = ("image/png", "image/svg+xml", "image/jpeg", "application/pdf")
_done = False


def _png(fig) -> bytes:
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight")


def enable_notebook_display() -> bool:
    """Make IPython/Jupyter show a ``matplotlib.figure.Figure`` (a cell's value) as a PNG image.

    A no-op outside IPython and when a figure formatter is already registered (``%matplotlib inline``,
    ``%config InlineBackend.figure_formats``). Returns whether figures now display as images.
    """
    global _done
    if _done:
        return True
    ipython = sys.modules.get("IPython")  # never imported here: only a running shell matters
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or "image/png" not in formatters:
        return False
    from matplotlib.figure import Figure

    if not any(mime in formatters and formatters[mime].for_type(Figure) is not None for mime in _MIMES):
        formatters["image/png"].for_type(Figure, _png)
    _done = True
    return True
