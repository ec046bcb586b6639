"""Trajectories in HDF5 files (schema v2, documented in ``datasets/README.md``).

Layout: ``/t`` (n_states,) float64, ``/y`` (n_traj, n_states, dim) float64, metadata as root attributes
(``schema_version``, ``system``, ``system_class`` (user-defined systems), ``dim``, ``dt``, ``method``,
``rtol``, ``atol``, ``seed``, ``n_traj``, ``n_states``, ``n_steps`` (= n_states − 1), ``t_end``,
``invariant_names``, ``param_<name>`` for each system parameter,
``vpintegrator_version``, ``provenance`` (JSON text: [`vpintegrator.provenance`][vpintegrator.provenance]; read back as a dict),
and whatever else the producer recorded). ``/y`` is chunked along
trajectories and gzip-compressed. Every write is atomic: a temporary file beside the target, renamed onto
it only when complete, so an interrupted write leaves no partial file and an earlier file intact.

Schema v1 files (whose ``n_steps`` counted states) are still read; their metadata comes back in the v2
meaning.

Here too, each a part of the one file format: the attribute codec of both file kinds (trajectory files and
rollout files, ``vpintegrator.data.rollouts``: scalars and flat lists natively, anything else as JSON text
listed in ``json_keys``; a System under ``system`` flattened, here only, into ``system``/``system_class``/
``param_<name>``), the checks at the file boundary (output paths that cannot be written, time grids and
states that are not finite: one-line errors before work starts or when bad data would enter), and the
reader (open, validate the schema, select rows and steps), which ``vpintegrator.data.shards`` uses too.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import h5py
import numpy as np

from .._io import atomic_path, check_h5_write, h5_writing
from .._outputs import check_output, output_lock
from .._version import __version__
from ..errors import VPIntegratorError
from ..jobs.shards import SHARD_KEYS, Shard, ShardKind, collect, is_shard_set
from ..provenance import parse_provenance, provenance_record
from ..systems.registry import PARAM_PREFIX, System, system_meta
from .trajectories import DIMENSIONLESS, Trajectories, state_names, state_units  # noqa: F401

__all__ = ["SCHEMA_VERSION", "TrajectoryWriter", "read_metadata", "read_trajectories", "write_trajectories",
           "DIMENSIONLESS", "label_rollout_group", "label_rollout_root", "label_trajectory_file", "state_names",
           "state_units"]


# --- the attribute codec of both file kinds -----------------------------------------------------------------

# Attribute listing the keys whose values were stored as JSON strings (dicts, None, nested lists).
_JSON_KEYS_ATTR = "json_keys"


def _is_native(value: Any) -> bool:
    """Whether an attribute value round-trips through HDF5 natively (scalar or flat list)."""
    if isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating)):
        return True
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.dtype == object:
            return False
        return arr.dtype.kind in "biufU" and (arr.size > 0 or isinstance(value, np.ndarray))
    return False


def _to_attr(value: Any) -> Any:
    if isinstance(value, str):  # str subclasses (TorchVersion, np.str_) would become fixed-width numpy
        return str(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.dtype.kind == "U":
            return np.array([str(v) for v in arr], dtype=h5py.string_dtype())
        return arr
    return value


def _from_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_from_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _meta_to_attrs(meta: dict[str, Any]) -> dict[str, Any]:
    """Flatten ``meta`` into HDF5 attributes: a [`System`][vpintegrator.systems.System] object under ``system`` becomes
    ``system``/``system_class``/``param_<name>`` (the only place it is flattened); odd values -> JSON."""
    attrs: dict[str, Any] = {}
    json_keys: list[str] = []
    if isinstance(meta.get("system"), System):
        meta = {**meta, **system_meta(meta["system"])}
    for key, value in meta.items():
        if key == _JSON_KEYS_ATTR:
            continue
        attrs[key] = value
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key == "invariant_names":  # always a list of str, even when empty
            out[key] = np.array([str(v) for v in value], dtype=h5py.string_dtype())
        elif _is_native(value):
            out[key] = _to_attr(value)
        else:
            try:
                out[key] = json.dumps(value if not isinstance(value, np.ndarray) else value.tolist())
            except TypeError:
                raise VPIntegratorError(
                    f"metadata key {key!r} has a value of type {type(value).__name__} that cannot be stored "
                    "in HDF5 attributes; use str, bool, int, float, lists of these, or dicts of them"
                ) from None
            json_keys.append(key)
    out[_JSON_KEYS_ATTR] = np.array(json_keys, dtype=h5py.string_dtype())
    return out


def _attrs_to_meta(attrs: h5py.AttributeManager) -> dict[str, Any]:
    """Attributes -> meta (flat, like ``integrate``'s: system parameters stay ``param_<name>``)."""
    raw = {key: _from_attr(attrs[key]) for key in attrs.keys()}
    json_keys = set(raw.pop(_JSON_KEYS_ATTR, []) or [])
    meta = {key: json.loads(value) if key in json_keys else value for key, value in raw.items()}
    if isinstance(meta.get("provenance"), str):  # JSON text written without json_keys (provenance_attr)
        meta["provenance"] = parse_provenance(meta["provenance"])
    return meta


def write_attrs(obj, meta: dict[str, Any], skip_none: bool = False) -> None:
    """Store ``meta`` as HDF5 attributes of ``obj`` (a file, group or dataset) by ``_meta_to_attrs``,
    beside those it has (``json_keys``, written where there are any, lists the JSON-stored keys of both); ``skip_none``: keys whose
    value is None are left out (absent rather than stored as JSON null)."""
    if skip_none:
        meta = {key: value for key, value in meta.items() if value is not None}
    attrs = _meta_to_attrs(meta)
    new_json = [str(k) for k in _from_attr(attrs.pop(_JSON_KEYS_ATTR))]
    old_json = [k for k in _from_attr(obj.attrs.get(_JSON_KEYS_ATTR, np.array([]))) if k not in attrs]
    for key, value in attrs.items():
        obj.attrs[key] = value
    if old_json or new_json:  # written only where there are any
        obj.attrs[_JSON_KEYS_ATTR] = np.array(old_json + new_json, dtype=h5py.string_dtype())

# --- checks at the file boundary ----------------------------------------------------------------------------

#: states checked for non-finite values at a time, in bytes (bounds the temporary boolean array)
CHECK_BYTES = 8 * 2**20


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_path(path: str | os.PathLike[str], key: str | None = "out") -> Path:
    """Refuse an output file path that cannot be written, before any work starts.

    A one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] (carrying ``key``) when ``path`` is a directory, when a
    folder on the way is a file, or when the folder it would go into is not writable. Creates nothing.
    Returns the nearest existing folder (where the file, or the folders leading to it, will be created).
    """
    label = f"{key} {path}" if key else str(path)
    p = Path(path)
    if not os.fspath(path):
        raise VPIntegratorError(f"{label}: empty output path; give a file path such as data.h5", key=key)
    if p.is_dir():
        raise VPIntegratorError(
            f"{label} is a directory; give a file path, e.g. {p / 'data.h5'}", key=key
        )
    folder = _nearest_existing(p.parent)
    if not folder.is_dir():
        raise VPIntegratorError(
            f"{label}: {folder} is a file, not a directory; give a path in an existing or new folder", key=key
        )
    reason = "permission denied" if not os.access(folder, os.W_OK | os.X_OK) else _probe_write(folder)
    if reason:
        raise VPIntegratorError(
            f"{label}: cannot write in folder {folder} ({reason}); give a path in a folder you can write", key=key
        )
    return folder


def _probe_write(folder: Path) -> str:
    """"" if a file can be created in ``folder`` (an unnamed temporary file, gone when closed), else why."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return ""


def time_grid_problem(t: np.ndarray, offset: int = 0) -> str:
    """Why ``t`` is not a finite, strictly increasing time grid ("" when it is)."""
    finite = np.isfinite(t)
    if not finite.all():
        i = int(np.argmin(finite))
        return f"holds {_nonfinite_name(t[i])} at [{i + offset}]"
    if t.size > 1:
        steps = np.diff(t)
        if not (steps > 0).all():
            i = int(np.argmin(steps > 0)) + 1
            return f"is not strictly increasing at index {i + offset} ({float(t[i - 1])!r} then {float(t[i])!r})"
    return ""


def _nonfinite_name(value: float) -> str:
    return "NaN" if np.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def check_finite_t(path: Path, t: np.ndarray) -> None:
    bad = time_grid_problem(t)
    if bad:
        raise VPIntegratorError(
            f"{path}: dataset '/t' {bad}; the sample times must be finite and strictly increasing; "
            "regenerate the file"
        )


def check_finite_y(path: Path, y: np.ndarray, traj_idx: Any, steps_idx: Any, n_traj: int, n_states: int) -> None:
    """Refuse non-finite values in the states read from ``path``, block by block of trajectories;
    the message gives the first bad index in the file's own coordinates."""
    if y.size == 0:
        return
    per_traj = max(1, y[0].size)
    block = max(1, CHECK_BYTES // per_traj)
    for start in range(0, y.shape[0], block):
        part = y[start : start + block]
        if np.isfinite(part).all():
            continue
        i, k, d = (int(v) for v in np.unravel_index(int(np.argmin(np.isfinite(part))), part.shape))
        i += start
        file_i = int(np.atleast_1d(np.arange(n_traj)[traj_idx])[i])
        file_k = int(np.atleast_1d(np.arange(n_states)[steps_idx])[k]) if steps_idx is not None else k
        raise VPIntegratorError(
            f"{path}: dataset '/y' holds {_nonfinite_name(y[i, k, d])} at [{file_i}, {file_k}, {d}] "
            f"(trajectory {file_i}, state {file_k}); regenerate it, or pass allow_nonfinite=True to inspect it"
        )

# --- reading trajectory files -------------------------------------------------------------------------------

SCHEMA_VERSION = 2
#: the per-trajectory parameters of a parametric data set: (n_traj, p) float64, attribute ``names``
PARAMS_DATASET = "params"
#: schema versions this module reads (v1: ``n_steps`` counted states)
READABLE_VERSIONS = (1, 2)
_HINT = "was it written by vp-gen (vpintegrator.write_trajectories)?"


def _open(path: Path) -> h5py.File:
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    if path.is_dir():
        raise VPIntegratorError(f"{path}: is a directory; expected an HDF5 file written by vp-gen")
    if not path.is_file():  # a FIFO would wait forever for a writer
        raise VPIntegratorError(f"{path}: is not a regular file (a FIFO, socket or device); expected an HDF5 file "
                                "written by vp-gen")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        reason = " ".join(str(err).split())
        raise VPIntegratorError(f"{path}: not a readable HDF5 file ({reason}); {_HINT}") from None


#: root attributes that only vpintegrator writes: a file with none of them is an external one
OWN_ATTRS = ("schema_version", "system", "system_class")
_EXTERNAL = ("a file without vpintegrator's attributes (no 'schema_version') is read as trajectories from "
             "elsewhere: it needs '/t' (n_states,) and '/y' (n_traj, n_states, dim), see the docs page 'Bringing "
             "your own trajectories'")


def is_external(f: h5py.File) -> bool:
    """Whether an open trajectory file was written outside vpintegrator: none of ``OWN_ATTRS`` at its root (a
    file of ``/t`` and ``/y`` only, optionally ``/params``, from h5py, xarray or another simulator)."""
    return not any(key in f.attrs for key in OWN_ATTRS)


def file_meta(path: Path, f: h5py.File) -> dict[str, Any]:
    """The metadata of an open, validated trajectory file: its root attributes, or for an external file
    (``is_external``) what its arrays say (``dim``, ``dt`` and ``t0`` from ``/t``, no invariants, ``external``
    True, ``source`` the path, and no ``system``); an external file's root attributes are not read."""
    if not is_external(f):
        return _attrs_to_meta(f.attrs)
    t, eps = read_time(path, f)
    dt = float((t[-1] - t[0]) / (t.size - 1))
    if eps > np.finfo(np.float64).eps:  # a float32 axis: its step as written (0.2, not 0.20000000298)
        dt = float(str(np.float32(dt)))
    meta = {"dim": int(f["y"].shape[2]), "dt": dt, "t0": float(t[0]), "t_end": float(t[-1]), "invariant_names": [],
            "external": True, "source": str(path)}
    key = time_key(f)
    if key != "t":
        meta["time_name"] = key
    names = file_state_names(f)
    if names:
        meta["state_names"] = list(names)
    return meta


#: the names the time axis of a file from elsewhere may have: vpintegrator's ``t``, or ``time`` (the CF
#: convention, what xarray users write); the first one present is read
TIME_NAMES = ("t", "time")
#: seconds per unit of a CF time axis ``"<unit> since <date>"`` (months and years have no fixed length: refused)
_CF_SECONDS = {"days": 86400.0, "day": 86400.0, "d": 86400.0, "hours": 3600.0, "hour": 3600.0, "hr": 3600.0,
               "h": 3600.0, "minutes": 60.0, "minute": 60.0, "min": 60.0, "seconds": 1.0, "second": 1.0, "sec": 1.0,
               "s": 1.0, "milliseconds": 1e-3, "millisecond": 1e-3, "ms": 1e-3, "microseconds": 1e-6,
               "microsecond": 1e-6, "us": 1e-6, "nanoseconds": 1e-9, "nanosecond": 1e-9, "ns": 1e-9}


def time_key(f: h5py.File) -> str:
    """The dataset of an open trajectory file's time axis: ``t``, or for a file from elsewhere (``is_external``)
    the first of ``TIME_NAMES`` it holds (``time``: the CF name xarray users write)."""
    if is_external(f):
        return next((name for name in TIME_NAMES if name in f), "t")
    return "t"


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def read_time(path: Path, f: h5py.File) -> tuple[np.ndarray, float]:
    """The sample times of an open trajectory file as float64, with the relative precision they were written
    at (float32's epsilon for a float32 axis, 0 for integers): a datetime64/timedelta64 axis, or a CF date
    axis (integers with ``units = "<unit> since <date>"``, as xarray writes dates), in seconds (since the
    date); a date axis in months or years (no fixed length) or an axis of strings is one line naming the file
    and the dataset."""
    key = time_key(f)
    ds = f[key]
    raw = np.asarray(_read_damaged(path, key, lambda: ds[()]))
    fix = ("write the sample times as numbers (seconds from the start, or CF '<unit> since <date>' integers)")
    if raw.dtype.kind in ("M", "m"):  # numpy datetimes (h5py's opaque datetime64): seconds since 1970; NaT is NaN
        ns = raw.astype(f"{'datetime64' if raw.dtype.kind == 'M' else 'timedelta64'}[ns]")
        return np.where(np.isnat(ns), np.nan, ns.astype(np.int64).astype(np.float64) * 1e-9), 0.0
    if raw.dtype.kind not in ("f", "i", "u"):
        raise VPIntegratorError(f"{path}: dataset '/{key}' has dtype {raw.dtype} (not numbers: dates as text?); {fix}")
    units = _text(ds.attrs.get("units")) if is_external(f) else None
    if isinstance(units, str) and " since " in units:
        unit = units.split(" since ", 1)[0].strip().lower()
        if unit not in _CF_SECONDS:
            raise VPIntegratorError(
                f"{path}: dataset '/{key}' is a date axis in {unit!r} (units {units!r}), which have no fixed length "
                f"in seconds; {fix}")
        return raw.astype(np.float64) * _CF_SECONDS[unit], 0.0
    eps = float(np.finfo(raw.dtype).eps) if raw.dtype.kind == "f" else 0.0
    return raw.astype(np.float64), eps


def file_state_names(f: h5py.File) -> tuple[str, ...]:
    """The names of the state components an open trajectory file gives: its ``/state`` axis (dim distinct
    non-empty strings, as vpintegrator and xarray write it), else () (then ``x0 .. x<dim-1>`` or the system's)."""
    ds = f.get("state")
    y = f.get("y")
    if not isinstance(ds, h5py.Dataset) or not isinstance(y, h5py.Dataset) or ds.shape != (y.shape[-1],) \
            or ds.dtype.kind not in ("S", "O", "U"):
        return ()
    try:
        names = tuple(str(_text(v)).strip() for v in ds[()])
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return ()
    if any(not n for n in names) or len(set(names)) != len(names):
        return ()
    return names


def component_names(path: str | os.PathLike[str], system: Any = None) -> tuple[str, ...]:
    """The names of the state components of the data file ``path``: its ``/state`` axis (``file_state_names``),
    else the ``state_names`` that ``system``'s class declares, else () (the caller's own ``x0 ..``)."""
    try:
        with h5py.File(path, "r") as f:
            names = file_state_names(f)
            dim = int(f["y"].shape[-1]) if isinstance(f.get("y"), h5py.Dataset) else None
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        names, dim = (), None
    if names:
        return names
    from .trajectories import _system_class

    declared = tuple(getattr(_system_class(system), "state_names", ()) or ())
    n = dim if dim is not None else getattr(system, "dim", None)
    return declared if declared and len(declared) == n and all(isinstance(x, str) and x for x in declared) else ()


def _validate_external(path: Path, f: h5py.File) -> tuple[int, int, int]:
    """``_validate`` of an external file, every dataset it reads checked for dtype, shape, meaning and
    finiteness: the time axis (``/t`` or ``/time``, ``time_key``) and ``/y`` as datasets of the right rank and
    dtype, at least one trajectory, two states and one component, ``/y``'s axes in the order (trajectory, time,
    state) where it names them (dimension scales), a finite, increasing and regular time axis (a date axis in
    seconds; float32 at float32's precision), and ``/params`` (when there) finite numbers of the right shape."""
    tk = time_key(f)
    for key in (tk, "y"):
        if key not in f or not isinstance(f[key], h5py.Dataset):
            what = "missing dataset" if key not in f else "not a dataset:"
            also = " (or '/time')" if key == "t" else ""
            raise VPIntegratorError(f"{path}: {what} '/{key}'{also}; {_EXTERNAL}")
    t, y = f[tk], f["y"]
    if y.ndim != 3:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape} (rank {y.ndim}); expected (n_traj, n_states, "
                                "dim) (one trajectory: add a leading axis of 1; states of one component: a trailing one)")
    _check_axes(path, y, tk)
    if t.ndim != 1 or t.shape[0] != y.shape[1]:
        raise VPIntegratorError(
            f"{path}: dataset '/{tk}' has shape {t.shape}; expected (n_states,) = ({y.shape[1]},) to match '/y' {y.shape}")
    if y.shape[1] < 2:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape}: one state per trajectory; a step needs "
                                "at least two (n_states >= 2)")
    if y.shape[0] < 1 or y.shape[2] < 1:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape}: no trajectory or no state component; "
                                "expected (n_traj >= 1, n_states, dim >= 1)")
    if y.dtype.kind != "f":
        raise VPIntegratorError(f"{path}: dataset '/y' has dtype {y.dtype}; expected float64 (float32 is read as float64)")
    if PARAMS_DATASET in f:
        _param_names(path, f, y.shape[0])
    t_all, _ = read_time(path, f)
    bad = time_grid_problem(t_all)
    if bad:
        raise VPIntegratorError(f"{path}: dataset '/{tk}' {bad}; the sample times must be finite and strictly "
                                "increasing; regenerate the file")
    _check_grid(path, f)
    return y.shape


