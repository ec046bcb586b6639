"""Explicit Runge-Kutta methods: any tableau as data (``ExplicitRungeKutta``), Euler and the classical RK4.

A method is its tableau: subclass ``ExplicitRungeKutta`` with ``name``, ``order`` and ``tableau`` (``(a, b, scale)``
as in ``coefficients``) and register it; the NumPy step, its Jacobian and the compiled loops
(``vpintegrator.compiled``) all read that tableau, so nothing else is written::

    @dataclass(frozen=True)
    class Heun(ExplicitRungeKutta):
        name: ClassVar[str] = "heun"
        order: ClassVar[int] = 2
        tableau: ClassVar[ExplicitTableau] = (((0.0, 0.0), (1.0, 0.0)), (1.0, 1.0), 2.0)

    register_integrator(Heun())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from .base import Integrator
from .coefficients import EULER, RK4 as RK4_TABLEAU, ExplicitTableau
from .newton import eye_like


def explicit_rk_step(f: Callable[[Any], Any], y: Any, h: float, tableau: ExplicitTableau,
                     jac: Callable[[Any], Any] | None = None) -> Any:
    """One step of the explicit Runge-Kutta ``tableau`` (``coefficients``) of the field ``f`` from ``y``, on any
    arrays with ``+`` and ``*`` (NumPy, torch): stage inputs ``y + (a_ij h) k_j`` (zero entries skipped), then
    ``y + (h / scale) (b_1 k_1 + ... + b_s k_s)`` summed in order. With ``jac`` (NumPy), the step's Jacobian
    instead: the tangents ``K_i = f'(x_i) dx_i/dy`` through the same stages."""
    a, b, scale = tableau
    ks: list[Any] = []
    Ks: list[Any] = []
    for i, row in enumerate(a):
        x, X = y, None
        for j in range(i):
            if row[j] != 0.0:
                x = x + (row[j] * h) * ks[j]
                if jac is not None:
                    X = (eye_like(y) if X is None else X) + (row[j] * h) * Ks[j]
        ks.append(f(x))
        if jac is not None:
            Ks.append(jac(x) if X is None else jac(x) @ X)
    ks, y = (Ks, eye_like(y)) if jac is not None else (ks, y)
    acc = b[0] * ks[0]
    for bi, k in zip(b[1:], ks[1:]):
        acc = acc + bi * k
    return y + (h / scale) * acc


class ExplicitRungeKutta(Integrator):
    """An explicit Runge-Kutta method of the tableau ``tableau`` (``coefficients``: ``(a, b, scale)``); the compiled
    loops step the same tableau (a subclass that overrides ``_step`` is not its tableau, and runs NumPy only)."""

    tableau: ClassVar[ExplicitTableau]
    family: ClassVar[str] = "explicit Runge-Kutta"

    def _step(self, system, y, h):
        return explicit_rk_step(system.vector_field, y, h, self.tableau)

    def _step_jacobian(self, system, y, h):
        return explicit_rk_step(system.vector_field, y, h, self.tableau, jac=system.jacobian)


@dataclass(frozen=True)
class ExplicitEuler(ExplicitRungeKutta):
    """Explicit Euler: ``y1 = y + h f(y)``."""

    name: ClassVar[str] = "euler"
    order: ClassVar[int] = 1
    description: ClassVar[str] = "explicit Euler, y1 = y + h f(y)"
    tableau: ClassVar[ExplicitTableau] = EULER


@dataclass(frozen=True)
class RK4(ExplicitRungeKutta):
    """The classical fourth-order Runge-Kutta method."""

    name: ClassVar[str] = "rk4"
    order: ClassVar[int] = 4
    description: ClassVar[str] = "classical fourth-order Runge-Kutta"
    tableau: ClassVar[ExplicitTableau] = RK4_TABLEAU
