"""Memory and disk as the machine has them now: what work that cannot fit is measured against.

``check_size`` is the one check of a size-driven allocation (a parameter grid, a test set, windows of a
context length, a horizon, a chunk shape), made before it, with one message naming the key and the
estimate; ``check_finite`` names the input whose intermediate values overflow float64.

The functions are looked up at call time (``resources.available_memory()``), so tests can monkeypatch
them here, once, for every command.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from .errors import VPIntegratorError


#: (monotonic time, bytes) of the last reading of /proc/meminfo: read again after READ_EVERY seconds, so that a
#: batch-1 call (integrate, a one-trajectory rollout: ~0.1 ms) does not pay a file read (~15 µs) each time
_LAST_READING: list[float] = [-math.inf, 0.0]
READ_EVERY = 0.25


def available_memory() -> int:
    """Bytes available to a new allocation: ``MemAvailable`` of ``/proc/meminfo`` (read at most every
    ``READ_EVERY`` seconds), else the physical memory (``os.sysconf``), else a very large number."""
    now = time.monotonic()
    if now - _LAST_READING[0] < READ_EVERY:
        return int(_LAST_READING[1])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    have = int(line.split()[1]) * 1024
                    _LAST_READING[:] = [now, have]
                    return have
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 2**63 - 1


def free_disk(path: str | os.PathLike[str]) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing ancestor)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:  # pragma: no cover
        return 2**63 - 1


def size_text(n_bytes: float) -> str:
    """``n_bytes`` as a short human-readable size (``"74.5 GiB"``)."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"


def check_memory(need: float, what: str, way_out: str, key: str | None = None, fraction: float = 0.8) -> None:
    """Refuse (one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError], before any work) what needs more than ``fraction`` of
    the available memory; ``what`` says what needs it, ``way_out`` how to make it fit."""
    have = available_memory()
    if need > fraction * have:
        raise VPIntegratorError(
            f"{what} needs about {size_text(need)} of memory but {size_text(have)} are available "
            f"(refused before starting); {way_out}",
            key=key,
        )


def check_size(key: str, n_elements: float, itemsize: int = 8, what: str = "the array", *, copies: float = 1.0,
               way_out: str | None = None, fraction: float = 0.8) -> None:
    """The one check of a size-driven allocation, made before it: ``copies`` arrays of ``n_elements`` items of
    ``itemsize`` bytes, driven by the input ``key`` (a config key, a flag's key, an argument), refused with one
    line naming ``key``, ``what`` is allocated and the estimate when they need more than ``fraction`` of the
    available memory (``available_memory``). ``n_elements`` may be a Python int of any size (a product of grid
    sizes) or ``inf``; a negative or NaN count is a bug, not an input, and raises ``ValueError``."""
    n = float(n_elements) if not isinstance(n_elements, int) else n_elements
    if n != n or n < 0:
        raise ValueError(f"check_size({key!r}): a count of {n_elements!r}")
    try:
        need = float(n) * itemsize * copies
    except OverflowError:  # a product of sizes past float range
        need = math.inf
    have = available_memory()
    if need > fraction * have:
        count = f"{n_elements:,}" if isinstance(n_elements, int) else f"{n_elements:.3g}"
        raise VPIntegratorError(
            f"{key}: {what} would hold {count} values ({size_text(need) if math.isfinite(need) else 'unbounded'}) "
            f"but {size_text(have)} of memory are available (refused before allocating); "
            f"{way_out or 'lower it'}", key=key)


def check_finite(key: str, values: Any, what: str = "values") -> None:
    """Refuse (one line naming the input ``key``) ``values`` (a number or an array) with a NaN or an infinity:
    an input whose intermediate values overflow float64 (a parameter of 1e300 squared, data near 1e308) is
    named here, before it turns into a ZeroDivisionError or a NaN far away."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64) if not isinstance(values, float) else np.float64(values)
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(arr)
    if bool(np.any(bad)):
        where = "" if arr.ndim == 0 else f" (first at index {tuple(int(i) for i in np.argwhere(bad)[0])})"
        raise VPIntegratorError(f"{key}: {what} overflow float64 (not finite{where}); the input is too large for "
                                f"double precision: rescale it", key=key)
