"""Structure-specific methods: Stormer-Verlet and the exactly volume-preserving shear splittings.

The shear splittings need a ``shear_splittable`` field (component ``f_i`` never depends on ``y_i``): the
flow of ``dy_i/dt = f_i(y)`` (others frozen) is then the exact shear ``y_i += t f_i(y)``, whose Jacobian
is unit-triangular up to permutation (det 1), so every composition of shears has det J = 1 to rounding.

McLachlan-type splittings are written as compositions of the Lie-Trotter map ``X(t) = d(t) o ... o 1(t)``
(shear 1 first) and its adjoint ``X*(t) = 1(t) o ... o d(t)`` (shear d first), alternately, with fractions
``gammas`` of the step: ``X(g1 h)`` then ``X*(g2 h)`` then ``X(g3 h)``... (adjacent shears of one
component merged). For two parts this is the classical ``A(a1) B(b1) A(a2) ...`` splitting with
``a1 = g1, b1 = g1 + g2, a2 = g2 + g3, ...``; the order conditions of such compositions hold for any
first-order basic method, so the order stays the same for any number d of shears.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import VPIntegratorError
from .base import Integrator
from .coefficients import BLANES_MOAN4_A, BLANES_MOAN4_B, MCLACHLAN2_A, STRANG
from .newton import eye_like


@dataclass(frozen=True)
class StormerVerlet(Integrator):
    """Stormer-Verlet (velocity Verlet, kick-drift-kick) for ``H = T(p) + V(q)``, state ``(q, p)``.

    ``p½ = p - h/2 V'(q);  q1 = q + h T'(p½);  p1 = p½ - h/2 V'(q1)``.
    """

    name: ClassVar[str] = "stormer_verlet"
    order: ClassVar[int] = 2
    symplectic: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    preserves_volume: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ("separable",)
    description: ClassVar[str] = "Stormer-Verlet (kick-drift-kick) for H = T(p) + V(q)"
    family: ClassVar[str] = "splitting"

    def _step(self, system, y, h):
        n = y.shape[1] // 2
        q, p = y[:, :n], y[:, n:]
        p_half = p - 0.5 * h * system.potential_gradient(q)
        q1 = q + h * system.kinetic_gradient(p_half)
        p1 = p_half - 0.5 * h * system.potential_gradient(q1)
        return np.concatenate([q1, p1], axis=1)

    def _step_jacobian(self, system, y, h):
        batch, d = y.shape
        n = d // 2
        q, p = y[:, :n], y[:, n:]
        eye = np.eye(d)
        dq, dp = eye[:n], eye[n:]  # tangents of q and p w.r.t. y: (n, d)
        p_half = p - 0.5 * h * system.potential_gradient(q)
        dp_half = dp - 0.5 * h * system.potential_hessian(q) @ dq
        q1 = q + h * system.kinetic_gradient(p_half)
        dq1 = dq + h * system.kinetic_hessian(p_half) @ dp_half
        dp1 = dp_half - 0.5 * h * system.potential_hessian(q1) @ dq1
        return np.concatenate([dq1, dp1], axis=1)


class _ShearSequence(Integrator):
    """A composition of exact shear flows ``y_i += c f_i(y)`` given by ``_sequence``."""

    symmetric: ClassVar[bool] = True
    preserves_volume: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ("shear_splittable",)
    family: ClassVar[str] = "splitting"

    def _sequence(self, d: int, h: float) -> list[tuple[int, float]]:
        raise NotImplementedError

    def _step(self, system, y, h):
        y = y.copy()
        for i, c in self._sequence(y.shape[1], h):
            y[:, i] += c * system.vector_field(y)[:, i]
        return y

    def _step_jacobian(self, system, y, h):
        y = y.copy()
        jac = eye_like(y)
        for i, c in self._sequence(y.shape[1], h):
            grad = system.jacobian(y)[:, i, :]  # d f_i / d y at the current point, (batch, d)
            # the shear's Jacobian is I + c e_i grad^T: only row i of the accumulated tangent changes
            jac[:, i, :] += c * np.einsum("nb,nbc->nc", grad, jac)
            y[:, i] += c * system.vector_field(y)[:, i]
        return jac


@dataclass(frozen=True)
class ShearSplitting(_ShearSequence):
    """Exactly volume-preserving Strang splitting into shear flows.

    The symmetric composition ``1(h/2) 2(h/2) ... d(h) ... 2(h/2) 1(h/2)`` is of order 2 and det J = 1 to
    rounding (see the module docstring).
    """

    name: ClassVar[str] = "splitting"
    order: ClassVar[int] = 2
    description: ClassVar[str] = "Strang splitting into exact shear flows 1(h/2)..d(h)..1(h/2)"

    @staticmethod
    def _sequence(d: int, h: float) -> list[tuple[int, float]]:  # type: ignore[override]
        return [(i, c * h) for i, c in shear_sequence(STRANG, d)]  # X(h/2) X*(h/2), the middle shears merged


def shear_sequence(gammas: tuple[float, ...], d: int) -> list[tuple[int, float]]:
    """``[(component, fraction of h), ...]`` in time order for ``X(g1) X*(g2) X(g3) ...`` on d shears."""
    out: list[tuple[int, float]] = []
    for k, g in enumerate(gammas):
        for i in (range(d) if k % 2 == 0 else range(d - 1, -1, -1)):
            if out and out[-1][0] == i:
                out[-1] = (i, out[-1][1] + g)
            else:
                out.append((i, g))
    return out


def gammas_from_splitting(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    """Lie-Trotter fractions of the two-part splitting ``A(a1) B(b1) A(a2) ... B(bs) A(a_{s+1})``."""
    if len(a) != len(b) + 1:
        raise VPIntegratorError("a two-part splitting A(a1) B(b1) ... A(a_{s+1}) needs len(a) = len(b) + 1")
    gammas = [a[0]]
    for k in range(len(b)):
        gammas.append(b[k] - gammas[-1])
        gammas.append(a[k + 1] - gammas[-1])
    if abs(gammas.pop() - 0.0) > 1e-14:  # the last A coefficient equals the last X* fraction
        raise VPIntegratorError("the splitting coefficients are not consistent (sum a != sum b)")
    return tuple(0.5 * (g + r) for g, r in zip(gammas, gammas[::-1]))  # exactly palindromic


@dataclass(frozen=True)
class LieTrotterComposition(_ShearSequence):
    """A McLachlan-type shear splitting: ``X(g1 h) X*(g2 h) X(g3 h) ...`` (see the module docstring).

    ``gammas`` (even length, palindromic, sum 1) give a symmetric method; ``splitting_order`` is its
    order. Data interface: ``gammas`` and ``shear_sequence`` give the shears in time order.
    """

    label: str = ""
    gammas: tuple[float, ...] = (0.5, 0.5)
    splitting_order: int = 2
    about: str = ""

    def __post_init__(self) -> None:
        g = tuple(float(v) for v in self.gammas)
        if len(g) % 2 or not math.isclose(sum(g), 1.0, abs_tol=1e-13) or not np.allclose(g, g[::-1], atol=1e-15):
            raise VPIntegratorError(f"{self.label}: gammas must be palindromic, of even length and sum to 1; got {g}")
        object.__setattr__(self, "gammas", g)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.label

    @property
    def order(self) -> int:  # type: ignore[override]
        return self.splitting_order

    @property
    def description(self) -> str:  # type: ignore[override]
        return self.about

    def _sequence(self, d, h):
        return [(i, c * h) for i, c in shear_sequence(self.gammas, d)]


SPLITTINGS = (
    LieTrotterComposition(
        label="splitting_mclachlan2",
        gammas=(MCLACHLAN2_A, 0.5 - MCLACHLAN2_A, 0.5 - MCLACHLAN2_A, MCLACHLAN2_A),
        splitting_order=2,
        about="McLachlan's optimal order-2 shear splitting, 4 Lie-Trotter stages (a = 0.19318...)",
    ),
    LieTrotterComposition(
        label="splitting_blanes_moan4",
        gammas=gammas_from_splitting(BLANES_MOAN4_A, BLANES_MOAN4_B),
        splitting_order=4,
        about="Blanes-Moan S6 order-4 shear splitting, 12 Lie-Trotter stages",
    ),
)
