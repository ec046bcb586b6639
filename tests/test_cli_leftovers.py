"""CLI leftovers of issue 33 (item 7): one meaning per flag (--dask-scheduler), fast_step everywhere, an
ETA that honours the time limit, labelled losses, -v showing the library's messages through logging,
vp-rollout --list naming the pretrained models, shell completion of names, runnable study modules."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest
from click.testing import CliRunner

from vpintegrator._progress import ProgressLines
from vpintegrator.cli import gen, rollout, train


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _invoke(command, *args, env=None):
    return CliRunner().invoke(command.main, [str(a) for a in args], env=env, catch_exceptions=False)


def test_dask_scheduler_flag_and_no_hidden_alias():
    for command in (gen, rollout):
        options = {o: p for p in command.main.params for o in getattr(p, "opts", [])}
        assert not options["--dask-scheduler"].hidden and "--scheduler" not in options
        help_text = _invoke(command, "--help").output
        assert "--dask-scheduler" in help_text and "--scheduler " not in help_text
    # vp-train's --scheduler stays the learning-rate schedule
    assert "--scheduler" in _invoke(train, "--help").output


def test_the_flag_reaches_the_scheduler_and_the_old_name_is_refused(tiny_data, tmp_path):
    result = _invoke(rollout, "--data", tiny_data, "--integrators", "rk4", "--out", tmp_path / "r.h5",
                     "--dask-scheduler", "tcp://x:1", "--shard", "1/2")
    assert result.exit_code == 2 and "--shard and --dask-scheduler exclude each other" in result.output
    old = _invoke(gen, "rigid_body", "--scheduler", "tcp://y:1")
    assert old.exit_code == 2 and "No such option" in old.output and "--scheduler" in old.output


def test_rollout_key_fast_step_with_jit_accepted(tmp_path, tiny_data):
    from vpintegrator.rollout import RolloutConfig, load_rollout_config

    assert "fast_step" in RolloutConfig.keys() and "jit" not in RolloutConfig.keys()
    assert RolloutConfig(data=tiny_data, jit=False).fast_step == "off"
    old = tmp_path / "old.toml"
    old.write_text(f'data = "{tiny_data}"\njit = false\n')
    assert load_rollout_config(old).fast_step == "off"
    new = tmp_path / "new.toml"
    new.write_text(f'data = "{tiny_data}"\nfast_step = false\njit = true\n')
    with pytest.raises(Exception, match="jit is the old name of fast_step"):
        load_rollout_config(new)
    printed = _invoke(rollout, "--data", tiny_data, "--set", "jit=false", "--print-config").output
    assert 'fast_step = "off"' in printed and "jit" not in printed


def test_fast_step_is_one_type_in_vp_train_and_vp_rollout(tmp_path, tiny_data):
    """fast_step is a name in both commands: a TOML that one command's --print-config wrote loads in the
    other with the same value; true/false (older rollout configs) are auto/off."""
    from vpintegrator.cli import train
    from vpintegrator.fastpath import FAST_STEPS
    from vpintegrator.rollout import RolloutConfig, load_rollout_config
    from vpintegrator.training import TrainConfig

    assert declared_choices(RolloutConfig) == declared_choices(TrainConfig) == list(FAST_STEPS)
    printed = _invoke(rollout, "--data", tiny_data, "--fast-step", "off", "--print-config").output
    line = next(x for x in printed.splitlines() if x.startswith("fast_step"))
    assert line == 'fast_step = "off"'
    assert TrainConfig.from_dict({"data": tiny_data, "model": "vpt", "fast_step": "off"}).fast_step == "off"
    trained = _invoke(train, "--data", tiny_data, "--set", "model=vpt", "--fast-step", "off", "--print-config")
    assert trained.exit_code == 0, trained.output
    train_line = next(x for x in trained.output.splitlines() if x.startswith("fast_step"))
    assert train_line == line
    toml = tmp_path / "r.toml"
    toml.write_text(f'data = "{tiny_data}"\n{train_line}\n')
    assert load_rollout_config(toml).fast_step == "off"
    assert RolloutConfig(data=tiny_data, fast_step=True).fast_step == "auto"
    assert TrainConfig.from_dict({"data": tiny_data, "model": "vpt", "fast_step": False}).fast_step == "off"
    with pytest.raises(Exception, match="fast_step must be auto, off, graph, compile"):
        RolloutConfig(data=tiny_data, fast_step="fast")


def declared_choices(cls):
    from vpintegrator.config import declared

    return declared(cls)["fast_step"].choice_list()


def test_eta_honours_the_time_limit():
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("training", 200, unit="epochs", interval=0, stream=out, clock=clock, time_limit=20.0)
    clock.now = 1.0
    lines.update(1)  # 199 epochs at 1 epoch/s would take 3 min 19 s; the limit leaves 19 s
    assert "19 s left" in out.getvalue() and "min" not in out.getvalue()
    clock.now = 25.0
    lines.update(2)
    assert out.getvalue().splitlines()[-1].count("0 s left") == 1
    no_total = ProgressLines("training", None, unit="epochs", interval=0, stream=io.StringIO(), clock=clock,
                             time_limit=60.0)
    clock.now = 30.0
    no_total.update(3)
    assert "55 s left" in no_total.stream.getvalue()  # 5 s of its 60 s gone, nothing else known


def test_training_report_names_its_metrics(tiny_data, tmp_path):
    result = _invoke(train, "--data", tiny_data, "--model", "vpt", "--seq-len", 2, "--epochs", 2, "--out",
                     tmp_path / "run", "--set", "model.n_blocks=1", "-q")
    assert result.exit_code == 0, result.output
    assert "train_loss " in result.output and "best val_loss " in result.output, result.output


def test_verbose_shows_the_library_messages_through_logging(tiny_data, tmp_path, caplog):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    with caplog.at_level(logging.INFO, logger="vpintegrator"):
        run_rollouts(RolloutConfig(data=tiny_data, integrators=["rk4"], out=str(tmp_path / "a.h5"), n_traj=2))
    assert any(r.name.startswith("vpintegrator.rollout") and "rk4" in r.getMessage() for r in caplog.records)
    quiet = _invoke(rollout, "--data", tiny_data, "--integrators", "rk4", "--out", tmp_path / "b.h5", "--n-traj", 2,
                    "-q")
    loud = _invoke(rollout, "--data", tiny_data, "--integrators", "rk4", "--out", tmp_path / "c.h5", "--n-traj", 2,
                   "-v")
    assert quiet.exit_code == loud.exit_code == 0
    assert "rk4: rolling out" not in quiet.output and "rk4: rolling out" in loud.output
    # -v adds detail, through logging (debug records of the rollout modules); without it there is none
    assert "debug: vpintegrator.rollout.engine: host engine: " in loud.output
    assert "debug:" not in quiet.output
    plain = _invoke(rollout, "--data", tiny_data, "--integrators", "rk4", "--out", tmp_path / "d.h5", "--n-traj", 2)
    assert plain.exit_code == 0 and "rk4: rolling out" in plain.output and "debug:" not in plain.output


def test_rollout_list_shows_the_pretrained_models():
    import vpintegrator as vp

    out = _invoke(rollout, "--list").output
    assert "Pretrained models" in out
    assert all(name in out for name in vp.list_pretrained())


def _complete(command, prog, words):
    from click.shell_completion import ShellComplete

    comp = ShellComplete(command.main, {}, prog, "_X_COMPLETE")
    return [item.value for item in comp.get_completions(words[:-1], words[-1])]


def test_shell_completion_of_spec_config_and_pretrained_names():
    assert "rigid_body_paper" in _complete(gen, "vp-gen", ["rigid_body_p"])
    assert "tiny" in _complete(train, "vp-train", ["ti"])
    assert "pretrained:rigid_body_vpt" in _complete(rollout, "vp-rollout", ["--model", "pretrained:rigid"])
    assert "pretrained:rigid_body_lpnet" in _complete(train, "vp-train", ["--init-from", "pretrained:rigid_body_l"])


def test_python_m_study_module_runs_its_main():
    result = subprocess.run([sys.executable, "-m", "vpintegrator.studies.rigid_body", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "usage" in result.stdout.lower(), result.stderr


def test_verbose_shows_debug_messages_of_generate_and_fit(tiny_data, tmp_path):
    loud = _invoke(gen, "rigid_body_paper", "--n-traj", 3, "--t-end", 0.4, "--out", tmp_path / "d.h5", "-v")
    assert loud.exit_code == 0 and "debug: vpintegrator.data.generation: generate rigid_body_paper" in loud.output
    plain = _invoke(gen, "rigid_body_paper", "--n-traj", 3, "--t-end", 0.4, "--out", tmp_path / "e.h5")
    assert plain.exit_code == 0 and "debug:" not in plain.output
    fit = _invoke(train, "--data", tiny_data, "--model", "vpt", "--seq-len", 2, "--epochs", 1, "--out",
                  tmp_path / "run", "--set", "model.n_blocks=1", "-v")
    assert fit.exit_code == 0 and "debug: vpintegrator.training.run: fit: model vpt" in fit.output


def test_vp_train_prints_paths_relative_to_the_working_directory(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.cli._common import shown_path

    monkeypatch.chdir(tmp_path)
    result = _invoke(train, "--data", tiny_data, "--model", "vpt", "--seq-len", 2, "--epochs", 1, "--out",
                     tmp_path / "runs" / "a", "--set", "model.n_blocks=1", "-q")
    assert result.exit_code == 0, result.output
    assert "Run written to runs/a\n" in result.output and str(tmp_path) not in result.output
    assert shown_path(tmp_path) == "." and shown_path("/") == "/"  # outside the working directory: as given


def test_vp_train_list_descriptions_are_whole_sentences():
    """Each shipped config's description is the first sentence of its leading comment, whole (it may span
    comment lines), never a line cut mid-sentence."""
    from vpintegrator._shipped import config_description, config_files

    out = _invoke(train, "--list").output
    for name, path in config_files().items():
        text = config_description(path)
        assert text.endswith(".") and "  " not in text, (name, text)
        assert text in out
