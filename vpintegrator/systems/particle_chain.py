"""A particle in a double well attached by a spring to an FPU-beta chain of N sites: a nonlinear bath.

State ``y = (q0, q1 .. qN, p0, p1 .. pN)`` (``dim = 2 (N + 1)``): the particle ``(q0, p0)`` (``(Q, P)``), the chain's
sites ``q1 .. qN``, the last one held by a wall. Unit masses::

    H = P^2 / 2 + V(Q) + coupling / 2 (q1 - Q)^2 + sum_{b=1}^{N} phi(r_b) + sum_n p_n^2 / 2
    V(Q) = (Q^2 - 1)^2 / 4,   phi(r) = r^2 / 2 + beta r^4 / 4,   r_b = q_{b+1} - q_b,  q_{N+1} = 0

Unlike the harmonic bath of ``kac_zwanzig`` the chain's quartic bonds give no linear memory kernel: the particle's
reduced dynamics is not a GLE with a known kernel, and the chain cannot be replaced by another set of oscillators.
It is, however, a nearest-neighbour chain started at rest (``q = p = 0``: the chain's own equilibrium, the spring
stretched by Q0; sampler ``particle``): a disturbance travels along it at a finite speed (sound speed 1 for small
amplitudes), so to a time t the particle sees only the first ~t sites, and a chain truncated beyond that front
gives the same particle to round-off until its echo returns (``vpintegrator.compiled.bath``'s script measures it).

Defaults: N = 100, beta = 1, coupling = 0.5 (the particle then sits in ``V(Q) + Q^2 / 4`` at first, minima at
Q = +-0.71). Separable: Stormer-Verlet applies (stable for ``dt < 1`` near rest); the compiled O(N) loop is in
``vpintegrator.compiled.bath``. N from 1 to 10^4. Invariant: the energy ``H``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import finite_float
from .base import _check_positive_finite
from .kac_zwanzig import ParticleBath, double_well, double_well_force
from .registry import register_system

__all__ = ["ParticleChain"]


@register_system
@dataclass(frozen=True)
class ParticleChain(ParticleBath):
    """A double-well particle coupled to a fixed-end FPU-beta chain (module docstring).

    Parameters
    ----------
    N : int
        Chain sites, 1 .. 10^4; the state has 2 (N + 1) components. Default 100.
    beta : float
        The chain bonds' quartic strength (>= 0). Default 1.
    coupling : float
        The spring between the particle and the first site (> 0). Default 0.5.
    """

    N: int = 100
    beta: float = 1.0
    coupling: float = 0.5

    name: ClassVar[str] = "particle_chain"
    dim: ClassVar[int] = 202  # the default N's; each instance sets its own, 2 (N + 1)

    def __post_init__(self) -> None:
        self._set_size("chain sites")
        object.__setattr__(self, "beta", finite_float(self.beta, "ParticleChain parameter 'beta' (a quartic bond bounded "
                                                   "below)", nonnegative=True, key="beta"))
        object.__setattr__(self, "coupling", _check_positive_finite("ParticleChain", "coupling", self.coupling))

    def bath_at_rest(self, Q: Any, P: Any) -> np.ndarray:  # noqa: N803
        Q, P = np.broadcast_arrays(np.atleast_1d(np.asarray(Q, dtype=np.float64)),
                                   np.atleast_1d(np.asarray(P, dtype=np.float64)))
        y = np.zeros((Q.shape[0], self.dim))
        y[:, 0], y[:, self.N + 1] = Q, P
        return y

    def bonds(self, q: np.ndarray) -> np.ndarray:
        """Every bond of positions q (..., N + 1): ``r_0 = q1 - Q`` (the spring), then ``r_1 .. r_N`` (the chain,
        ``r_N = -q_N`` at the wall): (..., N + 1)."""
        q = np.asarray(q, dtype=np.float64)
        zero = np.zeros(q.shape[:-1] + (1,))
        return np.diff(np.concatenate([q, zero], axis=-1), axis=-1)

    def dphi(self, r: Any) -> Any:
        """phi'(r) of a chain bond."""
        return r + self.beta * r * r * r

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        r = self.bonds(q)
        d = np.empty(r.shape)
        d[..., 0] = self.coupling * r[..., 0]
        d[..., 1:] = self.dphi(r[..., 1:])
        g = np.empty(r.shape)
        g[..., 0] = double_well_force(np.asarray(q, dtype=np.float64)[..., 0]) - d[..., 0]
        g[..., 1:] = d[..., :-1] - d[..., 1:]
        return g

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        m = self.N + 1
        self._dense_check(q.shape[:-1], m)
        r = self.bonds(q)
        k = np.empty(r.shape)  # bond stiffness, bond b between sites b and b + 1 (site N + 1: the wall)
        k[..., 0] = self.coupling
        k[..., 1:] = 1.0 + 3.0 * self.beta * r[..., 1:] ** 2
        h = np.zeros(q.shape[:-1] + (m, m))
        idx = np.arange(m)
        h[..., idx, idx] = np.concatenate([k[..., :1], k[..., :-1] + k[..., 1:]], axis=-1)[..., :m]
        h[..., 0, 0] = 3.0 * q[..., 0] ** 2 - 1.0 + self.coupling
        h[..., idx[:-1], idx[1:]] = -k[..., :-1]
        h[..., idx[1:], idx[:-1]] = -k[..., :-1]
        return h

    def _invariant_energy(self, y: Any) -> Any:  # NumPy arrays or torch tensors
        n = self.N
        q, p = y[..., :n + 1], y[..., n + 1:]
        r0 = q[..., 1] - q[..., 0] if n >= 1 else q[..., 0] * 0.0
        inner = q[..., 2:] - q[..., 1:-1]
        end = -q[..., -1]
        r2, e2 = inner * inner, end * end
        chain = (0.5 * r2 + 0.25 * self.beta * r2 * r2).sum(-1) + 0.5 * e2 + 0.25 * self.beta * e2 * e2
        return 0.5 * (p * p).sum(-1) + double_well(q[..., 0]) + 0.5 * self.coupling * r0 * r0 + chain
