"""What a comparison run writes, from its plan (``vpintegrator.rollout.plan.RolloutPlan``): the
rollout file's root attributes, ``/reference`` (the exact flow from the initial conditions, or the data file
continued beyond its horizon by the data's generator; held-out conditions integrated from their initial
conditions) and each method's group (states, per-step metrics and volume streamed by the host or the device
engine). The file's layout, writer and reader are ``vpintegrator.data.rollouts``.

**The failure rule** (every row kind, whatever the selection): a row whose trajectories blow up, or whose step
map raises, is marked (its ``failed_step``, the ``failed`` column of the table, the report's ``failures``
with the row's first failed trajectory by its ``/traj_index``: −1 for a held-out condition) and the rest of
the run goes on; an error of the writer itself (the output's disk) stops the run.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable, cast

import numpy as np

from ..errors import VPIntegratorError
from .config import use_device_engine
from .engine import RolloutStats, StepMap, stream_rollout
from .family import FamilyStep, family_initial_window, for_rows, step_for
from .plan import RolloutPlan
from .report import Failure
from .splits import split_rows
from .observed import ObservedSystem, observation_attrs, observed_reference
from .steps import ExactFlowStep, ModelStep

__all__ = ["root_attrs", "write_reference", "write_method", "first_failure", "shown", "one_line", "dry_rollout"]

Say = Callable[[str], None]


def shown(source: str) -> str:
    """A path as the rollout file records it: as given, an absolute one relative to the working directory
    ([`vpintegrator.provenance.redact_path`][vpintegrator.provenance.redact_path]: no absolute path of this machine); ``pretrained:``/``gml:``
    names and ``<object>`` labels as they are."""
    from ..provenance import redact_path

    if not isinstance(source, str) or source.startswith(("pretrained:", "gml:", "<")) or not os.path.isabs(source):
        return source
    return redact_path(source)


def root_attrs(plan: RolloutPlan) -> dict[str, Any]:
    """What the rollout file says about the run (its root attributes; the schema is the writer's)."""
    from .._version import __version__
    from ..systems import System, system_meta
    from ..systems.family import SystemFamily, param_row

    t, n_file, system = plan.t, plan.data_n_states, plan.system
    params: dict[str, Any] = {}
    meta: dict[str, Any] = {}  # (none without a system)
    if isinstance(system, SystemFamily):  # every rolled-out row's parameters (data rows, then held-out conditions)
        params = {"parameter_columns": list(system.columns),
                  "traj_params": [param_row(s, system.columns).tolist() for s in system]}
        meta = system_meta(system.base)
    elif isinstance(system, System):
        meta = system_meta(system)
    return {
        **meta,
        **params,
        "dim": plan.system.dim,
        "dt": plan.dt,
        "t0": plan.t0,
        "t_end": float(t[-1]),
        "n_traj": plan.n_traj,
        "n_states": plan.n_steps + 1,
        "n_steps": plan.n_steps,
        "invariant_names": list(plan.system.invariant_names),
        "methods": [m.label for m in plan.methods],
        "method_kinds": [m.step_map.kind for m in plan.methods],
        "data_file": shown(str(plan.data)),
        "data_method": str(plan.data_meta.get("method", "")),
        "data_n_states": n_file,
        "data_n_steps": n_file - 1,
        "reference": plan.reference_desc,
        **plan.reference_attrs,
        "traj_split": list(plan.run_labels),
        "heldout": plan.n_new,
        "heldout_seed": plan.heldout_seed,
        "init": plan.init,
        "overlap": plan.steps.overlap,
        "blowup": plan.blowup,
        "chunk_steps": plan.chunk_steps,
        "engine": plan.steps.engine,
        **({"volume_note": plan.volume_note} if plan.volume_note else {}),
        **({"periodic": [float(p) for p in plan.period]} if plan.period is not None and plan.period.any() else {}),
        **observation_attrs(plan.system, plan.data_meta),
        "vpintegrator_version": __version__,
    }


def write_method(writer: Any, plan: RolloutPlan, say: Say, label: str, step_map: StepMap, source: str,
                 yref: Any) -> tuple[list[dict], Failure | None]:
    """``/methods/<label>``: states, per-step metrics and volume streamed; returns (table row, failure).

    By the host engine ([`stream_rollout`][vpintegrator.rollout.engine.stream_rollout], metrics in NumPy) or, for models when the ``engine`` key
    says so, the device engine ([`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout], metrics on the
    model's device): the same metric streams, the same sink, the same datasets."""
    from ..arrays import to_numpy
    from ..metrics import TrajectoryMetricsStream, VolumeStream, block_metrics, summary_row
    from .._progress import ProgressLines
    from .device import device_stream_rollout

    system, t, n_steps = plan.system, plan.t, plan.n_steps
    n_traj, names = plan.n_traj, tuple(plan.system.invariant_names)
    T = step_map.seq_len
    init = ("reference" if T > 1 else "initial condition") if (T == 1 or plan.init == "reference") else plan.init
    stream = TrajectoryMetricsStream(system, n_traj, t_center=0.5 * (t[0] + t[-1]), scale=plan.spread, context=T,
                                     vpt_threshold=plan.vpt_threshold, period=plan.period)
    vol = None
    no_volume = delay_map_note(label, step_map) if plan.volume else None
    if no_volume:
        say(no_volume)
    if plan.volume and not (no_volume and getattr(step_map, "integrator", None) is not None):  # no Jacobian: none
        vol = VolumeStream(step_map.log_abs_det_jacobian, n_traj, T, step_map.advance, n_steps,
                           by_rows=isinstance(step_map, FamilyStep) or bool(getattr(step_map, "by_rows", False)))
    series = writer.method(label, map_step=None if vol is None else vol.map_step)
    # progress within the method: a line per interval through the log, for methods longer than one
    lines = ProgressLines(f"{label}", n_steps + 1, unit="steps", write=say, first=False)
    written = [0]  # states handed to the file so far (whole blocks)

    def sink(k0, block):  # block: the states and block_metrics' per-step metrics of steps k0 ..
        try:
            series.write(k0, block)
        except BaseException as err:  # the output's fault, not the row's: the run stops
            raise _OutputError() from err
        written[0] = k0 + block["y"].shape[1]
        lines.update(written[0])

    device = use_device_engine(plan.steps.engine, step_map, system)

    def host_sink(k0, chunk, volume=vol):
        k1 = k0 + chunk.shape[1]
        if device:  # (the failure rule's NaN blocks of a device-engine row: its metric streams are on the device)
            import torch

            on = getattr(step_map, "device", "cpu")
            metrics = block_metrics(stream, volume, torch.as_tensor(t[k0:k1], device=on),
                                    torch.as_tensor(chunk, device=on), torch.as_tensor(yref[:, k0:k1], device=on))
            sink(k0, {"y": chunk, **{k: to_numpy(v) for k, v in metrics.items()}})
            return
        sink(k0, {"y": chunk, **block_metrics(stream, volume, t[k0:k1], chunk, yref[:, k0:k1])})

    how = f"{step_map.kind}, init {init}" + (f", device engine on {getattr(step_map, 'device', None)}" if device else "")
    say(f"{label}: rolling out {n_traj} trajectories x {n_steps} steps ({how})")
    error = None
    try:
        window0 = (yref[:, :T] if init in ("reference", "initial condition")
                   else family_initial_window(system, yref[:, 0], plan.dt, T, method=plan.init))
        if device:  # (use_device_engine: a model's step map)
            res = device_stream_rollout(cast(ModelStep, step_map), window0, plan.dt, n_steps, sink, reference=yref,
                                        metrics=stream, volume=vol, jit=plan.steps.fast_step, t0=plan.t0,
                                        chunk_steps=plan.chunk_steps, blowup=plan.blowup)
        else:
            warm_seconds = warm_up(step_map, window0, plan.dt, n_steps, plan.t0, plan.blowup)
            res = stream_rollout(step_map, window0, plan.dt, n_steps, host_sink, t0=plan.t0,
                                 chunk_steps=plan.chunk_steps, blowup=plan.blowup)
            res = settle_cost(res, step_map, window0, plan.dt, n_steps, plan.t0, plan.blowup, plan.chunk_steps)
            res.meta["warmup_seconds"] = warm_seconds
    except _OutputError as err:
        raise err.__cause__ from None  # type: ignore[misc]
    except Exception as err:  # the row's own failure: marked, and the run goes on
        error = one_line(err)
        res = _failed_from(series, written[0], n_traj, int(system.dim), n_steps, host_sink, plan.chunk_steps)
    lines.close()
    per_traj = stream.summary()
    cum = None if vol is None or no_volume else vol.max_abs_cum  # a delay map's volume: in the file, not the table
    if plan.blocks.per_traj:  # a shard: the values its merged table is made of
        from ..data.rollout_shards import write_per_traj

        write_per_traj(series.group, per_traj, cum, labels=plan.labels[label])
    # the table's cost: a host-engine row's price (settle_cost) per step; a device row's: its steps' device time
    from . import engine

    per_step = float(engine.price_seconds(res.meta) if "cost_runs" in res.meta else res.seconds) / max(1, n_steps)
    row = summary_row(label, per_traj, names, max_abs_cum_log_det_J=cum, seconds_per_step=per_step,
                      failed_step=res.failed_step)
    rows = split_rows(label, plan, per_traj, names, cum, per_step, res.failed_step)
    reason = error or getattr(step_map, "failure_reason", None)  # a fitted row without a model says why
    failure = first_failure(plan, label, res.failed_step, reason if isinstance(reason, str) else None)
    series.close(res.failed_step, {
        **{k: v for k, v in res.meta.items() if isinstance(v, (str, int, float, bool))},
        "engine": "device" if device else "host",
        "label": label,
        "source": shown(source),
        "init": init,
        "seconds": float(res.seconds),
        "seconds_per_step": per_step,
        "n_failed": res.n_failed,
        "split": list(plan.labels[label]),
        **({"failure_reason": reason} if isinstance(reason, str) and reason else {}),
        **({"volume_note": no_volume} if no_volume else {}),
        **{f"summary_{k}": v for k, v in row.items() if k != "method"},
    })
    return rows, failure


def delay_map_note(label: str, step_map: StepMap) -> str | None:
    """Why row ``label`` has no volume column, or None: a classical row on a system without a Jacobian (nothing is
    computed), or a delay map (a window of ``seq_len`` states shifted by fewer
    new ones per call: arx, narx, delay_dmd, delay_sindy, parrot, a window network) that claims no volume
    preservation (its model's ``preserves`` lacks ``"volume"``; a fitted row claims none). The determinant of such a
    map on its delay vectors is no volume of the state space, so its table cell is left empty (NaN) with this reason
    (the log line and the row's ``volume_note``); the per-map values stay in the file (``vp-plot --kind volume``)."""
    system, integrator = getattr(step_map, "system", None), getattr(step_map, "integrator", None)
    if integrator is not None and system is not None and not _has_jacobian(system):
        return (f"{label}: no volume column: the system {getattr(system, 'name', '?')!r} gives no Jacobian, and the "
                "step's determinant needs it (give field_jacobian to get the column)")
    if int(step_map.seq_len) <= int(step_map.advance):
        return None
    if "volume" in tuple(getattr(getattr(step_map, "model", None), "preserves", ()) or ()):
        return None
    return (f"{label}: no volume column: a delay map ({step_map.seq_len} states in, {step_map.advance} new per step) "
            "that claims no volume preservation; the determinant of its map on delay vectors is no volume of the state "
            "space")


def _has_jacobian(system: Any) -> bool:
    """Whether ``system.jacobian`` is defined (a system from elsewhere may give its field alone)."""
    try:
        system.jacobian(np.zeros((1, int(system.dim))))
    except NotImplementedError:
        return False
    except Exception:  # noqa: BLE001 - defined, only not at 0 (a log, a division): the rows say so themselves
        return True
    return True


#: the steps of a row's warm-up (``warm_up``), in calls of its map beyond its first window
WARM_UP_CALLS = 2


def warm_up(step_map: StepMap, window0: np.ndarray, dt: float, n_steps: int, t0: float = 0.0,
            blowup: float = 1e3) -> float:
    """Run a row for a few steps on every trajectory before it is timed, so that compilation (numba's kernels
    on a cold cache, a fresh install's first table) and other first-call work fall in the row's set-up and never
    in its ``seconds_per_step`` (the cost meter's rule, ``vpintegrator.clock``): a fresh install's first table
    and a warm second one give the same cost column. The same rows and the same path as the timed run (a batch
    and a single trajectory may run different kernels). The thread-CPU seconds it took (recorded as the row's
    ``warmup_seconds``); a row that fails here fails again, and is reported, in its timed run."""
    from ..clock import thread_cpu

    steps = min(int(n_steps), step_map.seq_len + WARM_UP_CALLS * step_map.advance)
    tic = thread_cpu()
    _dry_run(step_map, window0, dt, steps, t0, blowup, max(1, steps))  # a failure: the timed run reports it
    return thread_cpu() - tic


def dry_rollout(step_map: StepMap, window0: np.ndarray, dt: float, n_steps: int, t0: float, blowup: float,
                chunk_steps: int) -> RolloutStats:
    """A rollout of the row whose states go nowhere (a warm-up, a repeat of the timed run, a cost meter's call):
    its stats; the step map's error propagates."""
    return stream_rollout(step_map, window0, dt, n_steps, lambda k0, block: None, t0=t0, chunk_steps=chunk_steps,
                          blowup=blowup)


def _dry_run(step_map: StepMap, window0: np.ndarray, dt: float, n_steps: int, t0: float, blowup: float,
             chunk_steps: int) -> RolloutStats | None:
    """``dry_rollout``, or None when the map raised."""
    try:
        return dry_rollout(step_map, window0, dt, n_steps, t0, blowup, chunk_steps)
    except Exception:  # noqa: BLE001
        return None


#: a row whose timed run's price was less than this (CPU seconds) is run again, its states not kept, ``COST_REPEATS``
#: runs in all, and costs the least of them: a run this short is at the scale of first-call work (fresh memory,
#: cold caches), which one reading cannot tell from its steps (the cost meter's minimum over repeats)
COST_REPEAT_BELOW = 0.05
COST_REPEATS = 3


def settle_cost(res: RolloutStats, step_map: StepMap, window0: np.ndarray, dt: float, n_steps: int, t0: float,
                blowup: float, chunk_steps: int) -> RolloutStats:
    """``res`` of a row's timed (warm) run, priced by the one rule of every priced row
    (``vpintegrator.rollout.engine.price_seconds`` of its meta, ``PRICE_OF``: the engine's seconds of the step map's
    start and its steps): when the timed run's price was under ``COST_REPEAT_BELOW`` CPU seconds and no trajectory
    failed, the least over ``COST_REPEATS`` runs (the repeats roll out the same trajectories to a sink that keeps
    nothing), its ``seconds`` and ``setup_seconds`` those of the run priced least; ``meta["cost_runs"]`` says how
    many runs were priced, ``meta["cost_of"]`` by what rule."""
    from . import engine

    runs, price = 1, engine.price_seconds(res.meta)
    if price < COST_REPEAT_BELOW and not res.n_failed:
        for _ in range(COST_REPEATS - 1):
            again = _dry_run(step_map, window0, dt, n_steps, t0, blowup, chunk_steps)
            if again is None:  # a map that fails on a later call: the timed run stands
                break
            runs += 1
            if engine.price_seconds(again.meta) < price:  # the run least disturbed: its seconds are the row's
                price, res.seconds, res.setup_seconds = (engine.price_seconds(again.meta), again.seconds,
                                                         again.setup_seconds)
    res.meta.update(seconds=res.seconds, setup_seconds=res.setup_seconds, seconds_per_step=res.seconds_per_step,
                    cost_runs=runs, cost_of=engine.PRICE_OF)
    return res


class _OutputError(Exception):
    """Raised from a method's sink when the rollout file cannot be written (the cause is the error)."""


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and message, at most 200 characters."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def _failed_from(series: Any, k_first: int, n_traj: int, dim: int, n_steps: int, host_sink: Callable[..., None],
                 chunk_steps: int) -> RolloutStats:
    """The failure rule for a row whose step map raised once ``k_first`` states were written: a trajectory
    that had not failed yet fails at step ``k_first`` (its first state not computed; one that had, at its
    first non-finite state, read back from ``series``); the states from there are NaN, as after a blow-up,
    and go through the same sink and metric streams, block by block (no volume: the map is not called
    again)."""
    failed = np.full(n_traj, -1, dtype=np.int64)
    for k0 in range(0, k_first, chunk_steps):  # the failures before it (NaN from their step on)
        bad = ~np.isfinite(series.y[:, k0 : min(k_first, k0 + chunk_steps)]).all(axis=-1)
        new = (failed < 0) & bad.any(axis=1)
        failed[new] = k0 + np.argmax(bad[new], axis=1)
    k0 = k_first
    while k0 <= n_steps:
        k1 = min(n_steps + 1, (k0 // chunk_steps + 1) * chunk_steps)
        host_sink(k0, np.full((n_traj, k1 - k0, dim), np.nan), volume=None)
        k0 = k1
    failed[failed < 0] = min(k_first, n_steps)
    return RolloutStats(failed_step=failed, seconds=float("nan"), setup_seconds=float("nan"), n_steps=int(n_steps),
                        meta={})


def first_failure(plan: RolloutPlan, label: str, failed_step: np.ndarray, reason: str | None = None) -> Failure | None:
    """The failure of method ``label`` from its ``failed_step`` per rolled-out row (−1: none), None when no row
    failed: how many, and the earliest (by step) row's ``/traj_index`` (its data-file index, −1 for a
    held-out condition), step and time."""
    failed = np.asarray(failed_step)
    n_failed = int(np.sum(failed >= 0))
    if not n_failed:
        return None
    first = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
    k = int(failed[first])
    return Failure(label, n_failed, plan.n_traj, int(plan.traj_index[first]), k, float(plan.t[k]), reason=reason)


def shown_data(plan: RolloutPlan) -> str:
    """The data file as given, an absolute path relative to the working directory (no absolute path of this
    machine)."""
    from ..provenance import redact_path

    return redact_path(plan.data)


def write_reference(writer: Any, plan: RolloutPlan, say: Say, ref_file: Any, reference_gen: StepMap | None) -> Any:
    """``/reference``: the exact flow from the initial conditions (``plan.exact_from_ics``), or the data file
    then (beyond it) the data's own generator from its last state; held-out conditions (rows after the data
    file's) integrated from their initial conditions by the exact flow or the generator."""
    from ..arrays import to_numpy
    from ..metrics import TrajectoryMetricsStream

    n_steps, t = plan.n_steps, plan.t
    n_traj, cs = plan.n_traj, writer.chunks[1]  # whole chunks of the file along time
    n_data, n_file = plan.n_data, ref_file.n_states
    series = writer.reference()
    ref_failed = np.full(n_traj, -1, dtype=np.int64)

    def integrate(step_map, y0, rows: slice, k_first: int, t_first: float, what: str) -> None:
        """States ``k_first ..`` of ``rows`` by ``step_map`` from ``y0``; a failure is an error."""
        def sink(k0, chunk):
            series.y[rows, k_first + k0 : k_first + k0 + chunk.shape[1]] = chunk

        res = stream_rollout(for_rows(step_map, rows), y0, plan.dt, n_steps - k_first, sink, t0=t_first,
                             chunk_steps=plan.chunk_steps, blowup=plan.blowup)
        failed = np.where(res.failed_step >= 0, res.failed_step + k_first, -1)
        ref_failed[rows] = failed
        if (failed >= 0).any():
            i = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
            k = int(failed[i])
            which = plan.traj_index[rows][i]
            name = f"trajectory {int(which)}" if which >= 0 else f"heldout condition {i}"
            raise VPIntegratorError(
                f"{plan.data}: {what} failed (blow-up or non-finite) in {name} at t = {t[k]:g}; give a shorter "
                f"t_end (before {t[k]:g}) or a larger blowup", key="t_end",
            )

    if isinstance(plan.system, ObservedSystem):  # computed in the full state, then observed (rollout/observed.py)
        say(f"reference: {plan.reference_desc.split(':')[0]} for {n_traj} trajectories x {n_steps} steps, in the full "
            f"state, observed in {plan.system.observation.spec if plan.system.observation else '?'}")
        series.y[:] = observed_reference(plan.system, plan.data_meta, ref_file.y, ref_file.t, plan.heldout_y0, plan.dt,
                                         plan.t0, n_steps, plan.exact_from_ics, plan.chunk_steps, plan.blowup)
    elif plan.exact_from_ics:
        y0 = ref_file.y[:, 0] if plan.n_new == 0 else np.concatenate([ref_file.y[:, 0], plan.heldout_y0])
        say(f"reference: exact flow (DOP853, rtol = atol = 1e-12) for {n_traj} trajectories x {n_steps} steps")
        integrate(step_for(plan.system, partial(ExactFlowStep, dt=plan.dt)), y0, slice(0, n_traj), 0, plan.t0,
                  "integrating the exact-flow reference (DOP853)")
    else:
        n_take = min(n_file, n_steps + 1)
        # (no generator without a system: the plan refused a horizon past the file and held-out conditions)
        if n_data:
            for k0 in range(0, n_take, cs):
                series.y[:n_data, k0 : min(n_take, k0 + cs)] = ref_file.y[:, k0 : min(n_take, k0 + cs)]
        if n_steps + 1 > n_file and n_data:
            assert reference_gen is not None
            say(
                f"reference: continuing {plan.data.name} from t = {ref_file.t[-1]:g} to {t[-1]:g} with {reference_gen.name}"
            )
            integrate(reference_gen, ref_file.y[:, -1], slice(0, n_data), n_file - 1, float(ref_file.t[-1]),
                      f"continuing the reference beyond t = {ref_file.t[-1]:g} with its generator {reference_gen.name}")
        if plan.n_new:
            assert reference_gen is not None
            integrate(reference_gen, plan.heldout_y0, slice(n_data, n_traj), 0, plan.t0,
                      f"integrating the heldout reference with {reference_gen.name}")
    names = tuple(plan.system.invariant_names)
    stream = TrajectoryMetricsStream(plan.system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    # the reference's invariants where the models' metrics are computed: on the device of the first model
    # that runs on the device engine (the same formulas), else in NumPy
    device = next((getattr(m.step_map, "device", None) for m in plan.methods
                   if use_device_engine(plan.steps.engine, m.step_map, plan.system)), None)
    if device is not None:
        import torch
    yref = series.y
    for k0 in range(0, n_steps + 1, cs):
        k1 = min(n_steps + 1, k0 + cs)
        block = yref[:, k0:k1] if device is None else torch.as_tensor(yref[:, k0:k1], device=device)
        per_step = stream.update(t[k0:k1], block, None)
        series.write(k0, {f"invariant/{name}": to_numpy(per_step[f"invariant/{name}"]) for name in names})
    summary = stream.summary()
    if plan.blocks.per_traj:  # a shard: its merged table's values
        from ..data.rollout_shards import write_per_traj

        write_per_traj(series.group, {k: v for k, v in summary.items() if k.startswith("max_rel_drift_")})
    series.close(ref_failed, {"label": "reference", "kind": "reference", "source": shown_data(plan),
                              "description": plan.reference_desc, "split": list(plan.run_labels),
                              **{f"max_rel_drift_{n}": float(np.max(summary[f"max_rel_drift_{n}"])) for n in names}})
    return yref
