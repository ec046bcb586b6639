"""Lie–Poisson networks (issue 21 items 1 and 3): exact flows, Casimir and Poisson audits, every claim tested."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import count_parameters, list_models, model_preserves, without_attention
from vpintegrator.nn import LiePoissonCoupling, LiePoissonLayer
from vpintegrator.nn.lie_poisson import rotate_about
from vpintegrator.testing import assert_preserves, attention_coupling, audit_casimir, audit_poisson

DIMS = {"la_sympnet": 4, "g_sympnet": 4, "symplectic_transformer": 4, "g_sympnet_ctx": 4, "hnn": 4}


@pytest.mark.parametrize("name", list_models())
def test_every_claim_of_every_architecture_holds_in_float64(name):
    torch.manual_seed(0)
    model = vp.build_model(name, dim=DIMS.get(name, 3))
    claims = model_preserves(model)
    errors = assert_preserves(model, atol=1e-10)
    assert set(errors) == set(claims)


def test_claims_follow_the_configuration():
    assert model_preserves("vpt") == ("volume",) and model_preserves("vpt", skew_sym=False) == ()
    assert model_preserves("symplectic_transformer", attention_activation="vector_softmax") == ()
    assert model_preserves("st") == ()
    assert set(model_preserves("lpnet")) == set(model_preserves("lp_transformer")) == {"volume", "casimir", "poisson"}


def test_audits_fail_where_the_structure_is_not_kept():
    torch.manual_seed(0)
    vpt = vp.build_model("vpt", dim=3)  # volume preserving, but neither Casimir-exact nor Poisson
    assert audit_casimir(vpt).max_error > 1e-3
    assert audit_poisson(vpt).max_error > 1e-3

    class Scaled(torch.nn.Module):  # a rotation and a tiny radial scaling: Casimir off by 2e-6
        dim, seq_len, pred_window = 3, 1, 1

        def __init__(self):
            super().__init__()
            self.inner = vp.build_model("lpnet", dim=3).double()

        def forward(self, x):
            return 1.000001 * self.inner(x)

    scaled = Scaled()
    assert audit_casimir(scaled).max_error == pytest.approx(2e-6, rel=1e-3)
    assert audit_poisson(scaled).max_error > 1e-7
    scaled.preserves = ("casimir",)
    with pytest.raises(AssertionError, match="claims 'casimir'"):
        assert_preserves(scaled)


def test_rotation_is_the_matrix_exponential():
    k = torch.tensor([0.48, -0.6, 0.64], dtype=torch.float64)
    z = torch.randn(7, 3, dtype=torch.float64)
    theta = torch.randn(7, dtype=torch.float64)
    K = torch.tensor([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]], dtype=torch.float64)
    expected = torch.stack([torch.linalg.matrix_exp(K * t) @ zi for t, zi in zip(theta, z)])
    torch.testing.assert_close(rotate_about(z, k, theta), expected, rtol=1e-13, atol=1e-13)


def _flow(rhs, x0):
    sol = solve_ivp(lambda _t, y: rhs(y), (0.0, 1.0), x0, method="Radau", rtol=1e-12, atol=1e-13)
    return sol.y[:, -1]


def _psi(layer, s):
    with torch.no_grad():
        return float(layer.psi(torch.tensor(s, dtype=torch.float64)))


def test_layer_is_the_time_one_flow_of_its_hamiltonian():
    """ż = z × ∇H with H = Ψ(k·z), ∇H = ψ(k·z) k, integrated by Radau from 0 to 1, equals the layer."""
    torch.manual_seed(3)
    layer = LiePoissonLayer(width=3).double()
    with torch.no_grad():
        layer.psi.w.mul_(10)  # angles of order 1, not the near-identity start
    k = (layer.axis / layer.axis.norm()).detach().numpy()
    for z0 in np.random.default_rng(0).normal(size=(3, 3)):
        exact = _flow(lambda z: np.cross(z, _psi(layer, float(k @ z)) * k), z0)
        got = layer(torch.tensor(z0).view(1, 1, 3)).detach().numpy().ravel()
        np.testing.assert_allclose(got, exact, rtol=1e-9, atol=1e-10)


def test_coupling_is_the_time_one_flow_on_the_product():
    """H(Z) = Ψ(Σ_j α_j k·z_j): ż_i = z_i × α_i ψ(s) k on (so(3)*)^3, integrated by Radau, equals the layer."""
    torch.manual_seed(4)
    layer = LiePoissonCoupling(seq_len=3, width=3).double()
    with torch.no_grad():
        layer.psi.w.mul_(10)
    k = (layer.axis / layer.axis.norm()).detach().numpy()
    alpha = layer.alpha.detach().numpy()

    def rhs(y):
        Z = y.reshape(3, 3)
        s = float(alpha @ (Z @ k))
        return np.concatenate([np.cross(Z[i], alpha[i] * _psi(layer, s) * k) for i in range(3)])

    Z0 = np.random.default_rng(1).normal(size=(3, 3))
    exact = _flow(rhs, Z0.ravel()).reshape(3, 3)
    got = layer(torch.tensor(Z0).unsqueeze(0)).detach().numpy()[0]
    np.testing.assert_allclose(got, exact, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", ["lpnet", "lp_transformer"])
def test_models_invert_pickle_take_one_window_and_check_input(name):
    torch.manual_seed(0)
    model = vp.build_model(name, dim=3).double()
    assert count_parameters(model) == {"lpnet": 128, "lp_transformer": 166}[name]
    x = torch.randn(4, model.seq_len, 3, dtype=torch.float64)
    torch.testing.assert_close(model.inverse(model(x)), x, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(model(x[0]), model(x)[0])
    clone = pickle.loads(pickle.dumps(model))
    torch.testing.assert_close(clone(x), model(x))
    with pytest.raises(VPIntegratorError, match="dim must be 3"):
        vp.build_model(name, dim=4)


def test_the_window_model_couples_states_and_its_coupling_can_be_removed():
    torch.manual_seed(0)
    model = vp.build_model("lp_transformer", dim=3).double()
    with torch.no_grad():
        for layer in model.layers:
            if isinstance(layer, LiePoissonCoupling):
                layer.psi.w.mul_(10)
    x = torch.randn(16, 3, 3, dtype=torch.float64)
    assert attention_coupling(model, x).median > 1e-3
    ablated = without_attention(model)
    assert attention_coupling(ablated, x).max == 0.0
    assert attention_coupling(vp.build_model("lpnet", dim=3, seq_len=1).double(), x[:, :1]).max == 0.0


def test_long_rollout_keeps_the_casimir_to_round_off():
    from vpintegrator.rollout import ModelStep, rollout

    torch.manual_seed(0)
    model = vp.build_model("lp_transformer", dim=3).double()
    w0 = np.random.default_rng(2).normal(size=(5, 3, 3))
    y = rollout(ModelStep(model, device="cpu"), w0, 0.2, 3000).y
    c = np.sum(y**2, axis=-1)
    c0 = np.sum(w0**2, axis=-1)  # each strand keeps the Casimir of its first state
    worst = max(float(np.abs(c[:, i::3] / c0[:, i : i + 1] - 1).max()) for i in range(3))
    assert worst < 1e-12


@pytest.mark.parametrize("name", ["lpnet", "lp_transformer"])
def test_symmetric_variant_is_reversible_and_keeps_every_claim(name):
    from vpintegrator.testing import assert_symmetric

    torch.manual_seed(0)
    plain = vp.build_model(name, dim=3).double()
    sym = vp.build_model(name, dim=3, symmetric=True).double()
    sym.load_state_dict(plain.state_dict())  # the same parameters, composed as a palindrome
    for m in (plain, sym):
        with torch.no_grad():
            for layer in m.layers:
                layer.psi.w.mul_(10)
    assert "symmetric" in model_preserves(sym) and "symmetric" not in model_preserves(plain)
    assert set(assert_preserves(sym)) == {"volume", "casimir", "poisson", "symmetric"}
    assert assert_symmetric(sym) < 1e-12
    with pytest.raises(AssertionError, match="is not symmetric"):
        assert_symmetric(plain)  # ψ(−h) ∘ ψ(h) ≠ id for the plain composition of the same layers
    x = torch.randn(4, sym.seq_len, 3, dtype=torch.float64)
    torch.testing.assert_close(sym.inverse(sym(x)), x, rtol=1e-12, atol=1e-12)
    # the palindrome by hand: L_n(τ/2) … L_1(τ/2) then L_1(τ/2) … L_n(τ/2)
    y = x
    for layer in [*reversed(list(sym.layers)), *sym.layers]:
        y = layer(y, 0.5)
    torch.testing.assert_close(sym(x), y, rtol=0, atol=0)


def test_assert_symmetric_needs_a_scaled_step():
    from vpintegrator.testing import assert_symmetric

    with pytest.raises(VPIntegratorError, match="has no evolve"):
        assert_symmetric(vp.build_model("st", dim=3))


@pytest.mark.parametrize("name, ensemble", [("lpnet", 1), ("lp_transformer", 1), ("lpnet", 2)])
def test_levenberg_marquardt_trains_the_lie_poisson_networks(tiny_data, tmp_path, name, ensemble):
    """LM's per-window Jacobian handles their 0-d parameters (ψ's bias d; it raised an IndexError once): the
    structure study trains them with LM, single runs and seed ensembles alike, to finite losses."""
    seq = 1 if name == "lpnet" else 3
    cfg = dict(data=[tiny_data], model={"name": name, "dim": 3, "seq_len": seq}, epochs=2, optimizer="lm",
               lm_windows=64, lm_iters_per_epoch=3, dtype="float64", val_fraction=0.2, test_fraction=0.0,
               ensemble=ensemble, out=str(tmp_path / "run"))
    vp.fit(cfg)
    runs = [r for r in (tmp_path / "run").rglob("log.csv")]
    assert len(runs) == ensemble
    for log in runs:
        rows = [line.split(",") for line in log.read_text().splitlines()[1:]]
        assert len(rows) == 2 and all(np.isfinite(float(r[1])) for r in rows)
