"""Work–precision tables: the row type and the CSV reader (written by
[`vpintegrator.rollout.write_work_precision`][vpintegrator.rollout.precision.write_work_precision], drawn by [`vpintegrator.plotting.plot_work_precision`][vpintegrator.plotting.plot_work_precision]),
the log–log interpolation along a method's ladder (``ladder_value``) and a learned model's training cost
on the cost axis ([`amortised_cost`][vpintegrator.data.work_precision.amortised_cost], [`break_even`][vpintegrator.data.work_precision.break_even]).

The numbers and what each is measured against: ``vpintegrator.rollout.precision``.

**Training cost.** A model row may carry ``train_seconds``, the CPU seconds its training took (the run
directory's ``summary.json`` ``cpu_time``; NaN: not recorded). With τ the table's horizon ``t_end``, c_m the
model's ``seconds_per_time`` and e_m its ``error_median``, N rollouts of length τ cost ``T_train + N τ c_m``
with the model and ``N τ c_cl(e_m)`` with a classical method, where c_cl(e_m) is the cost at which the
method's ladder reaches e_m (``ladder_value``, log–log along the ladder). The *amortised* cost per unit
time is ``c_m + T_train / (N τ)``, and the *break-even* number of rollouts, set by the classical method with
the cheapest c_cl(e_m), is ``N* = T_train / (τ (c_cl(e_m) − c_m))`` if c_cl(e_m) > c_m, else ∞ ("never":
that method is both cheaper and at least as accurate).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from ..errors import VPIntegratorError

__all__ = ["WP_COLUMNS", "WorkPrecisionRow", "read_work_precision", "ladder_value", "amortised_cost",
           "break_even", "with_training_cost", "check_rollouts"]

#: the columns of a table written before training cost was recorded (still read: no training time)
WP_COLUMNS_V1 = ("method", "kind", "h", "rtol", "n_steps", "t_end", "n_traj", "error_median", "error_p90",
                 "error_max", "drift_max", "seconds_per_time", "runner")
WP_COLUMNS = (*WP_COLUMNS_V1, "train_seconds", "amortise_over", "amortised_seconds_per_time", "break_even_rollouts",
              "break_even_method")


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
    train_seconds: float = math.nan  # a model's training CPU seconds (NaN: not recorded, or not a model)
    amortise_over: float = math.nan  # N of amortised_seconds_per_time (NaN: not asked for)
    amortised_seconds_per_time: float = math.nan  # seconds_per_time + train_seconds / (N t_end)
    break_even_rollouts: float = math.nan  # N* (inf: never; NaN: not known, see break_even)
    break_even_method: str = ""  # the classical method that sets N*


def read_work_precision(path: str | Path) -> list[WorkPrecisionRow]:
    """Rows from a CSV written by ``write_work_precision`` (one-line error for another file)."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            table = list(csv.DictReader(fh))
    except OSError as e:
        raise VPIntegratorError(f"{path}: cannot read the work-precision table ({e.strerror})") from None
    if not table or tuple(table[0]) not in (WP_COLUMNS, WP_COLUMNS_V1):
        raise VPIntegratorError(f"{path}: not a work-precision table (expected the columns {', '.join(WP_COLUMNS)}); "
                                "write one with vpintegrator.rollout.write_work_precision")
    out = []
    for row in table:
        try:
            out.append(WorkPrecisionRow(**{
                f.name: (str(row[f.name]) if f.type == "str" else int(row[f.name]) if f.type == "int"
                         else float(row[f.name])) for f in dataclasses.fields(WorkPrecisionRow)
                if f.name in row}))  # an older table: no training columns (not recorded)
        except (TypeError, ValueError) as e:
            raise VPIntegratorError(f"{path}: malformed work-precision row ({e})") from None
    return out


