"""A user-defined system, in a module of its own (as a user's package would hold it): the pipeline must run
it from ``system = "user_systems:HarmonicOscillator"`` alone. Used by tests/test_user_system.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from vpintegrator.systems import System


@dataclass(frozen=True)
class HarmonicOscillator(System):
    """q' = p, p' = -omega^2 q: Hamiltonian, so volume preserving; energy (p^2 + omega^2 q^2) / 2."""

    omega: float = 1.0

    name: ClassVar[str] = "harmonic_oscillator"
    dim: ClassVar[int] = 2
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    shear_splittable: ClassVar[bool] = True  # f_q depends on p only, f_p on q only
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
