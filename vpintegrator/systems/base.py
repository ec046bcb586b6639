"""The [`System`][vpintegrator.systems.System] contract every physical system follows.

A system is a small frozen dataclass: its parameters (with defaults) are the dataclass fields, written
beside its equations in its own module. Every array method is batched over leading axes: a state
argument ``y`` has shape ``(..., dim)``; arrays are float64.

Invariants may also be evaluated on torch tensors (on any device, in the tensor's dtype) when a system
says so with ``torch_invariants = True``: its ``_invariant_<name>`` methods are then written once for
both, with the functions of ``xp = array_namespace(y)`` (NumPy and torch share the names used: ``sum``,
``exp``, ``abs``, ``where``, ...) and Python numbers for constants (no array to move to the tensor's
device). Every shipped system does; the device rollout engine (``vpintegrator.rollout.device``) relies
on it to keep the metrics on the GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from ..arrays import array_namespace
from ..errors import VPIntegratorError, finite_float


class System:
    """Base class of an autonomous ODE ``dy/dt = f(y)`` on ``R^dim``.

    Subclasses are frozen dataclasses whose fields are the parameters, and define ``name``, ``dim``,
    ``invariant_names``, [`vector_field`][vpintegrator.systems.System.vector_field], [`jacobian`][vpintegrator.systems.System.jacobian] and one ``_invariant_<name>`` method per
    invariant.

    Structure flags used by the integrators:

    - ``shear_splittable``: component ``f_i`` never depends on ``y_i``, so each shear flow
      ``y_i += t f_i(y)`` is exact and volume preserving (the ``splitting`` integrator needs this).
    - ``separable``: canonical Hamiltonian ``H(q, p) = T(p) + V(q)`` with state ``(q, p)``; the system
      then also defines [`kinetic_gradient`][vpintegrator.systems.System.kinetic_gradient], [`potential_gradient`][vpintegrator.systems.System.potential_gradient] and their Hessians
      (``stormer_verlet`` needs this).

    Paper defaults (``default_dt``, ``default_t_end``, ``default_y0``, ``default_sampler``) are class
    attributes; ``None`` where the system has none.

    ``torch_invariants``: the ``_invariant_<name>`` methods also take torch tensors (written with
    ``array_namespace``; see the module docstring). False by default: a user's NumPy-only invariants
    are evaluated on NumPy arrays only.

    ``state_names`` (``dim`` strings, optional) label the state components and ``state_units`` gives their
    unit (default ``"1"``, dimensionless) in the files written (their ``/state`` dimension scale, the
    ``units`` of ``/y``; ``vpintegrator.data.dimscales``); without names the components are
    ``y1 .. y<dim>``.
    """

    name: ClassVar[str] = ""
    dim: ClassVar[int] = 0
    invariant_names: ClassVar[tuple[str, ...]] = ()
    shear_splittable: ClassVar[bool] = False
    separable: ClassVar[bool] = False
    default_dt: ClassVar[float | None] = None
    default_t_end: ClassVar[float | None] = None
    default_y0: ClassVar[tuple[float, ...] | None] = None
    default_sampler: ClassVar[str | None] = None
    torch_invariants: ClassVar[bool] = False
    state_names: ClassVar[tuple[str, ...]] = ()
    state_units: ClassVar[str] = "1"

    # --- parameters -------------------------------------------------------------------------------
    def params(self) -> dict[str, float | list[Any]]:
        """Every parameter as plain floats / lists of floats (fit for HDF5 attributes)."""
        out: dict[str, float | list[Any]] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = _plain(getattr(self, f.name))
        out.update({k: _plain(v) for k, v in self._derived_params().items()})
        return out

    def _derived_params(self) -> dict[str, Any]:
        """Quantities derived from the parameters that should also be recorded (e.g. coefficients)."""
        return {}

    # --- dynamics ---------------------------------------------------------------------------------
    def vector_field(self, y: np.ndarray) -> np.ndarray:
        """``f(y)``; y (..., dim) -> (..., dim)."""
        raise NotImplementedError

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """``df/dy``; y (..., dim) -> (..., dim, dim), entry ``[..., i, j] = d f_i / d y_j``."""
        raise NotImplementedError

    def divergence(self, y: np.ndarray) -> np.ndarray:
        """Trace of the Jacobian; y (..., dim) -> (...). Zero for every shipped system."""
        return np.trace(self.jacobian(y), axis1=-2, axis2=-1)

    def __call__(self, t: float, y: np.ndarray) -> np.ndarray:
        """``f(y)`` with a time argument, in the ``fun(t, y)`` form SciPy's ``solve_ivp`` expects."""
        return self.vector_field(y)

    # --- invariants -------------------------------------------------------------------------------
    def invariants(self, y: Any) -> dict[str, Any]:
        """All invariants; y (..., dim) -> {name: (...)}. A torch tensor gives tensors (same device and
        dtype) when the system has ``torch_invariants``."""
        return {name: self.invariant(name, y) for name in self.invariant_names}

    def invariant(self, name: str, y: Any) -> Any:
        """One invariant by name; y (..., dim) -> (...)."""
        if name not in self.invariant_names:
            valid = ", ".join(self.invariant_names) or "(none)"
            raise VPIntegratorError(
                f"system {self.name!r} has no invariant {name!r}; valid invariant names: {valid}"
            )
        if array_namespace(y) is not np:
            if not self.torch_invariants:
                raise VPIntegratorError(
                    f"system {self.name!r} evaluates its invariants on NumPy arrays only (torch_invariants is "
                    "False); pass a NumPy array, or write its _invariant_<name> methods with array_namespace"
                )
            if y.ndim == 0 or y.shape[-1] != self.dim:
                raise VPIntegratorError(
                    f"state for system {self.name!r} must have shape (..., {self.dim}); got shape {tuple(y.shape)}"
                )
            return getattr(self, f"_invariant_{name}")(y)
        return getattr(self, f"_invariant_{name}")(self._check_state(y))

    # --- separable Hamiltonian split (only when ``separable``) ------------------------------------
    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        """``dH/dp = T'(p)``; p (..., dim/2) -> (..., dim/2)."""
        raise self._not_separable()

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        """``dH/dq = V'(q)``; q (..., dim/2) -> (..., dim/2)."""
        raise self._not_separable()

    def kinetic_hessian(self, p: np.ndarray) -> np.ndarray:
        """``d2T/dp2``; p (..., dim/2) -> (..., dim/2, dim/2)."""
        raise self._not_separable()

    def potential_hessian(self, q: np.ndarray) -> np.ndarray:
        """``d2V/dq2``; q (..., dim/2) -> (..., dim/2, dim/2)."""
        raise self._not_separable()

    def _not_separable(self) -> VPIntegratorError:
        return VPIntegratorError(
            f"system {self.name!r} is not a separable Hamiltonian H(q, p) = T(p) + V(q); "
            "use a method that does not need the split (e.g. implicit_midpoint)"
        )

    # --- helpers ----------------------------------------------------------------------------------
    def _check_state(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 0 or y.shape[-1] != self.dim:
            raise VPIntegratorError(
                f"state for system {self.name!r} must have shape (..., {self.dim}); got shape {y.shape}"
            )
        return y


def _plain(value: Any) -> float | list:
    """A parameter as a float, or a (nested) list of floats."""
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_plain(v) for v in value]
    return float(value)


def _check_positive_finite(owner: str, name: str, value: float) -> float:
    return finite_float(value, f"{owner} parameter {name!r}", positive=True)


def _check_finite(owner: str, name: str, value: float) -> float:
    return finite_float(value, f"{owner} parameter {name!r}")
