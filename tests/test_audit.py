"""The structure-audit helpers in vpintegrator.testing."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import build_model
from vpintegrator.nn import VolumePreservingAttention, VolumePreservingLowerLayer
from vpintegrator.testing import (
    assert_volume_preserving,
    audit_volume,
    jacobian_slogdet,
    random_inputs,
    window_chain,
    window_jacobian,
)


class Scale(nn.Module):
    """x ↦ x · diag(factors) on (batch, seq, dim): det J = Π factors^seq."""

    def __init__(self, factors):
        super().__init__()
        self.dim = len(factors)
        self.factors = nn.Parameter(torch.tensor(factors, dtype=torch.float64))

    def forward(self, x):
        return x * self.factors


class Shrink(nn.Module):
    """Maps a window of length seq to seq − 1 states (not a square window map)."""

    dim = 2

    def forward(self, x):
        return x[:, 1:]


def test_jacobian_of_a_linear_map_is_exact():
    layer = Scale([2.0, 0.5, 3.0])
    x = random_inputs(layer, 4, seq=2)
    J = window_jacobian(layer, x)
    assert J.shape == (4, 6, 6)
    # row-by-row flattening: index = position·dim + component
    expected = torch.diag(torch.tensor([2.0, 0.5, 3.0] * 2, dtype=torch.float64))
    torch.testing.assert_close(J, expected.expand(4, 6, 6), rtol=0, atol=0)
    sign, logabsdet = jacobian_slogdet(layer, x)
    torch.testing.assert_close(logabsdet, torch.full((4,), 2 * math.log(3.0), dtype=torch.float64))


def test_jacobian_matches_finite_differences():
    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1, skew_sym=False).double()
    x = random_inputs(model, 1)
    J = window_jacobian(model, x)[0]
    eps = 1e-6
    flat = x.reshape(9)
    cols = []
    for j in range(9):
        e = torch.zeros(9, dtype=torch.float64)
        e[j] = eps
        plus = model((flat + e).reshape(1, 3, 3)).reshape(9)
        minus = model((flat - e).reshape(1, 3, 3)).reshape(9)
        cols.append((plus - minus) / (2 * eps))
    torch.testing.assert_close(J, torch.stack(cols, dim=1).detach(), rtol=1e-6, atol=1e-7)


def test_chain_and_full_agree_on_a_well_conditioned_model():
    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1, skew_sym=False).double()
    x = random_inputs(model, 16, scale=0.5)
    _, full = jacobian_slogdet(model, x, method="full")
    _, chain = jacobian_slogdet(model, x, method="chain")
    torch.testing.assert_close(full, chain, rtol=0, atol=1e-10)


def test_window_chain_expands_models_into_layers():
    vpt = build_model("vpt", dim=3, seq_len=3, n_blocks=2, L=3)
    leaves = window_chain(vpt)
    assert len(leaves) == 3 * (1 + 10)
    assert isinstance(leaves[0], VolumePreservingAttention)
    assert isinstance(leaves[1], VolumePreservingLowerLayer)
    layer = VolumePreservingAttention(3)
    assert window_chain(layer) == [layer]


def test_chain_that_does_not_reproduce_forward_is_an_error():
    class Liar(nn.Sequential):
        dim = 2

        def forward(self, x):
            return 2 * super().forward(x)

    model = Liar(Scale([1.0, 1.0]))
    with pytest.raises(VPIntegratorError, match="does not reproduce forward"):
        audit_volume(model, n=2, method="chain")


def test_assert_volume_preserving_message_names_worst_error_and_input():
    layer = Scale([1.0, 1.5])
    x = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]], dtype=torch.float64)
    with pytest.raises(AssertionError) as info:
        assert_volume_preserving(layer, x)
    message = str(info.value)
    assert "Scale is not volume preserving within atol=1e-10" in message
    assert "max |det J - 1| = 5.000e-01" in message
    assert "det J = 1.5" in message
    assert "[[3.0, 4.0]]" in message or "[[1.0, 2.0]]" in message


def test_audit_leaves_the_model_untouched_and_reports_statistics():
    torch.manual_seed(0)
    layer = VolumePreservingAttention(3)  # float32
    audit = audit_volume(layer, n=20, dtype=torch.float64)
    assert next(layer.parameters()).dtype == torch.float32
    assert audit.det.shape == (20,) and audit.inputs.shape == (20, 3, 3)
    assert audit.max_error <= 1e-10 and audit.median_error <= audit.max_error
    assert audit.worst_input.shape == (3, 3)


def test_audit_in_float32_uses_the_float32_tolerance():
    torch.manual_seed(0)
    assert_volume_preserving(VolumePreservingAttention(3), n=64, dtype=torch.float32, atol=1e-4)


def test_audit_under_no_grad_is_still_correct():
    torch.manual_seed(0)
    layer = VolumePreservingAttention(3).double()  # seq 7 takes the torch.linalg.solve path
    with torch.no_grad():
        assert_volume_preserving(layer, n=16, seq=7)


def test_non_square_window_map_and_bad_arguments_are_clear_errors():
    with pytest.raises(VPIntegratorError, match="window map must be square"):
        window_jacobian(Shrink(), torch.zeros(2, 3, 2))
    with pytest.raises(VPIntegratorError, match="inputs: expected shape"):
        window_jacobian(Scale([1.0]), torch.zeros(3, 1))
    with pytest.raises(VPIntegratorError, match="method: expected one of full, chain"):
        jacobian_slogdet(Scale([1.0]), torch.zeros(1, 1, 1), method="exact")
    with pytest.raises(VPIntegratorError, match="no integer attribute 'dim'"):
        random_inputs(nn.Identity())


@pytest.mark.gpu
def test_audit_on_cuda():
    # the audit's default atol 1e-10 holds on CUDA too: it takes the Jacobian in float64, where cuBLAS and the
    # CPU differ only in summation order (~1e-16 relative on a 9x9 determinant)
    torch.manual_seed(0)
    audit = assert_volume_preserving(VolumePreservingAttention(3), n=32, device="cuda")
    assert audit.det.is_cuda
