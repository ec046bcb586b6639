"""The rollout engine: [`rollout`][vpintegrator.rollout.engine.rollout], [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout], [`initial_window`][vpintegrator.rollout.engine.initial_window]; the step-map
contract [`StepMap`][vpintegrator.stepping.StepMap] (re-exported here) and the host driver they call are in ``vpintegrator.stepping``.

A *step map* advances a batch of state windows: the last ``seq_len`` states give the next
``pred_window`` states. Classical integrators and the exact flow are step maps with
``seq_len = pred_window = 1``; a trained model with ``seq_len = pred_window = T`` maps ``z_1..z_T`` to
``z_{T+1}..z_{2T}``. The engine iterates one from its first window to any horizon:

- non-overlapping windows (as in the paper): advance by ``pred_window``; overlapping windows
  (``overlap=True``): advance by one state, keeping the first predicted state;
- the output is produced in blocks of steps and handed to a sink (an in-memory array for
  [`rollout`][vpintegrator.rollout.engine.rollout], a callable or an HDF5 dataset written block by block for [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout]), so
  memory does not grow with the horizon;
- a trajectory *fails* at the first step whose state is not finite or whose norm exceeds
  ``blowup × ‖z_0‖``; the step is recorded (−1 if never), its states from then on are NaN, and the
  step map goes on from its initial window for that row (wasted work, but no NaN ever reaches an
  implicit solver).

One argument order everywhere, as in ``integrate(system, y0, dt, n_steps, method)``:
``rollout(step_map, window0, dt, n_steps)``. States are returned and stored as float64.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..data.trajectories import Trajectories
from .. import resources
from ..clock import THREAD_CPU
from ..errors import VPIntegratorError
from ..stepping import StepMap, drive, failure_limit, time_grid

__all__ = [
    "BLOWUP", "CHUNK_STEPS", "PRICE_OF", "StepMap", "RolloutStats", "price_seconds", "rollout", "stream_rollout",
    "initial_window",
]

#: default blow-up factor: a state with ‖z‖ > BLOWUP × ‖z_0‖ counts as failed
BLOWUP = 1e3
#: default number of steps per block (memory per block: n_traj × chunk_steps × dim × 8 bytes)
CHUNK_STEPS = 1024


#: work is refused when its estimated memory exceeds this fraction of the available memory
MEMORY_FRACTION = 0.8


def check_memory(need: float, what: str, way_out: str, key: str | None = None) -> None:
    """``vpintegrator.resources.check_memory`` at ``MEMORY_FRACTION``."""
    resources.check_memory(need, what, way_out, key=key, fraction=MEMORY_FRACTION)


@dataclass(eq=False)
class RolloutStats:
    """What [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout] reports (the states went to the sink).

    Attributes
    ----------
    failed_step : ndarray, shape (n_traj,)
        First step at which each trajectory failed (non-finite or blown up), −1 if never.
    seconds : float
        CPU seconds spent producing states (the step map only: no set-up, no sink, no callback), on the
        clock ``meta["clock"]`` names: on the host engine ``"thread_cpu"`` (the calling thread,
        [`vpintegrator.clock`][vpintegrator.clock]) or, for a step map that hands work to other threads (a torch
        model run by torch with more than one intra-op thread: its ``cpu_clock``), ``"process_cpu"`` (every
        thread); ``"process_cpu"`` on the device engine on a CPU, ``"cuda_events"`` (device time) on a GPU.
    setup_seconds : float
        The same clock around the step map's [`StepMap.start`][vpintegrator.rollout.engine.StepMap.start] (e.g. a ``torch.compile`` build).
    n_steps : int
    meta : dict
        The step map's [`StepMap.describe`][vpintegrator.rollout.engine.StepMap.describe] plus dt, t0, n_traj, blowup, setup_seconds, seconds,
        seconds_per_step, clock, wall_seconds (wall time of the same calls, beside the CPU time).
    """

    failed_step: np.ndarray
    seconds: float
    setup_seconds: float
    n_steps: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds_per_step(self) -> float:
        """CPU seconds of one step of the whole batch (the clock of ``meta["clock"]``): the steps alone; a row's price
        (``price_seconds``, what every table prints) adds the step map's start."""
        return self.seconds / max(1, self.n_steps)

    @property
    def n_failed(self) -> int:
        return int(np.sum(self.failed_step >= 0))

    def __repr__(self) -> str:  # one line, not the per-trajectory array
        return (f"RolloutStats(n_traj={len(self.failed_step)}, n_steps={self.n_steps}, n_failed={self.n_failed}, "
                f"seconds={self.seconds:.3g}, seconds_per_step={self.seconds_per_step:.3g})")


