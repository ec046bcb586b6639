"""The Arnold-Beltrami-Childress (ABC) flow: divergence free, not Hamiltonian, chaotic.

::

    dx/dt = A sin z + C cos y
    dy/dt = B sin x + A cos z
    dz/dt = C sin y + B cos x

Defaults A = sqrt(3), B = sqrt(2), C = 1: Arnold's classic chaotic choice (Dombre et al. 1986 write the
same flow as (1, sqrt(2/3), sqrt(1/3)), i.e. time scaled by sqrt(3)). Component i does not depend on
coordinate i, so the exact shear splitting applies. No invariants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import System, _check_finite


@dataclass(frozen=True)
class ABCFlow(System):
    """ABC flow on R^3 (periodic in each coordinate with period 2 pi).

    Parameters
    ----------
    A, B, C : float
        Amplitudes. Defaults sqrt(3), sqrt(2), 1.
    """

    A: float = math.sqrt(3.0)
    B: float = math.sqrt(2.0)
    C: float = 1.0

    name: ClassVar[str] = "abc_flow"
    dim: ClassVar[int] = 3
    state_names: ClassVar[tuple[str, ...]] = ("x", "y", "z")
    invariant_names: ClassVar[tuple[str, ...]] = ()
    shear_splittable: ClassVar[bool] = True
    default_dt: ClassVar[float] = 0.1
    default_t_end: ClassVar[float] = 20.0
    default_y0: ClassVar[tuple[float, ...]] = (0.1, 0.2, 0.3)
    default_sampler: ClassVar[str] = "box"
    torch_invariants: ClassVar[bool] = True  # no invariants: nothing to evaluate

    def __post_init__(self) -> None:
        for name in ("A", "B", "C"):
            object.__setattr__(self, name, _check_finite("ABCFlow", name, getattr(self, name)))

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        x, yy, z = y[..., 0], y[..., 1], y[..., 2]
        A, B, C = self.A, self.B, self.C
        return np.stack(
            [A * np.sin(z) + C * np.cos(yy), B * np.sin(x) + A * np.cos(z), C * np.sin(yy) + B * np.cos(x)],
            axis=-1,
        )

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        y = self._check_state(y)
        x, yy, z = y[..., 0], y[..., 1], y[..., 2]
        A, B, C = self.A, self.B, self.C
        zero = np.zeros_like(x)
        rows = [
            np.stack([zero, -C * np.sin(yy), A * np.cos(z)], axis=-1),
            np.stack([B * np.cos(x), zero, -A * np.sin(z)], axis=-1),
            np.stack([-B * np.sin(x), C * np.cos(yy), zero], axis=-1),
        ]
        return np.stack(rows, axis=-2)
