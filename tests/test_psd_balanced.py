"""The balanced cotangent lift (``fit_psd(..., method="balanced_cotangent_lift")``): the lift of the SVD of
``[Q / |Q|_F, P / |P|_F]``, checked against an SVD written out here, against the plain lift, and on the Toda bump
family, whose momenta are small beside its positions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from vpintegrator.data import integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction import PSDGalerkin, fit_bond_sampling, fit_psd, psd_floor

BALANCED = "balanced_cotangent_lift"
N = 40


def _j(k: int) -> np.ndarray:
    return np.block([[np.zeros((k, k)), np.eye(k)], [-np.eye(k), np.zeros((k, k))]])


def _independent_phi(snaps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The balanced lift written out: norms by hand, LAPACK's gesvd on the N x 2m matrix [Q/|Q|, P/|P|]."""
    q, p = snaps[:, :N].T, snaps[:, N:].T  # N x m each
    q_norm, p_norm = np.sqrt(np.sum(q * q)), np.sqrt(np.sum(p * p))
    u, s, _ = scipy.linalg.svd(np.hstack([q / q_norm, p / p_norm]), full_matrices=False, lapack_driver="gesvd")
    return u[:, :k], s


def _same_columns_up_to_sign(a: np.ndarray, b: np.ndarray, atol: float) -> None:
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, rtol=0, atol=atol)


def test_orthonormal_and_symplectic(toda_data):
    _, train, test = toda_data
    basis = fit_psd(train, 16, BALANCED)
    a = basis.matrix()
    assert basis.method == BALANCED and basis.is_lift and a.shape == (2 * N, 16)
    np.testing.assert_allclose(a.T @ a, np.eye(16), rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.T @ _j(N) @ a, _j(8), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(a[:N, 8:], 0.0)  # diag(Phi, Phi)
    np.testing.assert_array_equal(a[:N, :8], a[N:, 8:])
    y = test.y[:, -1]
    np.testing.assert_allclose(basis.encode(y), y @ a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(basis.project(y), y @ a @ a.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("reduced_dim", [4, 16, 32])
def test_equals_an_independent_svd_of_the_normalised_matrix(toda_data, reduced_dim):
    _, train, test = toda_data
    snaps = train.y.reshape(-1, 2 * N)
    basis = fit_psd(train, reduced_dim, BALANCED)
    phi, s = _independent_phi(snaps, reduced_dim // 2)
    _same_columns_up_to_sign(basis.phi, phi, atol=1e-10)
    np.testing.assert_allclose(basis.singular_values, s, rtol=0, atol=1e-10)
    assert basis.scales == pytest.approx((np.linalg.norm(snaps[:, :N]), np.linalg.norm(snaps[:, N:])), rel=1e-13)
    y = test.y[:, -1]  # the floor of the lift of phi, written out
    rq, rp = y[:, :N] - y[:, :N] @ phi @ phi.T, y[:, N:] - y[:, N:] @ phi @ phi.T
    want = np.sqrt(np.sum(rq**2, axis=-1) + np.sum(rp**2, axis=-1)) / np.linalg.norm(y, axis=-1)
    np.testing.assert_allclose(psd_floor(basis, y), want, rtol=0, atol=1e-10)


def test_with_equal_norms_it_is_the_plain_lift(toda_data):
    _, train, _ = toda_data
    snaps = np.array(train.y.reshape(-1, 2 * N))
    snaps[:, N:] *= np.linalg.norm(snaps[:, :N]) / np.linalg.norm(snaps[:, N:])  # |Q|_F = |P|_F
    plain, balanced = fit_psd(snaps, 12), fit_psd(snaps, 12, BALANCED)
    _same_columns_up_to_sign(balanced.phi, plain.phi, atol=1e-10)
    np.testing.assert_allclose(balanced.singular_values * np.linalg.norm(snaps[:, :N]), plain.singular_values,
                               rtol=1e-12)


def _part_floor(basis, y: np.ndarray, part: slice) -> float:
    """The median over states of the floor of one half (positions or momenta): |x - Phi Phi^T x| / |x|."""
    x = y[:, part]
    return float(np.median(np.linalg.norm(x - x @ basis.phi @ basis.phi.T, axis=-1) / np.linalg.norm(x, axis=-1)))


def test_lower_momentum_floor_on_held_out_data_where_momenta_are_small(toda_data):
    _, train, test = toda_data
    snaps = train.y.reshape(-1, 2 * N)
    q_norm, p_norm = np.linalg.norm(snaps[:, :N]), np.linalg.norm(snaps[:, N:])
    assert p_norm < 0.25 * q_norm  # the case: p0 = 0, the momenta stay small
    y = test.y[:, -1]  # held-out mu at T = 30
    for reduced_dim in (4, 8, 16):
        plain, balanced = fit_psd(train, reduced_dim), fit_psd(train, reduced_dim, BALANCED)
        p_plain, p_balanced = _part_floor(plain, y, slice(N, None)), _part_floor(balanced, y, slice(N, None))
        assert p_balanced < 0.95 * p_plain, (reduced_dim, p_balanced, p_plain)


def test_zero_momenta_or_positions_refused_in_one_line(toda_data):
    _, train, _ = toda_data
    starts = train.y[:, 0]  # the bump family starts at rest: p0 = 0
    for snaps, part in ((starts, "momenta"), (np.concatenate([np.zeros_like(starts[:, :N]), starts[:, :N]], -1),
                                              "positions")):
        with pytest.raises(VPIntegratorError, match=f"balanced_cotangent_lift.*{part} are all zero; use "
                                                    "method='cotangent_lift'") as info:
            fit_psd(snaps, 4, BALANCED)
        assert "\n" not in str(info.value)
    assert fit_psd(starts, 2).method == "cotangent_lift"  # the plain lift takes them


def test_galerkin_and_hyper_reduction_on_the_balanced_lift(toda_data):
    system, train, test = toda_data
    basis = fit_psd(train, 16, BALANCED)
    reduced = PSDGalerkin(system, basis)
    assert reduced.separable and reduced.lattice_lift() is not None
    a = basis.matrix()
    z0 = basis.encode(test.y[:3, 0])
    np.testing.assert_allclose(reduced.vector_field(z0), system.vector_field(z0 @ a.T) @ a, rtol=0, atol=1e-13)
    fast = integrate(reduced, z0, 0.4, 60, method="stormer_verlet")
    slow = integrate(reduced, z0, 0.4, 60, method="stormer_verlet", compiled=False)
    assert fast.meta["runner"] == "numba"
    np.testing.assert_allclose(fast.y, slow.y, rtol=0, atol=1e-12)
    sampling = fit_bond_sampling(system, basis, train, tol=1e-3)
    hyper = integrate(PSDGalerkin(system, basis, sampling), z0, 0.4, 60, method="stormer_verlet").y
    assert np.max(np.abs(hyper - fast.y)) < 1e-2 * np.max(np.abs(fast.y))
