"""Where an output came from: the ``provenance`` record every file this package writes carries.

[`provenance_record`][vpintegrator.provenance.provenance_record] gives a JSON-ready dict::

    {"vpintegrator": "0.1.0",
     "git": {"commit": "4c69ec4...", "dirty": false} or null,   # run from a checkout only
     "versions": {"python": "3.11.9", "numpy": "...", "scipy": "...", "torch": "...", "h5py": "...",
                  "numba": "..." or null, "pysindy": ..., "scikit-learn": ...,
                  "blas": "openblas 0.3.31 SkylakeX" or null},              # the kernels this CPU runs
     "platform": "Linux-6.1-x86_64-with-glibc2.36",
     "command": ["vp-gen", "rigid_body_paper", ...],             # sys.argv, by name, paths relative
     "time": "2026-11-23T13:20:01Z",                              # UTC, when the record was made
     "inputs": [{"path": "data/train.h5", "sha256": "...", "bytes": 123456}]}

It is stored as the JSON key ``provenance`` of ``summary.json`` and of checkpoints (``last.pt``,
``best.pt``, [`save_model`][vpintegrator.models.save_model] files), and as the JSON-text attribute ``provenance``
([`provenance_attr`][vpintegrator.provenance.provenance_attr]) of HDF5 files. Making one is cheap: the git state is read once per process (one
``git`` call with a time limit; none outside a checkout, and no error when git is missing), versions are
read from the installed packages' metadata without importing them, and an input file is hashed once per
process for a given (path, size, modification time).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

from ._version import __version__

__all__ = ["provenance_record", "provenance_attr", "file_sha256", "parse_provenance", "redact_path", "command_line"]

#: the packages whose versions a record names (``python`` is added first); pysindy and scikit-learn fit the sindy and
#: delay-SINDy rows (their fits change with them), None where not installed
PACKAGES = ("numpy", "scipy", "torch", "h5py", "numba", "pysindy", "scikit-learn")
_ROOT = Path(__file__).resolve().parent.parent  # the checkout, when run from one
_GIT_TIMEOUT = 5.0  # seconds; a hung git gives "no git state", never a slow run
_CHUNK = 1 << 20

_log = logging.getLogger(__name__)
_cache: dict[str, Any] = {}
_hashes: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike[str]) -> str | None:
    """The sha256 (hex) of the file ``path``, streamed; None when it is not a readable file.

    Cached per process by (resolved path, size, modification time), so a big data file read by several
    steps of one run is hashed once; a file changed in between is hashed again.
    """
    try:
        p = Path(path).resolve()
        st = p.stat()
    except (OSError, RuntimeError, ValueError):
        return None
    if not p.is_file():
        return None
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        h = hashlib.sha256()
        try:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
        except OSError:
            return None
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def _version_of(name: str) -> str | None:
    mod = sys.modules.get(name)
    version = getattr(mod, "__version__", None) if mod is not None else None
    if isinstance(version, str):
        return str(version)  # a plain str: torch's is a subclass that torch.load(weights_only=True) refuses
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # not installed (numba is optional), or broken metadata
        return None


def _blas() -> str | None:
    """NumPy's BLAS as it runs here, ``"openblas 0.3.31 SkylakeX"``: its version and the kernels it chose for this CPU
    (threadpoolctl's ``architecture``); least squares through NumPy round differently on other kernels (the SINDy
    fits do not: ``vpintegrator.compiled.stlsq``). None before NumPy is loaded or without threadpoolctl."""
    if "numpy" not in sys.modules:
        return None
    try:
        from threadpoolctl import threadpool_info  # scikit-learn's dependency (the sindy extra)

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # not installed, or a library it cannot read
        return None
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in libs) or None


def _git_state(root: Path = _ROOT) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout at ``root``, or None (no checkout, no git, git failed)."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
            capture_output=True, text=True, timeout=_GIT_TIMEOUT, check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError) as err:
        _log.debug("no git state for %s: %s", root, err)
        return None
    if out.returncode != 0:
        _log.debug("no git state for %s: git status says %s", root, " ".join(out.stderr.split())[:200])
        return None
    commit, dirty = None, False
    for line in out.stdout.splitlines():
        if line.startswith("# branch.oid "):
            commit = line.split()[2]
        elif line and not line.startswith("#"):
            dirty = True
    if commit is None or commit == "(initial)":
        return None
    return {"commit": commit, "dirty": dirty}


def _static() -> dict[str, Any]:
    """The part of a record that does not change within a process (computed once)."""
    if "static" not in _cache:
        _cache["static"] = {
            "vpintegrator": __version__,
            "git": _git_state(),
            "versions": {"python": platform.python_version(), **{n: _version_of(n) for n in PACKAGES},
                         "blas": _blas()},
            "platform": platform.platform(),
        }
    return _cache["static"]


_PACKAGE = Path(__file__).resolve().parent
#: console scripts by the module that implements them (``python -m vpintegrator.cli.gen`` is ``vp-gen``)
_SCRIPTS = {"gen": "vp-gen", "train": "vp-train", "rollout": "vp-rollout", "plot": "vp-plot"}


def redact_path(path: str | os.PathLike[str], relative_to: str | os.PathLike[str] | None = None) -> str:
    """``path`` as an output records it, without the producing machine's absolute paths: a file of this
    package as ``vpintegrator/...``; with ``relative_to`` anything else relative to it; without, a file of
    the checkout it runs from (a shipped spec or config) relative to the checkout, anything else relative to
    the working directory, and a relative path as given."""
    text = os.fspath(path)
    if relative_to is None and not os.path.isabs(text):
        return text
    try:
        p = Path(text).resolve()
    except (OSError, RuntimeError, ValueError):
        return text
    roots = [(_PACKAGE, "vpintegrator")]
    if relative_to is None and ((_ROOT / ".git").exists() or (_ROOT / "pyproject.toml").exists()):
        roots.append((_ROOT, ""))  # a checkout (not site-packages): its shipped specs and configs
    for root, prefix in roots:
        if p == root or root in p.parents:
            rel = p.relative_to(root).as_posix()
            return f"{prefix}/{rel}" if prefix else rel
    try:
        return os.path.relpath(p, Path(relative_to if relative_to is not None else os.getcwd()).resolve())
    except (OSError, ValueError):  # another drive (Windows)
        return p.name


def _redact_arg(arg: str) -> str:
    """A command-line argument with an absolute path in it (``/a/b``, ``--out=/a/b``, ``KEY=/a/b``) redacted."""
    head, sep, tail = arg.rpartition("=")
    if sep and os.path.isabs(tail):
        return f"{head}={redact_path(tail)}"
    return redact_path(arg) if os.path.isabs(arg) else arg


def command_line(argv: list[str] | None = None) -> list[str]:
    """``sys.argv`` as a record holds it: the program by its name (``vp-train``, not the console script's
    path; ``python -m vpintegrator.cli.train`` also as ``vp-train``), absolute paths among the arguments
    made relative ([`redact_path`][vpintegrator.provenance.redact_path])."""
    argv = [str(a) for a in (sys.argv if argv is None else argv)]
    if not argv:
        return []
    prog = argv[0]
    p = Path(prog)
    if p.suffix == ".py" and p.parent.name == "cli" and p.stem in _SCRIPTS:
        name = _SCRIPTS[p.stem]
    elif p.name == "__main__.py" and p.parent.name:
        name = f"python -m {p.parent.name}"
    elif p.suffix == ".py" and p.parent.name == "studies" and p.parent.parent.name == "vpintegrator":
        name = f"python -m vpintegrator.studies.{p.stem}"
    elif os.path.isabs(prog):
        name = p.name  # a console script or a script elsewhere: its name
    else:
        name = prog  # as typed (e.g. scripts/reproduce_rigid_body.py)
    return [name, *(_redact_arg(a) for a in argv[1:])]


def _stored_path(path: str | os.PathLike, relative_to: str | os.PathLike | None) -> str:
    return redact_path(path, relative_to)


def provenance_record(inputs: Iterable[str | os.PathLike[str]] | None = None, *,
                      relative_to: str | os.PathLike[str] | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance of an output made now from the files ``inputs``.

    Parameters
    ----------
    inputs : iterable of path-like, optional
        The files the output was made from (data, model and config files). Each is listed with its
        sha256 and size (``null`` for one that is not a readable file, e.g. ``"pretrained:vpt"``).
    relative_to : path-like, optional
        Store the input paths relative to this directory (e.g. the run directory), not as given.
    **extra
        More JSON-ready keys for the record.

    Returns
    -------
    dict
        JSON-ready (strings, numbers, booleans, lists, dicts, None); see the module docstring.
    """
    static = _static()
    listed = []
    for p in inputs or ():
        if p is None:
            continue
        sha = file_sha256(p)
        try:
            size = os.path.getsize(p) if sha is not None else None
        except OSError:
            size = None
        listed.append({"path": _stored_path(p, relative_to) if sha is not None else _redact_arg(os.fspath(p)),
                       "sha256": sha, "bytes": size})
    return {
        "vpintegrator": static["vpintegrator"],
        "git": None if static["git"] is None else dict(static["git"]),
        "versions": dict(static["versions"]),
        "platform": static["platform"],
        "command": command_line(),
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inputs": listed,
        **extra,
    }


def provenance_attr(inputs: Iterable[str | os.PathLike[str]] | None = None, **kwargs: Any) -> str:
    """[`provenance_record`][vpintegrator.provenance.provenance_record] as JSON text: the value of an HDF5 attribute ``provenance``."""
    return json.dumps(provenance_record(inputs, **kwargs), sort_keys=True)


def parse_provenance(value: Any) -> dict[str, Any] | None:
    """A stored ``provenance`` value (JSON text, bytes or a dict) as a dict; None when absent or unreadable
    (files written before records existed have none)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
