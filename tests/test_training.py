"""fit(): loss goes down, exact resume (epoch boundary and mid-epoch), determinism, run directory,
optimisers and schedulers, early stopping, time limit, and one-line errors for bad configs."""

from __future__ import annotations

import csv
import json
import math
import os
import signal

import numpy as np
import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data import windows
from vpintegrator.data import integrate
from vpintegrator.models import load_model
from vpintegrator.systems import get_system
from vpintegrator.training import (
    LevenbergMarquardt,
    TrainConfig,
    TrainingInterrupted,
    fit,
    list_optimizers,
    list_schedulers,
    make_optimizer,
    make_scheduler,
    relative_loss,
)
from vpintegrator.device import resolve_device
from vpintegrator._toml import tomllib


pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3, batch_size=32,
        dtype="float64", out=str(tmp_path / name),
    )
    return base | kw


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("model", [{"name": "vpff", "n_blocks": 2}, {"name": "vpt", "seq_len": 2, "n_blocks": 1, "L": 1}, {"name": "st", "seq_len": 2}])
def test_short_run_lowers_the_loss(tiny_data, tmp_path, model):
    result = fit(_config(tiny_data, tmp_path, model=model, epochs=8, scheduler="constant", dtype="float32"))
    losses = [row["train_loss"] for row in result.history]
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0]
    assert result.val_loss < result.history[0]["val_loss"]


def test_relative_loss_is_the_reference_formula():
    pred, target = torch.randn(5, 3, 2, dtype=torch.float64), torch.randn(5, 3, 2, dtype=torch.float64)
    expected = np.linalg.norm((pred - target).numpy()) / np.linalg.norm(target.numpy())
    assert relative_loss(pred, target).item() == pytest.approx(expected, rel=1e-14)


def test_resume_equals_uninterrupted(tiny_data, tmp_path):
    """4 epochs in one go == 2 epochs, then resume to a total of 4: bitwise in float64."""
    straight = fit(_config(tiny_data, tmp_path, "straight", epochs=4, decay_epochs=4))
    first = fit(_config(tiny_data, tmp_path, "split", epochs=2, decay_epochs=4))
    assert first.epochs == 2
    resumed = fit(resume=tmp_path / "split", epochs=4)
    assert resumed.epochs == 4 and resumed.steps == straight.steps
    assert _same_weights(straight.model, resumed.model)
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "split" / "last.pt", weights_only=True)
    assert torch.equal(a["rng"]["data_epoch_start"], b["rng"]["data_epoch_start"])
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    with open(tmp_path / "split" / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4]
    assert [float(r["val_loss"]) for r in rows] == [h["val_loss"] for h in straight.history]


def test_interrupt_mid_epoch_saves_and_resumes_exactly(tiny_data, tmp_path, monkeypatch):
    """SIGINT during a step: the step finishes, last.pt is saved mid-epoch, resuming is exact."""
    straight = fit(_config(tiny_data, tmp_path, "straight", epochs=3))
    calls = {"n": 0}
    original = windows.WindowDataset.batch

    def batch_then_signal(self, index):
        calls["n"] += 1
        if calls["n"] == 8:  # epoch 1: 5 steps + 1 validation batch; then epoch 2, second step
            signal.raise_signal(signal.SIGINT)
        return original(self, index)

    monkeypatch.setattr(windows.WindowDataset, "batch", batch_then_signal)
    with pytest.raises(TrainingInterrupted) as info:
        fit(_config(tiny_data, tmp_path, "cut", epochs=3))
    monkeypatch.setattr(windows.WindowDataset, "batch", original)
    assert isinstance(info.value, KeyboardInterrupt) and info.value.result.stopped == "interrupted"
    ckpt = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["batch_in_epoch"] == 2
    resumed = fit(resume=tmp_path / "cut")
    assert _same_weights(straight.model, resumed.model)
    assert resumed.history[-1]["val_loss"] == straight.history[-1]["val_loss"]


def test_deterministic_for_a_seed(tiny_data, tmp_path):
    a = fit(_config(tiny_data, tmp_path, "a", epochs=2))
    b = fit(_config(tiny_data, tmp_path, "b", epochs=2))
    c = fit(_config(tiny_data, tmp_path, "c", epochs=2, seed=99))
    assert _same_weights(a.model, b.model)
    assert not _same_weights(a.model, c.model)