def _check_axes(path: Path, y: h5py.Dataset, tk: str) -> None:
    """Where ``/y`` names its axes by dimension scales (netCDF, xarray), the time axis must be its second:
    a file of y(time, trajectory, state) would otherwise be read with its axes swapped."""
    try:
        scales = [[Path(s.name).name for s in y.dims[d].values()] for d in range(y.ndim)]
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return
    at = [d for d, names in enumerate(scales) if tk in names]
    if at and at[0] != 1:
        names = [ns[0] if ns else f"axis{d}" for d, ns in enumerate(scales)]
        others = [n for d, n in enumerate(names) if d != at[0]]
        want = ", ".join(repr(n) for n in [others[0], tk, *others[1:]])
        raise VPIntegratorError(
            f"{path}: dataset '/y' has its axes in the order ({', '.join(names)}): the time axis '{tk}' is axis "
            f"{at[0]}, expected axis 1 of (trajectory, time, state); transpose it (xarray: ds.transpose({want}))")


def _validate(path: Path, f: h5py.File) -> tuple[int, int, int]:
    """Check schema version, ``/t``, ``/y`` and ``dim``; return (n_traj, n_states, dim). An external file
    (``is_external``) needs only ``/t`` and ``/y``."""
    if is_external(f):
        return _validate_external(path, f)
    version = f.attrs.get("schema_version")
    if version is None:
        raise VPIntegratorError(f"{path}: missing root attribute 'schema_version' (expected {SCHEMA_VERSION}); {_HINT}")
    version = _from_attr(version)
    if version not in READABLE_VERSIONS:
        raise VPIntegratorError(
            f"{path}: attribute 'schema_version' is {version!r}, this vpintegrator reads schema "
            f"{' and '.join(map(str, READABLE_VERSIONS))}; regenerate the file with this version's vp-gen"
        )
    for key, expected in (("t", "(n_states,) float64"), ("y", "(n_traj, n_states, dim) float64")):
        link = f.get(key, getlink=True)
        if link is not None:
            try:
                f[key]
            except (KeyError, OSError) as err:  # a dangling soft link, a missing external file, a damaged header
                kind = {h5py.SoftLink: "a soft link", h5py.ExternalLink: "an external link"}.get(type(link), "an object")
                raise VPIntegratorError(
                    f"{path}: '/{key}' is {kind} that cannot be opened ({' '.join(str(err).split())}); expected a "
                    f"dataset {expected}; {_HINT}") from None
        if key not in f or not isinstance(f[key], h5py.Dataset):
            raise VPIntegratorError(f"{path}: missing dataset '/{key}' (expected {expected}); {_HINT}")
    t, y = f["t"], f["y"]
    if y.ndim != 3:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape}; expected (n_traj, n_states, dim)")
    if t.shape != (y.shape[1],):
        raise VPIntegratorError(
            f"{path}: dataset '/t' has shape {t.shape}; expected (n_states,) = ({y.shape[1]},) to match '/y' {y.shape}"
        )
    for key, ds in (("t", t), ("y", y)):
        if ds.dtype.kind != "f":
            raise VPIntegratorError(f"{path}: dataset '/{key}' has dtype {ds.dtype}; expected float64")
    dim = f.attrs.get("dim")
    if dim is None:
        raise VPIntegratorError(f"{path}: missing root attribute 'dim' (expected {y.shape[2]}); {_HINT}")
    if _from_attr(dim) != y.shape[2]:
        raise VPIntegratorError(
            f"{path}: attribute 'dim' is {_from_attr(dim)!r} but dataset '/y' has shape {y.shape} (dim {y.shape[2]})"
        )
    if PARAMS_DATASET in f:
        _param_names(path, f, y.shape[0])
    _check_grid(path, f)
    return y.shape


