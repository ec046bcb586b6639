"""The Fermi-Pasta-Ulam-Tsingou beta chain with fixed ends: N particles between two walls.

State ``y = (q_0 .. q_{N-1}, p_0 .. p_{N-1})``, ``dim = 2 N``::

    H(q, p) = sum_n p_n^2 / 2 + sum_{b=0}^{N} (r_b^2 / 2 + beta r_b^4 / 4),   r_b = q_b - q_{b-1},  q_{-1} = q_N = 0

(a [`Lattice`][vpintegrator.systems.lattice.Lattice] with fixed ends and ``phi(r) = r^2 / 2 + beta r^4 / 4``).
Defaults: N = 200, beta = 1, dt = 0.1, t in [0, 120]; initial conditions by the sampler ``bump`` (one mu per
trajectory, the Toda lattice's family; its profile vanishes at both ends for mu >= 0.3) or any other.
Invariant: the energy ``H``. Separable: Stormer-Verlet and its compositions apply (stable near rest for
``dt < 1``, the fastest mode's frequency being just below 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .base import _check_finite
from .lattice import Lattice
from .registry import register_system


@register_system
@dataclass(frozen=True)
class FPUBeta(Lattice):
    """The FPU-beta chain with fixed ends.

    Parameters
    ----------
    N : int
        Number of moving sites (>= 3); the state has 2 N components. Default 200.
    beta : float
        Strength of the quartic bond term (finite; beta >= 0 keeps the energy bounded below). Default 1.
    """

    N: int = 200
    beta: float = 1.0

    name: ClassVar[str] = "fpu_beta"
    dim: ClassVar[int] = 400  # the default N's; each instance sets its own (2 N)
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    periodic: ClassVar[bool] = False
    kind: ClassVar[int] = 1  # compiled/lattice.py
    #: stepped by the array loops of vpintegrator.compiled.lattice (set in the class's own body: a subclass may
    #: change the bonds)
    lattice_kernel: ClassVar[bool] = True
    default_dt: ClassVar[float] = 0.1
    default_t_end: ClassVar[float] = 120.0

    def __post_init__(self) -> None:
        self._set_sites()
        object.__setattr__(self, "beta", _check_finite("FPUBeta", "beta", self.beta))

    def bond_params(self) -> np.ndarray:
        return np.array([self.beta], dtype=np.float64)

    def phi(self, r: Any) -> Any:
        r2 = r * r
        return 0.5 * r2 + 0.25 * self.beta * r2 * r2

    def dphi(self, r: Any) -> Any:
        return r + self.beta * r * r * r

    def ddphi(self, r: Any) -> Any:
        return 1.0 + 3.0 * self.beta * r * r
