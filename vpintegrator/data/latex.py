"""Tables as LaTeX for a paper: a booktabs ``tabular`` (``\\toprule``, ``\\midrule``, ``\\bottomrule``) per table,
the cells escaped (``_ % & # $ { } ~ ^ \\``), written beside every CSV and Markdown table the package writes:
``vp-rollout``'s metrics table (``<stem>.tex``, ``vpintegrator.data.summary.write_table``) and a study's results
(``results.tex`` beside ``results.md``: every Markdown table of the page, each under its section's heading as a
comment). Each file starts with ``HEAD``, which is how ``vpintegrator._outputs`` knows it for one it may replace;
it needs ``\\usepackage{booktabs}``."""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from .._outputs import LATEX_HEAD

__all__ = ["HEAD", "escape", "tabular", "markdown_tables"]

#: the first line of every LaTeX table file the package writes (``vpintegrator._outputs`` tells its own by it)
HEAD = LATEX_HEAD
#: the characters escaped in a cell, and how
_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_SPECIAL = re.compile("|".join(re.escape(c) for c in _ESCAPES))
#: what pdflatex cannot set from the cells' Unicode, as LaTeX
_UNICODE = {"—": "---", "–": "--", "×": r"$\times$", "±": r"$\pm$", "≤": r"$\le$", "≥": r"$\ge$",
            "σ": r"$\sigma$", "μ": r"$\mu$", "λ": r"$\lambda$", "≈": r"$\approx$", "→": r"$\to$", "²": r"$^2$",
            "³": r"$^3$", "⁴": r"$^4$", "‖": r"$\|$", "Δ": r"$\Delta$", "ö": r"\"o"}


def escape(cell: Any) -> str:
    """A cell as LaTeX text: the Markdown code marks and bold stars dropped, ``_ % & # $ { } ~ ^ \\`` escaped,
    a few Unicode signs set as LaTeX (``_UNICODE``)."""
    text = str(cell).replace("`", "").replace("**", "")
    text = _SPECIAL.sub(lambda m: _ESCAPES[m.group(0)], text)
    return "".join(_UNICODE.get(c, c) for c in text)


def tabular(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A booktabs ``tabular`` of ``head`` and ``rows`` (every cell ``escape``d; the first column left-aligned, the
    others right-aligned)."""
    cols = "l" + "r" * (len(head) - 1)
    lines = [f"\\begin{{tabular}}{{{cols}}}", "\\toprule", " & ".join(escape(h) for h in head) + " \\\\",
             "\\midrule", *(" & ".join(escape(c) for c in row) + " \\\\" for row in rows), "\\bottomrule",
             "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table line ``| a | b |`` (a ``\\|`` inside a cell kept as ``|``)."""
    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def markdown_tables(text: str) -> str:
    """Every Markdown table of ``text`` (a header line, its ``|---|`` rule, its rows) as a booktabs ``tabular``,
    each under a comment naming the heading it sits under; ``HEAD`` first."""
    lines, out, heading, i = text.splitlines(), [HEAD], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            head, j = _cells(line), i + 2
            rows = []
            while j < len(lines) and lines[j].startswith("|"):
                rows.append(_cells(lines[j]))
                j += 1
            out += ["", f"% {heading}" if heading else "%", tabular(head, rows).rstrip("\n")]
            i = j
            continue
        i += 1
    return "\n".join(out) + "\n"
