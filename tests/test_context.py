"""Context-conditioned models (issue 34): structure for every fixed context, the encoders, the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vpintegrator as vp
from vpintegrator.models.context import (
    AttentionEncoder,
    ContextModel,
    finite_difference_context,
    parameter_features,
)
from vpintegrator.nn.conditioned import ConditionedGradientLayer, ConditionedLiePoissonLayer, ConditionedShear
from vpintegrator.testing import assert_preserves, audit_casimir, audit_symplectic, audit_volume

CTX_MODELS = [("lpnet_ctx", 3), ("g_sympnet_ctx", 4), ("vpff_ctx", 3)]


@pytest.mark.parametrize("encoder", ["finite_difference", "attention"])
@pytest.mark.parametrize("name,dim", CTX_MODELS)
def test_every_claim_holds_for_several_fixed_contexts(name, dim, encoder):
    torch.manual_seed(1)
    model = vp.build_model(name, dim=dim, encoder=encoder)
    gen = torch.Generator().manual_seed(0)
    for scale in (0.1, 1.0, 5.0):
        c = torch.randn(model.context_dim, generator=gen, dtype=torch.float64) * scale
        errors = assert_preserves(model, atol=1e-10, context=c)
        assert set(errors) == set(model.preserves)


def test_the_audit_sees_a_layer_that_breaks_the_structure_through_the_context():
    class Leaky(torch.nn.Module):  # a rotation whose length is scaled by the context: not Casimir-exact
        def forward(self, x, c):
            return x * (1.0 + 1e-3 * torch.tanh(c.sum()))

    model = vp.build_model("lpnet_ctx", dim=3).double()
    model.layers.append(Leaky())
    with pytest.raises(AssertionError, match="casimir|volume"):
        assert_preserves(model, atol=1e-10, context=torch.ones(3, dtype=torch.float64))


def test_conditioned_layers_keep_their_structure_per_context():
    torch.manual_seed(0)
    c = torch.randn(7, 2, dtype=torch.float64)
    x = torch.randn(7, 1, 3, dtype=torch.float64)
    lp = ConditionedLiePoissonLayer(width=4, context_dim=2).double()
    y = lp(x, c)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-14)  # a rotation per state
    torch.testing.assert_close(lp.inverse(y, c), x, rtol=0, atol=1e-13)
    assert not torch.allclose(lp(x, c), lp(x, c + 1.0))  # the context changes the map
    for layer, audit in ((ConditionedShear(3, 2, lower=False).double(), audit_volume),
                         (ConditionedGradientLayer(4, 6, 2, side="q").double(), audit_symplectic)):
        bound = _Bind(layer, torch.randn(2, dtype=torch.float64), layer.dim)
        assert audit(bound, n=8, method="full").max_error < 1e-12


class _Bind(torch.nn.Module):
    def __init__(self, layer, c, dim):
        super().__init__()
        self.layer, self.c, self.dim, self.seq_len, self.pred_window = layer, c, dim, 1, 1

    def forward(self, x):
        return self.layer(x, self.c)


def _rigid_body_prefix(inertia, k, h=0.2, n=4, seed=0):
    sys = vp.get_system("rigid_body", inertia=tuple(inertia))
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return sys, vp.data.solve_flow(sys, y0, h * np.arange(k))


@pytest.mark.parametrize("system,theta_fn", [
    ("rigid_body", lambda s: np.array(s.coefficients)),
    ("coupled_oscillator", lambda s: np.array([1 / s.m[0], 1 / s.m[1], s.k1, s.k2, s.k])),
])
def test_parameter_features_give_the_vector_field(system, theta_fn):
    sys = vp.get_system(system)
    z = np.random.default_rng(0).normal(size=(6, sys.dim))
    F = parameter_features(system, torch.as_tensor(z)).numpy()  # (6, dim, p)
    np.testing.assert_allclose(F @ theta_fn(sys), sys.vector_field(z), rtol=1e-13, atol=1e-13)


def test_finite_difference_context_is_h_theta_to_second_order():
    inertia = (0.7, 2.5, 1.3)
    errs = []
    for h in (0.1, 0.05):
        sys, prefix = _rigid_body_prefix(inertia, 3, h=h)
        c = finite_difference_context("rigid_body", torch.as_tensor(prefix)).numpy()  # (n, 3)
        errs.append(np.abs(c / h - np.array(sys.coefficients)).max())
    assert errs[0] < 0.05
    assert 3.0 < errs[0] / errs[1] < 5.0  # O(h²)


def test_forward_is_the_steps_with_the_windows_context():
    torch.manual_seed(0)
    model = vp.build_model("lpnet_ctx", dim=3, context_len=4, pred_window=3).double()
    x = torch.randn(5, 4, 3, dtype=torch.float64)
    out = model(x)
    c = model.encode(x)
    z = x[:, -1:]
    for j in range(3):
        z = model.step(z, c)
        torch.testing.assert_close(out[:, j : j + 1], z, rtol=0, atol=0)
    assert isinstance(model, ContextModel) and model.oracle_ready
    assert not vp.build_model("lpnet_ctx", dim=3, encoder="attention").oracle_ready


def test_attention_encoder_reads_positions():
    torch.manual_seed(0)
    enc = AttentionEncoder(3, 3, 4).double()
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    assert enc(x).shape == (2, 4)
    assert not torch.allclose(enc(x), enc(x.flip(1)))  # order matters (finite differences need it)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="lpnet_ctx", dim=4), "dim must be 3"),
    (dict(name="lpnet_ctx", dim=3, context_len=2), "at least 3"),
    (dict(name="vpff_ctx", dim=4, system="rigid_body"), "has dim 3"),
    (dict(name="vpff_ctx", dim=4, encoder="magic"), "encoder"),
    (dict(name="vpff_ctx", dim=5, system="volterra"), "finite-difference encoder knows"),
])
def test_bad_configurations_are_one_line_errors(kwargs, match):
    with pytest.raises(vp.VPIntegratorError, match=match):
        vp.build_model(**kwargs)


def test_context_is_refused_for_a_plain_model():
    with pytest.raises(vp.VPIntegratorError, match="not a context model"):
        assert_preserves(vp.build_model("lpnet", dim=3), context=torch.zeros(3))


def test_casimir_audit_of_the_bound_model_directly():
    model = vp.build_model("lpnet_ctx", dim=3).double()
    assert audit_casimir(model.bind(torch.tensor([0.1, -0.3, 0.2], dtype=torch.float64))).max_error < 1e-13
