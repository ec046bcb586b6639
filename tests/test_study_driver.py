"""One study driver (``vp-study NAME`` / ``python -m vpintegrator study NAME``) and the studies' shared flags
declared once on ``StudyOptions`` (issue 30, item 4)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from vpintegrator.cli import group, study
from vpintegrator.studies import coupled_oscillator, rigid_body, rigid_body_quality, rigid_body_structure, unknown_form
from vpintegrator.studies.options import STUDIES, StudyOptions, add_options, checked, parse
from vpintegrator.studies.runner import StudyError

SHARED = ("--out", "--seeds", "--jobs", "--budget", "--wall-ceiling", "--skip-existing", "--overwrite",
          "--table-only", "--export-pretrained")
MODULES = {"rigid_body": rigid_body, "rigid_body_structure": rigid_body_structure,
           "rigid_body_quality": rigid_body_quality, "coupled_oscillator": coupled_oscillator,
           "unknown_form": unknown_form}


def test_every_study_is_listed_and_takes_the_shared_flags():
    # the context study has keys of its own (ContextOptions, the same parser): its trainings are counted in
    # epochs, run one after another, so it takes none of the budget/jobs keys the four others share
    own = {"context": importlib.import_module("vpintegrator.studies.context")}
    assert set(STUDIES) == set(MODULES) | set(own)
    result = CliRunner().invoke(study.main, [])
    assert result.exit_code == 0
    for name in STUDIES:
        assert name in result.output
        with pytest.raises(SystemExit) as exc:  # argparse's --help
            {**MODULES, **own}[name].main(["--help"])
        assert exc.value.code == 0


@pytest.mark.parametrize("name", sorted(MODULES))
def test_shared_flags_in_each_study_help(name, capsys):
    with pytest.raises(SystemExit):
        MODULES[name].main(["--help"])
    out = capsys.readouterr().out
    for flag in SHARED:
        assert flag in out, (name, flag)


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("args, message", [
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--wall-ceiling", "0.5"], "--wall-ceiling must be a number >= 1"),
    (["--wall-ceiling", "inf"], "--wall-ceiling must be a number >= 1"),
    (["--seeds", "0,x"], "--seeds must be a comma list of integers"),
    (["--seeds", "1,1"], "--seeds must be distinct"),
])
def test_shared_checks_are_the_same_in_every_study(name, args, message, tmp_path, capsys):
    """One checker: the same bad shared flag gets the same one-line error (exit 2) from every study,
    through the driver as through the module."""
    argv = ["--out", str(tmp_path / "run"), *args]
    assert MODULES[name].main(argv) == 2
    assert message in capsys.readouterr().err
    result = CliRunner().invoke(study.main, [name, *argv])
    assert result.exit_code == 2
    assert message in result.output  # CliRunner mixes stderr in


def test_unknown_study_is_one_line_with_a_close_match():
    result = CliRunner().invoke(study.main, ["rigid_bdy", "--quick"])
    assert result.exit_code == 2
    assert "unknown study 'rigid_bdy' (did you mean 'rigid_body'?)" in result.output
    assert "Traceback" not in result.output


def test_checked_normalises_and_writes_back():
    p = argparse.ArgumentParser()
    add_options(p, required=("out",), defaults={"seeds": "3,1"})
    a = p.parse_args(["--out", "r", "--budget", "wall"])
    opts = checked(a)
    assert isinstance(opts, StudyOptions)
    assert a.seeds == [3, 1] and opts.seeds == [3, 1]
    assert (a.jobs, a.budget, a.wall_ceiling, a.skip_existing) == (2, "wall", 4.0, False)
    a = parse(p, ["--out", "r", "--budget", "wall"])  # the same through parse
    assert (a.out, a.seeds, a.jobs, a.budget, a.wall_ceiling, a.skip_existing) == ("r", [3, 1], 2, "wall", 4.0, False)
    with pytest.raises(StudyError, match=r"^--out is required"):
        parse(p, [])  # --out required (its flag or out in the --plan file)


def test_checked_refuses_a_bad_value_naming_the_flag():
    with pytest.raises(StudyError, match=r"^--jobs must be >= 1"):
        checked(argparse.Namespace(out="r", seeds=None, jobs=-1, budget="cpu", wall_ceiling=4.0,
                                   skip_existing=False, overwrite=False, table_only=False, export_pretrained=None))


def test_python_m_vpintegrator_study_lists_the_studies():
    assert "study" in group.COMMANDS
    out = subprocess.run([sys.executable, "-m", "vpintegrator", "study"], capture_output=True, text=True, check=True)
    assert all(name in out.stdout for name in STUDIES)
