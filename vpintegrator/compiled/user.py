"""A user's system compiled: its field written once, jitted by numba at first use and run by every compiled loop.

A system the package did not ship (a ``System`` subclass in the user's own module, a system from dysts) compiles
when it writes its field as the shipped systems do (``System``'s docstring, "The field written once"): plain static
functions of the parameter vector ``p`` and a tuple of components ``x``, with arithmetic and NumPy ufuncs::

    field(p, x) -> (f_0, .., f_{dim-1})                         # required
    field_jacobian(p, x) -> ((J_00, ..), .., (.., J_{dim-1,dim-1}))   # implicit methods
    field_potential_gradient(p, q) -> V'(q)                     # separable H = T(p) + V(q): Stormer-Verlet
    field_kinetic_gradient(p, v) -> T'(v)                       # (q, v: tuples of dim/2 components)

``user_kernel(system)`` gives ``(pp, p)``: ``pp`` the parameters as an instance of a small class made for that system
class (``params_class``), and ``p`` the float64 vector. Compiled code is typed by ``pp``: every lean loop
(``compiled.lean``) and the kernel dispatchers (``compiled.systems.vector_field`` / ``jacobian``, which the generic
loops, the exact Newton rules and DOP853 call) are specialised for that class and call the user's own jitted
functions, inlined, exactly as for a shipped system. The class's name holds the sha256 of the user's sources (the
class's module file, else the class's source, and every ``field_helpers`` function's), so numba's disk cache finds
the compiled loops again in a new process and an edited field compiles anew.

A system that cannot compile gets ``None`` and one warning per class that names it, what failed and where (numba's
first line and the user's file and line); callers take the NumPy path. The reasons: it overrides ``vector_field``
or ``jacobian`` itself (the NumPy path would not be ``field``), it has no ``field``, numba cannot type the field, or
the compiled field differs from NumPy's evaluation of the same function at the system's default state.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ._jit import HAVE_NUMBA, jit_helpers, named_class

_PREFIX = "UserParams_"
_log = logging.getLogger("vpintegrator")


class UserFields(NamedTuple):
    """The jitted functions of one user's system class (what the compiled code calls)."""

    system: type
    dim: int
    field: Any
    jacobian: Any
    potential: Any
    kinetic: Any


#: parameter class -> the user's jitted functions (read by ``compiled.systems`` and ``compiled.lean`` while typing)
COMPILED: dict[type, UserFields] = {}
#: (system class, "field" or "lattice") -> the class made for it, or the one-line reason it runs in NumPy
_BY_CLASS: dict[tuple[type, str], Any] = {}
#: a user's lattice's tag class -> its jitted ``(bond_force, bond_stiffness)`` (``compiled.lattice``'s ``_dphi``)
LATTICES: dict[type, tuple[Any, Any]] = {}


def params_class(name: str) -> type:
    """The parameter class called ``name`` (``UserParams_<n>_<hash>_<class>``): made once per process, also when
    numba's cache index names it before the system is registered (``__getattr__``)."""
    return named_class(globals(), name, [f"p{i}" for i in range(int(name[len(_PREFIX):].split("_", 1)[0]))])


def __getattr__(name: str) -> Any:
    """A parameter class by its name (what numba's cache index pickles)."""
    if name.startswith(_PREFIX):
        return params_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def user_kernel(system: Any, dispatchers: tuple[Any, Any]) -> tuple[Any, np.ndarray] | None:
    """``(pp, p)`` of a user's system that compiles (see the module docstring), else None (one warning per class).
    ``dispatchers``: ``compiled.systems``' ``(vector_field, jacobian)``, compiled for the new class and held to NumPy
    once, at its registration (``compiled.systems.system_kernel`` passes them: this module is below it)."""
    if not HAVE_NUMBA:
        return None
    entry = _entry(system, "field", lambda cls: _register(cls, system, dispatchers))
    if isinstance(entry, str):
        return None
    p = np.ascontiguousarray(system.field_params(), dtype=np.float64).reshape(-1)
    if p.size != len(entry._fields):
        return None  # a parameter vector whose length depends on the instance: NumPy
    return entry(*(float(v) for v in p)), p


