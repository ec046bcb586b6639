"""One row of the metrics table of a rollout: per-trajectory values aggregated over trajectories.

In the data layer (and re-exported by [`vpintegrator.metrics`][vpintegrator.metrics]) because the rollout file's table is
also computed here: the merged table of ``vp-rollout --shard`` shards, from their per-trajectory values
(``vpintegrator.data.rollout_shards``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..arrays import to_numpy

__all__ = ["summary_row", "split_summary_rows", "SPLIT_LABELS"]

#: the ``split`` labels of rolled-out conditions, in table order
SPLIT_LABELS = ("train", "val", "test", "new", "unknown")


def summary_row(
    method: str,
    per_traj: Mapping[str, np.ndarray],
    invariant_names: Sequence[str],
    *,
    max_abs_cum_log_det_J: np.ndarray | None,
    seconds_per_step: float,
    failed_step: np.ndarray,
) -> dict[str, Any]:
    """One row of the metrics table: per-trajectory values aggregated over trajectories.

    Columns: ``method``, ``final_rel_error`` (mean; inf if any trajectory failed), ``valid_time`` (mean),
    ``max_rel_drift_<inv>`` and ``drift_slope_<inv>`` (worst trajectory; slope in units of 1/time),
    ``max_abs_cum_log_det_J`` (worst trajectory; NaN where not computed), ``seconds_per_step`` (wall time
    of one step of the whole batch), ``n_traj``, ``failed``.
    """
    failed = to_numpy(failed_step) >= 0
    row: dict[str, Any] = {"method": method}
    fin = np.asarray(to_numpy(per_traj["final_rel_error"]), dtype=np.float64)
    row["final_rel_error"] = float(np.mean(np.where(np.isnan(fin), np.inf, fin))) if fin.size else math.nan
    row["valid_time"] = float(np.mean(per_traj["valid_time"]))
    for name in invariant_names:
        d = np.asarray(per_traj[f"max_rel_drift_{name}"], dtype=np.float64)
        row[f"max_rel_drift_{name}"] = float(np.max(np.where(np.isnan(d), np.inf, d)))
        s = np.asarray(per_traj[f"drift_slope_{name}"], dtype=np.float64)
        row[f"drift_slope_{name}"] = float(s[np.nanargmax(np.abs(s))]) if np.isfinite(s).any() else math.nan
    if max_abs_cum_log_det_J is None:
        row["max_abs_cum_log_det_J"] = math.nan
    else:
        row["max_abs_cum_log_det_J"] = float(np.max(to_numpy(max_abs_cum_log_det_J)))
    row["seconds_per_step"] = float(seconds_per_step)
    row["n_traj"] = int(failed.size)
    row["failed"] = int(failed.sum())
    return row


def split_summary_rows(method: str, per_traj: Mapping[str, np.ndarray], invariant_names: Sequence[str],
                       labels: Sequence[str], reference: str, *, max_abs_cum_log_det_J: np.ndarray | None,
                       seconds_per_step: float, failed_step: np.ndarray) -> list[dict[str, Any]]:
    """The table rows of one method: one per ``split`` label present in ``labels`` (one per trajectory; in
    the order of ``SPLIT_LABELS``), each a ``summary_row`` of only those trajectories, with the
    ``split`` column after ``method`` and the ``reference`` column (``exact`` or ``data``) last."""
    labels_arr = np.asarray([str(x) for x in labels])
    per = {k: np.asarray(to_numpy(v)) for k, v in per_traj.items()}
    cum = None if max_abs_cum_log_det_J is None else np.asarray(to_numpy(max_abs_cum_log_det_J))
    failed = np.asarray(to_numpy(failed_step))
    rows = []
    for lab in SPLIT_LABELS:
        mask = labels_arr == lab
        if not mask.any():
            continue
        row = summary_row(method, {k: v[mask] for k, v in per.items()}, invariant_names,
                          max_abs_cum_log_det_J=None if cum is None else cum[mask],
                          seconds_per_step=seconds_per_step, failed_step=failed[mask])
        rows.append({"method": row.pop("method"), "split": lab, **row, "reference": reference})
    return rows