def test_run_directory(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=3))
    run = tmp_path / "run"
    assert result.run_dir == run
    assert sorted(p.name for p in run.iterdir()) == ["best.pt", "complete.json", "config.toml", "last.pt", "log.csv",
                                                     "summary.json"]
    with open(run / "log.csv") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["epoch", "train_loss", "val_loss", "lr", "seconds", "cpu_seconds"] and len(rows) == 3
    summary = json.loads((run / "summary.json").read_text())
    for key in ("train_loss", "val_loss", "best_loss", "best_epoch", "epochs", "wall_time", "n_params", "device", "dtype"):
        assert key in summary
    assert summary["epochs"] == 3 and summary["stopped"] == "epochs" and summary["dtype"] == "float64"
    assert summary["n_params"] == sum(p.numel() for p in result.model.parameters())
    # checkpoints: load_model (file or run directory) and plain torch.load(weights_only=True)
    for path in (run, run / "best.pt", run / "last.pt"):
        model = load_model(path)
        assert model.seq_len == 2 and next(model.parameters()).dtype == torch.float64
    last = torch.load(run / "last.pt", weights_only=True)
    for key in ("optimizer", "scheduler", "rng", "epoch", "step", "state_dict", "config"):
        assert key in last
    assert _same_weights(load_model(run / "last.pt"), result.model.cpu())
    best = torch.load(run / "best.pt", weights_only=True)
    assert best["epoch"] == summary["best_epoch"]
    # the resolved config reads back into the same TrainConfig
    config = TrainConfig.from_toml(run / "config.toml")
    assert config.model["name"] == "vpt" and config.model["dim"] == 3 and config.data == [tiny_data]
    assert config.decay_epochs == 3.0 and config.out == str(run)
    # the file stores the paths relative to the run directory (issue 22); read, they resolve against it
    from vpintegrator.rundir import absolute_run_paths

    assert tomllib.loads(config.to_toml()) == absolute_run_paths(tomllib.loads((run / "config.toml").read_text()), run)


def test_best_checkpoint_holds_the_best_weights(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=4, lr=0.5, scheduler="constant"))
    val = [h["val_loss"] for h in result.history]
    assert result.best_epoch == 1 + int(np.argmin(val)) and result.best_loss == min(val)


@pytest.mark.parametrize("name", list_optimizers())
def test_every_optimizer_trains(tiny_data, tmp_path, name):
    result = fit(_config(tiny_data, tmp_path, epochs=2, optimizer=name, lr=1e-3, lr_min=1e-4, lm_iters_per_epoch=5))
    assert math.isfinite(result.train_loss) and result.steps == 10


@pytest.mark.parametrize("name", list_schedulers())
@pytest.mark.parametrize("per", ["step", "epoch"])
def test_schedule_reaches_lr_min(tiny_data, tmp_path, name, per):
    result = fit(_config(tiny_data, tmp_path, epochs=3, scheduler=name, schedule_per=per, lr=1e-2, lr_min=1e-5))
    lrs = [h["lr"] for h in result.history]
    final = 1e-2 if name == "constant" else 1e-5
    assert lrs[-1] == pytest.approx(final, rel=1e-12)
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_gml_decay_horizon(tiny_data, tmp_path):
    """GML: gamma from the epoch count, applied per step -> lr_min after epochs / steps_per_epoch."""
    result = fit(_config(tiny_data, tmp_path, epochs=5, decay_epochs=1, lr=1e-2, lr_min=1e-6))
    assert [h["lr"] for h in result.history] == pytest.approx([1e-6] * 5, rel=1e-12)


def test_exponential_factor_is_geometric():
    opt = make_optimizer("sgd", [torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make_scheduler("exponential", opt, 1e-4, horizon=4)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([1.0, 0.1, 0.01, 1e-3, 1e-4, 1e-4], rel=1e-12)


def test_adam_reference_settings():
    opt = make_optimizer("adam", [torch.nn.Parameter(torch.zeros(1))], lr=1e-2)
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.99) and group["eps"] == 1e-8


def test_early_stopping(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=20, patience=2, min_delta=1e9))
    assert result.stopped == "early_stopping" and result.epochs == 3 and result.best_epoch == 1


def test_time_limit(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=None, time_limit=1e-6, decay_epochs=10))
    assert result.stopped == "time_limit" and result.epochs == 1


def test_cpu_time_limit_counts_the_process_cpu_time_not_the_wall_clock(tiny_data, tmp_path, monkeypatch):
    """A CPU-time budget follows ``time.process_time`` (here a fake clock: 10 CPU s per reading), so a loaded
    machine's lost wall time does not shorten the training; the wall limit stays a ceiling."""
    from vpintegrator.training import loop

    clock = {"t": 0.0}

    def fake_process_time():
        clock["t"] += 10.0
        return clock["t"]

    monkeypatch.setattr(loop.time, "process_time", fake_process_time)
    # 50 epochs take well under a wall second here, but each reading of the fake clock spends 10 CPU s
    result = fit(_config(tiny_data, tmp_path, "cpu", epochs=50, cpu_time_limit=75.0))
    assert result.stopped == "time_limit" and 1 <= result.epochs < 8
    assert tomllib.loads((tmp_path / "cpu" / "config.toml").read_text())["cpu_time_limit"] == 75.0
    assert json.loads((tmp_path / "cpu" / "summary.json").read_text())["cpu_time"] >= 75.0
    monkeypatch.undo()
    # a wall ceiling still stops it first
    result = fit(_config(tiny_data, tmp_path, "both", epochs=None, decay_epochs=10, cpu_time_limit=1e9, time_limit=1e-6))
    assert result.stopped == "time_limit" and result.epochs == 1


