"""The overwrite rule and the one-writer rule, for every output of every command.

**Overwrite rule** (``check_output``): an output that exists is refused with one line unless
``overwrite`` is given; even then, only a file of the kind the command writes is replaced: a trajectory
file for ``vp-gen``, a rollout file and its metrics table for ``vp-rollout``, a run directory for ``vp-train``
(of which only vp-train's own files are removed, by name and kind: ``run_dir_removals``; anything
else in it is kept), a figure drawn by matplotlib for ``vp-plot``. A checkpoint, a source file, an
HDF5 file of another schema or not written by this package, a directory that is not a run directory,
is never replaced. Symbolic links are resolved first, so a link to another output or to an input is
judged by what it points to (and written through).

**Run directories**: every rule on where ``vp-train`` may write a run lives here: what holds a run
(``holds_run``), which ``out`` a new run may take (``check_new_run_dir``), what ``overwrite`` removes and
keeps (``run_dir_removals``, ``replace_run_dir``). ``vpintegrator.rundir`` reads and writes the run's text
files; ``vpintegrator.training.checkpoint`` writes the rest.

**One writer per output** (``output_lock``): a command holds an exclusive lock on each output for its
whole run: the file ``<output>.lock`` beside it holding the writer's process id, locked with
``fcntl.flock`` where available (else created with ``O_EXCL``). A second writer is refused with one line
naming the live process; a lock left by a process that no longer runs is taken over with one warning
line on stderr; the lock file is removed when the writer ends. Locks are re-entrant within a process.

A lock never follows a symbolic link and never removes what it did not make: the lock file is opened with
``O_NOFOLLOW`` (a link in its place is refused with one line, the link and its target untouched), it must
be a regular file, and a file there that is not a lock of this package (anything but an empty file or
``<pid>\n<program>\n``) is refused, not taken over. On exit the file is removed only if it is still the
one this process locked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import sys
from pathlib import Path
from typing import Iterator

from ._io import pid_alive
from .errors import VPIntegratorError

#: the ``schema`` attribute of a rollout file (``vpintegrator.data.rollouts``, which writes it); here, so
#: that telling a file's kind needs nothing above this module
ROLLOUT_SCHEMA = "vpintegrator-rollout"
#: the HDF5 format rollout files are written in: HDF5 1.8's object headers (readable by HDF5 >= 1.8, 2008), which
#: store attributes over 64 KiB (a label per trajectory, ``traj_split``, for more than ~4 000 trajectories)
#: densely; the default (earliest) format refuses them
ROLLOUT_LIBVER = ("v108", "latest")

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: O_EXCL lock files
    fcntl = None  # type: ignore[assignment]

__all__ = ["KIND_NAMES", "OutputError", "check_new_run_dir", "check_output", "check_run_entries", "identify", "lock_path", "output_lock",
           "output_locks", "replace_run_dir", "run_dir_removals"]

#: kind -> how a message names it
KIND_NAMES = {
    "trajectories": "a vp-gen trajectory file",
    "rollout": "a vp-rollout file",
    "table": "a vp-rollout metrics table",
    "figure": "a figure drawn by matplotlib",
    "run": "a vp-train run directory",
    "checkpoint": "a model checkpoint",
    "hdf5": "an HDF5 file not written by vpintegrator",
    "source": "a source or text file",
    "directory": "a directory that is not a run directory",
    "file": "a file not written by this command",
    "special": "not a regular file (a FIFO, socket or device)",
}
#: what a run directory may hold (vp-train and vp-plot write these; ``member_*`` are ensemble members)
RUN_FILES = frozenset({"config.toml", "log.csv", "summary.json", "last.pt", "best.pt", "complete.json", "ensemble.csv",
                       "ensemble.md", "selected.json", "ensemble_last.pt"})
RUN_DIRS = frozenset({"figures", "best"})
#: the first line of every LaTeX table file the package writes (``vpintegrator.data.latex``): a ``.tex`` that starts
#: with it is a table the package may replace, any other ``.tex`` a source
LATEX_HEAD = "% vpintegrator table (LaTeX, booktabs: \\usepackage{booktabs})"
_SOURCE_SUFFIXES = frozenset({".py", ".pyx", ".c", ".h", ".cpp", ".cu", ".jl", ".m", ".r", ".sh", ".toml", ".json",
                              ".yaml", ".yml", ".cfg", ".ini", ".txt", ".ipynb", ".tex", ".rst"})
_FIGURE_SUFFIXES = frozenset({".pdf", ".png", ".svg", ".eps", ".ps", ".jpg", ".jpeg"})
_MATPLOTLIB_SIGNS = (b"software\x00matplotlib", b"(matplotlib pdf backend", b"<dc:title>matplotlib v",
                     b"creator: matplotlib")


class OutputError(VPIntegratorError):
    """A refused output. Like [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError], and a CLI also renders the word ``overwrite`` as
    its own flag (``--overwrite``)."""

    def render(self, name_of_key) -> str:
        text = super().render(name_of_key)
        return re.sub(r"(?<![\w-])overwrite(?![\w-])", lambda m: name_of_key("overwrite"), text, count=1)


# --------------------------------------------------------------------------- what a path holds


#: the first words of the caption paragraphs vp-rollout writes above its Markdown tables
_CAPTIONS = (b"Errors against the ", b"seconds_per_step: ", b"Cost: ")


def _head(path: Path, n: int = 4096) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def _tail(path: Path, n: int = 65536) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - n))
        return fh.read()


def holds_run(path: Path) -> bool:
    """Whether the directory ``path`` holds a vp-train run (or an ensemble's): what a new run refuses and
    ``overwrite`` may replace. A run writes config.toml first, then log.csv, summary.json and the
    checkpoints; a killed one may have left last.pt or log.csv alone, a killed ensemble its config.toml and
    the members' directories."""
    names = {p.name for p in path.iterdir()}
    return bool(names & {"last.pt", "log.csv", "ensemble.csv", "ensemble_last.pt"}) or (
        "config.toml" in names and bool(names & {"best.pt", "summary.json"})) or (
        "config.toml" in names and any(n.startswith("member_") and (path / n / "config.toml").is_file() for n in names))
    # (the last: an ensemble killed before its ensemble.csv, its members' directories written)


def identify(path: str | os.PathLike[str]) -> str | None:
    """The kind of what exists at ``path`` (a key of ``KIND_NAMES``), or None when nothing does."""
    p = Path(path)
    if not p.exists():
        return None
    if p.is_dir():
        try:
            return "run" if holds_run(p) else "directory"
        except OSError:
            return "directory"
    if not p.is_file():  # a FIFO (reading it would wait for a writer forever), a socket, a device
        return "special"
    suffix = p.suffix.lower()
    try:
        head = _head(p)
    except OSError:
        return "file"
    if suffix in (".pt", ".pth", ".ckpt") or head.startswith(b"PK\x03\x04") and b"data.pkl" in head:
        return "checkpoint"
    if suffix in _FIGURE_SUFFIXES:
        # vp-plot's figures are drawn by matplotlib, which signs the file: a PNG text chunk "Software"
        # near the start, the PDF info dictionary's Producer near the end, an SVG or PostScript comment
        try:
            text = head.lower() + _tail(p).lower()
        except OSError:
            text = b""
        drawn = any(sign in text for sign in _MATPLOTLIB_SIGNS)
        return "figure" if drawn else "file"
    if suffix in (".csv", ".md"):
        lines = head.split(b"\n", 6)
        first = lines[0].strip()
        if first.startswith((b"method,", b"| method |")):
            return "table"
        # vp-rollout's Markdown tables under their caption paragraphs (what the errors are measured against, how the
        # costs were taken: ``vpintegrator.rollout.run.COST_CAPTION``, the work-precision table's ``Cost:`` line)
        if first.startswith(_CAPTIONS) and any(line.startswith(b"| method |") for line in lines[2:6]):
            return "table"
        return "file"
    import h5py

    if head.startswith(b"\x89HDF\r\n\x1a\n") or (len(head) >= 8 and h5py.is_hdf5(p)):
        return _hdf5_kind(p)
    if suffix == ".tex":  # a LaTeX table the package wrote (``LATEX_HEAD`` first) or a source
        return "table" if head.startswith(LATEX_HEAD.encode()) else "source"
    if suffix in _SOURCE_SUFFIXES:
        return "source"
    return "file"


def _hdf5_kind(path: Path) -> str:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            attrs = f.attrs
            if "schema" in attrs:
                schema = attrs["schema"]
                schema = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else str(schema)
                return "rollout" if schema == ROLLOUT_SCHEMA else "hdf5"
            if "schema_version" in attrs and "vpintegrator_version" in attrs and "y" in f and "t" in f:
                return "trajectories"
    except (OSError, KeyError, ValueError):
        pass
    return "hdf5"


# --------------------------------------------------------------------------- the overwrite rule


def _resolve(path: Path, key: str | None) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as err:  # a symlink loop
        raise OutputError(f"{_label(key, path)}: cannot resolve the path ({err}); give a plain path", key=key) from None


def _label(key: str | None, path) -> str:
    return f"{key} {path}" if key else str(path)


def check_output(path: str | os.PathLike[str], kind: str | tuple[str, ...], overwrite: bool = False, *,
                 key: str | None = "out") -> Path:
    """Refuse an output that exists, unless ``overwrite``; refuse one not of ``kind`` even then.

    Parameters
    ----------
    path : path of the output (file or, for ``kind="run"``, directory)
    kind : a key of ``KIND_NAMES`` (or a tuple of them) that the caller writes
    overwrite : replace an existing output of ``kind``
    key : the configuration key named in the message (a CLI names its flag)

    Returns
    -------
    Path
        The output with symbolic links resolved: the path to write (and to lock).

    Raises
    ------
    OutputError
        One line naming the output, what it is, and how to go on.
    """
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    if not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True or False; got {overwrite!r}", key="overwrite")
    given = Path(path)
    real = _resolve(given, key)
    via = f" (a link to {real})" if real != Path(os.path.abspath(given)) else ""
    found = identify(real)
    if found is None:
        return real
    if found not in kinds:
        raise OutputError(
            f"{_label(key, given)}{via} exists and is {KIND_NAMES[found]}, not {KIND_NAMES[kinds[0]]}: it is "
            f"never replaced, also with overwrite; give another path", key=key)
    if not overwrite:
        raise OutputError(
            f"{_label(key, given)}{via} already exists ({KIND_NAMES[found]}); give another path, "
            "or use overwrite to replace it", key=key)
    return real


#: the figures vp-plot draws by default (``plotting.rollout.KINDS``, the training curves, work–precision):
#: what replacing a run directory removes from its ``figures/`` when matplotlib drew them
VP_PLOT_STEMS = frozenset({"trajectories3d", "invariants", "error", "volume", "phase", "training", "work_precision"})


def _run_file_is_ours(p: Path) -> bool:
    """Whether ``p`` (named as one of ``RUN_FILES``) is what vp-train writes under that name: a regular
    file (not a link) of that kind (a checkpoint is torch's zip, log.csv starts with its epoch column, a
    JSON file is an object)."""
    if p.is_symlink() or not p.is_file():
        return False
    try:
        head = _head(p, 64)
    except OSError:
        return False
    if p.suffix == ".pt":
        return head.startswith(b"PK\x03\x04")
    if p.name == "log.csv":
        return head.startswith(b"epoch,") or head == b""
    if p.suffix == ".json":
        return head.lstrip().startswith(b"{")
    return True  # config.toml, ensemble.csv, ensemble.md: text the run wrote


def _leftover(name: str) -> bool:
    """A temporary file of a killed writer, or the lock file of a run file."""
    return (name.startswith(".") and name.endswith(".tmp")) or (
        name.endswith(".lock") and name[: -len(".lock")] in RUN_FILES | RUN_DIRS)


def run_dir_removals(path: Path) -> list[Path]:
    """What replacing the run directory ``path`` removes: vp-train's own files by name and kind (the run
    files of the run and of each ``member_*``, the ensemble's ``best`` link, temporary and lock files of
    killed writers, and in ``figures/`` the figures vp-plot draws by default, drawn by matplotlib).
    Everything else is kept. An entry kept where the new run writes (a ``log.csv`` of yours, a directory
    named ``best.pt``) is a one-line ``OutputError``, before anything is removed."""
    remove: list[Path] = []

    def conflict(p: Path, what: str) -> OutputError:
        return OutputError(
            f"out {path}: {p.relative_to(path)} is {what}, not what vp-train writes there; it is never removed, also "
            "with overwrite, and the new run would write there: move it away or give another out", key="out")

    def visit(d: Path, top: bool) -> None:
        for p in sorted(d.iterdir()):
            name = p.name
            if name in RUN_FILES:
                if not _run_file_is_ours(p):
                    kind = "a link" if p.is_symlink() else "a directory" if p.is_dir() else "a file of yours"
                    raise conflict(p, kind)
                remove.append(p)
            elif _leftover(name) and (p.is_file() or p.is_symlink()):
                remove.append(p)
            elif top and name == "best":  # an ensemble's link to its selected member (a copy without links)
                if p.is_symlink():
                    remove.append(p)
                elif p.is_dir():
                    visit(p, False)
                else:
                    raise conflict(p, "a file of yours")
            elif top and name.startswith("member_") and not p.is_symlink() and p.is_dir():
                visit(p, False)
            elif top and name == "figures" and not p.is_symlink() and p.is_dir():
                for f in sorted(p.iterdir()):
                    if f.stem in VP_PLOT_STEMS and not f.is_symlink() and f.is_file() and identify(f) == "figure":
                        remove.append(f)
            # anything else is the user's: kept

    visit(path, True)
    return remove


def check_run_entries(path: Path) -> None:
    """Refuse (one line) to replace the run directory ``path`` when an entry that would be kept sits where
    the new run writes (``run_dir_removals``)."""
    run_dir_removals(path)


def check_new_run_dir(out: Path, overwrite: bool = False) -> bool:
    """Refuse an ``out`` that is a file, already holds a run, or is a directory with other files in it
    (an empty directory, or one holding only temporary files of killed runs, is fine). With ``overwrite``
    a directory holding a run is accepted unless a file of the user's sits where the new run writes
    (``replace_run_dir`` then removes vp-train's own files and keeps the rest);
    return whether it must be replaced. The messages name ``out`` relative to the working directory."""
    from .provenance import redact_path

    shown = redact_path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"out {shown}: exists and is not a directory; it is never replaced, also with overwrite; "
                          "choose another out", key="out")
    if out.is_dir() and holds_run(out):
        if not overwrite:
            raise OutputError(
                f"out {shown}: already holds a run; continue that run with resume = {shown}, choose another out, or "
                "use overwrite to replace it", key="out",
            )
        check_run_entries(out)
        return True
    if out.is_dir() and any(not (p.name.startswith(".") and p.name.endswith(".tmp")) for p in out.iterdir()):
        raise OutputError(
            f"out {shown}: a directory that is not empty and holds no run; it is never replaced, also with "
            "overwrite; give a new or empty directory as out", key="out",
        )
    return False


