"""Implicit Runge-Kutta methods by Gauss collocation: implicit midpoint and Gauss-Legendre of any stage count.

Both solve their equations by Newton's method with the system Jacobian, iterating only the batch items
not yet converged, to ``tol * max(1, |y|_inf)`` on the update (or the rounding floor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import VPIntegratorError
from .base import Integrator
from .coefficients import gauss_legendre
from .newton import NotConverged, eye_like, newton_solve


@dataclass(frozen=True)
class _Newton(Integrator):
    """Shared Newton options of the implicit methods.

    Parameters
    ----------
    tol : float
        Stop when the largest Newton update of a state is below ``tol * max(1, |y|_inf)``.
    max_iter : int
        Give up (VPIntegratorError) after this many iterations.
    """

    tol: float = 1e-15
    max_iter: int = 50
    implicit: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    preserves_quadratic_invariants: ClassVar[bool] = True
    family: ClassVar[str] = "Gauss collocation"

    def _converged(self, err: np.ndarray, prev: np.ndarray, scale: np.ndarray) -> np.ndarray:
        # either below tol, or stalled at the rounding floor (an update no smaller than the last one,
        # both already tiny): Newton converges quadratically, so a stall means rounding noise
        return (err <= self.tol * scale) | ((err <= 1e3 * self.tol * scale) & (err >= 0.5 * prev))

    def _fail(self, err: np.ndarray, active: np.ndarray) -> NotConverged:
        candidates = np.flatnonzero(active)
        worst = int(candidates[np.argmax(err[candidates])])
        return NotConverged(
            f"Newton did not converge in {self.max_iter} iterations for batch item {worst} "
            f"(last update {err[worst]:.3g}); reduce dt or raise max_iter"
        )

    def _newton(self, y: np.ndarray, u: np.ndarray, update) -> np.ndarray:
        """The unknowns u (batch, ...) of the states y (batch, dim) by Newton from their start u, iterating only the
        items not yet converged: ``update(ya, ua)`` is the Newton update of the active items' ``ua``."""
        scale = np.maximum(1.0, np.max(np.abs(y), axis=1))
        active = np.ones(y.shape[0], dtype=bool)
        prev = np.full(y.shape[0], np.inf)
        err = np.full(y.shape[0], np.inf)
        for _ in range(self.max_iter):
            idx = np.flatnonzero(active)
            ua = u[idx]
            delta = update(y[idx], ua)
            u[idx] = ua - delta
            e = np.max(np.abs(delta).reshape(len(idx), -1), axis=1)
            e = np.where(np.isfinite(e), e, np.inf)
            done = self._converged(e, prev[idx], scale[idx])
            err[idx], prev[idx] = e, e
            active[idx[done]] = False
            if not active.any():
                return u
        raise self._fail(err, active)


@dataclass(frozen=True)
class ImplicitMidpoint(_Newton):
    """Implicit midpoint: ``y1 = y + h f((y + y1) / 2)``, solved by Newton with the system Jacobian.

    Symplectic and conserves quadratic invariants, but NOT volume preserving on the Lie-Poisson rigid
    body: det J = 1 + (h^3/2) abc z1 z2 z3 + O(h^5) (abc = -1/4 by default), up to 1.9e-4 from 1 at
    h = 0.2 on the unit sphere (canonical Hamiltonian systems: det J = 1 to rounding).
    """

    name: ClassVar[str] = "implicit_midpoint"
    order: ClassVar[int] = 2
    description: ClassVar[str] = "implicit midpoint rule (1-stage Gauss), Newton"

    def _solve(self, system, y, h):
        """Converged ``y1`` (batch, dim), from explicit Euler's guess (error O(h^2))."""
        eye = np.eye(y.shape[1])

        def update(ya, y1a):
            mid = 0.5 * (ya + y1a)
            residual = y1a - ya - h * system.vector_field(mid)
            return newton_solve(eye - 0.5 * h * system.jacobian(mid), residual[..., None])[..., 0]
        return self._newton(y, y + h * system.vector_field(y), update)

    def _step(self, system, y, h):
        return self._solve(system, y, h)

    def _step_jacobian(self, system, y, h):
        # differentiate y1 = y + h f(m), m = (y + y1)/2:  (I - h/2 A) dy1 = (I + h/2 A) dy,  A = f'(m)
        y1 = self._solve(system, y, h)
        a = system.jacobian(0.5 * (y + y1))
        eye = eye_like(y)
        return newton_solve(eye - 0.5 * h * a, eye + 0.5 * h * a)


