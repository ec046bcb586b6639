"""Rollout files (``vp-rollout`` output): the schema, the writer ([`RolloutWriter`][vpintegrator.data.rollouts.RolloutWriter]) and the reader
([`read_rollout`][vpintegrator.data.rollouts.read_rollout]); attributes by the one codec of both file kinds (``vpintegrator.data.h5attrs``).

A rollout file holds, for a set of trajectories of a data file, the reference and every method's states
with per-step metrics (relative error, invariants) and the volume of every step or window map. The layout
is written down in ``datasets/README.md`` ("Rollout file schema"). Counts mean what they mean in
[`Trajectories`][vpintegrator.data.trajectories.Trajectories]: ``n_states`` states per trajectory,
``n_steps = n_states - 1`` steps.

Reading gives a [`RolloutResult`][vpintegrator.data.rollouts.RolloutResult]: states as [`Trajectories`][vpintegrator.data.trajectories.Trajectories] (reference and methods), metrics
as [`MethodMetrics`][vpintegrator.data.rollouts.MethodMetrics]. This module imports neither torch nor the rollout engine.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .._io import check_h5_write
from ..errors import VPIntegratorError
from .._outputs import ROLLOUT_LIBVER, ROLLOUT_SCHEMA
from .h5attrs import _attrs_to_meta, write_attrs
from .h5labels import label_rollout_group, label_rollout_root
from .trajectories import Trajectories

if TYPE_CHECKING:  # pragma: no cover
    from ..systems import System
    from ..systems.family import SystemFamily

__all__ = [
    "ROLLOUT_SCHEMA",
    "ROLLOUT_SCHEMA_VERSION",
    "MethodMetrics",
    "RolloutResult",
    "read_rollout",
    "RolloutWriter",
    "RolloutSeries",
    "is_paper_set",
]

# root attribute ``schema``: ROLLOUT_SCHEMA (defined in vpintegrator._outputs, which tells file kinds apart)
#: root attribute ``schema_version``; version 1 (counts of states in ``n_steps``) is still read
ROLLOUT_SCHEMA_VERSION = 2
_READABLE_VERSIONS = (1, 2)


# --------------------------------------------------------------------------- writing


def _series(group, name: str, shape: tuple, chunks: tuple) -> Any:
    """A float64 dataset ``group[name]`` of ``shape`` chunked by ``chunks`` (clipped to the shape); the
    engines' blocks fill it in whole chunks along time, so one chunk of cache per dataset suffices."""
    if any(int(s) < 1 for s in shape):  # h5py would refuse the chunks with a ValueError of its own
        raise VPIntegratorError(f"the rollout's {name} would have shape {tuple(int(s) for s in shape)}: nothing to "
                                "write (a context_len or seq_len as long as the rollout, or no trajectories?); give "
                                "a longer t_end, a shorter context_len or more trajectories")
    chunks = tuple(max(1, min(int(s), int(c))) for s, c in zip(shape, chunks))
    return group.create_dataset(name, shape=tuple(shape), dtype=np.float64, chunks=chunks)