def lattice_kind(lattice: Any) -> Any:
    """The tag a user's lattice (a ``Lattice`` subclass giving ``bond_force(par, r)``, and ``bond_stiffness`` for
    implicit midpoint, on scalars) runs ``compiled.lattice``'s array loops with, or None (a shipped lattice: its
    integer ``kind``; or not compiled, one warning why). The tag's class is named by the user's sources, as a field's."""
    if vars(type(lattice)).get("lattice_kernel") or not HAVE_NUMBA:
        return None
    entry = _entry(lattice, "lattice", lambda cls: _register_lattice(cls, lattice))
    return None if isinstance(entry, str) else entry(0.0)


def _entry(system: Any, what: str, register: Any) -> Any:
    """The class made for ``type(system)``'s ``what`` (its field, or its lattice bonds), registered once per process;
    or the one-line reason it runs in NumPy, said once (a warning; DEBUG for the package's own NumPy-only systems)."""
    cls = type(system)
    entry = _BY_CLASS.get((cls, what))
    if entry is None:
        try:
            entry = register(cls)
        except Exception as err:  # noqa: BLE001 - numba's typing errors, a user's field raising: NumPy path, said once
            entry = _why(err)
        _BY_CLASS[(cls, what)] = entry
        if isinstance(entry, str):
            _log.log(logging.DEBUG if cls.__module__.startswith("vpintegrator.") else logging.WARNING,
                     "%s %s runs in NumPy, not compiled: %s", "lattice" if what == "lattice" else "system",
                     _label(cls), entry)
    return entry


def _register_lattice(cls: Any, lattice: Any) -> Any:
    import numba

    if cls.bond_force is None:
        return "it has no bond_force(par, r); see vpintegrator.systems.lattice"
    jitted: tuple[Any, Any] = tuple(None if fn is None else numba.njit(error_model="numpy")(fn)  # type: ignore
                                    for fn in (cls.bond_force, cls.bond_stiffness))
    par = np.ascontiguousarray(lattice.bond_params(), dtype=np.float64)
    r = np.linspace(-0.9, 0.9, 7)
    for fn, numpy, what in ((jitted[0], lattice.dphi, "bond_force"), (jitted[1], lattice.ddphi, "bond_stiffness")):
        if fn is not None:
            _same(what, np.array([fn(par, float(v)) for v in r]), np.asarray(numpy(r), dtype=np.float64), r)
    tag = params_class(f"{_PREFIX}1_{_source_hash(cls)}_{re.sub(r'[^0-9A-Za-z]', '', cls.__name__)[:40]}Bonds")
    LATTICES[tag] = jitted
    return tag


def reason(cls: type) -> str | None:
    """The reason the user's system class ``cls`` runs in NumPy, once it has been asked for a kernel (None: it
    compiles, or it has not been asked; ``compiled.systems.why_not_compiled`` asks)."""
    entry = _BY_CLASS.get((cls, "field"))
    return entry if isinstance(entry, str) else None


def _label(cls: type) -> str:
    return f"{getattr(cls, 'name', '') or cls.__name__} ({cls.__module__}:{cls.__qualname__})"


def _register(cls: Any, system: Any, dispatchers: tuple[Any, Any]) -> Any:
    """Make the parameter class of ``cls`` and jit its field (checked against NumPy's at a state); or the reason."""
    from ..systems.base import System

    if cls.vector_field is not System.vector_field or cls.jacobian is not System.jacobian:
        return ("it overrides vector_field/jacobian itself; write its field once as field(p, x) (and "
                "field_jacobian) instead, see docs/own_system.md")
    if cls.field is None:
        return "it has no field(p, x); see docs/own_system.md"
    p = np.ascontiguousarray(system.field_params(), dtype=np.float64).reshape(-1)
    import numba

    jit_helpers(*cls.field_helpers)
    jitted = [None if fn is None else numba.njit(error_model="numpy")(fn)
              for fn in (cls.field, cls.field_jacobian, getattr(cls, "field_potential_gradient", None),
                         getattr(cls, "field_kinetic_gradient", None))]
    if cls.separable and (jitted[2] is None) != (jitted[3] is None):
        return "a separable system gives both field_potential_gradient and field_kinetic_gradient, or neither"
    pp_cls = params_class(f"{_PREFIX}{p.size}_{_source_hash(cls)}_{re.sub(r'[^0-9A-Za-z]', '', cls.__name__)[:40]}")
    COMPILED[pp_cls] = UserFields(cls, int(cls.dim), *jitted)
    try:
        _check(system, pp_cls(*(float(v) for v in p)), p, jitted[1] is not None, dispatchers)
    except Exception:
        del COMPILED[pp_cls]
        raise
    return pp_cls


