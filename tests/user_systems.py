"""A user-defined system, in a module of its own (as a user's package would hold it): the pipeline must run
it from ``system = "user_systems:HarmonicOscillator"`` alone. Used by tests/test_user_system.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from vpintegrator.systems import System


@dataclass(frozen=True)
class HarmonicOscillator(System):
    """q' = p, p' = -omega^2 q: Hamiltonian, so volume preserving; energy (p^2 + omega^2 q^2) / 2. Its field is
    written once (``field``/``field_jacobian``), so it compiles (docs/own_system.md, as the page shows it)."""

    omega: float = 1.0

    name: ClassVar[str] = "harmonic_oscillator"
    dim: ClassVar[int] = 2
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    shear_splittable: ClassVar[bool] = True  # f_q depends on p only, f_p on q only
    default_dt: ClassVar[float] = 0.1

    def field_params(self) -> np.ndarray:
        return np.array([self.omega])

    @staticmethod
    def field(p, x):
        return (x[1], -p[0] ** 2 * x[0])

    @staticmethod
    def field_jacobian(p, x):
        return ((0.0, 1.0), (-p[0] ** 2, 0.0))

    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:
        return 0.5 * (y[..., 1] ** 2 + self.omega**2 * y[..., 0] ** 2)


@dataclass(frozen=True)
class NumpyOscillator(System):
    """The same oscillator written as NumPy methods (``vector_field``/``jacobian`` overridden): runs, in NumPy only."""

    omega: float = 1.0

    name: ClassVar[str] = "numpy_oscillator"
    dim: ClassVar[int] = 2
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    default_dt: ClassVar[float] = 0.1

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        return np.stack([y[..., 1], -self.omega**2 * y[..., 0]], axis=-1)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        jac = np.zeros((*y.shape[:-1], 2, 2))
        jac[..., 0, 1] = 1.0
        jac[..., 1, 0] = -self.omega**2
        return jac

    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:
        return 0.5 * (y[..., 1] ** 2 + self.omega**2 * y[..., 0] ** 2)


@dataclass(frozen=True)
class HenonHeiles(System):
    """H = (v1^2 + v2^2) / 2 + (q1^2 + q2^2) / 2 + lam (q1^2 q2 - q2^3 / 3), state (q1, q2, v1, v2): a separable
    Hamiltonian given by its split (Stormer-Verlet compiles)."""

    lam: float = 1.0

    name: ClassVar[str] = "henon_heiles"
    dim: ClassVar[int] = 4
    separable: ClassVar[bool] = True
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    default_y0: ClassVar[tuple[float, ...]] = (0.1, -0.2, 0.3, 0.1)

    def field_params(self) -> np.ndarray:
        return np.array([self.lam])

    @staticmethod
    def field(p, x):
        return (x[2], x[3], -x[0] - 2.0 * p[0] * x[0] * x[1], -x[1] - p[0] * (x[0] * x[0] - x[1] * x[1]))

    @staticmethod
    def field_jacobian(p, x):
        return ((0.0, 0.0, 1.0, 0.0), (0.0, 0.0, 0.0, 1.0), (-1.0 - 2.0 * p[0] * x[1], -2.0 * p[0] * x[0], 0.0, 0.0),
                (-2.0 * p[0] * x[0], -1.0 + 2.0 * p[0] * x[1], 0.0, 0.0))

    @staticmethod
    def field_potential_gradient(p, q):
        return (q[0] + 2.0 * p[0] * q[0] * q[1], q[1] + p[0] * (q[0] * q[0] - q[1] * q[1]))

    @staticmethod
    def field_kinetic_gradient(p, v):
        return (v[0], v[1])

    def _invariant_energy(self, y: np.ndarray) -> np.ndarray:
        q1, q2, v1, v2 = (y[..., i] for i in range(4))
        return 0.5 * (v1**2 + v2**2 + q1**2 + q2**2) + self.lam * (q1**2 * q2 - q2**3 / 3.0)


@dataclass(frozen=True)
class NotCompilable(System):
    """A field numba cannot type (a generator expression): runs in NumPy, with one warning naming the line."""

    name: ClassVar[str] = "not_compilable"
    dim: ClassVar[int] = 2

    @staticmethod
    def field(p, x):
        return tuple(v for v in (x[1], -x[0]))


from vpintegrator.systems.lattice import Lattice  # noqa: E402


@dataclass(frozen=True)
class UserToda(Lattice):
    """The periodic Toda lattice as a user writes it: its bond force and stiffness on scalars (compiled array loops)."""

    N: int = 16
    alpha: float = 0.64

    name: ClassVar[str] = "user_toda"
    dim: ClassVar[int] = 32
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    periodic: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._set_sites()

    def bond_params(self) -> np.ndarray:
        return np.array([self.alpha])

    def phi(self, r):
        return self.alpha * np.exp(-r)

    @staticmethod
    def bond_force(par, r):
        return -par[0] * np.exp(-r)

    @staticmethod
    def bond_stiffness(par, r):
        return par[0] * np.exp(-r)


@dataclass(frozen=True)
class FieldOnly(System):
    """q' = v, v' = -q given by its field alone (no Jacobian, as a system from elsewhere may come)."""

    name: ClassVar[str] = "field_only"
    dim: ClassVar[int] = 2

    @staticmethod
    def field(p, x):
        return (x[1], -x[0])