def replace_run_dir(path: Path) -> None:
    """Remove from the run directory ``path`` that ``overwrite`` replaces what vp-train (and vp-plot's
    default figures) wrote there (``run_dir_removals``, checked again), keeping everything else, and
    the folders (``member_*``, ``best``, ``figures``) that this left empty; call it once the new run's
    set-up has succeeded."""
    removals = run_dir_removals(path)
    for p in removals:
        p.unlink(missing_ok=True)
    for d in sorted((p for p in path.iterdir() if not p.is_symlink() and p.is_dir()
                     and (p.name.startswith("member_") or p.name in RUN_DIRS)), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()  # only if nothing of the user's is left in it


# --------------------------------------------------------------------------- one writer per output

_held: dict[Path, list] = {}  # lock path -> [fd, depth]: locks this process holds (re-entrant)


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of the output ``path``: ``<output>.lock`` beside it (links resolved)."""
    real = Path(path).resolve()
    return real.with_name(real.name + ".lock")


def _read_owner(fd: int) -> tuple[int | None, str]:
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace")
    except OSError:
        return None, ""
    first, _, rest = text.partition("\n")
    return (int(first) if first.strip().isdigit() else None), rest.strip()


def _who(pid: int | None, what: str) -> str:
    if pid is None:
        return "another process"
    return f"process {pid}" + (f" ({what})" if what else "")


def _program() -> str:
    """This process as a user knows it: ``vp-gen`` (also under ``python -m vpintegrator.cli.gen``), else
    the script's name."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    if argv0.parent.name == "cli" and argv0.suffix == ".py":
        return f"vp-{argv0.stem}"
    return argv0.name[:80]


def _busy(path: Path, key: str | None, pid: int | None, what: str) -> OutputError:
    return OutputError(
        f"{_label(key, path)} is being written by {_who(pid, what)}, which holds {lock_path(path)}; wait for it "
        f"to finish, or give another path", key=key)


#: what a lock file of this package holds: the writer's process id and its program, one line each
_LOCK_TEXT = re.compile(rb"\A(?:\d{1,10}\n[^\n]{0,200}\n?)?\Z")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_lock(lock: Path, path: Path, key: str | None, flags: int) -> int:
    """``os.open(lock, flags)`` never through a symbolic link, and only a regular file holding nothing or
    a lock of this package; anything else is a one-line ``OutputError`` (and is left as it is)."""
    try:
        fd = os.open(lock, flags | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), 0o644)  # (a FIFO: no wait)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.EEXIST and lock.is_symlink()) or lock.is_symlink():
            raise OutputError(
                f"{_label(key, path)}: its lock file {lock} is a symbolic link (to {os.readlink(lock)}); locks never "
                "follow links: remove the link, or give another path", key=key) from None
        if err.errno == errno.EISDIR:
            raise OutputError(
                f"{_label(key, path)}: {lock} is not a regular file (not a lock file of vpintegrator), so it is neither "
                "used nor removed: move it away, or give another path", key=key) from None
        raise
    try:
        st = os.fstat(fd)
        head = os.pread(fd, 512, 0) if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode) or not _LOCK_TEXT.match(head):
        os.close(fd)
        what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "holds something else than a lock"
        raise OutputError(
            f"{_label(key, path)}: {lock} {what} (not a lock file of vpintegrator), so it is neither used nor "
            "removed: move it away, or give another path", key=key)
    return fd