def _check(system: Any, pp: Any, p: np.ndarray, with_jacobian: bool, dispatchers: tuple[Any, Any]) -> None:
    """Compile the dispatchers for ``pp`` and compare them with NumPy's evaluation at the system's default state."""
    vector_field, jacobian = dispatchers
    y = np.ascontiguousarray(getattr(system, "default_y0", None) or np.linspace(0.3, 0.7, system.dim), dtype=np.float64)
    user = COMPILED[type(pp)]
    for fn in (user.field, user.jacobian):  # the user's own functions first: numba's error then names their line
        if fn is not None:
            fn(pp, tuple(float(v) for v in y))
    out = np.empty(system.dim)
    vector_field(pp, p, y, out)
    _same("field", out, system.vector_field(y), y)
    if with_jacobian:
        jac = np.empty((system.dim, system.dim))
        jacobian(pp, p, y, jac)
        _same("field_jacobian", jac, system.jacobian(y), y)


def _same(what: str, compiled: np.ndarray, numpy: np.ndarray, y: np.ndarray) -> None:
    scale = max(1.0, float(np.max(np.abs(numpy))) if numpy.size else 1.0)
    if not np.allclose(compiled, numpy, rtol=1e-9, atol=1e-12 * scale):
        raise _Differs(f"numba's {what} differs from NumPy's at y = {np.array2string(y, precision=4)} (max "
                       f"{float(np.max(np.abs(compiled - numpy))):.3g}); check integer division and Python-level code")


class _Differs(Exception):
    pass


def _why(err: BaseException) -> str:
    """One line: what failed (numba's first message line) and where (the user's file and line)."""
    if isinstance(err, _Differs):
        return str(err)
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    msg = next((ln for ln in lines if not ln.startswith(("During:", "File", "^", "- Resolution", "Failed in"))),
               type(err).__name__)
    where = [m.group(1, 2) for m in re.finditer(r'File "([^"]+)", line (\d+)', text) if "numba" not in m.group(1)]
    at = f" at {where[-1][0]}:{where[-1][1]}" if where else ""
    return f"numba cannot compile its field ({type(err).__name__}: {msg[:200]}){at}"


def _source_hash(cls: Any) -> str:
    """sha256 of the sources the compiled code inlines: the file (else the source) of the class and of each function
    it compiles or calls (``field``..., ``field_helpers``); a notebook's cells are read through ``linecache``. Where no
    source can be read (a REPL), a name for this process only."""
    h = hashlib.sha256(f"{cls.__module__}:{cls.__qualname__}:{cls.dim}".encode())
    read = 0
    for obj in (cls, cls.field, cls.field_jacobian, getattr(cls, "field_potential_gradient", None),
                getattr(cls, "field_kinetic_gradient", None), getattr(cls, "bond_force", None),
                getattr(cls, "bond_stiffness", None), *getattr(cls, "field_helpers", ())):
        obj = getattr(obj, "py_func", obj)  # a helper jitted already (dysts' right-hand sides): its Python source
        if obj is None:
            continue
        try:
            path = inspect.getsourcefile(obj)
            h.update(Path(path).read_bytes() if path and Path(path).is_file() else inspect.getsource(obj).encode())
            read += 1
        except (OSError, TypeError):
            continue
    if not read:
        h.update(repr(id(cls)).encode())
    return h.hexdigest()[:20]


__all__ = ["user_kernel", "lattice_kind", "LATTICES", "reason", "params_class", "COMPILED", "UserFields"]
