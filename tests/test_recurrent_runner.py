"""The memory study's window models in the compiled model runner (``vpintegrator.rollout.numba_model``): the
one-step ``gru``, ``lru``, ``delay_mlp`` (its feature ops) and the VPT with ``positional = "mixing"``
(``vpt_mix``): each call and whole rollouts equal the torch float64 model to round-off, at batch 1 and above;
a model the runner cannot take runs in torch and says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import GRUWindow, build_model

cm = pytest.importorskip("vpintegrator.rollout.numba_model")
pytestmark = pytest.mark.skipif(not cm.AVAILABLE, reason="numba not installed")

CASES = {
    "gru": ("gru", dict(dim=2, seq_len=4)),
    "gru_stacked_deep": ("gru", dict(dim=3, seq_len=5, width=7, layers=2, depth=2, activation="silu")),
    "gru_linear_readout_seq1": ("gru", dict(dim=2, seq_len=1, width=5, depth=0)),
    "gru_second": ("gru", dict(dim=2, seq_len=3, width=6, increment="second", activation="sigmoid")),
    "lru": ("lru", dict(dim=2, seq_len=4)),
    "lru_stacked": ("lru", dict(dim=3, seq_len=6, width=5, state=4, layers=3, depth=2, increment="second")),
    "lru_seq1": ("lru", dict(dim=2, seq_len=1, width=4, state=3, depth=0, activation="identity")),
    "delay_mlp": ("delay_mlp", dict(dim=2, seq_len=3, width=8, depth=2)),
    "delay_mlp2": ("delay_mlp", dict(dim=2, seq_len=4, width=8, depth=1, increment="second")),
}


def case(key: str, seed: int = 0) -> torch.nn.Module:
    """The model with every weight random, the zero-initialised output layer too (so the network is seen; small,
    and smaller for a second difference, so that 300 steps stay of order one)."""
    name, kw = CASES[key]
    torch.manual_seed(seed)
    model = build_model(name, **kw).double().eval()
    with torch.no_grad():
        out = model.out if name == "delay_mlp" else model.readout.out
        out.weight.normal_(0.0, 2e-4 if kw.get("increment") == "second" else 0.01)
        for n, p in model.named_parameters():
            if n.endswith("bias") and "out" not in n:
                p.uniform_(-0.5, 0.5)
    return model


def windows(n: int, model: torch.nn.Module, seed: int = 1) -> np.ndarray:
    """(n, seq_len, dim) windows of states of order one, each a slow walk (a second difference extrapolates it)."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(size=(n, model.seq_len, model.dim)), axis=1) * 1e-3
    return rng.normal(size=(n, 1, model.dim)) * 0.5 + walk


@pytest.mark.parametrize("key", CASES)
@pytest.mark.parametrize("batch", [1, 5])
def test_forward_equals_torch(key, batch):
    model = case(key)
    packed = cm.pack(model)
    assert packed is not None and packed.pred_window == 1
    x = windows(batch, model)
    with torch.inference_mode():  # torch's rollout path (the fused GRU kernel)
        want = model(torch.as_tensor(x)).numpy()
    got = packed.forward(x)
    assert got.shape == want.shape == (batch, 1, model.dim)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    np.testing.assert_allclose(packed.forward(x[0]), want[0], rtol=0, atol=1e-13)  # one window -> (1, dim)


