"""The work–precision table, in one place: the row type, the writer
([`write_work_precision`][vpintegrator.data.work_precision.write_work_precision]: ``<stem>.csv`` and ``.md``)
and the reader ([`read_work_precision`][vpintegrator.data.work_precision.read_work_precision]), the log–log
interpolation along a method's ladder (``ladder_value``), each classical method at a model's cost
([`at_equal_cost`][vpintegrator.data.work_precision.at_equal_cost]) and a learned model's training cost on
the cost axis ([`training_seconds`][vpintegrator.data.work_precision.training_seconds],
[`amortised_cost`][vpintegrator.data.work_precision.amortised_cost],
[`break_even`][vpintegrator.data.work_precision.break_even]). No torch.

The measurement that builds the rows (what each number is measured against): ``vpintegrator.rollout.precision``;
the figure: [`vpintegrator.plotting.plot_work_precision`][vpintegrator.plotting.plot_work_precision].

**Clocks.** Every cost is CPU time ([`vpintegrator.clock`][vpintegrator.clock]), which a loaded machine does not bend;
the file's column names say which clock: ``thread_cpu_seconds_per_time`` (a rollout's cost: the CPU time of
the thread that ran the batch-1 rollout), ``train_process_cpu_seconds`` (the training process's CPU time,
every thread) and ``amortised_cpu_seconds_per_time`` (their sum per unit time). The row type keeps the short
names (``seconds_per_time``, ``train_seconds``, ``amortised_seconds_per_time``); files written before the
names said their clock are still read.

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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import VPIntegratorError

__all__ = ["WP_COLUMNS", "WorkPrecisionRow", "read_work_precision", "write_work_precision", "work_precision_rows",
           "work_precision_stem", "check_work_precision_outputs", "ladder_value", "at_equal_cost", "amortised_cost",
           "break_even", "with_training_cost", "check_rollouts", "training_seconds", "training_summary"]

#: the columns of a table written before training cost was recorded (still read: no training time)
WP_COLUMNS_V1 = ("method", "kind", "h", "rtol", "n_steps", "t_end", "n_traj", "error_median", "error_p90",
                 "error_max", "drift_max", "seconds_per_time", "runner")
#: the columns of a table written before the costs' names said their clock (still read)
WP_COLUMNS_V2 = (*WP_COLUMNS_V1, "train_seconds", "amortise_over", "amortised_seconds_per_time",
                 "break_even_rollouts", "break_even_method")
#: the file's name of each cost column: it says the clock ([`vpintegrator.clock`][vpintegrator.clock]). A rollout's cost
#: is the CPU time of the thread that ran it (batch 1: all its work), a training's the CPU time of its whole
#: process (torch's intra-op threads do the work); the amortised cost adds the two
COST_COLUMNS = {"seconds_per_time": "thread_cpu_seconds_per_time", "train_seconds": "train_process_cpu_seconds",
                "amortised_seconds_per_time": "amortised_cpu_seconds_per_time"}
WP_COLUMNS = tuple(COST_COLUMNS.get(c, c) for c in WP_COLUMNS_V2)
_FIELD_OF = {v: k for k, v in COST_COLUMNS.items()}


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
    """Rows from a CSV written by [`write_work_precision`][vpintegrator.data.work_precision.write_work_precision] (one-line error for another file)."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            table = list(csv.DictReader(fh))
    except OSError as e:
        raise VPIntegratorError(f"{path}: cannot read the work-precision table ({e.strerror})") from None
    if not table or tuple(table[0]) not in (WP_COLUMNS, WP_COLUMNS_V2, WP_COLUMNS_V1):
        raise VPIntegratorError(f"{path}: not a work-precision table (expected the columns {', '.join(WP_COLUMNS)}); "
                                "write one with vpintegrator.rollout.write_work_precision")
    out = []
    for row in table:
        row = {_FIELD_OF.get(k, k): v for k, v in row.items()}
        try:
            out.append(WorkPrecisionRow(**{
                f.name: (str(row[f.name]) if f.type == "str" else int(row[f.name]) if f.type == "int"
                         else float(row[f.name])) for f in dataclasses.fields(WorkPrecisionRow)
                if f.name in row}))  # an older table: no training columns (not recorded)
        except (TypeError, ValueError) as e:
            raise VPIntegratorError(f"{path}: malformed work-precision row ({e})") from None
    return out


def write_work_precision(stem: str | Path, rows: Sequence[WorkPrecisionRow], overwrite: bool = False
                         ) -> tuple[Path, Path]:
    """Write the rows as ``<stem>.csv`` and ``<stem>.md`` (``vpintegrator.metrics.write_table``: atomic,
    under the overwrite rule); columns ``WP_COLUMNS`` (the costs named by their clock, ``COST_COLUMNS``).
    Returns (csv path, markdown path)."""
    from .summary import write_table

    from ..clock import METER_RULE

    table = [{COST_COLUMNS.get(k, k): v for k, v in dataclasses.asdict(r).items()} for r in rows]
    how = METER_RULE.format(clock="thread-CPU")
    return write_table(table, stem, overwrite=overwrite,
                       caption=f"Cost: batch-1 CPU seconds per unit of simulated time, {how}.")


