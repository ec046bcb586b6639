"""Kac-Zwanzig: a particle in a double well coupled bilinearly to N harmonic bath oscillators.

State ``y = (q0, q1 .. qN, p0, p1 .. pN)`` (``dim = 2 (N + 1)``, set per instance): the particle is ``(q0, p0)``
(written ``(Q, P)`` below), the bath oscillators ``(q_j, p_j)``, j = 1 .. N. Unit masses::

    H = P^2 / 2 + V(Q) + sum_j [ p_j^2 / 2 + omega_j^2 / 2 (q_j - c_j Q / omega_j^2)^2 ],   V(Q) = (Q^2 - 1)^2 / 4

**The bath** (the spectral density, discretised): the frequencies are the midpoints of N equal cells of
``(0, omega_max]``, ``omega_j = (j - 1/2) d``, ``d = omega_max / N``, and the couplings give each cell its share
of the density ``k(omega) = gamma exp(-(omega - omega0)^2 / (2 width^2))``::

    c_j^2 / omega_j^2 = k(omega_j) d      so that      K_N(t) = sum_j c_j^2 / omega_j^2 cos(omega_j t)

is the midpoint rule of ``K(t) = int_0^omega_max k(omega) cos(omega t) d omega``; with the defaults (gamma = 0.05,
omega0 = 1.2, width = 0.3, omega_max = 4) ``K(t) ~ 0.038 exp(-0.045 t^2) cos(1.2 t)``: a memory of ~10-15 time units
(the envelope ``exp(-width^2 t^2 / 2)`` is 1e-3 at t = 12, 1e-9 at t = 21; [`KacZwanzig.memory_time`]
[vpintegrator.systems.kac_zwanzig.KacZwanzig.memory_time]). The midpoint rule is spectrally accurate for this
smooth density, and ``K_N`` first recurs at ``2 pi / d = 2 pi N / omega_max`` (157 at N = 100): below that time
the particle cannot tell N oscillators from a continuum.

**Initial conditions** (the sampler ``particle``): the particle from a box (or given ``Q``, ``P``), the bath at
rest in its Q-dependent equilibrium ``q_j = c_j Q0 / omega_j^2``, ``p_j = 0``
([`KacZwanzig.bath_at_rest`][vpintegrator.systems.kac_zwanzig.KacZwanzig.bath_at_rest]). Then the particle obeys
the noise-free generalised Langevin equation (GLE) exactly::

    Q'' = -V'(Q) - int_0^t K_N(t - s) P(s) ds

which ``vpintegrator.rollout.gle`` integrates by convolution quadrature (the known-equations row of the arena).

**The coarse bath** ([`KacZwanzig.coarse`][vpintegrator.systems.kac_zwanzig.KacZwanzig.coarse]): the same density
on fewer oscillators M, chosen so that the observer cannot tell them apart up to ``t_max``: the grid stops where
the density is below ``1e-16`` of its peak (``omega0 + 8.6 width``, at most ``omega_max``), and M is the fewest cells
whose kernel does not recur before ``t_max`` plus the memory time, ``M = ceil(omega_c (t_max + memory) / 2 pi)``.

Separable (``T(p) + V(q)``): Stormer-Verlet applies (stable for ``dt < 2 / omega_max``); the arena's own steppers
(O(N) per step, numba) are in ``vpintegrator.compiled.bath``, among them the splitting that solves the bath
exactly. N from 1 to 10^4 (``MAX_OSCILLATORS``). Invariant: the energy ``H``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ..arrays import array_namespace
from ..errors import VPIntegratorError, finite_float
from .base import System, _check_count, _check_positive_finite
from .registry import register_system

__all__ = ["KacZwanzig", "MAX_OSCILLATORS", "particle_states", "double_well", "double_well_force",
           "bath_state_names", "ParticleBath"]

#: the most bath oscillators (or chain sites) a bath system takes
MAX_OSCILLATORS = 10_000
#: density below this fraction of its peak is cut off by the coarse bath
_COARSE_CUT = 1e-16


def double_well(q: Any) -> Any:
    """V(Q) = (Q^2 - 1)^2 / 4 (NumPy arrays or torch tensors)."""
    s = q * q - 1.0
    return 0.25 * s * s


def double_well_force(q: Any) -> Any:
    """V'(Q) = Q^3 - Q."""
    return q * q * q - q


