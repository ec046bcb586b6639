"""Free rigid body (Euler's equations), the paper's main example.

Angular momentum ``z = (z1, z2, z3)`` with principal moments of inertia ``I = (I1, I2, I3)``::

    dz/dt = (a z2 z3, b z1 z3, c z1 z2)
    a = (I2 - I3) / (I2 I3),  b = (I3 - I1) / (I3 I1),  c = (I1 - I2) / (I1 I2)

Divergence free (component i does not depend on z_i), Lie-Poisson. Invariants: energy
``H = (z1^2/I1 + z2^2/I2 + z3^2/I3) / 2`` and Casimir ``C = |z|^2``.

Default inertia (2, 1, 2/3) (GeometricProblems, and what the paper's scripts ran) gives
(a, b, c) = (1/2, -1, 1/2). The paper's text says (1, 2, 2/3); both inertias and coefficients are
recorded by [`RigidBody.params`][vpintegrator.systems.System.params].

Linear parameter form: θ = (a, b, c), F(z) = diag(z2 z3, z1 z3, z1 z2). Only differences of the 1/I_k act on
the motion (a + b + c = 0): the identifiable parameters are u = (1/I2 − 1/I1, 1/I3 − 1/I1), θ = G u, and
``with_theta`` builds one representative inertia (1/I = (0, u2, u3) shifted to be positive), which has the
given (a, b, c) exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import dataclasses

import numpy as np

from ..arrays import array_namespace
from ..errors import VPIntegratorError
from .base import System, _check_positive_finite
from .registry import register_system



def check_inertia(owner: str, inertia) -> tuple[float, float, float]:
    """``inertia`` as 3 positive finite floats, or a one-line error naming ``owner``'s parameter."""
    if isinstance(inertia, (str, bytes, dict)) or not hasattr(inertia, "__len__") or len(inertia) != 3:
        raise VPIntegratorError(f"{owner} parameter 'inertia' must be 3 positive numbers (I1, I2, I3); got {inertia!r}")
    i1, i2, i3 = (_check_positive_finite(owner, "inertia", v) for v in inertia)
    return i1, i2, i3


def inertia_coefficients(inertia: tuple[float, float, float]) -> tuple[float, float, float]:
    """(a, b, c) = (1/I3 − 1/I2, 1/I1 − 1/I3, 1/I2 − 1/I1) of the free rigid body's equations, as written above."""
    i1, i2, i3 = inertia
    return ((i2 - i3) / (i2 * i3), (i3 - i1) / (i3 * i1), (i1 - i2) / (i1 * i2))


class _Body(System):
    """What the rigid bodies (``RigidBody``, ``rigid_body_exp.RigidBodyExp``) share: the state z, the inertia's
    coefficients, the paper protocol's step and span and the Casimir |z|²; each gives its field ``inertia``."""

    inertia: tuple[float, float, float]
    dim: ClassVar[int] = 3
    state_names: ClassVar[tuple[str, ...]] = ("z1", "z2", "z3")
    invariant_names: ClassVar[tuple[str, ...]] = ("energy", "casimir")
    shear_splittable: ClassVar[bool] = True
    # paper protocol: implicit-midpoint data with h = 0.2 on t in [0, 20] (the rigid body's from the 1238 sphere points)
    default_dt: ClassVar[float] = 0.2
    default_t_end: ClassVar[float] = 20.0
    default_y0: ClassVar[tuple[float, ...]] = (float(np.sin(1.1)), 0.0, float(np.cos(1.1)))
    torch_invariants: ClassVar[bool] = True

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(a, b, c) of the free body's equations (module docstring)."""
        return inertia_coefficients(self.inertia)

    def _derived_params(self) -> dict[str, float]:
        a, b, c = self.coefficients
        return {"a": a, "b": b, "c": c}

    # NumPy arrays or torch tensors (torch_invariants)
    def _quadratic_energy(self, y: np.ndarray) -> np.ndarray:
        # the sum over components written out: NumPy's sum of y * y / I in the same order, and no constant
        # array to move to a tensor's device
        i1, i2, i3 = (1.0 / v for v in self.inertia)
        return 0.5 * (y[..., 0] * y[..., 0] * i1 + y[..., 1] * y[..., 1] * i2 + y[..., 2] * y[..., 2] * i3)

    def _invariant_casimir(self, y: np.ndarray) -> np.ndarray:
        return (y * y).sum(-1)


@register_system
@dataclass(frozen=True)
class RigidBody(_Body):
    """Euler's equations of a free rigid body.

    Parameters
    ----------
    inertia : tuple of 3 floats
        Principal moments of inertia (I1, I2, I3), each > 0. Default (2, 1, 2/3).
    """

    inertia: tuple[float, float, float] = (2.0, 1.0, 2.0 / 3.0)

    name: ClassVar[str] = "rigid_body"
    kernel_id: ClassVar[int | None] = 0  # compiled/systems.py
    default_sampler: ClassVar[str] = "paper_sphere"
    theta_names: ClassVar[tuple[str, ...]] = ("a", "b", "c")

    def __post_init__(self) -> None:
        object.__setattr__(self, "inertia", check_inertia("RigidBody", self.inertia))

    # --- the linear parameter form (module docstring) ---------------------------------------------
    @classmethod
    def parameter_features(cls, z):
        xp = array_namespace(z)
        zero = z[..., 0] * 0.0
        z1, z2, z3 = z[..., 0], z[..., 1], z[..., 2]
        rows = [(z2 * z3, zero, zero), (zero, z1 * z3, zero), (zero, zero, z1 * z2)]
        return xp.stack([xp.stack(r, -1) for r in rows], -2)

    def theta(self) -> np.ndarray:
        return np.array(self.coefficients, dtype=np.float64)

    def with_theta(self, theta: np.ndarray) -> "RigidBody":
        theta = np.asarray(theta, dtype=np.float64)
        u = np.array([0.0, theta[2], -theta[1]])  # 1/I up to a shift (the gauge): a = u3 − u2 holds by a + b + c = 0
        u = u - u.min() + 1.0
        i1, i2, i3 = (float(v) for v in 1.0 / u)
        return dataclasses.replace(self, inertia=(i1, i2, i3))

    @classmethod
    def theta_basis(cls) -> np.ndarray:
        return np.array([[-1.0, 1.0], [0.0, -1.0], [1.0, 0.0]])  # a = u3 - u2, b = -u3, c = u2

    @property
    def a(self) -> float:
        return self.coefficients[0]

    @property
    def b(self) -> float:
        return self.coefficients[1]

    @property
    def c(self) -> float:
        return self.coefficients[2]

    def field_params(self) -> np.ndarray:
        """p = (a, b, c)."""
        return np.array(self.coefficients, dtype=np.float64)

    @staticmethod
    def field(p, x):
        """f on components (``System`` docstring): p = (a, b, c)."""
        a, b, c = p[0], p[1], p[2]
        z1, z2, z3 = x[0], x[1], x[2]
        return (a * z2 * z3, b * z1 * z3, c * z1 * z2)

    @staticmethod
    def field_jacobian(p, x):
        a, b, c = p[0], p[1], p[2]
        z1, z2, z3 = x[0], x[1], x[2]
        return ((0.0, a * z3, a * z2), (b * z3, 0.0, b * z1), (c * z2, c * z1, 0.0))

    _invariant_energy = _Body._quadratic_energy
