"""The files of a ``vp-train`` run directory that are plain text: ``log.csv`` and ``summary.json``.

Torch-free, so that figures and study tables read runs without importing the training code. A run
directory holds ``config.toml`` (the resolved config), ``log.csv`` (``LOG_COLUMNS`` per epoch, plus
``ROLLOUT_COLUMN`` with ``monitor = "val_rollout"``), ``summary.json``, and the checkpoints ``best.pt``
and ``last.pt`` (written by ``vpintegrator.training.checkpoint``).

The paths a run directory's ``config.toml`` and ``summary.json`` store (``data``, ``init_from``, ``out``;
``summary.json``'s ``data.sources``) are relative to the run directory (``relative_run_paths``), so a
published run directory names no home directory and a run directory moved together with its data still
resumes; readers resolve them against the run directory (``absolute_run_paths``). Runs written before
stored absolute paths, which read unchanged.

**A run is finished only when it says so**: ``complete.json`` (``COMPLETE``) is written last, atomically, when a
training ends by its own rule (epochs, a time limit, patience), and removed when a training starts in the
directory (a resumed run is unfinished until it ends again). ``best.pt`` alone says nothing: a run killed
after its first checkpoint has one. Whatever skips finished work asks ``is_complete``; an unfinished run is
resumed or trained again, never reported.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from .errors import VPIntegratorError

__all__ = ["read_own_json", "COMPLETE", "write_complete", "read_complete", "is_complete", "clear_complete", "LOG_COLUMNS", "CPU_COLUMN", "ROLLOUT_COLUMN", "format_row", "read_log", "read_summary", "relative_run_paths",
           "absolute_run_paths"]

#: the completion record of a run directory, written last when the run ends by its own rule
COMPLETE = "complete.json"
#: the keys a completion record holds
_COMPLETE_KEYS = ("finished", "stopped", "epochs")


def write_complete(run_dir: str | Path, stopped: str, epochs: int) -> Path:
    """Write ``run_dir/complete.json`` (atomically: ``vpintegrator._io.atomic_path``): the run in ``run_dir``
    ended by its own rule ``stopped`` (``"epochs"``, ``"time_limit"``, ``"patience"``, ...) after ``epochs``
    epochs. Call it after every other file of the run is written."""
    from ._io import atomic_path

    path = Path(run_dir) / COMPLETE
    record = {"finished": True, "stopped": str(stopped), "epochs": int(epochs)}
    with atomic_path(path, suffix=".json") as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def clear_complete(run_dir: str | Path) -> None:
    """Remove ``run_dir/complete.json``: a training starts (or resumes) there, so the run is unfinished."""
    (Path(run_dir) / COMPLETE).unlink(missing_ok=True)


def read_complete(run_dir: str | Path) -> dict[str, Any] | None:
    """The completion record of ``run_dir`` (``{"finished": True, "stopped": ..., "epochs": ...}``), or None when
    the run did not finish (no record: interrupted, killed, or still running). A record that is not one (a
    damaged file) is a one-line error naming it and saying to delete it (the run is then trained again)."""
    path = Path(run_dir) / COMPLETE
    if not path.exists():
        return None
    value = read_own_json(path, "a run's completion record", f"delete it (the run in {Path(run_dir)} is then "
                          "trained again or resumed)")
    if not isinstance(value, dict) or value.get("finished") is not True or any(k not in value for k in _COMPLETE_KEYS):
        raise VPIntegratorError(f"{path}: not a completion record of vp-train (expected the keys "
                                f"{', '.join(_COMPLETE_KEYS)}); delete it (the run in {Path(run_dir)} is then trained "
                                "again or resumed)")
    return value


def is_complete(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` finished (its ``complete.json`` is there: ``read_complete``)."""
    return read_complete(run_dir) is not None


