"""The metrics table of a rollout: one row per method (per-trajectory values aggregated over trajectories),
its Markdown and plain text, and its CSV/Markdown/LaTeX files (``write_table``, ``read_table``; the work-precision
table is written with them too).

In the data layer (and re-exported by [`vpintegrator.metrics`][vpintegrator.metrics]) because the rollout file's table is
also computed here: the merged table of ``vp-rollout --shard`` shards, from their per-trajectory values
(``vpintegrator.data.rollout_shards``).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..arrays import to_numpy

__all__ = ["summary_row", "split_summary_rows", "SPLIT_LABELS", "format_markdown", "format_latex", "format_text",
           "write_table", "read_table"]

#: the ``split`` labels of rolled-out conditions, in table order
SPLIT_LABELS = ("train", "val", "ancestor_seen", "test", "new", "unknown")


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
    where ``per_traj`` has them (a run with a spread: ``vpintegrator.metrics.nrmse``) ``mean_nrmse`` (the NRMSE
    against each component's spread, averaged over the predicted steps, then the trajectories; inf if any
    failed), ``vpt`` (the valid-prediction horizon at its threshold, mean) and ``vs_identity`` (``mean_nrmse`` over
    the identity map's on the same trajectories: >= 1, no better than predicting no change),
    ``max_rel_drift_<inv>`` and ``drift_slope_<inv>`` (worst trajectory; slope in units of 1/time),
    ``max_abs_cum_log_det_J`` (worst trajectory; NaN where not computed), ``seconds_per_step`` (wall time
    of one step of the whole batch), ``n_traj``, ``failed``.
    """
    failed = to_numpy(failed_step) >= 0
    row: dict[str, Any] = {"method": method}
    fin = np.asarray(to_numpy(per_traj["final_rel_error"]), dtype=np.float64)
    row["final_rel_error"] = float(np.mean(np.where(np.isnan(fin), np.inf, fin))) if fin.size else math.nan
    row["valid_time"] = float(np.mean(per_traj["valid_time"]))
    if "nrmse" in per_traj:
        mean = _failed_inf(per_traj["nrmse"])
        row["mean_nrmse"], row["vpt"] = mean, float(np.mean(per_traj["vpt"])) if fin.size else math.nan
        ident = _failed_inf(per_traj["identity_nrmse"])
        row["vs_identity"] = mean / ident if ident > 0 else math.nan  # (NaN: no trajectory, or nothing moves)
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


def _failed_inf(values: Any) -> float:
    """The mean of per-trajectory values, inf where one is NaN (a failed trajectory); NaN for none."""
    v = np.asarray(to_numpy(values), dtype=np.float64)
    return float(np.mean(np.where(np.isnan(v), np.inf, v))) if v.size else math.nan


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


# --------------------------------------------------------------------------- the table's text and files


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The metrics table as a GitHub Markdown table (one row per method)."""
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def format_latex(rows: Sequence[Mapping[str, Any]], caption: str | None = None) -> str:
    """The metrics table as a booktabs LaTeX ``tabular`` (``vpintegrator.data.latex``), its cells as the Markdown's;
    ``caption`` as comment lines above it."""
    from .latex import HEAD, tabular

    cols = list(rows[0]) if rows else ["method"]
    notes = [f"% {line}" for line in (caption or "").splitlines() if line.strip()]
    return "\n".join([HEAD, *notes, tabular(cols, [[_fmt(r[c]) for c in cols] for r in rows])])


def format_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The metrics table as aligned plain text, for the terminal."""
    if not rows:
        return ""
    cols = list(rows[0])
    cells = [cols] + [[_fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells) + "\n"


def write_table(rows: Sequence[Mapping[str, Any]], stem: str | Path, *, overwrite: bool = False,
                caption: str | None = None, notes: Sequence[str] = ()) -> tuple[Path, Path]:
    """Write the table as ``<stem>.csv``, ``.md`` and ``.tex`` (``format_latex``; atomically; an existing table only
    with ``overwrite``); ``caption``: a line above the Markdown table (e.g. what the errors are measured against),
    ``notes``: lines below it (both as comment lines above the LaTeX tabular). Returns the CSV and Markdown paths."""
    from .._io import atomic_path
    from .._outputs import check_output, output_locks

    stem = Path(stem)  # the path without its suffix: a dotted name (rollout.shard-1-of-2) keeps its dots
    paths = stem.with_name(stem.name + ".csv"), stem.with_name(stem.name + ".md")
    tex = stem.with_name(stem.name + ".tex")
    cols = list(rows[0]) if rows else ["method"]
    with output_locks((*paths, tex)):
        csv_target, md_target, tex_target = (check_output(p, "table", overwrite) for p in (*paths, tex))
        with atomic_path(csv_target) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            for r in rows:
                writer.writerow({c: (repr(r[c]) if isinstance(r[c], float) else r[c]) for c in cols})
        below = "".join(f"\n{line}\n" for line in notes)
        with atomic_path(md_target) as tmp:
            tmp.write_text((f"{caption}\n\n" if caption else "") + format_markdown(rows) + below)
        with atomic_path(tex_target) as tmp:
            tmp.write_text(format_latex(rows, "\n".join(filter(None, [caption, *notes]))))
    return paths


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Read a metrics CSV written by ``write_table`` (numbers parsed)."""
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append({k: (v if k in _TEXT_COLUMNS else _parse_number(v)) for k, v in r.items()})
    return rows


#: the table's columns that hold text (``split``: train/val/test/new/unknown; ``reference``: exact/data)
_TEXT_COLUMNS = ("method", "split", "reference")


def _parse_number(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v
