"""Proper symplectic decomposition (PSD): a linear symplectic reduced basis fitted on snapshots.

For states ``y = (q, p)`` of a canonical system with ``N`` degrees of freedom, a PSD basis is a matrix
``A`` (2N, 2n) with orthonormal columns that is symplectic, ``A^T J_{2N} A = J_{2n}``; then ``A^+ = A^T``, the
reduced coordinates are ``z = A^T y`` and the reconstruction is ``A z`` (Peng & Mohseni, SIAM J. Sci. Comput.
38 (2016)). Three fits, each from one thin SVD:

- ``cotangent_lift``: ``A = diag(Phi, Phi)`` with ``Phi`` (N, n) the n leading left singular vectors of the
  N x 2m matrix ``[Q P]`` of the m snapshots' positions and momenta; the reduced system of a separable
  Hamiltonian ``|p|^2 / 2 + V(q)`` is separable again (``|eta|^2 / 2 + V(Phi xi)``);
- ``balanced_cotangent_lift``: the same lift ``A = diag(Phi, Phi)`` (orthonormal, symplectic, separable), with
  ``Phi`` the leading left singular vectors of ``[Q / |Q|_F, P / |P|_F]``: positions and momenta weighed
  equally. Where one of them is much smaller (the bump family starts at p = 0 and its momenta stay small),
  the plain lift's SVD follows the larger one alone and the smaller one's reconstruction suffers. This is this
  package's definition, a weighting of the lift's SVD; it is *not* balanced truncation (Gramians of a system
  with inputs and outputs: there are none here). ``PSDBasis.scales`` records ``(|Q|_F, |P|_F)``;
- ``complex_svd``: ``U`` (N, n) the leading left singular vectors of the complex N x m matrix ``Q + i P`` and
  ``A = [[Re U, -Im U], [Im U, Re U]]``: the best basis of this form (its reconstruction error on the snapshots
  is never above the cotangent lift's), a reduced system that is no longer separable.

The basis's **reconstruction floor** on a state is ``|y - A A^T y| / |y|``: no model in these coordinates,
learned or not, decodes to a smaller error. [`psd_floor`][vpintegrator.reduction.psd.psd_floor] gives it per
state; a study reports its median over the held-out trajectories at T.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import relative_error
from ..errors import VPIntegratorError

__all__ = ["LIFT_METHODS", "PSD_METHODS", "PSDBasis", "fit_psd", "psd_floor"]

#: the fits ``fit_psd`` knows
PSD_METHODS = ("cotangent_lift", "balanced_cotangent_lift", "complex_svd")
#: the fits whose basis is a cotangent lift ``A = diag(Phi, Phi)`` with a real ``Phi``
LIFT_METHODS = ("cotangent_lift", "balanced_cotangent_lift")


@dataclass(frozen=True, eq=False)
class PSDBasis:
    """A fitted PSD basis (module docstring).

    Attributes
    ----------
    method : str
        One of ``PSD_METHODS``.
    phi : ndarray
        (N, n): real for the cotangent lifts, complex for the complex SVD.
    singular_values : ndarray
        Every singular value of the snapshot matrix, largest first (the spectrum the basis was cut from; for
        the balanced lift, of the normalised matrix).
    scales : tuple of float, optional
        The balanced lift's ``(|Q|_F, |P|_F)`` of the snapshots; None for the other fits.
    """

    method: str
    phi: np.ndarray
    singular_values: np.ndarray
    scales: tuple[float, float] | None = None

    @property
    def is_lift(self) -> bool:
        """Whether the basis is a cotangent lift ``diag(Phi, Phi)`` (``LIFT_METHODS``): its reduced system of a
        separable Hamiltonian is separable again."""
        return self.method in LIFT_METHODS

    @property
    def n_sites(self) -> int:
        """N: the full system's degrees of freedom (its state has 2N components)."""
        return int(self.phi.shape[0])

    @property
    def reduced_dim(self) -> int:
        """2n: the reduced state's components."""
        return 2 * int(self.phi.shape[1])

    def matrix(self) -> np.ndarray:
        """A (2N, 2n), float64: orthonormal columns, symplectic."""
        if self.is_lift:
            zero = np.zeros_like(self.phi)
            return np.block([[self.phi, zero], [zero, self.phi]])
        re, im = self.phi.real, self.phi.imag
        return np.block([[re, -im], [im, re]])

    def encode(self, y: Any) -> np.ndarray:
        """z = A^T y: (..., 2N) -> (..., 2n)."""
        y = self._check(y, 2 * self.n_sites, "state")
        n = self.n_sites
        q, p = y[..., :n], y[..., n:]
        if self.is_lift:
            return np.concatenate([q @ self.phi, p @ self.phi], axis=-1)
        re, im = self.phi.real, self.phi.imag
        return np.concatenate([q @ re + p @ im, p @ re - q @ im], axis=-1)

    def decode(self, z: Any) -> np.ndarray:
        """y = A z: (..., 2n) -> (..., 2N)."""
        z = self._check(z, self.reduced_dim, "reduced state")
        k = self.reduced_dim // 2
        xi, eta = z[..., :k], z[..., k:]
        if self.is_lift:
            return np.concatenate([xi @ self.phi.T, eta @ self.phi.T], axis=-1)
        re, im = self.phi.real, self.phi.imag
        return np.concatenate([xi @ re.T - eta @ im.T, xi @ im.T + eta @ re.T], axis=-1)

    def project(self, y: Any) -> np.ndarray:
        """A A^T y: the closest state the basis can represent."""
        return self.decode(self.encode(y))

    def _check(self, y: Any, dim: int, what: str) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 0 or y.shape[-1] != dim:
            hint = (f" (a basis of a lattice of N = {self.n_sites}: states of 2N = {dim} components; fit one on "
                    "this lattice's data)" if what == "state" else "")
            raise VPIntegratorError(f"PSD basis: a {what} must have shape (..., {dim}); got shape {y.shape}{hint}")
        return y


