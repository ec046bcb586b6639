"""`without_attention` and `testing.attention_coupling` (issue 20, item 4): attention measured and ablated."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import constant_coupling, load_model, without_attention
from vpintegrator.nn.attention import MultiHeadAttention, VolumePreservingAttention
from vpintegrator.nn.symplectic_attention import SymplecticAttention
from vpintegrator.testing import attention_coupling, fd_jacobian

TRANSFORMERS = [("vpt", 3, {}), ("vpt", 3, {"skew_sym": False}), ("st", 3, {}), ("symplectic_transformer", 4, {})]
ATTENTION = (VolumePreservingAttention, SymplecticAttention, MultiHeadAttention)


def _model(name, dim, kw, seed=0):
    torch.manual_seed(seed)
    return vp.build_model(name, dim=dim, **kw).double()


def _chain_without_attention(model, x):
    """The model's layer chain with the attention layers skipped, composed by hand (independent of the copy)."""
    def leaves(m):
        if isinstance(m, ATTENTION):
            return []
        parts = list(m.window_chain()) if hasattr(m, "window_chain") else list(m) if isinstance(m, nn.Sequential) else None
        if parts is None:
            return [m]
        return [leaf for p in parts for leaf in leaves(p)]

    for layer in leaves(model):
        x = layer(x)
    return x


