"""The 3-D Volterra (Lotka-Volterra) system used by VPNets: divergence free, not Hamiltonian in y.

::

    dy/dt = (y1 (y2 - y3), y2 (y3 - y1), y3 (y1 - y2))

Divergence ``(y2 - y3) + (y3 - y1) + (y1 - y2) = 0``. Invariants: ``sum = y1 + y2 + y3`` and
``product = y1 y2 y3``. No parameters. Component i depends on y_i, so the shear splitting does not
apply; use implicit_midpoint, gauss_legendre4 or rk4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import System
from .registry import register_system


@register_system
@dataclass(frozen=True)
class Volterra(System):
    """The 3-D Volterra system (no parameters)."""

    name: ClassVar[str] = "volterra"
    kernel_id: ClassVar[int | None] = 2  # compiled/systems.py
    dim: ClassVar[int] = 3
    state_names: ClassVar[tuple[str, ...]] = ("y1", "y2", "y3")
    invariant_names: ClassVar[tuple[str, ...]] = ("sum", "product")
    default_dt: ClassVar[float] = 0.1
    default_t_end: ClassVar[float] = 20.0
    default_y0: ClassVar[tuple[float, ...]] = (1.0, 2.0, 1.5)
    default_sampler: ClassVar[str] = "box"
    torch_invariants: ClassVar[bool] = True  # the invariants are arithmetic: NumPy arrays or torch tensors

    @staticmethod
    def field(p, x):
        """f on components (``System`` docstring); no parameters (p empty)."""
        y1, y2, y3 = x[0], x[1], x[2]
        return (y1 * (y2 - y3), y2 * (y3 - y1), y3 * (y1 - y2))

    @staticmethod
    def field_jacobian(p, x):
        y1, y2, y3 = x[0], x[1], x[2]
        return ((y2 - y3, y1, -y1), (-y2, y3 - y1, y2), (y3, -y3, y1 - y2))

    def _invariant_sum(self, y: np.ndarray) -> np.ndarray:
        return y[..., 0] + y[..., 1] + y[..., 2]

    def _invariant_product(self, y: np.ndarray) -> np.ndarray:
        return y[..., 0] * y[..., 1] * y[..., 2]