def bath_state_names(n: int) -> tuple[str, ...]:
    """The state names of a particle (``q0``, ``p0``) with n bath coordinates: ``q0 .. qn, p0 .. pn`` (so that
    ``observe = "q"`` is every position and ``observe = "q0,p0"`` the particle)."""
    return tuple(f"q{i}" for i in range(n + 1)) + tuple(f"p{i}" for i in range(n + 1))


class ParticleBath(System):
    """A particle (q0, p0) with N bath coordinates: the shared state layout, size checks and lift."""

    separable: ClassVar[bool] = True
    torch_invariants: ClassVar[bool] = True
    default_sampler: ClassVar[str] = "particle"
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    default_dt: ClassVar[float] = 0.1
    default_t_end: ClassVar[float] = 100.0
    N: int

    def _set_size(self, what: str) -> None:
        n = _check_count(type(self).__name__, self.N, what, 1, MAX_OSCILLATORS)
        object.__setattr__(self, "N", n)
        object.__setattr__(self, "dim", 2 * (n + 1))
        object.__setattr__(self, "state_names", bath_state_names(n))

    def particle(self, y: np.ndarray) -> np.ndarray:
        """The particle's ``(Q, P)`` of states y (..., dim): (..., 2)."""
        y = self._check_state(y)
        return y[..., [0, self.N + 1]]

    def bath_at_rest(self, Q: Any, P: Any) -> np.ndarray:  # noqa: N803 - the particle's names
        """Full states (n, dim) of particle states ``Q``, ``P`` (n,) with the bath at rest where the system's
        convention puts it (its equilibrium, given Q)."""
        raise NotImplementedError

    def _dense_check(self, batch: tuple[int, ...], size: int) -> None:
        from ..resources import check_size

        check_size("N", float(np.prod(batch, dtype=float)) * size * size, what=f"dense {size} x {size} matrices of "
                   f"{self.name!r} (N = {self.N})", way_out="use the O(N) steppers of vpintegrator.compiled.bath or "
                   "an explicit method (stormer_verlet)")

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        m = self.N + 1
        return np.concatenate([y[..., m:], -self.potential_gradient(y[..., :m])], axis=-1)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """df/dy (..., dim, dim), dense: ``[[0, I], [-V''(q), 0]]``."""
        y = self._check_state(y)
        m = self.N + 1
        self._dense_check(y.shape[:-1], 2 * m)
        out = np.zeros(y.shape[:-1] + (2 * m, 2 * m))
        out[..., :m, m:] = np.eye(m)
        out[..., m:, :m] = -self.potential_hessian(y[..., :m])
        return out

    def divergence(self, y: np.ndarray) -> np.ndarray:
        return np.zeros(self._check_state(y).shape[:-1])

    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        return np.array(p, dtype=np.float64)

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        self._dense_check(p.shape[:-1], self.N + 1)
        return np.broadcast_to(np.eye(self.N + 1), p.shape[:-1] + (self.N + 1, self.N + 1)).copy()

    def hamiltonian(self, y: np.ndarray) -> np.ndarray:
        """H; y (..., dim) -> (...)."""
        return self._invariant_energy(self._check_state(y))

    def _invariant_energy(self, y: Any) -> Any:
        """The energy H (each system's own; NumPy arrays or torch tensors)."""
        raise NotImplementedError


