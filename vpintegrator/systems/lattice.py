"""One-dimensional nearest-neighbour Hamiltonian lattices: the base of ``toda`` and ``fpu_beta``.

State ``y = (q_0 .. q_{N-1}, p_0 .. p_{N-1})`` (``dim = 2 N``, set per instance from the parameter ``N``);
unit masses and a bond potential ``phi`` between neighbours::

    H(q, p) = sum_n p_n^2 / 2 + sum_b phi(r_b)

A *periodic* lattice has the N bonds ``r_n = q_{n+1} - q_n`` (``q_N = q_0``); a lattice with *fixed ends*
has the N + 1 bonds of ``(0, q_0, .., q_{N-1}, 0)``. Then ``dV/dq_n = phi'(r_{n-1}) - phi'(r_n)`` and the
Hessian of ``V`` is (cyclic) tridiagonal. Separable, so Stormer-Verlet and its compositions apply; a shipped
lattice also steps by the array-based numba loops of ``vpintegrator.compiled.lattice`` at any N.

**The linear part** (the exponential splitting, ``vpintegrator.integrators.exponential``): with
``kappa = phi''(0)``, ``H = H_lin + V_nl`` where ``H_lin = |p|^2 / 2 + kappa / 2 sum_b r_b^2`` (the constant and
linear terms of ``phi`` add no force: each ``q_n`` is in two bonds with opposite signs, or at a fixed end in
none), and ``V_nl = sum_b psi(r_b)``, ``psi(r) = phi(r) - phi(0) - phi'(0) r - kappa r^2 / 2``. The flow of
``H_lin`` is solved exactly in the lattice's normal modes: the discrete Fourier transform (periodic,
frequencies ``2 sqrt(kappa) |sin(pi k / N)|``, a free centre-of-mass mode) or the sine transform DST-I (fixed
ends, ``2 sqrt(kappa) sin(pi k / (2 (N + 1)))``, k = 1..N): [`Lattice.linear_flow`][vpintegrator.systems.lattice.Lattice.linear_flow].

A subclass (a frozen dataclass with the field ``N`` and its own parameters) gives ``periodic``, ``kind``
(its branch in the compiled kernels), ``bond_params`` (the kernels' parameter vector) and ``phi``, ``dphi``,
``ddphi`` written with ``array_namespace`` (NumPy arrays or torch tensors).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from .base import System, _check_count

__all__ = ["Lattice", "bump", "MIN_SITES"]

#: fewest sites a lattice takes (a periodic ring of 2 has its two bonds between the same pair)
MIN_SITES = 3


class Lattice(System):
    """Base class of the nearest-neighbour lattices (see the module docstring); not registered itself."""

    separable: ClassVar[bool] = True
    #: the exact flow of the quadratic part exists (``linear_flow``; the exponential splitting needs it)
    linear_part: ClassVar[bool] = True
    torch_invariants: ClassVar[bool] = True
    default_sampler: ClassVar[str] = "bump"
    #: True: N bonds on a ring; False: N + 1 bonds, both ends fixed at 0
    periodic: ClassVar[bool] = True
    #: the lattice's branch in the compiled kernels (``vpintegrator.compiled.lattice``)
    kind: ClassVar[int] = -1
    #: the number of sites (a dataclass field of every subclass)
    N: int
    #: phi'(r) on a scalar bond, ``bond_force(par, r)`` with ``par = bond_params()`` (a staticmethod, arithmetic and
    #: ``math``/NumPy functions): a user's lattice that gives it steps by the compiled array loops
    #: (``vpintegrator.compiled.user.lattice_kind``), and ``dphi`` defaults to it; ``bond_stiffness``: phi''(r)
    bond_force: ClassVar[Any] = None
    bond_stiffness: ClassVar[Any] = None

    def _set_sites(self) -> None:
        """Check ``N`` and set this instance's ``dim = 2 N`` (called first by the subclass's __post_init__)."""
        n = _check_count(type(self).__name__, self.N, "lattice sites", MIN_SITES)
        object.__setattr__(self, "N", n)
        object.__setattr__(self, "dim", 2 * n)

    # --- the bond potential (subclasses) -----------------------------------------------------------------
    def phi(self, r: Any) -> Any:
        """The bond energy phi(r), elementwise (NumPy arrays or torch tensors)."""
        raise NotImplementedError

    def dphi(self, r: Any) -> Any:
        """phi'(r), elementwise (by default ``bond_force`` on NumPy arrays)."""
        if type(self).bond_force is None:
            raise NotImplementedError
        return type(self).bond_force(self.bond_params(), np.asarray(r, dtype=np.float64))

    def ddphi(self, r: Any) -> Any:
        """phi''(r), elementwise (by default ``bond_stiffness``)."""
        if type(self).bond_stiffness is None:
            raise NotImplementedError
        return type(self).bond_stiffness(self.bond_params(), np.asarray(r, dtype=np.float64))

    def bond_params(self) -> np.ndarray:
        """The parameter vector of the bond potential in the compiled kernels."""
        raise NotImplementedError

    @property
    def kappa(self) -> float:
        """phi''(0): the stiffness of the linear part."""
        return float(self.ddphi(np.zeros(1))[0])

    # --- bonds ---------------------------------------------------------------------------------------------
    def _bonds(self, q: Any) -> tuple[Any, ...]:
        """The bonds as (interior (..., N-1), then the wrap bond (periodic) or the two end bonds)."""
        inner = q[..., 1:] - q[..., :-1]
        if self.periodic:
            return inner, q[..., 0] - q[..., -1]
        return inner, q[..., 0], -q[..., -1]

    def _bond_forces(self, q: np.ndarray, dphi) -> np.ndarray:
        """``dV/dq`` for the bond derivative ``dphi``: ``dphi(r_{n-1}) - dphi(r_n)``."""
        q = np.asarray(q, dtype=np.float64)
        d = dphi(_bond_array(q, self.periodic))  # (..., bonds): bond b between site b-1 and b (periodic: b-1 mod N)
        if self.periodic:
            return d - np.roll(d, -1, axis=-1)
        return d[..., :-1] - d[..., 1:]

    # --- the separable split -------------------------------------------------------------------------------
    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        return np.array(p, dtype=np.float64)

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        return np.broadcast_to(np.eye(self.N), p.shape[:-1] + (self.N, self.N)).copy()

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        return self._bond_forces(q, self.dphi)

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        """d2V/dq2 (..., N, N), dense (tridiagonal, with the two corners on a ring)."""
        q = np.asarray(q, dtype=np.float64)
        n = self.N
        self._check_dense(q.shape[:-1], n)
        k = self.ddphi(_bond_array(q, self.periodic))  # (..., bonds), bond b between sites b-1 and b
        out = np.zeros(q.shape[:-1] + (n, n))
        idx = np.arange(n)
        if self.periodic:
            diag, off = k + np.roll(k, -1, axis=-1), -np.roll(k, -1, axis=-1)  # off[n]: between n and n+1
            out[..., idx, idx] = diag
            out[..., idx, (idx + 1) % n] = off
            out[..., (idx + 1) % n, idx] = off
        else:
            out[..., idx, idx] = k[..., :-1] + k[..., 1:]
            out[..., idx[:-1], idx[1:]] = -k[..., 1:-1]
            out[..., idx[1:], idx[:-1]] = -k[..., 1:-1]
        return out

    # --- the System API --------------------------------------------------------------------------------------
    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        n = self.N
        return np.concatenate([y[..., n:], -self.potential_gradient(y[..., :n])], axis=-1)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """df/dy (..., 2N, 2N), dense: ``[[0, I], [-V''(q), 0]]``."""
        y = self._check_state(y)
        n = self.N
        self._check_dense(y.shape[:-1], 2 * n, copies=1.25)
        out = np.zeros(y.shape[:-1] + (2 * n, 2 * n))
        out[..., :n, n:] = np.eye(n)
        out[..., n:, :n] = -self.potential_hessian(y[..., :n])
        return out

    def _check_dense(self, batch: tuple[int, ...], size: int, copies: float = 1.0) -> None:
        """Refuse, in one line and before allocating, dense matrices of ``size`` x ``size`` per state that do not
        fit in memory (a NumPy implicit step on thousands of sites)."""
        from ..resources import check_size

        check_size("N", float(np.prod(batch, dtype=float)) * size * size, what=f"dense {size} x {size} Jacobians of "
                   f"the lattice {self.name!r} (N = {self.N})", copies=copies,
                   way_out="integrate with compiled=None (the lattice loops: stormer_verlet, implicit_midpoint and "
                           "their compositions, no dense matrix), fewer trajectories at once, or an explicit method")

    def divergence(self, y: np.ndarray) -> np.ndarray:
        return np.zeros(self._check_state(y).shape[:-1])

    def hamiltonian(self, y: np.ndarray) -> np.ndarray:
        """H(q, p); y (..., 2N) -> (...)."""
        return self._invariant_energy(self._check_state(y))

    def _invariant_energy(self, y: Any) -> Any:  # NumPy arrays or torch tensors
        n = self.N
        q, p = y[..., :n], y[..., n:]
        inner, *ends = self._bonds(q)
        energy = 0.5 * (p * p).sum(-1) + self.phi(inner).sum(-1)
        for r in ends:
            energy = energy + self.phi(r)
        return energy

    # --- the linear part (the exponential splitting) -----------------------------------------------------
    def mode_frequencies(self) -> np.ndarray:
        """The normal-mode frequencies of the linear part: (N // 2 + 1,) for the real DFT (periodic), (N,) for
        DST-I (fixed ends)."""
        kappa, n = self.kappa, self.N
        if self.periodic:
            return 2.0 * math.sqrt(kappa) * np.abs(np.sin(np.pi * np.arange(n // 2 + 1) / n))
        return 2.0 * math.sqrt(kappa) * np.sin(np.pi * np.arange(1, n + 1) / (2.0 * (n + 1)))

    def linear_flow(self, q: np.ndarray, p: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The exact flow of ``H_lin`` for time ``t`` (either sign): q, p (..., N) -> (q(t), p(t)), by the
        real DFT (periodic) or DST-I (fixed ends) along the last axis."""
        import scipy.fft as sfft

        w = self.mode_frequencies()
        c = np.cos(w * t)
        s_over_w = t * np.sinc(w * t / np.pi)  # sin(w t) / w, = t at w = 0 (the free centre of mass)
        w_s = w * np.sin(w * t)
        if self.periodic:
            n = self.N
            qh, ph = sfft.rfft(q, axis=-1), sfft.rfft(p, axis=-1)
            q1, p1 = c * qh + s_over_w * ph, c * ph - w_s * qh
            return sfft.irfft(q1, n=n, axis=-1), sfft.irfft(p1, n=n, axis=-1)
        qh, ph = sfft.dst(q, type=1, axis=-1, norm="ortho"), sfft.dst(p, type=1, axis=-1, norm="ortho")
        q1, p1 = c * qh + s_over_w * ph, c * ph - w_s * qh
        return sfft.dst(q1, type=1, axis=-1, norm="ortho"), sfft.dst(p1, type=1, axis=-1, norm="ortho")

    def bonds(self, q: np.ndarray) -> np.ndarray:
        """Every bond ``r_b`` of positions q (..., N): (..., N) on a ring (bond b between sites b-1 and b, mod N),
        (..., N + 1) with fixed ends (sites -1 and N at 0). Linear in q."""
        return _bond_array(np.asarray(q, dtype=np.float64), self.periodic)

    def nonlinear_dphi(self, r: np.ndarray) -> np.ndarray:
        """``psi'(r) = phi'(r) - phi'(0) - kappa r``: the bond force less its affine part (``V_nl``'s)."""
        return self.dphi(r) - float(self.dphi(np.zeros(1))[0]) - self.kappa * r

    def nonlinear_gradient(self, q: np.ndarray) -> np.ndarray:
        """``dV_nl/dq``: the force of the potential less its quadratic part (``V_nl``, module docstring)."""
        d0, kappa = float(self.dphi(np.zeros(1))[0]), self.kappa
        return self._bond_forces(q, lambda r: self.dphi(r) - d0 - kappa * r)

    def nonlinear_hessian(self, q: np.ndarray) -> np.ndarray:
        """d2V_nl/dq2 (..., N, N): the potential's Hessian less the linear part's."""
        q = np.asarray(q, dtype=np.float64)
        return self.potential_hessian(q) - self.potential_hessian(np.zeros_like(q))


def _bond_array(q: np.ndarray, periodic: bool) -> np.ndarray:
    """All bonds (..., N) (periodic: bond n between sites n-1 and n, mod N) or (..., N + 1) (fixed ends: bond
    b between sites b-1 and b, sites -1 and N fixed at 0)."""
    if periodic:
        return q - np.roll(q, 1, axis=-1)
    zero = np.zeros(q.shape[:-1] + (1,))
    return np.diff(np.concatenate([zero, q, zero], axis=-1), axis=-1)


def bump(mu: float, n: int) -> np.ndarray:
    """GeometricProblems' bump profile: ``h(20 mu |x + mu / 2|)`` on the n points of [-0.5, 0.5], with the
    cubic spline ``h(s) = 1 - 3 s^2 / 2 + 3 s^3 / 4`` (0 <= s <= 1), ``(2 - s)^3 / 4`` (1 < s <= 2), 0 beyond."""
    x = np.linspace(-0.5, 0.5, n)
    s = 20.0 * mu * np.abs(x + mu / 2.0)
    return np.where(s <= 1.0, 1.0 - 1.5 * s**2 + 0.75 * s**3, np.where(s <= 2.0, 0.25 * (2.0 - s) ** 3, 0.0))
