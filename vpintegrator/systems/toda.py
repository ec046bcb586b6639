"""The periodic Toda lattice (GeometricProblems' ``TodaLattice``): N particles on a ring, exponential bonds.

State ``y = (q_0 .. q_{N-1}, p_0 .. p_{N-1})``, ``dim = 2 N``::

    H(q, p) = sum_n p_n^2 / 2 + alpha sum_n exp(q_n - q_{n+1}),   q_N = q_0

(a [`Lattice`][vpintegrator.systems.lattice.Lattice] with ``phi(r) = alpha exp(-r)`` on the bonds
``r = q_{n+1} - q_n``). Defaults (GeometricProblems): N = 200, alpha = 0.64, dt = 0.1, t in [0, 120];
initial conditions the bump family ``q0 = h(20 mu |x + mu / 2|)`` on the N points of [-0.5, 0.5], ``p0 = 0``
(the sampler ``bump``, one mu per trajectory). Invariant recorded: the energy ``H`` (the lattice is completely
integrable; its total momentum ``sum p``, [`Toda.momentum`][vpintegrator.systems.toda.Toda.momentum], is
conserved too but not listed: it is 0 on the bump family, where a relative drift means nothing). Separable: Stormer-Verlet
and its compositions apply (stable for ``dt < 2 / (2 sqrt(alpha))`` near rest, 1.25 at alpha = 0.64).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..arrays import array_namespace
from .base import _check_positive_finite
from .lattice import Lattice
from .registry import register_system


@register_system
@dataclass(frozen=True)
class Toda(Lattice):
    """The periodic Toda lattice.

    Parameters
    ----------
    N : int
        Number of sites (>= 3); the state has 2 N components. Default 200.
    alpha : float
        Strength of the exponential interaction, > 0. Default 0.64.
    """

    N: int = 200
    alpha: float = 0.64

    name: ClassVar[str] = "toda"
    dim: ClassVar[int] = 400  # the default N's; each instance sets its own (2 N)
    invariant_names: ClassVar[tuple[str, ...]] = ("energy",)
    periodic: ClassVar[bool] = True
    kind: ClassVar[int] = 0  # compiled/lattice.py
    #: stepped by the array loops of vpintegrator.compiled.lattice (set in the class's own body: a subclass may
    #: change the bonds)
    lattice_kernel: ClassVar[bool] = True
    default_dt: ClassVar[float] = 0.1
    default_t_end: ClassVar[float] = 120.0

    def __post_init__(self) -> None:
        self._set_sites()
        object.__setattr__(self, "alpha", _check_positive_finite("Toda", "alpha", self.alpha))

    def bond_params(self) -> np.ndarray:
        return np.array([self.alpha], dtype=np.float64)

    def phi(self, r: Any) -> Any:
        return self.alpha * array_namespace(r).exp(-r)

    def dphi(self, r: Any) -> Any:
        return -self.alpha * array_namespace(r).exp(-r)

    def ddphi(self, r: Any) -> Any:
        return self.alpha * array_namespace(r).exp(-r)

    def momentum(self, y: Any) -> Any:
        """The total momentum ``sum p``: (..., 2N) -> (...), conserved (NumPy arrays or torch tensors)."""
        return y[..., self.N:].sum(-1)
