"""Composition methods: ``y1 = Phi(g_k h) o ... o Phi(g_1 h) (y)`` for a symmetric base method Phi.

With palindromic fractions ``gammas`` (summing to 1) and a symmetric base of order 2 the composition is
symmetric and of a higher order: Yoshida/Suzuki triple jump (order 4, three sub-steps), Suzuki's fractal
5-stage scheme (order 4, smaller error constant) and Yoshida's 7-stage "solution A" (order 6). The
composition keeps what the base preserves (symplecticity, volume, quadratic invariants) and needs what
it needs. The Jacobian is the product of the sub-step Jacobians.

[`register_compositions`][vpintegrator.integrators.register_compositions] registers ``<base>_tj4``, ``<base>_suzuki4`` and ``<base>_y6`` for any
registered symmetric order-2 method, a user's own included (the built-in ones are registered for
``implicit_midpoint``, ``splitting``, ``stormer_verlet`` and ``rotation_splitting``).

Data interface (compiled backends build the same method from these): ``base`` is the registered name of
the base method and ``gammas`` the tuple of sub-step fractions, applied in order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from ..systems import System
from .base import Integrator
from .coefficients import SUZUKI4, TRIPLE_JUMP4, YOSHIDA6
from .newton import eye_like
from .registry import get_integrator, list_integrators, register_integrator

#: scheme key -> (gammas, order reached from an order-2 symmetric base, description)
SCHEMES: dict[str, tuple[tuple[float, ...], int, str]] = {
    "tj4": (TRIPLE_JUMP4, 4, "Yoshida/Suzuki triple jump (3 sub-steps, order 4)"),
    "suzuki4": (SUZUKI4, 4, "Suzuki fractal composition (5 sub-steps, order 4)"),
    "y6": (YOSHIDA6, 6, "Yoshida solution A (7 sub-steps, order 6)"),
}


def _from_base(flag: str) -> Any:
    """A property that reads ``flag`` of the composition's base method."""
    return property(lambda self: getattr(self.base_method, flag), doc=f"The base method's ``{flag}``.")


@dataclass(frozen=True)
class Composition(Integrator):
    """Composition ``Phi(g_k h) o ... o Phi(g_1 h)`` of the registered symmetric method ``base``.

    Parameters
    ----------
    base : str
        Registered name of a symmetric base method of order 2.
    gammas : tuple of float
        Sub-step fractions (palindromic, summing to 1), applied in order.
    scheme : str
        Short name of the coefficients (``tj4``, ``suzuki4``, ``y6``); the method is ``<base>_<scheme>``.
    scheme_order : int
        Order of the composition of an order-2 symmetric base.
    """

    base: str = "implicit_midpoint"
    gammas: tuple[float, ...] = TRIPLE_JUMP4
    scheme: str = "tj4"
    scheme_order: int = 4

    def __post_init__(self) -> None:
        g = tuple(float(v) for v in self.gammas)
        if not g or not math.isclose(sum(g), 1.0, abs_tol=1e-13) or not np.allclose(g, g[::-1], rtol=0, atol=1e-15):
            raise VPIntegratorError(f"composition gammas must be palindromic and sum to 1; got {g}")
        object.__setattr__(self, "gammas", g)
        method = get_integrator(self.base)
        if not method.symmetric or method.order != 2:
            raise VPIntegratorError(
                f"composition needs a symmetric base method of order 2; {self.base!r} is "
                f"{'symmetric' if method.symmetric else 'not symmetric'} of order {method.order}"
            )
        object.__setattr__(self, "_base", method)

    @property
    def base_method(self) -> Integrator:
        """The base method (resolved from the registry when the composition was made)."""
        return self._base  # type: ignore[attr-defined]

    # metadata: inherited from the base, order and symmetry from the scheme
    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.base}_{self.scheme}"

    @property
    def order(self) -> int:  # type: ignore[override]
        return self.scheme_order

    implicit = _from_base("implicit")
    symplectic = _from_base("symplectic")
    preserves_volume = _from_base("preserves_volume")
    preserves_quadratic_invariants = _from_base("preserves_quadratic_invariants")
    needs = _from_base("needs")

    @property
    def symmetric(self) -> bool:  # type: ignore[override]
        return True

    @property
    def family(self) -> str:  # type: ignore[override]
        return "composition"

    @property
    def description(self) -> str:  # type: ignore[override]
        about = SCHEMES[self.scheme][2] if self.scheme in SCHEMES else f"{len(self.gammas)} sub-steps"
        return f"{about} of {self.base}"

    def supports(self, system: System) -> None:
        super().supports(system)
        self.base_method.supports(system)

    def _step(self, system, y, h):
        base = self.base_method
        for g in self.gammas:
            y = base._step(system, y, g * h)
        return y

    def _step_jacobian(self, system, y, h):
        base = self.base_method
        jac = eye_like(y)
        for g in self.gammas:
            jac = base._step_jacobian(system, y, g * h) @ jac
            y = base._step(system, y, g * h)
        return jac