def _snapshots(data: Any, who: str = "fit_psd") -> np.ndarray:
    """Snapshot states (m, 2N) of a Trajectories (every state of every trajectory) or of an array (..., 2N);
    ``who`` names the caller in the one-line errors."""
    y = getattr(data, "y", data)
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise VPIntegratorError(f"{who}: snapshots must be a Trajectories or an array (..., 2N); got "
                                f"{type(data).__name__}") from None
    if y.ndim == 0 or y.shape[-1] % 2 or y.shape[-1] < 2:
        raise VPIntegratorError(f"{who}: snapshots must be canonical states (q, p) of an even dimension 2N; got "
                                f"shape {y.shape}")
    y = y.reshape(-1, y.shape[-1])
    if y.shape[0] == 0 or not np.all(np.isfinite(y)):
        raise VPIntegratorError(f"{who}: the snapshots must be at least one finite state (no NaN or inf)")
    return y


def fit_psd(snapshots: Any, reduced_dim: int, method: str = "cotangent_lift") -> PSDBasis:
    """Fit a PSD basis of ``reduced_dim`` = 2n components on ``snapshots`` (module docstring).

    Parameters
    ----------
    snapshots : Trajectories or ndarray (..., 2N)
        The training split's states (every state of every trajectory of a Trajectories).
    reduced_dim : int
        2n, even, at most twice the rank of the snapshot matrix (a one-line error names the rank).
    method : str
        ``"cotangent_lift"`` (default), ``"balanced_cotangent_lift"`` or ``"complex_svd"``. The balanced lift
        needs snapshots whose positions and momenta are not all zero (a one-line error otherwise).
    """
    if method not in PSD_METHODS:
        raise VPIntegratorError(f"fit_psd: unknown method {method!r}; valid methods: {', '.join(PSD_METHODS)}",
                                key="method")
    if isinstance(reduced_dim, bool) or not isinstance(reduced_dim, (int, np.integer)) or reduced_dim < 2 \
            or reduced_dim % 2:
        raise VPIntegratorError(f"fit_psd: reduced_dim (2n) must be an even int >= 2; got {reduced_dim!r}",
                                key="reduced_dim")
    y = _snapshots(snapshots)
    n_sites, k = y.shape[1] // 2, int(reduced_dim) // 2
    q, p = y[:, :n_sites], y[:, n_sites:]
    scales = None
    if method == "balanced_cotangent_lift":
        scales = (float(np.linalg.norm(q)), float(np.linalg.norm(p)))
        for part, norm in zip(("positions", "momenta"), scales):
            if norm == 0.0:
                raise VPIntegratorError(f"fit_psd: method 'balanced_cotangent_lift' divides by the snapshots' "
                                        f"norms but their {part} are all zero; use method='cotangent_lift'",
                                        key="method")
        q, p = q / scales[0], p / scales[1]
    matrix = np.concatenate([q, p], axis=0).T if method in LIFT_METHODS else (q + 1j * p).T
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    rank = int(np.sum(s > s[0] * max(matrix.shape) * np.finfo(np.float64).eps)) if s.size and s[0] > 0 else 0
    if k > rank:
        raise VPIntegratorError(
            f"fit_psd: reduced_dim = {reduced_dim} needs {k} basis vectors but the snapshot matrix of "
            f"{y.shape[0]} states has rank {rank} ({method}); give reduced_dim <= {2 * rank} or more snapshots",
            key="reduced_dim")
    return PSDBasis(method=method, phi=np.ascontiguousarray(u[:, :k]), singular_values=s, scales=scales)


def psd_floor(basis: PSDBasis, states: Any) -> np.ndarray:
    """The reconstruction floor ``|y - A A^T y| / |y|`` of each state: (..., 2N) -> (...)."""
    y = np.asarray(getattr(states, "y", states), dtype=np.float64)
    return np.asarray(relative_error(basis.project(y), y))