class RolloutSeries:
    """One group of a rollout file being written (``/reference`` or ``/methods/<label>``): its per-step
    datasets, filled block by block by ``write``, then ``close``. ``y`` is the states' dataset
    (n_traj, n_states, dim), readable while the file is written."""

    def __init__(self, group: Any, n_traj: int, n_states: int, dim: int, names: Sequence[str],
                 chunks: tuple[int, int], rel_error: bool,
                 map_step: np.ndarray | None) -> None:
        ct, cs = chunks
        self.group: Any = group
        self.y: Any = _series(group, "y", (n_traj, n_states, dim), (ct, cs, dim))
        self._per_step = {"y": self.y}
        if rel_error:
            self._per_step["rel_error"] = _series(group, "rel_error", (n_traj, n_states), (ct, cs))
        for name in names:
            self._per_step[f"invariant/{name}"] = _series(group, f"invariants/{name}", (n_traj, n_states), (ct, cs))
        self._per_map = {}
        if map_step is not None:
            group.create_dataset("map_step", data=map_step)
            for key in ("log_det_J", "cum_log_det_J"):
                self._per_map[key] = _series(group, key, (n_traj, len(map_step)), (ct, cs))

    def write(self, k0: int, block: Mapping[str, Any]) -> None:
        """Steps ``k0 ..`` of the fields in ``block``: any of ``"y"`` (n_traj, n, dim), ``"rel_error"``,
        ``"invariant/<name>"`` (n_traj, n) and, with ``"maps"`` (the indices of the maps the block
        completed), ``"log_det_J"``, ``"cum_log_det_J"`` (n_traj, len(maps)): an engine's block as is."""
        for key, value in block.items():
            ds = self._per_step.get(key)
            if ds is not None:
                ds[:, k0 : k0 + value.shape[1]] = value
        maps = block.get("maps")
        if self._per_map and maps is not None and block["log_det_J"].shape[1]:
            for key, ds in self._per_map.items():
                ds[:, maps] = block[key]
        check_h5_write(self.group.file)  # a full disk stops the run here, not at its end

    def close(self, failed_step: np.ndarray, attrs: Mapping[str, Any]) -> None:
        """The group's ``failed_step`` (n_traj,) int and its attributes (None values left out)."""
        self.group.create_dataset("failed_step", data=np.asarray(failed_step, dtype=np.int64))
        write_attrs(self.group, dict(attrs), skip_none=True)
        label_rollout_group(self.group, system=self.group.file.attrs.get("system_class") or
                            self.group.file.attrs.get("system"))


