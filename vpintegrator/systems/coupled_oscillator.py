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
from .registry import register_system


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # written with exp(-|x|) so it never overflows; NumPy arrays or torch tensors
    xp = array_namespace(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid(x):
    """σ(x) from exp(-|x|) (never overflows), with NumPy ufuncs only: arrays, or scalars in numba."""
    e = np.exp(-np.abs(x))
    t = (x >= 0) * 1.0  # 1 or 0: the numerator is exactly 1 (x >= 0) or e (no select: numba's scalar np.where allocates)
    return (t + (1.0 - t) * e) / (1.0 + e)


def potential_gradient_of(p, q1, q2):
    """V'(q) = (dV/dq1, dV/dq2) on components; p = (m1, m2, k1, k2, k) (``CoupledOscillator.field``)."""
    k1, k2, k = p[2], p[3], p[4]
    s = sigmoid(q1)
    ds = s * (1.0 - s)
    d = q1 - q2
    return (k1 * q1 + k * s * d + 0.5 * k * ds * d * d, k2 * q2 - k * s * d)


def kinetic_gradient_of(p, p1, p2):
    """T'(p) = (p1 / m1, p2 / m2) on components."""
    return (p1 / p[0], p2 / p[1])


def potential_hessian_of(p, q1, q2):
    """V''(q) entries (h11, h12, h22) on components."""
    k1, k2, k = p[2], p[3], p[4]
    s = sigmoid(q1)
    ds = s * (1.0 - s)
    dds = ds * (1.0 - 2.0 * s)
    d = q1 - q2
    return (k1 + k * s + 2.0 * k * ds * d + 0.5 * k * dds * d * d, -k * s - k * ds * d, k2 + k * s)


@register_system
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
    kernel_id: ClassVar[int | None] = 1  # compiled/systems.py
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
    field_helpers: ClassVar[tuple] = (sigmoid, potential_gradient_of, kinetic_gradient_of, potential_hessian_of)

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

    # --- the separable split (on the components' functions above) ------------------------------------
    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        return np.stack(kinetic_gradient_of(self.field_params(), p[..., 0], p[..., 1]), axis=-1)

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        return np.broadcast_to(np.diag(1.0 / np.asarray(self.m)), p.shape[:-1] + (2, 2)).copy()

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        return np.stack(potential_gradient_of(self.field_params(), q[..., 0], q[..., 1]), axis=-1)

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        h11, h12, h22 = potential_hessian_of(self.field_params(), q[..., 0], q[..., 1])
        return np.stack([np.stack([h11, h12], -1), np.stack([h12, h22], -1)], axis=-2)

    # --- System API: the field on components (``System`` docstring) ------------------------------------
    def field_params(self) -> np.ndarray:
        """p = (m1, m2, k1, k2, k)."""
        return np.array([self.m[0], self.m[1], self.k1, self.k2, self.k], dtype=np.float64)

    @staticmethod
    def field(p, x):
        q1, q2, p1, p2 = x[0], x[1], x[2], x[3]
        g1, g2 = potential_gradient_of(p, q1, q2)
        v1, v2 = kinetic_gradient_of(p, p1, p2)
        return (v1, v2, -g1, -g2)

    @staticmethod
    def field_jacobian(p, x):
        h11, h12, h22 = potential_hessian_of(p, x[0], x[1])
        return ((0.0, 0.0, 1.0 / p[0], 0.0), (0.0, 0.0, 0.0, 1.0 / p[1]), (-h11, -h12, 0.0, 0.0),
                (-h12, -h22, 0.0, 0.0))

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
