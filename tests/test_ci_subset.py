"""CI runs the whole suite once (the README's command); against the installed wheel and on Python 3.10 only the
tests marked ``installed`` (issue 90). This holds the rule that picks them (tests/conftest.py, ``INSTALLED``): any
test file that asks for the installed metadata, the Python version, an installed command by name or the shipped
files through the ``installed`` fixture is in the subset, and .ci/run runs the subset where it says."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from conftest import INSTALLED

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: what in a test's code (not its strings) can differ between a checkout and an installed wheel or another Python
TRIGGERS = re.compile(r"importlib\.metadata|entry_points\(|sys\.version_info|def \w+\([^)]*\binstalled\b")
#: an installed command looked up by name (the one string the rule reads)
COMMANDS = re.compile(r"shutil\.which\(\s*[\"']vp-")


def code_of(path: Path) -> str:
    """The file's source without its string literals and comments (a test that mentions a trigger in a string,
    as a fixture for another check, does not use it)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            out.append('""')
        elif tok.type in (tokenize.NEWLINE, tokenize.NL):
            out.append("\n")
        else:
            out.append(tok.string)
    return " ".join(out).replace(" ( ", "(").replace(" . ", ".").replace(" (", "(").replace("( ", "(")


def triggered(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("test_*.py")
            if TRIGGERS.search(code_of(p)) or COMMANDS.search(p.read_text(encoding="utf-8"))}


def test_every_name_in_the_subset_is_a_test_file():
    missing = sorted(name for name in INSTALLED if not (TESTS / name).is_file())
    assert not missing, f"tests/conftest.py INSTALLED names files that do not exist: {missing}"


def test_every_file_that_can_differ_installed_is_in_the_subset():
    outside = sorted(triggered(TESTS) - INSTALLED)
    assert not outside, (f"these test files use what differs in an installed wheel or on Python 3.10; add them to "
                         f"INSTALLED in tests/conftest.py: {outside}")


def test_the_rule_sees_a_trigger_and_not_a_string(tmp_path):
    (tmp_path / "test_uses.py").write_text("import sys\n\ndef test_a():\n    assert sys.version_info >= (3, 10)\n")
    (tmp_path / "test_fixture.py").write_text("def test_b(installed, tmp_path):\n    pass\n")
    (tmp_path / "test_command.py").write_text('import shutil\n\ndef test_d():\n    assert shutil.which("vp-gen")\n')
    (tmp_path / "test_git.py").write_text('import shutil\n\ndef test_e():\n    assert shutil.which("git")\n')
    (tmp_path / "test_mentions.py").write_text('def test_c():\n    assert "sys.version_info" in "x"  # entry_points(\n')
    assert triggered(tmp_path) == {"test_uses.py", "test_fixture.py", "test_command.py"}


def test_the_subset_is_marked_at_collection(request):
    assert request.node.get_closest_marker("installed") is not None  # this file is in the subset


@pytest.mark.skipif(not (ROOT / ".ci" / "run").is_file(), reason="the repository's .ci/run (not beside an installed wheel)")
def test_ci_runs_the_whole_suite_once_and_the_subset_installed():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = 'pip install -c constraints.txt -e ".[test]" && python -m pytest -n auto --dist loadfile'
    assert command in readme and command in ci  # the README's command, the whole suite
    body = ci[ci.index("test_installed() {"):]
    body = body[:body.index("\n}\n")]
    assert re.search(r"python -m pytest .*-m \"installed and not slow\"", body), "the wheel/3.10 runs take the subset"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"installed:' in pyproject  # the marker is registered
