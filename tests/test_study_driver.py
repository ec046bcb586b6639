"""One study driver (``vp-study NAME`` / ``python -m vpintegrator study NAME``) and the studies' shared flags
declared once on ``StudyOptions`` (issue 30, item 4)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from vpintegrator.cli import group, study
from vpintegrator.studies import (memory, partial_observation, reduction, rigid_body, rigid_body_quality,
                                  rigid_body_structure, unknown_form)
from vpintegrator.studies.options import STUDIES, Study, StudyOptions, parse
from vpintegrator.studies.runner import StudyError
from vpintegrator.studies.driver import main as run_study

SHARED = ("--out", "--seeds", "--jobs", "--budget", "--wall-ceiling", "--skip-existing", "--overwrite",
          "--table-only", "--export-pretrained")
MODULES = {"rigid_body": rigid_body, "rigid_body_structure": rigid_body_structure,
           "rigid_body_quality": rigid_body_quality,
           "unknown_form": unknown_form, "partial_observation": partial_observation, "reduction": reduction,
           "memory": memory}


def test_every_study_is_listed_and_takes_the_shared_flags():
    # the context study has keys of its own (ContextOptions, the same parser): its trainings are counted in
    # epochs, run one after another, so it takes none of the budget/jobs keys the four others share
    own = {"context": importlib.import_module("vpintegrator.studies.context"),
           "compare": importlib.import_module("vpintegrator.studies.compare"),  # its own keys: problems, rows
           "coupled_oscillator": importlib.import_module("vpintegrator.studies.compare")}  # a preset of compare
    assert set(STUDIES) == set(MODULES) | set(own)
    result = CliRunner().invoke(study.main, [])
    assert result.exit_code == 0
    for name in STUDIES:
        assert name in result.output
        assert run_study({**MODULES, **own}[name].STUDY, ["--help"]) == 0  # click's help, exit status 0


@pytest.mark.parametrize("name", sorted(MODULES))
def test_shared_flags_in_each_study_help(name, capsys):
    assert run_study(name, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: vp-study {name} [OPTIONS]")
    for flag in SHARED:
        assert flag in out, (name, flag)


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("args, message", [
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--wall-ceiling", "0.5"], "--wall-ceiling must be a number >= 1"),
    (["--wall-ceiling", "inf"], "--wall-ceiling must be a number >= 1"),
    (["--seeds", "0,x"], "--seeds must be a comma list of integers"),
    (["--seeds", "1,1"], "--seeds: 1 is given twice; give each once"),
    # steps are counted under --budget plateau only: a CPU budget never took them (issue 88)
    (["--budget", "cpu", "--max-steps", "5"], "--max-steps counts optimiser steps under --budget plateau only; "
                                              "--budget cpu stops each training by its cpu seconds: add --budget plateau"),
])
def test_shared_checks_are_the_same_in_every_study(name, args, message, tmp_path, capsys):
    """One checker: the same bad shared flag gets the same one-line error (exit 2) from every study,
    through the driver as through the module."""
    argv = ["--out", str(tmp_path / "run"), *args]
    assert run_study(MODULES[name].STUDY, argv) == 2
    assert message in capsys.readouterr().err
    result = CliRunner().invoke(study.main, [name, *argv])
    assert result.exit_code == 2
    assert message in result.output  # CliRunner mixes stderr in


def test_unknown_study_is_one_line_with_a_close_match():
    result = CliRunner().invoke(study.main, ["rigid_bdy", "--quick"])
    assert result.exit_code == 2
    assert "unknown study 'rigid_bdy' (did you mean 'rigid_body'?)" in result.output
    assert "Traceback" not in result.output


def test_parse_normalises_and_checks_once():
    shared = Study(StudyOptions, lambda a: 0, required=("out",), defaults={"seeds": "3,1"})
    a = parse(shared, ["--out", "r", "--budget", "wall"])
    assert (a.out, a.seeds, a.jobs, a.budget, a.wall_ceiling, a.skip_existing) == ("r", [3, 1], 2, "wall", 4.0, False)
    with pytest.raises(StudyError, match=r"^--out is required"):
        parse(shared, [])  # --out required (its flag or out in the --plan file)
    with pytest.raises(StudyError, match=r"^--jobs must be >= 1"):
        parse(shared, ["--out", "r", "--jobs", "-1"])
    with pytest.raises(StudyError, match=r"No such option '--job'.*see --help"):
        parse(shared, ["--out", "r", "--job", "1"])


def test_python_m_vpintegrator_study_lists_the_studies():
    assert "study" in group.COMMANDS
    out = subprocess.run([sys.executable, "-m", "vpintegrator", "study"], capture_output=True, text=True, check=True)
    assert all(name in out.stdout for name in STUDIES)


def test_vp_study_list_and_list_json():
    result = CliRunner().invoke(study.main, ["--list"])
    assert result.exit_code == 0 and all(name in result.output for name in STUDIES)
    result = CliRunner().invoke(study.main, ["--list", "--json"])
    assert result.exit_code == 0
    listed = json.loads(result.output)["studies"]
    assert [s["name"] for s in listed] == list(STUDIES)
    assert all(s["description"] and s["module"].startswith("vpintegrator.studies.") for s in listed)


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_print_config_is_a_plan_file_of_the_same_study(name, tmp_path):
    """--print-config prints the resolved keys as TOML without running; given back as --plan it resolves to
    the same keys (the flags and --set it was printed with included)."""
    argv = ["--seeds", "4,2", "--set", "out=" + repr(str(tmp_path / "r2"))]
    first = CliRunner().invoke(study.main, [name, *argv, "--print-config"])
    assert first.exit_code == 0, first.output
    from vpintegrator._toml import tomllib

    printed = tomllib.loads(first.output)
    assert printed["seeds"] == [4, 2] and printed["out"].endswith("r2")
    plan = tmp_path / "plan.toml"
    plan.write_text(first.output)
    again = CliRunner().invoke(study.main, [name, "--plan", str(plan), "--print-config"])
    assert again.exit_code == 0 and again.output == first.output
    assert not (tmp_path / "r2").exists()  # nothing ran


def _echo_study(tmp_path):
    """A Study whose run executes one real task through the Runner (a python -c child)."""
    import sys as _sys

    from vpintegrator.studies.runner import Runner, Task

    def run(a):
        r = Runner(a.out)
        r.add(Task("hello", [_sys.executable, "-c", "print('hi')"], []))
        assert r.execute()
        print("the study's own text")
        return 0

    return Study(StudyOptions, run, required=("out",), prog="echo-study")


@pytest.mark.parametrize("flags, progress, command", [([], True, False), (["-q"], False, False),
                                                      (["-v"], True, True)])
def test_quiet_and_verbose(flags, progress, command, tmp_path, capsys):
    """Progress lines go to stderr through logging: -q hides them, -v adds each step's command line."""
    assert run_study(_echo_study(tmp_path), ["--out", str(tmp_path / "run"), *flags]) == 0
    out, err = capsys.readouterr()
    assert "the study's own text" in out
    assert ("[1/1] hello:" in err) == progress
    assert ("debug: vpintegrator.studies: hello: " in err and "print" in err) == command


