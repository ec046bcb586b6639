"""Shards of one data set: ``vp-gen ... --shard I/N`` files, their index file, and reading them as one.

A data set of ``n_traj`` initial conditions is cut into ``N`` contiguous blocks along its chunks (the
chunks [`generate`][vpintegrator.data.generation.generate] integrates at a time, so that every trajectory is computed
exactly as in the unsharded run, also by methods whose Newton iterations run on a whole chunk). Shard
``I`` (1-based) of an output ``data.h5`` is the file ``data.shard-I-of-N.h5`` beside it; it holds
trajectories ``shard_traj_start : shard_traj_stop`` of the whole set and records, besides the usual
metadata, ``shard_index``, ``shard_count``, ``shard_traj_start``, ``shard_traj_stop`` and
``shard_n_traj`` (the whole set's size).

When the last shard is written, the **index file** appears at ``data.h5`` itself: an HDF5 trajectory file
whose ``/y`` is a virtual dataset over the shards' ``/y`` (any HDF5 tool sees the whole array) and whose
attribute ``shard_files`` lists the shards relative to it. [`read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories],
[`read_metadata`][vpintegrator.data.trajectory_files.read_metadata] and ``vp-train --data`` open it like any trajectory file; they
read the shards themselves, after checking that they belong together (the same data set: spec, system,
parameters, dt, seed, sampler, n_traj; every shard present once, no gaps or overlaps). A list of the shard
files is read the same way, in shard order.

The shard rules themselves (``parse_shard``, ``shard_bounds``, ``shard_path``, the checks that shards form
one set) are the job runtime's (``vpintegrator.jobs.shards``), shared with ``vp-rollout``; this module is the
trajectory file kind's part: how a shard is read (``GEN``), the index written and the set read as one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from .._io import atomic_path, h5_writing
from ..errors import VPIntegratorError
from ..jobs.shards import (INDEX_KEY, SHARD_KEYS, Shard, ShardKind, collect, finished_shard, is_shard_set,
                           parse_shard, shard_bounds, shard_path)
from .h5attrs import _attrs_to_meta
from .h5labels import label_trajectory_file
from .trajectories import Trajectories
from .trajectory_reader import PARAMS_DATASET, _index, _open, _read_one, _validate

if TYPE_CHECKING:  # pragma: no cover
    from .generation_plan import GenerationPlan

__all__ = ["GEN", "parse_shard", "shard_bounds", "shard_path", "write_shard_index", "is_shard_set", "read_shard_set",
           "read_shard_metadata", "finished_gen_shard"]


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
    """[`read_metadata`][vpintegrator.data.trajectory_files.read_metadata] of an index file or a list of shards (checked)."""
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


def write_shard_index(out: str | os.PathLike[str], count: int) -> Path:
    """Write the index file ``out`` over shards ``1..count`` of ``out`` (``shard_path``), atomically.

    Checks first that the shards form one data set (one-line error naming the missing or foreign one).
    Replaces an index file already at ``out`` (written for the same shards by a shard that finished at
    the same time); the caller has applied the overwrite rule to ``out`` before the run.
    """
    out = Path(out)
    paths = [shard_path(out, (i, count)) for i in range(1, count + 1)]
    shards, _ = _collect(paths)
    meta = _merged_meta(shards, None)
    meta.pop("source_files")
    n_traj = sum(s.shape[0] for s in shards)
    _, n_states, dim = shards[0].shape
    with atomic_path(out, suffix=".h5") as tmp:
        with h5py.File(shards[0].path, "r") as src, h5_writing(tmp) as f:
            for key, value in src.attrs.items():
                if key not in _PER_SHARD:
                    f.attrs[key] = value
            for key in [k for k in meta if k.startswith("max_rel_drift_")]:
                f.attrs[key] = meta[key]
            f.attrs["n_traj"] = n_traj
            f.attrs["shard_count"] = count
            f.attrs["shard_n_traj"] = n_traj
            f.attrs[INDEX_KEY] = json.dumps([p.name for p in paths])
            f.create_dataset("t", data=shards[0].t)
            layout = h5py.VirtualLayout(shape=(n_traj, n_states, dim), dtype=np.float64)
            for s in shards:
                a, b = int(s.meta["shard_traj_start"]), int(s.meta["shard_traj_stop"])
                # relative source name: HDF5 looks for it beside the index file
                layout[a:b] = h5py.VirtualSource(os.path.relpath(s.path, out.parent), "y", shape=s.shape)
            f.create_virtual_dataset("y", layout, fillvalue=np.nan)
            if PARAMS_DATASET in src:  # a parametric data set: /params over the shards' too
                n_p = src[PARAMS_DATASET].shape[1]
                players = h5py.VirtualLayout(shape=(n_traj, n_p), dtype=np.float64)
                for s in shards:
                    a, b = int(s.meta["shard_traj_start"]), int(s.meta["shard_traj_stop"])
                    players[a:b] = h5py.VirtualSource(os.path.relpath(s.path, out.parent), PARAMS_DATASET,
                                                      shape=(b - a, n_p))
                ds = f.create_virtual_dataset(PARAMS_DATASET, players, fillvalue=np.nan)
                ds.attrs["names"] = src[PARAMS_DATASET].attrs["names"]
            label_trajectory_file(f, system=meta.get("system_class") or meta.get("system"), periodic=meta.get("periodic"))
    return out


def finished_gen_shard(path: Path, plan: GenerationPlan, n_traj: int, shard: tuple[int, int]) -> bool:
    """Whether ``path`` is shard ``shard`` of the data set ``plan`` describes (``n_traj`` trajectories in
    chunks of ``plan.chunk``: ``plan_chunks``), complete and computed by this version: the same code then
    computes the same bits, so a cluster run continued after a lost cluster keeps it (shards are renamed into
    place only when complete)."""
    from .._version import __version__

    expected = {**plan.identity(), "vpintegrator_version": __version__, "shard_n_traj": n_traj,
                "chunk_size": plan.chunk}
    return finished_shard(path, shard, expected, GEN)
