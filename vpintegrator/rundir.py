"""The files of a ``vp-train`` run directory that are plain text: ``log.csv`` and ``summary.json``.

Torch-free, so that figures and study tables read runs without importing the training code. A run
directory holds ``config.toml`` (the resolved config), ``log.csv`` (:data:`LOG_COLUMNS` per epoch, plus
:data:`ROLLOUT_COLUMN` with ``monitor = "val_rollout"``), ``summary.json``, and the checkpoints ``best.pt``
and ``last.pt`` (written by :mod:`vpintegrator.training.checkpoint`).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from .errors import VPIntegratorError

__all__ = ["LOG_COLUMNS", "ROLLOUT_COLUMN", "format_row", "read_log", "read_summary"]

#: the columns every log.csv has, in order
LOG_COLUMNS = ("epoch", "train_loss", "val_loss", "lr", "seconds")
#: log.csv's extra column when monitor = "val_rollout"
ROLLOUT_COLUMN = "val_rollout"


def format_row(row: dict[str, float], columns: tuple[str, ...] = LOG_COLUMNS) -> str:
    """One ``log.csv`` line (no newline); floats by ``repr``, so they read back exactly."""
    return ",".join([str(int(row["epoch"]))] + [repr(float(row.get(k, math.nan))) for k in columns[1:]])


def read_log(path: str | Path, max_epoch: int | None = None) -> list[dict[str, float]]:
    """The rows of a ``log.csv``: every column of :data:`LOG_COLUMNS` (and :data:`ROLLOUT_COLUMN` when the
    log has it) as floats, ``epoch`` as an int, in file order.

    A torn last line (a run killed while writing) ends the rows; so does the first row after
    ``max_epoch`` (rows written after the last checkpoint, when a run resumes). A missing file gives no rows;
    a file without the standard columns is a one-line error naming it.
    """
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in LOG_COLUMNS if c not in header]
        if missing:
            raise VPIntegratorError(
                f"{path}: missing column {missing[0]!r}; a vp-train log has columns {', '.join(LOG_COLUMNS)}"
                f"[, {ROLLOUT_COLUMN}], found {', '.join(header) or '(none)'}"
            )
        names = [c for c in header if c in LOG_COLUMNS or c == ROLLOUT_COLUMN]
        rows = []
        for row in reader:
            try:
                parsed = {k: float(row[k]) for k in names}
            except (TypeError, ValueError):
                break  # a torn last line
            if max_epoch is not None and parsed["epoch"] > max_epoch:
                break
            parsed["epoch"] = int(parsed["epoch"])
            rows.append(parsed)
    return rows


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``summary.json`` of a run directory, or None when it is missing or unreadable."""
    try:
        value = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