def test_callback_can_stop(tiny_data, tmp_path):
    seen = []
    result = fit(_config(tiny_data, tmp_path, epochs=10), callback=lambda info: seen.append(info) or info.epoch == 2)
    assert result.stopped == "callback" and result.epochs == 2 and [i.epoch for i in seen] == [1, 2]


def test_no_validation_set(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, val_fraction=0.0))
    assert math.isnan(result.val_loss) and result.best_loss == min(h["train_loss"] for h in result.history)


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_cuda_is_a_clear_error(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match="CUDA is not available"):
        fit(_config(tiny_data, tmp_path, device="cuda"))


@pytest.mark.gpu
def test_trains_on_cuda(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, device="cuda", epochs=2))
    assert result.device.startswith("cuda") and math.isfinite(result.train_loss)
    assert load_model(tmp_path / "run").state_dict()  # saved tensors load on the CPU


@pytest.mark.gpu
def test_lm_on_cuda_equals_lm_on_the_cpu(tiny_data, tmp_path):
    """Levenberg–Marquardt in float64 on CUDA: the same iterates as on the CPU to rounding (same subsamples:
    the data order's generator lives on the host).

    Tolerances: the Jacobians, normal equations and solves run in float64 on both, CUDA summing in another
    order (cuBLAS/cuSOLVER against LAPACK, ~1e-15 relative an iteration), so the losses agree to 1e-8
    relative. The damping (the logged ``lr``: λ /3 after an accepted step, x2 after a rejected one) is host
    arithmetic on the same floats, so while both runs take the same accept/reject path it agrees to 1e-12.
    A decision compares two float64 losses: rounding can flip one only where a step changes the loss by
    ~1e-15 relative. The paths may then split, and only from iterates that agreed (the epochs before are
    checked); past a split the runs differ legitimately and only finiteness is asserted."""
    cpu = fit(_lm(tiny_data, tmp_path, "cpu", device="cpu", epochs=2))
    cuda = fit(_lm(tiny_data, tmp_path, "cuda", device="cuda", epochs=2))
    assert cuda.device.startswith("cuda") and cuda.steps == cpu.steps
    same_path = True
    for a, b in zip(cuda.history, cpu.history):
        same_path = same_path and a["lr"] == pytest.approx(b["lr"], rel=1e-12)
        if same_path:
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-8)
        else:  # a near-tie decided the other way: from here the runs go on their own
            assert math.isfinite(a["train_loss"]) and math.isfinite(b["train_loss"])


