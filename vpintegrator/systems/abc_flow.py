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
from .registry import register_system


@register_system
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
    kernel_id: ClassVar[int | None] = 3  # compiled/systems.py
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

    def field_params(self) -> np.ndarray:
        """p = (A, B, C)."""
        return np.array([self.A, self.B, self.C], dtype=np.float64)

    @staticmethod
    def field(p, x):
        """f on components (``System`` docstring): p = (A, B, C)."""
        A, B, C = p[0], p[1], p[2]
        xx, yy, z = x[0], x[1], x[2]
        return (A * np.sin(z) + C * np.cos(yy), B * np.sin(xx) + A * np.cos(z), C * np.sin(yy) + B * np.cos(xx))

    @staticmethod
    def field_jacobian(p, x):
        A, B, C = p[0], p[1], p[2]
        xx, yy, z = x[0], x[1], x[2]
        return ((0.0, -C * np.sin(yy), A * np.cos(z)), (B * np.cos(xx), 0.0, -A * np.sin(z)),
                (-B * np.sin(xx), C * np.cos(yy), 0.0))
