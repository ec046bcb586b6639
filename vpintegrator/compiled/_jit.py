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
    """``numba.njit(cache=True, error_model="numpy")`` (no fastmath: same rounding as NumPy), or ``fn``; where
    numba cannot write its cache, a temporary one or none (``vpintegrator._jitcache``)."""
    if _numba is None:
        return fn
    from .._jitcache import njit

    return njit(fn, error_model="numpy")