class RolloutWriter:
    """Writes one rollout file (layout: ``datasets/README.md``, "Rollout file schema"; read back by
    [`read_rollout`][vpintegrator.data.rollouts.read_rollout]) atomically: at ``path`` only when the ``with`` block succeeds.

    Parameters
    ----------
    path : path
    attrs : mapping
        The root attributes (``system``/``param_<name>``, ``dt``, ``t0``, counts, ``methods``, ...);
        ``schema`` and ``schema_version`` are added here.
    t : ndarray, shape (n_states,)
    traj_index : ndarray, shape (n_traj,)
        Indices of the trajectories in the data file.
    dim : int
    invariant_names : sequence of str
    chunk_steps : int
        Steps per chunk of the datasets along time (the engines' block length).
    extra_attrs : mapping, optional
        More root attributes (after ``attrs``).

    Notes
    -----
    [`reference`][vpintegrator.data.rollouts.RolloutWriter.reference] and [`method`][vpintegrator.data.rollouts.RolloutWriter.method] open the groups (``RolloutSeries``); [`finish`][vpintegrator.data.rollouts.RolloutWriter.finish] writes
    the metrics table (``summary_json``).
    """

    #: set by __init__ (declared for type checkers)
    path: Path
    n_traj: int
    n_states: int
    dim: int
    chunks: tuple[int, int]

    def __init__(self, path, attrs: Mapping[str, Any], t: np.ndarray, traj_index: np.ndarray, *, dim: int,
                 invariant_names, chunk_steps: int, extra_attrs: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.t, self.traj_index = np.asarray(t), np.asarray(traj_index)
        self.n_traj, self.n_states, self.dim = int(self.traj_index.size), int(self.t.size), int(dim)
        self.names = tuple(invariant_names)
        self.chunks = (min(self.n_traj, 64), min(self.n_states, int(chunk_steps)))
        self.attrs = {"schema": ROLLOUT_SCHEMA, "schema_version": ROLLOUT_SCHEMA_VERSION, **attrs,
                      **(extra_attrs or {})}
        self._stack: Any = None
        self._file: Any = None

    def __enter__(self) -> "RolloutWriter":
        import contextlib

        from .._io import atomic_path, h5_writing

        ct, cs = self.chunks
        # every dataset is written in whole chunks (the engines' blocks are chunk-aligned), so one chunk of
        # cache per dataset is enough; HDF5's default (8 MiB per open dataset) would only hold memory
        cache = max(1 << 16, 2 * ct * cs * self.dim * 8)
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(atomic_path(self.path, suffix=".h5"))
            self._file = stack.enter_context(h5_writing(tmp, rdcc_nbytes=cache, rdcc_w0=1.0, libver=ROLLOUT_LIBVER))
            write_attrs(self._file, self.attrs, skip_none=True)
            self._file.create_dataset("t", data=self.t)
            self._file.create_dataset("traj_index", data=self.traj_index)
            label_rollout_root(self._file, system=self.attrs.get("system_class") or self.attrs.get("system"),
                               dim=self.dim)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> bool:
        stack, self._stack, self._file = self._stack, None, None
        return bool(stack.__exit__(*exc))

    def reference(self) -> RolloutSeries:
        """``/reference``: states and invariants."""
        return RolloutSeries(self._file.create_group("reference"), self.n_traj, self.n_states, self.dim,
                             self.names, self.chunks, rel_error=False, map_step=None)

    def method(self, label: str, map_step: np.ndarray | None = None) -> RolloutSeries:
        """``/methods/<label>``: states, relative error, invariants and, given ``map_step`` (the step of
        the last state of every step/window map), the volume (``log_det_J``, ``cum_log_det_J``)."""
        return RolloutSeries(self._file.create_group(f"methods/{label}"), self.n_traj, self.n_states, self.dim,
                             self.names, self.chunks, rel_error=True, map_step=map_step)

    def finish(self, rows: list) -> None:
        """The metrics table (one dict per method) as the root attribute ``summary_json``."""
        write_attrs(self._file, {"summary_json": json.dumps(rows)})


# --------------------------------------------------------------------------- reading


@dataclass(eq=False)
class MethodMetrics:
    """Per-step metrics of one method (or the reference) in a rollout file; no states.

    Attributes
    ----------
    invariants : dict
        invariant name -> ndarray, shape (n_traj, n): the invariant along each trajectory.
    rel_error : ndarray, shape (n_traj, n), or None
        ‖y − y_ref‖ / ‖y_ref‖ per step; None for the reference.
    map_t : ndarray, shape (n_maps,), or None
        Time of the last state each step/window map produced; None when the volume was not computed.
    log_det_J, cum_log_det_J : ndarray, shape (n_traj, n_maps), or None
        ``log|det J|`` of every step/window map, and its running sum.
    """

    invariants: dict[str, Any]
    rel_error: np.ndarray | None = None
    map_t: np.ndarray | None = None
    log_det_J: np.ndarray | None = None
    cum_log_det_J: np.ndarray | None = None

    def __repr__(self) -> str:  # one line: names and shapes, never the arrays
        def shape(a):
            return None if a is None else tuple(np.shape(a))

        return (f"MethodMetrics(invariants={list(self.invariants)}, rel_error={shape(self.rel_error)}, "
                f"log_det_J={shape(self.log_det_J)})")


@dataclass(eq=False)
class RolloutResult:
    """A rollout: a file read back by [`read_rollout`][vpintegrator.data.rollouts.read_rollout], or trajectories in
    memory put together for the figures (``vpintegrator.plotting.plot_data``, which returns this type).

    Attributes
    ----------
    path : Path or None
        The file (None: built in memory).
    meta : dict
        Root attributes, flat (``system``, ``system_class``, ``param_<name>``, ``dt``, ``t0``, ``t_end``,
        ``n_states``, ``n_steps``, ``methods``, ``invariant_names``, ``data_file``, ``init``, ...), counts
        in the schema-2 meaning also for version-1 files. In memory: the first trajectories' metadata with
        ``invariant_names``.
    t : ndarray, shape (n,)
        Times read (every ``stride``-th state when ``max_points`` was given).
    traj_index : ndarray, shape (n_traj,)
        Indices of the trajectories in the data file (``data_file``); in memory their positions.
    reference : Trajectories or None
        The reference states; ``meta`` holds ``label='reference'``, ``kind='reference'``, ``source``. None
        only for trajectories in memory given without one.
    methods : dict
        label -> [`Trajectories`][vpintegrator.data.trajectories.Trajectories] of that method, in the order they were run; ``meta`` holds the
        method's attributes (``label``, ``kind``, ``source``, ``init``, ``seconds_per_step``, ...) plus the
        system's (``system``, ``param_<name>``), so that ``.system`` works; ``failed_step`` is set.
    metrics : dict
        ``'reference'`` and every method label -> [`MethodMetrics`][vpintegrator.data.rollouts.MethodMetrics].
    table : list of dict
        The metrics table rows (one per method; empty in memory).
    kinds : dict
        label -> what the method is (``"model"``, ``"integrator"``, ``"flow"``, ...): each method's ``kind``
        attribute (default ``"model"``) unless given.
    paper_set : bool or None
        Whether the trajectories are rows of the paper's 1238-point rigid-body set; None: decided from the
        metadata when first asked (``paper``).
    name : str
        What to call the rollout in messages: the file's path (default), ``"rollout"`` without one.
    """

    path: Path | None
    meta: dict[str, Any]
    t: np.ndarray
    traj_index: np.ndarray
    reference: Trajectories | None
    methods: dict[str, Any]
    metrics: dict[str, Any]
    table: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    paper_set: bool | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = str(self.path) if self.path is not None else "rollout"
        self.kinds = {**{label: str(m.meta.get("kind", "model")) for label, m in self.methods.items()},
                      **self.kinds}

    @property
    def system(self) -> "System | SystemFamily":
        """The [`System`][vpintegrator.systems.System] the rollout ran on; for a parametric rollout (root
        attributes ``parameter_columns`` and ``traj_params``: each rolled-out row's parameters) a
        ``vpintegrator.systems.family.SystemFamily`` of the rows read."""
        if self.first.params is not None:
            return self.first.systems()
        from ..systems import system_from_meta

        return system_from_meta(self.meta, self.path if self.path is not None else "rollout metadata")

    @property
    def first(self) -> Trajectories:
        """The reference, else (in memory without one) the first method's trajectories."""
        return self.reference if self.reference is not None else next(iter(self.methods.values()))

    @property
    def dt(self) -> float:
        return float(self.meta["dt"])

    @property
    def invariant_names(self) -> tuple[str, ...]:
        return tuple(self.meta.get("invariant_names", ()))

    @property
    def system_name(self) -> str:
        """The system's registry name (``"?"`` when the metadata has none)."""
        return str(self.meta.get("system", "?"))

    @property
    def n_traj(self) -> int:
        return int(np.shape(self.traj_index)[0])

    @property
    def dim(self) -> int:
        return int(self.first.dim)

    @property
    def labels(self) -> list[str]:
        """The method labels, in the order they were run (the reference not included)."""
        return list(self.methods)

    @property
    def all_labels(self) -> list[str]:
        """``'reference'`` (when there is one) and every method label, in drawing order."""
        return (["reference"] if self.reference is not None else []) + list(self.methods)

    def states(self, label: str) -> Trajectories:
        """The trajectories of ``label`` (``'reference'`` or a method)."""
        return self.reference if label == "reference" and self.reference is not None else self.methods[label]

    def has_volume(self) -> bool:
        """Whether any method has its map volumes (``log_det_J``)."""
        return any(self.metrics[k].log_det_J is not None for k in self.methods)

    @property
    def paper(self) -> bool:
        """Whether ``traj_index`` are rows of the paper's 1238-point rigid-body set (``is_paper_set``): the
        data file's metadata (``data_<key>`` root attributes where the writer recorded them, else the data
        file's own attributes when it is still there)."""
        if self.paper_set is None:
            self.paper_set = _rollout_is_paper_set(self.meta, self.path)
        return self.paper_set

    def __repr__(self) -> str:  # one line: what a notebook cell shows, never the arrays
        t = f"[{self.t[0]:g}, {self.t[-1]:g}]" if len(self.t) else "[]"
        return (f"RolloutResult(path={str(self.path) if self.path is not None else None!r}, "
                f"system={self.meta.get('system', '?')!r}, n_traj={self.n_traj}, n_states={len(self.t)}, "
                f"dim={self.dim}, t={t}, methods={self.labels})")


def is_paper_set(meta: Mapping[str, Any]) -> bool:
    """Whether trajectories with this data-file metadata are the paper's 1238-point rigid-body set (so row
    100 is the paper's "trajectory 1" and row 719 its "trajectory 4")."""
    from ..systems import PAPER_SPHERE_SIZE

    n = meta.get("n_traj")
    full = n is None or int(n) == PAPER_SPHERE_SIZE
    if meta.get("spec") == "rigid_body_paper" and full:
        return True
    return meta.get("sampler") == "paper_sphere" and n is not None and int(n) == PAPER_SPHERE_SIZE


def _rollout_is_paper_set(meta: Mapping[str, Any], path) -> bool:
    """The data file's metadata: ``data_<key>`` root attributes of the rollout where the writer recorded
    them, else the data file's own attributes (when it is still there)."""
    data_meta = {k[len("data_"):]: v for k, v in meta.items() if k.startswith("data_")}
    if not any(k in data_meta for k in ("spec", "sampler")):
        data_file = meta.get("data_file")
        if not data_file:
            return False
        p = Path(str(data_file))
        if not p.is_absolute() and path is not None and not p.exists():
            p = Path(path).parent / p
        try:
            from .trajectory_files import read_metadata

            data_meta = read_metadata(p)
        except Exception:  # the data file moved or is unreadable: number trajectories by row
            return False
    return is_paper_set(data_meta)


def _upgrade_meta(meta: dict[str, Any], path) -> dict[str, Any]:
    """Root attributes with counts in the schema-2 meaning (version 1 stored states in ``n_steps``)."""
    version = meta.get("schema_version", 1)
    if version not in _READABLE_VERSIONS:
        raise VPIntegratorError(
            f"{path}: rollout schema_version {version!r} is not supported (this vpintegrator reads "
            f"{', '.join(map(str, _READABLE_VERSIONS))}); upgrade vpintegrator or rerun vp-rollout"
        )
    if version == 1:
        if "n_steps" in meta:
            meta["n_states"] = int(meta["n_steps"])
            meta["n_steps"] = int(meta["n_steps"]) - 1
        if "data_n_steps" in meta:
            meta["data_n_states"] = int(meta["data_n_steps"])
            meta["data_n_steps"] = int(meta["data_n_steps"]) - 1
    return meta


def read_rollout(path, traj=None, max_points: int | None = None) -> RolloutResult:
    """Read a rollout file written by ``vp-rollout`` ([`vpintegrator.rollout.run_rollouts`][vpintegrator.rollout.run.run_rollouts]).

    Layout (``datasets/README.md``): root attributes; ``/t`` (n_states,); ``/traj_index`` (n_traj,);
    ``/reference/{y, invariants/<name>, failed_step}``; ``/methods/<label>/{y, rel_error,
    invariants/<name>, failed_step, map_step, log_det_J, cum_log_det_J}``.

    Parameters
    ----------
    path : path, or a list of paths
        A rollout file; or the shards of one (``vp-rollout --shard I/N``): their index file, or the list
        of the shard files, read as one rollout (checked to belong together;
        ``vpintegrator.data.rollout_shards``), equal to the unsharded rollout to the last bit (the
        timings apart).
    traj : int, list of int or None
        Positions in the rollout file (0 .. n_traj − 1, the rows of ``/traj_index``; not data-file
        indices) to read, sorted and without repeats; default all.
    max_points : int, optional
        Read every k-th state so that at most about ``max_points`` times come back (plots of long rollouts).

    Returns
    -------
    RolloutResult
    """
    import h5py

    if max_points is not None and (isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer))
                                   or max_points < 2):
        raise VPIntegratorError(
            f"max_points must be a whole number >= 2 (time points per curve) or None; got {max_points!r}",
            key="max_points",
        )
    from .rollout_shards import is_rollout_set, open_rollout_set

    if isinstance(path, (list, tuple)) and len(path) == 1:
        path = path[0]
    if not isinstance(path, (list, tuple)):
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        if path.is_dir():
            raise VPIntegratorError(f"{path}: is a directory; give a rollout file written by vp-rollout")
    if is_rollout_set(path):  # shards of one rollout (their list, or their index): read as one
        f, path = open_rollout_set(path)
    else:
        try:
            f = h5py.File(path, "r")
        except OSError as err:
            raise VPIntegratorError(
                f"{path}: not a readable HDF5 file ({' '.join(str(err).split())}); give a vp-rollout output"
            ) from None
    with f:
        meta = _attrs_to_meta(f.attrs)
        if meta.get("schema") != ROLLOUT_SCHEMA:
            raise VPIntegratorError(
                f"{path}: root attribute 'schema' is {meta.get('schema')!r}, expected {ROLLOUT_SCHEMA!r}; "
                "give a file written by vp-rollout"
            )
        meta = _upgrade_meta(meta, path)
        n_total = f["t"].shape[0]
        stride = 1 if not max_points or n_total <= max_points else -(-n_total // int(max_points))
        steps = slice(0, None, stride)
        n_traj_file = f["traj_index"].shape[0]
        if traj is None:
            rows: Any = slice(None)
        else:
            rows = np.atleast_1d(np.asarray(traj, dtype=np.int64))
            if rows.size == 0 or rows.min() < 0 or rows.max() >= n_traj_file:
                raise VPIntegratorError(
                    f"{path}: traj {traj!r} out of range; the file holds {n_traj_file} trajectories", key="traj"
                )
            rows = np.unique(rows)
        t = f["t"][steps]
        names = tuple(meta.get("invariant_names", ()))
        system_keys = {k: v for k, v in meta.items() if k in ("system", "system_class") or k.startswith("param_")}
        params, columns = None, ()  # type: tuple[np.ndarray | None, tuple[str, ...]]
        if isinstance(meta.get("traj_params"), list) and meta.get("parameter_columns"):  # a parametric rollout
            columns = tuple(str(c) for c in meta["parameter_columns"])
            params = np.asarray(meta["traj_params"], dtype=np.float64).reshape(-1, len(columns))
            if params.shape[0] != n_traj_file:
                raise VPIntegratorError(f"{path}: attribute 'traj_params' has {params.shape[0]} rows for "
                                        f"{n_traj_file} trajectories; the file is damaged")
            params = params[rows]

        def read2(ds, cols):
            return ds[:, cols][rows] if isinstance(rows, np.ndarray) else ds[rows, cols]

        def read_group(g) -> tuple[Trajectories, MethodMetrics]:
            y = read2(g["y"], steps)
            inv = {n: read2(g[f"invariants/{n}"], steps) for n in names if f"invariants/{n}" in g}
            err = read2(g["rel_error"], steps) if "rel_error" in g else None
            map_t = ld = cum = None
            if "log_det_J" in g:
                n_maps = g["map_step"].shape[0]
                ms = slice(0, None, 1 if not max_points or n_maps <= max_points else -(-n_maps // int(max_points)))
                map_t = float(meta["t0"]) + float(meta["dt"]) * g["map_step"][ms]
                ld, cum = read2(g["log_det_J"], ms), read2(g["cum_log_det_J"], ms)
            failed = g["failed_step"][:][rows]
            attrs = {**system_keys, "dt": float(meta["dt"]), **_attrs_to_meta(g.attrs)}
            return (Trajectories(y=y, t=t, meta=attrs, failed_step=failed, params=params, param_names=columns),
                    MethodMetrics(inv, err, map_t, ld, cum))

        for name in ["reference", "traj_index", *(f"methods/{label}" for label in meta.get("methods", []))]:
            try:
                f[name]
            except (KeyError, OSError):  # deleted, or a dangling link: h5py's KeyError would be a traceback
                raise VPIntegratorError(
                    f"{path}: the rollout file lists {name!r} but has no readable object '/{name}' (deleted or "
                    "damaged); write the rollout again with vp-rollout") from None
        reference, ref_metrics = read_group(f["reference"])
        reference.meta.setdefault("label", "reference")
        reference.meta.setdefault("kind", "reference")
        methods: dict[str, Trajectories] = {}
        metrics: dict[str, MethodMetrics] = {"reference": ref_metrics}
        for label in meta.get("methods", []):
            methods[label], metrics[label] = read_group(f[f"methods/{label}"])
            methods[label].meta.setdefault("label", label)
        idx = f["traj_index"][:][rows]
    table = json.loads(meta.get("summary_json", "[]"))
    return RolloutResult(
        path=path, meta=meta, t=t, traj_index=idx, reference=reference, methods=methods, metrics=metrics,
        table=table,
    )
