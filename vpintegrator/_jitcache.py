"""numba's on-disk cache of compiled kernels, with a fallback where it cannot write.

``njit(fn, **options)`` is ``numba.njit(cache=True, **options)(fn)``. numba keeps its cache beside the
source (``__pycache__``) or in ``NUMBA_CACHE_DIR`` (or the user's cache directory) and raises ``cannot cache
function`` when none is writable: an installed read-only ``site-packages`` with no writable home. Then the
kernels are cached in a temporary directory of this process (removed at exit), or, where there is none,
compiled without a cache; one warning says so, once per process. Every module that jits a function
(``vpintegrator.compiled``, ``vpintegrator.rollout.numba_kernel``) goes through here.

numba keys a function's cache on its own file only (the file's time and size), but the package's kernels
inline code from other files: the generic loops of ``compiled/kernels.py`` call the systems' dispatchers of
``compiled/systems.py``, which call the fields written once in ``systems/<name>.py``. So every kernel's key
here also holds the time and size of each file compiled code can reach (``DEPENDENCIES``,
[`dependency_stamp`][vpintegrator._jitcache.dependency_stamp]): adding a system or editing a field
invalidates every cache, with no file to touch by hand.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["njit", "fallback_dir", "dependency_stamp", "DEPENDENCIES"]

#: the package's sources compiled code can reach, folders or files relative to the package: part of every
#: kernel's cache key (``dependency_stamp``)
DEPENDENCIES = ("compiled", "systems", "integrators/coefficients.py", "rollout/numba_kernel.py", "rollout/numba_model.py")

_state: dict[str, Any] = {"fallback": None, "warned": False}


def fallback_dir() -> str | None:
    """The temporary cache directory in use (None: numba's own place, or no cache at all)."""
    return _state["fallback"] or None


def dependency_stamp() -> tuple[tuple[str, int, int], ...]:
    """``(path, mtime_ns, size)`` of every ``.py`` file of ``DEPENDENCIES`` (numba's own freshness rule, the
    file's time and size, over every file a kernel can inline), read once per process."""
    if "stamp" not in _state:
        root = Path(__file__).resolve().parent
        files = sorted(f for d in DEPENDENCIES
                       for f in ((root / d).glob("*.py") if (root / d).is_dir() else [root / d]) if f.is_file())
        _state["stamp"] = tuple((f.relative_to(root).as_posix(), st.st_mtime_ns, st.st_size)
                                for f in files for st in [f.stat()])
    return _state["stamp"]


def key_on_dependencies(dispatcher: Any) -> Any:
    """Add [`dependency_stamp`][vpintegrator._jitcache.dependency_stamp] to the freshness stamp of
    ``dispatcher``'s cache index (numba's ``IndexDataCacheFile._source_stamp``, which its index is saved with
    and compared against); returns the dispatcher. A numba without that attribute keeps its own key, and one
    warning per process says that edits to other files may then load stale kernels
    (tests/test_startup.py fails on it, so the change is seen)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is None:  # compiled without an on-disk cache
        return dispatcher
    if not hasattr(cache_file, "_source_stamp"):
        if not _state.get("warned_stamp"):
            _state["warned_stamp"] = True
            logging.getLogger("vpintegrator").warning(
                "this numba's cache index has no _source_stamp: the compiled kernels' caches are keyed on their "
                "own files only (clear NUMBA_CACHE_DIR or the package's __pycache__ after editing a system)")
        return dispatcher
    cache_file._source_stamp = (cache_file._source_stamp, dependency_stamp())
    return dispatcher


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
            return key_on_dependencies(numba.njit(cache=True, **options)(fn))
        except RuntimeError as err:
            if not _cannot_cache(err):
                raise
            _use_temporary_cache(err)
    if _state["fallback"]:
        try:
            return key_on_dependencies(numba.njit(cache=True, **options)(fn))
        except RuntimeError as err:
            if not _cannot_cache(err):
                raise
    return numba.njit(**options)(fn)
