"""Hyper-reduction of PSD-Galerkin on a lattice: energy-conserving sampling and weighting (ECSW) of the bonds.

PSD-Galerkin's reduced potential on a lattice (cotangent lift ``q = Phi xi``) is a sum over the B bonds,
``V_r(xi) = sum_b phi(psi_b . xi)`` with ``psi_b`` the b-th row of ``Psi = D Phi`` (D: the bond differences),
and each force costs O(N n). Split ``phi`` into its affine and quadratic part, whose reduced force is the
exact ``K xi`` with ``K = kappa Psi^T Psi`` (n x n, precomputed; the affine part adds none), and the nonlinear
remainder ``psi``; then keep only m of the bonds of the remainder, with weights ``w_b >= 0``::

    V_h(xi) = kappa / 2 xi^T Psi^T Psi xi + sum_{b in S} w_b psi(psi_b . xi)
    F_h(xi) = K xi + sum_{b in S} w_b psi'(psi_b . xi) psi_b          (O(n^2 + m n) per force)

``F_h`` is the gradient of ``V_h``, so the hyper-reduced system is again canonical Hamiltonian and separable
(``|eta|^2 / 2 + V_h(xi)``): a symplectic method conserves its energy (An, Farhat et al., ECSW). The bonds
and weights are fitted on the training split's reduced snapshots by non-negative least squares on the
remainder's force, greedy (Lawson-Hanson) until the relative residual is below ``tol``: the fewer bonds, the
cheaper and the less accurate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from ..systems.lattice import Lattice
from .psd import PSDBasis

__all__ = ["BondSampling", "fit_bond_sampling", "nnls_greedy"]


@dataclass(frozen=True, eq=False)
class BondSampling:
    """The ECSW hyper-reduction of a lattice's PSD-Galerkin system (module docstring).

    Attributes
    ----------
    bonds : ndarray (m,) int
        The sampled bonds (0-based; bond b joins sites b-1 and b).
    weights : ndarray (m,)
        Their weights, > 0.
    rows : ndarray (m, n)
        ``psi_b = (D Phi)_b`` of the sampled bonds.
    stiffness : ndarray (n, n)
        ``K = kappa Psi^T Psi``: the quadratic part's reduced force, exact.
    residual : float
        The fit's relative residual on the training snapshots' remainder force.
    n_bonds : int
        B, every bond of the lattice (m of them kept).
    """

    bonds: np.ndarray
    weights: np.ndarray
    rows: np.ndarray
    stiffness: np.ndarray
    residual: float
    n_bonds: int

    def potential_gradient(self, lattice: Lattice, xi: np.ndarray) -> np.ndarray:
        """``F_h(xi)``: (..., n) -> (..., n)."""
        xi = np.asarray(xi, dtype=np.float64)
        r = xi @ self.rows.T  # (..., m)
        return xi @ self.stiffness.T + (self.weights * lattice.nonlinear_dphi(r)) @ self.rows

    def potential(self, lattice: Lattice, xi: np.ndarray) -> np.ndarray:
        """``V_h(xi)`` up to its constant: (..., n) -> (...)."""
        xi = np.asarray(xi, dtype=np.float64)
        r = xi @ self.rows.T
        d0, kappa = float(lattice.dphi(np.zeros(1))[0]), lattice.kappa
        remainder = lattice.phi(r) - float(lattice.phi(np.zeros(1))[0]) - d0 * r - 0.5 * kappa * r * r
        return 0.5 * np.einsum("...i,ij,...j->...", xi, self.stiffness, xi) + remainder @ self.weights


def nnls_greedy(g: np.ndarray, f: np.ndarray, tol: float, max_terms: int | None = None) -> tuple[np.ndarray, float]:
    """Non-negative least squares ``min |G w - f|, w >= 0`` by Lawson-Hanson's active set, stopped as soon as
    ``|G w - f| <= tol |f|`` (or ``max_terms`` columns are in): a sparse w. Returns (w, relative residual)."""
    m = g.shape[1]
    w = np.zeros(m)
    active: list[int] = []
    norm_f = float(np.linalg.norm(f)) or 1.0
    residual = f.copy()
    limit = m if max_terms is None else min(m, int(max_terms))
    while np.linalg.norm(residual) > tol * norm_f and len(active) < limit:
        grad = g.T @ residual
        grad[active] = -np.inf
        j = int(np.argmax(grad))
        if grad[j] <= 0:
            break
        active.append(j)
        while True:
            z = np.zeros(m)
            z[active] = np.linalg.lstsq(g[:, active], f, rcond=None)[0]
            if np.all(z[active] > 0):
                w = z
                break
            bad = [i for i in active if z[i] <= 0]
            alpha = min(w[i] / (w[i] - z[i]) for i in bad)
            w = w + alpha * (z - w)
            active = [i for i in active if w[i] > 1e-14 * max(1.0, float(np.max(w)))]
            w[[i for i in range(m) if i not in active]] = 0.0
        residual = f - g @ w
    return w, float(np.linalg.norm(residual) / norm_f)


def fit_bond_sampling(lattice: Lattice, basis: PSDBasis, snapshots: Any, tol: float = 1e-3,
                      max_snapshots: int = 400, max_bonds: int | None = None) -> BondSampling:
    """Fit the ECSW hyper-reduction of ``PSDGalerkin(lattice, basis)`` on the training split (module docstring).

    Parameters
    ----------
    lattice : Lattice
        The full system (``toda``, ``fpu_beta``).
    basis : PSDBasis
        A cotangent-lift basis fitted on this lattice's data.
    snapshots : Trajectories or ndarray (..., 2N)
        The training states; at most ``max_snapshots`` of them, evenly spaced, enter the fit.
    tol : float
        The relative residual of the remainder's force at which bonds stop being added (0 < tol < 1).
    max_bonds : int, optional
        At most this many bonds.
    """
    if not isinstance(lattice, Lattice):
        raise VPIntegratorError(f"fit_bond_sampling: the system must be a lattice (toda, fpu_beta); got "
                                f"{getattr(lattice, 'name', type(lattice).__name__)!r}")
    if not isinstance(basis, PSDBasis) or not basis.is_lift:
        raise VPIntegratorError("fit_bond_sampling: the basis must be a cotangent-lift PSDBasis (fit_psd(..., "
                                "method='cotangent_lift' or 'balanced_cotangent_lift'))", key="basis")
    if basis.n_sites != lattice.N:
        raise VPIntegratorError(f"fit_bond_sampling: the basis is of a lattice of N = {basis.n_sites}, the system "
                                f"has N = {lattice.N}; fit the basis on this lattice's data", key="basis")
    if not (isinstance(tol, (int, float)) and 0.0 < float(tol) < 1.0):
        raise VPIntegratorError(f"fit_bond_sampling: tol must be a number in (0, 1); got {tol!r}", key="tol")
    y = np.asarray(getattr(snapshots, "y", snapshots), dtype=np.float64)
    y = y.reshape(-1, y.shape[-1])
    if y.shape[-1] != 2 * lattice.N or y.shape[0] == 0:
        raise VPIntegratorError(f"fit_bond_sampling: snapshots must be states of {2 * lattice.N} components; got "
                                f"shape {y.shape}")
    y = y[np.unique(np.linspace(0, y.shape[0] - 1, min(max_snapshots, y.shape[0])).round().astype(int))]
    psi = lattice.bonds(basis.phi.T).T  # (B, n): bond b of each basis vector
    xi = basis.encode(y)[:, : basis.reduced_dim // 2]  # (M, n)
    c = lattice.nonlinear_dphi(xi @ psi.T)  # (M, B): the remainder's bond forces
    g = (c[:, None, :] * psi.T[None, :, :]).reshape(-1, psi.shape[0])  # rows (snapshot, j), columns bonds
    f = g.sum(axis=1)
    w, residual = nnls_greedy(g, f, float(tol), max_bonds)
    kept = np.flatnonzero(w > 0)
    return BondSampling(bonds=kept, weights=w[kept], rows=np.ascontiguousarray(psi[kept]),
                        stiffness=lattice.kappa * (psi.T @ psi), residual=residual, n_bonds=int(psi.shape[0]))
