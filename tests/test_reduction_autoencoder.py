"""The symplectic autoencoder: its layers' and halves' symplectic identities, its fit against PSD, its file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction import SymplecticAutoencoder, fit_psd, load_autoencoder, load_reduction, psd_floor
from vpintegrator.reduction.autoencoder import autoencoder_at_psd, intermediate_dims
from vpintegrator.training import fit_symplectic_autoencoder

from test_reduction import _j  # the canonical J; the Toda bump data (toda_data) is a conftest fixture


def _random_autoencoder(full_dim: int, reduced_dim: int, seed: int = 0) -> SymplecticAutoencoder:
    """An autoencoder at random weights (every gradient layer's scale nonzero: not the near-identity start)."""
    torch.manual_seed(seed)
    model = SymplecticAutoencoder(full_dim, reduced_dim, sympnet_upscale=2).double()
    for name, p in model.named_parameters():
        if name.endswith("scale"):
            with torch.no_grad():
                p.uniform_(-1.0, 1.0)
    return model


def _jacobian(net, x: np.ndarray) -> np.ndarray:
    from vpintegrator.reduction.autoencoder import _apply

    return torch.autograd.functional.jacobian(lambda v: _apply(net, v), torch.as_tensor(x)).numpy()


def test_intermediate_dims_are_gmls():
    # GML's docs: 2N = 100, 2n = 10, three blocks -> (10, 54, 100)
    assert intermediate_dims(100, 10, 3) == [10, 54, 100]
    assert intermediate_dims(400, 4, 2) == [4, 400]


def test_psd_like_layers_are_symplectic_stiefel():
    model = _random_autoencoder(40, 6)
    for layer in model.psd_layers():
        phi = layer.phi.detach().numpy()
        a = np.block([[phi, np.zeros_like(phi)], [np.zeros_like(phi), phi]])  # (2N', 2n')
        np.testing.assert_allclose(a.T @ a, np.eye(a.shape[1]), atol=1e-13)
        np.testing.assert_allclose(a.T @ _j(layer.big) @ a, _j(layer.small), atol=1e-13)


def test_decoder_jacobian_is_symplectic_stiefel_like_and_encoder_a_poisson_submersion():
    model = _random_autoencoder(40, 6)
    rng = np.random.default_rng(1)
    for _ in range(3):
        z = rng.normal(size=6)
        d = _jacobian(model.decoder, z)  # (40, 6)
        np.testing.assert_allclose(d.T @ _j(20) @ d, _j(3), atol=1e-12)
        # what does NOT hold: orthonormal columns (the gradient layers are symplectic, not orthogonal)
        assert np.abs(d.T @ d - np.eye(6)).max() > 1e-3
        y = rng.normal(size=40)
        e = _jacobian(model.encoder, y)  # (6, 40)
        np.testing.assert_allclose(e @ _j(20) @ e.T, _j(3), atol=1e-12)
    # nor is the encoder the decoder's left inverse
    z = rng.normal(size=6)
    assert np.abs(model.encode(model.decode(z)) - z).max() > 1e-3


def test_starts_at_psd_and_fitting_beats_it_on_held_out_states(toda_data):
    _, train, test = toda_data
    basis = fit_psd(train, 4)
    start = fit_symplectic_autoencoder(train, 4, max_steps=1)
    # one Adam step of lr 1e-3 (fit's max_steps stops at exactly that many steps) from the PSD start: still PSD's
    # reconstruction to a few per cent
    np.testing.assert_allclose(start.reconstruction_error(test.y[:, -1]), psd_floor(basis, test.y[:, -1]),
                               rtol=0.1)
    model = fit_symplectic_autoencoder(train, 4, max_steps=300, seed=3)
    # over every held-out state (what the loss measures on the training states): 0.36 against PSD's 0.57; at
    # T = 30 alone it is not better on this small lattice (0.35 against 0.34; at N = 200, T = 120 it is,
    # docs/lattices.md)
    ae = np.median(model.reconstruction_error(test.y))
    psd = np.median(psd_floor(basis, test.y))
    assert ae < 0.8 * psd, (ae, psd)
    assert model.fit_seconds > 0 and model.fitted_on["steps"] == 300  # exactly max_steps (the 24th epoch of 13 batches ends short)
    assert model.history[model.fitted_on["best_epoch"]] == min(model.history)


def test_plateau_rule_stops_early():
    y = np.random.default_rng(0).normal(size=(64, 8))
    model = fit_symplectic_autoencoder(y, 8, patience=2, min_rel_delta=0.5, max_epochs=100, batch_size=64)
    assert len(model.history) <= 4  # epoch 0, then at most patience + 1 epochs without halving the loss


def test_save_load_round_trip(toda_data, tmp_path):
    _, train, test = toda_data
    model = fit_symplectic_autoencoder(train, 6, max_steps=20)
    path = tmp_path / "ae.npz"
    model.save(path)
    back = load_autoencoder(path, n_sites=40)
    np.testing.assert_array_equal(back.encode(test.y[:, -1]), model.encode(test.y[:, -1]))
    np.testing.assert_array_equal(back.decode(np.ones(6)), model.decode(np.ones(6)))
    assert back.config == model.config and back.fit_seconds == pytest.approx(model.fit_seconds)
    assert back.fitted_on["system"] == "toda" and back.fitted_on["shape"] == [11, 301, 80]
    assert load_reduction(path).reduced_dim == 6
    with pytest.raises(VPIntegratorError, match=r"ae\.npz: a reduction of a toda lattice of N = 40 .* N = 200"):
        load_autoencoder(path, n_sites=200)


@pytest.mark.parametrize("args, match", [
    ((np.ones((10, 7)), 2), "even dimension 2N"),
    ((np.ones((10, 8)), 3), "reduced_dim must be an even int"),
    ((np.ones((10, 8)), 10), "reduced_dim = 10 is above the state's 8 components"),
    ((np.outer(np.ones(10), np.arange(8.0)), 6), "has rank 2 .*give reduced_dim <= 4"),
    ((np.full((10, 8), np.nan), 2), "NaN or inf"),
])
def test_bad_input_one_line(args, match):
    with pytest.raises(VPIntegratorError, match=match) as err:
        fit_symplectic_autoencoder(*args)
    assert "\n" not in str(err.value)
    assert "fit_symplectic_autoencoder" in str(err.value) or "autoencoder" in str(err.value)


def test_wrong_state_size_one_line():
    model = _random_autoencoder(48, 4)
    with pytest.raises(VPIntegratorError, match=r"shape \(\.\.\., 48\); got shape \(3, 40\) \(an autoencoder of a "
                                                r"lattice of N = 24"):
        model.encode(np.ones((3, 40)))


def test_a_file_written_before_the_autoencoder_trained_through_fit_still_loads():
    # written at commit 58b81b3 by the autoencoder's own training loop (fit on 200 random 12-d states, 2n = 4,
    # seed 1, 3 epochs, batches of 64, lr 1e-2), with its encoding of the first five states
    from pathlib import Path

    data = Path(__file__).parent / "data" / "reduction"
    y = np.random.default_rng(1).normal(size=(200, 12))
    back = load_autoencoder(data / "autoencoder_before_fit.npz", n_sites=6)
    # to rounding, not bit for bit: the stored encoding was computed on another CPU, whose BLAS kernels round
    # differently (2.2e-16 apart on one x86 machine); a wrong load is O(1) off
    np.testing.assert_allclose(back.encode(y[:5]), np.load(data / "autoencoder_before_fit_encode.npy"), rtol=0,
                               atol=1e-12)
    assert back.fitted_on["best_epoch"] == 0 and back.fitted_on["steps"] == 12
    assert load_reduction(data / "autoencoder_before_fit.npz").reduced_dim == 4


def _old_loop(model, y, *, seed, patience, min_rel_delta, max_epochs, batch_size, lr):
    """The reference: the autoencoder's own training loop before it trained through ``fit`` (commit 58b81b3),
    written out plainly. torch's Adam on minibatches of a permutation drawn per epoch from a generator seeded by
    ``seed``, the loss ``sum |x - model(x)|^2 / sum |x|^2``, the plateau rule on the loss over every snapshot
    after each epoch, judged from the start (epoch 0), the best epoch's weights kept.
    Returns (history, best epoch, steps); ``model`` ends at the best weights."""
    x = torch.as_tensor(y)[:, None, :]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def loss_all():
        with torch.no_grad():
            return float(((model(x) - x) ** 2).sum()) / float((x ** 2).sum())

    def state():
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    history = [loss_all()]
    ref, bad, best, steps = history[0], 0, (history[0], 0, state()), 0
    for epoch in range(1, max_epochs + 1):
        perm = torch.randperm(x.shape[0], generator=gen)
        for i in range(0, x.shape[0], batch_size):
            xb = x[perm[i:i + batch_size]]
            loss = ((model(xb) - xb) ** 2).sum() / (xb ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        history.append(loss_all())
        if history[-1] < ref * (1.0 - min_rel_delta):
            ref, bad = history[-1], 0
        else:
            bad += 1
        if history[-1] < best[0]:
            best = (history[-1], epoch, state())
        if bad >= patience:
            break
    model.load_state_dict(best[2])
    return history, best[1], steps


#: small fits of 200 random 12-d states to 2n = 4: the plateau rule stops one at a best epoch 3, and one (lr 0.3)
#: whose epochs never beat the PSD start keeps the start (best epoch 0)
CASES = [dict(seed=1, patience=3, min_rel_delta=0.05, batch_size=32, lr=1e-2, max_epochs=60),
         dict(seed=2, patience=2, min_rel_delta=0.0, batch_size=50, lr=0.3, max_epochs=60)]


@pytest.mark.parametrize("case, best_epoch", [(CASES[0], 3), (CASES[1], 0)])
def test_the_fit_through_the_one_training_loop_is_the_old_loop(case, best_epoch):
    y = np.random.default_rng(1).normal(size=(200, 12))
    model = fit_symplectic_autoencoder(y, 4, **case)
    ref = autoencoder_at_psd(y, 4, case["seed"], torch.float64)[0]
    history, best, steps = _old_loop(ref, y, **case)
    assert (model.fitted_on["best_epoch"], model.fitted_on["steps"]) == (best, steps) and best == best_epoch
    # the same steps on the same batches: the same weights, bit for bit; the losses summed in another order
    for k, v in ref.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k
    np.testing.assert_allclose(model.history, history, rtol=1e-13)


class _Rows:
    """A tracking sink (``fit``'s ``logger`` object): keeps every logged row."""

    def __init__(self):
        self.rows = []

    def log(self, row):
        self.rows.append(dict(row))


@pytest.mark.parametrize("case, stop_at", [({**CASES[0], "min_rel_delta": 0.0, "max_epochs": 6}, 3), (CASES[1], 1)])
def test_a_run_directory_sinks_and_a_resumed_fit_equal_the_uninterrupted_one(tmp_path, case, stop_at):
    import csv

    from vpintegrator.models import load_model

    y = np.random.default_rng(1).normal(size=(200, 12))
    sink = _Rows()
    whole = fit_symplectic_autoencoder(y, 4, out=tmp_path / "whole", logger=sink, **case)
    assert [r["epoch"] for r in sink.rows] == list(range(len(whole.history)))  # epoch 0: the PSD start
    assert {"config.toml", "log.csv", "best.pt", "last.pt", "summary.json"} <= {p.name for p in (tmp_path / "whole").iterdir()}
    rows = list(csv.DictReader(open(tmp_path / "whole" / "log.csv")))
    assert [float(r["val_loss"]) for r in rows] == whole.history
    best = load_model(tmp_path / "whole" / "best.pt", into=SymplecticAutoencoder(12, 4).double())
    for k, v in best.state_dict().items():
        assert torch.equal(v, whole.state_dict()[k]), k
    # interrupted after epoch stop_at (the callback stops it; last.pt saved), then resumed with the same arguments
    part = fit_symplectic_autoencoder(y, 4, out=tmp_path / "part", callback=lambda info: info.epoch >= stop_at, **case)
    assert len(part.history) == stop_at + 1
    resumed = fit_symplectic_autoencoder(y, 4, resume=tmp_path / "part", **case)
    assert resumed.history == whole.history
    assert (resumed.fitted_on["best_epoch"], resumed.fitted_on["steps"]) == (whole.fitted_on["best_epoch"],
                                                                             whole.fitted_on["steps"])
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


def test_a_squared_loss_for_levenberg_marquardt_is_one_line():
    from vpintegrator.training import TrainConfig

    with pytest.raises(VPIntegratorError, match=r"loss = 'relative_squared' trains one model by a torch optimiser"):
        TrainConfig.from_dict({"data": ["x.h5"], "model": "vpt", "loss": "relative_squared", "optimizer": "lm"})
