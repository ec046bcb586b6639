"""Every read of ``vp-rollout`` output the studies do, in one place.

Rollout files are read with [`vpintegrator.data.rollouts.read_rollout`][vpintegrator.data.rollouts.read_rollout] (no torch); metrics tables
with ``vpintegrator.metrics.read_table``.
"""

from __future__ import annotations

from pathlib import Path


def read(path):
    """The [`RolloutResult`][vpintegrator.data.rollouts.RolloutResult] of the rollout file ``path``; None if there
    is no such file."""
    from vpintegrator.data.rollouts import read_rollout

    path = Path(path)
    return read_rollout(path) if path.exists() else None


def metrics_table(path) -> list[dict]:
    """The rows of a metrics CSV that ``vp-rollout`` writes beside its file (``<out>.csv``)."""
    from vpintegrator.metrics import read_table

    return read_table(path)


def outputs(h5: Path) -> list[Path]:
    """What ``vp-rollout --out h5`` writes: the file and its metrics table (``.csv``, ``.md``)."""
    return [h5, h5.with_suffix(".csv"), h5.with_suffix(".md")]
