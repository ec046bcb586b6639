"""Systems from dysts (Gilpin's collection of chaotic flows), as an optional extra: ``get_system("dysts:Lorenz")``.

``pip install "vpintegrator[dysts]"``. A dysts flow is a class with a static ``_rhs(x0, .., x_{dim-1}, t, *params)``
(often also ``_jac``), its parameters, initial condition and time scales in dysts' ``chaotic_attractors.json``. The
adapter makes one [`System`][vpintegrator.systems.System] subclass per flow, named ``"dysts:NAME"``, once per
process (registered under that name on first use):

- its fields are dysts' parameters, in the order ``_rhs`` takes them (dysts passes them sorted by name);
  ``field_params()`` is that vector, and a parameter whose name the ``System`` contract uses (``theta``) is the field
  ``theta_``;
- ``field(p, x) = _rhs(*x, 0.0, *p)`` and ``field_jacobian(p, x) = _jac(*x, 0.0, *p)``, their results as tuples of
  floats (plain static functions on a tuple of components; dysts' functions and the small ones that unpack ``p`` and
  pack the result listed in ``field_helpers``: NumPy evaluates them on arrays, numba compiles them with ``p`` an
  array or a tuple, ``System``'s "The field written once");
- ``default_y0`` is dysts' initial condition; ``default_dt`` is dysts' sampling step, ``period / 100`` (its
  ``make_trajectory`` keeps 100 points per period; the metadata's ``dt`` is its integrator's step), and
  ``default_t_end`` ten periods; ``default_sampler`` is ``"around"`` the initial condition with a spread of a tenth of
  dysts' attractor spread per component ([`default_spec`][vpintegrator.systems.dysts.default_spec]).

Nothing dysts says about structure is taken on trust: ``_jac`` is used only where it agrees with central differences
of ``_rhs`` at sampled states (else the system has no Jacobian, and the implicit methods refuse it); a flow whose
``_rhs`` reads ``t`` (at sampled states) is refused as non-autonomous, a delay equation (``DynSysDelay``) as such;
[`dysts_structure`][vpintegrator.systems.dysts.dysts_structure] (``vp-gen --list dysts``) measures each flow's
divergence and canonical-Hamiltonian structure on samples and prints dysts' own flag beside it. A component ``i``
whose field is 2π-periodic, ``f(y + 2π e_i) = f(y)`` at the samples but not ``f(y + 0.37·2π e_i)`` (a field that
ignores ``y_i`` has no period), is declared periodic (its ``periods``) with period 2π (the ABC flow's torus): its errors are wrapped.

A file written from such a system records ``system = "dysts:NAME"`` and its parameters; a reader rebuilds it through
the same name.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import json
import keyword
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from ..errors import VPIntegratorError
from .base import System, _check_finite

PREFIX = "dysts:"
INSTALL = "pip install 'vpintegrator[dysts]'"
#: states sampled around the initial condition for the checks (seeded: the same answer every run)
N_SAMPLES = 8
#: relative tolerance of the structure checks (``|div| / max|J|``, ``|J^T Ω + Ω J| / max|J|``) and of ``_jac``
#: against differences: the 4th-order central differences below are good to ~1e-11 on smooth fields
STRUCTURE_RTOL = 1e-9
JACOBIAN_RTOL = 1e-6
#: where the Jacobian is the differences' (no agreeing ``_jac``), a check passes within their own error (the
#: gap to the differences of twice the step, ~15x the error) where that exceeds ``STRUCTURE_RTOL``, up to this
FD_RTOL_CAP = 1e-6


def is_dysts_name(name: Any) -> bool:
    """Whether ``name`` names a dysts flow (``"dysts:NAME"``)."""
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclasses.dataclass(frozen=True)
class DystsSystem(System):
    """Base of the classes made from dysts' flows (module docstring); its subclasses' fields are the parameters."""

    dysts_name: ClassVar[str] = ""
    #: dysts' metadata entry of the flow (its own claims: ``hamiltonian``, ``maximum_lyapunov_estimated``, ...)
    dysts_metadata: ClassVar[dict[str, Any]] = {}
    #: why the system has no ``field_jacobian`` ("" where it has one)
    jacobian_note: ClassVar[str] = ""
    default_sampler: ClassVar[str | None] = "around"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _check_finite(self.name, f.name, getattr(self, f.name)))

    def field_params(self) -> np.ndarray:
        """p: dysts' parameters in the order its ``_rhs`` takes them."""
        return np.array([getattr(self, f.name) for f in dataclasses.fields(self)], dtype=np.float64)

    def __reduce__(self) -> tuple[Any, ...]:  # the class is made at run time: rebuilt by its name
        return _rebuild, (self.name, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


def _rebuild(name: str, params: dict[str, float]) -> System:
    return dysts_class(name)(**params)


# --- dysts, imported on first use -----------------------------------------------------------------------
def _dysts() -> tuple[Any, Any, dict[str, dict[str, Any]]]:
    """``(dysts.flows, dysts.base, metadata)``, or a one-line error saying how to install dysts."""
    try:
        flows = importlib.import_module("dysts.flows")
        base = importlib.import_module("dysts.base")
    except ModuleNotFoundError as err:
        if err.name == "dysts" or (err.name or "").startswith("dysts."):
            raise VPIntegratorError(f"the dysts systems need dysts, which is not installed; {INSTALL}") from None
        raise VPIntegratorError(f"dysts is installed but does not import (ModuleNotFoundError: {err}); {INSTALL} "
                                "installs its dependencies") from None
    except Exception as err:  # noqa: BLE001 - dysts failing at import time: one line, not its traceback
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        raise VPIntegratorError(f"dysts is installed but does not import ({reason}); reinstall it: {INSTALL}") from None
    from importlib import resources

    path = resources.files("dysts").joinpath("data/chaotic_attractors.json")
    try:
        metadata = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise VPIntegratorError(f"dysts' metadata {path} cannot be read ({err}); reinstall dysts: {INSTALL}") from None
    return flows, base, metadata


class _Flow(NamedTuple):
    """One dysts flow as the adapter reads it, or the reason it cannot be adapted (``refusal``)."""

    name: str
    refusal: str
    dim: int = 0
    param_names: tuple[str, ...] = ()
    param_values: tuple[float, ...] = ()
    state_names: tuple[str, ...] = ()
    y0: tuple[float, ...] = ()
    rhs: Any = None
    jac: Any = None
    meta: dict[str, Any] = {}

    def field(self) -> tuple[Callable[..., Any], tuple[Callable[..., Any], ...]]:
        """``field(p, x)`` of ``System`` from dysts' ``_rhs``, and the functions it calls (``field_helpers``)."""
        return _field_of(self.rhs, len(self.param_names), self.dim, rows=False)

    def jacobian(self) -> tuple[Callable[..., Any], tuple[Callable[..., Any], ...]] | None:
        """``field_jacobian(p, x)`` from dysts' ``_jac`` and its helpers (None without one; not yet checked)."""
        return None if self.jac is None else _field_of(self.jac, len(self.param_names), self.dim, rows=True)


def _read_flow(name: str, flows: Any, base: Any, metadata: dict[str, Any]) -> _Flow:
    """The flow ``name`` read from dysts (its static functions, metadata), or why it is not an autonomous flow
    the package can take (delay equation, no static ``_rhs``, array parameters, inconsistent metadata)."""
    cls, meta = getattr(flows, name, None), metadata.get(name)
    if not isinstance(cls, type) or meta is None:
        return _Flow(name, "not a dysts flow")
    delay = getattr(base, "DynSysDelay", None)
    if isinstance(delay, type) and issubclass(cls, delay):
        return _Flow(name, "a delay equation (dysts' DynSysDelay): its state is a history, not a point of R^dim")
    rhs = _plain(getattr(cls, "_rhs", None))
    default = _plain(getattr(getattr(base, "BaseDyn", None), "_rhs", None))
    if rhs is None or rhs is default:
        return _Flow(name, "its right-hand side is a method reading the instance (no static _rhs(x.., t, *params))")
    params = meta.get("parameters") or {}
    names = tuple(sorted(params))  # dysts' order: DynSys.rhs passes *param_list, sorted by name
    try:
        values = tuple(float(params[k]) for k in names)
        y0 = tuple(float(v) for v in meta.get("initial_conditions") or ())
    except (TypeError, ValueError):
        return _Flow(name, "its parameters or initial condition are arrays (only scalar parameters are adapted)")
    args = list(inspect.signature(rhs).parameters)
    dim = len(args) - 1 - len(names)
    if dim < 1 or args[dim] != "t" or len(y0) != dim:
        return _Flow(name, f"its _rhs{tuple(args)} does not match its metadata ({len(names)} parameters, "
                     f"initial condition of length {len(y0)})")
    jac = _plain(getattr(cls, "_jac", None))
    jac = None if jac is None or jac is _plain(getattr(getattr(base, "BaseDyn", None), "_jac", None)) else jac
    return _Flow(name, "", dim, names, values, tuple(args[:dim]), y0, rhs, jac, meta)


def _plain(fn: Any) -> Any:
    """The Python function under a numba dispatcher (dysts' ``staticjit``), or ``fn``."""
    return getattr(fn, "py_func", fn)


def _field_of(fn: Callable[..., Any], n: int, dim: int, rows: bool) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``field(p, x) = out(fn(*x, 0.0, *take(p)))`` and the functions it calls: ``take(p)`` the n parameters as a tuple
    of floats (``p`` a float64 array, a tuple or a named tuple: NumPy and numba alike), ``out`` dysts' result (a tuple;
    a Jacobian's rows are lists, with integer entries among them) as a tuple of floats (of ``dim`` row tuples), as
    compiled loops index it."""
    take, made = _taker(n, _float)
    entry, made_entry = _taker(dim, _float)
    out, made_out = _taker(dim, entry) if rows else (entry, ())

    def field(p, x):
        return out(fn(*x, 0.0, *take(p)))

    return field, (fn, _float, _empty, *made, *made_entry, *made_out)


def _float(v):
    return 1.0 * v


def _empty(r):
    return ()


def _taker(n: int, each: Callable[..., Any]) -> tuple[Callable[..., Any], list[Callable[..., Any]]]:
    """``take(r) = (each(r[0]), .., each(r[n-1]))`` for an indexable r, built one entry at a time (numba needs each
    index as a constant: here each is a closure's), and the functions made (numba compiles them as helpers)."""
    take: Callable[..., Any] = _empty
    made = []
    for i in range(n):
        take = _append(take, i, each)
        made.append(take)
    return take, made


def _append(head: Callable[..., Any], i: int, each: Callable[..., Any]) -> Callable[..., Any]:
    def take(r):
        return head(r) + (each(r[i]),)

    return take


# --- the System classes --------------------------------------------------------------------------------
def dysts_class(name: str) -> type[System]:
    """The [`System`][vpintegrator.systems.System] class of ``"dysts:NAME"``, made on first use (the registry
    registers it, ``vpintegrator.systems.system_class``).

    Raises a one-line ``VPIntegratorError`` for a name dysts does not have (with the close ones), a delay or
    non-autonomous flow, one the adapter cannot read, and when dysts is not installed.
    """
    if name in _CLASSES:
        return _CLASSES[name]
    flows, base, metadata = _dysts()
    short = name[len(PREFIX):]
    if short not in metadata:
        close = difflib.get_close_matches(short, list(metadata), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(PREFIX + c for c in close)}? " if close else ""
        raise VPIntegratorError(f"unknown dysts system {name!r}; {hint}`vp-gen --list dysts` lists them")
    flow = _read_flow(short, flows, base, metadata)
    if not flow.refusal:
        flow = flow._replace(refusal=_sampled_refusal(flow))
    if flow.refusal:
        raise VPIntegratorError(f"system {name!r} cannot be used: {flow.refusal}; `vp-gen --list dysts` lists "
                                "the autonomous flows")
    cls = _CLASSES[name] = _make_class(flow)
    return cls


#: "dysts:NAME" -> its class, made once per process (a system compares equal to another of the same class only)
_CLASSES: dict[str, type[System]] = {}


def _make_class(flow: _Flow) -> type[System]:
    fields = [((k + "_" if k in _TAKEN else k), float, dataclasses.field(default=v))
              for k, v in zip(flow.param_names, flow.param_values)]
    field, helpers = flow.field()
    jacobian, note = None, "dysts gives no _jac"
    candidate = flow.jacobian()
    if candidate is not None:
        error = _jacobian_error(field, candidate[0], np.array(flow.param_values), _samples(flow))
        if error <= JACOBIAN_RTOL:
            jacobian, note = candidate[0], ""
            helpers += candidate[1]
        else:
            note = f"dysts' _jac differs from differences of _rhs (relative {error:.1e})"
    period = flow.meta.get("period")
    period = float(period) if isinstance(period, (int, float)) and period > 0 else None
    angles = _angles(field, np.array(flow.param_values), _samples(flow))
    namespace = {
        "name": PREFIX + flow.name, "dysts_name": flow.name, "dim": flow.dim, "dysts_metadata": flow.meta,
        "state_names": flow.state_names if len(set(flow.state_names)) == flow.dim else (),
        "default_y0": flow.y0, "default_dt": None if period is None else period / 100,
        "default_t_end": None if period is None else 10 * period,
        "field": staticmethod(field), "field_jacobian": None if jacobian is None else staticmethod(jacobian),
        "field_helpers": helpers, "periods": {i: 2 * np.pi for i in angles},
        "jacobian_note": note, "__module__": __name__,
        "__doc__": f"dysts' {flow.name}: {' '.join(str(flow.meta.get('description', '')).split())}",
    }
    qualname = "dysts_" + flow.name
    cls = dataclasses.make_dataclass(qualname, fields, bases=(DystsSystem,), frozen=True, namespace=namespace)
    cls.__qualname__ = qualname
    return cls


#: names the System contract uses that a dysts parameter may not shadow (a field ``theta`` would hide the method)
_TAKEN = frozenset(n for n in dir(System) if not n.startswith("_")) | frozenset(keyword.kwlist)


def default_spec(name: str) -> dict[str, Any]:
    """Keyword arguments of a ``GenerationSpec`` for ``"dysts:NAME"`` (what ``vp-gen dysts:NAME`` generates): 100
    trajectories from states drawn ``"around"`` dysts' initial condition (a tenth of its attractor's spread per
    component, dysts' ``std``), sampled every ``period / 100`` for ten periods, DOP853."""
    cls = dysts_class(name)
    y0 = np.asarray(cls.default_y0, dtype=np.float64)
    std = np.asarray(cls.dysts_metadata.get("std") or np.ones_like(y0), dtype=np.float64)  # type: ignore[attr-defined]
    spread = 0.1 * np.where(np.isfinite(std) & (std > 0), std, 1.0)
    if cls.default_dt is None:
        raise VPIntegratorError(f"system {name!r} has no period in dysts' metadata, so no default time step; "
                                "write a spec for it (vp-gen abc_flow --print-config shows one)")
    return {"name": name.replace(":", "_"), "system": name, "sampler": "around", "n_traj": 100,
            "sampler_args": {"spread": spread.tolist()}, "dt": cls.default_dt, "t_end": cls.default_t_end,
            "description": f"{cls.__doc__} (from dysts; 100 states around its initial condition)"}


# --- the structure found on samples ----------------------------------------------------------------------
def _samples(flow: _Flow) -> np.ndarray:
    """(N_SAMPLES, dim) states: the initial condition and draws around it (a tenth of dysts' spread)."""
    y0 = np.asarray(flow.y0, dtype=np.float64)
    std = np.asarray(flow.meta.get("std") or np.ones(flow.dim), dtype=np.float64)
    scale = 0.1 * np.where(np.isfinite(std) & (std > 0), std, 1.0) if std.shape == y0.shape else 0.1
    rng = np.random.default_rng(0)
    return np.concatenate([y0[None], y0 + scale * rng.standard_normal((N_SAMPLES - 1, flow.dim))])


def _evaluate(fn: Callable[..., Any], p: np.ndarray, y: np.ndarray, jacobian: bool = False) -> np.ndarray:
    """``fn(p, x)`` on the states y (..., dim): (..., dim) for a field, (..., dim, dim) for a Jacobian."""
    from .base import _components, _stack

    out = fn(p, _components(y))
    if jacobian:
        return np.stack([_stack(row, y.shape[:-1], -1) for row in out], axis=-2)
    return _stack(out, y.shape[:-1], -1)


def _differences(field: Callable[..., Any], p: np.ndarray, y: np.ndarray, rel: float = 1e-3) -> np.ndarray:
    """df/dy (n, dim, dim) by 4th-order central differences of step ``rel · max(1, |y|)`` (error ~1e-11 relative
    on smooth fields; more near a singular term such as 1/r³)."""
    n, dim = y.shape
    h = rel * np.maximum(1.0, np.abs(y))  # (n, dim)
    steps = np.array([-2.0, -1.0, 1.0, 2.0])
    weights = np.array([1.0, -8.0, 8.0, -1.0]) / 12.0
    eye = np.eye(dim)
    shifted = y[:, None, None, :] + steps[None, None, :, None] * (h[:, :, None, None] * eye[None, :, None, :])
    f = _evaluate(field, p, shifted)  # (n, dim_j, 4, dim_i)
    d = np.einsum("s,njsi->nij", weights, f) / h[:, None, :]
    return d


def _angles(field: Any, p: np.ndarray, y: np.ndarray) -> list[int]:
    """The components ``i`` in which the field is 2π-periodic at the states y (n, dim), measured: ``f(y + 2π e_i)``
    equals ``f(y)`` to ``STRUCTURE_RTOL`` of max |f|, and ``f(y + 0.37·2π e_i)`` does not (else f ignores y_i)."""
    dim = y.shape[-1]
    shifts = 2 * np.pi * np.array([1.0, 0.37])[:, None, None] * np.eye(dim)[None]  # (2, dim_i, dim)
    with np.errstate(all="ignore"):
        try:
            f0 = _evaluate(field, p, y)  # (n, dim)
            f = _evaluate(field, p, y[:, None, None, :] + shifts[None])  # (n, 2, dim_i, dim)
        except Exception:  # noqa: BLE001 - a field that fails off its samples has no measured period
            return []
    if not (np.isfinite(f0).all() and np.isfinite(f).all()):
        return []
    gap = np.max(np.abs(f - f0[:, None, None, :]), axis=(0, 3)) / max(1.0, float(np.max(np.abs(f0))))  # (2, dim_i)
    return [i for i in range(dim) if gap[0, i] <= STRUCTURE_RTOL and gap[1, i] > STRUCTURE_RTOL]


def _jacobian_error(field: Any, jac_fn: Any, p: np.ndarray, y: np.ndarray) -> float:
    """max |_jac - differences| / max(1, max |J|) at the states y (inf where either is not finite)."""
    with np.errstate(all="ignore"):
        try:
            exact, diff = _evaluate(jac_fn, p, y, jacobian=True), _differences(field, p, y)
        except Exception:  # noqa: BLE001 - a _jac that fails on arrays is not one to use
            return float("inf")
    if not (np.isfinite(exact).all() and np.isfinite(diff).all()):
        return float("inf")
    return float(np.max(np.abs(exact - diff)) / max(1.0, float(np.max(np.abs(diff)))))


def _sampled_refusal(flow: _Flow) -> str:
    """The refusal of a flow whose ``_rhs`` reads ``t`` at the sampled states, or fails on arrays of them ("" if
    neither)."""
    p, y = np.array(flow.param_values), _samples(flow)
    from .base import _components

    with np.errstate(all="ignore"):
        try:
            at = [np.asarray(np.broadcast_arrays(*flow.rhs(*_components(y), t, *p)), dtype=np.float64)
                  for t in (0.0, 0.7, 2.3)]
        except Exception as err:  # noqa: BLE001 - Python control flow on the state (max(0, x), if x > 0)
            reason = " ".join(f"{type(err).__name__}: {err}".split())[:120]
            return f"its _rhs does not evaluate on arrays of states ({reason}), as System.field must"
    if any(not np.array_equal(at[0], a, equal_nan=True) for a in at[1:]):
        return "non-autonomous: its _rhs depends on t (the package integrates autonomous fields dy/dt = f(y))"
    return ""


class FlowStructure(NamedTuple):
    """What [`dysts_structure`][vpintegrator.systems.dysts.dysts_structure] found for one dysts flow."""

    name: str  #: "dysts:NAME"
    dim: int
    #: max |div f| / max |df/dy| over the samples (nan: the field is not finite there)
    divergence: float
    volume_preserving: bool
    #: "" (not Hamiltonian, or odd dim), else the split found: "(q, p)" (halves) or "(q1, p1, q2, p2, ..)" (pairs)
    hamiltonian: str
    dysts_hamiltonian: bool | None
    #: "agrees", "differs", "none"
    dysts_jacobian: str
    #: "" for an adapted flow, else why it is not listed as one (delay, non-autonomous, ...)
    refusal: str = ""
    #: the components in which the field is measured 2π-periodic (its ``periods``; ``_angles``)
    angles: tuple[int, ...] = ()


def dysts_structure(names: list[str] | None = None) -> list[FlowStructure]:
    """The structure of dysts' flows, measured on samples around each default initial condition.

    Per flow: the divergence (trace of the Jacobian by central differences of ``_rhs``, or dysts' ``_jac`` where it
    agrees with them) relative to the Jacobian's size, volume-preserving below ``STRUCTURE_RTOL``; for an even
    dim, whether the Jacobian is Hamiltonian, ``J^T Ω + Ω J = 0`` with Ω the canonical form of the state split in
    halves (q, p) or in pairs (q1, p1, ..); dysts' own ``hamiltonian`` flag beside it, never used. Flows the adapter
    refuses come back with their ``refusal``.

    Parameters
    ----------
    names : list of str, optional
        dysts names (with or without ``"dysts:"``); default every flow in dysts' metadata.
    """
    flows, base, metadata = _dysts()
    rows = []
    for short in (sorted(metadata) if names is None else [n[len(PREFIX):] if is_dysts_name(n) else n for n in names]):
        if short not in metadata:
            dysts_class(PREFIX + short)  # the unknown-name error, with the close names
        flow = _read_flow(short, flows, base, metadata)
        if not flow.refusal:
            flow = flow._replace(refusal=_sampled_refusal(flow))
        claim = metadata[short].get("hamiltonian")
        claim = claim if isinstance(claim, bool) else None
        if flow.refusal:
            rows.append(FlowStructure(PREFIX + short, flow.dim, float("nan"), False, "", claim, "none", flow.refusal))
            continue
        rows.append(_structure(flow, claim))
    return rows


def _structure(flow: _Flow, claim: bool | None) -> FlowStructure:
    p, y = np.array(flow.param_values), _samples(flow)
    field, candidate = flow.field()[0], flow.jacobian()
    with np.errstate(all="ignore"):
        jac = _differences(field, p, y)
        checked = "none"
        if candidate is not None:
            error = _jacobian_error(field, candidate[0], p, y)
            checked = "agrees" if error <= JACOBIAN_RTOL else "differs"
            if checked == "agrees":
                jac = _evaluate(candidate[0], p, y, jacobian=True)
    name, dim = PREFIX + flow.name, flow.dim
    angles = tuple(_angles(field, p, y))
    if not np.isfinite(jac).all():
        return FlowStructure(name, dim, float("nan"), False, "", claim, checked, angles=angles)
    scale = max(float(np.max(np.abs(jac))), 1e-300)
    tol = STRUCTURE_RTOL
    if checked != "agrees":  # the differences' own error, from those of twice the step
        with np.errstate(all="ignore"):
            gap = float(np.max(np.abs(jac - _differences(field, p, y, 2e-3)))) / scale
        tol = min(max(tol, gap), FD_RTOL_CAP) if np.isfinite(gap) else tol
    div = float(np.max(np.abs(np.trace(jac, axis1=-2, axis2=-1)))) / scale
    split = ""
    if dim % 2 == 0:
        for label, omega in (("(q, p)", _canonical(dim, pairs=False)), ("(q1, p1, q2, p2, ..)", _canonical(dim, pairs=True))):
            residual = np.swapaxes(jac, -1, -2) @ omega + omega @ jac
            if float(np.max(np.abs(residual))) / scale < tol:
                split = label
                break
    return FlowStructure(name, dim, div, div < tol, split, claim, checked, angles=angles)


def _canonical(dim: int, pairs: bool) -> np.ndarray:
    """Ω of the state split in halves (q, p) or in pairs (q1, p1, q2, p2, ..)."""
    m = dim // 2
    omega = np.zeros((dim, dim))
    for i in range(m):
        q, p = (2 * i, 2 * i + 1) if pairs else (i, m + i)
        omega[q, p], omega[p, q] = 1.0, -1.0
    return omega


__all__ = ["DystsSystem", "FlowStructure", "default_spec", "dysts_class", "dysts_structure", "is_dysts_name"]
