"""The studies' own flags are ``Config`` keys (one subclass of ``StudyOptions`` per study): documented once,
listed once by ``vp-study NAME --help``, settable from a ``--plan`` TOML file and ``--set KEY=VALUE``, and a
bad key or value is a one-line error naming it, through the driver as through the module."""

from __future__ import annotations

import dataclasses
import re

import pytest
from click.testing import CliRunner

from test_study_plans import OPTION_SETS, planned

from vpintegrator.cli import study
from vpintegrator.config import declared, documented, first_sentence
from vpintegrator.studies import rigid_body, rigid_body_quality, rigid_body_structure
from vpintegrator.studies.options import StudyOptions
from vpintegrator.studies.driver import main as run_study

OPTIONS = {
    "rigid_body": (rigid_body, rigid_body.RigidBodyOptions),
    "rigid_body_structure": (rigid_body_structure, rigid_body_structure.StructureOptions),
    "rigid_body_quality": (rigid_body_quality, rigid_body_quality.QualityOptions),
}


def _own(cls) -> list[str]:
    return [name for name in declared(cls) if name not in declared(StudyOptions)]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_own_keys_are_documented_once(name):
    """Each study key has one documentation, its entry in its class's docstring; the flag's help is that
    entry's first sentence (no second text on the declaration)."""
    cls = OPTIONS[name][1]
    assert issubclass(cls, StudyOptions)
    own = _own(cls)
    assert own and set(documented(cls)) == set(own)
    docs = documented(cls)
    for key in own:
        field = next(f for f in dataclasses.fields(cls) if f.name == key)
        assert not field.metadata["vpintegrator.key"].help, key
        assert declared(cls)[key].help == first_sentence(docs[key]), key


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_vp_study_help_lists_each_key_once(name):
    result = CliRunner().invoke(study.main, [name, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output
    flat = "".join(text.split())  # argparse wraps lines, also at a hyphen
    cls = OPTIONS[name][1]
    for key in declared(cls):
        flag = "--" + key.replace("_", "-")
        assert len(re.findall(rf"^  {flag}[ ,\n]", text + "\n", flags=re.M)) == 1, (name, flag)
        if key in _own(cls):
            assert flat.count("".join(declared(cls)[key].help.split())) == 1, (name, key)
    for flag in ("--plan", "--set"):
        assert len(re.findall(rf"^  {flag} ", text, flags=re.M)) == 1


BAD = [
    ("rigid_body", ["--train-seconds", "nan"], "--train-seconds must be a number >= 1; got nan"),
    ("rigid_body", ["--set", "n_heldout=0"], "--n-heldout must be >= 1; got 0"),
    ("rigid_body", ["--set", "quick=yes"], "--quick must be true or false; got 'yes'"),
    ("rigid_body", ["--set", "models=[1, 2]"], "--models must be a comma list"),
    ("rigid_body_structure", ["--set", "long_t_end=50"], "--long-t-end must be a number > 100; got 50"),
    ("rigid_body_structure", ["--n-heldout", "5", "--set", "n_long=6"], "--n-long (6) must be <= --n-heldout (5)"),
    ("rigid_body_quality", ["--unroll", "0"], "--unroll must be >= 1; got 0"),
    ("rigid_body_quality", ["--set", 'phase1_seconds="x"'], "--phase1-seconds must be a positive number of seconds"),
    ("rigid_body_structure", ["--set", "modls=vpt"], "--set: unknown key 'modls'"),
    ("rigid_body", ["--n-heldout", "7", "--set", "n_heldout=8"], "n_heldout is also given by its own flag --n-heldout"),
    ("rigid_body_structure", ["--set", "nosep"], "set: 'nosep' is not KEY=VALUE"),
    # the model lists: one reader (options.model_list) for every study
    ("rigid_body", ["--models", "vpt,vtp"], "--models: unknown model 'vtp' (did you mean 'vpt'?); valid: vpff, vpt"),
    ("rigid_body_structure", ["--models", "vpt,lpnet,vpt"], "--models: 'vpt' is given twice; give each once"),
    ("rigid_body_structure", ["--models", " , "], "--models is empty; give a comma list"),
]


@pytest.mark.parametrize("name, args, message", BAD)
def test_a_bad_key_or_value_is_one_line_naming_it(name, args, message, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_study(OPTIONS[name][0].STUDY, ["--out", str(run), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    result = CliRunner().invoke(study.main, [name, "--out", str(run), *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not run.exists()


def _toml(values: dict) -> str:
    from vpintegrator.config import dump_toml

    return dump_toml(values)


#: the custom option sets of test_study_plans as plan files (out given by the file)
PLANS = {
    "rigid_body_custom": {"out": "runs/plan", "models": ["st", "vpt_exact", "vpt"], "seeds": [2, 0],
                          "long_volume": False, "timing_concurrent": True, "budget": "wall", "train_seconds": 50,
                          "long_t_end": 200, "timing_t_end": 100, "n_heldout": 7},
    "rigid_body_structure_custom": {"out": "runs/plan", "models": "vpt,lpnet", "seeds": "1", "n_heldout": 9,
                                    "n_long": 3, "long_t_end": 500, "wall_ceiling": 2, "train_seconds": 30,
                                    "budget": "cpu"},
    "rigid_body_quality_custom": {"out": "runs/plan", "phase1_seconds": 10, "phase2_seconds": 20.0,
                                  "phase3_seconds": 100, "unroll": 2, "unroll3": 4, "budget": "wall", "seeds": [4]},
}


def _tasks(module, argv):
    parsed = module.STUDY.parse(argv)
    runner = module.plan(parsed[0] if isinstance(parsed, tuple) else parsed)
    return [[t.name, [str(c) for c in t.cmd], [str(o) for o in t.outputs], t.deps, t.exclusive]
            for t in runner.tasks.values()]


@pytest.mark.parametrize("option_set", sorted(PLANS))
def test_a_plan_file_plans_what_the_flags_plan(option_set, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module, flags = OPTION_SETS[option_set]
    plan = tmp_path / "plan.toml"
    plan.write_text(_toml(PLANS[option_set]))
    assert _tasks(module, ["--plan", str(plan)]) == _tasks(module, ["--out", "runs/plan", *flags])
    assert planned(module, flags)  # the same helper as the byte-identity check


def test_flags_and_set_go_on_top_of_the_plan_file(tmp_path, monkeypatch):
    from vpintegrator.studies.driver import load

    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.toml"
    plan.write_text(_toml({"out": "runs/a", "train_seconds": 50, "n_heldout": 30}))
    s = rigid_body_structure.STUDY.parse(["--plan", str(plan), "--train-seconds", "60", "--set", "n_heldout=20"])
    assert (s.out, s.train_seconds, s.n_heldout) == ("runs/a", 60.0, 20)
    s = rigid_body_structure.STUDY.parse(["--plan", str(plan), "--out", "runs/b"])
    assert (s.out, s.train_seconds) == ("runs/b", 50.0) and isinstance(s.train_seconds, float)
    # a study that is a preset: the plan file and the flags over the preset (its --quick table under them)
    plan.write_text(_toml({"out": "runs/a", "n_steps": 100, "quick": True, "max_steps": 50}))
    s = load("coupled_oscillator").parse(["--plan", str(plan), "--max-steps", "60", "--set", "n_steps=200"])
    assert (s.out, s.max_steps, s.n_steps, s.seeds, s.n_train, s.preset) == ("runs/a", 60, 200, (0, 1), 100,
                                                                             "coupled_oscillator")


@pytest.mark.parametrize("text, message", [
    ('modls = "vpt"\n', "unknown key 'modls'; valid keys: out, seeds"),
    ("n_heldout = 0\n", "--n-heldout must be >= 1; got 0"),
    ("n_steps = \n", "malformed TOML"),
    (None, "no such file"),
])
def test_a_bad_plan_file_is_one_line(text, message, tmp_path):
    plan = tmp_path / "plan.toml"
    if text is not None:
        plan.write_text(text)
    result = CliRunner().invoke(study.main, ["rigid_body_structure", "--out", str(tmp_path / "run"), "--plan",
                                             str(plan)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("Error: "), lines
    if text and "modls" in text:
        assert "did you mean 'models'?" in lines[0] and str(plan) in lines[0]


def test_the_attention_step_is_a_config_too(tmp_path, capsys):
    """The studies' attention step (``python -m vpintegrator.studies.attention``): its keys documented once,
    the same one-line errors."""
    from vpintegrator.studies import attention

    cls = attention.AttentionOptions
    assert set(documented(cls)) == set(declared(cls))
    base = ["--model", "m", "--data", str(tmp_path / "d.h5"), "--out", str(tmp_path / "o.json")]
    for args, message in ((["--n-traj", "0"], "--n-traj must be >= 1; got 0"),
                          (["--set", "t_end=-1"], "--t-end must be a positive number; got -1"),
                          (["--set", "ntraj=3"], "did you mean 'n_traj'?")):
        assert run_study(attention.STUDY, [*base, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert run_study(attention.STUDY, base[2:]) == 2
    assert "--model is required" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()