def _hdf5_without_schema(tmp_path) -> str:
    import h5py

    path = tmp_path / "noschema.h5"
    with h5py.File(path, "w") as f:
        f["y"] = np.zeros((2, 10, 3))
    return str(path)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(optimizer="adamm"), r"unknown optimizer 'adamm' \(did you mean 'adam'\?\); valid: adam, adamw, lbfgs, lm, rmsprop, sgd"),
        (dict(scheduler="linear"), r"unknown scheduler 'linear' \(did you mean 'cosine'\?\); valid: constant, cosine, exponential"),
        (dict(model={"name": "mamba"}), r"unknown model 'mamba'; valid: delay_mlp, delay_vpff, divfree, g_sympnet, g_sympnet_ctx, gru, hnn, la_sympnet, lp_transformer, lphnn, lpnet, lpnet_ctx, lru, node, st, symplectic_transformer, vpff, vpff_ctx, vpt"),
        (dict(model={"name": "vpt", "seq_len": 9}), r"seq_len \+ pred_window = 9 \+ 9 = 18 exceeds the n_states = 16"),
        (dict(model={"name": "vpt", "seq_len": 2, "dim": 4}), r"dim = 4 but the data .* has dim = 3"),
        (dict(model={"name": "vpt", "seq_len": 2, "width": 4}), r"unknown key 'width'"),
        (dict(device="tpu"), r"unknown device 'tpu'; valid: auto, cpu, cuda, cuda:N"),
        (dict(dtype="float16"), r"dtype must be float32 or float64"),
        (dict(epochs=None), r"give epochs, time_limit or cpu_time_limit"),
        (dict(epochs=0), r"epochs must be a positive integer"),
        (dict(lr_min=1.0), r"lr_min must be a finite number in \[0, lr=0.01\]"),
        (dict(optimizer_kwargs={"momentun": 0.9}), r"optimizer_kwargs for 'adam'"),
        (dict(batch_size=0), r"batch_size must be a positive integer"),
    ],
)
def test_bad_config_is_a_one_line_error(tiny_data, tmp_path, change, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        fit(_config(tiny_data, tmp_path, **change))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run" / "last.pt").exists()


def test_unknown_config_key_lists_the_valid_ones(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('data = ["x.h5"]\nepoch = 3\n[model]\nname = "vpt"\n')
    with pytest.raises(VPIntegratorError, match=r"unknown key 'epoch'; valid keys: data, model, out, epochs"):
        TrainConfig.from_toml(path)


def test_missing_data_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.h5"):
        fit(dict(data=[str(tmp_path / "nope.h5")], model={"name": "vpff"}, epochs=1, out=str(tmp_path / "r")))


def test_wrong_schema_data_file(tmp_path):
    with pytest.raises(VPIntegratorError, match="noschema.h5.*schema_version"):
        fit(dict(data=[_hdf5_without_schema(tmp_path)], model={"name": "vpff"}, epochs=1, out=str(tmp_path / "r")))


def test_out_holding_a_run_is_refused(tiny_data, tmp_path):
    fit(_config(tiny_data, tmp_path, epochs=1))
    with pytest.raises(VPIntegratorError, match="already holds a run; continue that run with resume"):
        fit(_config(tiny_data, tmp_path, epochs=1), overwrite=False)  # vp-train's default


def test_a_notebook_cell_run_again_replaces_its_own_run_only(tiny_data, tmp_path, monkeypatch):
    """fit's default overwrite=None: the same call run again (a notebook cell) replaces the run it wrote (the
    same weights again; a file of the user's in the directory kept); a run of another configuration or an
    unfinished one is refused with one line naming out relative to the working directory, and left as it is."""
    from vpintegrator.rundir import COMPLETE

    monkeypatch.chdir(tmp_path)
    first = fit(_config(tiny_data, tmp_path, epochs=1))
    (tmp_path / "run" / "notes.txt").write_text("mine")
    again = fit(_config(tiny_data, tmp_path, epochs=1))
    assert _same_weights(first.model, again.model) and (tmp_path / "run" / "notes.txt").read_text() == "mine"
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    with pytest.raises(VPIntegratorError) as info:
        fit(_config(tiny_data, tmp_path, epochs=1, lr=0.5))
    assert str(info.value) == ("out run: holds a run of another configuration (its config.toml); choose another out, "
                               "or pass overwrite=True to replace it")
    (tmp_path / "run" / COMPLETE).unlink()  # as a run killed before its end leaves it
    del before[COMPLETE]
    with pytest.raises(VPIntegratorError) as info:
        fit(_config(tiny_data, tmp_path, epochs=1))
    assert str(info.value) == ("out run: holds an unfinished run; continue it with resume = run, or pass "
                               "overwrite=True to train it again from the start")
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()} == before
    with pytest.raises(VPIntegratorError, match="overwrite must be True, False or None"):
        fit(_config(tiny_data, tmp_path, epochs=1), overwrite="yes")


def test_resume_refuses_other_settings(tiny_data, tmp_path):
    fit(_config(tiny_data, tmp_path, epochs=1))
    with pytest.raises(VPIntegratorError, match="cannot change lr"):
        fit(resume=tmp_path / "run", epochs=2, lr=0.5)
    with pytest.raises(VPIntegratorError, match="not a run directory"):
        fit(resume=tmp_path, epochs=2)


def test_resume_at_the_total_does_nothing_more(tiny_data, tmp_path):
    first = fit(_config(tiny_data, tmp_path, epochs=2))
    again = fit(resume=tmp_path / "run")
    assert again.epochs == 2 and again.steps == first.steps and _same_weights(first.model, again.model)


def test_toml_round_trip(tiny_data):
    config = TrainConfig(data=[tiny_data], model={"name": "vpt", "seq_len": 3, "skew_sym": False},
                         optimizer_kwargs={"betas": [0.9, 0.999]}, time_limit=12.5, lr_min=1e-7)
    again = TrainConfig.from_dict(tomllib.loads(config.to_toml()))
    assert again == config


def test_ddp_helpers_are_noops_in_one_process(monkeypatch):
    from vpintegrator.training import ddp

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    info = ddp.setup("cpu")
    assert not info.enabled and info.is_main
    t = torch.ones(2)
    assert torch.equal(ddp.all_reduce(t, info), torch.ones(2))
    ddp.teardown(info)
    assert os.environ.get("WORLD_SIZE") is None


# ---------------------------------------------------------------------------------------------------
# Levenberg–Marquardt (optimizer = "lm")


def _lm(tiny_data, tmp_path, name="lm", **kw) -> dict:
    return _config(tiny_data, tmp_path, name, **(dict(optimizer="lm", lm_windows=64, lm_iters_per_epoch=3) | kw))


def _full_train_loss(result) -> float:
    """The reference loss of the final model over every training window (what LM logs)."""
    from vpintegrator.data.windows import WindowDataset, load_trajectories, split_train_val_test, states_tensor

    cfg = TrainConfig.from_toml(result.run_dir / "config.toml")
    data = load_trajectories(cfg.data)
    train_idx, _, _ = split_train_val_test(data.n_traj, cfg.val_fraction, cfg.test_fraction, cfg.split_seed)
    y = states_tensor(data, cfg.dtype, device=next(result.model.parameters()).device)  # where fit trained
    x, target = WindowDataset(y, 2, 2, 1, train_idx).windows()
    with torch.no_grad():
        return relative_loss(result.model(x), target).item()


def test_lm_beats_adam_at_equal_steps(tiny_data, tmp_path):
    """15 LM iterations on 64-window subsamples vs 15 Adam steps (batch 32): LM's loss is > 10x lower."""
    lm = fit(_lm(tiny_data, tmp_path, epochs=3, lm_iters_per_epoch=5))
    adam = fit(_config(tiny_data, tmp_path, "adam", epochs=3, scheduler="constant"))
    assert lm.steps == adam.steps == 15
    lm_loss, adam_loss = _full_train_loss(lm), _full_train_loss(adam)
    assert lm_loss < 0.1 * adam_loss, (lm_loss, adam_loss)
    assert lm.history[-1]["train_loss"] == pytest.approx(lm_loss, rel=1e-10)  # LM logs the full loss
    assert all(h["lr"] > 0 for h in lm.history)  # the damping lambda


def test_lm_resume_equals_uninterrupted(tiny_data, tmp_path):
    """4 LM epochs in one go == 2 epochs, then resume to 4: bitwise in float64 (lambda, subsample, RNG)."""
    straight = fit(_lm(tiny_data, tmp_path, "straight", epochs=4, lm_resample_every=2))
    first = fit(_lm(tiny_data, tmp_path, "split", epochs=2, lm_resample_every=2))
    resumed = fit(resume=tmp_path / "split", epochs=4)
    assert resumed.epochs == 4 and resumed.steps == straight.steps == 12
    assert _same_weights(straight.model, resumed.model) and not _same_weights(first.model, resumed.model)
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)["optimizer"]
    b = torch.load(tmp_path / "split" / "last.pt", weights_only=True)["optimizer"]
    assert a["lambda"] == b["lambda"] and a["iteration"] == b["iteration"] == 12
    assert torch.equal(a["index"], b["index"]) and torch.equal(a["generator"], b["generator"])
    assert [h["lr"] for h in resumed.history] == [h["lr"] for h in straight.history]


