"""Blocks of a comparison run's trajectories: ``vp-rollout --shard I/N`` and ``--workers N``.

Every method and metric of a rollout is computed trajectory by trajectory (checked bitwise by
``tests/test_rollout_shards.py``), so the selection can be cut into contiguous blocks, each computed alone,
without changing a bit, provided every block runs the runner the whole selection would (the compiled
single-trajectory runners serve selections of at most ``SCALAR_MAX_BATCH`` trajectories:
``Blocks.same_runners``).

- ``run_shard``: shard ``I/N`` of the selection (``vpintegrator.data.rollout_shards.rollout_bounds``)
  into ``<out stem>.shard-I-of-N.h5`` with the per-trajectory values of the table; the last shard to finish
  writes the index file at ``out`` and the whole run's table beside it
  (``vpintegrator.data.rollout_shards``).
- ``workers``: the classical integrators and the exact flow (and the reference, continued beyond the data
  by its generator) run as shards of the selection on that many processes (the NumPy integrators hold the
  GIL, and the compiled integrator kernels do not release it, so threads would not help), written to
  files in a temporary folder beside ``out`` and copied into the one rollout file in order; models run
  after them in this process, on the whole selection (torch has its own threads). With one worker, a
  selection of at most ``SCALAR_MAX_BATCH`` trajectories, no classical method, or a model on the device
  engine (whose reference invariants are computed on the device), the run is today's single-process one.
  Unset, ``workers`` is every core, used only when the work is large enough to repay starting processes
  (``MIN_WORK`` trajectory-steps); given, it is used whenever there are two blocks.

Worker processes die with the process that started them (Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``;
elsewhere each worker checks its parent before every block), so a ``kill -9`` of vp-rollout leaves no
worker holding the output's lock; their folder ``.<out>.parts-<pid>-*`` is removed by the next run of the
same output (``remove_orphan_parts``, called under the output's lock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._io import DeviceWriteError, device_write_error
from .steps import SCALAR_MAX_BATCH, IntegratorStep, ModelStep

__all__ = ["Blocks", "run_shard", "run_digest", "MIN_WORK", "remove_orphan_parts"]

#: trajectory-steps of classical methods below which unset ``workers`` runs in this process only
MIN_WORK = 20_000_000


@dataclasses.dataclass
class Blocks:
    """How a run is cut: ``n_whole`` trajectories in the whole selection (the runners' rule), the root
    attributes of a shard (``attrs``; with them the per-trajectory values are written), and ``workers``."""

    n_whole: int
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    workers: int | None = 1

    @property
    def per_traj(self) -> bool:
        return bool(self.attrs)

    def same_runners(self, step_maps) -> None:
        """The runner the whole selection would use: no compiled single-trajectory runner in a block of a
        selection too large for it."""
        if self.n_whole > SCALAR_MAX_BATCH:
            for step_map in step_maps:
                if isinstance(step_map, IntegratorStep):
                    step_map.compiled_max_batch = 0
                elif isinstance(step_map, ModelStep):
                    step_map.scalar_max_batch = 0

    def n_parts(self, plan, labels: list[str]) -> int:
        """Worker processes for the classical methods ``labels`` of ``plan`` (1: none)."""
        from ..data._parallel import default_workers
        from .device import use_device_engine

        workers = self.workers if self.workers is not None else default_workers()
        n_traj = plan.n_traj
        if workers <= 1 or not labels or n_traj <= SCALAR_MAX_BATCH or plan.n_new:
            return 1  # (held-out conditions are drawn once, by this process: no blocks of them)
        if any(use_device_engine(plan.config.engine, m, plan.system) for _, m, _ in plan.methods if m.kind == "model"):
            return 1
        if self.workers is None and n_traj * plan.n_steps * len(labels) < MIN_WORK:
            return 1
        return min(workers, n_traj)

    @contextlib.contextmanager
    def parts(self, plan, out: Path, task: Callable):
        """The classical methods of ``plan`` (and its reference) computed on worker processes, each running
        ``task(config, shard, n_whole)`` (a block of a run: ``run_shard``; returns its file): a
        ``_Parts`` over their files (None when the run stays in this process); the files are removed
        on leaving."""
        labels = [label for label, m, _ in plan.methods if m.kind in ("integrator", "flow")]
        n = self.n_parts(plan, labels)
        if n <= 1:
            yield None
            return
        out = Path(out)
        remove_orphan_parts(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.parts-{os.getpid()}-", dir=out.parent))
        try:
            sub = dataclasses.replace(plan.config, models=[], integrators=labels, traj=[int(i) for i in plan.idx],
                                      n_traj=None, out=str(tmp / "part.h5"), workers=1)
            plan.say(f"{', '.join(labels)}: rolling out {plan.n_traj} trajectories x {plan.n_steps} steps on "
                     f"{n} worker processes")
            ctx = _context()
            with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_die_with_parent,
                                     initargs=(os.getpid(),)) as pool:
                futures = [pool.submit(task, sub, (i, n), self.n_whole) for i in range(1, n + 1)]
                try:
                    paths = [Path(f.result()) for f in futures]
                except BaseException as err:
                    for f in futures:
                        f.cancel()
                    if isinstance(err, DeviceWriteError):  # a worker's part file: the output could not be written
                        raise device_write_error(out, err.reason) from None
                    raise
            yield _Parts(paths, labels, self.per_traj)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def remove_orphan_parts(out: Path) -> list[Path]:
    """Remove the worker folders (``.<out>.parts-<pid>-*``) that runs of ``out`` killed outright left, whose
    process no longer runs (a folder of the older form ``.<out>.parts-<random>``, without a pid, too: call
    it holding ``out``'s lock, so no live writer of ``out`` has one); return what was removed."""
    from .._io import pid_alive

    out = Path(out)
    prefix = f".{out.name}.parts-"
    removed = []
    with contextlib.suppress(OSError):
        for p in out.parent.iterdir():
            if not p.name.startswith(prefix) or p.is_symlink() or not p.is_dir():
                continue
            pid_text = p.name[len(prefix):].split("-", 1)[0]
            pid = int(pid_text) if pid_text.isdigit() and "-" in p.name[len(prefix):] else None
            if pid is not None and (pid == os.getpid() or pid_alive(pid)):
                continue
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _die_with_parent(parent: int) -> None:
    """A worker's initializer: be killed when the process that started it dies (Linux's parent-death
    signal); if it is already gone, exit at once."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:  # died before the signal was set
        os._exit(1)


def _context():
    """fork where there is one: the workers run NumPy, SciPy and numba only (never torch, whose threads a
    fork would not carry), start at once, and do not run the caller's script again (spawn would import its
    ``__main__``, and a script without ``if __name__ == "__main__"`` would start the run again)."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class _Parts:
    """The worker processes' shard files of the classical methods and the reference, copied into the
    rollout file being written, block by block in the order of the trajectories."""

    def __init__(self, paths: list[Path], labels: list[str], per_traj: bool) -> None:
        from ..data.rollout_shards import ROLLOUT, _merged
        from ..data.shards import _collect

        self.labels = labels
        self.per_traj = per_traj  # copy the per-trajectory values too (the run is itself a shard)
        self.shards, _ = _collect(paths, ROLLOUT)
        _, self.attrs, _rows = _merged(self.shards)  # the groups' merged attributes (the rows are made in method)

    def __contains__(self, label: str) -> bool:
        return label in self.labels

    def _copy(self, series, name: str, cs: int) -> np.ndarray:
        """Copy every dataset of group ``name`` of the shards into ``series``; the merged failed_step."""
        import h5py

        from ..data._attrs import _attrs_to_meta
        from ..data.rollout_shards import PER_TRAJ

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
                if k != f"{PER_TRAJ}/split":  # a method's split labels are this run's (set by method())
                    series.group.create_dataset(k, data=np.concatenate(parts))
        return np.concatenate(failed)

    def reference(self, writer, plan):
        series = writer.reference()
        failed = self._copy(series, "reference", writer.chunks[1])
        series.close(failed, {**self._first_attrs, **self.attrs["reference"], "split": list(plan.run_labels)})
        return series.y

    def method(self, writer, plan, label: str, failure: Callable, make_rows: Callable):
        """Method ``label`` copied into ``writer``; (its table rows by ``make_rows(label, plan, per_traj,
        names, max_abs_cum, res)`` over the whole run's per-trajectory values, its failure or None)."""
        import types

        import h5py

        from ..data.rollout_shards import PER_TRAJ, SPLIT

        name = f"methods/{label}"
        with h5py.File(self.shards[0].path, "r") as f:
            map_step = f[name]["map_step"][:] if "map_step" in f[name] else None
        series = writer.method(label, map_step=map_step)
        failed = self._copy(series, name, writer.chunks[1])
        per = dict(self.per)
        per.pop(SPLIT, None)  # the workers ran without the models: the labels are this run's (plan.labels)
        cum = per.pop("max_abs_cum_log_det_J", None)
        if self.per_traj:
            series.group[PER_TRAJ].create_dataset(SPLIT, data=np.asarray(plan.labels[label], dtype="S8"))
        attrs = {**self._first_attrs, **self.attrs[name], "split": list(plan.labels[label])}
        res = types.SimpleNamespace(seconds_per_step=float(attrs.get("seconds_per_step", float("nan"))),
                                    failed_step=failed)
        rows = make_rows(label, plan, per, tuple(plan.system.invariant_names), cum, res)
        series.close(failed, attrs)
        n_failed = int(np.sum(failed >= 0))
        if not n_failed:
            return rows, None
        first = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
        k = int(failed[first])
        return rows, failure(label, n_failed, plan.n_traj, int(plan.idx[first]), k, float(plan.t[k]))


def run_digest(config) -> str:
    """What tells a rollout run from any other: its configuration (the output and ``workers`` apart), the
    sha256 of its data file and model files (a run directory's ``config.toml`` and checkpoints) and this
    version; stored in each shard as ``shard_run`` so that a run continued after a lost cluster keeps the
    shards already written (same code, same inputs: the same bits)."""
    import hashlib
    import json

    from .._version import __version__
    from ..provenance import file_sha256

    def digest(path: Any) -> Any:
        p = Path(str(path))
        if p.is_dir():
            return {n: file_sha256(p / n) for n in ("config.toml", "best.pt", "last.pt") if (p / n).is_file()}
        return file_sha256(p) if p.is_file() else str(path)

    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("out", "workers")}
    models = config.models.items() if isinstance(config.models, dict) else enumerate(config.models or [])
    record = {"config": fields, "data": digest(config.data), "models": {str(k): digest(v) for k, v in models},
              "version": __version__}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]


