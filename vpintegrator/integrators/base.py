"""The [`Integrator`][vpintegrator.integrators.Integrator] contract and the per-method metadata ([`MethodInfo`][vpintegrator.integrators.MethodInfo]); the registry is in
``vpintegrator.integrators.registry``, the Newton helpers in ``vpintegrator.integrators.newton``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import VPIntegratorError, finite_float
from ..systems import System
from .newton import NotConverged


#: what each entry of ``needs`` asks of a system (a ``System`` class flag): (what, tail of the error)
NEEDS: dict[str, tuple[str, str]] = {
    "separable": (
        "a separable Hamiltonian H(q, p) = T(p) + V(q)",
        "is not one. Use implicit_midpoint, gauss_legendre4 or rk4",
    ),
    "shear_splittable": (
        "a field whose i-th component does not depend on y_i (shear_splittable)",
        "is not. Use implicit_midpoint or rk4",
    ),
    "linear_part": (
        "a system whose quadratic part has an exact flow (a lattice: linear_flow and nonlinear_gradient)",
        "is not one. Use stormer_verlet, implicit_midpoint or rk4",
    ),
    "inertia": (
        "a free rigid body with principal moments of inertia (RigidBody: the rotation splittings)",
        "is not one. Use implicit_midpoint, gauss_legendre4 or rk4",
    ),
}


@dataclass(frozen=True)
class MethodInfo:
    """What a registered method is and what it preserves (one row of [`describe_methods`][vpintegrator.integrators.describe_methods]).

    ``preserves_volume`` means det J = 1 to rounding on every system the method supports (symplectic
    methods also preserve volume on canonical Hamiltonian systems, i.e. ``separable`` ones, but not on
    the Lie-Poisson rigid body); ``preserves_quadratic_invariants`` means every quadratic first integral
    of every system is conserved to rounding; ``symplectic`` refers to canonical Hamiltonian systems (for
    the rigid body's rotation splittings, which run on nothing else: a Poisson map, i.e. symplectic on
    each sphere ``|z| = const``); ``needs`` lists the ``System`` attributes the method requires.
    """

    name: str
    order: int
    implicit: bool
    symplectic: bool
    symmetric: bool
    preserves_volume: bool
    preserves_quadratic_invariants: bool
    needs: tuple[str, ...]
    description: str
    family: str

    @property
    def explicit(self) -> bool:
        return not self.implicit

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "needs": list(self.needs), "explicit": self.explicit}


class Integrator:
    """Base class of a one-step method, vectorised over a batch of states, float64.

    The contract (every [`Integrator`][vpintegrator.integrators.Integrator]):

    - ``step(system, y, dt)`` maps states ``y`` of shape ``(batch, dim)`` to the states one step ``dt``
      later, same shape;
    - ``step_jacobian(system, y, dt)`` gives ``d y_next / d y`` of shape ``(batch, dim, dim)``, computed
      analytically (tangents propagated through explicit stages with ``system.jacobian``; implicit
      methods differentiate their converged stage equations; compositions multiply the sub-step
      Jacobians), accurate to rounding;
    - ``signed_step(system, y, h)`` / ``signed_step_jacobian`` do the same for a step of either sign
      (``h < 0`` runs the method backwards: compositions use negative sub-steps, and a symmetric method
      satisfies ``signed_step(-h) o signed_step(h) = id``);
    - ``name``, ``order``, ``implicit`` and the structure flags (``symplectic``, ``symmetric``,
      ``preserves_volume``, ``preserves_quadratic_invariants``, ``needs``, ``description``, ``family``)
      describe it, collected in [`info`][vpintegrator.integrators.Integrator.info] (a [`MethodInfo`][vpintegrator.integrators.MethodInfo]);
    - ``supports(system)`` raises if the method cannot run on that system (one ``System`` flag per
      entry of ``needs``: Stormer-Verlet needs ``separable``, the splittings ``shear_splittable``).

    Subclasses implement ``_step`` and ``_step_jacobian`` on validated ``(batch, dim)`` float64 arrays
    with a float step of either sign, and raise ``NotConverged`` when a solve fails.
    """

    name: ClassVar[str] = ""
    order: ClassVar[int] = 0
    implicit: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    symmetric: ClassVar[bool] = False
    preserves_volume: ClassVar[bool] = False
    preserves_quadratic_invariants: ClassVar[bool] = False
    needs: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    family: ClassVar[str] = ""

    @property
    def info(self) -> MethodInfo:
        """This method's metadata."""
        return MethodInfo(
            name=self.name, order=int(self.order), implicit=bool(self.implicit), symplectic=bool(self.symplectic),
            symmetric=bool(self.symmetric), preserves_volume=bool(self.preserves_volume),
            preserves_quadratic_invariants=bool(self.preserves_quadratic_invariants), needs=tuple(self.needs),
            description=self.description, family=self.family,
        )

    def supports(self, system: System) -> None:
        """Raise [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] if this method cannot integrate ``system``."""
        for flag in self.needs:
            if not getattr(system, flag, False):
                what, tail = NEEDS.get(flag, (f"a system with {flag} = True", "is not"))
                raise VPIntegratorError(f"method {self.name!r} needs {what}; system {system.name!r} {tail}")
        cls = type(system)
        if self.implicit and cls.field_jacobian is None and cls.jacobian is System.jacobian:  # no Jacobian given
            why = getattr(system, "jacobian_note", "") or "no field_jacobian"
            raise VPIntegratorError(f"method {self.name!r} solves with the Jacobian; system {system.name!r} has none "
                                    f"({why}). Use an explicit method (rk4, dop853), or give field_jacobian")

    def step(self, system: System, y: np.ndarray, dt: float) -> np.ndarray:
        """One step; y (batch, dim) -> (batch, dim), float64."""
        y = self._prepare(system, y, dt)
        return self._run(self._step, system, y, float(dt))

    def step_jacobian(self, system: System, y: np.ndarray, dt: float) -> np.ndarray:
        """Jacobian of the one-step map; y (batch, dim) -> (batch, dim, dim), ``[b, i, j] = d y1_i / d y_j``."""
        y = self._prepare(system, y, dt)
        return self._run(self._step_jacobian, system, y, float(dt))

    def signed_step(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        """[`step`][vpintegrator.integrators.Integrator.step] with a finite nonzero step ``h`` of either sign."""
        y = self._prepare(system, y, h, signed=True)
        return self._run(self._step, system, y, float(h))

    def signed_step_jacobian(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        """[`step_jacobian`][vpintegrator.integrators.Integrator.step_jacobian] with a finite nonzero step ``h`` of either sign."""
        y = self._prepare(system, y, h, signed=True)
        return self._run(self._step_jacobian, system, y, float(h))

    def _run(self, fn, system, y, h):
        try:
            return fn(system, y, h)
        except NotConverged as exc:
            raise VPIntegratorError(f"{self.name}: {exc.detail}") from None

    # subclasses implement these on validated (batch, dim) float64 arrays
    def _step(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        raise NotImplementedError

    def _step_jacobian(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        raise NotImplementedError

    def _prepare(self, system: System, y: np.ndarray, dt: float, signed: bool = False) -> np.ndarray:
        if not isinstance(system, System):
            raise VPIntegratorError(f"system must be a vpintegrator System; got {type(system).__name__}")
        self.supports(system)
        if signed:
            h = finite_float(dt, "h")
            if h == 0.0:
                raise VPIntegratorError("h must be a finite nonzero number; got 0.0")
        else:
            check_dt(dt)
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 2 or y.shape[1] != system.dim:
            raise VPIntegratorError(
                f"y must have shape (batch, {system.dim}) for system {system.name!r}; got shape {y.shape}"
            )
        return y

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_dt(dt: Any) -> float:
    """``dt`` as a float, or a one-line error unless it is finite and positive."""
    return finite_float(dt, "dt", positive=True)


def every_kth(every: Any) -> int:
    """``save_every`` (keep the states after steps k, 2k, ...) as an int >= 1, else a one-line error naming it."""
    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise VPIntegratorError(f"save_every must be an int >= 1 (keep every k-th state); got {every!r}",
                                key="save_every")
    return int(every)