def test_lm_interrupt_mid_epoch_resumes_exactly(tiny_data, tmp_path, monkeypatch):
    straight = fit(_lm(tiny_data, tmp_path, "straight", epochs=2))
    original, calls = LevenbergMarquardt.step, {"n": 0}

    def step_then_signal(self, closure):
        calls["n"] += 1
        if calls["n"] == 5:  # epoch 2, second iteration
            signal.raise_signal(signal.SIGINT)
        return original(self, closure)

    monkeypatch.setattr(LevenbergMarquardt, "step", step_then_signal)
    with pytest.raises(TrainingInterrupted):
        fit(_lm(tiny_data, tmp_path, "cut", epochs=2))
    monkeypatch.setattr(LevenbergMarquardt, "step", original)
    ckpt = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["batch_in_epoch"] == 2
    resumed = fit(resume=tmp_path / "cut")
    assert _same_weights(straight.model, resumed.model)


def test_lm_deterministic_for_a_seed(tiny_data, tmp_path):
    a = fit(_lm(tiny_data, tmp_path, "a", epochs=2))
    b = fit(_lm(tiny_data, tmp_path, "b", epochs=2))
    c = fit(_lm(tiny_data, tmp_path, "c", epochs=2, seed=7))
    assert _same_weights(a.model, b.model) and a.history == [dict(h, seconds=ha["seconds"], cpu_seconds=ha["cpu_seconds"]) for h, ha in
                                                              zip(b.history, a.history)]
    assert not _same_weights(a.model, c.model)


def test_lm_with_time_limit_only_needs_no_decay_epochs(tiny_data, tmp_path):
    result = fit(_lm(tiny_data, tmp_path, epochs=None, time_limit=1e-6))
    # the budget is checked after every step: the first epoch ends, short, after its first iteration
    assert result.stopped == "time_limit" and result.epochs == 1 and result.steps == 1


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(lm_windows=0), r"lm_windows must be a positive integer; got 0"),
        (dict(lm_windows=2.5), r"lm_windows must be a positive integer; got 2.5"),
        (dict(lm_resample_every=0), r"lm_resample_every must be a positive integer"),
        (dict(lm_iters_per_epoch=-1), r"lm_iters_per_epoch must be a positive integer"),
        (dict(lm_lambda=0.0), r"lm_lambda must be a finite number > 0"),
        (dict(lm_lambda="big"), r"lm_lambda must be a finite number > 0"),
    ],
)
def test_bad_lm_options_are_one_line_errors(tiny_data, tmp_path, change, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        fit(_lm(tiny_data, tmp_path, **change))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "lm" / "last.pt").exists()