def test_json_is_the_only_thing_on_stdout(tmp_path, capsys):
    assert run_study(_echo_study(tmp_path), ["--out", str(tmp_path / "run"), "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["exit_status"] == 0 and summary["out"] == str(tmp_path / "run")
    assert "the study's own text" in err and "[1/1] hello:" in err


def test_a_study_help_is_clicks(capsys):
    assert run_study("context", ["-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: vp-study context [OPTIONS]")
    for flag in ("--plan TOML", "--set KEY=VALUE", "--print-config", "--json", "-q, --quiet", "-v, --verbose"):
        assert flag in out


def _holds_no_options(value, where="plan"):
    """``value`` (a plan) and everything in it: no ``Config``, no namespace."""
    import dataclasses
    from types import SimpleNamespace

    from vpintegrator.config import Config

    assert not isinstance(value, (Config, argparse.Namespace, SimpleNamespace)), f"{where}: {type(value).__name__}"
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _holds_no_options(getattr(value, f.name), f"{where}.{f.name}")
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _holds_no_options(v, f"{where}[{i}]")


def _frozen_parts(value):
    """The frozen dataclasses a plan is made of (itself, or the parts of a NamedTuple plan)."""
    import dataclasses

    parts = list(value) if isinstance(value, tuple) else [value]
    assert parts and all(dataclasses.is_dataclass(p) and p.__dataclass_params__.frozen for p in parts), parts
    return parts


@pytest.mark.parametrize("name", sorted(set(STUDIES) - {"partial_observation"}) + ["attention"])
def test_each_study_builds_a_frozen_plan_once(name, tmp_path, monkeypatch):
    """The driver parses once and calls the study's plan builder once; ``run`` gets a frozen plan that holds no
    options object (partial_observation: the lead converts it)."""
    import dataclasses

    from vpintegrator.studies import attention
    from vpintegrator.studies.driver import load

    monkeypatch.chdir(tmp_path)
    study = attention.STUDY if name == "attention" else load(name)
    argv = ["--out", "r", *(["--model", "m.pt", "--data", "d.h5"] if name == "attention" else ["--seeds", "3"])]
    built, ran = [], []

    def plan(options, given):
        built.append(given)
        return study.plan(options, given)

    assert run_study(dataclasses.replace(study, plan=plan, run=lambda p: ran.append(p) or 0), argv) == 0
    assert built == [tuple(argv)] and len(ran) == 1
    _holds_no_options(ran[0])
    for part in _frozen_parts(ran[0]):
        with pytest.raises(dataclasses.FrozenInstanceError):
            part.out = "elsewhere"
    first = _frozen_parts(ran[0])[0]
    assert str(first.out) == "r" and (name == "attention" or list(first.seeds) == [3])


@pytest.mark.parametrize("marked", [True, False], ids=["one_line", "plain"])
def test_a_one_line_studys_library_error_is_its_message_as_is_and_a_plain_studys_names_the_flag(marked, tmp_path,
                                                                                                 capsys):
    """``one_line`` marks a study's run (no wrapper): a library error its run raises is reported as its message
    (the key as written), a plain study's with the key as its flag; an error of the plan builder is a plain
    study's in both (the mark is the run's)."""
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.studies.errors import one_line
    from vpintegrator.studies.plan import StudyPlan

    def run(plan):
        raise VPIntegratorError("results: 'x' is not there", key="results")

    def build(options, argv):
        if options.jobs == 3:
            raise VPIntegratorError("jobs: 3 is refused here", key="jobs")
        return StudyPlan.build(options, argv)

    study = Study(StudyOptions, one_line(run) if marked else run, build, prog="probe", error_prefix="probe: ")
    assert run_study(study, ["--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == ("probe: results: 'x' is not there\n" if marked
                                       else "probe: --results: 'x' is not there\n")
    assert run_study(study, ["--out", str(tmp_path / "r"), "--jobs", "3"]) == 2
    assert capsys.readouterr().err == "probe: --jobs: 3 is refused here\n"
