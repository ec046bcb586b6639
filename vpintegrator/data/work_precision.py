"""Work–precision tables: the row type and the CSV reader (written by
[`vpintegrator.rollout.write_work_precision`][vpintegrator.rollout.precision.write_work_precision], drawn by [`vpintegrator.plotting.plot_work_precision`][vpintegrator.plotting.plot_work_precision]).

The numbers and what each is measured against: ``vpintegrator.rollout.precision``.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from ..errors import VPIntegratorError

__all__ = ["WP_COLUMNS", "WorkPrecisionRow", "read_work_precision"]

WP_COLUMNS = ("method", "kind", "h", "rtol", "n_steps", "t_end", "n_traj", "error_median", "error_p90",
              "error_max", "drift_max", "seconds_per_time", "runner")


@dataclasses.dataclass(frozen=True)
class WorkPrecisionRow:
    """One point of the diagram (see the module docstring for what each number is measured against)."""

    method: str
    kind: str  # "integrator", "dop853" or "model"
    h: float  # the step (the model's state spacing for a model; NaN for DOP853)
    rtol: float  # DOP853's tolerance (NaN otherwise)
    n_steps: int  # steps to t_end (NaN-free: 0 for DOP853)
    t_end: float
    n_traj: int
    error_median: float
    error_p90: float
    error_max: float
    drift_max: float
    seconds_per_time: float
    runner: str


def read_work_precision(path: str | Path) -> list[WorkPrecisionRow]:
    """Rows from a CSV written by ``write_work_precision`` (one-line error for another file)."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            table = list(csv.DictReader(fh))
    except OSError as e:
        raise VPIntegratorError(f"{path}: cannot read the work-precision table ({e.strerror})") from None
    if not table or tuple(table[0]) != WP_COLUMNS:
        raise VPIntegratorError(f"{path}: not a work-precision table (expected the columns {', '.join(WP_COLUMNS)}); "
                                "write one with vpintegrator.rollout.write_work_precision")
    out = []
    for row in table:
        try:
            out.append(WorkPrecisionRow(**{
                f.name: (str(row[f.name]) if f.type == "str" else int(row[f.name]) if f.type == "int"
                         else float(row[f.name])) for f in dataclasses.fields(WorkPrecisionRow)}))
        except (TypeError, ValueError) as e:
            raise VPIntegratorError(f"{path}: malformed work-precision row ({e})") from None
    return out