def compositions(bases: tuple[str, ...]) -> list[Composition]:
    """Every scheme of [`SCHEMES`][vpintegrator.integrators.SCHEMES] for every base name, as [`Composition`][vpintegrator.integrators.Composition] objects."""
    return [
        Composition(base=b, gammas=gammas, scheme=key, scheme_order=order)
        for b in bases
        for key, (gammas, order, _) in SCHEMES.items()
    ]


def register_compositions(base: str | Integrator, schemes: Sequence[str] | None = None, *,
                          replace: bool = False) -> list[Composition]:
    """Register the compositions ``<base>_<scheme>`` of a symmetric order-2 method; returns them.

    Parameters
    ----------
    base : str or Integrator
        A registered method's name, or an [`Integrator`][vpintegrator.integrators.Integrator] instance (registered first when its name is
        not). It must be symmetric (``step(-h) o step(h) = id``) and of order 2.
    schemes : list of str, optional
        Names of [`SCHEMES`][vpintegrator.integrators.SCHEMES]; default all: ``tj4`` (order 4), ``suzuki4`` (order 4), ``y6`` (order 6).
    replace : bool
        Replace compositions of these names that are already registered.

    Examples
    --------
    ::

        register_integrator(MySplitting())          # symmetric, order 2, name "my_splitting"
        register_compositions("my_splitting")       # my_splitting_tj4, my_splitting_suzuki4, my_splitting_y6
    """
    if isinstance(base, Integrator):
        if base.name not in list_integrators():
            register_integrator(base)
        base = base.name
    if not isinstance(base, str):
        raise VPIntegratorError(f"register_compositions: base must be a method name or an Integrator; got "
                                f"{type(base).__name__}")
    method = get_integrator(base)
    if not method.symmetric or method.order != 2:
        raise VPIntegratorError(
            f"register_compositions: base {base!r} must be a symmetric method of order 2 (the schemes' "
            f"coefficients assume it); it is {'symmetric' if method.symmetric else 'not symmetric'} of order "
            f"{method.order}"
        )
    keys = tuple(SCHEMES) if schemes is None else tuple(schemes)
    unknown = [k for k in keys if k not in SCHEMES]
    if unknown or not keys:
        raise VPIntegratorError(f"register_compositions: unknown scheme(s) {unknown or list(keys)}; valid schemes: "
                                f"{', '.join(SCHEMES)}")
    made = [Composition(base=base, gammas=SCHEMES[k][0], scheme=k, scheme_order=SCHEMES[k][1]) for k in keys]
    taken = [c.name for c in made if c.name in list_integrators()]
    if taken and not replace:
        raise VPIntegratorError(f"register_compositions: {', '.join(taken)} already registered; pass replace=True "
                                "to replace them")
    for c in made:
        register_integrator(c, replace=replace)
    return made