def ladder_value(points: Sequence[tuple[float, float]], x: float) -> tuple[float, str]:
    """A method's value at ``x`` along its ladder, log–log: ``points`` are (key, value) pairs (e.g. (cost,
    error) or (error, cost)); non-positive or non-finite ones are dropped.

    Returns ``(value, where)``: ``"inside"`` (interpolated between the two rungs whose keys bracket x),
    ``"below"`` / ``"above"`` (x beyond the smallest / largest key: that rung's value), or (NaN, ``"none"``)
    without usable points.
    """
    import numpy as np

    pts = sorted((float(k), float(v)) for k, v in points
                 if k > 0 and v > 0 and math.isfinite(k) and math.isfinite(v))
    if not pts or not (x > 0 and math.isfinite(x)):
        return math.nan, "none"
    if x < pts[0][0]:
        return pts[0][1], "below"
    if x > pts[-1][0]:
        return pts[-1][1], "above"
    keys, values = np.log([k for k, _ in pts]), np.log([v for _, v in pts])
    return float(np.exp(np.interp(math.log(x), keys, values))), "inside"


def check_rollouts(n: float) -> float:
    """``n`` (``amortise_over``) as a positive finite float, else a one-line error naming ``amortise_over``."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not (n > 0 and math.isfinite(n)):
        raise VPIntegratorError(f"amortise_over: expected a positive number of rollouts, got {n!r}",
                                key="amortise_over")
    return float(n)


def amortised_cost(row: WorkPrecisionRow, n_rollouts: float) -> float:
    """CPU seconds per unit time with training spread over ``n_rollouts`` rollouts of length ``row.t_end``:
    ``seconds_per_time + train_seconds / (n_rollouts · t_end)`` (NaN where the training time is not recorded)."""
    n = check_rollouts(n_rollouts)
    return row.seconds_per_time + row.train_seconds / (n * row.t_end)


def break_even(model: WorkPrecisionRow, rows: Sequence[WorkPrecisionRow]) -> tuple[float, str]:
    """``(N*, method)``: the number of rollouts of length ``t_end`` after which ``model`` (a row with
    ``train_seconds``) has paid for its training at its own error, against the classical rows (every kind but
    ``"model"``) of ``rows`` (module docstring).

    For each classical method, c_cl(e_m) is the cost at which its ladder reaches the model's error (log–log
    along the ladder; a ladder whose every rung is more accurate gives its cheapest rung, one that never gets
    down to e_m is left out); the cheapest sets N*. ``(inf, method)``: never (that method is at most as
    costly); ``(nan, method)``: training time not recorded; ``(nan, "")``: no classical method reaches e_m.
    """
    ladders: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.kind != "model":
            ladders.setdefault(r.method, []).append((r.error_median, r.seconds_per_time))
    best, best_method = math.inf, ""
    for method, pts in ladders.items():
        cost, where = ladder_value(pts, model.error_median)
        if where in ("inside", "above") and cost < best:  # "below": its ladder never gets down to e_m
            best, best_method = cost, method
    if not best_method:
        return math.nan, ""
    gain = best - model.seconds_per_time
    if gain <= 0:
        return math.inf, best_method
    return model.train_seconds / (model.t_end * gain), best_method


def with_training_cost(rows: Sequence[WorkPrecisionRow], amortise_over: float | None = None
                       ) -> list[WorkPrecisionRow]:
    """The rows with every model row's ``break_even_rollouts`` / ``break_even_method`` ([`break_even`][vpintegrator.data.work_precision.break_even])
    and, with ``amortise_over`` = N, ``amortise_over`` and ``amortised_seconds_per_time``
    ([`amortised_cost`][vpintegrator.data.work_precision.amortised_cost]); the other rows as they are."""
    n = None if amortise_over is None else check_rollouts(amortise_over)
    out = []
    for r in rows:
        if r.kind == "model":
            n_star, method = break_even(r, rows)
            r = dataclasses.replace(r, break_even_rollouts=n_star, break_even_method=method)
            if n is not None:
                r = dataclasses.replace(r, amortise_over=n, amortised_seconds_per_time=amortised_cost(r, n))
        out.append(r)
    return out
