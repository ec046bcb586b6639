"""Shards of one rollout: ``vp-rollout ... --shard I/N`` files, their index file, and reading them as one.

The selected trajectories of a comparison run are cut into ``N`` contiguous blocks (``rollout_bounds``);
shard ``I`` of an output ``rollout.h5`` is the rollout file ``rollout.shard-I-of-N.h5`` beside it
(``vpintegrator.jobs.shards.shard_path``, as ``vp-gen``). Every method and metric of a rollout is
computed trajectory by trajectory (the Newton iterations of the implicit methods stop per trajectory, the
metrics are per trajectory, the compiled single-trajectory runners are chosen by the size of the whole
selection), so a shard's rows are those of the unsharded file to the last bit. Besides a rollout file's
contents a shard records ``shard_index``, ``shard_count``, ``shard_traj_start``, ``shard_traj_stop``,
``shard_n_traj`` (the whole selection's size), ``shard_selection`` (a digest of the whole selection's
data-file indices) and, in a ``per_traj`` group of ``/reference`` and of every method, the per-trajectory
values the metrics table aggregates, from which the merged table is computed.

When the last shard is written, the **index file** appears at ``rollout.h5`` itself: a rollout file whose
per-trajectory datasets are virtual datasets over the shards' (any HDF5 tool sees the whole arrays), whose
attributes and table are those of the whole run (``summary_json`` and the methods' ``summary_*``
recomputed from the shards' per-trajectory values; ``n_traj``, ``n_failed`` summed; the timings
``seconds``, ``setup_seconds``, ``seconds_per_step`` summed over the shards: the cost on one core), and
whose attribute ``shard_files`` lists the shards relative to it.

``RolloutParts``: the part files of a run's classical methods (rollout files of blocks of its trajectories,
written by worker processes: ``vp-rollout --workers``) copied into the one rollout file being written.
[`read_rollout`][vpintegrator.data.rollouts.read_rollout] and ``vp-plot`` open the index, or the list of the shard
files, after checking that the shards belong together (``vpintegrator.jobs.shards.collect``:
every shard present once, no gaps or overlaps, the same run: system, dt, horizon, methods, selection).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .._io import atomic_path, h5_writing
from .._outputs import ROLLOUT_LIBVER, ROLLOUT_SCHEMA
from ..errors import VPIntegratorError
from .h5attrs import _attrs_to_meta
from .h5labels import label_rollout_group, label_rollout_root
from ..jobs.shards import INDEX_KEY, SHARD_KEYS, ShardKind, collect, is_index, selection_bounds, shard_path
from .summary import split_summary_rows, summary_row

__all__ = ["PER_TRAJ", "ROLLOUT", "rollout_bounds", "selection_digest", "write_per_traj", "is_rollout_set",
           "open_rollout_set", "write_rollout_index", "RolloutParts"]

#: the group (in ``/reference`` and every ``/methods/<label>`` of a shard) of per-trajectory summary values
PER_TRAJ = "per_traj"
#: per_traj/split: each trajectory's split label (bytes), the rows of the merged table
SPLIT = "split"
#: trajectories per block of a rollout's selection: the rows of one chunk of the rollout file's datasets
BLOCK = 64
# root attributes that must agree between the shards of one rollout
_SAME = ("schema", "schema_version", "system", "system_class", "dim", "dt", "t0", "t_end", "n_states", "n_steps",
         "invariant_names", "methods", "method_kinds", "data_method", "data_n_states", "init", "overlap", "blowup",
         "chunk_steps", "engine", "shard_count", "shard_n_traj", "shard_selection")
# root attributes of a shard that the whole rollout does not have (n_traj and the table are recomputed)
_PER_SHARD = (*SHARD_KEYS, "shard_selection", "shard_run")
# timings of a method, summed over the shards
_TIMES = ("seconds", "setup_seconds", "seconds_per_step", "wall_seconds", "warmup_seconds")


def _head(path: Path) -> tuple[dict, tuple[int, int, int], np.ndarray]:
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise VPIntegratorError(f"{path}: not a readable HDF5 file ({' '.join(str(err).split())}); give the "
                                "shards of one vp-rollout --shard run") from None
    with f:
        meta = _attrs_to_meta(f.attrs)
        if meta.get("schema") != ROLLOUT_SCHEMA or "reference/y" not in f or "t" not in f:
            raise VPIntegratorError(f"{path}: not a rollout file (root attribute 'schema' is {meta.get('schema')!r}); "
                                    "give the shards of one vp-rollout --shard run")
        return meta, tuple(f["reference/y"].shape), f["t"][:]


#: the shards of a rollout (vp-rollout)
ROLLOUT = ShardKind("vp-rollout", _SAME, head=_head)


def rollout_bounds(n_traj: int, shard: tuple[int, int]) -> tuple[int, int]:
    """Positions ``[start, stop)`` in the selection of shard ``I/N``: the I-th of N contiguous runs of whole
    blocks of ``BLOCK`` trajectories (blocks of ``n_traj // N`` when they are fewer than ``N``)."""
    return selection_bounds(n_traj, shard, BLOCK)


def selection_digest(idx: np.ndarray) -> str:
    """A short digest of a selection's data-file indices (the shards of one run have the same)."""
    return hashlib.sha256(np.ascontiguousarray(idx, dtype="<i8").tobytes()).hexdigest()[:16]


def write_per_traj(group, summary: dict[str, Any], max_abs_cum: Any = None, labels: Any = None) -> None:
    """``<group>/per_traj/<key>`` (n_traj,): the per-trajectory summary values of a method or the reference
    (``TrajectoryMetricsStream.summary()``; ``max_abs_cum_log_det_J`` when the volume was computed), and
    ``per_traj/split`` (bytes), each trajectory's ``split`` label, for a method."""
    from ..arrays import to_numpy

    g = group.create_group(PER_TRAJ)
    for key, value in summary.items():
        g.create_dataset(key, data=np.asarray(to_numpy(value), dtype=np.float64))
    if max_abs_cum is not None:
        g.create_dataset("max_abs_cum_log_det_J", data=np.asarray(to_numpy(max_abs_cum), dtype=np.float64))
    if labels is not None:
        g.create_dataset(SPLIT, data=np.asarray([str(x) for x in labels], dtype="S8"))


def is_rollout_set(path: Any) -> bool:
    """Whether ``path`` is a list of paths (shards) or a rollout index file."""
    if isinstance(path, (list, tuple)):
        return True
    p = Path(path)
    return p.is_file() and is_index(p)


def _groups(f: h5py.File, meta: dict[str, Any]) -> list[str]:
    return ["reference", *(f"methods/{label}" for label in meta.get("methods", []))]


def _per_traj_datasets(group: h5py.Group) -> list[str]:
    """The names (relative to ``group``) of its datasets with one row per trajectory."""
    names: list[str] = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name != "map_step":
            names.append(name)

    group.visititems(visit)
    return sorted(names)


def _merged(shards) -> tuple[dict, dict[str, dict], list[dict]]:
    """(root attributes to set, group -> attributes to set, table rows) of the whole rollout."""
    meta = shards[0].meta
    names = tuple(meta.get("invariant_names", ()))
    n_traj = sum(s.shape[0] for s in shards)
    files = [h5py.File(s.path, "r") for s in shards]
    try:
        groups: dict[str, dict] = {}
        rows = []
        for name in _groups(files[0], meta):
            if any(PER_TRAJ not in f[name] for f in files):
                bad = next(s.path for s, f in zip(shards, files) if PER_TRAJ not in f[name])
                raise VPIntegratorError(f"{bad}: '{name}' has no per-trajectory values ('{PER_TRAJ}'); write the "
                                        "shard again with this vpintegrator (vp-rollout --shard)")
            per = {k: np.concatenate([f[name][PER_TRAJ][k][:] for f in files])
                   for k in files[0][name][PER_TRAJ]}
            failed = np.concatenate([f[name]["failed_step"][:] for f in files])
            attrs = [_attrs_to_meta(f[name].attrs) for f in files]
            # per-row lists (the split label of each rolled-out row) run over the shards in order
            listed = {k: [v for a in attrs for v in a[k]] for k in ("split",) if isinstance(attrs[0].get(k), list)}
            if name == "reference":
                groups[name] = {**{f"max_rel_drift_{n}": float(np.max(per[f"max_rel_drift_{n}"])) for n in names
                                   if f"max_rel_drift_{n}" in attrs[0]}, **listed}
                continue
            label = name.split("/", 1)[1]
            times = {k: float(sum(float(a.get(k, 0.0)) for a in attrs)) for k in _TIMES if k in attrs[0]}
            labels = per.pop(SPLIT, None)
            cum = per.pop("max_abs_cum_log_det_J", None)
            seconds = times.get("seconds_per_step", float("nan"))
            row = summary_row(label, per, names, max_abs_cum_log_det_J=cum, seconds_per_step=seconds,
                              failed_step=failed)
            if labels is None:  # a shard written before split labels
                rows.append(row)
            else:
                rows.extend(split_summary_rows(label, per, names, [x.decode() for x in labels],
                                               str(meta.get("reference_mode", "data")),
                                               max_abs_cum_log_det_J=cum, seconds_per_step=seconds,
                                               failed_step=failed))
            groups[name] = {**times, **listed, "n_traj": n_traj, "n_failed": int(np.sum(failed >= 0)),
                            **{f"summary_{k}": v for k, v in row.items() if k != "method"}}
    finally:
        for f in files:
            f.close()
    root = {"n_traj": n_traj, "summary_json": json.dumps(rows)}
    if isinstance(meta.get("traj_split"), list):
        root["traj_split"] = [v for s in shards for v in s.meta.get("traj_split", [])]
    if isinstance(meta.get("traj_params"), list):  # a parametric rollout: every shard's rows' parameters
        root["traj_params"] = json.dumps([row for s in shards for row in s.meta.get("traj_params", [])])  # JSON, as
        # the shards store it (json_keys)
    return root, groups, rows


def _set(attrs, values: dict[str, Any]) -> None:
    for key, value in values.items():
        attrs[key] = value


def _build(f: h5py.File, shards, source) -> list[dict]:
    """Fill ``f`` (empty) as the whole rollout over ``shards``: virtual per-trajectory datasets (sources
    named by ``source(path)``), the rest copied from the first shard, the attributes merged."""
    root, groups, rows = _merged(shards)
    n_traj = root["n_traj"]
    with h5py.File(shards[0].path, "r") as first:
        for key, value in first.attrs.items():
            if key not in _PER_SHARD:
                f.attrs[key] = value
        _set(f.attrs, root)
        f.create_dataset("t", data=first["t"][:])

        def virtual(name: str) -> None:
            ds = first[name]
            layout = h5py.VirtualLayout(shape=(n_traj, *ds.shape[1:]), dtype=ds.dtype)
            stop = 0
            for s in shards:
                with h5py.File(s.path, "r") as g:
                    shape = g[name].shape
                layout[stop : stop + shape[0]] = h5py.VirtualSource(source(s.path), name, shape=shape)
                stop += shape[0]
            fill = {"f": np.nan, "S": b""}.get(ds.dtype.kind, -1)
            f.create_virtual_dataset(name, layout, fillvalue=fill)

        virtual("traj_index")
        for name in _groups(first, _attrs_to_meta(first.attrs)):
            group = f.create_group(name)
            for key, value in first[name].attrs.items():
                group.attrs[key] = value
            _set(group.attrs, groups[name])
            for sub in _per_traj_datasets(first[name]):
                virtual(f"{name}/{sub}")
            if "map_step" in first[name]:
                group.create_dataset("map_step", data=first[name]["map_step"][:])
        meta = _attrs_to_meta(first.attrs)
        system = meta.get("system_class") or meta.get("system")
        if "trajectory" in first:  # shards written with dimension scales: the whole rollout gets them too
            traj_rows = []
            for shard in shards:  # from the shards (the virtual /traj_index may not resolve until written)
                with h5py.File(shard.path, "r") as g:
                    traj_rows.append(g["traj_index"][()])
            label_rollout_root(f, system=system, dim=int(first["reference/y"].shape[2]),
                               traj_index=np.concatenate(traj_rows))
            for name in _groups(first, meta):
                label_rollout_group(f[name], system=system)
    return rows


def open_rollout_set(path: Any) -> tuple[h5py.File, Path]:
    """The shards of a rollout (a list of shard files, or the index file), checked, as one rollout file:
    an HDF5 file in memory over them ([`read_rollout`][vpintegrator.data.rollouts.read_rollout] reads it); and the
    path to name it by (the index, else the first shard)."""
    paths = [Path(p) for p in (path if isinstance(path, (list, tuple)) else [path])]
    if not paths:
        raise VPIntegratorError("no rollout files given; give a rollout file, its shards or their index")
    for p in paths:
        if p.is_dir():
            raise VPIntegratorError(f"{p}: is a directory; give the shard files of one vp-rollout --shard run")
    shards, index = collect(paths, ROLLOUT)
    f = h5py.File(f"rollout-set-{id(paths)}.h5", "w", driver="core", backing_store=False)
    try:
        _build(f, shards, lambda p: str(Path(p).resolve()))
        f.attrs["source_files"] = np.array([str(s.path) for s in shards], dtype=h5py.string_dtype())
        if index is not None:
            f.attrs["index_file"] = str(index)
    except BaseException:
        f.close()
        raise
    return f, index if index is not None else shards[0].path


def write_rollout_index(out: str | os.PathLike[str], count: int) -> list[dict]:
    """Write the index file ``out`` over shards ``1..count`` of ``out`` (atomically); return the whole
    rollout's table rows (for its ``.csv``/``.md``). Checks first that the shards belong together."""
    out = Path(out)
    paths = [shard_path(out, (i, count)) for i in range(1, count + 1)]
    shards, _ = collect(paths, ROLLOUT)
    with atomic_path(out, suffix=".h5") as tmp:
        with h5_writing(tmp, libver=ROLLOUT_LIBVER) as f:  # a label per trajectory: over 64 KiB of attributes
            # relative source names: HDF5 looks for them beside the index file
            rows = _build(f, shards, lambda p: os.path.relpath(p, out.parent))
            f.attrs["shard_count"] = count
            f.attrs["shard_n_traj"] = int(shards[0].meta["shard_n_traj"])
            f.attrs[INDEX_KEY] = json.dumps([p.name for p in paths])
    return rows


class RolloutParts:
    """The part files of a rollout (rollout files of contiguous blocks of its trajectories, written by worker
    processes, checked to belong together), copied into the rollout file being written, block by block in
    the order of the trajectories. ``per_traj``: copy the per-trajectory values too (the run is a shard)."""

    def __init__(self, paths: list[Path], per_traj: bool) -> None:
        self.per_traj = per_traj
        self.shards, _ = collect(paths, ROLLOUT)
        _, self.attrs, _rows = _merged(self.shards)  # the groups' merged attributes
        self.per: dict[str, np.ndarray] = {}
        self._first_attrs: dict[str, Any] = {}

    def _copy(self, series, name: str, cs: int) -> np.ndarray:
        """Copy every dataset of group ``name`` of the parts into ``series``; the merged failed_step."""
        failed, start = [], 0
        per: dict[str, list] = {}
        for s in self.shards:
            with h5py.File(s.path, "r") as f:
                g = f[name]
                names: list[str] = []
                g.visititems(lambda k, obj: names.append(k) if isinstance(obj, h5py.Dataset) else None)
                for k in names:
                    if k.startswith(PER_TRAJ + "/"):
                        per.setdefault(k, []).append(g[k][()])
                    if k in ("map_step", "failed_step") or k.startswith(PER_TRAJ + "/"):
                        continue
                    src, dst = g[k], series.group[k]
                    for k0 in range(0, src.shape[1], cs):
                        dst[start : start + src.shape[0], k0 : k0 + cs] = src[:, k0 : k0 + cs]
                failed.append(g["failed_step"][:])
                if start == 0:
                    self._first_attrs = _attrs_to_meta(g.attrs)
                start += s.shape[0]
        self.per = {k.split("/", 1)[1]: np.concatenate(parts) for k, parts in per.items()}
        if self.per_traj:
            for k, parts in per.items():
                if k != f"{PER_TRAJ}/{SPLIT}":  # a method's split labels are this run's (set by method())
                    series.group.create_dataset(k, data=np.concatenate(parts))
        return np.concatenate(failed)

    def reference(self, writer, split: list) -> Any:
        """``/reference`` copied into ``writer`` (a ``RolloutWriter``), with this run's ``split`` labels;
        its states."""
        series = writer.reference()
        failed = self._copy(series, "reference", writer.chunks[1])
        series.close(failed, {**self._first_attrs, **self.attrs["reference"], "split": list(split)})
        return series.y

    def method(self, writer, label: str, split: list) -> tuple[dict[str, np.ndarray], Any, np.ndarray, dict]:
        """Method ``label`` copied into ``writer`` with this run's ``split`` labels: ``(per_traj,
        max_abs_cum_log_det_J or None, failed_step, attrs)`` over the whole run (the table rows are made from
        them by the caller)."""
        name = f"methods/{label}"
        with h5py.File(self.shards[0].path, "r") as f:
            map_step = f[name]["map_step"][:] if "map_step" in f[name] else None
        series = writer.method(label, map_step=map_step)
        failed = self._copy(series, name, writer.chunks[1])
        per = dict(self.per)
        per.pop(SPLIT, None)  # the workers ran without the models: the labels are this run's
        cum = per.pop("max_abs_cum_log_det_J", None)
        if self.per_traj:
            series.group[PER_TRAJ].create_dataset(SPLIT, data=np.asarray(split, dtype="S8"))
        attrs = {**self._first_attrs, **self.attrs[name], "split": list(split)}
        series.close(failed, attrs)
        return per, cum, failed, attrs
