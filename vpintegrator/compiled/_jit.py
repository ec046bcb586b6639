"""The one place that imports numba: ``jit`` compiles with numba when it is installed and is the identity
otherwise, so every module of ``vpintegrator.compiled`` imports without numba (the kernels are then
plain Python and are never used: ``vpintegrator.compiled.available`` is False)."""

from __future__ import annotations

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


def njit(**options):
    """``numba.njit(cache=True, **options)`` whose cached machine code loads lean (``lean_cache_load``); where
    numba cannot write its cache, a temporary one or none (``vpintegrator._jitcache``)."""
    from .._jitcache import njit as cached_njit

    return lambda fn: lean_cache_load(cached_njit(fn, **options))


def lean_cache_load(dispatcher):
    """Let ``dispatcher`` (a ``cache=True`` numba function) load its cached machine code without refreshing
    numba's whole CPU target first; returns it.

    numba's ``Cache.load_overload`` calls ``target_context.refresh()`` before loading: that imports and
    registers every typing and lowering registry of numba (``numba.np.arraymath``, ``linalg``, ``npyimpl``,
    ...), about 0.5 s of a process (most of a small ``vp-gen``'s start-up), though running
    machine code that is already compiled needs none of it, only numba's runtime (NRT, for the arrays the
    kernels allocate). Here the load initialises the runtime and loads the cached library, exactly as numba
    does otherwise. The machine code is the same cached object, so the numbers are the same. On a cache miss
    nothing changes: numba compiles, and its compiler refreshes the contexts itself. Without the numba
    internals this relies on (``_cache._load_overload``, ``rtsys``), the dispatcher is left as it is."""
    cache = getattr(dispatcher, "_cache", None)
    try:
        from numba.core.runtime import nrt

        rtsys = nrt.rtsys
        load = cache._load_overload  # type: ignore[union-attr]
        guard = cache._guard_against_spurious_io_errors  # type: ignore[union-attr]
    except (ImportError, AttributeError):  # pragma: no cover - another numba's internals
        return dispatcher

    def load_overload(sig, target_context):
        rtsys.initialize(target_context)
        with guard():
            return load(sig, target_context)
        return None  # the guard swallowed an I/O error: compile instead

    cache.load_overload = load_overload  # type: ignore[union-attr]
    return dispatcher
