"""Atomic file writes, crash clean-up, and the rule that no command writes over its inputs.

Every output is written to a temporary file beside the target, then renamed onto it: an interrupted or
failed write leaves the target untouched (an earlier file there stays intact) and no partial file behind.
A process killed outright (``kill -9``) cannot clean up; its temporary file names carry its process id
(``.<name>.<pid>.<random><suffix>.tmp``), and the next write to the same target removes the temporary
files of processes that no longer run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary name starts with ``.`` and ends in ``.tmp`` so that it is never mistaken for output.
    On any exception (``KeyboardInterrupt`` included) the temporary file is removed and the exception
    re-raised.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(target)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=f"{suffix}.tmp",
                                        dir=target.parent)
    except OSError as err:
        _raise_if_device_error(err, target)
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the target the usual mode
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        _raise_if_device_error(err, target)
        raise


#: errno values that say the device, not the request, failed: a full disk or quota, an I/O error, read-only
DEVICE_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EIO", "EROFS", "EFBIG") if hasattr(errno, n)}


def _raise_if_device_error(err: BaseException, target: Path) -> None:
    """A write of ``target`` that failed because the disk is full (or an I/O error, a read-only file system)
    as one line ([`VPIntegratorError`][vpintegrator.errors.VPIntegratorError]); the temporary file is already gone and an
    earlier ``target`` is intact. Writers that wrap the OS error (torch's ``file write failed``, an error
    chained from an OSError) are recognised too; anything else is left to the caller."""
    from .errors import VPIntegratorError

    if isinstance(err, VPIntegratorError):
        return
    cause: BaseException | None = err
    found = None
    for _ in range(5):  # the error itself and what it was raised from
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.errno is not None and cause.errno in DEVICE_ERRNOS:
            found = os.strerror(cause.errno)
            break
        cause = cause.__cause__ or cause.__context__
    text = str(err)
    if found is None and isinstance(err, (OSError, RuntimeError)):  # h5py and torch put the OS error in words
        found = next((words for words in ("No space left on device", "Disk quota exceeded", "Input/output error",
                                          "Read-only file system") if words in text), None)
    if found is None and isinstance(err, RuntimeError) and "file write failed" in text:
        found = "write failed (torch)"
    if found is None:
        return
    raise VPIntegratorError(
        f"{target}: cannot write it: {found}; nothing was written (the temporary file is removed, an earlier "
        f"{target.name} is intact): free space on {target.parent} or write elsewhere") from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_orphans(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that writers of ``target`` left when they were killed (their process is
    gone); return what was removed. Temporary files of running processes are left alone."""
    target = Path(target)
    removed = []
    prefix = f".{target.name}."
    with contextlib.suppress(OSError):
        for p in target.parent.iterdir():
            if not (p.name.startswith(prefix) and p.name.endswith(".tmp")):
                continue
            pid_text = p.name[len(prefix):].split(".", 1)[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)) and int(pid_text) != os.getpid():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                removed.append(p)
    return removed


def check_not_input(out: str | os.PathLike[str] | None, inputs, key: str = "out") -> None:
    """Refuse an output path that is one of the inputs (the same file, also through links or relative
    paths): a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] before any work starts."""
    from .errors import VPIntegratorError

    if out is None:
        return
    out_path = Path(out)
    try:
        out_real = out_path.resolve()
    except OSError:
        return
    for inp in inputs or ():
        if inp is None:
            continue
        in_path = Path(inp)
        same = out_real == in_path.resolve()
        if not same and out_path.exists() and in_path.exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out_path, in_path)
        if same:
            raise VPIntegratorError(
                f"{key} {out} is the input file {inp}: this would overwrite it; give another output path", key=key
            )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