#: a row's price on the one cost meter, wherever the package prices a row (the studies' rows, the work–precision
#: table's): said in every results file that carries a price (``cost_of``)
PRICE_OF = ("the engine's CPU seconds in the row's start and steps (rollout meta seconds + setup_seconds: an "
            "estimate's least squares included; the engine's per-call checks, description and output arrays left out)")


def price_seconds(meta: dict[str, Any]) -> float:
    """One rollout call's price (``PRICE_OF``) from its ``meta``: the engine's CPU seconds of the step map's start
    and its steps."""
    return float(meta["seconds"]) + float(meta["setup_seconds"])


def _as_window(window0: Any, seq_len: int, dim: int) -> np.ndarray:
    w = np.array(window0, dtype=np.float64)
    if w.ndim == 2 and seq_len == 1:
        w = w[:, None]
    if w.ndim != 3 or w.shape[1:] != (seq_len, dim) or w.shape[0] == 0:
        raise VPIntegratorError(
            f"window0 must have shape (n_traj, seq_len, dim) = (n_traj, {seq_len}, {dim}) (or (n_traj, {dim}) "
            f"when seq_len = 1); got shape {w.shape}"
        )
    if not np.isfinite(w).all():
        i, k, d = (int(v) for v in np.argwhere(~np.isfinite(w))[0])
        raise VPIntegratorError(
            f"window0 is not finite (NaN/Inf) at trajectory {i}, state {k}, component {d}; start from finite states"
        )
    return w


def _check(step_map, window0, n_steps, chunk_steps, blowup, dt=1.0, t0=0.0) -> np.ndarray:
    from ..errors import finite_float

    if not isinstance(step_map, StepMap):
        raise VPIntegratorError(f"step_map must be a vpintegrator StepMap; got {type(step_map).__name__}")
    finite_float(dt, "dt (the step size)", positive=True, key="dt")
    finite_float(t0, "t0 (the initial time)", key="t0")
    T = step_map.seq_len
    w0 = _as_window(window0, T, step_map.dim)
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < T:
        raise VPIntegratorError(
            f"n_steps (the horizon) must be an int >= seq_len = {T} so that the map is applied at least once; "
            f"got {n_steps!r}. Raise t_end"
        )
    if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, (int, np.integer)) or chunk_steps < 1:
        raise VPIntegratorError(f"chunk_steps must be an int >= 1; got {chunk_steps!r}", key="chunk_steps")
    if isinstance(blowup, bool) or not (isinstance(blowup, (int, float, np.floating, np.integer)) and blowup > 0):
        raise VPIntegratorError(f"blowup must be a number > 0; got {blowup!r}", key="blowup")
    return w0


def _run(step_map, w0, dt, n_steps, write, copy_blocks, t0, callback, chunk_steps, blowup, progress) -> RolloutStats:
    """The host engine: states 0 .. n_steps by the one host driver ([`drive`][vpintegrator.stepping.drive], failure policy
    ``"mark"``), re-blocked to multiples of ``chunk_steps`` for ``write``."""

    def deliver(k0: int, block: np.ndarray) -> None:
        write(k0, block)
        if callback is not None:
            callback(k0, block)
        if progress is not None:
            progress(block.shape[1])

    logging.getLogger(__name__).debug(
        "host engine: %s, %d trajectories x %d steps of dt = %g in blocks of %d steps, blow-up at %g x |z0|",
        getattr(step_map, "kind", type(step_map).__name__), w0.shape[0], n_steps, dt, chunk_steps, blowup)
    # Output leaves in blocks aligned to multiples of chunk_steps (whatever the map's advance), so that a
    # chunked HDF5 sink gets whole chunks and needs no chunk cache; one block is all the engine holds.
    run = drive(step_map, w0, n_steps, deliver, chunk_steps=int(chunk_steps), block_steps=int(chunk_steps),
                copy_blocks=copy_blocks or callback is not None or progress is not None, failure="mark",
                blowup=blowup, dt=dt, t0=t0)
    return _stats(step_map, w0, dt, t0, n_steps, blowup, run.failed_step, run.seconds, run.setup_seconds,
                  run.wall_seconds, run.clock)


