"""The system registry, and the one place a system is turned into file metadata and back.

In memory a system is one object (a frozen dataclass whose fields are its parameters). Only at the
HDF5 boundary is it flattened: [`system_meta`][vpintegrator.systems.system_meta] gives ``system`` (the registry name),
``system_class`` (``"package.module:ClassName"``, so that a user-defined system is rebuilt in a fresh
process) and one ``param_<name>`` per parameter (plus derived quantities such as the rigid body's
coefficients, recorded for readers and ignored on the way back). [`system_from_meta`][vpintegrator.systems.system_from_meta] rebuilds
exactly the system that wrote a file.

Systems from dysts (the optional extra): ``"dysts:NAME"`` wherever a system name is accepted
(``vpintegrator.systems.dysts``); a file records that name and is read back through it.

User-defined systems: subclass [`System`][vpintegrator.systems.System] as a frozen dataclass in your own
module, then either ``register_system(MySystem)`` from Python, or name it ``"package.module:ClassName"``
wherever a system name is accepted (specs, ``get_system``, files).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import VPIntegratorError
from ..plugins import UserCodeError, class_path, import_class, importable_path, user_code
from .base import System
from .dysts import dysts_class, is_dysts_name

PARAM_PREFIX = "param_"
_REGISTRY: dict[str, type[System]] = {}
#: name -> the registered class's default instance (systems are frozen dataclasses); a new registration of the
#: name is seen by the type check in get_system
_DEFAULT_INSTANCES: dict[str, System] = {}


def register_system(cls: type[System], *, name: str | None = None, replace: bool = False) -> type[System]:
    """Register a [`System`][vpintegrator.systems.System] subclass under ``name`` (default: its ``name`` class attribute).

    Usable as a decorator. Registering another class under a taken name is an error unless ``replace``.
    """
    if not (isinstance(cls, type) and issubclass(cls, System) and dataclasses.is_dataclass(cls)):
        raise VPIntegratorError(
            f"register_system: {cls!r} is not a System subclass decorated with @dataclass(frozen=True); "
            "define it as `@dataclass(frozen=True) class MySystem(System): ...`"
        )
    key = name or cls.name
    if not key or not isinstance(key, str):
        raise VPIntegratorError(f"register_system: {cls.__name__} has no `name` class attribute; set name = '...'")
    if not cls.dim or cls.dim < 1:
        raise VPIntegratorError(f"register_system: {cls.__name__}.dim must be a positive int; got {cls.dim!r}")
    old = _REGISTRY.get(key)
    if old is not None and old is not cls and not replace and class_path(old) != class_path(cls):
        raise VPIntegratorError(
            f"register_system: the name {key!r} is taken by {class_path(old)}; pass name='...' or replace=True"
        )
    _REGISTRY[key] = cls
    return cls


def list_systems() -> list[str]:
    """Registry names of the shipped and registered systems."""
    return sorted(_REGISTRY)


def shipped_systems() -> list[type[System]]:
    """The package's own systems with a compiled kernel (``kernel_id`` set in the class's own body, not
    inherited: a subclass may change the equations), in kernel-id order; ``vpintegrator.compiled.systems``
    builds its table from them."""
    own = [cls for cls in _REGISTRY.values()
           if vars(cls).get("kernel_id") is not None and cls.__module__.startswith(f"{__package__}.")]
    return sorted(own, key=lambda cls: int(vars(cls)["kernel_id"]))


def _import_class(path: str) -> type[System]:
    return import_class(path, "system", System, "a vpintegrator System subclass")


def system_class(name: str) -> type[System]:
    """The class behind a registry name or a ``"package.module:ClassName"`` path (registered on first use)."""
    if isinstance(name, str) and name in _REGISTRY:
        return _REGISTRY[name]
    if is_dysts_name(name):  # a flow of the dysts package (optional), made and registered on first use
        return register_system(dysts_class(name), replace=True)
    if isinstance(name, str) and ":" in name:
        cls = _import_class(name)
        if cls.name not in _REGISTRY or class_path(_REGISTRY[cls.name]) == class_path(cls):
            register_system(cls, replace=True)
        return cls
    raise VPIntegratorError(
        f"unknown system {name!r}; valid systems: {', '.join(list_systems())} "
        "(or a user-defined 'package.module:ClassName', or 'dysts:NAME')"
    )


def get_system(name: str | System, /, **params: Any) -> System:
    """A system by registry name (or ``"package.module:ClassName"``), parameters overriding its defaults.

    Parameters
    ----------
    name : str or System
        One of [`list_systems`][vpintegrator.systems.list_systems], or an import path; a [`System`][vpintegrator.systems.System] instance is returned as is
        (with ``params`` replaced, if any).
    **params
        Parameters of that system (e.g. ``inertia=(1, 2, 2/3)`` for ``rigid_body``).
    """
    if not params:  # the common call (a batch-1 integrate or rollout): no checks to redo
        if isinstance(name, System) and type(name).__name__ != "UnknownSystem":
            return name
        if isinstance(name, str):
            cls = _REGISTRY.get(name)
            params_of = getattr(cls, "__dataclass_params__", None)
            if cls is not None and params_of is not None and params_of.frozen:
                cached = _DEFAULT_INSTANCES.get(name)
                if cached is not None and type(cached) is cls:
                    return cached
                try:
                    cached = _DEFAULT_INSTANCES[name] = cls()  # frozen: one default instance serves every caller
                    return cached
                except Exception:  # noqa: BLE001 - the checked path below says what is wrong
                    _DEFAULT_INSTANCES.pop(name, None)
    if type(name).__name__ == "SystemFamily":  # .family imports this module: named, not imported
        raise VPIntegratorError(
            f"{name!r} holds one system per trajectory (parameters per trajectory), not one system; give "
            "trajectory i's system (Trajectories.system_for(i)), or run each row with its own "
            "(vpintegrator.rollout.family.step_for)"
        )
    if type(name).__name__ == "UnknownSystem":  # .unknown imports this module: named, not imported
        raise getattr(name, "refusal")("integrating")
    cls = type(name) if isinstance(name, System) else system_class(name)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise VPIntegratorError(
            f"system {cls.name!r} has no parameter(s) {', '.join(unknown)}; valid parameters: "
            f"{', '.join(valid) or '(none)'}"
        )
    if isinstance(name, System) and not params:
        return name
    try:
        with user_code(cls, f"build the system {cls.name!r} with parameters {params}"):
            try:
                return dataclasses.replace(name, **params) if isinstance(name, System) else cls(**params)
            except (TypeError, ValueError, ArithmeticError) as err:
                if isinstance(err, VPIntegratorError):
                    raise
                reason = " ".join(str(err).split())
                raise VPIntegratorError(f"system {cls.name!r}: bad parameters {params}: {reason}") from None
    except UserCodeError:
        raise


def system_meta(system: System) -> dict[str, Any]:
    """The flat metadata of a system for file attributes: system, system_class, param_<name> (a new dict)."""
    try:
        cached = _META.get(system)
    except TypeError:  # an unhashable parameter
        cached = None
    if cached is not None and cached[0] is type(system):
        return cached[1].fresh()
    meta: dict[str, Any] = {"system": system.name}
    path = importable_path(type(system))
    if path is not None:
        meta["system_class"] = path
    meta.update({PARAM_PREFIX + k: v for k, v in system.params().items()})
    params_of = getattr(type(system), "__dataclass_params__", None)
    if params_of is not None and params_of.frozen:  # a frozen system's metadata never changes
        try:
            if len(_META) >= 256:
                _META.pop(next(iter(_META)))
            _META[system] = (type(system), MetaTemplate(meta))
        except TypeError:
            pass
    return meta


class MetaTemplate:
    """Metadata kept to be handed out again (a copy of ``meta``): ``fresh()`` is a new dict whose list and dict
    values are copies too, so that a caller may edit what it gets; only those values are walked (~0.3 us where
    walking every value took ~1.4 us)."""

    __slots__ = ("meta", "mutable")

    def __init__(self, meta: Mapping[str, Any]) -> None:
        self.meta: dict[str, Any] = _copied(dict(meta))
        self.mutable = tuple(k for k, v in self.meta.items() if isinstance(v, (list, dict)))

    def fresh(self) -> dict[str, Any]:
        fresh = self.meta.copy()
        for key in self.mutable:
            fresh[key] = _copied(fresh[key])
        return fresh


def _copied(value: Any) -> Any:
    """``value`` with every list and dict in it copied (cheaper than ``copy.deepcopy`` on these JSON-like values):
    a caller that edits the metadata it was given (``meta["param_inertia"][0] = ...``) edits neither the cache nor
    the next caller's."""
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


#: system -> (its class, its metadata): a batch-1 call writes the same metadata every time
_META: dict[Any, tuple[type, MetaTemplate]] = {}


def system_params_from_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ``param_<name>`` entries of flat metadata as ``{name: value}`` (derived ones included)."""
    return {k[len(PARAM_PREFIX):]: v for k, v in meta.items() if k.startswith(PARAM_PREFIX)}


def system_from_meta(meta: Mapping[str, Any], where: Any = "metadata") -> System:
    """Rebuild exactly the system described by flat metadata (``system``, ``system_class``, ``param_*``).

    ``where`` names the file (or other source) in error messages.
    """
    name = meta.get("system")
    if not name:
        raise VPIntegratorError(f"{where}: missing attribute 'system'; was it written by vpintegrator?")
    name = str(name)
    try:
        if name in _REGISTRY:
            cls = _REGISTRY[name]
        elif meta.get("system_class"):
            cls = system_class(str(meta["system_class"]))
        else:
            cls = system_class(name)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{where}: attribute 'system': {err}") from None
    fields = {f.name for f in dataclasses.fields(cls)}
    params = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in system_params_from_meta(meta).items() if k in fields
    }
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
        raise VPIntegratorError(f"{where}: system parameters {params}: {err}") from None
