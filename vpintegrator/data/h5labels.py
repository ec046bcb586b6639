"""HDF5 dimension scales and units of the files the package writes (trajectory files, their shard index,
rollout files), so that netCDF readers (``xarray.open_dataset(path, engine="h5netcdf")``) and generic HDF5
tools see named dimensions with coordinates instead of phony ones.

Root datasets that are dimension scales (each dimension is named after its dataset):

- ``/t`` (n_states,): the sample times, the time axis of every per-step dataset;
- ``/trajectory`` (n_traj,) int64: each row's index in the whole data set (a shard's rows start at its
  ``shard_traj_start``; a rollout's rows are its ``traj_index``), the trajectory axis;
- ``/state`` (dim,) str: the names of the state components (the system's ``state_names``, else
  ``y1 .. y<dim>``), the state axis;
- ``/param`` (p,) str: the columns of ``/params`` (parametric data sets only);
- ``map_step`` of a rollout method group: the map axis of ``log_det_J`` and ``cum_log_det_J``.

Units: the systems are dimensionless (model time, nondimensional states), so ``/t``, ``/y`` and the
parameters carry ``units = "1"`` (the CF/UDUNITS spelling of "dimensionless") unless the system declares
``state_units``. The numbers of ``/t``, ``/y`` and ``/params`` are not touched: only attributes and the
small label datasets above are added, and readers ignore both.
"""

from __future__ import annotations

from typing import Any, Sequence

import h5py
import numpy as np

from .trajectories import DIMENSIONLESS, state_names, state_units

__all__ = ["label_rollout_group", "label_rollout_root", "label_trajectory_file"]


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


def label_trajectory_file(f: h5py.File, *, system: Any, traj_start: int = 0, periodic: Any = None) -> None:
    """Dimension scales and units of a trajectory file holding ``/t``, ``/y`` and maybe ``/params``.

    Parameters
    ----------
    f : h5py.File
        Open for writing; ``/t`` (n_states,), ``/y`` (n_traj, n_states, dim) exist.
    system : System, SystemFamily, str or None
        Where the state names and units come from (a registry name or class path is looked up).
    traj_start : int, default 0
        The whole data set's index of row 0 (a shard's ``shard_traj_start``).
    periodic : sequence of float, optional
        Each component's period, 0 where not periodic: written as ``/y``'s attribute ``periodic`` (where a file
        from elsewhere declares it too; ``vpintegrator.data.trajectories.state_periods``).
    """
    y = f["y"]
    n_traj, _, dim = y.shape
    _scale(f, TIME, None, "time", DIMENSIONLESS)
    _scale(f, TRAJECTORY, np.arange(traj_start, traj_start + n_traj, dtype=np.int64), "trajectory index", None)
    _scale(f, STATE, _strings(state_names(system, dim)), "state component", None)
    y.attrs["long_name"] = "state"
    y.attrs["units"] = state_units(system)
    if periodic is not None and np.any(np.asarray(periodic, dtype=np.float64) > 0):
        y.attrs["periodic"] = np.asarray(periodic, dtype=np.float64)
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
    groups are labelled by [`label_rollout_group`][vpintegrator.data.h5labels.label_rollout_group]."""
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
