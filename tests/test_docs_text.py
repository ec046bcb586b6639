"""What the package's own text shows a user: its docstrings render as Markdown on the docs site.

The API reference (mkdocstrings) reads docstrings as Markdown, so a Sphinx role (``:func:`fit```) prints as
literal text: cross-references are autorefs links ``[`fit`][vpintegrator.training.fit]`` instead
(scripts/convert_sphinx_roles.py converted them). Checked against the package's source files, so the test
runs against an installed wheel too.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import vpintegrator

PACKAGE = Path(vpintegrator.__file__).resolve().parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`")
LINK = re.compile(r"\[`[^`\]]+`\]\[(vpintegrator(?:\.\w+)+)\]")


def _strings(path: Path):
    """(line, text) of every string statement: module, class, function and attribute docstrings."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def test_no_sphinx_role_remains_in_the_source():
    found = [f"{p.relative_to(PACKAGE)}:{n + 1}: {line.strip()[:90]}"
             for p in SOURCES for n, line in enumerate(p.read_text(encoding="utf-8").splitlines()) if ROLE.search(line)]
    assert not found, "Sphinx roles print as literal text on the docs site; write [`name`][vpintegrator.x.name]:\n" \
        + "\n".join(found[:20])


def test_cross_references_name_objects_that_exist():
    targets = {m for p in SOURCES for _, text in _strings(p) for m in LINK.findall(text)}
    assert len(targets) > 50  # the conversion linked the rendered objects
    missing = []
    for target in sorted(targets):
        parts = target.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            missing.append(target)
    assert not missing, f"cross-references to nothing: {missing}"


@pytest.mark.parametrize("role", [":func:`fit`", ":class:`~vpintegrator.data.Trajectories`", ":mod:`.loop`"])
def test_the_role_pattern_catches_roles(role):
    assert ROLE.search(f"see {role} for more")


INTERNAL = re.compile(r"\bDESIGN\b|\b[Ii]ssue\s+#?\d+|§\s*\d")  # "design" the word is fine


def test_no_internal_references_in_docstrings():
    """Users read the docstrings (the API reference, help()): no "DESIGN §6" or "issue 21" there."""
    found = [f"{p.relative_to(PACKAGE)}:{line}: {INTERNAL.search(text).group(0)}"
             for p in SOURCES for line, text in _strings(p) if INTERNAL.search(text)]
    assert not found, found


@pytest.mark.parametrize("command", ["train", "gen", "rollout", "plot"])
def test_no_internal_references_in_list_and_help(command):
    from click.testing import CliRunner

    main = importlib.import_module(f"vpintegrator.cli.{command}").main
    for args in (["--list"], ["--help"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert not INTERNAL.search(result.output), (args, INTERNAL.search(result.output).group(0))


def test_no_internal_references_on_the_docs_site():
    """The docs pages say what a tracker reference meant ("the structure study's targets"), never "issue 21"
    or "the issue's"."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    pattern = re.compile(r"\b[Ii]ssue[\s-]+#?\d+|\bthe issue's\b")
    found = [f"{p.relative_to(docs)}:{i}: {pattern.search(line).group(0)}"
             for p in sorted(docs.rglob("*.md")) for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not found, found


def test_no_internal_references_in_the_study_helps(capsys):
    from vpintegrator.studies.options import STUDIES
    from vpintegrator.studies.driver import main

    for name in STUDIES:
        assert main(name, ["--help"]) == 0
        out = capsys.readouterr().out
        assert not INTERNAL.search(out), (name, INTERNAL.search(out).group(0))


def test_no_internal_references_in_the_shipped_text_files():
    """The text files a user reads outside the docs site carry no tracker reference either: the wheel's
    pretrained README and provenance.json (what ``vp.pretrained_info`` reads), and the README (the package's
    PyPI page) where a clone has one."""
    pattern = re.compile(r"\b[Ii]ssue[\s-]+#?\d+|\bthe issue's\b")
    files = [PACKAGE / "pretrained" / "README.md", PACKAGE / "pretrained" / "provenance.json"]
    readme = PACKAGE.parent / "README.md"
    if (PACKAGE.parent / "pyproject.toml").is_file() and readme.is_file():  # a clone, not the installed wheel
        files.append(readme)
    found = [f"{p.name}:{i}: {pattern.search(line).group(0)}" for p in files
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, found
