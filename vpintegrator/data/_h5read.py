"""Reading trajectory files: open, validate the schema, select rows and steps (shared by ``vpintegrator.data.hdf5``
and ``vpintegrator.data.shards``, so that neither imports the other's reader)."""

from __future__ import annotations

import errno
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..errors import VPIntegratorError
from ._attrs import _attrs_to_meta, _from_attr
from .checks import check_finite_t, check_finite_y
from .trajectories import Trajectories

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
             "elsewhere: it needs '/t' (n_states,) and '/y' (n_traj, n_states, dim), see datasets/README.md")


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
    t = np.asarray(_read_damaged(path, "t", lambda: f["t"][()]), dtype=np.float64)
    return {"dim": int(f["y"].shape[2]), "dt": float((t[-1] - t[0]) / (t.size - 1)), "t0": float(t[0]),
            "t_end": float(t[-1]), "invariant_names": [], "external": True, "source": str(path)}


def _validate_external(path: Path, f: h5py.File) -> tuple[int, int, int]:
    """``_validate`` of an external file: ``/t`` and ``/y`` (and ``/params`` if there) as datasets of the
    right rank and dtype, at least two states, a regular and increasing ``/t``."""
    for key in ("t", "y"):
        if key not in f or not isinstance(f[key], h5py.Dataset):
            what = "missing dataset" if key not in f else "not a dataset:"
            raise VPIntegratorError(f"{path}: {what} '/{key}'; {_EXTERNAL}")
    t, y = f["t"], f["y"]
    if y.ndim != 3:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape} (rank {y.ndim}); expected (n_traj, n_states, "
                                "dim) (one trajectory: add a leading axis of 1; states of one component: a trailing one)")
    if t.ndim != 1 or t.shape[0] != y.shape[1]:
        raise VPIntegratorError(
            f"{path}: dataset '/t' has shape {t.shape}; expected (n_states,) = ({y.shape[1]},) to match '/y' {y.shape}")
    if y.shape[1] < 2:
        raise VPIntegratorError(f"{path}: dataset '/y' has shape {y.shape}: one state per trajectory; a step needs "
                                "at least two (n_states >= 2)")
    for key, ds in (("t", t), ("y", y)):
        if ds.dtype.kind not in ("f", "i", "u") or (key == "y" and ds.dtype.kind != "f"):
            raise VPIntegratorError(f"{path}: dataset '/{key}' has dtype {ds.dtype}; expected float64 (float32 is read "
                                    "as float64)")
    if PARAMS_DATASET in f:
        _param_names(path, f, y.shape[0])
    t_all = np.asarray(_read_damaged(path, "t", lambda: t[()]), dtype=np.float64)
    check_finite_t(path, t_all)
    _check_grid(path, f)
    return y.shape


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


def _param_names(path: Path, f: h5py.File, n_traj: int) -> tuple[str, ...]:
    """The columns of ``/params`` (checked: shape (n_traj, p) float, attribute ``names`` of p strings)."""
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
    return tuple(seen)


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
    t = np.asarray(_read_damaged(path, "t", lambda: f["t"][()]), dtype=np.float64)
    if t.size < 2 or not np.all(np.isfinite(t)):
        return
    steps = np.diff(t)
    if not np.all(steps > 0):
        return
    step = float(np.median(steps))
    tol = 1e-9 * max(step, float(np.max(np.abs(t))) * 1e-6)
    bad = np.flatnonzero(np.abs(steps - step) > tol)
    if bad.size:
        k = int(bad[0])
        raise VPIntegratorError(
            f"{path}: dataset '/t' is not a regular grid: t[{k + 1}] - t[{k}] = {steps[k]:.10g}, the other steps "
            f"{step:.10g}; vpintegrator needs a fixed step (write the states at t0 + k dt)")
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
        t_all = _read_damaged(path, "t", lambda: f["t"][:])
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
            names = _param_names(path, f, n_traj)
            params = _read_rows(f[PARAMS_DATASET], traj_idx)
            params = params[None] if params.ndim == 1 else params
    if not allow_nonfinite:
        check_finite_y(path, y, traj_idx, steps_idx, n_traj, n_states)
    meta["n_traj"], meta["n_states"], meta["n_steps"] = int(y.shape[0]), int(y.shape[1]), int(y.shape[1]) - 1
    return Trajectories(y=np.asarray(y, dtype=np.float64), t=np.asarray(t, dtype=np.float64), meta=meta,
                        params=None if params is None else np.asarray(params, dtype=np.float64), param_names=names)
