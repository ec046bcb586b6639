"""Figures shown inline in Jupyter: the figures here are built without pyplot, so IPython's inline backend
(which registers its image formatter when pyplot is imported) never sees them and a notebook cell printed
``<Figure size ...>``. [`enable_notebook_display`][vpintegrator.plotting.enable_notebook_display] registers a
PNG formatter for matplotlib figures in the running IPython shell (once; never over one the user or
``%matplotlib inline`` set); every figure made here calls it.

[`FigureFiles`][vpintegrator.plotting.FigureFiles] is what the functions that write figures return (``plot_all``,
``plot_training``): the list of files written, shown in a notebook as the images themselves.
"""

from __future__ import annotations

import base64
import html
import sys
from pathlib import Path

__all__ = ["FigureFiles", "enable_notebook_display"]

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


class FigureFiles(list[Path]):
    """The figure files a call wrote: a ``list`` of ``Path`` (in the order written) that a notebook shows as
    the figures themselves.

    ``_repr_html_`` shows every PNG inline (captioned with its file name) and names the other files;
    ``_repr_png_`` is the image when exactly one PNG was written. Outside a notebook it is the list of paths.
    """

    def pngs(self) -> list[Path]:
        """The PNG files, in order."""
        return [Path(p) for p in self if Path(p).suffix.lower() == ".png"]

    def _repr_png_(self) -> bytes | None:
        pngs = self.pngs()
        if len(pngs) != 1:
            return None
        try:
            return pngs[0].read_bytes()
        except OSError:
            return None

    def _repr_html_(self) -> str:
        parts = []
        for p in self.pngs():
            try:
                data = base64.b64encode(p.read_bytes()).decode("ascii")
            except OSError:
                continue
            name = html.escape(p.name)
            parts.append(f'<figure style="display:inline-block;margin:4px"><img src="data:image/png;base64,{data}" '
                         f'alt="{name}" style="max-width:100%"/><figcaption>{name}</figcaption></figure>')
        others = [Path(p) for p in self if Path(p).suffix.lower() != ".png"]
        if others:
            listed = ", ".join(f"<code>{html.escape(str(p))}</code>" for p in others)
            parts.append(f"<p>{len(self)} file(s) written; also {listed}</p>")
        return "<div>" + "".join(parts) + "</div>" if parts else "<p>no figure written</p>"