def read_own_json(path: str | Path, what: str, fix: str) -> Any:
    """The JSON of ``path``, a file this package wrote (``what`` says which kind: "a study's results"); a file
    that is missing, empty, damaged or not JSON is a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError]
    naming it and saying ``fix`` (which file to delete or regenerate, and how)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VPIntegratorError(f"{path}: not found ({what}); {fix}") from None
    except IsADirectoryError:
        raise VPIntegratorError(f"{path}: a directory, not {what}; {fix}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise VPIntegratorError(f"{path}: cannot read {what} ({getattr(err, 'strerror', None) or type(err).__name__}); "
                                f"{fix}") from None
    if not text.strip():
        raise VPIntegratorError(f"{path}: empty, not {what} (a write was cut short?); {fix}")
    try:
        return json.loads(text)
    except ValueError as err:
        raise VPIntegratorError(f"{path}: damaged, not {what} (not JSON: {str(err).split(':')[0]}); {fix}") from None


#: the columns every log.csv has, in order
LOG_COLUMNS = ("epoch", "train_loss", "val_loss", "lr", "seconds")
#: the training process's CPU seconds at the end of each epoch (vpintegrator.clock.process_cpu, tracking sinks
#: left out: summary.json's cpu_time so far), beside ``seconds`` (wall); logs written before it lack it
CPU_COLUMN = "cpu_seconds"
#: log.csv's extra column when monitor = "val_rollout"
ROLLOUT_COLUMN = "val_rollout"


def format_row(row: dict[str, float], columns: tuple[str, ...] = LOG_COLUMNS) -> str:
    """One ``log.csv`` line (no newline); floats by ``repr``, so they read back exactly."""
    return ",".join([str(int(row["epoch"]))] + [repr(float(row.get(k, math.nan))) for k in columns[1:]])


def read_log(path: str | Path, max_epoch: int | None = None) -> list[dict[str, float]]:
    """The rows of a ``log.csv``: every column of ``LOG_COLUMNS`` (and ``CPU_COLUMN`` and ``ROLLOUT_COLUMN`` when
    the log has them) as floats, ``epoch`` as an int, in file order.

    A torn last line (a run killed while writing) ends the rows; so does the first row after
    ``max_epoch`` (rows written after the last checkpoint, when a run resumes). A missing file gives no rows;
    a file without the standard columns is a one-line error naming it.
    """
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        raise VPIntegratorError(f"{path}: not a regular file; a vp-train log.csv is a text file")
    try:
        return _read_log(path, max_epoch)
    except (UnicodeDecodeError, csv.Error) as err:  # a binary or damaged file
        raise VPIntegratorError(f"{path}: not a vp-train log (not CSV text: {type(err).__name__}); a vp-train log "
                                f"has columns {', '.join(LOG_COLUMNS)}") from None


def _read_log(path: Path, max_epoch: int | None) -> list[dict[str, float]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in LOG_COLUMNS if c not in header]
        if missing:
            raise VPIntegratorError(
                f"{path}: missing column {missing[0]!r}; a vp-train log has columns {', '.join(LOG_COLUMNS)}"
                f"[, {ROLLOUT_COLUMN}], found {', '.join(header) or '(none)'}"
            )
        names = [c for c in header if c in LOG_COLUMNS or c in (ROLLOUT_COLUMN, CPU_COLUMN)]
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
    """``summary.json`` of a run directory, or None when it is missing or unreadable (its paths resolved
    against ``run_dir``: ``absolute_run_paths``)."""
    try:
        value = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return absolute_run_paths(value, run_dir) if isinstance(value, dict) else None


# ---------------------------------------------------------------------------------------------------
# paths relative to the run directory

_NOT_FILES = ("pretrained:", "gml:", "<")  # not plain paths (models by name; "<in memory>" data): stored as given


def _map_paths(values: dict[str, Any], fn) -> dict[str, Any]:
    """``values`` (a config or a summary) with ``fn`` applied to ``data`` (a list), ``init_from``, ``out``
    and ``data.sources`` (a summary's); other keys unchanged, non-path values (None, pretrained:...) too."""
    out = dict(values)

    def one(p):
        return fn(p) if isinstance(p, (str, os.PathLike)) and not str(p).startswith(_NOT_FILES) else p

    for key in ("init_from", "out"):
        if key in out:
            out[key] = one(out[key])
    data = out.get("data")
    if isinstance(data, list):
        out["data"] = [one(p) for p in data]
    elif isinstance(data, dict) and isinstance(data.get("sources"), list):
        out["data"] = {**data, "sources": [one(p) for p in data["sources"]]}
    return out


def relative_run_paths(values: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """``values`` with its paths (``_map_paths``) relative to ``run_dir`` (``out`` becomes ``"."``);
    a path relative already is taken relative to the working directory first."""
    base = Path(run_dir).resolve()

    def rel(p) -> str:
        try:
            return os.path.relpath(Path(p).expanduser().resolve(), base)
        except ValueError:  # another drive (Windows): no relative form
            return str(Path(p).expanduser().resolve())

    return _map_paths(values, rel)


def absolute_run_paths(values: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """``values`` with its relative paths resolved against ``run_dir`` (absolute ones, as older runs
    stored, unchanged)."""
    base = Path(run_dir).resolve()

    def absolute(p) -> str:
        p = Path(p).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())

    return _map_paths(values, absolute)
