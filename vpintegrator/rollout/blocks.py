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

Written in ``vpintegrator.rollout.compare`` (the comparison run, their only user); importable here too.
"""

from __future__ import annotations

from .compare import MIN_WORK, Blocks, WorkerParts, remove_orphan_parts, run_digest

__all__ = ["Blocks", "WorkerParts", "run_digest", "MIN_WORK", "remove_orphan_parts"]