def _took_over(lock: Path, pid: int | None, what: str) -> None:
    logging.getLogger(__name__).warning("took over %s, left by %s, which no longer runs", lock, _who(pid, what))


def _acquire_flock(lock: Path, path: Path, key: str | None) -> int:
    while True:
        fd = _open_lock(lock, path, key, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            pid, what = _read_owner(fd)
            os.close(fd)
            raise _busy(path, key, pid, what) from None
        try:  # the file may have been removed (and made anew) by the writer we waited for: lock the current one
            same = os.path.samestat(os.fstat(fd), os.lstat(lock))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _acquire_excl(lock: Path, path: Path, key: str | None) -> int:  # pragma: no cover - without fcntl
    for _ in range(100):
        try:
            return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                fd = _open_lock(lock, path, key, os.O_RDONLY)
            except FileNotFoundError:
                continue
            pid, what = _read_owner(fd)
            os.close(fd)
            if pid is not None and pid_alive(pid):
                raise _busy(path, key, pid, what) from None
            _took_over(lock, pid, what)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
    raise _busy(path, key, None, "")


@contextlib.contextmanager
def output_lock(path: str | os.PathLike[str], *, key: str | None = "out") -> Iterator[Path]:
    """Hold the exclusive lock of the output ``path`` for the block (see the module docstring).

    Yields the lock file's path. A second writer (another process) gets a one-line ``OutputError``
    naming the process that holds it; the same process may take it again (re-entrant).
    """
    path = Path(path)
    lock = lock_path(path)
    if lock in _held:
        _held[lock][1] += 1
        try:
            yield lock
        finally:
            _held[lock][1] -= 1
        return
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]  # folders to remove again if empty
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire_flock(lock, path, key) if fcntl is not None else _acquire_excl(lock, path, key)
    except BaseException as err:
        _remove_empty(made)
        if not isinstance(err, OSError) or isinstance(err, OutputError):
            raise
        raise OutputError(
            f"{_label(key, path)}: cannot create the lock file {lock} ({err.strerror or err}); give an output in a "
            "folder you can write", key=key) from None
    pid, what = _read_owner(fd)
    if pid is not None and pid != os.getpid():
        _took_over(lock, pid, what)
    try:  # the owner, for the messages of a second writer; a full disk leaves it empty (the flock still holds)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{_program()}\n".encode(), 0)
    except OSError:
        pass
    _held[lock] = [fd, 1]
    try:
        yield lock
    finally:
        del _held[lock]
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.lstat(lock)):  # only the file this process locked
                os.unlink(lock)  # while still locked: a waiting writer then finds the file gone and retries
        os.close(fd)
        _remove_empty(made)  # a refused or failed write leaves no new folders behind


def _remove_empty(folders) -> None:
    for p in folders:  # deepest first
        try:
            p.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def output_locks(paths, *, key: str | None = "out") -> Iterator[None]:
    """``output_lock`` on each of ``paths`` (in order), for the block."""
    with contextlib.ExitStack() as stack:
        for p in paths:
            stack.enter_context(output_lock(p, key=key))
        yield
