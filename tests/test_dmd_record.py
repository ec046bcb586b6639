"""The delay DMD row's record (issue 88, item 5): its eigenvalues always, its exact DMD modes up to
``MAX_RECORDED`` numbers, and a line saying the fit is centred; held against the operator A_r written out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpintegrator.rollout import DelayDMDStep
from vpintegrator.models.memory import CENTRED, MAX_RECORDED

pytestmark = pytest.mark.usefixtures("one_thread")


def _data(n=12, K=40, k=2, seed=0):
    """Noisy damped rotations: every delay rank carries signal."""
    rng = np.random.default_rng(seed)
    th, rho = 0.3, 0.97
    R = rho * np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    y = np.zeros((n, K, k))
    y[:, 0] = rng.normal(size=(n, k))
    for t in range(1, K):
        y[:, t] = y[:, t - 1] @ R.T + 0.5 + 1e-2 * rng.normal(size=(n, k))
    return y


def _operator(train, T, r):
    """A_r = Y_cᵀ U_r Σ_r⁻¹ V_rᵀ of the centred delay vectors, written out (p × p)."""
    n, K, _ = train.shape
    X = np.array([train[i, s:s + T].ravel() for i in range(n) for s in range(K - T)])
    Y = np.array([train[i, s + 1:s + T + 1].ravel() for i in range(n) for s in range(K - T)])
    U, s, Vt = np.linalg.svd(X - X.mean(0), full_matrices=False)
    return (Y - Y.mean(0)).T @ U[:, :r] @ np.diag(1 / s[:r]) @ Vt[:r]


@pytest.mark.parametrize("r", [2, 3, 6])
def test_the_recorded_eigenvalues_and_modes_are_those_of_the_dmd_operator(r):
    train = _data()
    step = DelayDMDStep(train, context_len=3, ranks=r)
    info = step.describe() if step.fit_now() is not None else {}
    lam = np.array([complex(a, b) for a, b in json.loads(info["memory_dmd_eigenvalues"])])
    modes = json.loads(info["memory_dmd_modes"])
    phi = np.array(modes["re"]) + 1j * np.array(modes["im"])
    A = _operator(train, 3, r)
    ref = np.linalg.eigvals(A)
    ref = ref[np.argsort(-np.abs(ref), kind="stable")][:r]  # A_r has rank r: its other p - r eigenvalues are 0
    assert lam.shape == (r,) and phi.shape == (6, r)
    np.testing.assert_allclose(np.sort_complex(lam), np.sort_complex(ref), atol=1e-9)
    assert np.all(np.diff(np.abs(lam)) <= 1e-12)  # largest |λ| first
    np.testing.assert_allclose(np.linalg.norm(phi, axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(A @ phi, phi * lam, atol=1e-9)  # each an eigenvector of A_r: the exact DMD mode
    assert info["memory_dmd_centred"] == CENTRED and "PyDMD" in CENTRED


def test_a_long_window_keeps_its_eigenvalues_and_drops_the_modes_above_the_bound():
    T = 24
    train = _data(n=30, K=80)
    step = DelayDMDStep(train, context_len=T, ranks=2 * T)
    step.fit_now()
    info = step.describe()
    assert 2 * (2 * T) ** 2 > MAX_RECORDED  # the modes would be 4 608 numbers
    assert "memory_dmd_modes" not in info and "memory_coefficients" not in info
    lam = json.loads(info["memory_dmd_eigenvalues"])
    assert len(lam) == 2 * T and all(np.isfinite(v).all() for v in lam)
    assert info["memory_dmd_centred"] == CENTRED
