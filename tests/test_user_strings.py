"""What a pip user reads names nothing a pip user lacks (issue 57): no repository path (``docs/...``,
``scripts/...``, ``configs/...``, ``systems/...``) in the commands' help texts and listings, in the shipped
configs' comments, or in any message or help the package's code holds (the string literals of every
``raise``, ``help=`` and warning, log or print call). The repository's
pages are named by title, its scripts by the ``vp-study``/``vp-train`` command or the function that does the
same, and the shipped configs by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import vpintegrator
from vpintegrator.cli import gen, plot, rollout, study, train

PACKAGE = Path(vpintegrator.__file__).resolve().parent
#: a path into the repository (not in the wheel): docs/x.md, scripts/x.py, configs/x.toml, systems/x.toml
REPO_PATH = re.compile(r"(?<![\w.])(?:(?:docs|scripts|configs|systems)/[\w./-]+|datasets/README\.md)")
COMMANDS = {"vp-gen": gen.main, "vp-train": train.main, "vp-rollout": rollout.main, "vp-plot": plot.main,
            "vp-study": study.main}


def _outputs():
    runner = CliRunner()
    for name, main in COMMANDS.items():
        yield f"{name} --help", runner.invoke(main, ["--help"], terminal_width=200).output
    from vpintegrator.studies.options import STUDIES

    for sub in STUDIES:  # vp-study NAME --help: each study's own options
        yield f"vp-study {sub} --help", runner.invoke(study.main, [sub, "--help"], terminal_width=200).output
    for name in ("vp-gen", "vp-train", "vp-rollout", "vp-study"):
        yield f"{name} --list", runner.invoke(COMMANDS[name], ["--list"], terminal_width=200).output


def test_help_texts_and_listings_cite_no_repository_path():
    seen = 0
    for what, text in _outputs():
        assert "Usage:" in text or "\n" in text, (what, text[:200])
        seen += 1
        assert not REPO_PATH.findall(text), (what, REPO_PATH.findall(text))
    assert seen >= 15  # five commands, six studies, four listings


def test_the_pattern_finds_what_it_must():
    assert REPO_PATH.findall("see docs/vector_fields.md and scripts/structure_audit.py; as configs/tiny.toml, "
                             "datasets/README.md") == [
        "docs/vector_fields.md", "scripts/structure_audit.py", "configs/tiny.toml", "datasets/README.md"]
    assert not REPO_PATH.findall("vp-gen writes datasets/rb.h5 and runs/x/figures/a.pdf; RUN/data/train.h5")


#: calls whose string arguments a user reads: messages, warnings, progress and printed lines
SAID = {"warn", "warning", "error", "info", "echo", "secho", "print", "fail", "exit"}


def _said(path: Path) -> list[tuple[int, str]]:
    """The string literals (f-strings' literal parts included) a user of ``path`` reads: in a ``raise``
    (every error message), in a ``help=``/``epilog=``/``show_default=`` keyword (option help), and in the
    arguments of a warning, log, echo or print call."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            roots.append(node.exc)
        elif isinstance(node, ast.keyword) and node.arg in ("help", "epilog", "show_default"):
            roots.append(node.value)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in SAID:
                roots.extend(node.args)
    return [(n.lineno, n.value) for root in roots for n in ast.walk(root)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_scan_finds_a_message_that_cites_a_repository_path(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text('def f(x):\n    if x:\n        raise ValueError(f"bad {x}; see docs/setup.md")\n'
                      '    warnings.warn("run scripts/bench.py")\n    opt(help="as configs/tiny.toml")\n'
                      '    path = "configs/study"  # a path the code uses, not a message\n')
    assert [line for line, text in _said(sample) if REPO_PATH.search(text)] == [3, 4, 5]


@pytest.mark.parametrize("part", sorted({p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py")}))
def test_no_message_or_help_of_the_package_cites_a_repository_path(part):
    found = [f"{path.relative_to(PACKAGE)}:{line}: {text[:120]!r}"
             for path in sorted((PACKAGE / part).rglob("*.py") if (PACKAGE / part).is_dir() else [PACKAGE / part])
             for line, text in _said(path) if REPO_PATH.search(text)]
    assert not found, found


def test_shipped_config_descriptions_cite_no_repository_path():
    from vpintegrator._shipped import config_description, config_files

    files = config_files()
    assert files
    for path in files.values():
        text = path.read_text(encoding="utf-8")
        comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        assert not REPO_PATH.findall(comments), (path.name, REPO_PATH.findall(comments))
        assert not REPO_PATH.findall(config_description(path))