def _param_names(path: Path, f: h5py.File, n_traj: int, check_values: bool = True) -> tuple[str, ...]:
    """The columns of ``/params`` (checked: shape (n_traj, p) float, attribute ``names`` of p distinct strings,
    and, with ``check_values``, every value finite)."""
    ds = f[PARAMS_DATASET]
    names = ds.attrs.get("names") if isinstance(ds, h5py.Dataset) else None
    names = [] if names is None else _from_attr(names)
    if not names and is_external(f) and isinstance(ds, h5py.Dataset) and ds.ndim == 2:
        names = [f"params[{i}]" for i in range(ds.shape[1])]  # an external file may leave its columns unnamed
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 2 or ds.shape[0] != n_traj or ds.dtype.kind != "f" \
            or not isinstance(names, list) or len(names) != ds.shape[1]:
        shape = getattr(ds, "shape", None)
        raise VPIntegratorError(
            f"{path}: dataset '/params' (shape {shape}) must be (n_traj, p) = ({n_traj}, p) float64 with an attribute "
            f"'names' of p column names; got names {names!r}; {_HINT}"
        )
    seen = [str(n) for n in names]
    repeated = next((n for i, n in enumerate(seen) if n in seen[:i]), None)
    if repeated is not None:  # every reader would take one of the columns for the other without a word
        raise VPIntegratorError(
            f"{path}: dataset '/params' names the column {repeated!r} twice (names {seen!r}); each column must be named "
            f"once: rename or drop the repeated column; {_HINT}"
        )
    if check_values:
        _check_finite_params(path, ds, seen)
    return tuple(seen)


