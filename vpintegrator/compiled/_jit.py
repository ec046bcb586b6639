"""The one place that imports numba: ``jit`` compiles with numba when it is installed and is the identity
otherwise, so every module of ``vpintegrator.compiled`` imports without numba (the kernels are then
plain Python and are never used: ``vpintegrator.compiled.available`` is False)."""

from __future__ import annotations

import logging
from collections import namedtuple
from typing import Any

try:  # pragma: no cover - exercised by the environment
    import numba as _numba
except Exception:  # ImportError, or a numba that fails against this NumPy
    _numba = None

HAVE_NUMBA = _numba is not None


def jit(fn):
    """``numba.njit(cache=True, error_model="numpy")`` (no fastmath: same rounding as NumPy), or ``fn``;
    its cached machine code loads without numba's full start-up (``lean_cache_load``); where numba cannot write
    its cache, a temporary one or none (``vpintegrator._jitcache``)."""
    if _numba is None:
        return fn
    return njit(error_model="numpy")(fn)


def named_class(namespace: dict, name: str, fields: list[str], **attrs: Any) -> type:
    """The namedtuple class ``name`` (``fields``, and ``attrs`` set on it) of the module whose globals are
    ``namespace``, made once: importable by its name, as numba's cache index pickles the classes compiled code is
    typed by (a system's parameters, a method's tag)."""
    cls: Any = namespace.get(name)
    if cls is None:
        make: Any = namedtuple  # a class made at run time
        cls = make(name, fields)
        cls.__module__ = namespace["__name__"]
        for key, value in attrs.items():
            setattr(cls, key, value)
        namespace[name] = cls
    return cls


def jit_helpers(*functions) -> None:
    """Let compiled code call the plain Python ``functions`` (a system's helpers beside its ``field``, listed in
    its ``field_helpers``): each is registered with numba (``register_jitable``, NumPy's error model), so a
    jitted ``field`` that calls one compiles it on the spot; without numba, nothing to do."""
    if _numba is None:
        return
    from numba.extending import register_jitable

    for fn in functions:
        if fn not in _helpers:
            register_jitable(error_model="numpy")(fn)
            _helpers.append(fn)


_helpers: list = []


def njit(**options):
    """``numba.njit(cache=True, **options)`` whose cached machine code loads lean (``lean_cache_load``); where
    numba cannot write its cache, a temporary one or none (``vpintegrator._jitcache``)."""
    from .._jitcache import njit as cached_njit

    return lambda fn: announce_compile(lean_cache_load(cached_njit(fn, **options)))


_announced: list[str] = []


def announce_compile(dispatcher):
    """Let ``dispatcher`` say, once per process at INFO, that numba is compiling rather than loading from its cache
    (a fresh install's first rollout compiles for minutes); returns it. The line comes when a load from the cache
    finds nothing (numba compiles next); a kernel found in the cache says nothing."""
    cache = getattr(dispatcher, "_cache", None)
    load = getattr(cache, "load_overload", None)
    if not callable(load):
        return dispatcher
    name = getattr(getattr(dispatcher, "py_func", None), "__qualname__", "?")
    cached = type(cache).__name__ != "NullCache"  # numba's cache of a function compiled without one

    def load_overload(sig, target_context):
        found = load(sig, target_context)
        if found is None and not _announced:
            _announced.append(name)
            logging.getLogger("vpintegrator").info(
                "compiling the numba kernels (first use, here %s; %s)", name,
                "cached for the next run" if cached else "not cached: numba has no writable cache directory")
        return found

    cache.load_overload = load_overload
    return dispatcher


#: the names numba's ``Cache.load_overload`` calls, in the shape ``lean_cache_load`` reproduces: refresh the
#: target, then ``self._load_overload(sig, target_context)`` under ``self._guard_against_spurious_io_errors()``
_LOAD_OVERLOAD_CALLS = ("refresh", "_guard_against_spurious_io_errors", "_load_overload")
_warned: list[str] = []


