"""Two coupled harmonic oscillators with a sigmoid-switched coupling (GeometricProblems).

State ``y = (q1, q2, p1, p2)``; canonical Hamiltonian ``H = T(p) + V(q)`` with::

    T(p) = p1^2 / (2 m1) + p2^2 / (2 m2)
    V(q) = k1 q1^2 / 2 + k2 q2^2 / 2 + k sigma(q1) (q2 - q1)^2 / 2,   sigma(x) = 1 / (1 + exp(-x))

so ``dq_i/dt = p_i / m_i`` and::

    dp1/dt = -k1 q1 - k sigma(q1) (q1 - q2) - (k/2) (q1 - q2)^2 sigma'(q1)
    dp2/dt = -k2 q2 + k sigma(q1) (q1 - q2)

Defaults (GeometricProblems): m = (2, 1), k1 = 1.5, k2 = 0.3, k = 1; y0 = (1, 0, 2, 0); h = 0.4;
t in [0, 100]. Hamiltonian flows preserve phase-space volume (Liouville). Invariant: energy ``H``.
Separable, so Stormer-Verlet applies.

Linear parameter form: θ = (1/m1, 1/m2, k1, k2, k) (``parameter_features``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import VPIntegratorError
from ..arrays import array_namespace
from .base import System, _check_finite, _check_positive_finite


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # written with exp(-|x|) so it never overflows; NumPy arrays or torch tensors
    xp = array_namespace(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@dataclass(frozen=True)
class CoupledOscillator(System):
    """Coupled harmonic oscillator, state (q1, q2, p1, p2).

    Parameters
    ----------
    m : tuple of 2 floats
        Masses (m1, m2) > 0. Default (2, 1).
    k1, k2 : float
        Spring constants of the two oscillators. Defaults 1.5, 0.3.
    k : float
        Coupling strength, switched on by sigmoid(q1). Default 1.
    """

    m: tuple[float, float] = (2.0, 1.0)
    k1: float = 1.5
    k2: float = 0.3
    k: float = 1.0

    name: ClassVar[str] = "coupled_oscillator"
    dim: ClassVar[int] = 4
    state_names: ClassVar[tuple[str, ...]] = ("q1", "q2", "p1", "p2")
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    separable: ClassVar[bool] = True
    default_dt: ClassVar[float] = 0.4
    default_t_end: ClassVar[float] = 100.0
    default_y0: ClassVar[tuple[float, ...]] = (1.0, 0.0, 2.0, 0.0)
    default_sampler: ClassVar[str] = "list"
    torch_invariants: ClassVar[bool] = True
    theta_names: ClassVar[tuple[str, ...]] = ("1/m1", "1/m2", "k1", "k2", "k")

    def __post_init__(self) -> None:
        m = self.m
        if isinstance(m, (str, bytes, dict)) or not hasattr(m, "__len__") or len(m) != 2:
            raise VPIntegratorError(
                f"CoupledOscillator parameter 'm' must be 2 positive masses (m1, m2); got {m!r}"
            )
        object.__setattr__(self, "m", tuple(_check_positive_finite("CoupledOscillator", "m", v) for v in m))
        for name in ("k1", "k2", "k"):
            object.__setattr__(self, name, _check_finite("CoupledOscillator", name, getattr(self, name)))

    # --- the linear parameter form (module docstring) ---------------------------------------------
    @classmethod
    def parameter_features(cls, z):
        xp = array_namespace(z)
        zero = z[..., 0] * 0.0
        q1, q2, p1, p2 = z[..., 0], z[..., 1], z[..., 2], z[..., 3]
        s = 1.0 / (1.0 + xp.exp(-q1))  # σ(q1)
        d = q1 - q2
        rows = [(p1, zero, zero, zero, zero), (zero, p2, zero, zero, zero),
                (zero, zero, -q1, zero, -(s * d) - 0.5 * d * d * s * (1.0 - s)),
                (zero, zero, zero, -q2, s * d)]
        return xp.stack([xp.stack(r, -1) for r in rows], -2)

    def theta(self) -> np.ndarray:
        return np.array([1.0 / self.m[0], 1.0 / self.m[1], self.k1, self.k2, self.k], dtype=np.float64)

    def with_theta(self, theta: np.ndarray) -> "CoupledOscillator":
        theta = np.asarray(theta, dtype=np.float64)
        if not (theta[0] > 0 and theta[1] > 0):
            raise VPIntegratorError(f"CoupledOscillator.with_theta: 1/m = {theta[:2]} is not positive (theta = "
                                    "(1/m1, 1/m2, k1, k2, k))")
        return dataclasses.replace(self, m=(float(1.0 / theta[0]), float(1.0 / theta[1])), k1=float(theta[2]),
                                   k2=float(theta[3]), k=float(theta[4]))

    # --- the separable split ----------------------------------------------------------------------
    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        return np.asarray(p, dtype=np.float64) / np.asarray(self.m)

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        return np.broadcast_to(np.diag(1.0 / np.asarray(self.m)), p.shape[:-1] + (2, 2)).copy()

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        q1, q2 = q[..., 0], q[..., 1]
        s = _sigmoid(q1)
        ds = s * (1.0 - s)
        d = q1 - q2
        g1 = self.k1 * q1 + self.k * s * d + 0.5 * self.k * ds * d * d
        g2 = self.k2 * q2 - self.k * s * d
        return np.stack([g1, g2], axis=-1)

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        q1, q2 = q[..., 0], q[..., 1]
        s = _sigmoid(q1)
        ds = s * (1.0 - s)
        dds = ds * (1.0 - 2.0 * s)
        d = q1 - q2
        h11 = self.k1 + self.k * s + 2.0 * self.k * ds * d + 0.5 * self.k * dds * d * d
        h12 = -self.k * s - self.k * ds * d
        h22 = self.k2 + self.k * s
        return np.stack([np.stack([h11, h12], -1), np.stack([h12, h22], -1)], axis=-2)

    # --- System API -------------------------------------------------------------------------------
    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        q, p = y[..., :2], y[..., 2:]
        return np.concatenate([self.kinetic_gradient(p), -self.potential_gradient(q)], axis=-1)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        q, p = y[..., :2], y[..., 2:]
        jac = np.zeros(y.shape[:-1] + (4, 4))
        jac[..., :2, 2:] = self.kinetic_hessian(p)
        jac[..., 2:, :2] = -self.potential_hessian(q)
        return jac

    def hamiltonian(self, y: np.ndarray) -> np.ndarray:
        """``H(q, p)``; y (..., 4) -> (...)."""
        return self._invariant_energy(self._check_state(y))

    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:  # NumPy arrays or torch tensors
        q1, q2, p1, p2 = (y[..., i] for i in range(4))
        m1, m2 = self.m
        s = _sigmoid(q1)
        kinetic = 0.5 * p1 * p1 / m1 + 0.5 * p2 * p2 / m2
        potential = 0.5 * self.k1 * q1 * q1 + 0.5 * self.k2 * q2 * q2 + 0.5 * self.k * s * (q2 - q1) ** 2
        return kinetic + potential
