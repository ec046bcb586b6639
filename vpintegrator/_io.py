"""Atomic file writes: write to a temporary file beside the target, then rename.

An interrupted or failed write leaves the target untouched (an earlier file there stays intact) and no
partial file behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary name starts with ``.`` and ends in ``.tmp`` so that it is never mistaken for output.
    On any exception (``KeyboardInterrupt`` included) the temporary file is removed and the exception
    re-raised.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f"{suffix}.tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the target the usual mode
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_terminated: int | None = None  # the signal number once SIGTERM or SIGINT has arrived


def _raise_keyboard_interrupt(signum, frame):  # pragma: no cover - exercised through a subprocess
    global _terminated
    _terminated = signum
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def install_sigterm_handler() -> None:
    """Turn SIGTERM into ``KeyboardInterrupt`` so that ``kill`` cleans up like Ctrl-C does; both signals
    are also remembered for :func:`check_terminated`."""
    with contextlib.suppress(ValueError):  # not in the main thread: leave signals alone
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when SIGINT is ignored
            signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    if getattr(sys.unraisablehook, "__name__", "") != _quiet_interrupts.__name__:
        _quiet_interrupts.previous = sys.unraisablehook  # type: ignore[attr-defined]
        sys.unraisablehook = _quiet_interrupts


def _quiet_interrupts(unraisable) -> None:
    """An interrupt swallowed in a finaliser is not an error to print: :func:`check_terminated` acts on it."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _terminated is not None:
        return
    _quiet_interrupts.previous(unraisable)  # type: ignore[attr-defined]


def check_terminated() -> None:
    """Raise ``KeyboardInterrupt`` if SIGTERM (or SIGINT) arrived earlier.

    The handler raises where the signal lands; if that was inside a finaliser or a weakref callback,
    Python prints "Exception ignored" and goes on. Long loops call this between chunks so that such a
    swallowed signal still stops the work (and its cleanup runs).
    """
    if _terminated is not None:
        raise KeyboardInterrupt(f"terminated by signal {_terminated}")