@pytest.mark.parametrize("name,dim,kw", TRANSFORMERS, ids=lambda v: str(v))
def test_without_attention_is_the_network_with_the_attention_skipped(name, dim, kw):
    model = _model(name, dim, kw)
    x = torch.randn(16, model.seq_len, dim, dtype=torch.float64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ablated = without_attention(model)
    torch.testing.assert_close(ablated(x), _chain_without_attention(model, x), rtol=1e-13, atol=1e-13)
    assert not torch.allclose(ablated(x), model(x))  # the attention did something before
    for k, v in model.state_dict().items():  # the original is untouched
        assert torch.equal(v, before[k]), k
    frozen = [p for n, p in ablated.named_parameters() if not p.requires_grad]
    assert frozen or name == "st"  # zeroed attention weights are frozen; the ST's attention is gone entirely
    assert all(float(p.abs().max()) == 0.0 for p in frozen)


@pytest.mark.parametrize("name,dim,kw", TRANSFORMERS, ids=lambda v: str(v))
def test_without_attention_advances_each_state_by_itself(name, dim, kw):
    ablated = without_attention(_model(name, dim, kw))
    x = torch.randn(8, ablated.seq_len, dim, dtype=torch.float64)
    perm = torch.tensor([2, 0, 1])
    torch.testing.assert_close(ablated(x[:, perm]), ablated(x)[:, perm], rtol=0, atol=1e-14)
    c = attention_coupling(ablated, x)
    assert c.max == 0.0 and c.median == 0.0


def test_without_attention_refuses_models_without_attention():
    with pytest.raises(VPIntegratorError, match="no attention layer"):
        without_attention(vp.build_model("vpff", dim=3))
    with pytest.raises(VPIntegratorError, match="model: expected a torch.nn.Module"):
        without_attention("vpt")


def test_without_attention_of_a_shipped_model_keeps_its_rollout_interface():
    model = load_model("pretrained:rigid_body_vpt")
    ablated = without_attention(model)
    assert ablated.config == model.config and ablated.seq_len == model.seq_len
    x = torch.randn(4, 3, 3, dtype=next(model.parameters()).dtype)
    # the shipped VPT's attention is nearly inert (issue 20): removing it moves one window by little
    with torch.no_grad():
        assert float((ablated(x) - model(x)).abs().max()) < 1e-2


class _Linear(nn.Module):
    """y = M x on windows of scalar states (dim 1): coupling known in closed form."""

    def __init__(self, M, seq_len):
        super().__init__()
        self.register_buffer("M", torch.as_tensor(M, dtype=torch.float64))
        self.dim, self.seq_len, self.pred_window = 1, seq_len, self.M.shape[0]

    def forward(self, x):
        return (x[..., 0] @ self.M.mT).unsqueeze(-1)


def test_attention_coupling_of_linear_maps_in_closed_form():
    c = attention_coupling(_Linear([[2.0, 1.0], [0.5, 4.0]], 2), torch.zeros(3, 2, 1))
    assert c.max == pytest.approx(0.5) and c.median == pytest.approx(0.5)  # max(|1|/|2|, |0.5|/|4|)
    # pred_window 1 < seq_len 3: the output advances the last input state
    c = attention_coupling(_Linear([[3.0, 0.0, -4.0]], 3), torch.zeros(2, 3, 1))
    assert c.max == pytest.approx(0.75)


@pytest.mark.parametrize("name,dim,kw", TRANSFORMERS[:1] + TRANSFORMERS[3:], ids=lambda v: str(v))
def test_attention_coupling_against_finite_differences(name, dim, kw):
    model = _model(name, dim, kw, seed=3)
    x = 0.5 * torch.randn(5, model.seq_len, dim, dtype=torch.float64)
    J = fd_jacobian(model, x).reshape(5, model.seq_len, dim, model.seq_len, dim)  # (n, i, a, j, b)
    blocks = J.permute(0, 1, 3, 2, 4).flatten(-2).norm(dim=-1)  # (n, i, j)
    diag = blocks.diagonal(dim1=1, dim2=2)
    cross = ((blocks**2).sum(-1) - diag**2).sqrt()
    expected = (cross / diag).amax(1)
    got = attention_coupling(model, x)
    torch.testing.assert_close(got.per_window.double(), expected, rtol=1e-6, atol=1e-9)
    assert got.median > 1e-3  # a fresh transformer's attention couples the states


def test_attention_coupling_is_zero_for_position_wise_models_and_checks_windows():
    vpff = vp.build_model("vpff", dim=3).double()
    assert attention_coupling(vpff, torch.randn(4, 1, 3)).max == 0.0
    with pytest.raises(VPIntegratorError, match=r"windows: expected shape \(n, seq_len, dim\) = \(n, 3, 3\)"):
        attention_coupling(vp.build_model("vpt", dim=3), torch.randn(4, 2, 3))
    with pytest.raises(VPIntegratorError, match="windows"):
        attention_coupling(vp.build_model("vpt", dim=3), torch.randn(0, 3, 3))
    assert "n_windows=4" in repr(attention_coupling(vpff, torch.randn(4, 1, 3)))


# --- constant_coupling: the Lie–Poisson transformer without cross-state information (issue 32, item 5) -------------
def _lp_transformer(seed=0):
    torch.manual_seed(seed)
    model = vp.build_model("lp_transformer", dim=3, seq_len=3, L=2, n_layers=2, width=4).double()
    with torch.no_grad():  # a coupling that matters: psi's weights well away from the near-identity start
        for name, p in model.named_parameters():
            if name.endswith("psi.w"):
                p.mul_(10.0)
    return model


def _sphere_windows(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 3, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def test_constant_coupling_removes_every_cross_state_dependence():
    model = _lp_transformer()
    windows = _sphere_windows(64)
    ablated = constant_coupling(model, windows)
    x = _sphere_windows(1, seed=2)[0].requires_grad_(True)  # (3, 3): one window
    jac = torch.autograd.functional.jacobian(lambda w: ablated(w[None])[0], x)  # (3, 3, 3, 3): out state, in state
    full = torch.autograd.functional.jacobian(lambda w: model(w[None])[0], x)
    for i in range(3):
        for j in range(3):
            if i != j:
                assert float(jac[i, :, j].abs().max()) == 0.0  # output state i does not depend on input state j
    assert max(float(full[i, :, j].abs().max()) for i in range(3) for j in range(3) if i != j) > 1e-3


def test_constant_coupling_keeps_the_casimir_and_the_original():
    model = _lp_transformer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ablated = constant_coupling(model, _sphere_windows(32))
    x = _sphere_windows(8, seed=3)
    torch.testing.assert_close(ablated(x).norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-14)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    frozen = [n for n, p in ablated.named_parameters() if not p.requires_grad]
    from vpintegrator.models.ablation import attention_layers
    couplings = [name for name, _ in attention_layers(model)]
    assert len(couplings) == 2
    assert sorted(frozen) == sorted(f"{c}.psi.{x}" for c in couplings for x in ("w", "d"))


def test_constant_coupling_uses_the_mean_of_psi_on_the_windows():
    model = _lp_transformer()
    windows = _sphere_windows(16)
    ablated = constant_coupling(model, windows)
    from vpintegrator.models.ablation import attention_layers
    first = attention_layers(model)[0][1]
    k = first.axis / first.axis.norm()
    expected = first.psi((windows @ k) @ first.alpha).mean()
    got = attention_layers(ablated)[0][1]
    assert float(got.psi.w.abs().max()) == 0.0
    torch.testing.assert_close(got.psi.d, expected.detach(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name,dim", [("vpt", 3), ("lpnet", 3)])
def test_constant_coupling_refuses_models_without_a_coupling(name, dim):
    with pytest.raises(VPIntegratorError, match="constant_coupling"):
        constant_coupling(vp.build_model(name, dim=dim).double(), _sphere_windows(4))


def test_attention_probe_reports_the_constant_coupling_for_lp_transformers(tmp_path):
    import numpy as np

    from vpintegrator.data import integrate, write_trajectories
    from vpintegrator.models import save_model
    from vpintegrator.studies import attention

    model = _lp_transformer()
    save_model(model, tmp_path / "lpt.pt")
    y0 = _sphere_windows(2, seed=5)[:, 0].numpy()  # (2, 3): two ICs on the unit sphere
    data = integrate("rigid_body", y0, dt=0.2, n_steps=30, method="gauss_legendre4")
    write_trajectories(tmp_path / "exact.h5", data)
    out = attention.probe(tmp_path / "lpt.pt", tmp_path / "exact.h5", n_traj=2, t_end=6.0, n_windows=4)
    assert out["error_constant_coupling"] is not None
    assert np.isfinite(out["error_constant_coupling"]["median"])
    assert out["error_constant_coupling"]["median"] != out["error_without_attention"]["median"]
    lines = attention.section([("lp_transformer", out)])
    assert "constant coupling" in "\n".join(lines)
    vpt = vp.build_model("vpt", dim=3).double()
    save_model(vpt, tmp_path / "vpt.pt")
    assert attention.probe(tmp_path / "vpt.pt", tmp_path / "exact.h5", n_traj=2, t_end=6.0)["error_constant_coupling"] is None