def gauss_legendre_tableau(stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Butcher tableau ``(A, b, c)`` of the s-stage Gauss-Legendre method (order 2s), read-only
    ([`coefficients.gauss_legendre`][vpintegrator.integrators.coefficients.gauss_legendre]: computed once)."""
    s = int(stages)
    if s < 1:
        raise VPIntegratorError(f"Gauss-Legendre needs stages >= 1; got {stages!r}")
    return gauss_legendre(s)


@dataclass(frozen=True)
class GaussLegendre(_Newton):
    """s-stage Gauss-Legendre collocation (order 2s), Newton on the stage equations.

    Stage increments ``Z_i = Y_i - y`` solve ``Z_i = h sum_j a_ij f(y + Z_j)``; then
    ``y1 = y + h sum_j b_j f(y + Z_j)``. Registered as ``gauss_legendre<2s>``; ``stages`` is an option of
    [`get_integrator`][vpintegrator.integrators.get_integrator].
    """

    stages: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.stages, bool) or not isinstance(self.stages, (int, np.integer)) or self.stages < 1:
            raise VPIntegratorError(f"Gauss-Legendre needs stages = an int >= 1; got {self.stages!r}")
        object.__setattr__(self, "stages", int(self.stages))

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"gauss_legendre{2 * self.stages}"

    @property
    def order(self) -> int:  # type: ignore[override]
        return 2 * self.stages

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"{self.stages}-stage Gauss-Legendre collocation, order {2 * self.stages}, Newton"

    @property
    def tableau(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(A, b, c)``."""
        return gauss_legendre_tableau(self.stages)

    def _newton_matrix(self, system, stages, h):
        """``I - h (a_ij f'(Y_j))`` as (batch, s*dim, s*dim) from stages Y (batch, s, dim)."""
        batch, s, d = stages.shape
        a = self.tableau[0]
        jac = system.jacobian(stages)  # (batch, s, d, d)
        blocks = -h * a[None, :, :, None, None] * jac[:, None, :, :, :]  # (batch, i, j, d, d)
        matrix = blocks.transpose(0, 1, 3, 2, 4).reshape(batch, s * d, s * d)  # rows (i, d), cols (j, d)
        return matrix + np.eye(s * d)

    def _solve(self, system, y, h):
        """Converged stage values Y (batch, s, dim), from ``Z_i = h c_i f(y)``."""
        a, _, c = self.tableau
        s, d = self.stages, y.shape[1]

        def update(ya, za):
            stages = ya[:, None, :] + za
            residual = za - h * np.einsum("ij,njd->nid", a, system.vector_field(stages))  # f at the stages: (n, s, dim)
            matrix = self._newton_matrix(system, stages, h)
            return newton_solve(matrix, residual.reshape(len(ya), s * d, 1)).reshape(len(ya), s, d)
        return y[:, None, :] + self._newton(y, h * c[None, :, None] * system.vector_field(y)[:, None, :], update)

    def _step(self, system, y, h):
        stages = self._solve(system, y, h)
        return y + h * np.einsum("j,njd->nd", self.tableau[1], system.vector_field(stages))

    def _step_jacobian(self, system, y, h):
        # dY_i = dy + h sum_j a_ij f'(Y_j) dY_j  ->  (I - h A (x) f') dY = [I; ...; I] dy
        s = self.stages
        batch, d = y.shape
        stages = self._solve(system, y, h)
        matrix = self._newton_matrix(system, stages, h)
        rhs = np.tile(np.eye(d), (s, 1))  # (s d, d)
        dstages = newton_solve(matrix, np.broadcast_to(rhs, (batch, s * d, d))).reshape(batch, s, d, d)
        jac = system.jacobian(stages)  # (batch, s, d, d)
        return np.eye(d) + h * np.einsum("j,njab,njbc->nac", self.tableau[1], jac, dstages)

