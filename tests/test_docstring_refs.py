"""A cross-reference (``[`name`][vpintegrator.x.name]``) in a numpy-style docstring's type line (``name : TYPE``
of Parameters, or a Returns type) is rendered by mkdocstrings as literal text, not as a link (issue 88: five
such in the API reference): cross-references belong in the description below the type line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vpintegrator"
SECTIONS = {"Parameters", "Other Parameters", "Returns", "Yields", "Receives", "Raises", "Warns", "Attributes"}


def type_lines_with_refs(doc: str) -> list[str]:
    """The type lines of ``doc``'s numpy sections (at the docstring's own indentation) that hold a cross-ref."""
    lines = doc.splitlines()
    section, bad = None, []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and nxt.strip() and set(nxt.strip()) == {"-"} and not line.startswith(" "):
            section = line.strip()
            continue
        if set(line.strip()) == {"-"} or not line.strip() or line.startswith(" "):
            continue
        if section in SECTIONS and "][" in line:
            bad.append(line)
    return bad


def test_no_cross_reference_in_a_type_line():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found += [f"{path.relative_to(PACKAGE.parent)}: {line}" for line in type_lines_with_refs(doc)]
    assert found == []


def test_the_rule_sees_a_type_line_and_not_a_description():
    doc = "Do.\n\nParameters\n----------\nx : names of [`A`][m.A], optional\n    As [`B`][m.B].\n"
    assert type_lines_with_refs(doc) == ["x : names of [`A`][m.A], optional"]
