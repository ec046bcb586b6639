"""Unrolled training targets (``unroll = k``): the objective is the model's own k-window rollout."""

from __future__ import annotations

import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data.windows import WindowDataset, load_trajectories, split_trajectories, states_tensor
from vpintegrator.models import build_model
from vpintegrator.training import TrainConfig, fit, relative_loss
from vpintegrator.training.single import Unrolled, unrolled

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    base = dict(data=[tiny_data], model=MODEL, epochs=2, batch_size=32, dtype="float64", out=str(tmp_path / name))
    return base | kw


@pytest.mark.parametrize("name, kw", [("vpt", dict(seq_len=3, n_blocks=1, L=1)), ("vpff", dict(seq_len=1, n_blocks=1))])
def test_unrolled_is_the_models_own_rollout(name, kw):
    torch.manual_seed(0)
    model = build_model(name, dim=3, **kw).double()
    x = torch.randn(5, model.seq_len, 3, dtype=torch.float64)
    out = Unrolled(model, 3)(x)
    assert out.shape == (5, 3 * model.pred_window, 3)
    w, manual = x, []
    for _ in range(3):
        w = model(w)
        manual.append(w)
    assert torch.equal(out, torch.cat(manual, 1))
    assert unrolled(model, 1) is model
    assert set(map(id, Unrolled(model, 2).parameters())) == set(map(id, model.parameters()))


def test_unroll_one_is_unchanged(tiny_data, tmp_path):
    a = fit(_config(tiny_data, tmp_path, "a"))
    b = fit(_config(tiny_data, tmp_path, "b", unroll=1))
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]


@pytest.mark.parametrize("optimizer", ["adam", "lm"])
def test_unrolled_loss_is_logged_and_learned(tiny_data, tmp_path, optimizer):
    extra = dict(lm_windows=64, lm_iters_per_epoch=3) if optimizer == "lm" else {}
    res = fit(_config(tiny_data, tmp_path, optimizer=optimizer, unroll=3, epochs=3, **extra))
    assert res.history[-1]["train_loss"] < res.history[0]["train_loss"]
    cfg = TrainConfig.from_toml(res.run_dir / "config.toml")
    assert cfg.unroll == 3
    # the logged validation loss is the 3-window rollout loss of the final model
    data = load_trajectories(cfg.data)
    _, val_idx = split_trajectories(data.n_traj, cfg.val_fraction, cfg.split_seed)
    x, target = WindowDataset(states_tensor(data, "float64"), 2, 6, 1, val_idx).windows()
    with torch.no_grad():
        loss = relative_loss(Unrolled(res.model, 3)(x), target).item()
    last = torch.load(res.run_dir / "last.pt", weights_only=True)
    assert last["state_dict"].keys() == res.model.state_dict().keys()  # the model's own keys, not the wrapper's
    assert res.history[-1]["val_loss"] == pytest.approx(loss, rel=1e-9)


@pytest.mark.parametrize("value", [0, -1, 1.5, "2"])
def test_bad_unroll_is_one_line(tiny_data, tmp_path, value):
    with pytest.raises(VPIntegratorError, match="unroll"):
        fit(_config(tiny_data, tmp_path, unroll=value))


def test_unroll_longer_than_data_is_refused(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match="exceeds the n_states"):
        fit(_config(tiny_data, tmp_path, unroll=1000))


def test_unroll_with_ensemble_is_refused(tiny_data, tmp_path):
    with pytest.raises(VPIntegratorError, match="unroll = 2 cannot train an ensemble"):
        fit(_config(tiny_data, tmp_path, unroll=2, ensemble=2))


def test_init_from_starts_from_those_weights(tiny_data, tmp_path):
    """init_from: the first epoch starts from the given model's weights (not init_scale's), and a second
    phase with unroll > 1 fine-tunes a one-window model."""
    first = fit(_config(tiny_data, tmp_path, "first", epochs=2))
    zero = fit(_config(tiny_data, tmp_path, "zero", epochs=1, lr=1e-30, lr_min=1e-30, scheduler="constant",
                       init_from=str(first.run_dir / "last.pt"), init_scale=0.5))
    a, b = first.model.state_dict(), zero.model.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-20) for k in a)  # lr ~ 0: the weights stay as loaded
    # a run directory works too; with unroll = 2 the logged loss is then the loaded model's 2-window loss
    second = fit(_config(tiny_data, tmp_path, "second", epochs=1, lr=1e-30, lr_min=1e-30, scheduler="constant",
                         unroll=2, init_from=str(first.run_dir)))
    cfg = TrainConfig.from_toml(second.run_dir / "config.toml")
    data = load_trajectories(cfg.data)
    _, val_idx = split_trajectories(data.n_traj, cfg.val_fraction, cfg.split_seed)
    x, target = WindowDataset(states_tensor(data, "float64"), 2, 4, 1, val_idx).windows()
    with torch.no_grad():
        loss = relative_loss(Unrolled(first.model, 2)(x), target).item()
    assert second.history[-1]["val_loss"] == pytest.approx(loss, rel=1e-9)


def test_init_from_other_architecture_is_one_line(tiny_data, tmp_path):
    first = fit(_config(tiny_data, tmp_path, "first", epochs=1))
    with pytest.raises(VPIntegratorError, match=r"init_from .*L = 1 but the configured model has L = 2"):
        fit(_config(tiny_data, tmp_path, "other", model={**MODEL, "L": 2}, init_from=str(first.run_dir)))
    with pytest.raises(VPIntegratorError, match="does not exist"):
        fit(_config(tiny_data, tmp_path, "missing", init_from=str(tmp_path / "no.pt")))
    with pytest.raises(VPIntegratorError, match="init_from cannot start an ensemble"):
        fit(_config(tiny_data, tmp_path, "ens", ensemble=2, init_from=str(first.run_dir)))