def run_shard(run: Callable, select: Callable, config, log, inputs=(), *, overwrite: bool = False, shard: Any,
              write_index: bool = True, n_whole: int | None = None, run_key: str | None = None):
    """``run`` (``vpintegrator.rollout.compare._run``) of shard ``I/N`` of the selection (``select``:
    ``vpintegrator.rollout.compare.select``), into
    ``<out stem>.shard-I-of-N.h5`` (and its table); with ``write_index``, the index file at ``out`` and the
    whole run's table once every shard file is there. ``n_whole``: the size of the selection the runners are
    chosen for (default: this one's)."""
    from .._outputs import check_output
    from ..data.rollout_shards import rollout_bounds, selection_digest
    from ..data.shards import parse_shard, shard_path

    shard = parse_shard(shard)
    config.validate()
    if config.heldout:
        from ..errors import VPIntegratorError

        raise VPIntegratorError(f"shard {shard[0]}/{shard[1]} with heldout = {config.heldout}: each shard would draw "
                                "its own new conditions; roll out the held-out conditions without --shard",
                                key="shard")
    idx = select(config)[4]
    a, b = rollout_bounds(int(idx.size), shard)
    out = Path(config.out)
    if write_index:  # the index and the table come at out at the end: the overwrite rule applies now
        for path, kind in ((out, "rollout"), (out.with_suffix(".csv"), "table"), (out.with_suffix(".md"), "table")):
            check_output(path, kind, overwrite, key="out")
    sub = dataclasses.replace(config, traj=[int(i) for i in idx[a:b]], n_traj=None, out=str(shard_path(out, shard)))
    attrs = dict(shard_index=shard[0], shard_count=shard[1], shard_traj_start=a, shard_traj_stop=b,
                 shard_n_traj=int(idx.size), shard_selection=selection_digest(idx))
    if run_key is not None:  # (a shard of a cluster run: run_digest of the whole run's configuration)
        attrs["shard_run"] = run_key
    blocks = Blocks(n_whole=int(idx.size) if n_whole is None else int(n_whole), attrs=attrs, workers=config.workers)
    report = run(sub, log, inputs, overwrite, blocks)
    if write_index:
        _index_if_complete(out, shard[1])
    return report


def _index_if_complete(out: Path, count: int) -> list | None:
    """The index file and the whole run's table, once every shard file exists (the shard that finishes
    last sees them all: each looks only after its own file is in place)."""
    from .._outputs import check_output, output_lock
    from ..data.rollout_shards import write_rollout_index
    from ..data.shards import shard_path
    from ..metrics import write_table

    if all(shard_path(out, (i, count)).exists() for i in range(1, count + 1)):
        with output_lock(out):
            check_output(out, "rollout", True)  # a rollout file (or index) only: never anything else
            rows = write_rollout_index(out, count)
            write_table(rows, out.with_suffix(""), overwrite=True)
            return rows
    return None