def test_lm_is_not_a_torch_optimizer():
    with pytest.raises(VPIntegratorError, match="not a torch optimiser"):
        make_optimizer("lm", [torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def test_lm_under_torchrun_is_a_clear_error(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.training import ddp

    monkeypatch.setattr(ddp, "setup", lambda device_type: ddp.DistInfo(rank=0, world_size=2))
    monkeypatch.setattr(ddp, "teardown", lambda info: None)
    with pytest.raises(VPIntegratorError, match="'lm'.*one process only; got WORLD_SIZE = 2"):
        fit(_lm(tiny_data, tmp_path))


# -- monitor = "val_rollout" ------------------------------------------------------------------------


def _rollout_error_by_hand(model, y_val: np.ndarray, n_steps: int) -> float:
    """Mean relative error of the model's non-overlapping rollout of y_val (n, >= n_steps + 1, dim)."""
    T = model.seq_len
    with torch.no_grad():
        x = torch.as_tensor(y_val[:, :T])
        states = [x]
        while sum(s.shape[1] for s in states) < n_steps + 1:
            x = model(x)
            states.append(x)
        pred = torch.cat(states, 1)[:, T : n_steps + 1].numpy()
    ref = y_val[:, T : n_steps + 1]
    with np.errstate(all="ignore"):
        err = np.linalg.norm(pred - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
    return float(np.mean(np.minimum(np.nan_to_num(err, nan=10.0, posinf=10.0), 10.0)))  # capped at 10


def test_val_rollout_monitor_picks_the_best_rollout(tiny_data, tmp_path):
    """best.pt is the epoch with the lowest logged val_rollout, which is the mean relative rollout error
    of the held-out trajectories (recomputed by hand from best.pt)."""
    from vpintegrator.data.windows import load_trajectories, split_trajectories

    result = fit(_lm(tiny_data, tmp_path, epochs=4, monitor="val_rollout", val_rollout_steps=12, val_fraction=0.25))
    with open(tmp_path / "lm" / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "train_loss", "val_loss", "lr", "seconds", "cpu_seconds", "val_rollout"]
    scores = [float(r["val_rollout"]) for r in rows]
    assert all(math.isfinite(s) and s > 0 for s in scores)
    best_epoch = 1 + int(np.argmin(scores))
    summary = json.loads((tmp_path / "lm" / "summary.json").read_text())
    assert summary["monitor"] == "val_rollout" and summary["best_epoch"] == best_epoch == result.best_epoch
    assert summary["best_loss"] == pytest.approx(min(scores), rel=1e-12)
    data = load_trajectories([tiny_data])
    _, val_idx = split_trajectories(data.n_traj, 0.25, 0)  # split_seed 0 (the default)
    best = load_model(tmp_path / "lm" / "best.pt")
    by_hand = _rollout_error_by_hand(best, data.y[val_idx], 12)
    assert by_hand == pytest.approx(min(scores), rel=1e-10)


def test_val_rollout_continues_the_reference_beyond_the_data(tiny_data, tmp_path):
    """A validation rollout longer than the stored trajectories (16 states) compares with the data's own
    generator (RK4 here) continued past them."""
    from vpintegrator.data.windows import load_trajectories, split_trajectories
    from vpintegrator.training.validation import RolloutValidator

    data = load_trajectories([tiny_data])
    _, val_idx = split_trajectories(data.n_traj, 0.25, 0)  # split_seed 0 (the default)
    val = data.select(traj=val_idx)
    check = RolloutValidator(val, 40, 2, 2)
    longer = integrate(get_system("rigid_body"), val.y[:, 0], 0.2, 40, method="rk4").y
    np.testing.assert_allclose(check.ref.numpy(), longer, rtol=0, atol=1e-12)
    model = load_model(fit(_lm(tiny_data, tmp_path, epochs=4)).run_dir / "last.pt")
    assert check(model) < 10.0  # not blown up: the cap does not decide the comparison
    assert check(model) == pytest.approx(_rollout_error_by_hand(model, longer, 40), rel=1e-10)


def test_val_rollout_needs_a_validation_set(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match=r"monitor = 'val_rollout'.*set val_fraction > 0"):
        fit(_lm(tiny_data, tmp_path, monitor="val_rollout", val_fraction=0.0))
    with pytest.raises(VPIntegratorError, match=r"monitor must be 'val_loss' or 'val_rollout'; got 'loss'"):
        fit(_lm(tiny_data, tmp_path, monitor="loss"))


def test_lm_check_windows_changes_the_accepted_steps(tiny_data, tmp_path):
    """With a check set a step must also not raise the loss of the check windows: other steps are
    accepted than without one, and training still lowers the loss."""
    plain = fit(_lm(tiny_data, tmp_path, "plain", epochs=3, lm_check_windows=0))
    checked = fit(_lm(tiny_data, tmp_path, "checked", epochs=3, lm_check_windows=64))
    assert checked.history[-1]["train_loss"] < checked.history[0]["train_loss"]
    assert [h["train_loss"] for h in plain.history] != [h["train_loss"] for h in checked.history]
    with pytest.raises(VPIntegratorError, match=r"lm_check_windows must be a non-negative integer"):
        fit(_lm(tiny_data, tmp_path, "bad", lm_check_windows=-1))


def test_init_scale_shrinks_the_initial_weights(tiny_data, tmp_path):
    """init_scale multiplies every freshly initialised weight (same seed, so the same draw)."""
    from vpintegrator.training import loop

    captured = {}
    original = loop.Trainer.run

    def grab(self):
        captured.setdefault("models", []).append({k: v.detach().clone() for k, v in self.model.named_parameters()})
        raise KeyboardInterrupt  # stop before any step

    loop.Trainer.run = grab
    try:
        for scale in (1.0, 0.1):
            with pytest.raises(KeyboardInterrupt):
                fit(_lm(tiny_data, tmp_path, f"s{scale}", init_scale=scale))
    finally:
        loop.Trainer.run = original
    full, small = captured["models"]
    assert full.keys() == small.keys()
    for k in full:
        torch.testing.assert_close(small[k], 0.1 * full[k], rtol=1e-15, atol=0)
    with pytest.raises(VPIntegratorError, match=r"init_scale must be a finite number > 0"):
        fit(_lm(tiny_data, tmp_path, "bad", init_scale=0))


# -- the Levenberg–Marquardt optimiser and the paper defaults ----------------------------------------


def test_levenberg_marquardt_is_a_torch_optimizer():
    """Linear least squares: one LM step with a small λ lands near the solution; the closure gives
    residuals (the Jacobian by jacrev when the closure has none); λ round-trips through state_dict."""
    torch.manual_seed(0)
    A, b = torch.randn(20, 3, dtype=torch.float64), torch.randn(20, dtype=torch.float64)
    w = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    opt = LevenbergMarquardt([w], lam=1e-9)
    assert isinstance(opt, torch.optim.Optimizer)
    loss0 = opt.step(lambda theta: A @ theta - b)
    assert loss0 == pytest.approx(float(b.norm()), rel=1e-14) and opt.accepted
    expected = torch.linalg.lstsq(A, b[:, None]).solution[:, 0]
    torch.testing.assert_close(w.detach(), expected, rtol=1e-6, atol=1e-8)
    state = opt.state_dict()
    other = LevenbergMarquardt([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))], lam=1.0)
    other.load_state_dict(state)
    assert other.lam == opt.lam < 1e-9


def test_flags_only_model_gets_the_paper_hyper_parameters(tiny_data, tmp_path):
    """[model] with only a name: the paper's configuration of that architecture, dim from the data."""
    from vpintegrator.models import default_model_config

    result = fit(dict(data=[tiny_data], model={"name": "vpt"}, epochs=1, batch_size=64, out=str(tmp_path / "r")))
    saved = TrainConfig.from_toml(tmp_path / "r" / "config.toml").model
    # the model records every constructor argument: init_upper, symmetric (issue 21) and positional (issue 55)
    # at their defaults
    assert saved == {"name": "vpt", "dim": 3, **default_model_config("vpt"), "init_upper": False, "symmetric": False,
                     "positional": "none"}
    assert result.n_params == 162


# -- issue 11: divergence, monotone resume, time-based checkpoints ------------------------------------------


def _hash_dir(path) -> dict:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def _small(tiny_data, tmp_path, **kw):
    return dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1}, epochs=3, batch_size=16,
                dtype="float64", device="cpu", out=str(tmp_path / "run"), **kw)


