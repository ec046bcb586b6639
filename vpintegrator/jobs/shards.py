"""Shards of a selection: ``--shard I/N`` blocks, the files beside an output, their index, for any file kind.

A selection of ``n`` trajectories is cut into ``N`` contiguous blocks of whole chunks (``shard_bounds``);
shard ``I`` (1-based) of an output ``out.h5`` is the file ``out.shard-I-of-N.h5`` beside it
(``shard_path``), which records ``shard_index``, ``shard_count``, ``shard_traj_start``,
``shard_traj_stop`` and ``shard_n_traj`` (``SHARD_KEYS``). Once every shard exists the **index file**
appears at ``out`` (``index_when_complete``); its attribute ``shard_files`` (``INDEX_KEY``) lists the
shards relative to it. ``collect`` checks that shard files (or an index) form one whole set: every shard
once, no gaps or overlaps, the attributes ``kind.same`` equal. What a file kind reads and writes is a
``ShardKind``: trajectory files (``vpintegrator.data.shards.GEN``) and rollout files
(``vpintegrator.data.rollout_shards.ROLLOUT``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import h5py
import numpy as np

from .._outputs import check_output, output_lock
from ..errors import VPIntegratorError

__all__ = ["SHARD_KEYS", "INDEX_KEY", "parse_shard", "shard_bounds", "selection_bounds", "shard_path", "Shard", "ShardKind",
           "is_index", "is_shard_set", "index_files", "collect", "finished_shard", "index_when_complete"]

#: attributes of a shard file (set by its writer) and of the index file
SHARD_KEYS = ("shard_index", "shard_count", "shard_traj_start", "shard_traj_stop", "shard_n_traj")
#: the index file's attribute listing its shards (JSON, relative to it)
INDEX_KEY = "shard_files"
_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(value: Any, key: str = "shard") -> tuple[int, int] | None:
    """``"I/N"`` or ``(I, N)`` -> ``(I, N)`` with ``1 <= I <= N`` (None stays None)."""
    if value is None:
        return None
    how = f"give {key} as I/N with 1 <= I <= N, e.g. 2/8 for the second of eight blocks"
    if isinstance(value, str):
        m = _SHARD_RE.match(value)
        if not m:
            raise VPIntegratorError(f"{key} must be I/N; got {value!r}; {how}", key=key)
        i, n = int(m.group(1)), int(m.group(2))
    elif (isinstance(value, (tuple, list)) and len(value) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)):
        i, n = int(value[0]), int(value[1])
    else:
        raise VPIntegratorError(f"{key} must be I/N or a pair (I, N); got {value!r}; {how}", key=key)
    if n < 1 or not 1 <= i <= n:
        raise VPIntegratorError(f"{key} {i}/{n} is out of range; {how}", key=key)
    return i, n


def shard_bounds(n_traj: int, chunk: int, shard: tuple[int, int]) -> tuple[int, int]:
    """Trajectories ``[start, stop)`` of shard ``I/N``: the I-th of N contiguous runs of whole chunks."""
    i, n = shard
    n_chunks = -(-n_traj // chunk)
    if n > n_chunks:
        raise VPIntegratorError(
            f"shard {i}/{n}: {n_traj} trajectories make only {n_chunks} chunk(s) of {chunk}, and shards are "
            f"made of whole chunks; give at most {n_chunks} shards, or a smaller chunk_size", key="shard")
    first, last = (i - 1) * n_chunks // n, i * n_chunks // n
    return first * chunk, min(last * chunk, n_traj)


def selection_bounds(n_traj: int, shard: tuple[int, int], block: int) -> tuple[int, int]:
    """Positions ``[start, stop)`` in a selection of ``n_traj`` trajectories of shard ``I/N``: the I-th of N
    contiguous runs of whole blocks of ``block`` trajectories (blocks of ``n_traj // N`` when they are fewer
    than ``N``); every shard holds at least one trajectory."""
    if shard[1] > n_traj:
        raise VPIntegratorError(f"shard {shard[0]}/{shard[1]}: the run selects only {n_traj} trajectories, and a "
                                f"shard holds at least one; give at most {n_traj} shards", key="shard")
    return shard_bounds(n_traj, max(1, min(block, n_traj // shard[1])), shard)


def shard_path(out: str | os.PathLike[str], shard: tuple[int, int]) -> Path:
    """Where shard ``I/N`` of the output ``out`` goes: ``<stem>.shard-I-of-N<suffix>`` beside it."""
    out = Path(out)
    i, n = shard
    return out.with_name(f"{out.stem}.shard-{i}-of-{n}{out.suffix or '.h5'}")


@dataclass(frozen=True)
class Shard:
    """One shard file: its path, its metadata, the shape ``(n_traj, n_states, dim)`` of its states and its
    time grid ``t``."""

    path: Path
    meta: dict[str, Any]
    shape: tuple[int, int, int]
    t: np.ndarray


class ShardHead(Protocol):
    """How a file kind's shard is read: ``head(path) -> (meta, (n_traj, n_states, dim), t)``; a file that
    is not of the kind is a one-line ``VPIntegratorError``."""

    def __call__(self, path: Path) -> tuple[dict[str, Any], tuple[int, int, int], np.ndarray]: ...


@dataclass(frozen=True)
class ShardKind:
    """What differs between the shards of a data set and those of a rollout (``vp-rollout --shard``):
    the command that writes them (named in the messages), the metadata that must agree, and how a shard's
    head is read."""

    tool: str
    same: tuple[str, ...]
    head: ShardHead


def is_index(path: Path) -> bool:
    """Whether ``path`` is an HDF5 shard index (has the attribute ``shard_files``)."""
    try:
        with h5py.File(path, "r") as f:
            return INDEX_KEY in f.attrs
    except (OSError, ValueError):
        return False


def is_shard_set(paths: list[Path]) -> bool:
    """Whether ``paths`` is an index file, or several shard files (of any file kind; else plain files, read
    as before; one shard alone is read as the block it holds)."""
    if len(paths) == 1:
        return paths[0].is_file() and is_index(paths[0])
    for p in paths:
        if p.is_file():
            try:
                with h5py.File(p, "r") as f:
                    if SHARD_KEYS[0] in f.attrs or INDEX_KEY in f.attrs:
                        return True
            except (OSError, ValueError):
                pass
    return False


def index_files(index: Path) -> list[Path]:
    """The shard files an index lists, beside it."""
    try:
        with h5py.File(index, "r") as f:
            value = f.attrs[INDEX_KEY]
        names = json.loads(value.decode() if isinstance(value, bytes) else value)
    except (OSError, KeyError, ValueError, TypeError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names:
        raise VPIntegratorError(f"{index}: attribute '{INDEX_KEY}' is not a JSON list of shard files; "
                                "write the index again (vpintegrator.data.shards.write_shard_index)")
    return [index.parent / n for n in names]


def collect(paths: list[Path], kind: ShardKind) -> tuple[list[Shard], Path | None]:
    """The shards (checked to form one whole data set, or rollout), in shard order; and the index file, if
    given."""
    tool = kind.tool
    index = None
    if len(paths) == 1 and is_index(paths[0]):
        index = paths[0]
        paths = index_files(index)
    elif any(is_index(p) for p in paths if p.is_file()):
        raise VPIntegratorError(f"{next(p for p in paths if p.is_file() and is_index(p))}: is a shard index; "
                                "give it alone, or the list of its shard files without it")
    where = f"{index}: " if index is not None else ""
    shards = []
    for p in paths:
        if not p.exists():
            raise VPIntegratorError(f"{where}shard file {p} is missing; run {tool} again with the --shard it "
                                    "names (or give the complete list of shards)")
        meta, shape, t = kind.head(p)
        if "shard_index" not in meta:
            raise VPIntegratorError(f"{p}: not a shard (no attribute 'shard_index'), but read together with "
                                    f"shards; give the shards of one {tool} --shard run only")
        shards.append(Shard(p, meta, shape, t))
    first = shards[0]
    for s in shards[1:]:
        for key in kind.same:
            a, b = first.meta.get(key), s.meta.get(key)
            if a != b:
                raise VPIntegratorError(
                    f"{s.path}: belongs to another data set (attribute '{key}' is {b!r} but {first.path} has "
                    f"{a!r}); give only the shards of one {tool} --shard run")
        params = {k for k in {**first.meta, **s.meta} if k.startswith("param_")}
        for key in sorted(params):
            if first.meta.get(key) != s.meta.get(key):
                raise VPIntegratorError(
                    f"{s.path}: belongs to another data set (attribute '{key}' is {s.meta.get(key)!r} but "
                    f"{first.path} has {first.meta.get(key)!r}); give only the shards of one {tool} --shard run")
        if s.shape[1:] != first.shape[1:] or not np.array_equal(s.t, first.t):
            raise VPIntegratorError(f"{s.path}: belongs to another data set (its '/t' or dim differs from "
                                    f"{first.path}'s); give only the shards of one {tool} --shard run")
    count, total = int(first.meta["shard_count"]), int(first.meta["shard_n_traj"])
    by_index: dict[int, Shard] = {}
    for s in shards:
        i = int(s.meta["shard_index"])
        if i in by_index:
            raise VPIntegratorError(f"{s.path}: shard {i}/{count} given twice (also {by_index[i].path}); "
                                    "give each shard once")
        by_index[i] = s
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        hint = shard_path(index, (missing[0], count)) if index is not None else \
            f"the file of --shard {missing[0]}/{count}"
        raise VPIntegratorError(f"{where}shard {missing[0]}/{count} is missing ({len(missing)} of {count} "
                                f"missing; expected {hint}); run {tool} with --shard {missing[0]}/{count}")
    ordered = [by_index[i] for i in range(1, count + 1)]
    stop = 0
    for s in ordered:
        a, b = int(s.meta["shard_traj_start"]), int(s.meta["shard_traj_stop"])
        if a != stop or b - a != s.shape[0]:
            what = "a gap" if a > stop else "an overlap"
            raise VPIntegratorError(f"{s.path}: {what} in the trajectories (it holds {a}:{b}, the shards "
                                    f"before end at {stop}); give only the shards of one {tool} --shard run")
        stop = b
    if stop != total:
        raise VPIntegratorError(f"{ordered[-1].path}: the shards end at trajectory {stop} but the data set "
                                f"has {total}; give only the shards of one {tool} --shard run")
    return ordered, index


def finished_shard(path: Path, shard: tuple[int, int], expected: dict[str, Any], kind: ShardKind) -> bool:
    """Whether ``path`` is shard ``shard`` of the run ``expected`` describes (its attributes), complete
    (shards are renamed into place only when complete): the same code then computes the same bits, so a
    rerun keeps it."""
    if not path.is_file() or path.is_symlink():
        return False
    try:
        meta = kind.head(path)[0]
    except (OSError, VPIntegratorError, ValueError, KeyError):
        return False
    want = {**expected, "shard_index": shard[0], "shard_count": shard[1]}
    return all(_same(meta.get(k), v) for k, v in want.items())


def _same(a: Any, b: Any) -> bool:
    try:
        return np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))
    except (TypeError, ValueError):
        return False


def index_when_complete(out: Path, count: int, output_kind: str, write: Callable[[Path, int], Any]) -> Any:
    """``write(out, count)`` (a file kind's index writer) once every shard file of ``out`` exists, under
    ``out``'s lock, ``out`` checked to be of ``output_kind`` (an index, or a file of that kind: never
    anything else); None while shards are missing. The shard that finishes last sees them all: each looks
    only after its own file is in place."""
    if all(shard_path(out, (i, count)).exists() for i in range(1, count + 1)):
        with output_lock(out):
            check_output(out, output_kind, True)
            return write(out, count)
    return None
