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
import math
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
    ``units`` of ``/y``; ``vpintegrator.data.h5labels``); without names the components are
    ``y1 .. y<dim>``.

    ``periods`` (``{component index: period}``, optional) declares the components that are angles on a circle
    of that period (a torus's coordinates): every error, metric and figure wraps their differences to
    (−P/2, P/2] (``vpintegrator.arrays.wrap``), the states themselves are kept unwrapped. A spec's
    ``[system] periodic`` and a data file's ``periodic`` attribute on ``/y`` declare it too
    (``vpintegrator.systems.base.check_periods``).

    **The field written once** (every shipped system): ``field(p, x)`` and ``field_jacobian(p, x)`` are plain
    static functions on a tuple of components ``x = (x0, .., x_{dim-1})`` and the parameter vector
    ``p = field_params()`` (a float64 array), returning a tuple (the Jacobian: ``dim`` row tuples), written with
    arithmetic and NumPy ufuncs only (``np.exp``, ``np.sin``, ``np.where``, ...; plain module-level functions
    they call are listed in ``field_helpers``). NumPy evaluates them on
    arrays of components (``vector_field`` and ``jacobian`` here: batched, elementwise) and numba compiles the
    very same functions on scalars (``vpintegrator.compiled.systems``; the lean loops of ``vpintegrator.compiled.lean`` call them), so the
    three paths share one definition. A user's system may define them to get ``vector_field`` and
    ``jacobian`` (or override those two directly, as before).

    **Linear parameter form** (optional; the finite-difference context encoder,
    ``vpintegrator.models.context``, and the identification baselines, ``vpintegrator.rollout.identify``,
    need it): a system whose field is linear in a parameter vector θ, ``f(y) = F(y) θ``, says so with

    - ``theta_names`` (p strings, the order of θ),
    - [`parameter_features`][vpintegrator.systems.System.parameter_features] (a classmethod: F(z), written with
      ``array_namespace`` so that NumPy arrays and torch tensors both work),
    - [`theta`][vpintegrator.systems.System.theta] (this instance's θ) and
      [`with_theta`][vpintegrator.systems.System.with_theta] (the system of the same class with θ; a θ no
      system has is a one-line ``VPIntegratorError``),
    - optionally [`theta_basis`][vpintegrator.systems.System.theta_basis] (G with θ = G φ when only the
      parameters φ act on the motion; default the identity).

    A user's own system supplies them the same way (override the four in its class); a system without them
    is refused by those callers with a one-line error naming what is missing
    ([`linear_form_missing`][vpintegrator.systems.System.linear_form_missing]).
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
    periods: ClassVar[dict[int, float]] = {}
    theta_names: ClassVar[tuple[str, ...]] = ()

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
    #: f on a tuple of components, ``field(p, x) -> (f_0, .., f_{dim-1})`` (a staticmethod; class docstring)
    field: ClassVar[Any] = None
    #: df/dy on a tuple of components, ``field_jacobian(p, x) -> ((J_00, ..), .., (.., J_{dim-1,dim-1}))``
    field_jacobian: ClassVar[Any] = None
    #: module-level plain functions that ``field`` / ``field_jacobian`` call (numba compiles them with the field)
    field_helpers: ClassVar[tuple[Any, ...]] = ()
    #: a shipped system's id in the compiled kernels (its branch of ``vpintegrator.compiled.systems``'s dispatchers),
    #: set in the class's own body; ``None`` (and every subclass, which may change the equations): NumPy only
    kernel_id: ClassVar[int | None] = None

    def field_params(self) -> np.ndarray:
        """The parameter vector ``p`` that ``field`` and ``field_jacobian`` read: (n_p,) float64 (empty by
        default)."""
        return np.zeros(0, dtype=np.float64)

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        """``f(y)``; y (..., dim) -> (..., dim) (by default ``field`` on the components of y)."""
        if type(self).field is None:
            raise NotImplementedError
        y = self._check_state(y)
        return _stack(type(self).field(self.field_params(), _components(y)), y.shape[:-1], -1)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        """``df/dy``; y (..., dim) -> (..., dim, dim), entry ``[..., i, j] = d f_i / d y_j`` (by default
        ``field_jacobian`` on the components of y)."""
        if type(self).field_jacobian is None:
            raise NotImplementedError
        y = self._check_state(y)
        rows = type(self).field_jacobian(self.field_params(), _components(y))
        return np.stack([_stack(row, y.shape[:-1], -1) for row in rows], axis=-2)

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
    #: ``T'(v)`` on a tuple of the dim/2 momenta, ``field_kinetic_gradient(p, v) -> tuple`` (a staticmethod, as
    #: ``field``; numba compiles it for Stormer-Verlet's loop, ``vpintegrator.compiled.user``)
    field_kinetic_gradient: ClassVar[Any] = None
    #: ``V'(q)`` on a tuple of the dim/2 positions, ``field_potential_gradient(p, q) -> tuple``
    field_potential_gradient: ClassVar[Any] = None

    def kinetic_gradient(self, p: np.ndarray) -> np.ndarray:
        """``dH/dp = T'(p)``; p (..., dim/2) -> (..., dim/2) (by default ``field_kinetic_gradient``)."""
        return self._split_gradient(type(self).field_kinetic_gradient, p)

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        """``dH/dq = V'(q)``; q (..., dim/2) -> (..., dim/2) (by default ``field_potential_gradient``)."""
        return self._split_gradient(type(self).field_potential_gradient, q)

    def _split_gradient(self, fn: Any, z: np.ndarray) -> np.ndarray:
        if fn is None or not self.separable:
            raise self._not_separable()
        z = np.asarray(z, dtype=np.float64)
        return _stack(fn(self.field_params(), _components(z)), z.shape[:-1], -1)

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

    # --- the linear parameter form f(y) = F(y) θ (optional; see the class docstring) -----------------
    @classmethod
    def parameter_features(cls, z: Any) -> Any:
        """F(z) with f(z) = F(z) θ: z (..., dim) -> (..., dim, p), θ in ``theta_names`` order; a NumPy array
        or a torch tensor (the same formula either way)."""
        raise cls._no_linear_form("parameter_features")

    def theta(self) -> np.ndarray:
        """This system's θ (``theta_names`` order): (p,) float64."""
        raise self._no_linear_form("theta")

    def with_theta(self, theta: np.ndarray) -> "System":
        """The system of this class (its other parameters kept) whose θ is ``theta`` (p,)."""
        raise self._no_linear_form("with_theta")

    @classmethod
    def theta_basis(cls) -> np.ndarray:
        """G (p, q) with θ = G φ: the identifiable parameters φ (default the identity: all of θ)."""
        return np.eye(len(cls.theta_names))

    @classmethod
    def linear_form_missing(cls) -> list[str]:
        """The pieces of the linear parameter form this class lacks (empty: it has one)."""
        missing = [] if cls.theta_names else ["theta_names"]
        missing += [name for name in ("parameter_features", "theta", "with_theta")
                    if getattr(cls, name).__qualname__.startswith("System.")]
        return missing

    @classmethod
    def _no_linear_form(cls, what: str) -> VPIntegratorError:
        missing = cls.linear_form_missing() or [what]
        return VPIntegratorError(
            f"system {cls.name or cls.__name__!r} has no linear parameter form f = F(y) θ: define "
            f"{', '.join(missing)} on its class (see vpintegrator.systems.System)")

    # --- helpers ----------------------------------------------------------------------------------
    def _check_state(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 0 or y.shape[-1] != self.dim:
            raise VPIntegratorError(
                f"state for system {self.name!r} must have shape (..., {self.dim}); got shape {y.shape}"
            )
        return y


def _components(y: np.ndarray) -> tuple[np.ndarray, ...]:
    """The components of y (..., dim) as a tuple of (...) arrays (the argument ``x`` of ``System.field``)."""
    return tuple(y[..., i] for i in range(y.shape[-1]))


def _stack(parts: Any, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Components (arrays of ``shape`` or constants such as 0.0) stacked on ``axis`` as float64."""
    return np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in parts], axis=axis)


def _plain(value: Any) -> float | list:
    """A parameter as a float, or a (nested) list of floats."""
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_plain(v) for v in value]
    return float(value)


def check_periods(declared: Any, dim: int, where: str) -> np.ndarray:
    """Each component's period from a declaration, checked: (dim,) float64, 0 where not periodic.

    Parameters
    ----------
    declared : dict, sequence or None
        ``{index: period}`` (a TOML table's keys are strings of the index: ``{0 = 6.283185307179586}``; each
        period finite and > 0), or ``dim`` periods with 0 or NaN for a component that is not periodic (a
        file's attribute), or None / empty: none periodic.
    dim : int
    where : str
        The key named in a message (``"spec.toml: key 'system.periodic'"``).
    """
    out = np.zeros(dim)
    if declared is None or (isinstance(declared, (dict, list, tuple, np.ndarray)) and len(declared) == 0):
        return out
    fix = f"give {{index = period}} with index in 0..{dim - 1} and period > 0 (6.283185307179586 for an angle)"
    if isinstance(declared, dict):
        items = list(declared.items())
    else:
        values = np.atleast_1d(np.asarray(declared, dtype=object))
        if values.ndim != 1 or values.size != dim:
            raise VPIntegratorError(f"{where}: periodic must give {dim} periods (0 where not periodic), one per "
                                    f"component; got {list(values)}; or {fix}")
        items = [(i, v) for i, v in enumerate(values)
                 if v is not None and not (isinstance(v, (int, float, np.number)) and (v == 0 or np.isnan(v)))]
    for index, period in items:
        try:
            i = int(index)
            if i != float(index):
                raise ValueError
        except (TypeError, ValueError):
            raise VPIntegratorError(f"{where}: periodic component {index!r} is not an index; {fix}") from None
        if not 0 <= i < dim:
            raise VPIntegratorError(f"{where}: periodic component {i} does not exist (the state has {dim} components, "
                                    f"0..{dim - 1}); {fix}")
        if isinstance(period, bool) or not isinstance(period, (int, float, np.number)) \
                or not (np.isfinite(period) and period > 0):
            raise VPIntegratorError(f"{where}: periodic component {i} has period {period!r}, which is not a finite "
                                    f"number > 0; {fix}")
        out[i] = float(period)
    return out


def _check_count(owner: str, n: Any, what: str, low: int, high: int | None = None) -> int:
    """``N``, the number of ``what``, as an int in [low, high] (an integral float accepted: file attributes), else
    one line naming ``N``."""
    try:
        value = float(n)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(n, bool) or not math.isfinite(value) or value != int(value) or not low <= value <= (high or math.inf):
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise VPIntegratorError(f"{owner} parameter 'N' (the number of {what}) must be an int {bound}; got {n!r}",
                                key="N")
    return int(value)


def _check_positive_finite(owner: str, name: str, value: float) -> float:
    return finite_float(value, f"{owner} parameter {name!r}", positive=True)


def _check_finite(owner: str, name: str, value: float) -> float:
    return finite_float(value, f"{owner} parameter {name!r}")
