"""MkDocs hook: the API pages of the packages whose names are lazy (PEP 562), generated from their ``_LAZY`` tables.

griffe (mkdocstrings' reader) reads source without running it, so a lazily exported name is invisible to it.
A page may hold the marker ``<!-- lazy-api: vpintegrator.data -->``: it becomes one ``:::`` block per
public name of that package, pointing at the module that defines it, in the order of ``__all__`` (sorted)
when that is literal, else of ``_LAZY``. ``<!-- root-api -->`` becomes the table of the root names
(``vpintegrator.__all__``), each linked to where it is documented. The tables are read with ``ast``:
nothing is imported, so the docs build needs no torch.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- lazy-api: ([\w.]+) -->")


def _module_file(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _absolute(package: str, relative: str) -> str:
    dots = len(relative) - len(relative.lstrip("."))
    base = package.split(".")[: len(package.split(".")) - dots + 1]
    return ".".join(base + ([relative.lstrip(".")] if relative.lstrip(".") else []))


def _assigned(module: str, name: str):
    """The literal value assigned to ``name`` at the top of ``module`` (None when absent or not literal)."""
    for node in ast.parse(_module_file(module).read_text(encoding="utf-8")).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def lazy_table(package: str) -> dict[str, str]:
    """Public name -> absolute module path, from ``package``'s ``_LAZY`` (empty when it has none)."""
    return {name: _absolute(package, target) for name, target in (_assigned(package, "_LAZY") or {}).items()}


def documented_at(package: str, name: str) -> str:
    """The identifier under which ``package.name`` is rendered: lazy names resolve to their defining module."""
    table = lazy_table(package)
    if name in table:
        return documented_at(table[name], name)
    return f"{package}.{name}"


def lazy_blocks(package: str) -> str:
    table = lazy_table(package)
    if not table:
        raise ValueError(f"lazy-api marker: {package} has no _LAZY table")
    blocks = [f"::: {package}\n    options:\n      members: false\n      show_root_heading: false\n"]
    elsewhere = []  # names another package defines (and documents): a link, not a second copy
    for name in table:
        where = documented_at(package, name)
        home = ".".join(where.split(".")[:2])  # vpintegrator.<subpackage>
        if where.startswith(package + ".") or name not in lazy_table(home):
            blocks.append(f"::: {where}\n    options:\n      heading_level: 2\n")
        else:
            elsewhere.append(f"[`{name}`][{where}]")
    if elsewhere:
        blocks.append(f"Also here, from another package: {', '.join(elsewhere)}.\n")
    return "\n".join(blocks)


def root_table() -> str:
    names = _assigned("vpintegrator", "__all__")
    static = {"__version__": "the package version (`vpintegrator._version`)",
              "VPIntegratorError": "[`vpintegrator.errors.VPIntegratorError`][vpintegrator.errors.VPIntegratorError]",
              "Trajectories": "[`vpintegrator.data.trajectories.Trajectories`][vpintegrator.data.trajectories.Trajectories]"}
    rows = ["| name | documented as |", "|---|---|"]
    for name in names:
        where = static.get(name) or f"[`{documented_at('vpintegrator', name)}`][{documented_at('vpintegrator', name)}]"
        rows.append(f"| `vpintegrator.{name}` | {where} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = MARKER.sub(lambda m: lazy_blocks(m.group(1)), markdown)
    return markdown.replace("<!-- root-api -->", root_table())
