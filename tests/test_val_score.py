"""Issue 21 item 4: a validation score that tracks the target (the error at the validation horizon and the
invariant drift, configurable), used for the best epoch and the best member of an ensemble."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.cli.train import main as train_main
from vpintegrator.data.trajectory_files import read_trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.training import FitResult, TrainConfig, fit
from vpintegrator.training.validation import RolloutValidator

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name, **kw) -> dict:
    base = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3,
                batch_size=32, lr=3e-3, dtype="float64", seed=5, monitor="val_rollout", val_rollout_steps=20,
                init_scale=0.1, out=str(tmp_path / name))
    return base | kw


def _free_rollout(model, y: np.ndarray, seq_len: int, n_pred: int) -> np.ndarray:
    """The model iterated state by window from the first ``seq_len`` states, written out independently."""
    window = torch.as_tensor(y[:, :seq_len])
    out = []
    with torch.no_grad():
        while sum(p.shape[1] for p in out) < n_pred:
            pred = model(window)
            out.append(pred)
            window = torch.cat([window, pred], 1)[:, -seq_len:]
    return torch.cat(out, 1)[:, :n_pred].numpy()


class _Toy(torch.nn.Module):
    """A window map with known behaviour: each state of a 2-window advanced by two steps of M, a slow rotation
    about e_z that also grows the state by 0.2 % per step (errors and invariant drifts small, not zero)."""

    seq_len = pred_window = 2
    dim = 3

    def __init__(self) -> None:
        super().__init__()
        c, s = np.cos(0.05), np.sin(0.05)
        m = 1.002 * torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
        self.m2 = torch.nn.Parameter(m @ m)

    def forward(self, window):
        return window @ self.m2.T


@pytest.fixture
def setting(tiny_data):
    traj = read_trajectories(tiny_data)
    model = _Toy()
    pred = _free_rollout(model, traj.y, 2, traj.n_states - 2)
    return traj, model, pred


def _rel_err(pred, ref):
    return np.minimum(np.linalg.norm(pred - ref, axis=-1) / np.linalg.norm(ref, axis=-1), RolloutValidator.CAP)


def test_default_score_is_the_mean_error(setting):
    traj, model, pred = setting
    v = RolloutValidator(traj, traj.n_steps, 2, 2)
    assert v(model) == pytest.approx(float(_rel_err(pred, traj.y[:, 2:]).mean()), rel=1e-12)


def test_final_error_is_the_error_at_the_horizon(setting):
    traj, model, pred = setting
    v = RolloutValidator(traj, traj.n_steps, 2, 2, error="final")
    assert v(model) == pytest.approx(float(_rel_err(pred[:, -1], traj.y[:, -1]).mean()), rel=1e-12)


def test_drift_term_is_the_largest_relative_invariant_drift(setting):
    traj, model, pred = setting
    v0 = RolloutValidator(traj, traj.n_steps, 2, 2, error="final")
    v = RolloutValidator(traj, traj.n_steps, 2, 2, error="final", drift_weight=50.0)
    initial = traj.system.invariants(traj.y[:, 0])
    drift = np.max([np.max(np.abs(traj.system.invariant(n, pred) - initial[n][:, None]) / np.abs(initial[n][:, None]),
                           axis=1) for n in traj.system.invariant_names], axis=0)  # (n_traj,)
    assert 0 < drift.min() and drift.max() < RolloutValidator.CAP
    assert v(model) - v0(model) == pytest.approx(50.0 * float(drift.mean()), rel=1e-9)


def test_blown_up_rollout_scores_the_cap(setting):
    traj, model, _ = setting
    v = RolloutValidator(traj, traj.n_steps, 2, 2, error="final", drift_weight=1.0)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    assert v(model) == pytest.approx(2 * RolloutValidator.CAP)


def test_ensemble_scores_equal_lone_runs_and_pick_the_best(tiny_data, tmp_path, monkeypatch, tol):
    extra = dict(val_rollout_error="final", val_rollout_drift_weight=50.0)
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=[5, 9], **extra))
    assert isinstance(ens, FitResult) and ens.is_ensemble
    # the split is split_seed's: the ensemble's members and the lone run share it
    alone = fit(_config(tiny_data, tmp_path, "alone", seed=9, **extra))
    got = [r["val_rollout"] for r in ens.members[1].history]
    want = [r["val_rollout"] for r in alone.history]
    assert got == pytest.approx(want, rel=tol(), abs=tol())
    best = []
    for m in ens.members:
        with open(m.run_dir / "log.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        scores = [float(r["val_rollout"]) for r in rows]
        assert m.best_epoch == int(np.argmin(scores)) + 1  # best.pt: the epoch with the lowest score
        best.append(min(scores))
    assert ens.selected == int(np.argmin(best))


def test_score_keys_need_the_rollout_monitor(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match="val_rollout_drift_weight") as err:
        TrainConfig.from_dict(_config(tiny_data, tmp_path, "x", monitor="val_loss", val_rollout_drift_weight=5.0))
    assert err.value.key == "val_rollout_drift_weight" and "\n" not in str(err.value)
    with pytest.raises(VPIntegratorError, match="val_rollout_error"):
        TrainConfig.from_dict(_config(tiny_data, tmp_path, "x", monitor="val_loss", val_rollout_error="final"))
    with pytest.raises(VPIntegratorError, match="val_rollout_error"):
        TrainConfig.from_dict(_config(tiny_data, tmp_path, "x", val_rollout_error="median"))
    with pytest.raises(VPIntegratorError, match="val_rollout_drift_weight"):
        TrainConfig.from_dict(_config(tiny_data, tmp_path, "x", val_rollout_drift_weight=-1.0))


def test_system_without_invariants_is_one_line(tmp_path):
    from vpintegrator.data import integrate

    rng = np.random.default_rng(1)
    traj = integrate("abc_flow", rng.uniform(0, 1, size=(4, 3)), 0.1, 10, method="rk4")
    assert not traj.system.invariant_names
    with pytest.raises(VPIntegratorError, match="has no invariants") as err:
        RolloutValidator(traj, 10, 2, 2, drift_weight=1.0)
    assert err.value.key == "val_rollout_drift_weight"
    assert RolloutValidator(traj, 10, 2, 2).drift_weight == 0.0  # the error term alone works


def test_cli_flags(tiny_data, tmp_path):
    out = tmp_path / "cli"
    result = CliRunner().invoke(train_main, [
        "--data", tiny_data, "--model", "vpt", "--set", "model.seq_len=2", "--set", "model.L=2",
        "--set", "model.n_blocks=1", "--epochs", "2", "--batch-size", "32", "--dtype", "float64", "--monitor",
        "val_rollout", "--val-rollout-steps", "20", "--val-rollout-error", "final",
        "--val-rollout-drift-weight", "50", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    text = (out / "config.toml").read_text()
    assert 'val_rollout_error = "final"' in text and "val_rollout_drift_weight = 50.0" in text
    bad = CliRunner().invoke(train_main, ["--data", tiny_data, "--model", "vpt", "--val-rollout-drift-weight", "2",
                                          "--out", str(tmp_path / "bad")])
    assert bad.exit_code != 0 and "val-rollout-drift-weight" in bad.output and "Traceback" not in bad.output
