"""Symmetric (time-reversible) VPFF and VPT (issue 21 item 2): every VP layer as a family ψ_τ with an explicit
inverse, the palindrome Φ = ψ_{1/2} ∘ ψ*_{1/2}, its claims, files, training, rollouts and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ulp import assert_ulp_close

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import load_model, model_preserves, save_model, without_attention
from vpintegrator.models._symmetric import TimedStep
from vpintegrator.nn import VolumePreservingAttention
from vpintegrator.nn.feedforward import VolumePreservingLowerLayer, VolumePreservingUpperLayer
from vpintegrator.testing import assert_preserves, assert_symmetric, assert_volume_preserving

pytestmark = pytest.mark.usefixtures("one_thread")

#: small configurations (the paper VPT at its random initialisation has cond(J) up to ~1e11 at some N(0, 1)
#: inputs, so round-off alone reaches ~1e-9 there: test_paper_vpt_... below)
SMALL = {"vpff": dict(n_blocks=2), "vpt": dict(seq_len=3, L=2, n_blocks=1)}


def _pair(name: str, **config):
    """The plain and the symmetric model with the same parameters, float64."""
    torch.manual_seed(0)
    plain = vp.build_model(name, dim=3, **config).double()
    sym = vp.build_model(name, dim=3, symmetric=True, **config).double()
    sym.load_state_dict(plain.state_dict())
    return plain, sym


# --- the layers: ψ_τ, ψ_0 = id, explicit inverses -----------------------------------------------------------


@pytest.mark.parametrize("cls", [VolumePreservingLowerLayer, VolumePreservingUpperLayer])
@pytest.mark.parametrize("activation, bias", [("tanh", True), ("identity", False), ("identity", True), ("sigmoid", True)])
def test_triangular_layer_family_and_its_explicit_inverse(cls, activation, bias):
    torch.manual_seed(1)
    layer = cls(4, activation, bias=bias).double()
    with torch.no_grad():
        layer.weight.mul_(3)  # far from the identity: back-substitution must really be needed
        if layer.bias is not None:
            layer.bias.normal_()
    x = torch.randn(6, 3, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, 0.0), x, rtol=0, atol=0)  # ψ_0 = id
        torch.testing.assert_close(layer(x, 1.0), layer(x))
        inc = layer(x) - x
        torch.testing.assert_close(layer(x, 0.5), x + 0.5 * inc, rtol=1e-14, atol=1e-14)  # x + τ σ(x Lᵀ + b)
        for tau in (1.0, 0.5, -0.7):
            torch.testing.assert_close(layer.inverse(layer(x, tau), tau), x, rtol=1e-14, atol=1e-14)
            torch.testing.assert_close(layer(layer.inverse(x, tau), tau), x, rtol=1e-14, atol=1e-14)
    for step in (TimedStep(layer, 0.5), TimedStep(layer, -0.5, inverted=True)):  # every member: det J = 1
        assert_volume_preserving(step, atol=1e-13, n=8)


@pytest.mark.parametrize("seq", [3, 4])
def test_skew_attention_keeps_its_correlation_so_its_inverse_is_explicit(seq):
    """Λ = Cay(τC) is orthogonal and commutes with the skew C, so C(Λᵀ X) = Λᵀ C Λ = C: the output has the
    input's C (and Λ), X = Λ Z, and the inverse is the layer at time −τ (seq 3: closed form, 4: solve)."""
    torch.manual_seed(2)
    layer = VolumePreservingAttention(3).double()
    with torch.no_grad():
        layer.weight.mul_(4)
    x = torch.randn(8, seq, 3, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, 0.0), x, rtol=0, atol=1e-15)  # ψ_0 = id
        for tau in (1.0, 0.5, -0.3):
            c, z = layer.correlation(x), layer(x, tau)
            lam = torch.linalg.solve(torch.eye(seq, dtype=x.dtype) + tau * c, torch.eye(seq, dtype=x.dtype) - tau * c,
                                     left=False)  # (I − τC)(I + τC)⁻¹
            torch.testing.assert_close(lam.mT @ lam, torch.eye(seq, dtype=x.dtype).expand_as(lam), rtol=0, atol=1e-13)
            torch.testing.assert_close(lam @ c, c @ lam, rtol=0, atol=1e-12)  # commutes with C
            torch.testing.assert_close(z, lam.mT @ x, rtol=1e-13, atol=1e-13)
            scale = float(c.abs().max())
            assert float((layer.correlation(z) - c).abs().max()) <= 1e-14 * max(1.0, scale)  # the invariance
            torch.testing.assert_close(layer.inverse(z, tau), x, rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(layer.inverse(z, tau), lam @ z, rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(layer.inverse(z, tau), layer(z, -tau), rtol=0, atol=0)


def test_arbitrary_attention_does_not_keep_its_correlation_and_has_no_inverse():
    torch.manual_seed(2)
    layer = VolumePreservingAttention(3, skew_sym=False).double()
    x = torch.randn(8, 3, 3, dtype=torch.float64)
    with torch.no_grad():
        assert float((layer.correlation(layer(x)) - layer.correlation(x)).abs().max()) > 1e-3
    with pytest.raises(VPIntegratorError, match="only the skew variant"):
        layer.inverse(x)


# --- the models ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vpff", "vpt"])
def test_symmetric_model_is_reversible_and_keeps_every_claim(name):
    plain, sym = _pair(name, **SMALL[name])
    assert model_preserves(sym) == ("volume", "symmetric") and model_preserves(plain) == ("volume",)
    # Φ_{−1} ∘ Φ_1 = id to rounding: 3.6e-12 for the VPT on one x86 machine, under 1e-12 on another (the BLAS
    # kernels a CPU picks round differently), against O(1) for the plain composition below
    assert set(assert_preserves(sym, atol=1e-10)) == {"volume", "symmetric"}
    assert assert_symmetric(sym, atol=1e-10) < 1e-10
    with pytest.raises(AssertionError, match="is not symmetric"):
        assert_symmetric(plain)  # the plain composition of the same layers is not
    assert_volume_preserving(sym, atol=1e-12, method="chain")
    # the whole map's Jacobian (rounding ~ eps·cond(J)) at windows of states on the unit sphere, the data's domain
    x = torch.nn.functional.normalize(torch.randn(32, sym.seq_len, 3, dtype=torch.float64), dim=-1)
    assert_volume_preserving(sym, x, atol=1e-11, method="full")
    x = torch.randn(5, sym.seq_len, 3, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(sym.inverse(sym(x)), x, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(sym(sym.inverse(x)), x, rtol=1e-12, atol=1e-12)
        assert_ulp_close(sym(x[0]).numpy(), sym(x)[0].numpy(), ulps=16)  # one window: another shape, a few ulp
        torch.testing.assert_close(sym.evolve(x, 1.0), sym(x), rtol=0, atol=0)
        torch.testing.assert_close(sym.evolve(x, 0.0), x, rtol=0, atol=1e-15)
        # the palindrome by hand: the layers' inverses at −1/2, last first, then the layers at 1/2
        layers = sym._flow_layers()
        y = x
        for layer in reversed(layers):
            y = layer.inverse(y, -0.5)
        for layer in layers:
            y = layer(y, 0.5)
        torch.testing.assert_close(sym(x), y, rtol=1e-14, atol=1e-14)
        # the plain model: unchanged, and evolve(x, 1) is its forward
        torch.testing.assert_close(plain.evolve(x, 1.0), plain(x), rtol=0, atol=0)
        torch.testing.assert_close(plain.inverse(plain(x)), x, rtol=1e-12, atol=1e-12)
    assert [n for n, _ in sym.named_parameters()] == [n for n, _ in plain.named_parameters()]


def test_symmetric_model_gradients_are_autograds():
    _, sym = _pair("vpt", seq_len=3, L=1, n_blocks=1)
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sym, (x,))
    _, ff = _pair("vpff", n_blocks=1)
    assert torch.autograd.gradcheck(ff, (torch.randn(2, 1, 3, dtype=torch.float64, requires_grad=True),))


def test_paper_vpt_symmetric_to_its_conditioning():
    """The paper VPT (L 3, n_blocks 2) palindrome: 66 shears and 6 attentions. At its random initialisation
    some N(0, 1) windows have cond(J) ~ 1e11, where round-off alone is ~1e-9; the claims hold to that."""
    _, sym = _pair("vpt")
    assert assert_symmetric(sym, atol=1e-8) < 1e-8
    assert_volume_preserving(sym, atol=1e-10, method="chain")
    x = torch.nn.functional.normalize(torch.randn(32, 3, 3, dtype=torch.float64), dim=-1)  # on the sphere
    with torch.no_grad():
        torch.testing.assert_close(sym.evolve(sym(x), -1.0), x, rtol=0, atol=1e-9)


def test_symmetric_flag_is_checked_and_recorded_and_the_arbitrary_attention_refused():
    with pytest.raises(VPIntegratorError, match=r"symmetric: .*skew_sym=true"):
        vp.build_model("vpt", dim=3, skew_sym=False, symmetric=True)
    with pytest.raises(VPIntegratorError, match="symmetric: expected true or false"):
        vp.build_model("vpff", dim=3, symmetric=1)
    assert vp.build_model("vpt", dim=3).config["symmetric"] is False
    assert vp.build_model("vpff", dim=3, symmetric=True).config["symmetric"] is True
    assert model_preserves("vpt", symmetric=True) == ("volume", "symmetric")
    assert model_preserves("vpt", skew_sym=False) == ()


@pytest.mark.parametrize("name", ["vpff", "vpt"])
def test_symmetric_model_file_round_trip(name, tmp_path):
    _, sym = _pair(name, **SMALL[name])
    path = save_model(sym, tmp_path / "m.pt")
    loaded = load_model(path).double()
    assert loaded.config["symmetric"] is True and "symmetric" in loaded.preserves
    rebuilt = vp.build_model(**sym.config)
    assert rebuilt.config == sym.config
    x = torch.randn(4, sym.seq_len, 3, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), sym(x), rtol=0, atol=0)


def test_without_attention_keeps_the_palindrome():
    _, sym = _pair("vpt", **SMALL["vpt"])
    ablated = without_attention(sym)
    assert ablated.config["symmetric"] is True
    assert assert_symmetric(ablated, atol=1e-12) < 1e-12
    assert_preserves(ablated, atol=1e-12)


def test_symmetric_model_rolls_out_with_the_numba_kernel():
    from vpintegrator.rollout import ModelStep, rollout
    from vpintegrator.rollout.numba_model import AVAILABLE, pack

    _, sym = _pair("vpt", **SMALL["vpt"])
    # the kernel runs the palindrome: half-time members and the layers' explicit inverses (one op per step)
    assert (pack(sym) is not None) is AVAILABLE
    w0 = np.random.default_rng(0).normal(size=(1, 3, 3))
    step = ModelStep(sym, device="cpu")
    y = rollout(step, w0, 0.2, 9).y  # 3 calls of the window model
    assert (step.describe()["runner"] == "numba") is AVAILABLE
    with torch.no_grad():
        w = torch.as_tensor(w0)
        expected = [w]
        for _ in range(3):
            w = sym(w)
            expected.append(w)
    np.testing.assert_allclose(y[0], torch.cat(expected, dim=1)[0, :10].numpy(), rtol=1e-12, atol=1e-12)


def test_gml_weights_refuse_symmetric():
    from pathlib import Path

    gml = Path(__file__).resolve().parent / "data" / "gml" / "transformer_rigid_body_nn_vpff.h5"
    with pytest.raises(VPIntegratorError, match="GML has no symmetric"):
        load_model(f"gml:{gml}?symmetric=true")
    assert load_model(f"gml:{gml}").config["symmetric"] is False


@pytest.mark.parametrize("model", [{"name": "vpt", "seq_len": 3, "L": 1, "n_blocks": 1, "symmetric": True},
                                   {"name": "vpff", "n_blocks": 1, "symmetric": True}])
def test_fit_trains_a_symmetric_model(tiny_data, tmp_path, model):
    from vpintegrator.data.windows import load_trajectories
    from vpintegrator.training import fit

    traj = load_trajectories([tiny_data])
    result = fit(model=model, train=traj, out=tmp_path / "run", epochs=2, batch_size=32, lr=3e-3, dtype="float64",
                 device="cpu", seed=5, init_scale=0.1)
    assert len(result.history) == 2 and all(np.isfinite(r["train_loss"]) for r in result.history)
    trained = load_model(tmp_path / "run")
    assert trained.config["symmetric"] is True
    assert assert_symmetric(trained, atol=1e-12) < 1e-12
    assert_preserves(trained, atol=1e-12)