def lean_load_unsupported(cache_class: type | None = None) -> str | None:
    """Why ``lean_cache_load`` cannot be used with the installed numba (None: it can).

    Checks every numba internal it relies on, in the shape it relies on: ``Cache.load_overload(self, sig,
    target_context)`` whose code calls ``refresh``, ``_guard_against_spurious_io_errors`` and
    ``_load_overload``; ``Cache._load_overload(self, sig, target_context)``; the guard; and
    ``nrt.rtsys.initialize(ctx)``. numba is bounded below only (``numba>=0.59``): a numba that changes any of
    these gets numba's own loader and one warning, and tests/test_startup.py fails on it, so the change is
    seen rather than silent.

    Parameters
    ----------
    cache_class : type, optional
        The dispatcher's cache class (``type(dispatcher._cache)``); default numba's ``Cache``.
    """
    import inspect

    if _numba is None:
        return "numba is not installed"
    version = getattr(_numba, "__version__", "?")
    try:
        from numba.core.caching import Cache
        from numba.core.runtime import nrt
    except ImportError as err:
        return f"numba {version}: {err}"
    cls = Cache if cache_class is None else cache_class
    wanted = [("Cache.load_overload", getattr(cls, "load_overload", None), ["self", "sig", "target_context"]),
              ("Cache._load_overload", getattr(cls, "_load_overload", None), ["self", "sig", "target_context"]),
              ("nrt.rtsys.initialize", getattr(getattr(nrt, "rtsys", None), "initialize", None), None)]
    for what, fn, params in wanted:
        if not callable(fn):
            return f"numba {version} has no {what}"
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return f"numba {version}: the signature of {what} cannot be read"
        names = list(signature.parameters)
        if (names != params) if params is not None else len(names) != 1:
            return f"numba {version}: {what}{signature}, expected ({', '.join(params or ['ctx'])})"
    if not callable(getattr(cls, "_guard_against_spurious_io_errors", None)):
        return f"numba {version} has no Cache._guard_against_spurious_io_errors"
    calls = getattr(getattr(getattr(cls, "load_overload", None), "__code__", None), "co_names", ())
    missing = [name for name in _LOAD_OVERLOAD_CALLS if name not in calls]
    if missing:
        return f"numba {version}: Cache.load_overload no longer calls {', '.join(missing)}"
    return None


def lean_cache_load(dispatcher):
    """Let ``dispatcher`` (a ``cache=True`` numba function) load its cached machine code without refreshing
    numba's whole CPU target first; returns it.

    numba's ``Cache.load_overload`` calls ``target_context.refresh()`` before loading: that imports and
    registers every typing and lowering registry of numba (``numba.np.arraymath``, ``linalg``, ``npyimpl``,
    ...), about 0.5 s of a process (most of a small ``vp-gen``'s start-up), though running
    machine code that is already compiled needs none of it, only numba's runtime (NRT, for the arrays the
    kernels allocate). Here the load initialises the runtime and loads the cached library, exactly as numba
    does otherwise. The machine code is the same cached object, so the numbers are the same. On a cache miss
    nothing changes: numba compiles, and its compiler refreshes the contexts itself. Where the installed
    numba's internals are not the ones this relies on (``lean_load_unsupported``),
    the dispatcher is left as it is (numba's own loader) and one warning per process says why."""
    cache = getattr(dispatcher, "_cache", None)
    if cache is None or not hasattr(cache, "load_overload"):  # no on-disk cache (compiled without one)
        return dispatcher
    _stale_index_is_empty(getattr(cache, "_cache_file", None))
    reason = lean_load_unsupported(type(cache))
    if reason is not None:
        if reason not in _warned:
            _warned.append(reason)
            logging.getLogger("vpintegrator").warning(
                "%s; the compiled kernels load through numba's own cache loader (the same numbers, a slower "
                "start-up)", reason)
        return dispatcher
    from numba.core.runtime import nrt

    rtsys = nrt.rtsys
    load = cache._load_overload
    guard = cache._guard_against_spurious_io_errors

    def load_overload(sig, target_context):
        rtsys.initialize(target_context)
        with guard():
            return load(sig, target_context)
        return None  # the guard swallowed an I/O error: compile instead

    cache.load_overload = load_overload
    return dispatcher


def _stale_index_is_empty(index) -> None:
    """An index that another version of a module wrote may name a class that module no longer has (a retired method
    tag): numba unpickles the index before it compares its source stamp, so it would raise; read as empty instead
    (then compiled again and the index written anew), as numba treats any stale index."""
    load_index = getattr(index, "_load_index", None)
    if not callable(load_index):
        return

    def load():
        try:
            return load_index()
        except (AttributeError, ImportError):
            return {}

    index._load_index = load