@pytest.mark.parametrize("key", CASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_rollout_runs_compiled_and_equals_torch(key, batch):
    # every step reads its window afresh from h = 0, as torch does: 300 steps, the window advanced by one
    from vpintegrator.rollout import ModelStep, rollout

    model = case(key)
    w0 = windows(batch, model, seed=2)
    compiled, eager = ModelStep(model, device="cpu"), ModelStep(model, device="cpu", scalar_max_batch=0)
    got, want = rollout(compiled, w0, 0.1, 300).y, rollout(eager, w0, 0.1, 300).y
    assert compiled.describe()["runner"] == "numba" and eager.describe()["runner"] == "eager"
    assert np.isfinite(want).all() and np.abs(want[:, -1] - want[:, model.seq_len - 1]).max() > 1e-3  # it moved
    assert np.abs(got - want).max() <= 1e-12


@pytest.mark.parametrize("kw", [dict(dim=2, seq_len=4, n_blocks=4, L=4),
                                dict(dim=3, seq_len=3, n_blocks=2, L=3, skew_sym=False)])
def test_vpt_mix_runs_compiled_and_equals_torch(kw):
    from vpintegrator.rollout import ModelStep, rollout

    torch.manual_seed(0)
    model = build_model("vpt", positional="mixing", **kw).double().eval()
    with torch.no_grad():  # the mixing shears start at zero: random, small (bounded rollouts)
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    packed = cm.pack(model)
    assert packed is not None
    x = windows(5, model)
    with torch.inference_mode():
        np.testing.assert_allclose(packed.forward(x), model(torch.as_tensor(x)).numpy(), rtol=0, atol=1e-13)
    compiled, eager = ModelStep(model, device="cpu"), ModelStep(model, device="cpu", scalar_max_batch=0)
    got, want = rollout(compiled, x[:2], 0.1, 60).y, rollout(eager, x[:2], 0.1, 60).y
    assert compiled.describe()["runner"] == "numba" and np.isfinite(want).all()
    assert np.abs(got - want).max() <= 1e-12


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("kw", [dict(dim=2, seq_len=2),
                                dict(dim=3, seq_len=4, n_blocks=2, n_linear=2, activation="silu")])
def test_delay_vpff_runs_compiled_and_equals_torch(kw, overlap):
    # the VPFF on the delay vector: in-place triangular layers on the window's features, the next window out
    from vpintegrator.rollout import ModelStep, rollout

    torch.manual_seed(0)
    model = build_model("delay_vpff", **kw).double().eval()
    with torch.no_grad():  # small: a random volume-preserving map's rollouts grow
        for n, p in model.named_parameters():
            p.normal_(0.0, 0.002 if "bias" in n else 0.02)
    packed = cm.pack(model)
    assert packed is not None
    x = windows(5, model)
    with torch.inference_mode():
        np.testing.assert_allclose(packed.forward(x), model(torch.as_tensor(x)).numpy(), rtol=0, atol=1e-13)
    compiled = ModelStep(model, device="cpu", overlap=overlap)
    eager = ModelStep(model, device="cpu", scalar_max_batch=0, overlap=overlap)
    got, want = rollout(compiled, x[:2], 0.1, 40).y, rollout(eager, x[:2], 0.1, 40).y
    assert compiled.describe()["runner"] == "numba" and np.isfinite(want).all()
    assert np.abs(got - want).max() <= 1e-12


def test_a_model_the_runner_cannot_take_runs_in_torch():
    # a subclass may change the formula (packers are for exact classes); so may a symmetric delay_vpff
    from vpintegrator.rollout import ModelStep, rollout

    class Shifted(GRUWindow):
        def forward(self, x):
            return super().forward(x) + 0.01

    torch.manual_seed(0)
    for model in (Shifted(2, 3).double(), build_model("delay_vpff", dim=2, seq_len=2).double()):
        if hasattr(model, "net"):  # its VPFF made the symmetric composition (no packed form)
            model.net.config["symmetric"] = True
        assert cm.pack(model) is None
        step = ModelStep(model.eval(), device="cpu")
        w0 = windows(1, model, seed=3)
        y = rollout(step, w0, 0.1, 12).y
        assert step.describe()["runner"] == "eager"
        x = torch.as_tensor(w0[0])
        with torch.inference_mode():  # the first step by the model itself
            first = model(x[None])[0, 0].numpy()
        np.testing.assert_array_equal(y[0, model.seq_len], first)
