"""Explicit Runge-Kutta methods: Euler and the classical RK4."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Integrator
from .newton import eye_like


@dataclass(frozen=True)
class ExplicitEuler(Integrator):
    """Explicit Euler: ``y1 = y + h f(y)``."""

    name: ClassVar[str] = "euler"
    order: ClassVar[int] = 1
    description: ClassVar[str] = "explicit Euler, y1 = y + h f(y)"
    family: ClassVar[str] = "explicit Runge-Kutta"

    def _step(self, system, y, h):
        return y + h * system.vector_field(y)

    def _step_jacobian(self, system, y, h):
        return eye_like(y) + h * system.jacobian(y)


@dataclass(frozen=True)
class RK4(Integrator):
    """The classical fourth-order Runge-Kutta method."""

    name: ClassVar[str] = "rk4"
    order: ClassVar[int] = 4
    description: ClassVar[str] = "classical fourth-order Runge-Kutta"
    family: ClassVar[str] = "explicit Runge-Kutta"

    def _step(self, system, y, h):
        f = system.vector_field
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        k4 = f(y + h * k3)
        return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    def _step_jacobian(self, system, y, h):
        f, jac = system.vector_field, system.jacobian
        eye = eye_like(y)
        # K_i = d k_i / d y: the stage Jacobian times the tangent of the stage input
        k1, K1 = f(y), jac(y)
        y2 = y + 0.5 * h * k1
        k2, K2 = f(y2), jac(y2) @ (eye + 0.5 * h * K1)
        y3 = y + 0.5 * h * k2
        k3, K3 = f(y3), jac(y3) @ (eye + 0.5 * h * K2)
        y4 = y + h * k3
        K4 = jac(y4) @ (eye + h * K3)
        return eye + (h / 6.0) * (K1 + 2.0 * K2 + 2.0 * K3 + K4)
