"""Atomic file writes: write to a temporary file beside the target, then rename.

An interrupted or failed write leaves the target untouched (an earlier file there stays intact) and no
partial file behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
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


def _raise_keyboard_interrupt(signum, frame):  # pragma: no cover - exercised through a subprocess
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def install_sigterm_handler() -> None:
    """Turn SIGTERM into ``KeyboardInterrupt`` so that ``kill`` cleans up like Ctrl-C does."""
    with contextlib.suppress(ValueError):  # not in the main thread: leave signals alone
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