def _check_finite_params(path: Path, ds: h5py.Dataset, names: list[str]) -> None:
    """Refuse a NaN or Inf parameter (a system built from it would integrate NaN, a model condition on it),
    naming the first one's row and column; read block by block of rows."""
    rows = max(1, CHECK_BYTES // max(1, 8 * ds.shape[1]))
    for start in range(0, ds.shape[0], rows):
        part = np.asarray(_read_damaged(path, PARAMS_DATASET, lambda: ds[start:start + rows]), dtype=np.float64)
        if part.size and not np.isfinite(part).all():
            i, j = (int(v) for v in np.unravel_index(int(np.argmin(np.isfinite(part))), part.shape))
            raise VPIntegratorError(
                f"{path}: dataset '/params' holds {_nonfinite_name(part[i, j])} at [{start + i}, {j}] (trajectory "
                f"{start + i}, column {names[j]!r}); every parameter must be a finite number: fix or drop that row")


def _check_grid(path: Path, f: h5py.File) -> None:
    """The root attribute ``dt`` a finite number > 0, ``/t`` a regular grid (to 1e-9 of its step) and its
    step ``dt``: windows and horizons are counted in steps of ``dt``, so an irregular ``/t`` or one that
    disagrees with ``dt`` would give wrong horizons silently. Non-finite or decreasing ``/t`` is reported
    by the reader with its index."""
    raw = f.attrs.get("dt")
    dt = None
    if raw is not None:
        try:
            dt = float(_from_attr(raw))
        except (TypeError, ValueError):
            dt = math.nan
        if not (math.isfinite(dt) and dt > 0):
            raise VPIntegratorError(
                f"{path}: root attribute 'dt' is {_from_attr(raw)!r}; expected a finite number > 0 (the step of "
                "'/t'); regenerate the file with vp-gen")
    t, eps = read_time(path, f)
    if t.size < 2 or not np.all(np.isfinite(t)):
        return
    steps = np.diff(t)
    if not np.all(steps > 0):
        return
    step = float(np.median(steps))
    # to 1e-9 of the step, or to the precision the axis was written at (float32: steps 0.200000003 and
    # 0.2000000477 are one step of 0.2)
    tol = max(1e-9 * max(step, float(np.max(np.abs(t))) * 1e-6), 4 * eps * float(np.max(np.abs(t))))
    bad = np.flatnonzero(np.abs(steps - step) > tol)
    if bad.size:
        k = int(bad[0])
        key = time_key(f)
        written = f" (written as {f[key].dtype}, compared to its precision)" if eps > 1e-15 else ""
        raise VPIntegratorError(
            f"{path}: dataset '/{key}' is not a regular grid: {key}[{k + 1}] - {key}[{k}] = {steps[k]:.10g}, the other "
            f"steps {step:.10g}{written}; vpintegrator needs a fixed step (write the states at t0 + k dt)")
    if dt is not None and abs(dt - step) > tol:
        raise VPIntegratorError(
            f"{path}: root attribute 'dt' is {dt:g} but dataset '/t' has step {step:.10g}; they must agree "
            "(which one is right decides every horizon): regenerate the file with vp-gen")


def _index(index: Any, n: int, what: str, path: Path) -> np.ndarray | slice:
    """Normalise a ``traj``/``steps`` selection to a slice or a (0-d or 1-d) array of indices >= 0."""
    if index is None:
        return slice(None)
    if isinstance(index, slice):
        for part in ("start", "stop", "step"):
            v = getattr(index, part)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise VPIntegratorError(f"{path}: {what} slice {part} must be an integer or None; got {v!r}")
        if index.step is not None and index.step < 1:
            raise VPIntegratorError(f"{path}: {what} slice step must be an integer >= 1 (every step-th entry, in order); "
                                    f"got {index.step}; give an index array for another order")
        return index
    arr = np.asarray(index)
    if arr.size == 0 and arr.ndim == 1:
        arr = arr.astype(np.intp)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise VPIntegratorError(f"{path}: boolean {what} selection must have shape ({n},); got {arr.shape}")
        return np.flatnonzero(arr)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise VPIntegratorError(f"{path}: {what} must be None, an int, a slice or a 1-d int array; got {index!r}")
    if arr.size and (arr.min() < -n or arr.max() >= n):
        raise VPIntegratorError(f"{path}: {what} index out of range for {n} {what} entries; got {index!r}")
    return np.where(arr < 0, arr + n, arr)


def _read_rows(ds: h5py.Dataset, rows: np.ndarray | slice) -> np.ndarray:
    """``ds[rows]`` along axis 0 for any int array (h5py wants increasing unique indices)."""
    if isinstance(rows, slice):
        return ds[rows]
    flat = np.atleast_1d(rows)
    if flat.size == 0:
        return np.empty((0, *ds.shape[1:]), dtype=ds.dtype)
    uniq, inverse = np.unique(flat, return_inverse=True)
    out = ds[uniq][inverse]
    return out[0] if np.ndim(rows) == 0 else out


def _read_damaged(path: Path, name: str, read: Any) -> Any:
    """``read()`` of dataset ``/name``; h5py's error on a damaged chunk or header as one line naming the file
    and the dataset."""
    try:
        return read()
    except (OSError, KeyError, RuntimeError) as err:
        raise VPIntegratorError(
            f"{path}: cannot read dataset '/{name}' ({' '.join(str(err).split())}): the file is damaged; "
            "regenerate it with vp-gen") from None


def _read_one(path: Path, traj: Any, steps: Any, allow_nonfinite: bool = False) -> Trajectories:
    with _open(path) as f:
        n_traj, n_states, dim = _validate(path, f)
        meta = file_meta(path, f)
        steps_idx = _index(steps, n_states, "steps", path)
        traj_idx = _index(traj, n_traj, "traj", path)
        t_all, _ = read_time(path, f)
        if not allow_nonfinite:
            check_finite_t(path, t_all)
        t = np.atleast_1d(t_all[steps_idx])
        y = _read_damaged(path, "y", lambda: _read_rows(f["y"], traj_idx))
        if y.ndim == 2:  # a single trajectory index: keep (n_traj, n_states, dim)
            y = y[None]
        y = y[:, steps_idx]
        if y.ndim == 2:  # a single step index
            y = y[:, None]
        params, names = None, ()  # type: tuple[np.ndarray | None, tuple[str, ...]]
        if PARAMS_DATASET in f:
            names = _param_names(path, f, n_traj, check_values=False)  # checked by _validate
            params = _read_rows(f[PARAMS_DATASET], traj_idx)
            params = params[None] if params.ndim == 1 else params
    if not allow_nonfinite:
        check_finite_y(path, y, traj_idx, steps_idx, n_traj, n_states)
    meta["n_traj"], meta["n_states"], meta["n_steps"] = int(y.shape[0]), int(y.shape[1]), int(y.shape[1]) - 1
    return Trajectories(y=np.asarray(y, dtype=np.float64), t=np.asarray(t, dtype=np.float64), meta=meta,
                        params=None if params is None else np.asarray(params, dtype=np.float64), param_names=names)

# --- trajectory files: write and read -----------------------------------------------------------------------

# Metadata keys that describe the arrays; the writer computes them and they win over ``meta``.
_SHAPE_KEYS = ("schema_version", "dim", "n_traj", "n_states", "n_steps", "vpintegrator_version")
_PARAM_PREFIX = PARAM_PREFIX
# Target size of one compressed HDF5 chunk of ``/y``.
_CHUNK_BYTES = 512 * 1024


def _chunk_shape(n_traj: int, n_states: int, dim: int) -> tuple[int, int, int]:
    """Chunks of whole trajectories (at most 64) of about ``_CHUNK_BYTES``; long ones split in time."""
    row_bytes = 8 * dim
    c_steps = max(1, min(n_states, _CHUNK_BYTES // row_bytes))
    c_traj = max(1, min(n_traj, 64, _CHUNK_BYTES // (row_bytes * c_steps)))
    return c_traj, c_steps, dim


def _standard_attrs(n_traj: int, n_states: int, dim: int, t: np.ndarray, meta: dict[str, Any]) -> dict[str, Any]:
    meta = dict(meta)
    meta.update(
        schema_version=SCHEMA_VERSION,
        dim=int(dim),
        n_traj=int(n_traj),
        n_states=int(n_states),
        n_steps=int(n_states) - 1,
        vpintegrator_version=__version__,
    )
    if n_states >= 1:
        meta.setdefault("t_end", float(t[-1]))
    if n_states >= 2:
        meta.setdefault("dt", float(t[1] - t[0]))
    meta.setdefault("invariant_names", [])
    return meta


# ---------------------------------------------------------------------------------------------------
# writing


class TrajectoryWriter:
    """Write a trajectory data set to HDF5 chunk by chunk, atomically.

    Use as a context manager. The file appears at ``path`` only when the block exits normally and every
    trajectory has been written; on an exception (``KeyboardInterrupt`` included) the temporary file is
    removed and an earlier file at ``path`` stays intact.

    Parameters
    ----------
    path : str or PathLike
        Target file.
    n_traj, n_states, dim : int
        Shape of ``/y``: (n_traj, n_states, dim).
    t : ndarray, shape (n_states,)
        Sample times.
    meta : dict
        Metadata for the root attributes (see the module docstring); a [`System`][vpintegrator.systems.System] object under
        ``system`` is stored as ``system``, ``system_class`` and ``param_<name>`` attributes.
    compression : str or None, default "gzip"
        HDF5 filter for ``/y`` (``"gzip"`` is readable everywhere; ``"lzf"`` is faster but h5py-only; None: no
        filter, the fastest to write and ~16 % larger for float64 trajectories).
    overwrite : bool, default False
        Replace an existing trajectory file at ``path``; anything else there is never replaced. The file
        is locked against other writers while the block runs.
    provenance : dict, optional
        The file's ``provenance`` attribute (stored as JSON text; [`vpintegrator.provenance.provenance_record`][vpintegrator.provenance.provenance_record]
        with the input files); default a record of this process with no inputs.
    params : (names, values), optional
        Per-trajectory system parameters: ``values`` (n_traj, p) stored as ``/params`` with the column
        names (``vpintegrator.systems.family.param_columns``) as its attribute ``names``.

    Examples
    --------
    >>> with TrajectoryWriter("out.h5", n_traj, n_states, dim, t, meta) as writer:  # doctest: +SKIP
    ...     for start, y_chunk in chunks:        # y_chunk: (k, n_states, dim)
    ...         writer.write(start, y_chunk)
    """

    #: set by __init__ (declared for type checkers)
    path: Path
    shape: tuple[int, int, int]

    def __init__(
        self,
        path: str | os.PathLike[str],
        n_traj: int,
        n_states: int,
        dim: int,
        t: np.ndarray,
        meta: dict[str, Any] | None = None,
        *,
        compression: str | None = "gzip",
        overwrite: bool = False,
        provenance: dict[str, Any] | None = None,
        params: tuple[Sequence[str], np.ndarray] | None = None,
    ) -> None:
        for name, value in (("n_traj", n_traj), ("n_states", n_states), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise VPIntegratorError(f"TrajectoryWriter: {name} must be a positive int; got {value!r}")
        t = np.asarray(t, dtype=np.float64)
        if t.shape != (n_states,):
            raise VPIntegratorError(f"TrajectoryWriter: t must have shape (n_states,) = ({n_states},); got {t.shape}")
        bad = time_grid_problem(t)
        if bad:
            raise VPIntegratorError(f"TrajectoryWriter: t {bad}; sample times must be finite and strictly increasing")
        check_output_path(path, key=None)
        check_output(path, "trajectories", overwrite, key=None)
        self.path = Path(path)
        self._overwrite = overwrite
        self._lock: Any = None  # the output lock, held from __enter__ to __exit__
        self.shape = (int(n_traj), int(n_states), int(dim))
        self._t = t
        self._meta = _standard_attrs(n_traj, n_states, dim, t, meta or {})
        # how this file was made (a "provenance" in meta belongs to the file it was read from)
        self._meta["provenance"] = dict(provenance) if provenance is not None else provenance_record()
        self._compression = compression
        self._params = _check_params(params, int(n_traj))
        self._written = np.zeros(int(n_traj), dtype=bool)
        self._ctx: Any = None  # the atomic temporary file
        self._h5: Any = None  # h5_writing's context: closes the file, or discards it after a failed write
        self._file: h5py.File | None = None
        self._y: h5py.Dataset | None = None

    def __enter__(self) -> "TrajectoryWriter":
        check_output_path(self.path, key=None)
        self._lock = output_lock(check_output(self.path, "trajectories", self._overwrite, key=None), key=None)
        self._lock.__enter__()
        self._ctx = atomic_path(check_output(self.path, "trajectories", self._overwrite, key=None), suffix=".h5")
        try:
            tmp = self._ctx.__enter__()
        except OSError as err:
            self._unlock()
            raise VPIntegratorError(
                f"{self.path}: cannot write there ({err.strerror or err}); give a path in a folder you can write"
            ) from None
        except BaseException:
            self._unlock()
            raise
        try:
            self._h5 = h5_writing(tmp)
            self._file = self._h5.__enter__()
            self._file.create_dataset("t", data=self._t)
            compression_opts = 4 if self._compression == "gzip" else None
            self._y = self._file.create_dataset(
                "y",
                shape=self.shape,
                dtype=np.float64,
                chunks=_chunk_shape(*self.shape),
                compression=self._compression,
                compression_opts=compression_opts,
                shuffle=self._compression is not None,
            )
            if self._params is not None:
                names, values = self._params
                ds = self._file.create_dataset(PARAMS_DATASET, data=values)
                ds.attrs["names"] = np.array(list(names), dtype=h5py.string_dtype())
            label_trajectory_file(self._file, system=self._meta.get("system_class") or self._meta.get("system"),
                                  traj_start=int(self._meta.get("shard_traj_start") or 0))
            self.update_meta({})
        except BaseException as err:
            self._close(err)
            try:
                self._ctx.__exit__(type(err), err, err.__traceback__)
            finally:
                self._unlock()
            raise
        return self

    def _unlock(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)

    def update_meta(self, meta: dict[str, Any]) -> None:
        """Add or overwrite metadata (e.g. statistics known only at the end); the shape keys are fixed."""
        if self._file is None:
            raise VPIntegratorError("TrajectoryWriter.update_meta called outside its `with` block")
        merged = {**self._meta, **{k: v for k, v in meta.items() if k not in _SHAPE_KEYS}}
        self._meta = merged
        attrs = _meta_to_attrs(merged)
        for key in list(self._file.attrs.keys()):
            if key not in attrs:
                del self._file.attrs[key]
        for key, value in attrs.items():
            self._file.attrs[key] = value

    def write(self, start_traj: int, y_chunk: np.ndarray) -> None:
        """Write trajectories ``start_traj : start_traj + len(y_chunk)``.

        Parameters
        ----------
        start_traj : int
            Index of the first trajectory in the chunk.
        y_chunk : ndarray, shape (k, n_states, dim)
            The states; cast to float64.
        """
        if self._y is None:
            raise VPIntegratorError("TrajectoryWriter.write called outside its `with` block")
        y_chunk = np.asarray(y_chunk, dtype=np.float64)
        n_traj, n_states, dim = self.shape
        k = y_chunk.shape[0] if y_chunk.ndim == 3 else -1
        if y_chunk.ndim != 3 or y_chunk.shape[1:] != (n_states, dim) or not 0 <= start_traj <= n_traj - k:
            raise VPIntegratorError(
                f"TrajectoryWriter.write: expected a chunk of shape (k, {n_states}, {dim}) fitting into "
                f"trajectories [0, {n_traj}) from start_traj={start_traj}; got shape {y_chunk.shape}"
            )
        self._y[start_traj : start_traj + k] = y_chunk
        check_h5_write(self._file)  # a full disk stops the run here, not at its end
        self._written[start_traj : start_traj + k] = True

    @property
    def direct(self) -> tuple[tuple[int, int, int], int] | None:
        """``(chunk shape, gzip level)`` of ``/y`` when chunks compressed elsewhere may be stored as they
        are ([`write_encoded`][vpintegrator.data.hdf5.TrajectoryWriter.write_encoded]; gzip + shuffle), else None."""
        if self._y is None or self._compression != "gzip":
            return None
        return self._y.chunks, 4

    def write_encoded(self, start_traj: int, k: int, pieces) -> None:
        """Store trajectories ``start_traj : start_traj + k`` given as compressed HDF5 chunks
        ``[(offset, bytes), ...]`` (``vpintegrator.data._parallel.encode_chunks`` with [`direct`][vpintegrator.data.hdf5.TrajectoryWriter.direct])."""
        if self._y is None:
            raise VPIntegratorError("TrajectoryWriter.write_encoded called outside its `with` block")
        for offset, data in pieces:
            self._y.id.write_direct_chunk(offset, data)
        check_h5_write(self._file)
        self._written[start_traj : start_traj + k] = True

    def _close(self, exc: BaseException | None = None) -> None:
        """Close the file; after ``exc`` (the file is thrown away) without writing to it again. Raises
        what the close raised (HDF5 writes its caches there: a full disk shows up here)."""
        h5, self._h5 = self._h5, None
        self._file = None
        self._y = None
        if h5 is not None:
            h5.__exit__(*((None, None, None) if exc is None else (type(exc), exc, exc.__traceback__)))

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return self._finish(exc_type, exc, tb)
        finally:
            self._unlock()

    def _finish(self, exc_type, exc, tb) -> bool:
        incomplete = None
        if exc_type is None and not self._written.all():
            missing = int((~self._written).sum())
            first = int(np.argmin(self._written))
            incomplete = VPIntegratorError(
                f"{self.path}: {missing} of {self.shape[0]} trajectories were never written (first: "
                f"{first}); the file was not created"
            )
        try:
            self._close(exc if exc is not None else incomplete)
        except BaseException as err:  # a write failed (a full disk, an I/O error): the file is thrown away
            if err is not exc:
                self._ctx.__exit__(type(err), err, err.__traceback__)  # removes it; a device error: one line
                raise
        if incomplete is not None:
            try:
                self._ctx.__exit__(VPIntegratorError, incomplete, None)  # removes the temporary file
            except VPIntegratorError:
                pass
            raise incomplete
        # on success renames the temporary file onto path; on an exception removes it (and we re-raise)
        self._ctx.__exit__(exc_type, exc, tb)
        return False


def _check_params(params: Any, n_traj: int) -> tuple[tuple[str, ...], np.ndarray] | None:
    """``(names, values)`` checked: values (n_traj, p) finite float64, p distinct non-empty names."""
    if params is None:
        return None
    try:
        names, values = params
        names = tuple(str(n) for n in names)
        values = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise VPIntegratorError("TrajectoryWriter: params must be (names, values (n_traj, p)); got "
                                f"{type(params).__name__}") from None
    if values.shape != (n_traj, len(names)) or not names:
        raise VPIntegratorError(f"TrajectoryWriter: params values must have shape (n_traj, len(names)) = "
                                f"({n_traj}, {len(names)}) with at least one name; got {values.shape}")
    if len(set(names)) != len(names) or not all(names):
        raise VPIntegratorError(f"TrajectoryWriter: params names must be distinct and non-empty; got {list(names)}")
    if not np.all(np.isfinite(values)):
        raise VPIntegratorError("TrajectoryWriter: params values must be finite")
    return names, values


def write_trajectories(path: str | os.PathLike[str], traj: Trajectories, *, compression: str | None = "gzip",
                       overwrite: bool = False, provenance: dict[str, Any] | None = None) -> Path:
    """Write a [`Trajectories`][vpintegrator.data.trajectories.Trajectories] to an HDF5 file (schema v2), atomically.

    Parameters
    ----------
    path : str or PathLike
        Target file; parent directories are created.
    traj : Trajectories
        ``y`` (n_traj, n_states, dim) and ``t`` (n_states,) are stored as float64; ``meta`` becomes root
        attributes (a [`System`][vpintegrator.systems.System] under ``system`` as ``system``/``system_class``/``param_<name>``).
    compression : str or None, default "gzip"
        As [`TrajectoryWriter`][vpintegrator.data.hdf5.TrajectoryWriter]'s (None: no filter).
    overwrite : bool, default False
        Replace an existing trajectory file at ``path`` (anything else there is never replaced).
    provenance : dict, optional
        As [`TrajectoryWriter`][vpintegrator.data.hdf5.TrajectoryWriter]'s: the ``provenance`` attribute (default: a record of this process).

    Returns
    -------
    Path
        The path written.
    """
    if not isinstance(traj, Trajectories):
        raise VPIntegratorError(f"write_trajectories: expected a Trajectories; got {type(traj).__name__}")
    params = None if traj.params is None else (traj.param_names, traj.params)
    n_traj, n_states, dim = (int(n) for n in traj.y.shape)
    with TrajectoryWriter(path, n_traj, n_states, dim, traj.t, traj.meta, compression=compression,
                          overwrite=overwrite, provenance=provenance, params=params) as writer:
        writer.write(0, traj.y)
    return Path(path)


# ---------------------------------------------------------------------------------------------------
# reading


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a trajectory file: its root attributes as a dict (``param_<name>`` kept flat).

    Validates the schema like [`read_trajectories`][vpintegrator.data.hdf5.read_trajectories] but reads no arrays. ``n_states`` and
    ``n_steps`` (= n_states − 1) are given in the v2 meaning whatever the file's schema version.
    """
    path = Path(path)
    if is_shard_set([path]):
        return read_shard_metadata([path])
    with _open(path) as f:
        n_traj, n_states, _ = _validate(path, f)
        meta = file_meta(path, f)
    meta["n_traj"], meta["n_states"], meta["n_steps"] = int(n_traj), int(n_states), int(n_states) - 1
    return meta


def read_trajectories(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    traj: Any = None,
    steps: Any = None,
    *,
    allow_nonfinite: bool = False,
) -> Trajectories:
    """Read trajectories from one HDF5 file, or from several shards into one [`Trajectories`][vpintegrator.data.trajectories.Trajectories].

    Parameters
    ----------
    path : str, PathLike, or a list of them
        One file, or shards sharing ``t``, ``dt``, ``dim``, ``system`` and system parameters (else a
        one-line error naming both files and the differing key); their trajectories
        are concatenated in the order given. The shards of a ``vp-gen --shard I/N`` run (their list, in
        any order, or the index file that run wrote) are checked to form one whole data set (one-line
        error naming the missing or foreign shard) and read in shard order
        (``vpintegrator.data.shards``).
    traj, steps : None, int, slice, or 1-d int/bool array, optional
        Which trajectories (over all shards) and which time steps to read (default: all). Only the
        selected trajectories are read from disk.
    allow_nonfinite : bool, default False
        Data with NaN or Inf in ``/y`` (or a ``/t`` that is not finite and strictly increasing) is
        refused with a one-line error naming the file, the dataset and the first bad index (the check
        runs block by block on what is read). True reads such files anyway, to inspect them.

    Returns
    -------
    Trajectories
        ``y`` (n_traj, n_states, dim) float64, ``t`` (n_states,), ``meta`` from the root attributes
        (system parameters as ``param_<name>`` keys). For shards, ``meta["source_files"]`` lists
        them and ``meta["seed"]`` is the list of their seeds when these differ.

    Raises
    ------
    VPIntegratorError
        Naming the file and key when the schema version, ``/t``, ``/y`` or ``dim`` is wrong or missing,
        the file is not HDF5, the data are not finite, or shards disagree.
    """
    if not isinstance(allow_nonfinite, (bool, np.bool_)):
        raise VPIntegratorError(f"read_trajectories: allow_nonfinite must be True or False; got {allow_nonfinite!r}")
    allow = bool(allow_nonfinite)
    if isinstance(path, (str, os.PathLike)):
        path = [path]
    try:
        paths = [Path(p) for p in path]
    except TypeError:
        raise VPIntegratorError(
            f"read_trajectories: path must be a file path or a list of them; got {path!r}"
        ) from None
    if not paths:
        raise VPIntegratorError("read_trajectories: got an empty list of files; give at least one path")
    if is_shard_set(paths):
        return read_shard_set(paths, traj, steps, allow)
    if len(paths) == 1:
        return _read_one(paths[0], traj, steps, allow)
    return _read_shards(paths, traj, steps, allow)


def _read_shards(paths: list[Path], traj: Any, steps: Any, allow: bool = False) -> Trajectories:
    heads = []
    for p in paths:
        with _open(p) as f:
            shape = _validate(p, f)
            heads.append((shape, file_meta(p, f), read_time(p, f)[0]))
    (_, n_states0, dim0), meta0, t0 = heads[0]
    for p, ((_, n_states, dim), meta, t) in zip(paths[1:], heads[1:]):
        keys = ["system", "system_class", "dt", *sorted(k for k in {**meta0, **meta} if k.startswith(_PARAM_PREFIX))]
        for key, a, b in [("dim", dim0, dim), *((k, meta0.get(k), meta.get(k)) for k in keys)]:
            if a != b:
                raise VPIntegratorError(
                    f"{p}: attribute '{key}' is {b!r} but {paths[0]} has {a!r}; shards read together must agree"
                )
        if n_states != n_states0 or not np.array_equal(t, t0):
            raise VPIntegratorError(
                f"{p}: dataset '/t' differs from {paths[0]}'s ({n_states} vs {n_states0} states); shards read "
                "together must share their time grid"
            )
    counts = np.array([h[0][0] for h in heads])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    total = int(offsets[-1])
    label = Path(f"{paths[0]} (+{len(paths) - 1} shards)")
    idx = _index(traj, total, "traj", label)
    wanted = np.atleast_1d(np.arange(total)[idx])
    shard_of = np.searchsorted(offsets, wanted, side="right") - 1
    pieces, positions, parts = [], [], []
    for i, p in enumerate(paths):
        mask = shard_of == i
        if mask.any():
            part = _read_one(p, wanted[mask] - offsets[i], steps, allow)
            pieces.append(part.y)
            positions.append(np.flatnonzero(mask))
            parts.append(part)
            t_sel = part.t
    names = {p.param_names for p in parts}
    if len(names) > 1 or (parts and len({p.params is None for p in parts}) > 1):
        raise VPIntegratorError(f"{paths[0]}: the files read together differ in their per-trajectory parameters "
                                "('/params' present in some, or other columns); read them separately")
    if not pieces:  # empty selection
        t_sel = _read_one(paths[0], [], steps, allow).t
        y = np.empty((0, t_sel.shape[0], dim0))
    else:
        y = np.empty((wanted.size, pieces[0].shape[1], dim0))
        for pos, piece in zip(positions, pieces):
            y[pos] = piece
    meta = dict(meta0)
    meta["n_traj"], meta["n_states"], meta["n_steps"] = int(y.shape[0]), int(y.shape[1]), int(y.shape[1]) - 1
    meta["source_files"] = [str(p) for p in paths]
    seeds = [h[1].get("seed") for h in heads]
    if len(set(map(repr, seeds))) > 1:
        meta["seed"] = seeds
    params, cols = None, ()  # type: tuple[np.ndarray | None, tuple[str, ...]]
    if parts and parts[0].params is not None:
        cols = parts[0].param_names
        params = np.empty((wanted.size, len(cols)))
        for pos, part in zip(positions, parts):
            params[pos] = part.params
    return Trajectories(y=y, t=t_sel, meta=meta, params=params, param_names=cols)

# --- HDF5 dimension scales and units --------------------------------------------------------------------------------
#
# HDF5 dimension scales and units of the files the package writes (trajectory files, their shard index,
# rollout files), so that netCDF readers (``xarray.open_dataset(path, engine="h5netcdf")``) and generic HDF5
# tools see named dimensions with coordinates instead of phony ones.
#
# Root datasets that are dimension scales (each dimension is named after its dataset):
#
# - ``/t`` (n_states,): the sample times, the time axis of every per-step dataset;
# - ``/trajectory`` (n_traj,) int64: each row's index in the whole data set (a shard's rows start at its
#   ``shard_traj_start``; a rollout's rows are its ``traj_index``), the trajectory axis;
# - ``/state`` (dim,) str: the names of the state components (the system's ``state_names``, else
#   ``y1 .. y<dim>``), the state axis;
# - ``/param`` (p,) str: the columns of ``/params`` (parametric data sets only);
# - ``map_step`` of a rollout method group: the map axis of ``log_det_J`` and ``cum_log_det_J``.
#
# Units: the systems are dimensionless (model time, nondimensional states), so ``/t``, ``/y`` and the
# parameters carry ``units = "1"`` (the CF/UDUNITS spelling of "dimensionless") unless the system declares
# ``state_units``. The numbers of ``/t``, ``/y`` and ``/params`` are not touched: only attributes and the
# small label datasets above are added, and readers ignore both.


TRAJECTORY, TIME, STATE, PARAM, MAP = "trajectory", "t", "state", "param", "map_step"


def _strings(values: Sequence[str]) -> np.ndarray:
    """Fixed-length UTF-8 bytes (read back as the same bytes by every tool; ``_Encoding`` tells netCDF
    readers to decode them)."""
    return np.array([str(v).encode("utf-8") for v in values])


def _scale(f: h5py.Group, name: str, data: np.ndarray | None, long_name: str, units: str | None) -> h5py.Dataset:
    """``f[name]`` made a dimension scale named ``name`` (created from ``data`` unless it exists)."""
    ds = f[name] if data is None else f.create_dataset(name, data=data)
    if ds.dtype.kind == "S":
        ds.attrs["_Encoding"] = "utf-8"
    ds.make_scale(name)
    ds.attrs["long_name"] = long_name
    if units is not None:
        ds.attrs["units"] = units
    return ds


def _attach(ds: h5py.Dataset, *axes: str | None) -> None:
    """Attach the root scales named ``axes`` (None: leave that axis) to ``ds``'s dimensions."""
    root = ds.file
    for i, axis in enumerate(axes):
        if axis is not None and axis in root and i < ds.ndim:
            ds.dims[i].attach_scale(root[axis])


def label_trajectory_file(f: h5py.File, *, system: Any, traj_start: int = 0) -> None:
    """Dimension scales and units of a trajectory file holding ``/t``, ``/y`` and maybe ``/params``.

    Parameters
    ----------
    f : h5py.File
        Open for writing; ``/t`` (n_states,), ``/y`` (n_traj, n_states, dim) exist.
    system : System, SystemFamily, str or None
        Where the state names and units come from (a registry name or class path is looked up).
    traj_start : int, default 0
        The whole data set's index of row 0 (a shard's ``shard_traj_start``).
    """
    y = f["y"]
    n_traj, _, dim = y.shape
    _scale(f, TIME, None, "time", DIMENSIONLESS)
    _scale(f, TRAJECTORY, np.arange(traj_start, traj_start + n_traj, dtype=np.int64), "trajectory index", None)
    _scale(f, STATE, _strings(state_names(system, dim)), "state component", None)
    y.attrs["long_name"] = "state"
    y.attrs["units"] = state_units(system)
    _attach(y, TRAJECTORY, TIME, STATE)
    if "params" in f:
        params = f["params"]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in params.attrs["names"]]
        _scale(f, PARAM, _strings(names), "system parameter", None)
        params.attrs["long_name"] = "per-trajectory system parameters"
        params.attrs["units"] = DIMENSIONLESS
        _attach(params, TRAJECTORY, PARAM)


def label_rollout_root(f: h5py.File, *, system: Any, dim: int, traj_index: np.ndarray | None = None) -> None:
    """The root scales of a rollout file holding ``/t`` and ``/traj_index``: ``/t``, ``/trajectory`` (the
    rows' indices in the data file: ``traj_index``, default ``/traj_index``'s values) and ``/state``; its
    groups are labelled by [`label_rollout_group`][vpintegrator.data.hdf5.label_rollout_group]."""
    rows = f["traj_index"][()] if traj_index is None else traj_index
    _scale(f, TIME, None, "time", DIMENSIONLESS)
    _scale(f, TRAJECTORY, np.asarray(rows, dtype=np.int64), "trajectory index in the data file", None)
    _scale(f, STATE, _strings(state_names(system, dim)), "state component", None)
    _attach(f["traj_index"], TRAJECTORY)


def label_rollout_group(group: h5py.Group, *, system: Any = None) -> None:
    """Attach the root scales to the datasets of a rollout group (``/reference`` or ``/methods/<label>``):
    ``y`` (trajectory, t, state), ``rel_error`` and ``invariants/*`` (trajectory, t), ``log_det_J`` and
    ``cum_log_det_J`` (trajectory, map_step; ``map_step`` becomes the group's scale), ``failed_step`` and
    ``per_traj/*`` (trajectory). A file without root scales (an older writer's) is left as it is."""
    if TRAJECTORY not in group.file:
        return
    n_traj = group.file[TRAJECTORY].shape[0]
    if "y" in group:
        group["y"].attrs["units"] = state_units(system)
        _attach(group["y"], TRAJECTORY, TIME, STATE)
    if "rel_error" in group:
        group["rel_error"].attrs["units"] = DIMENSIONLESS
        _attach(group["rel_error"], TRAJECTORY, TIME)
    for sub in ("invariants", "per_traj"):
        if sub in group:
            for ds in group[sub].values():
                if isinstance(ds, h5py.Dataset) and ds.ndim >= 1 and ds.shape[0] == n_traj:
                    _attach(ds, TRAJECTORY, TIME if sub == "invariants" else None)
    if "failed_step" in group:
        _attach(group["failed_step"], TRAJECTORY)
    if MAP in group:
        maps = group[MAP]
        if not maps.is_scale:
            maps.make_scale(MAP)
            maps.attrs["long_name"] = "step of the last state of each step or window map"
        for key in ("log_det_J", "cum_log_det_J"):
            if key in group:
                ds = group[key]
                _attach(ds, TRAJECTORY)
                ds.dims[1].attach_scale(maps)


# --------------------------------------------------------------------------- reading a shard set

# metadata that must agree between the shards of one data set (besides the time grid and dim)
_SAME = ("spec", "system", "system_class", "dt", "t_end", "method", "rtol", "atol", "seed", "sampler",
         "sampler_args", "chunk_size", "shard_count", "shard_n_traj", "parameter_dists")
_PER_SHARD = (*SHARD_KEYS, "created", "n_traj")


def _head(path: Path) -> tuple[dict, tuple[int, int, int], np.ndarray]:
    with _open(path) as f:
        shape = _validate(path, f)
        return _attrs_to_meta(f.attrs), shape, f["t"][:]


#: the shards of a trajectory data set (vp-gen)
GEN = ShardKind("vp-gen", _SAME, head=_head)


def _collect(paths: list[Path]) -> tuple[list[Shard], Path | None]:
    """The shards of one data set (checked), in shard order; and the index file, if given."""
    return collect(paths, GEN)


def _merged_meta(shards: list[Shard], index: Path | None) -> dict[str, Any]:
    meta = {k: v for k, v in shards[0].meta.items() if k not in _PER_SHARD}
    for key in [k for k in meta if k.startswith("max_rel_drift_")]:
        meta[key] = max(float(s.meta.get(key, 0.0)) for s in shards)
    meta["source_files"] = [str(s.path) for s in shards]
    if index is not None:
        meta["index_file"] = str(index)
    return meta


def read_shard_metadata(paths: list[Path]) -> dict[str, Any]:
    """[`read_metadata`][vpintegrator.data.hdf5.read_metadata] of an index file or a list of shards (checked)."""
    shards, index = _collect(paths)
    meta = _merged_meta(shards, index)
    n_traj, n_states = sum(s.shape[0] for s in shards), shards[0].shape[1]
    meta["n_traj"], meta["n_states"], meta["n_steps"] = n_traj, n_states, n_states - 1
    return meta


def read_shard_set(paths: list[Path], traj: Any = None, steps: Any = None, allow: bool = False) -> Trajectories:
    """The whole data set of an index file or a list of shards, as one [`Trajectories`][vpintegrator.data.trajectories.Trajectories]."""
    shards, index = _collect(paths)
    counts = np.array([s.shape[0] for s in shards])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    total, dim = int(offsets[-1]), shards[0].shape[2]
    idx = _index(traj, total, "traj", index or shards[0].path)
    wanted = np.atleast_1d(np.arange(total)[idx])
    shard_of = np.searchsorted(offsets, wanted, side="right") - 1
    t_sel = None
    y = None
    params, names = None, ()  # type: tuple[np.ndarray | None, tuple[str, ...]]
    for i, s in enumerate(shards):
        mask = shard_of == i
        if mask.any() or (i == 0 and wanted.size == 0):
            part = _read_one(s.path, wanted[mask] - offsets[i], steps, allow)
            t_sel = part.t
            if y is None:
                y = np.empty((wanted.size, part.y.shape[1], dim))
            y[np.flatnonzero(mask)] = part.y
            if part.params is not None:  # a parametric data set: every shard has /params (same parameter_dists)
                if params is None:
                    names = part.param_names
                    params = np.full((wanted.size, len(names)), np.nan)
                if part.param_names != names:
                    raise VPIntegratorError(f"{s.path}: its '/params' columns {list(part.param_names)} differ from "
                                            f"{list(names)}; give only the shards of one vp-gen --shard run")
                params[np.flatnonzero(mask)] = part.params
    assert y is not None and t_sel is not None  # shard 0 is always read (an empty selection reads its grid)
    meta = _merged_meta(shards, index)
    meta["n_traj"], meta["n_states"], meta["n_steps"] = int(y.shape[0]), int(y.shape[1]), int(y.shape[1]) - 1
    return Trajectories(y=y, t=t_sel, meta=meta, params=params, param_names=names)