def test_divergence_stops_keeps_finite_best(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.training import single

    real = single.window_loss
    calls = {"n": 0}

    def fake(model, dataset, batch_size, dist=None, squared=False):  # the validation loss turns NaN in epoch 2
        value = real(model, dataset, batch_size, dist, squared)
        calls["n"] += 1
        return math.nan if calls["n"] >= 2 else value

    monkeypatch.setattr(single, "window_loss", fake)
    with pytest.raises(VPIntegratorError, match=r"training diverged: validation loss is nan at epoch 2, step \d+; "
                                                r"lower lr \(now 0.01\)") as info:
        fit(_small(tiny_data, tmp_path))
    assert info.value.key == "lr"
    run = tmp_path / "run"
    best = torch.load(run / "best.pt", weights_only=True)
    assert best["epoch"] == 1 and math.isfinite(best["best_loss"])
    assert all(torch.isfinite(v).all() for v in best["state_dict"].values() if v.is_floating_point())
    last = torch.load(run / "last.pt", weights_only=True)
    assert last["epoch"] == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "diverged" and summary["epochs"] == 1 and summary["diverged"]["epoch"] == 2
    assert [r["epoch"] for r in csv.DictReader(open(run / "log.csv"))] == ["1"]


def test_divergence_in_first_epoch_writes_no_checkpoint(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match=r"training diverged: loss is (nan|inf) at epoch 1, step \d+; lower lr "
                                                r"\(now 1e\+06\) or use optimizer = \"lm\""):
        fit(_small(tiny_data, tmp_path, lr=1e6, lr_min=1e5) | {"dtype": "float32"})
    run = tmp_path / "run"
    assert not (run / "best.pt").exists() and not (run / "last.pt").exists()
    assert json.loads((run / "summary.json").read_text())["stopped"] == "diverged"


def test_resume_is_monotone_and_leaves_the_run_alone(tiny_data, tmp_path):
    fit(_small(tiny_data, tmp_path))
    run = tmp_path / "run"
    before = _hash_dir(run)
    with pytest.raises(VPIntegratorError, match=r"epochs 2 is less than the 3 epochs"):
        fit(resume=run, epochs=2)
    for bad in ({"epochs": 0}, {"lr": 0.5}, {"time_limit": math.nan}, {"checkpoint_seconds": -1}):
        with pytest.raises(VPIntegratorError):
            fit(resume=run, **bad)
    (run / "last.pt").write_bytes((run / "last.pt").read_bytes()[:1000])
    before = _hash_dir(run)
    with pytest.raises(VPIntegratorError, match=r"last.pt: truncated or corrupt torch file"):
        fit(resume=run, epochs=5)
    assert _hash_dir(run) == before


def test_resume_refuses_replaced_data_and_a_lost_log(tiny_data, tmp_path):
    """Issue 36: a resume after the data file was replaced by another, or after log.csv was deleted, went on
    (with other data; with a log restarting at one row). Both are one-line errors; nothing changes."""
    import shutil

    from vpintegrator.data.trajectory_files import read_trajectories, write_trajectories

    data = tmp_path / "data.h5"
    shutil.copy(tiny_data, data)
    fit(_small(str(data), tmp_path))
    run = tmp_path / "run"
    other = read_trajectories(data)
    other.y[:, :, 0] *= -1.0  # the same shape and meta, other states
    write_trajectories(tmp_path / "other.h5", other)
    original = data.read_bytes()
    shutil.copy(tmp_path / "other.h5", data)
    before = _hash_dir(run)
    with pytest.raises(VPIntegratorError, match=r"resume .*run: .*data.h5 has changed since the run's last checkpoint "
                                                r"\(sha256 \w+… then, \w+… now\)"):
        fit(resume=run, epochs=5)
    assert _hash_dir(run) == before
    data.write_bytes(original)  # the same file again: resumes
    (run / "log.csv").rename(tmp_path / "log.csv")
    before = _hash_dir(run)
    with pytest.raises(VPIntegratorError, match=r"log.csv is missing, but last.pt is at epoch 3"):
        fit(resume=run, epochs=5)
    assert _hash_dir(run) == before
    (tmp_path / "log.csv").rename(run / "log.csv")
    assert fit(resume=run, epochs=4).epochs == 4


def test_time_based_checkpoints_do_not_change_the_run(tiny_data, tmp_path):
    """checkpoint_seconds tiny: last.pt after every step (mid-epoch); same weights as without; exact resume."""
    a = fit(_small(tiny_data, tmp_path / "a"))
    b = fit(_small(tiny_data, tmp_path / "b", checkpoint_seconds=1e-9))
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k])
    assert a.train_loss == b.train_loss
    # a mid-epoch last.pt resumes to the same result
    steps = b.steps // b.epochs
    assert steps > 1


def test_config_refuses_non_finite_numbers(tiny_data, tmp_path):
    for key, value in (("lr", math.inf), ("time_limit", math.nan), ("min_delta", math.nan),
                       ("decay_epochs", math.inf), ("checkpoint_seconds", 0), ("seed", -1)):
        with pytest.raises(VPIntegratorError, match=key) as info:
            TrainConfig.from_dict(_small(tiny_data, tmp_path) | {key: value})
        assert info.value.key == key


def test_the_same_data_file_twice_is_refused(tiny_data, tmp_path):
    """Issue 36: the same file given twice as data put copies of training trajectories in the test split."""
    link = tmp_path / "same.h5"
    link.symlink_to(tiny_data)
    for data in ([tiny_data, tiny_data], [tiny_data, str(link)]):
        with pytest.raises(VPIntegratorError, match=r"data lists the same file twice: .* give each file once"):
            fit(_small(tiny_data, tmp_path) | {"data": data})
    assert not (tmp_path / "run").exists()