def _stats(step_map, w0, dt, t0, n_steps, blowup, failed_step, seconds, setup_seconds, wall,
           clock: str = THREAD_CPU) -> RolloutStats:
    meta = {
        **step_map.describe(), "dt": float(dt), "t0": float(t0), "n_traj": w0.shape[0], "blowup": float(blowup),
        "setup_seconds": setup_seconds, "seconds": seconds, "seconds_per_step": seconds / max(1, int(n_steps)),
        "clock": clock, "wall_seconds": wall,
    }
    return RolloutStats(failed_step=failed_step, seconds=seconds, setup_seconds=setup_seconds,
                        n_steps=int(n_steps), meta=meta)


def stream_rollout(
    step_map: StepMap,
    window0: np.ndarray,
    dt: float,
    n_steps: int,
    sink: Callable[[int, np.ndarray], None] | Any,
    *,
    t0: float = 0.0,
    callback: Callable[[int, np.ndarray], None] | None = None,
    chunk_steps: int = CHUNK_STEPS,
    blowup: float = BLOWUP,
    progress: Callable[[int], None] | None = None,
) -> RolloutStats:
    """Iterate a step map to step ``n_steps``, handing the states to ``sink`` block by block.

    Parameters are those of [`rollout`][vpintegrator.rollout.engine.rollout], plus

    sink : callable or h5py.Dataset
        ``sink(k0, block)`` with block (n_traj, n, dim) holding steps ``k0 .. k0+n−1`` (a copy it may
        keep); or a dataset of shape (n_traj, n_steps + 1, dim), written block by block.

    Returns
    -------
    RolloutStats
        failure steps, timings and metadata; the states are in the sink.
    """
    w0 = _check(step_map, window0, n_steps, chunk_steps, blowup, dt, t0)
    n_traj = w0.shape[0]
    block = n_traj * min(int(chunk_steps), int(n_steps) + 1) * step_map.dim * 8
    check_memory(6 * block, f"a rollout in chunks of {int(chunk_steps)} steps of {n_traj} trajectories",
                 "give a smaller chunk_steps or fewer trajectories", key="chunk_steps")
    if callable(sink):
        write = sink
    elif hasattr(sink, "shape") and hasattr(sink, "__setitem__"):
        want = (n_traj, int(n_steps) + 1, step_map.dim)
        if tuple(sink.shape) != want:
            raise VPIntegratorError(
                f"sink dataset has shape {tuple(sink.shape)}; expected (n_traj, n_steps + 1, dim) = {want}"
            )

        def write(k0, block):
            sink[:, k0 : k0 + block.shape[1]] = block

    else:
        raise VPIntegratorError(f"sink must be a callable or an h5py dataset; got {type(sink).__name__}")
    return _run(step_map, w0, dt, n_steps, write, callable(sink), t0, callback, chunk_steps, blowup, progress)


