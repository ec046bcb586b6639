"""Trajectories in HDF5 files (schema v2, documented in ``datasets/README.md``).

Layout: ``/t`` (n_states,) float64, ``/y`` (n_traj, n_states, dim) float64, metadata as root attributes
(``schema_version``, ``system``, ``system_class`` (user-defined systems), ``dim``, ``dt``, ``method``,
``rtol``, ``atol``, ``seed``, ``n_traj``, ``n_states``, ``n_steps`` (= n_states − 1), ``t_end``,
``invariant_names``, ``param_<name>`` for each system parameter,
``vpintegrator_version``, ``provenance`` (JSON text: [`vpintegrator.provenance`][vpintegrator.provenance]; read back as a dict),
and whatever else the producer recorded). ``/y`` is chunked along
trajectories and gzip-compressed (shuffle + deflate; the writer keeps the byte planes that are noise in
stored deflate blocks, ``vpintegrator.data._parallel.deflate_planes``: any HDF5 reads it). Every write is
atomic: a temporary file beside the target, renamed onto it only when complete, so an interrupted write
leaves no partial file and an earlier file intact. Schema v1 files (whose ``n_steps`` counted states) are
still read; their metadata comes back in the v2 meaning.

Here: the writer ([`TrajectoryWriter`][vpintegrator.data.trajectory_files.TrajectoryWriter], chunk by chunk;
[`write_trajectories`][vpintegrator.data.trajectory_files.write_trajectories], a whole
[`Trajectories`][vpintegrator.data.trajectories.Trajectories]) and the readers
([`read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories],
[`read_metadata`][vpintegrator.data.trajectory_files.read_metadata]) of one file, a list of files or a shard set.
One file is read and validated by ``vpintegrator.data.trajectory_reader``, a shard set by
``vpintegrator.data.shards``; the attributes go through the one codec (``vpintegrator.data.h5attrs``) and the
dimension scales are ``vpintegrator.data.h5labels``'.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import h5py
import numpy as np

from .._io import atomic_path, check_h5_write, h5_writing
from .._outputs import check_output, output_lock
from .._version import __version__
from ..errors import VPIntegratorError
from ..jobs.shards import is_shard_set
from ..provenance import provenance_record
from ..systems.registry import PARAM_PREFIX
from .h5attrs import _meta_to_attrs
from .h5checks import check_output_path, time_grid_problem
from .h5labels import label_trajectory_file
from .shards import read_shard_metadata, read_shard_set
from .trajectories import Trajectories
from .trajectory_reader import PARAMS_DATASET, SCHEMA_VERSION, _index, _open, _read_one, _validate, file_meta, read_time

__all__ = ["TrajectoryWriter", "read_metadata", "read_trajectories", "write_trajectories"]


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
        HDF5 filter for ``/y``, after the shuffle filter: ``"gzip"`` (readable everywhere; whole chunk rows
        are compressed by ``deflate_planes``, which stores the noise bytes, ~4x less CPU than zlib on all of
        them for a file as small), ``"lzf"`` (h5py-only, larger and slower than gzip here) or None (no filter,
        ~20 % larger for float64 trajectories).
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
                                  traj_start=int(self._meta.get("shard_traj_start") or 0),
                                  periodic=self._meta.get("periodic"))
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
        direct, pieces = self.direct, None
        if direct is not None:
            from ._parallel import encode_chunks  # here: a reader of files never needs the encoder

            pieces = encode_chunks(y_chunk, start_traj, n_traj, *direct)
        if pieces is not None:  # whole chunk rows: compressed here, the noise bytes stored (encode_chunks)
            self.write_encoded(start_traj, k, pieces)
            return
        self._y[start_traj : start_traj + k] = y_chunk
        check_h5_write(self._file)  # a full disk stops the run here, not at its end
        self._written[start_traj : start_traj + k] = True

    @property
    def direct(self) -> tuple[tuple[int, int, int], int] | None:
        """``(chunk shape, gzip level)`` of ``/y`` when chunks compressed elsewhere may be stored as they
        are ([`write_encoded`][vpintegrator.data.trajectory_files.TrajectoryWriter.write_encoded]; gzip + shuffle), else None."""
        if self._y is None or self._compression != "gzip":
            return None
        return self._y.chunks, 4

    def write_encoded(self, start_traj: int, k: int, pieces) -> None:
        """Store trajectories ``start_traj : start_traj + k`` given as compressed HDF5 chunks
        ``[(offset, bytes), ...]`` (``vpintegrator.data._parallel.encode_chunks`` with [`direct`][vpintegrator.data.trajectory_files.TrajectoryWriter.direct])."""
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
        As [`TrajectoryWriter`][vpintegrator.data.trajectory_files.TrajectoryWriter]'s (None: no filter).
    overwrite : bool, default False
        Replace an existing trajectory file at ``path`` (anything else there is never replaced).
    provenance : dict, optional
        As [`TrajectoryWriter`][vpintegrator.data.trajectory_files.TrajectoryWriter]'s: the ``provenance`` attribute (default: a record of this process).

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


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a trajectory file: its root attributes as a dict (``param_<name>`` kept flat).

    Validates the schema like [`read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories] but reads no arrays. ``n_states`` and
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
