"""numba's on-disk cache of compiled kernels, with a fallback where it cannot write.

``njit(fn, **options)`` is ``numba.njit(cache=True, **options)(fn)``. numba keeps its cache beside the
source (``__pycache__``) or in ``NUMBA_CACHE_DIR`` (or the user's cache directory) and raises ``cannot cache
function`` when none is writable: an installed read-only ``site-packages`` with no writable home. Then the
kernels are cached in a temporary directory of this process (removed at exit), or, where there is none,
compiled without a cache; one warning says so, once per process. Every module that jits a function
(``vpintegrator.compiled``, ``vpintegrator.rollout.numba_kernel``) goes through here.

numba keys a function's cache on its own file only (the file's content), but the package's kernels
inline code from other files: the generic loops of ``compiled/kernels.py`` call the systems' dispatchers of
``compiled/systems.py``, which call the fields written once in ``systems/<name>.py``. So every kernel's key
here also holds the content hash of each file compiled code can reach (``DEPENDENCIES``,
[`dependency_stamp`][vpintegrator._jitcache.dependency_stamp]) and NumPy's version: adding a system or
editing a field invalidates every cache, with no file to touch by hand.

With ``NUMBA_CACHE_DIR`` set, the package's kernels are cached under ``<NUMBA_CACHE_DIR>/vpintegrator/<folder
inside the package>`` (``PackageCacheLocator``), not under a hash of
the folder's absolute path as numba's own locator does; since the key is the content, not the file's time, a
clone and an installed wheel of the same sources share one cache (CI compiles each kernel once per Python).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["njit", "fallback_dir", "dependency_stamp", "DEPENDENCIES", "PackageCacheLocator"]

#: the package's sources compiled code can reach, folders or files relative to the package: part of every
#: kernel's cache key (``dependency_stamp``)
DEPENDENCIES = ("compiled", "systems", "integrators/coefficients.py", "rollout/numba_kernel.py", "rollout/numba_model.py")

_state: dict[str, Any] = {"fallback": None, "warned": False}


def fallback_dir() -> str | None:
    """The temporary cache directory in use (None: numba's own place, or no cache at all)."""
    return _state["fallback"] or None


def dependency_stamp() -> tuple[tuple[str, str], ...]:
    """``(path, sha256 of its bytes)`` of every ``.py`` file of ``DEPENDENCIES`` (numba's own freshness rule,
    the file's content, over every file a kernel can inline), then ``("numpy", version)``; read once per
    process. No time and no absolute path: the same sources give the same key wherever they are installed."""
    if "stamp" not in _state:
        import numpy

        root = Path(__file__).resolve().parent
        files = sorted(f for d in DEPENDENCIES
                       for f in ((root / d).glob("*.py") if (root / d).is_dir() else [root / d]) if f.is_file())
        _state["stamp"] = tuple((f.relative_to(root).as_posix(), hashlib.sha256(f.read_bytes()).hexdigest())
                                for f in files) + (("numpy", numpy.__version__),)
    return _state["stamp"]


def _package_locator() -> type | None:
    """``PackageCacheLocator`` built on this numba's ``UserProvidedCacheLocator`` (None where numba has none)."""
    if "locator" not in _state:
        from numba.core import caching, config

        base = getattr(caching, "UserProvidedCacheLocator", None)
        root = Path(__file__).resolve().parent

        class PackageCacheLocator(base):  # type: ignore[misc, valid-type]
            """numba's ``NUMBA_CACHE_DIR`` locator for the package's own files, at
            ``<NUMBA_CACHE_DIR>/vpintegrator/<folder inside the package>``: independent of where the package
            is installed (numba's own hashes the folder's absolute path)."""

            def __init__(self, py_func: Any, py_file: str) -> None:
                super().__init__(py_func, py_file)
                inner = Path(py_file).resolve().parent.relative_to(root)
                self._cache_path = str(Path(getattr(config, "CACHE_DIR"), "vpintegrator", inner))  # numba sets it at import

            @classmethod
            def from_function(cls, py_func: Any, py_file: str) -> Any:
                try:
                    Path(py_file).resolve().relative_to(root)
                except ValueError:
                    return None  # not the package's file: numba's own locators
                return super().from_function(py_func, py_file)

        _state["locator"] = PackageCacheLocator if base is not None else None
    return _state["locator"]


def install_package_locator() -> None:
    """Put ``PackageCacheLocator`` first among numba's locators
    (once; a numba without ``CacheImpl._locator_classes`` keeps its own)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None)
    locator = _package_locator()
    classes = getattr(impl, "_locator_classes", None)
    if locator is not None and isinstance(classes, list) and locator not in classes:
        classes.insert(0, locator)


def __getattr__(name: str) -> Any:
    if name == "PackageCacheLocator":  # built on numba's class at first use: importing this module stays cheap
        return _package_locator()
    raise AttributeError(name)


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

    install_package_locator()
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
