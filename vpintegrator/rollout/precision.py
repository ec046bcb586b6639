"""Work–precision: error and invariant drift against cost, over a ladder of step sizes.

The diagram the numerical-integration community compares methods with (Hairer–Nørsett–Wanner; DiffEq's
"work-precision diagrams"): each classical method runs over a ladder of step sizes from the same initial
conditions; each run gives one point

- **error**: the relative error ‖z(T) − z_exact(T)‖ / ‖z_exact(T)‖ at the final time T against the exact
  flow (DOP853 at ``reference_rtol``), median, 90th percentile and max over the initial conditions;
- **drift**: the largest relative change |I(t) − I(0)| / max(|I(0)|, tiny) of any invariant of the system
  over [0, T] and over the initial conditions;
- **cost**: CPU seconds per unit of simulated time of ONE trajectory at batch 1 (the compiled
  single-trajectory stepper where it exists, as in the study's timing table), on the one cost meter
  ([`vpintegrator.clock.meter`][vpintegrator.clock.meter]): every row once cold (compilation and first-call work
  left out), then ``repeats`` interleaved rounds over all rows, the minimum kept; thread CPU seconds of the
  engine's start and steps (``vpintegrator.rollout.engine.price_seconds``: the studies' rule, one price per row;
  a DOP853 row, which is no step map of the engine, at the meter's reading around its solve).

DOP853 itself appears as a ladder over tolerances (rtol = atol), and trained models as single points at their
own step (first window from the exact flow, so that the model's error is its own). Everything is float64.
The reference is the exact flow, never a data generator: a method's error is its true error.

A model row also carries its training cost: ``train_seconds`` (the run directory's ``summary.json``
``cpu_time``), the break-even number of rollouts N* against the cheapest classical method at the model's error,
and with ``amortise_over`` = N the cost with training spread over N rollouts of length T.

This module is the measurement only: it builds the rows and hands them to the table's writer. The table
itself (row type, CSV writer and reader, equal-cost reading, break-even) is ``vpintegrator.data.work_precision``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arrays import relative_drift
# the table (rows, reader, writer, training cost) lives in the data layer; re-exported here
from ..data.work_precision import (  # noqa: F401 (re-exports)
    WP_COLUMNS, WorkPrecisionRow, check_rollouts, check_work_precision_outputs, read_work_precision,
    training_seconds, training_summary, with_training_cost, work_precision_stem, write_work_precision,
)
from ..errors import VPIntegratorError
from .methods import split_method
from ..quantiles import percentiles

if TYPE_CHECKING:
    from .config import RolloutConfig

__all__ = [
    "run_work_precision",
    "WP_COLUMNS",
    "WorkPrecisionRow",
    "DEFAULT_LADDER",
    "DEFAULT_METHODS",
    "DOP853_RTOLS",
    "work_precision",
    "write_work_precision",
    "read_work_precision",
    "training_seconds",
]

#: step multipliers of the ladder: 2h, h, h/2, h/4, h/8, h/16 (h/16: a high-order method reaches the learned
#: models' batch-1 cost inside its ladder instead of at its end)
DEFAULT_LADDER = (2.0, 1.0, 0.5, 0.25, 0.125, 0.0625)
#: the methods of the diagram when none are given: low and high order, symmetric/symplectic compositions
DEFAULT_METHODS = (
    "rk4", "implicit_midpoint", "gauss_legendre4", "gauss_legendre6", "implicit_midpoint_suzuki4",
    "implicit_midpoint_y6", "stormer_verlet", "stormer_verlet_y6", "rotation_splitting", "rotation_splitting_y6",
    "rotation_splitting_centred_y6",
)
#: the tolerances of DOP853's ladder (rtol = atol)
DOP853_RTOLS = (1e-4, 1e-6, 1e-8, 1e-10)

def _relative_error(y: np.ndarray, ref: np.ndarray, period: np.ndarray | None = None) -> np.ndarray:
    """[`vpintegrator.metrics.relative_error`][vpintegrator.metrics.relative_error] of final states (n, dim); a failed trajectory (NaN or inf)
    counts as an infinite error, never a small one; periodic components (``period``) wrapped."""
    from ..metrics import relative_error

    err = relative_error(y[:, None], ref[:, None], period)[:, 0]
    err[~np.isfinite(err)] = np.inf
    return err


def _drift(system, y: np.ndarray) -> float:
    """max over invariants, times and trajectories of |I(t) − I(0)| / max(|I(0)|, 1e-300); y (n, T, dim)."""
    worst = 0.0
    for name in system.invariant_names:
        values = np.asarray(system.invariant(name, y))  # (n, T)
        d = np.abs(relative_drift(values, values[:, :1], floor=1e-300))
        worst = max(worst, float(np.nanmax(d)) if np.isfinite(d).any() else math.inf)
        if not np.isfinite(d).all():
            worst = math.inf
    return worst if system.invariant_names else math.nan


def _stats(err: np.ndarray) -> tuple[float, float, float]:
    med, p90 = percentiles(err.ravel(), [50, 90])
    return med, p90, float(np.max(err))


def _check_ladder(ladder: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(x) for x in ladder)
    if len(out) < 4 or any(not (math.isfinite(x) and x > 0) for x in out):
        raise VPIntegratorError(f"ladder: expected at least 4 positive step multipliers (e.g. 2, 1, 0.5, 0.25, "
                                f"0.125), got {list(ladder)!r}")
    return out


#: steps per engine block of the batch-1 timing runs: one trajectory's block is small (16 384 x dim x 8 bytes),
#: and a long block keeps the engine's per-block Python overhead (~3 µs) out of a cheap method's cost
BATCH1_CHUNK_STEPS = 16384


class _Batch1:
    """The batch-1 calls of a work–precision table's rows, priced together on the one cost meter
    ([`vpintegrator.clock.meter`][vpintegrator.clock.meter]: one cold call each, compilation and set-up apart;
    then interleaved rounds, the minimum kept; thread CPU seconds)."""

    def __init__(self) -> None:
        self.calls: dict[int, Callable[[], object]] = {}
        self.runners: dict[int, str] = {}

    def rollout(self, index: int, step_map_factory, y0_one: np.ndarray, dt: float, n_steps: int) -> None:
        """Row ``index``: one trajectory's states by a fresh step map, priced by the engine's seconds of its start
        and steps (``vpintegrator.rollout.engine.price_seconds``, the studies' rule)."""
        from .engine import price_seconds, rollout

        def call() -> float:
            sm = step_map_factory()
            tr = rollout(sm, y0_one, dt, n_steps, chunk_steps=BATCH1_CHUNK_STEPS)
            self.runners[index] = str(sm.describe().get("runner", "?"))
            return price_seconds(tr.meta)
        self.calls[index] = call

    def call(self, index: int, call: Callable[[], object], runner: str) -> None:
        """Row ``index``: any call that produces its output once, priced by the meter's clock around it."""
        self.calls[index] = call
        self.runners[index] = runner

    def price(self, rows: list[WorkPrecisionRow], repeats: int) -> list[WorkPrecisionRow]:
        """``rows`` with the metered cost per unit time (and runner) of every row that registered a call."""
        import dataclasses

        from ..clock import meter

        costs = meter(self.calls, max(1, int(repeats)))
        return [dataclasses.replace(r, seconds_per_time=costs[i].seconds / r.t_end, runner=self.runners.get(i, r.runner))
                if i in costs else r for i, r in enumerate(rows)]


def _ladder_steps(dt: float, t_end: float, ladder: tuple[float, ...]) -> list[tuple[float, int]]:
    """(h, n_steps to t_end) of each rung dt × multiplier; a one-line error where t_end is not a whole number of
    steps of a rung."""
    out = []
    for mult in ladder:
        h = dt * mult
        n_steps = round(t_end / h)
        if n_steps < 1 or not math.isclose(n_steps * h, t_end, rel_tol=1e-9):
            raise VPIntegratorError(f"ladder: t_end = {t_end:g} is not a whole number of steps of h = {h:g} (dt × "
                                    f"{mult:g}); choose t_end a multiple of every step")
        out.append((h, n_steps))
    return out


def _field_rows(label: str, model, system, one, y0: np.ndarray, ref: np.ndarray, dt: float, t_end: float,
                ladder: tuple[float, ...], batch1: _Batch1, first: int, train_seconds: float,
                period: np.ndarray | None = None) -> list[WorkPrecisionRow]:
    """The rows of a learned vector field: its integrator (``vpintegrator.rollout.field.field_step``) at every
    step of the ladder, like a classical method's; errors and drift of the true system; their batch-1 calls
    registered with ``batch1`` as rows ``first``, ``first + 1``, ..."""
    from .engine import rollout
    from .field import field_step

    rows: list[WorkPrecisionRow] = []
    for h, n_steps in _ladder_steps(dt, t_end, ladder):
        tr = rollout(field_step(model, h), y0[:, None], h, n_steps)
        med, p90, mx = _stats(_relative_error(tr.y[:, -1], ref, period))
        batch1.rollout(first + len(rows), lambda h=h: field_step(model, h), y0[:1, None], h, n_steps)
        rows.append(WorkPrecisionRow(label, "model", h, math.nan, n_steps, t_end, len(y0), med, p90, mx,
                                     _drift(system, tr.y), math.nan, "?", train_seconds))
    return rows


def work_precision(
    system,
    y0: np.ndarray,
    dt: float,
    t_end: float,
    *,
    methods: Sequence[str] | None = None,
    ladder: Sequence[float] = DEFAULT_LADDER,
    dop853_rtols: Sequence[float] | None = DOP853_RTOLS,
    models: dict[str, Any] | None = None,
    reference_rtol: float = 1e-13,
    repeats: int = 3,
    train_seconds: dict[str, float] | None = None,
    amortise_over: float | None = None,
    observation: Any = None,
    period: np.ndarray | None = None,
) -> list[WorkPrecisionRow]:
    """Work–precision rows of classical methods over a step ladder, DOP853 over tolerances, and models.

    Parameters
    ----------
    system : System or str, or a SystemFamily (one system per row of ``y0``: a parametric data set's, each
        row run with its own parameters: the classical methods with the true parameters)
    y0 : ndarray, shape (n_traj, dim)
        The initial conditions (use held-out ones when models are compared).
    dt : float
        The base step h; the ladder multiplies it. t_end / (dt · multiplier) must be a whole number.
    t_end : float
        The final time T at which the error is measured.
    methods : list of str, optional
        Names of [`list_integrators`][vpintegrator.integrators.list_integrators]; default ``DEFAULT_METHODS`` (those
        the system supports).
    ladder : step multipliers (≥ 4)
    dop853_rtols : tolerances of DOP853's own ladder, or None to leave it out
    models : {label: model}, optional
        Trained models (``pred_window`` states per call, their data's step ``dt``): one point each; a learned
        vector field (``vpintegrator.models.vector_field``) one point per step of the ladder, integrated by its
        integrator (``rollout_method``, else its training method).
    reference_rtol : float
        rtol = atol of the exact flow (DOP853) the errors are measured against.
    repeats : int
        Warm timing rounds over all points, interleaved, after one cold call each (the minimum is kept: the
        cost meter, ``vpintegrator.clock.meter``).
    train_seconds : {label: CPU seconds}, optional
        The models' training cost ([`training_seconds`][vpintegrator.data.work_precision.training_seconds] reads it from a run directory); a model left out
        has NaN (not recorded). Every model row gets its break-even number of rollouts.
    amortise_over : float, optional
        N: model rows also get their cost with training spread over N rollouts of length ``t_end``.
    observation : vpintegrator.data.observation.Observation, optional
        Score every row on these channels (a run of models trained on an observation, ``observe``): the
        classical rows step the full state from ``y0`` and are scored on its observed channels; the models read
        the observed channels of the exact first window and step in them. Errors against the observed exact
        flow.

    period : ndarray, shape (dim,), optional
        Each scored component's period, 0 where not periodic (default the system's ``periodic``; none on an
        observation's channels): those components' errors are wrapped (``vpintegrator.metrics``).

    Returns
    -------
    list of WorkPrecisionRow
    """
    from ..models.vector_field import VectorFieldModel
    from ..data import solve_flow
    from ..integrators import get_integrator, supported_integrators
    from ..systems import get_system
    from ..systems.family import SystemFamily
    from .engine import rollout
    from .family import base_system, family_initial_window, solve_flow_rows, step_for
    from .methods import model_step
    from .steps import IntegratorStep

    system = system if isinstance(system, SystemFamily) else get_system(system)
    if amortise_over is not None:
        check_rollouts(amortise_over)
    for label, value in (train_seconds or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise VPIntegratorError(f"train_seconds[{label!r}]: expected CPU seconds (a number >= 0, or NaN: not "
                                    f"recorded), got {value!r}", key="train_seconds")
    y0 = np.atleast_2d(np.asarray(y0, dtype=np.float64))
    if y0.ndim != 2 or y0.shape[1] != system.dim or y0.shape[0] == 0:
        raise VPIntegratorError(f"y0: expected shape (n_traj, {system.dim}) with n_traj ≥ 1, got {y0.shape}")
    dt, t_end = float(dt), float(t_end)
    if not (dt > 0 and t_end > 0 and math.isfinite(dt) and math.isfinite(t_end)):
        raise VPIntegratorError(f"dt and t_end: expected positive finite numbers, got dt={dt!r}, t_end={t_end!r}")
    ladder = _check_ladder(ladder)
    if isinstance(system, SystemFamily) and len(system) != y0.shape[0]:
        raise VPIntegratorError(f"system: {len(system)} parameter sets for {y0.shape[0]} initial conditions")
    one = base_system(system)  # the batch-1 timings: the first trajectory's system
    ref = solve_flow_rows(system, y0, np.array([0.0, t_end]), reference_rtol, reference_rtol)[:, -1]
    if observation is not None and int(observation.full_dim) != int(one.dim):
        raise VPIntegratorError(f"observation: maps states of dim {observation.full_dim}, the system's are "
                                f"{one.dim}", key="observe")
    seen = (lambda y: y) if observation is None else (lambda y: np.asarray(observation.apply(y)))
    if period is None and observation is None:
        from ..data.trajectories import state_periods

        period = state_periods(one, one.dim)
    ref_full, ref = ref, seen(ref)
    rows: list[WorkPrecisionRow] = []
    batch1 = _Batch1()  # every row's batch-1 call, priced together at the end (interleaved, warm)
    # the default methods the system can run (e.g. no splitting of a non-separable one); named ones are checked
    names = list(methods) if methods is not None else supported_integrators(DEFAULT_METHODS, one)
    for name in names:
        integrator = get_integrator(name)
        for h, n_steps in _ladder_steps(dt, t_end, ladder):
            tr = rollout(step_for(system, partial(IntegratorStep, integrator=integrator, dt=h)), y0[:, None], h, n_steps)
            med, p90, mx = _stats(_relative_error(seen(tr.y[:, -1]), ref, period))
            batch1.rollout(len(rows), lambda h=h, integrator=integrator: IntegratorStep(one, integrator, h),
                           y0[:1, None], h, n_steps)
            rows.append(WorkPrecisionRow(integrator.name, "integrator", h, math.nan, n_steps, t_end, len(y0), med,
                                         p90, mx, _drift(system, tr.y), math.nan, "?"))
    for rtol in dop853_rtols or ():
        n_out = max(2, round(t_end / dt) + 1)
        t = np.linspace(0.0, t_end, n_out)
        y = solve_flow_rows(system, y0, t, rtol, rtol)
        med, p90, mx = _stats(_relative_error(seen(y[:, -1]), ref, period))
        def dop853(rtol: float = float(rtol)) -> object:
            return solve_flow(one, y0[:1], np.array([0.0, t_end]), rtol=rtol, atol=rtol)
        batch1.call(len(rows), dop853, "numba")
        rows.append(WorkPrecisionRow("dop853", "dop853", math.nan, float(rtol), 0, t_end, len(y0), med, p90, mx,
                                     _drift(system, y), math.nan, "numba"))
    for label, model in (models or {}).items():
        if isinstance(model, VectorFieldModel):  # a learned field: its integrator over the step ladder (issue 43)
            if observation is not None:
                raise VPIntegratorError(f"models: {label} is a learned vector field of the full state; an observed "
                                        "work-precision table takes window models of the observed channels",
                                        key="models")
            rows += _field_rows(label, model, system, one, y0, ref_full, dt, t_end, ladder, batch1, len(rows),
                                float((train_seconds or {}).get(label, math.nan)), period)
            continue
        n_steps = round(t_end / dt)
        if not math.isclose(n_steps * dt, t_end, rel_tol=1e-9):
            raise VPIntegratorError(f"t_end: {t_end:g} is not a whole number of the models' step dt = {dt:g}")
        w0 = seen(family_initial_window(system, y0, dt, model.seq_len, method="exact_flow"))
        tr = rollout(model_step(model, device="cpu"), w0, dt, n_steps)  # a context model: c from w0
        med, p90, mx = _stats(_relative_error(tr.y[:, -1], ref, period))
        batch1.rollout(len(rows), lambda model=model: model_step(model, device="cpu"), w0[:1], dt, n_steps)
        rows.append(WorkPrecisionRow(label, "model", dt, math.nan, n_steps, t_end, len(y0), med, p90, mx,
                                     _drift(system, tr.y) if observation is None else math.nan, math.nan, "?",
                                     float((train_seconds or {}).get(label, math.nan))))
    return with_training_cost(batch1.price(rows, repeats), amortise_over)


def run_work_precision(config: RolloutConfig, *, overwrite: bool = False, log: Callable[[str], None] | None = None,
                       repeats: int = 3, amortise_over: float | None = None
                       ) -> tuple[Path, Path, list[WorkPrecisionRow]]:
    """The work–precision table of a ``vp-rollout`` configuration (``vp-rollout --work-precision``).

    The initial conditions are the first states of the trajectories the configuration selects (``traj`` /
    ``n_traj``), the base step h is the data's dt, T the configuration's ``t_end`` (or the data's horizon);
    the methods are its integrators (``exact_flow`` left out: DOP853 has its own tolerance ladder; and the
    rows of ``vpintegrator.rollout.methods``: ``fd+rk4``, ``sindy+rk4``, ``parrot``, ...), or
    ``DEFAULT_METHODS`` when it names none, and its models are points at their own step. The ladder is
    2h, h, h/2, h/4, h/8, h/16 (without 2h when T is an odd number of steps). A model loaded from a run directory
    carries its training CPU seconds ([`training_seconds`][vpintegrator.data.work_precision.training_seconds]) and break-even N; ``amortise_over`` = N adds
    its cost with training spread over N rollouts of length T. Written to
    ``<out stem>_work_precision.csv``, ``.md`` and ``.tex`` (under the overwrite rule).

    Returns
    -------
    (csv path, markdown path, rows)
    """
    from ..data import read_trajectories
    from ..data.observation import observation_of
    from .methods import parse_model_entry
    from .splits import select
    from .config import model_entries

    from .._progress import log_lines
    from ..data.trajectories import state_periods

    say = log_lines(log, __name__)  # INFO records of vpintegrator.rollout.precision, then log's
    data = Path(config.data)
    meta, system, dt, idx, _t0, n_steps = select(data, config.traj, config.n_traj, config.t_end)
    first = read_trajectories(data, traj=idx, steps=[0])
    y0 = first.y[:, 0]
    if first.params is not None:  # a parametric data set: every method with each trajectory's true parameters
        system = first.systems()
    # the rows of rollout/methods.py (fd+rk4, sindy+rk4, parrot) fit first: no step-size ladder of their own
    from .methods import parse_row

    names = [n for n in (config.integrators or []) if n != "exact_flow" and parse_row(n) is None] or None
    models, trained, entries = {}, {}, []
    for entry in model_entries(config.models):
        label, model, source = parse_model_entry(entry)
        # a learned field given as RUN@METHOD: the run directory holds its training cost
        models[label], trained[label] = model, training_seconds(split_method(str(source))[0])
        entries.append((label, model, source))
    from .observed import run_observation

    # models trained on an observation (or observe given): every row scored on those channels
    observation, observed_lines = run_observation(config.observe, meta, system, entries, data)
    if observation is not None and observation_of(meta) is not None:
        raise VPIntegratorError(f"work-precision: {data} holds observed channels only; the table's classical rows "
                                "step the full state: give the data file of full states", key="data")
    for line in observed_lines:
        say(line)
    if observation is not None:
        say(f"work-precision: every row scored on the observed channels {observation.spec} (the classical rows step "
            "the full state from the true initial condition; the models read the observed first window)")
    ladder = DEFAULT_LADDER if n_steps % 2 == 0 else DEFAULT_LADDER[1:]
    stem = work_precision_stem(config.out)
    say(f"work-precision: {len(y0)} initial conditions, T = {n_steps * dt:g}, steps {dt:g} x "
        f"{', '.join(f'{m:g}' for m in ladder)}")
    rows = work_precision(system, y0, dt, n_steps * dt, methods=names, ladder=ladder, models=models,
                          repeats=repeats, train_seconds=trained, amortise_over=amortise_over,
                          observation=observation,
                          period=None if observation is not None else state_periods(system, y0.shape[1], meta))
    for r in rows:
        if r.kind == "model":
            say(f"work-precision: {r.method}: {training_summary(r)}")
    csv_path, md_path = write_work_precision(stem, rows, overwrite=overwrite)
    return csv_path, md_path, rows
