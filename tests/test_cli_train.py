"""vp-train through click's CliRunner: config + flags, resume, shards, interrupts, one-line errors."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.cli.train import main
from vpintegrator.data import windows
from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.data import integrate
from vpintegrator.models import load_model
from vpintegrator.systems import get_system
from vpintegrator._toml import tomllib


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """Two shards of 6 rigid-body trajectories of 16 states each."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(1)
    paths = []
    for k in range(2):
        y0 = rng.normal(size=(6, 3))
        y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
        traj = integrate(get_system("rigid_body"), y0, 0.2, 15, method="rk4")
        paths.append(str(write_trajectories(folder / f"shard{k}.h5", traj)))
    return paths


@pytest.fixture
def config_file(shards, tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(
        f'data = ["{shards[0]}"]\nepochs = 5\nbatch_size = 16\ndtype = "float64"\n\n'
        '[model]\nname = "vpt"\nseq_len = 2\nL = 1\n'
    )
    return path


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_help():
    result = _invoke("--help")
    assert result.exit_code == 0
    for flag in ("--data", "--model", "--epochs", "--batch-size", "--lr", "--device", "--dtype", "--seed",
                 "--out", "--resume", "--time-limit"):
        assert flag in result.output


def test_config_and_flags(config_file, tmp_path):
    run = tmp_path / "run"
    result = _invoke(config_file, "--epochs", 2, "--lr", 0.003, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert f"Run written to {run}" in result.output
    resolved = tomllib.loads((run / "config.toml").read_text())
    assert resolved["epochs"] == 2 and resolved["lr"] == 0.003 and resolved["batch_size"] == 16
    assert resolved["model"]["seq_len"] == 2
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2
    assert load_model(run).seq_len == 2


def test_flags_only_with_two_shards_and_progress(shards, tmp_path):
    run = tmp_path / "run"
    result = _invoke("--data", ",".join(shards), "--model", "vpff", "--epochs", 2, "--batch-size", 64,
                     "--out", run)
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["data"]["n_traj"] == 12 and [str((run / p).resolve()) for p in summary["data"]["sources"]] == shards
    assert summary["model"] == "vpff"
    repeated = _invoke("--data", shards[0], "--data", shards[1], "--model", "vpff", "--epochs", 1,
                       "--out", tmp_path / "run2", "--quiet")
    assert repeated.exit_code == 0
    assert json.loads((tmp_path / "run2" / "summary.json").read_text())["data"]["n_traj"] == 12


def test_model_flag_replaces_the_architecture(config_file, tmp_path):
    result = _invoke(config_file, "--model", "st", "--seq-len", 2, "--epochs", 1, "--out", tmp_path / "r", "--quiet")
    assert result.exit_code == 0, result.output
    assert tomllib.loads((tmp_path / "r" / "config.toml").read_text())["model"]["name"] == "st"


def test_resume_continues_to_the_total(config_file, tmp_path):
    straight = tmp_path / "straight"
    assert _invoke(config_file, "--out", straight, "--quiet").exit_code == 0
    split = tmp_path / "split"
    # same schedule as the 5-epoch run: the decay horizon is part of the run's config
    config_file.write_text(config_file.read_text().replace("epochs = 5", "epochs = 2\ndecay_epochs = 5"))
    assert _invoke(config_file, "--out", split, "--quiet").exit_code == 0
    shown = _invoke("--resume", split, "--epochs", 5, "--print-config")  # the config the resume would run
    assert shown.exit_code == 0, shown.output
    assert tomllib.loads(shown.output)["epochs"] == 5 and tomllib.loads(shown.output)["decay_epochs"] == 5
    result = _invoke("--resume", split, "--epochs", 5, "--quiet")
    assert result.exit_code == 0, result.output
    assert "Trained 5 epochs" in result.output
    a = torch.load(straight / "last.pt", weights_only=True)["state_dict"]
    b = torch.load(split / "last.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_interrupt_saves_last_and_exits_130(config_file, tmp_path, monkeypatch):
    calls = {"n": 0}
    original = windows.WindowDataset.batch

    def batch_then_signal(self, index):
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGTERM)
        return original(self, index)

    monkeypatch.setattr(windows.WindowDataset, "batch", batch_then_signal)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, [str(config_file), "--out", str(run), "--quiet"])
    assert result.exit_code == 130
    assert f"continue with: vp-train --resume {run}" in result.output
    assert torch.load(run / "last.pt", weights_only=True)["batch_in_epoch"] == 3
    monkeypatch.setattr(windows.WindowDataset, "batch", original)
    assert _invoke("--resume", run, "--quiet").exit_code == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--optimizer", "adamm"], "unknown optimizer 'adamm' (did you mean 'adam'?); valid: adam, adamw, lbfgs, lm, rmsprop, sgd"),
        (["--scheduler", "step"], "unknown scheduler 'step'; valid: constant, cosine, exponential"),
        (["--model", "mamba"], "unknown model 'mamba'; valid: delay_mlp, delay_vpff, divfree, g_sympnet, g_sympnet_ctx, gru, hnn, la_sympnet, lp_transformer, lphnn, "
                                  "lpnet, lpnet_ctx, lru, node, st, symplectic_transformer, vpff, vpff_ctx, vpt"),
        (["--seq-len", 9], "seq_len + pred_window = 9 + 9 = 18 exceeds the n_states = 16"),
        (["--device", "tpu"], "unknown device 'tpu'; valid: auto, cpu, cuda, cuda:N"),
        (["--data", "nope.h5"], "nope.h5"),
        (["--epochs", 0], "--epochs must be a positive integer"),
    ],
)
def test_bad_configs_are_one_line_errors(config_file, tmp_path, args, message):
    result = CliRunner().invoke(main, [str(config_file), "--out", str(tmp_path / "r"), *map(str, args)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and message in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_dim_mismatch(config_file, tmp_path):
    config_file.write_text(config_file.read_text() + "dim = 4\n")
    result = CliRunner().invoke(main, [str(config_file), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "dim = 4 but the data" in result.output


def test_wrong_schema_file(config_file, tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n")
    result = CliRunner().invoke(main, [str(config_file), "--data", str(bad), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "bad.h5" in result.output and result.output.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_cuda(config_file, tmp_path):
    result = CliRunner().invoke(main, [str(config_file), "--device", "cuda", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "CUDA is not available" in result.output


def test_malformed_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("epochs = \n")
    result = CliRunner().invoke(main, [str(path)])
    assert result.exit_code == 1 and result.output.startswith("Error: ") and "malformed TOML" in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--epochs", 1], "without CONFIG.toml give at least --data PATH and --model NAME"),
        (["CFG", "--resume", "RUN"], "give either CONFIG"),
    ],
)
def test_usage_errors(config_file, tmp_path, args, message):
    args = [str(config_file) if a == "CFG" else str(tmp_path) if a == "RUN" else str(a) for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and message in result.output


def test_optimizer_lm(config_file, tmp_path):
    run = tmp_path / "lm"
    result = _invoke(config_file, "--optimizer", "lm", "--lm-windows", 32, "--lm-iters-per-epoch", 2,
                     "--lm-resample-every", 1, "--lm-lambda", 0.01, "--epochs", 2, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert "Trained 2 epochs (4 steps" in result.output
    saved = tomllib.loads((run / "config.toml").read_text())
    assert saved["optimizer"] == "lm" and saved["lm_windows"] == 32 and saved["lm_lambda"] == 0.01
    assert torch.load(run / "last.pt", weights_only=True)["optimizer"]["iteration"] == 4
    again = _invoke("--resume", run, "--epochs", 3, "--quiet")
    assert again.exit_code == 0, again.output
    assert "Trained 3 epochs (6 steps" in again.output
    assert "--lm-windows" in _invoke("--help").output


def test_bad_lm_option(config_file, tmp_path):
    result = CliRunner().invoke(main, [str(config_file), "--optimizer", "lm", "--lm-windows", "0", "--out",
                                       str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "--lm-windows must be a positive integer; got 0" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_flags_only_trains_the_paper_model(shards, tmp_path):
    """No CONFIG.toml: --data and --model suffice; the model is the paper's, dim from the data."""
    from vpintegrator.models import default_model_config

    run = tmp_path / "run"
    result = _invoke("--data", shards[0], "--model", "vpt", "--epochs", 4, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    assert "Trained 4 epochs" in result.output
    model = tomllib.loads((run / "config.toml").read_text())["model"]
    assert model["dim"] == 3 and all(model[k] == v for k, v in default_model_config("vpt").items())
    assert json.loads((run / "summary.json").read_text())["n_params"] == 162


def test_set_entries(config_file, tmp_path):
    run = tmp_path / "run"
    result = _invoke(config_file, "--set", "lm_check_windows=8", "--set", "model.L=2", "--set", "lr=0.002",
                     "--epochs", 1, "--out", run, "--quiet")
    assert result.exit_code == 0, result.output
    resolved = tomllib.loads((run / "config.toml").read_text())
    assert resolved["lm_check_windows"] == 8 and resolved["lr"] == 0.002
    assert resolved["model"]["L"] == 2 and resolved["model"]["seq_len"] == 2
    bad = CliRunner().invoke(main, [str(config_file), "--set", "epoch=3", "--out", str(tmp_path / "r")])
    assert bad.exit_code == 1 and bad.output.startswith("Error: --set: unknown key 'epoch'; valid keys: data, model")
    assert "did you mean 'epochs'?" in bad.output
    twice = CliRunner().invoke(main, [str(config_file), "--lr", "0.1", "--set", "lr=0.2", "--out", str(tmp_path / "r")])
    assert twice.exit_code == 1 and "also given by its own flag" in twice.output


def test_progress_honours_the_time_limit():
    """The bar follows whichever of epochs and time limit ends the run first (its ETA never exceeds
    the limit): 1 of 2000 epochs after 2 s of a 90-s budget is 2/90 done, not 1/2000."""
    from vpintegrator.training.loop import progress_fraction

    assert progress_fraction(1, 2000, 2.0, 90.0) == pytest.approx(2 / 90)
    assert progress_fraction(3, 4, 2.0, 90.0) == pytest.approx(3 / 4)
    assert progress_fraction(1, None, 45.0, 90.0) == pytest.approx(0.5)
    assert progress_fraction(5, 10, 0.0, None) == 0.5 and progress_fraction(1, 2, 500.0, 90.0) == 1.0


def test_resume_from_another_working_directory_with_relative_data(shards, tmp_path, monkeypatch):
    """The run records its data relative to the run directory: `--resume` finds it from any directory."""
    import shutil

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(shards[0], work / "d.h5")
    monkeypatch.chdir(work)
    res = _invoke("--data", "d.h5", "--model", "vpt", "--seq-len", 2, "--set", "model.L=1", "--epochs", 2,
                  "--batch-size", 16, "--dtype", "float64", "--out", "runs/r", "--quiet")
    assert res.exit_code == 0, res.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    res = _invoke("--resume", work / "runs" / "r", "--epochs", 3, "--quiet")
    assert res.exit_code == 0, res.output
    assert json.loads((work / "runs" / "r" / "summary.json").read_text())["epochs"] == 3