def rollout(
    step_map: StepMap,
    window0: np.ndarray,
    dt: float,
    n_steps: int,
    *,
    t0: float = 0.0,
    callback: Callable[[int, np.ndarray], None] | None = None,
    chunk_steps: int = CHUNK_STEPS,
    blowup: float = BLOWUP,
    progress: Callable[[int], None] | None = None,
) -> Trajectories:
    """Iterate a step map from its first window to step ``n_steps``; the states in memory.

    Parameters
    ----------
    step_map : StepMap
        [`ModelStep`][vpintegrator.rollout.steps.ModelStep], [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep],
        [`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep], or your own [`StepMap`][vpintegrator.rollout.engine.StepMap].
    window0 : ndarray, shape (n_traj, seq_len, dim), or (n_traj, dim) when seq_len = 1
        The first ``seq_len`` states (steps 0 .. seq_len − 1); see [`initial_window`][vpintegrator.rollout.engine.initial_window].
    dt : float
        Step size (for the time grid ``t0 + k dt``).
    n_steps : int
        Horizon in steps; the result holds states 0 .. n_steps. Must be >= ``seq_len``.
    t0 : float
    callback : callable, optional
        ``callback(k0, block)`` after each block (NaN after failures already set), e.g. streaming metrics.
    chunk_steps : int
        Steps per block: blocks start at multiples of ``chunk_steps`` (the last one may be shorter). The
        map itself runs in chunks of ``chunk_steps`` rounded down to a multiple of its advance.
    blowup : float
        A state with ‖z‖ > ``blowup`` × ‖z_0‖ (‖z_0‖ = 1 if zero) counts as failed.
    progress : callable, optional
        ``progress(n)`` after each block with the number of new states.

    Returns
    -------
    Trajectories
        ``y`` (n_traj, n_steps + 1, dim) float64, ``t``, ``failed_step``; ``meta``: the step map's
        description, dt, t0, blowup, ``seconds`` (CPU seconds of the calling thread producing states:
        ``clock`` = ``"thread_cpu"``; ``wall_seconds`` beside it), ``seconds_per_step``, ``setup_seconds`` (and the system's ``system``/``param_<name>`` when the step map has one).
    """
    w0 = _check(step_map, window0, n_steps, chunk_steps, blowup, dt, t0)
    states = w0.shape[0] * (int(n_steps) + 1) * step_map.dim * 8
    block = w0.shape[0] * min(int(chunk_steps), int(n_steps) + 1) * step_map.dim * 8
    check_memory(
        states + 6 * block + 8 * (int(n_steps) + 1),
        f"n_steps = {int(n_steps)} of {w0.shape[0]} trajectories (dim {step_map.dim}) held in memory",
        "give fewer steps or trajectories, or stream them to a file with stream_rollout", key="n_steps",
    )
    y = np.empty((w0.shape[0], int(n_steps) + 1, step_map.dim))
    stats = None
    direct = getattr(step_map, "rollout_direct", None)
    if direct is not None and callback is None and progress is None:
        # a map that runs the whole rollout in one call (a compiled classical method of a few trajectories:
        # IntegratorMap.rollout_direct), into y, with the failure rule in its loop: no per-block passes
        done = direct(w0, int(n_steps), y, failure_limit(w0, blowup))
        if done is not None:
            failed_step, seconds, setup_seconds, wall = done
            stats = _stats(step_map, w0, dt, t0, n_steps, blowup, failed_step, seconds, setup_seconds, wall)
    if stats is None:
        def write(k0, block):
            y[:, k0 : k0 + block.shape[1]] = block

        stats = _run(step_map, w0, dt, n_steps, write, False, t0, callback, chunk_steps, blowup, progress)
    meta = dict(stats.meta)
    system = getattr(step_map, "system", None)
    if system is not None:
        from ..systems import system_meta

        meta = {**system_meta(system), **meta}
    t = time_grid(t0, dt, int(n_steps))
    return Trajectories(y=y, t=t, meta=meta, failed_step=stats.failed_step)


def initial_window(system, y0: np.ndarray, dt: float, seq_len: int, method: str = "implicit_midpoint") -> np.ndarray:
    """The first ``seq_len`` states from initial conditions, by a classical integrator (paper: implicit
    midpoint) or ``method="exact_flow"`` (DOP853).

    Parameters
    ----------
    y0 : ndarray, shape (n_traj, dim)

    Returns
    -------
    ndarray, shape (n_traj, seq_len, dim)
    """
    from ..systems import get_system

    system = get_system(system)
    y0 = np.atleast_2d(np.asarray(y0, dtype=np.float64))
    if seq_len == 1:
        return y0[:, None].copy()
    if method == "exact_flow":
        from ..data import solve_flow

        return np.asarray(solve_flow(system, y0, float(dt) * np.arange(seq_len)), dtype=np.float64)
    from ..data.integration import integrate

    return integrate(system, y0, dt, seq_len - 1, method=method, compiled=False).y  # the NumPy step, bit for bit