def work_precision_rows(source: str | Path | Iterable[WorkPrecisionRow]) -> list[WorkPrecisionRow]:
    """The rows of ``source``: the path of a work-precision CSV (read), or rows in memory (checked)."""
    if isinstance(source, (str, Path)):
        return read_work_precision(source)
    rows = list(source)
    if not rows or not all(isinstance(r, WorkPrecisionRow) for r in rows):
        raise VPIntegratorError("rows: expected WorkPrecisionRow objects (vpintegrator.rollout.work_precision()) or "
                                "the path of a work-precision CSV", key="rows")
    return rows


def work_precision_stem(out: str | Path) -> Path:
    """``<out stem>_work_precision``: where ``vp-rollout --work-precision`` writes the table of a run whose
    rollout file is ``out`` (its ``.csv`` and ``.md``)."""
    out = Path(out)
    return out.with_name(out.stem + "_work_precision")


def check_work_precision_outputs(out: str | Path, overwrite: bool = False) -> None:
    """Refuse (before anything runs) the work-precision tables of the rollout file ``out`` that exist, unless
    ``overwrite``."""
    from .._outputs import check_output

    stem = work_precision_stem(out)
    for suffix in (".csv", ".md"):
        check_output(stem.with_name(stem.name + suffix), "table", overwrite)


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


def at_equal_cost(source: str | Path | Iterable[WorkPrecisionRow], methods: Sequence[str] | None = None
                  ) -> list[dict[str, Any]]:
    """Per model row of the table (a CSV path or rows) and per classical method (``methods`` None: every
    method with a step ladder, DOP853 included): ``{"model", "model_error", "model_cost", "model_h", "method",
    "error", "how", "train_seconds", "break_even", "break_even_method"}`` (the last three: the model row's
    training cost, NaN / "" where not recorded).

    ``error`` is the method's error at the model's own cost: log–log interpolation along its ladder between the
    two rungs whose costs bracket the model's (``how`` ``"interpolated"``), else the nearest rung
    (``"cheapest"`` / ``"dearest"``: the ladder does not reach that cost).
    """
    rows = work_precision_rows(source)
    models = [r for r in rows if r.kind == "model"]
    ladders: dict[str, list[WorkPrecisionRow]] = {}
    for r in rows:
        if r.kind != "model" and (methods is None or r.method in methods):
            ladders.setdefault(r.method, []).append(r)
    out = []
    for m in models:
        for method, ladder in ladders.items():
            e, where = ladder_value([(r.seconds_per_time, r.error_median) for r in ladder], m.seconds_per_time)
            if where == "none":
                continue
            how = {"below": "cheapest", "above": "dearest", "inside": "interpolated"}[where]
            out.append({"model": m.method, "model_error": m.error_median, "model_cost": m.seconds_per_time,
                        "model_h": m.h, "method": method, "error": e, "how": how, "train_seconds": m.train_seconds,
                        "break_even": m.break_even_rollouts, "break_even_method": m.break_even_method})
    return out


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


def training_seconds(source: str | Path) -> float:
    """The training CPU seconds of a model file's run: ``cpu_time`` of ``summary.json`` in the run directory
    ``source`` (or beside its ``best.pt``/``last.pt``); NaN where none is recorded (a pretrained model, a
    file outside a run directory, a run from before ``cpu_time`` was recorded). An ensemble member's
    ``cpu_time`` is the whole ensemble's (the process trained all its members)."""
    from ..rundir import read_summary

    path = Path(str(source))
    run = path if path.is_dir() else path.parent if path.name in ("best.pt", "last.pt") else None
    summary = None if run is None else read_summary(run)  # None: missing or unreadable
    value = None if summary is None else summary.get("cpu_time")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def training_summary(row: WorkPrecisionRow) -> str:
    """What ``vp-rollout --work-precision`` logs of a model row's training cost (one line)."""
    n, method, spent = row.break_even_rollouts, row.break_even_method, row.train_seconds
    trained = f"trained in {spent:.3g} CPU s" if math.isfinite(spent) else "training time not recorded"
    if not method:
        return f"{trained}; no classical ladder reaches its error {row.error_median:.3g}"
    if math.isinf(n):
        return f"{trained}; never pays for it: {method} is cheaper at its error"
    if math.isnan(n):
        return f"{trained}; {method} is the cheapest classical method at its error"
    amortised = (f"; {row.amortised_seconds_per_time:.3g} CPU s per unit time over {row.amortise_over:g} rollouts"
                 if math.isfinite(row.amortised_seconds_per_time) else "")
    return f"{trained}; pays for it after {n:.3g} rollouts of T = {row.t_end:g} (vs {method}){amortised}"