@register_system
@dataclass(frozen=True)
class KacZwanzig(ParticleBath):
    """The Kac-Zwanzig particle-bath model (module docstring).

    Parameters
    ----------
    N : int
        Bath oscillators, 1 .. 10^4; the state has 2 (N + 1) components. Default 100.
    gamma : float
        Peak of the spectral density k(omega) (>= 0; 0 uncouples the bath). Default 0.05.
    omega0 : float
        Centre of the density (> 0). Default 1.2.
    width : float
        Width of the density (> 0): ``k = gamma exp(-(omega - omega0)^2 / (2 width^2))``. Default 0.3.
    omega_max : float
        The frequency grid covers (0, omega_max] (> 0). Default 4.
    """

    N: int = 100
    gamma: float = 0.05
    omega0: float = 1.2
    width: float = 0.3
    omega_max: float = 4.0

    name: ClassVar[str] = "kac_zwanzig"
    dim: ClassVar[int] = 202  # the default N's; each instance sets its own, 2 (N + 1)

    def __post_init__(self) -> None:
        self._set_size("bath oscillators")
        object.__setattr__(self, "gamma", finite_float(self.gamma, "KacZwanzig parameter 'gamma' (the spectral density's "
                                                     "peak)", nonnegative=True, key="gamma"))
        for key in ("omega0", "width", "omega_max"):
            object.__setattr__(self, key, _check_positive_finite("KacZwanzig", key, getattr(self, key)))
        d = self.omega_max / self.N
        omega = (np.arange(self.N) + 0.5) * d
        weight = self.density(omega) * d  # c_j^2 / omega_j^2
        object.__setattr__(self, "_omega", omega)
        object.__setattr__(self, "_weight", weight)
        object.__setattr__(self, "_c", omega * np.sqrt(weight))

    # --- the bath ------------------------------------------------------------------------------------------
    def density(self, omega: Any) -> Any:
        """The spectral density k(omega) = gamma exp(-(omega - omega0)^2 / (2 width^2)) (K's cosine transform)."""
        omega = np.asarray(omega, dtype=np.float64)
        return self.gamma * np.exp(-((omega - self.omega0) ** 2) / (2.0 * self.width**2))

    @property
    def frequencies(self) -> np.ndarray:
        """omega_j (N,)."""
        return self._omega.copy()  # type: ignore[attr-defined]

    @property
    def couplings(self) -> np.ndarray:
        """c_j (N,)."""
        return self._c.copy()  # type: ignore[attr-defined]

    @property
    def shifts(self) -> np.ndarray:
        """c_j / omega_j^2 (N,): the bath's equilibrium is ``q_j = shift_j Q``."""
        return self._c / self._omega**2  # type: ignore[attr-defined]

    def kernel(self, t: Any) -> np.ndarray:
        """The memory kernel of this bath, ``K_N(t) = sum_j c_j^2 / omega_j^2 cos(omega_j t)`` (exact for the
        particle's GLE), at times t (any shape)."""
        t = np.asarray(t, dtype=np.float64)
        out = np.zeros(t.shape)
        flat = out.reshape(-1)
        tt = t.reshape(-1)
        step = max(1, 2_000_000 // max(self.N, 1))
        for i in range(0, tt.size, step):  # memory: (chunk, N) at a time
            phase = np.outer(tt[i:i + step], self._omega)  # type: ignore[attr-defined]
            flat[i:i + step] = np.cos(phase) @ self._weight  # type: ignore[attr-defined]
        return out

    def memory_time(self, tol: float = 1e-9) -> float:
        """The time after which the kernel's envelope ``exp(-width^2 t^2 / 2)`` is below ``tol`` of its start."""
        tol = float(tol)
        if not 0 < tol < 1:
            raise VPIntegratorError(f"memory_time: tol must be in (0, 1); got {tol!r}", key="tol")
        return math.sqrt(2.0 * math.log(1.0 / tol)) / self.width

    def coarse(self, t_max: float, memory: float | None = None) -> "KacZwanzig":
        """The coarse bath for observation times up to ``t_max``: the same density on M <= N oscillators of
        (0, omega_c], ``omega_c = min(omega_max, omega0 + width sqrt(2 ln 1e16))`` and
        ``M = ceil(omega_c (t_max + memory) / 2 pi)`` (its kernel does not recur before t_max + memory; memory
        default ``memory_time()``), or this system when that M is not smaller."""
        t_max = finite_float(t_max, "coarse bath: t_max", positive=True, key="t_max")
        memory = self.memory_time() if memory is None else finite_float(memory, "coarse bath: memory", key="memory")
        cut = self.omega0 + self.width * math.sqrt(2.0 * math.log(1.0 / _COARSE_CUT))
        omega_c = min(self.omega_max, cut)
        m = int(math.ceil(omega_c * (t_max + max(memory, 0.0)) / (2.0 * math.pi)))
        if m >= self.N:
            return self
        return replace(self, N=max(m, 1), omega_max=omega_c)

    def bath_at_rest(self, Q: Any, P: Any) -> np.ndarray:  # noqa: N803
        Q, P = np.broadcast_arrays(np.atleast_1d(np.asarray(Q, dtype=np.float64)),
                                   np.atleast_1d(np.asarray(P, dtype=np.float64)))
        n = self.N
        y = np.zeros((Q.shape[0], self.dim))
        y[:, 0], y[:, n + 1] = Q, P
        y[:, 1:n + 1] = Q[:, None] * self.shifts
        return y

    # --- the separable split ------------------------------------------------------------------------------
    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        Q, x = q[..., :1], q[..., 1:] - q[..., :1] * self.shifts  # x_j: the oscillators' stretch
        g = np.empty(q.shape)
        g[..., 0] = double_well_force(Q[..., 0]) - x @ self._c  # type: ignore[attr-defined]
        g[..., 1:] = self._omega**2 * x  # type: ignore[attr-defined]
        return g

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        m = self.N + 1
        self._dense_check(q.shape[:-1], m)
        h = np.zeros(q.shape[:-1] + (m, m))
        idx = np.arange(1, m)
        h[..., 0, 0] = 3.0 * q[..., 0] ** 2 - 1.0 + float(np.sum(self._weight))  # type: ignore[attr-defined]
        h[..., 0, 1:] = -self._c  # type: ignore[attr-defined]
        h[..., 1:, 0] = -self._c  # type: ignore[attr-defined]
        h[..., idx, idx] = self._omega**2  # type: ignore[attr-defined]
        return h

    def _invariant_energy(self, y: Any) -> Any:  # NumPy arrays or torch tensors
        xp = array_namespace(y)
        n = self.N
        shifts, w2 = self.shifts, self._omega**2  # type: ignore[attr-defined]
        if xp is not np:
            shifts = xp.as_tensor(shifts, dtype=y.dtype, device=y.device)
            w2 = xp.as_tensor(w2, dtype=y.dtype, device=y.device)
        Q, P = y[..., 0], y[..., n + 1]
        x = y[..., 1:n + 1] - Q[..., None] * shifts
        p = y[..., n + 2:]
        return 0.5 * P * P + double_well(Q) + 0.5 * (p * p).sum(-1) + 0.5 * (w2 * x * x).sum(-1)


def particle_states(dim: int, n: int | None, rng: Any, system: Any, Q: Any = None, P: Any = None,  # noqa: N803
                    low: Any = (-1.5, -0.5), high: Any = (1.5, 0.5)) -> np.ndarray:
    """The sampler ``particle`` of the particle-bath systems (``kac_zwanzig``, ``particle_chain``): the particle's
    ``(Q, P)`` given (``Q`` and ``P``: numbers or lists of one length) or uniform in the box ``[low, high]`` (two
    numbers each, for Q and P; n points), the bath at rest as the system puts it (``bath_at_rest``)."""
    lift = getattr(system, "bath_at_rest", None)
    if not callable(lift):
        raise VPIntegratorError(f"sampler 'particle' is the particle-bath systems' (kac_zwanzig, particle_chain); "
                                f"system {getattr(system, 'name', system)!r} has no bath: use 'box', 'sphere' or "
                                "'list'", key="sampler")
    if Q is not None or P is not None:
        if Q is None or P is None:
            raise VPIntegratorError("sampler 'particle': give both Q and P (lists of one length), or neither (a box)",
                                    key="Q")
        qs = np.atleast_1d(np.asarray(Q, dtype=np.float64))
        ps = np.atleast_1d(np.asarray(P, dtype=np.float64))
        if qs.ndim != 1 or qs.shape != ps.shape or not (np.isfinite(qs).all() and np.isfinite(ps).all()):
            raise VPIntegratorError(f"sampler 'particle': Q and P must be finite numbers or lists of one length; got "
                                    f"Q={Q!r}, P={P!r}", key="Q")
        if n is not None and n != qs.size:
            raise VPIntegratorError(f"sampler 'particle' got {qs.size} particle states but n={n}; drop n or make it "
                                    "match", key="n_traj")
        return lift(qs, ps)
    if n is None:
        raise VPIntegratorError("sampler 'particle' needs n (the number of initial conditions) or lists Q and P",
                                key="n_traj")
    if rng is None:
        rng = np.random.default_rng()
    lo = np.asarray(low, dtype=np.float64).reshape(-1)
    hi = np.asarray(high, dtype=np.float64).reshape(-1)
    if lo.shape != (2,) or hi.shape != (2,) or not (np.isfinite(lo).all() and np.isfinite(hi).all()) \
            or not (lo <= hi).all():
        raise VPIntegratorError(f"sampler 'particle': low and high are [Q, P] bounds with low <= high; got "
                                f"low={low!r}, high={high!r}", key="low")
    pts = rng.uniform(lo, hi, size=(n, 2))
    return lift(pts[:, 0], pts[:, 1])


def _register_sampler() -> None:
    """The sampler ``particle`` beside the systems that use it."""
    from . import initial_conditions

    initial_conditions._SAMPLERS.setdefault("particle", particle_states)


_register_sampler()
