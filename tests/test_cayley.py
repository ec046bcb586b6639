"""Cayley transform: fast paths against the slow per-sample reference, orthogonality, gradients."""

from __future__ import annotations

import pytest
import torch

from vpintegrator.errors import VPIntegratorError
from vpintegrator.nn import CAYLEY_METHODS, cayley, cayley_method, get_cayley_method

ALLCLOSE = {torch.float32: 1e-5, torch.float64: 1e-12}


def random_skew(n: int, T: int, dtype=torch.float64, scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    M = torch.randn(n, T, T, generator=gen, dtype=torch.float64) * scale
    return (M - M.mT).to(dtype)  # (n, T, T)


def reference(C: torch.Tensor) -> torch.Tensor:
    """Obviously correct: (I − C) inv(I + C), one sample at a time, in float64."""
    eye = torch.eye(C.shape[-1], dtype=torch.float64)
    return torch.stack([(eye - c) @ torch.linalg.inv(eye + c) for c in C.double()])


def method_and_size(sizes):
    """(T, method) pairs; the closed form covers T <= 5."""
    return [(T, m) for T in sizes for m in CAYLEY_METHODS if not (m == "closed" and T > 5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("T, method", method_and_size([1, 2, 3, 4, 5, 6]))
def test_batched_matches_per_sample_reference(T, method, dtype):
    C = random_skew(64, T, dtype, scale=0.7, seed=T)
    got = cayley(C, method)
    assert got.dtype == dtype and got.shape == C.shape
    # scale of the entries is O(1); float32 rounding amplified by cond(I + C) ~ 10
    tol = 10 * ALLCLOSE[dtype] if dtype == torch.float32 else 100 * ALLCLOSE[dtype]
    torch.testing.assert_close(got.double(), reference(C), rtol=0, atol=tol)


@pytest.mark.parametrize("T, method", method_and_size([2, 3, 4, 5, 7]))
def test_orthogonal_with_det_one(T, method):
    C = random_skew(128, T, scale=3.0)
    lam = cayley(C, method)
    eye = torch.eye(T, dtype=torch.float64)
    torch.testing.assert_close(lam.mT @ lam, eye.expand_as(lam), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.linalg.det(lam), torch.ones(128, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5])
def test_gradcheck_closed_form(T):
    C = random_skew(2, T, scale=0.8, seed=10 + T)
    lower = torch.tril(C, -1).requires_grad_()
    # differentiate through the public entry (only the strictly lower triangle is read)
    assert torch.autograd.gradcheck(lambda L: cayley(L - L.mT, "closed"), (lower,), eps=1e-6, atol=1e-8)


def test_gradgradcheck_closed_form_paper_seq_len():
    lower = torch.tril(random_skew(1, 3, scale=0.8), -1).requires_grad_()
    assert torch.autograd.gradgradcheck(
        lambda L: cayley(L - L.mT, "closed"), (lower,), eps=1e-6, atol=1e-7, fast_mode=True
    )


@pytest.mark.parametrize("T", [3, 6])
def test_gradcheck_solve(T):
    C = random_skew(3, T, scale=0.8, seed=20 + T).requires_grad_()
    assert torch.autograd.gradcheck(lambda c: cayley(c, "solve"), (C,), eps=1e-6, atol=1e-8)


def test_closed_form_reads_only_the_strict_lower_triangle():
    C = random_skew(16, 4)
    noise = torch.triu(torch.randn(16, 4, 4, dtype=torch.float64))  # diagonal and upper part
    torch.testing.assert_close(cayley(C + noise, "closed"), cayley(C, "closed"), rtol=0, atol=0)


def test_cayley_is_exactly_its_definition_for_non_skew_input_with_solve():
    gen = torch.Generator().manual_seed(3)
    C = 0.3 * torch.randn(8, 4, 4, generator=gen, dtype=torch.float64)  # arbitrary, I + C invertible
    torch.testing.assert_close(cayley(C, "solve"), reference(C), rtol=0, atol=1e-12)


def test_context_manager_switches_and_restores():
    assert get_cayley_method() == "auto"
    with cayley_method("inv"):
        assert get_cayley_method() == "inv"
        with pytest.raises(RuntimeError):
            with cayley_method("solve"):
                raise RuntimeError("boom")
        assert get_cayley_method() == "inv"
    assert get_cayley_method() == "auto"


def test_errors_are_clear():
    with pytest.raises(VPIntegratorError, match="expected one of auto, closed, solve, inv, got 'fast'"):
        cayley(torch.zeros(2, 3, 3), "fast")
    with pytest.raises(VPIntegratorError, match="shape"):
        cayley(torch.zeros(2, 3, 4))
    with pytest.raises(VPIntegratorError, match="T <= 5"):
        cayley(torch.zeros(2, 6, 6), "closed")
    with pytest.raises(VPIntegratorError, match="expected one of"):
        with cayley_method("nope"):
            pass


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["closed", "solve", "inv"])
def test_cuda_matches_cpu(method):
    # float64: CUDA's solve/inverse (cuSOLVER/MAGMA) and the closed form's kernels round in another order than
    # LAPACK and the CPU loops, ~1e-16 relative on these well-conditioned 3x3 systems; atol 1e-12 leaves ~1e4
    # ulps of room and still catches a wrong formula or a float32 step
    C = random_skew(32, 3)
    torch.testing.assert_close(cayley(C.cuda(), method).cpu(), cayley(C, method), rtol=0, atol=1e-12)
