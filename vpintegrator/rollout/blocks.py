"""Blocks of a comparison run's trajectories: ``vp-rollout --shard I/N`` and ``--workers N``.

Every method and metric of a rollout is computed trajectory by trajectory (checked bitwise by
``tests/test_rollout_shards.py``), so the selection can be cut into contiguous blocks, each computed alone,
without changing a bit, provided every block runs the runner the whole selection would (the compiled
single-trajectory runners serve selections of at most ``SCALAR_MAX_BATCH`` trajectories:
``Blocks.same_runners``).

- ``run_shard`` (``vpintegrator.rollout.compare``): shard ``I/N`` of the selection (``vpintegrator.data.rollout_shards.rollout_bounds``)
  into ``<out stem>.shard-I-of-N.h5`` with the per-trajectory values of the table; the last shard to finish
  writes the index file at ``out`` and the whole run's table beside it
  (``vpintegrator.data.rollout_shards``).
- ``workers``: the classical integrators and the exact flow (and the reference, continued beyond the data
  by its generator) run as shards of the selection on that many processes (the NumPy integrators hold the
  GIL, and the compiled integrator kernels do not release it, so threads would not help), written to
  files in a temporary folder beside ``out`` (``vpintegrator.jobs.executors``) and copied into the one rollout
  file in order (``vpintegrator.data.rollout_shards.RolloutParts``, the rollout files' module); models run
  after them in this process, on the whole selection (torch has its own threads). With one worker, a
  selection of at most ``SCALAR_MAX_BATCH`` trajectories, no classical method, or a model on the device
  engine (whose reference invariants are computed on the device), the run is today's single-process one.
  Unset, ``workers`` is every core, used only when the work is large enough to repay starting processes
  (``MIN_WORK`` trajectory-steps); given, it is used whenever there are two blocks.

Worker processes die with the process that started them (Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``;
elsewhere each worker checks its parent before every block), so a ``kill -9`` of vp-rollout leaves no
worker holding the output's lock; their folder ``.<out>.parts-<pid>-*`` is removed by the next run of the
same output (``remove_orphan_parts``, called under the output's lock). This module says how a run is cut;
the job runtime (``vpintegrator.jobs``) runs the blocks.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any

import numpy as np

from ..data.rollout_shards import RolloutParts
from ..jobs.executors import default_workers, remove_orphan_parts
from .report import Failure
from .splits import split_rows
from .steps import SCALAR_MAX_BATCH, IntegratorStep, ModelStep

__all__ = ["Blocks", "WorkerParts", "run_digest", "MIN_WORK", "remove_orphan_parts"]

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

    def part_labels(self, plan) -> list[str]:
        """The methods of ``plan`` worker processes would run: the classical integrators and the exact flow."""
        return [label for label, m, _ in plan.methods if m.kind in ("integrator", "flow")]


class WorkerParts:
    """The worker processes' part files of the classical methods ``labels`` and the reference
    (``RolloutParts``), copied into the rollout file being written; the table rows and the failure of a
    method made from the whole run's per-trajectory values."""

    def __init__(self, files: RolloutParts, labels: list[str]) -> None:
        self.files = files
        self.labels = labels

    def __contains__(self, label: str) -> bool:
        return label in self.labels

    def reference(self, writer, plan):
        return self.files.reference(writer, plan.run_labels)

    def method(self, writer, plan, label: str) -> tuple[list[dict], Failure | None]:
        """Method ``label`` copied into ``writer``: (its table rows, its failure or None)."""
        per, cum, failed, attrs = self.files.method(writer, label, plan.labels[label])
        res = types.SimpleNamespace(seconds_per_step=float(attrs.get("seconds_per_step", float("nan"))),
                                    failed_step=failed)
        rows = split_rows(label, plan, per, tuple(plan.system.invariant_names), cum, res)
        n_failed = int(np.sum(failed >= 0))
        if not n_failed:
            return rows, None
        first = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
        k = int(failed[first])
        return rows, Failure(label, n_failed, plan.n_traj, int(plan.idx[first]), k, float(plan.t[k]))


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
