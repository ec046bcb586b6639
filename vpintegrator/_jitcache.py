"""numba's on-disk cache of compiled kernels, with a fallback where it cannot write.

``njit(fn, **options)`` is ``numba.njit(cache=True, **options)(fn)``. numba keeps its cache beside the
source (``__pycache__``) or in ``NUMBA_CACHE_DIR`` (or the user's cache directory) and raises ``cannot cache
function`` when none is writable: an installed read-only ``site-packages`` with no writable home. Then the
kernels are cached in a temporary directory of this process (removed at exit), or, where there is none,
compiled without a cache; one warning says so, once per process. Every module that jits a function
(``vpintegrator.compiled``, ``vpintegrator.rollout.numba_kernel``) goes through here.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from typing import Any, Callable

__all__ = ["njit", "fallback_dir"]

_state: dict[str, Any] = {"fallback": None, "warned": False}


def fallback_dir() -> str | None:
    """The temporary cache directory in use (None: numba's own place, or no cache at all)."""
    return _state["fallback"] or None


def _cannot_cache(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and "cannot cache function" in str(err)


def _use_temporary_cache(err: BaseException) -> None:
    """Point numba's cache at a temporary directory (once); warn once."""
    from numba.core import config

    if _state["fallback"] is None:
        try:
            path = tempfile.mkdtemp(prefix="vpintegrator-numba-")
        except OSError:
            path = ""  # no temporary directory either: compile without a cache
        else:
            atexit.register(shutil.rmtree, path, True)
            setattr(config, "CACHE_DIR", path)  # numba reads it when a kernel's cache is located
        _state["fallback"] = path
    if not _state["warned"]:
        _state["warned"] = True
        where = (f"in the temporary directory {_state['fallback']} (removed at exit)" if _state["fallback"]
                 else "without a cache (no temporary directory is writable either)")
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        logging.getLogger("vpintegrator").warning(
            "numba cannot write its cache beside the package or in NUMBA_CACHE_DIR/home (%s); compiling the "
            "kernels %s: set NUMBA_CACHE_DIR to a writable directory to keep them across runs", first, where)


def njit(fn: Callable[..., Any], **options: Any):
    """``numba.njit(cache=True, **options)(fn)``, cached in a temporary directory (or not at all) where
    numba cannot write its cache (see the module docstring)."""
    import numba

    if _state["fallback"] is None:
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError as err:
            if not _cannot_cache(err):
                raise
            _use_temporary_cache(err)
    if _state["fallback"]:
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError as err:
            if not _cannot_cache(err):
                raise
    return numba.njit(**options)(fn)
