"""Atomic file writes, crash clean-up, and the rule that no command writes over its inputs.

Every output is written to a temporary file beside the target, then renamed onto it: an interrupted or
failed write leaves the target untouched (an earlier file there stays intact) and no partial file behind.
A process killed outright (``kill -9``) cannot clean up; its temporary file names carry its process id
(``.<name>.<pid>.<random><suffix>.tmp``), and the next write to the same target removes the temporary
files of processes that no longer run.

HDF5 files are written through ``h5_writing``: a write that failed inside HDF5's C code (a full disk, an
I/O error, a file size limit) left the library with a file it could neither flush nor close, and it then
crashed the process (SIGSEGV or SIGBUS) at exit. HDF5 now writes through a file object that records the
failure instead; the file is closed whole, removed, and the error is one line.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import VPIntegratorError


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


class _GuardedFile(io.RawIOBase):
    """The file HDF5 writes through (h5py's ``fileobj`` driver): a write that fails (a full disk, an I/O
    error, a file size limit) is recorded in ``error`` and reported to HDF5 as done, and every later write
    is dropped, so that HDF5's state stays whole and its file can be closed; the caller raises ``error``
    (``check``) and throws the file away."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.raw = open(self.path, "w+b", buffering=0)
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.raw.seek(pos, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def readinto(self, buffer: Any) -> int:
        return self.raw.readinto(buffer) or 0

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        if self.error is None:
            try:
                done = 0
                view = memoryview(data).cast("B")
                while done < n:  # (a short write is not a failure)
                    done += self.raw.write(view[done:]) or 0
            except OSError as err:
                self._failed(err)
        return n

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return self.raw.truncate(size)
            except OSError as err:
                self._failed(err)
        return self.raw.tell() if size is None else size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.raw.close()
        super().close()

    def _failed(self, err: OSError) -> None:
        self.error = OSError(err.errno, err.strerror, self.path)

    def check(self) -> None:
        """Raise the first failed write's ``OSError`` (naming the file), if any."""
        if self.error is not None:
            raise self.error


#: the attribute of an h5py file from ``h5_writing`` that holds its ``_GuardedFile``
_GUARD = "_vpintegrator_guard"


@contextlib.contextmanager
def h5_writing(tmp: str | os.PathLike[str], **kwargs: Any) -> Iterator[Any]:
    """``h5py.File`` created at ``tmp`` (a temporary file of ``atomic_path``) for the block, closed on
    leaving; ``kwargs`` go to ``h5py.File``.

    HDF5 writes through a file object that records a failed write instead of passing it on: HDF5 left
    with a failed write can neither flush nor close its file, and it crashed the process (SIGSEGV or
    SIGBUS) when it tried again at exit. The first failure is raised as an ``OSError`` naming ``tmp``
    when the block ends (or sooner, at ``check_h5_write``), after the file is closed; ``atomic_path``
    then removes it and says so in one line. The datasets, chunks and attributes are those HDF5's own
    file driver writes (only where small blocks go inside the file may differ).
    """
    import h5py

    guard = _GuardedFile(tmp)
    try:
        f = h5py.File(guard, "w", **kwargs)
    except BaseException:
        guard.close()
        raise
    setattr(f, _GUARD, guard)
    try:
        try:
            yield f
        finally:
            try:
                f.close()
            finally:
                guard.close()
    except BaseException as err:
        if guard.error is not None and isinstance(err, Exception) and not _is_device_error(err):
            raise guard.error from None  # the write that failed first is the cause
        raise
    guard.check()


def check_h5_write(f: Any) -> None:
    """Raise the ``OSError`` of the first write of the h5py file ``f`` (from ``h5_writing``) that failed, if
    any: call it after each block of data, so that a run stops when the disk is full, not at its end."""
    guard = getattr(f, _GUARD, None)
    if guard is not None:
        guard.check()


def _is_device_error(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DEVICE_ERRNOS


#: errno values that say the device, not the request, failed: a full disk or quota, an I/O error, read-only
DEVICE_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EIO", "EROFS", "EFBIG") if hasattr(errno, n)}


def _raise_if_device_error(err: BaseException, target: Path) -> None:
    """A write of ``target`` that failed because the disk is full (or an I/O error, a read-only file system)
    as one line ([`VPIntegratorError`][vpintegrator.errors.VPIntegratorError]); the temporary file is already gone and an
    earlier ``target`` is intact. Writers that wrap the OS error (torch's ``file write failed``, an error
    chained from an OSError) are recognised too; anything else is left to the caller."""
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
                                          "Read-only file system", "File too large") if words in text), None)
        code = re.search(r"errno = (\d+)", text)  # HDF5's "file write failed: ..., errno = 28, ..."
        if found is None and code and int(code.group(1)) in DEVICE_ERRNOS:
            found = os.strerror(int(code.group(1)))
    if found is None and isinstance(err, RuntimeError) and (
            "file write failed" in text or ("inline_container" in text and "unexpected pos" in text)):
        found = "write failed (torch)"  # torch's zip writer: a failed or short write (a full disk)
    if found is None:
        return
    raise device_write_error(target, found) from None


class DeviceWriteError(VPIntegratorError):
    """A write the device refused (a full disk, an I/O error, a size limit); ``reason`` says which (the
    words of ``os.strerror``), so that a caller can name another target (a worker's part file stands for the
    output)."""

    def __init__(self, message: str = "", *, reason: str = "", key: str | None = None) -> None:
        super().__init__(message, key=key)
        self.reason = reason


def device_write_error(target: str | os.PathLike[str], reason: str) -> DeviceWriteError:
    """The one-line error of a write of ``target`` that the device refused for ``reason``."""
    target = Path(target)
    what = "free space on" if reason != os.strerror(errno.EFBIG) else \
        "the file would pass a size limit (ulimit -f) or the file system's largest file: free space on"
    return DeviceWriteError(f"{target}: cannot write it: {reason}; nothing was written (the temporary file is "
                            f"removed, an earlier {target.name} is intact): {what} {target.parent} or write "
                            "elsewhere", reason=reason)


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


def resolve_path(path: str | os.PathLike[str], key: str) -> Path:
    """``Path(path).resolve()``, with a symbolic link loop refused in one line naming ``key`` (Python < 3.13
    raises RuntimeError for one, later versions OSError(ELOOP))."""
    from .errors import VPIntegratorError

    try:
        return Path(path).resolve()
    except RuntimeError as err:
        if "loop" not in str(err).lower():
            raise
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
    raise VPIntegratorError(f"{key} {path}: a loop of symbolic links (a link that leads back to itself); point "
                            "it at a real file or give another path", key=key)


def check_not_input(out: str | os.PathLike[str] | None, inputs, key: str = "out") -> None:
    """Refuse an output path that is one of the inputs (the same file, also through links or relative
    paths): a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] before any work starts."""
    from .errors import VPIntegratorError

    if out is None:
        return
    out_path = Path(out)
    try:
        out_real = resolve_path(out_path, key)
    except OSError:
        return
    for inp in inputs or ():
        if inp is None:
            continue
        in_path = Path(inp)
        try:
            same = out_real == resolve_path(in_path, "input")
        except OSError:
            continue  # the reader says what is wrong with it
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
