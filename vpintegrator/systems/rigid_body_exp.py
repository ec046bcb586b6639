"""A Lie-Poisson rigid body whose Hamiltonian is not quadratic: ``dz/dt = z x grad H(z)`` with::

    H(z) = (z1^2/I1 + z2^2/I2 + z3^2/I3) / 2 + epsilon exp(z1)

so, with ``E = exp(z1)`` and the free body's coefficients ``(a, b, c)``
([`RigidBody`][vpintegrator.systems.RigidBody])::

    dz/dt = (a z2 z3,  b z1 z3 + epsilon z3 E,  c z1 z2 - epsilon z2 E)

A system whose field lies outside polynomial and trigonometric libraries (the exponential extra term):
a problem where the form of the equations is unknown to the approaches compared. Invariants: the energy ``H``
and the Casimir ``C = |z|^2`` (every Lie-Poisson flow on so(3)* keeps it), both exact first integrals of
the flow; implicit midpoint and Gauss-Legendre keep ``C`` to rounding (it is quadratic), not ``H``.

Divergence free and shear splittable: component ``i`` does not depend on ``z_i`` (``H`` is a sum of
functions of one component each), so the shear splittings apply. The rigid body's rotation splittings
do not: they are the exact flows of the quadratic ``H``'s pieces (they refuse this system).

Defaults: the free body's inertia (2, 1, 2/3) and ``epsilon = 0.5``; on the unit sphere the extra term's
gradient ``epsilon exp(z1)`` ranges over [0.18, 1.36], as large as the quadratic part's (0.5 to 1.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..arrays import array_namespace
from .base import _check_finite
from .registry import register_system
from .rigid_body import _Body, check_inertia


@register_system
@dataclass(frozen=True)
class RigidBodyExp(_Body):
    """Rigid body with an exponential term in its Hamiltonian, ``H = sum z_i^2 / (2 I_i) + epsilon exp(z1)``.

    Parameters
    ----------
    inertia : tuple of 3 floats
        Principal moments of inertia (I1, I2, I3), each > 0. Default (2, 1, 2/3).
    epsilon : float
        Weight of the exponential term (any finite number; 0 is the free rigid body). Default 0.5.
    """

    inertia: tuple[float, float, float] = (2.0, 1.0, 2.0 / 3.0)
    epsilon: float = 0.5

    name: ClassVar[str] = "rigid_body_exp"
    kernel_id: ClassVar[int | None] = 4  # compiled/systems.py
    default_sampler: ClassVar[str] = "sphere"

    def __post_init__(self) -> None:
        object.__setattr__(self, "inertia", check_inertia("RigidBodyExp", self.inertia))
        object.__setattr__(self, "epsilon", _check_finite("RigidBodyExp", "epsilon", self.epsilon))

    def hamiltonian_gradient(self, y: np.ndarray) -> np.ndarray:
        """``grad H``; y (..., 3) -> (..., 3)."""
        y = self._check_state(y)
        i1, i2, i3 = self.inertia
        return np.stack([y[..., 0] / i1 + self.epsilon * np.exp(y[..., 0]), y[..., 1] / i2, y[..., 2] / i3], axis=-1)

    def field_params(self) -> np.ndarray:
        """p = (a, b, c, epsilon)."""
        return np.array([*self.coefficients, self.epsilon], dtype=np.float64)

    @staticmethod
    def field(p, x):
        """f on components (``System`` docstring): p = (a, b, c, epsilon); E = exp(z1) once."""
        a, b, c, eps = p[0], p[1], p[2], p[3]
        z1, z2, z3 = x[0], x[1], x[2]
        e = np.exp(z1)
        return (a * z2 * z3, b * z1 * z3 + eps * z3 * e, c * z1 * z2 - eps * z2 * e)

    @staticmethod
    def field_jacobian(p, x):
        a, b, c, eps = p[0], p[1], p[2], p[3]
        z1, z2, z3 = x[0], x[1], x[2]
        e = np.exp(z1)
        return ((0.0, a * z3, a * z2), (b * z3 + eps * z3 * e, 0.0, b * z1 + eps * e),
                (c * z2 - eps * z2 * e, c * z1 - eps * e, 0.0))

    # NumPy arrays or torch tensors (torch_invariants)
    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:
        return self._quadratic_energy(y) + self.epsilon * array_namespace(y).exp(y[..., 0])
