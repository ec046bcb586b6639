"""One convention for vp-gen, vp-train, vp-rollout and vp-plot (and ``python -m vpintegrator``): the same
flag for the same thing, defaults and choices in ``--help``, ``--version``, ``--json`` (only JSON on
stdout), ``--print-config`` (runs nothing), and a flag given twice (its own flag and ``--set``) refused
with the same one-line error by every command."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from vpintegrator import __version__
from vpintegrator._toml import tomllib
from vpintegrator.cli import gen, plot, rollout, train

COMMANDS = {"vp-gen": gen.main, "vp-train": train.main, "vp-rollout": rollout.main, "vp-plot": plot.main}

pytestmark = pytest.mark.usefixtures("one_thread")


def _invoke(command, *args):
    return CliRunner().invoke(command, [str(a) for a in args])


def _options(command) -> dict[str, click.Option]:
    params = command.get_params(click.Context(command))  # with --help
    return {opt: p for p in params if isinstance(p, click.Option) for opt in p.opts}


# ---------------------------------------------------------------------------------------------------
# the same flags everywhere


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_version(name):
    result = _invoke(COMMANDS[name], "--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{name} (vpintegrator) {__version__}"


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("flag", ["--version", "--help", "--quiet", "--list", "--json", "--print-config", "--set"])
def test_every_command_spells_the_common_flags_the_same(name, flag):
    options = _options(COMMANDS[name])
    assert flag in options
    visible = _invoke(COMMANDS[name], "--help").output
    assert re.search(rf"(^|\s|, ){re.escape(flag)}\b", visible), f"{name} --help does not show {flag}"


@pytest.mark.parametrize("name", COMMANDS)
def test_no_hidden_flags(name):
    """No command keeps a hidden (deprecated) spelling: an old flag is an error, not a doorway."""
    hidden = [p.opts for p in COMMANDS[name].params if getattr(p, "hidden", False)]
    assert not hidden, f"{name}: hidden options {hidden}"


@pytest.mark.parametrize("name, old", [("vp-gen", "--no-progress"), ("vp-train", "--no-progress"),
                                       ("vp-rollout", "--config"), ("vp-rollout", "--no-jit")])
def test_old_spellings_are_refused(name, old):
    result = _invoke(COMMANDS[name], old)
    assert result.exit_code == 2 and re.search(rf"No such option:? '?{re.escape(old)}\b", result.output)


def test_fast_step_is_one_name_for_the_same_thing():
    assert "--fast-step" in _options(train.main) and "--fast-step" in _options(rollout.main)
    assert "--jit" not in _options(rollout.main)


# ---------------------------------------------------------------------------------------------------
# defaults and choices in --help


def test_train_help_defaults_are_the_config_defaults():
    from vpintegrator.training import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    shown = [p for p in train.main.params if isinstance(p, click.Option) and p.show_default is True]
    assert len(shown) >= 18
    for param in shown:
        assert param.default == defaults[param.name], param.name
    text = _invoke(train.main, "--help").output
    for fragment in ("[default: 100]", "[default: 16384]", "[default: adam]", "[default: float32]",
                     "[default: auto]", "[default: 1234]", "[default: exponential]"):
        assert fragment in " ".join(text.split()), fragment


def test_rollout_help_defaults_are_the_config_defaults():
    from vpintegrator.rollout import RolloutConfig

    defaults = {f.name: f.default for f in dataclasses.fields(RolloutConfig)}
    shown = [p for p in rollout.main.params if isinstance(p, click.Option) and p.show_default is True]
    assert {p.name for p in shown} >= {"init", "overlap", "device", "engine", "out", "chunk_steps", "blowup"}
    for param in shown:
        assert param.default == defaults[param.name], param.name
    # unset, the volume metric depends on the dimension (rollout.plan.VOLUME_MAX_DIM): --help says so
    volume = next(p for p in rollout.main.params if p.name == "volume")
    assert defaults["volume"] is None and volume.show_default == "on up to dim 64"


def test_choice_lists_are_the_registries():
    from vpintegrator.integrators import list_integrators
    from vpintegrator.models import list_models
    from vpintegrator.rollout.config import ENGINES
    from vpintegrator.training import list_optimizers, list_schedulers
    from vpintegrator.training.fast_step import FAST_STEPS

    assert _options(train.main)["--model"].type.names() == list_models()
    assert _options(train.main)["--optimizer"].type.names() == list_optimizers()
    assert _options(train.main)["--scheduler"].type.names() == list_schedulers()
    assert _options(train.main)["--fast-step"].type.names() == list(FAST_STEPS)
    assert _options(rollout.main)["--engine"].type.names() == list(ENGINES)
    assert _options(gen.main)["--method"].type.names() == ["dop853", *list_integrators()]
    text = " ".join(_invoke(rollout.main, "--help").output.split())
    assert "[choices: reference, euler, rk4," in text


def test_choices_complete_in_the_shell():
    ctx = click.Context(train.main)
    names = [c.value for c in _options(train.main)["--optimizer"].type.shell_complete(ctx, None, "ad")]
    assert names == ["adam", "adamw"]


def test_a_bad_name_is_the_library_one_line_error():
    result = _invoke(train.main, "--data", "x.h5", "--model", "mamba", "--print-config")
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "unknown model 'mamba'" in result.output


# ---------------------------------------------------------------------------------------------------
# a key given twice: the same refusal everywhere

_CONFLICT = re.compile(r"^Error: --set (\S+)=\.\.\.: \1 is also given by its own flag --[\w-]+; give it once\n$")


@pytest.mark.parametrize("name, args", [
    ("vp-gen", ["rigid_body", "--dt", "0.1", "--set", "dt=0.2"]),
    ("vp-gen", ["rigid_body", "--method", "rk4", "--set", "integration.method=euler"]),
    ("vp-train", ["--data", "DATA", "--model", "vpt", "--lr", "0.1", "--set", "lr=0.2"]),
    ("vp-train", ["--data", "DATA", "--model", "vpt", "--seq-len", "2", "--set", "model.seq_len=3"]),
    ("vp-rollout", ["--data", "DATA", "--integrators", "rk4", "--t-end", "3", "--set", "t_end=2"]),
    ("vp-rollout", ["--data", "DATA", "--integrators", "rk4", "--fast-step", "off", "--set", "jit=true"]),
    ("vp-plot", ["ROLLOUT", "--dpi", "100", "--set", "dpi=300"]),
])
def test_flag_and_set_for_one_key_are_refused_alike(name, args, tiny_data, tmp_path):
    args = [tiny_data if a == "DATA" else tmp_path / "r.h5" if a == "ROLLOUT" else a for a in args]
    result = _invoke(COMMANDS[name], *args, "--out", tmp_path / "out")
    assert result.exit_code == 1
    assert _CONFLICT.match(result.output), result.output
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------
# --print-config shows the resolved configuration and runs nothing


def test_gen_print_config(tmp_path):
    from vpintegrator.data import load_spec

    out = tmp_path / "d.h5"
    result = _invoke(gen.main, "rigid_body", "--n-traj", 3, "--method", "rk4", "--set", "t_end=0.4", "--out", out,
                     "--print-config")
    assert result.exit_code == 0, result.output
    assert not out.exists()
    spec = tmp_path / "rigid_body.toml"
    spec.write_text(result.output)
    assert load_spec(spec) == dataclasses.replace(load_spec("rigid_body", n_traj=3, method="rk4", t_end=0.4, out=str(out)),
                                                  source=str(spec))


def test_train_print_config_fills_the_paper_model(tiny_data, tmp_path):
    out = tmp_path / "run"
    result = _invoke(train.main, "--data", tiny_data, "--model", "vpt", "--epochs", 2, "--set", "lm_windows=64",
                     "--out", out, "--print-config")
    assert result.exit_code == 0, result.output
    assert not out.exists()
    config = tomllib.loads(result.output)
    assert config["epochs"] == 2 and config["lm_windows"] == 64 and config["data"] == [tiny_data]
    assert config["model"]["name"] == "vpt" and config["model"]["seq_len"] == 3 and config["model"]["L"] == 3


def test_train_finds_a_shipped_config_by_name(tmp_path):
    from vpintegrator.training import list_configs

    listed = _invoke(train.main, "--list")
    assert listed.exit_code == 0
    assert {"tiny", "rigid_body_vpt_lm", "study/rigid_body_vpt"} <= set(list_configs())
    configs, _, pretrained = listed.output.partition("\n\n")  # the configs, then the pretrained models
    assert {line.split()[0] for line in configs.splitlines()} == set(list_configs())
    assert "pretrained_info" in pretrained and "rigid_body_vpt" in pretrained and "dt = 0.2" in pretrained
    result = _invoke(train.main, "rigid_body_vpt_lm", "--data", "x.h5", "--print-config")
    assert result.exit_code == 0, result.output
    config = tomllib.loads(result.output)
    assert config["optimizer"] == "lm" and config["data"] == ["x.h5"]


@pytest.mark.parametrize("given, message", [
    ("nope", "unknown config 'nope'; shipped configs: "),
    ("elsewhere/configs/tiny.toml", "not found; it ships with the package: give the name 'tiny'"),
])
def test_train_unknown_config_names_the_shipped_ones(given, message):
    result = _invoke(train.main, given)
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert message in result.output and "rigid_body_vpt_lm" in result.output


def test_rollout_print_config_round_trips(tiny_data, tmp_path):
    from vpintegrator.rollout import load_rollout_config

    out = tmp_path / "r.h5"
    result = _invoke(rollout.main, "--data", tiny_data, "--integrators", "rk4,implicit_midpoint", "--n-traj", 2,
                     "--fast-step", "off", "--set", "blowup=1e6", "--out", out, "--print-config")
    assert result.exit_code == 0, result.output
    assert not out.exists()
    printed = tmp_path / "rollout.toml"
    printed.write_text(result.output)
    cfg = load_rollout_config(printed)
    assert (cfg.integrators, cfg.n_traj, cfg.fast_step, cfg.blowup, cfg.out) == (
        ["rk4", "implicit_midpoint"], 2, "off", 1e6, str(out))
    # CONFIG is positional
    again = _invoke(rollout.main, printed, "--print-config")
    assert again.exit_code == 0 and again.output == result.output


# ---------------------------------------------------------------------------------------------------
# --json: one JSON object on stdout, nothing else there


def test_json_summaries_of_the_pipeline(tiny_data, tmp_path):
    def run(command, *args):
        result = _invoke(command, *args, "--json")
        assert result.exit_code == 0, result.output
        assert len(result.stdout.strip().splitlines()) == 1, result.stdout
        return json.loads(result.stdout)

    data = tmp_path / "d.h5"
    g = run(gen.main, "rigid_body", "--n-traj", 3, "--t-end", 1.0, "--dt", 0.1, "--method", "rk4", "--out", data)
    assert g["out"] == str(data) and g["n_traj"] == 3 and g["n_states"] == 11 and g["method"] == "rk4"
    assert set(g["max_rel_drift"]) >= {"energy"}

    t = run(train.main, "--data", tiny_data, "--model", "vpt", "--epochs", 1, "--batch-size", 64, "--device", "cpu",
            "--out", tmp_path / "run")
    assert t["kind"] == "run" and t["epochs"] == 1 and t["run_dir"] == str(tmp_path / "run")
    assert t["train_loss"] > 0 and t["dtype"] == "float32"

    r = run(rollout.main, "--data", tiny_data, "--integrators", "rk4", "--n-traj", 2, "--out", tmp_path / "r.h5")
    assert r["out"] == str(tmp_path / "r.h5") and r["failures"] == {}
    assert [row["method"] for row in r["rows"]] == ["rk4"]

    p = run(plot.main, tmp_path / "r.h5", "--kind", "error", "--set", 'formats=["png"]', "--out", tmp_path / "f")
    assert p["figures"] == [str(tmp_path / "f" / "error.png")] and p["skipped"] == []


# ---------------------------------------------------------------------------------------------------
# python -m vpintegrator


def test_python_m_vpintegrator_lists_and_dispatches():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "vpintegrator", *args], capture_output=True, text=True,
                              timeout=300)

    listed = run()
    assert listed.returncode == 0
    assert all(name in listed.stdout for name in ("gen", "train", "rollout", "plot"))
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"vpintegrator {__version__}"
    specs = run("gen", "--list")
    assert specs.returncode == 0 and "rigid_body_paper" in specs.stdout
    bad = run("generate")
    assert bad.returncode == 2 and "No such command 'generate'" in bad.stderr
