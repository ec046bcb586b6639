"""Reading one trajectory file: open it, validate it, read a selection of its rows and steps.

A file of vpintegrator's (schema v2, ``vpintegrator.data.trajectory_files``; schema v1 files, whose ``n_steps``
counted states, are still read and their metadata comes back in the v2 meaning) or one written elsewhere
(``is_external``: ``/t`` or ``/time`` and ``/y`` only, optionally ``/params``; the docs page "Bringing your own
trajectories"): each dataset read is checked for dtype, shape, meaning (a regular time grid, axes in the order
(trajectory, time, state)) and finiteness, a bad one being a one-line error naming the file and the dataset.
[`read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories] reads one file through here, a shard
set through ``vpintegrator.data.shards``, which reads each shard here.
"""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..errors import VPIntegratorError
from .h5attrs import _attrs_to_meta, _from_attr
from .h5checks import CHECK_BYTES, _nonfinite_name, check_finite_t, check_finite_y, time_grid_problem
from .trajectories import Trajectories

__all__ = ["PARAMS_DATASET", "SCHEMA_VERSION", "component_names", "file_meta", "is_external", "read_time"]

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
    if "periodic" in f["y"].attrs:  # the components that are angles (vpintegrator.data.trajectories.state_periods)
        meta["periodic"] = np.atleast_1d(np.asarray(f["y"].attrs["periodic"])).tolist()  # checked where read
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
