"""VP attention's limit (issue 34): X ↦ Λ(X)ᵀ X with Λ orthogonal keeps the window's Gram matrix Σ zᵢzᵢᵀ = XᵀX,
so it cannot produce the extrapolating mixing (z₁, z₂, z₃) ↦ (…, z₁ − 3z₂ + 3z₃) that in-context prediction
needs. (docs/context.md)"""

from __future__ import annotations

import pytest
import torch

import vpintegrator as vp
from vpintegrator.nn import VolumePreservingAttention


def _gram(x: torch.Tensor) -> torch.Tensor:
    return x.mT @ x  # (batch, dim, dim): Σ_i z_i z_iᵀ over the window's states


@pytest.mark.parametrize("skew_sym", [True, False])
@pytest.mark.parametrize("seq,dim", [(3, 3), (5, 3), (4, 6)])
def test_vp_attention_keeps_the_windows_gram_matrix(seq, dim, skew_sym):
    torch.manual_seed(0)
    layer = VolumePreservingAttention(dim, skew_sym=skew_sym).double()
    with torch.no_grad():
        layer.weight.mul_(3.0)  # far from the identity: strong mixing
    x = torch.randn(64, seq, dim, dtype=torch.float64)
    y = layer(x)
    assert (y - x).abs().max() > 0.1  # it does mix the states
    torch.testing.assert_close(_gram(y), _gram(x), rtol=0, atol=1e-12 * _gram(x).abs().max().item())


def test_a_vpt_window_map_keeps_the_gram_matrix_through_its_attention():
    torch.manual_seed(1)
    vpt = vp.build_model("vpt", dim=3).double()
    x = torch.randn(16, 3, 3, dtype=torch.float64)
    for unit in vpt.blocks:  # every attention of the paper's VPT, at its actual input
        y = unit.attention(x)
        torch.testing.assert_close(_gram(y), _gram(x), rtol=0, atol=1e-13 * _gram(x).abs().max().item())
        x = unit.feedforward(y)


def test_extrapolation_changes_the_gram_matrix_so_no_orthogonal_mixing_gives_it():
    t = torch.arange(4, dtype=torch.float64)
    traj = torch.stack([torch.ones(4), t, t**2 / 10], -1)  # a smooth path: z_4 = z_1 − 3z_2 + 3z_3 exactly
    window, target = traj[:3], traj[1:]
    mix = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, -3.0, 3.0]], dtype=torch.float64)
    torch.testing.assert_close(mix @ window, target)  # the mixing in-context prediction needs
    assert not torch.allclose(mix @ mix.T, torch.eye(3, dtype=torch.float64))  # not orthogonal
    assert (_gram(target) - _gram(window)).abs().max() > 0.1  # and no Gram-keeping map reaches the target
