"""Model reduction: PSD bases (cotangent lift, complex SVD), their floors, the PSD-Galerkin system."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from vpintegrator.data import integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction import PSDGalerkin, fit_psd, psd_floor
from vpintegrator.systems import get_system


def _j(k: int) -> np.ndarray:
    return np.block([[np.zeros((k, k)), np.eye(k)], [-np.eye(k), np.zeros((k, k))]])


def _independent_floor(train_y: np.ndarray, states: np.ndarray, k: int) -> np.ndarray:
    """The cotangent lift's floor written out: LAPACK's gesvd on [Q P], the projection q -> Phi Phi^T q."""
    n = train_y.shape[-1] // 2
    snaps = train_y.reshape(-1, 2 * n)
    matrix = np.hstack([snaps[:, :n].T, snaps[:, n:].T])  # N x 2m
    u = scipy.linalg.svd(matrix, full_matrices=False, lapack_driver="gesvd")[0][:, :k]
    out = []
    for y in states:
        q, p = y[:n], y[n:]
        rq, rp = q - u @ (u.T @ q), p - u @ (u.T @ p)
        out.append(np.sqrt(np.sum(rq**2) + np.sum(rp**2)) / np.sqrt(np.sum(y**2)))
    return np.array(out)


@pytest.mark.parametrize("reduced_dim", [4, 8, 16, 32])
def test_cotangent_lift_floor_equals_an_independent_svd(toda_data, reduced_dim):
    _, train, test = toda_data
    basis = fit_psd(train, reduced_dim)
    floors = psd_floor(basis, test.y[:, -1])
    np.testing.assert_allclose(floors, _independent_floor(train.y, test.y[:, -1], reduced_dim // 2), rtol=0,
                               atol=1e-10)


@pytest.mark.parametrize("method", ["cotangent_lift", "complex_svd"])
def test_basis_is_orthonormal_and_symplectic(toda_data, method):
    _, train, test = toda_data
    basis = fit_psd(train, 12, method)
    a = basis.matrix()
    assert a.shape == (80, 12)
    np.testing.assert_allclose(a.T @ a, np.eye(12), atol=1e-13)
    np.testing.assert_allclose(a.T @ _j(40) @ a, _j(6), atol=1e-13)
    y = test.y[:, -1]
    np.testing.assert_allclose(basis.encode(y), y @ a, atol=1e-13)
    np.testing.assert_allclose(basis.decode(basis.encode(y)), y @ a @ a.T, atol=1e-13)


def test_complex_svd_is_the_better_fit_on_its_snapshots(toda_data):
    _, train, _ = toda_data
    snaps = train.y.reshape(-1, 80)
    for k in (2, 4, 8):
        lift = np.sum(np.square(fit_psd(train, k, "cotangent_lift").project(snaps) - snaps))
        cplx = np.sum(np.square(fit_psd(train, k, "complex_svd").project(snaps) - snaps))
        assert cplx <= lift * (1 + 1e-12)


def test_galerkin_with_a_complete_basis_is_the_full_system():
    system = get_system("fpu_beta", N=6, beta=0.5)
    rng = np.random.default_rng(0)
    basis = fit_psd(0.3 * rng.standard_normal((50, 12)), 12)  # n = N: A is orthogonal
    reduced = PSDGalerkin(system, basis)
    assert reduced.dim == 12 and reduced.separable
    y0 = 0.3 * rng.standard_normal((2, 12))
    full = integrate(system, y0, 0.1, 30, method="stormer_verlet").y
    red = integrate(reduced, basis.encode(y0), 0.1, 30, method="stormer_verlet").y
    np.testing.assert_allclose(basis.decode(red), full, atol=1e-12)


@pytest.mark.parametrize("method, integrator", [("cotangent_lift", "stormer_verlet"),
                                                ("complex_svd", "implicit_midpoint")])
def test_galerkin_field_is_the_projected_field_and_conserves_its_energy(toda_data, method, integrator):
    system, train, test = toda_data
    basis = fit_psd(train, 16, method)
    reduced = PSDGalerkin(system, basis)
    assert reduced.separable == (method == "cotangent_lift")
    a = basis.matrix()
    z = basis.encode(test.y[:, 5])
    np.testing.assert_allclose(reduced.vector_field(z), system.vector_field(z @ a.T) @ a, atol=1e-13)
    np.testing.assert_allclose(reduced.vector_field(z), (_j(8) @ (a.T @ (-_j(40) @ system.vector_field(z @ a.T).T))).T,
                               atol=1e-12)  # J_2n grad H_r: Hamiltonian in the reduced coordinates
    zs = integrate(reduced, z, 0.2, 100, method=integrator).y[0]
    energy = reduced.hamiltonian(zs)
    assert np.max(np.abs(energy - energy[0])) / abs(energy[0]) < 1e-3


def test_bad_input_one_line(toda_data):
    system, train, _ = toda_data
    basis = fit_psd(train, 8)
    calls = [
        (lambda: fit_psd(train, 7), "even int"),
        (lambda: fit_psd(train.y[:1, :1], 4), r"rank 1 \(cotangent_lift\); give reduced_dim <= 2"),  # q0, p0 = 0
        (lambda: fit_psd(train, 4, "balanced"), "unknown method 'balanced'"),
        (lambda: PSDGalerkin(get_system("toda", N=41), basis), "basis is of a lattice of N = 40"),
        (lambda: basis.encode(np.zeros(84)), r"shape \(\.\.\., 80\).*N = 40"),
    ]
    for call, match in calls:
        with pytest.raises(VPIntegratorError, match=match) as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_y6"])
def test_compiled_galerkin_equals_the_numpy_step(toda_data, method):
    system, train, test = toda_data
    basis = fit_psd(train, 16)
    reduced = PSDGalerkin(system, basis)
    z0 = basis.encode(test.y[:3, 0])
    fast = integrate(reduced, z0, 0.4, 60, method=method)
    slow = integrate(reduced, z0, 0.4, 60, method=method, compiled=False)
    assert fast.meta["runner"] == "numba" and slow.meta["runner"] == "numpy"
    np.testing.assert_allclose(fast.y, slow.y, rtol=0, atol=1e-12)
    # the complex SVD's basis (not separable) and implicit midpoint have no reduced loop: the NumPy step
    other = PSDGalerkin(system, fit_psd(train, 16, "complex_svd"))
    assert integrate(other, other.basis.encode(test.y[:1, 0]), 0.4, 2, method="implicit_midpoint").meta["runner"] \
        == "numpy"


def test_bond_sampling_with_every_bond_is_the_galerkin_force(toda_data):
    from vpintegrator.reduction import BondSampling

    system, train, test = toda_data
    basis = fit_psd(train, 12)
    psi = system.bonds(basis.phi.T).T  # (B, n)
    every = BondSampling(bonds=np.arange(psi.shape[0]), weights=np.ones(psi.shape[0]), rows=psi,
                         stiffness=system.kappa * psi.T @ psi, residual=0.0, n_bonds=psi.shape[0])
    xi = basis.encode(test.y[:, 7])[:, :6]
    np.testing.assert_allclose(PSDGalerkin(system, basis, every).potential_gradient(xi),
                               PSDGalerkin(system, basis).potential_gradient(xi), rtol=0, atol=1e-13)


def test_fitted_bond_sampling_is_hamiltonian_cheap_and_close(toda_data):
    from vpintegrator.reduction import fit_bond_sampling

    system, train, test = toda_data
    basis = fit_psd(train, 16)
    sampling = fit_bond_sampling(system, basis, train, tol=1e-3)
    assert sampling.residual <= 1e-3 and 0 < sampling.bonds.size < sampling.n_bonds == 40
    assert np.all(sampling.weights > 0)
    hyper = PSDGalerkin(system, basis, sampling)
    xi = basis.encode(test.y[:2, 9])[:, :8]
    eps = 1e-6
    fd = np.stack([(hyper.hyper.potential(system, xi + eps * e) - hyper.hyper.potential(system, xi - eps * e))
                   / (2 * eps) for e in np.eye(8)], axis=-1)
    np.testing.assert_allclose(hyper.potential_gradient(xi), fd, atol=1e-7)  # a gradient: Hamiltonian
    z0 = basis.encode(test.y[:3, 0])
    fast = integrate(hyper, z0, 0.4, 75, method="stormer_verlet")
    slow = integrate(hyper, z0, 0.4, 75, method="stormer_verlet", compiled=False)
    assert fast.meta["runner"] == "numba"
    np.testing.assert_allclose(fast.y, slow.y, rtol=0, atol=1e-12)
    full = integrate(PSDGalerkin(system, basis), z0, 0.4, 75, method="stormer_verlet").y
    assert np.max(np.abs(fast.y - full)) < 1e-2 * np.max(np.abs(full))
    with pytest.raises(VPIntegratorError, match="cotangent-lift"):
        fit_bond_sampling(system, fit_psd(train, 16, "complex_svd"), train)
    with pytest.raises(VPIntegratorError, match="tol must be"):
        fit_bond_sampling(system, basis, train, tol=2.0)
