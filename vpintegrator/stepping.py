"""The rollout core: the step-map contract, the one window advance, the one failure rule, the one block loop
and the one host driver, on NumPy arrays or torch tensors.

It sits below ``data`` (imports: arrays, errors) so that [`integrate`][vpintegrator.data.integration.integrate] runs on it too.

Every engine that iterates a map uses these: [`integrate`][vpintegrator.data.integration.integrate] and the host engine
([`rollout`][vpintegrator.rollout.engine.rollout], [`stream_rollout`][vpintegrator.rollout.engine.stream_rollout]) are calls of
the one host driver [`drive`][vpintegrator.stepping.drive] (NumPy blocks; failure policy ``"raise"`` and ``"mark"``), the device engine
([`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout], tensors on the model's device) runs the block loop, the
step maps that restart their own rows ([`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep],
[`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep]) the failure rule, training's rollout validation
(``vpintegrator.training.validation.RolloutValidator``) and the unrolled training target
(``vpintegrator.training.single.Unrolled``) the window advance.

The step map. [`StepMap`][vpintegrator.stepping.StepMap] is the contract between a driver and whatever produces states (model,
integrator, exact flow): ``start``, ``generate``, ``reset``.

The window advance. A model maps a window of ``seq_len`` states (batch, seq_len, dim) to the next
``pred_window`` states; the next window is the last ``seq_len`` states of the window followed by the first
``advance`` predictions (``advance = pred_window`` for non-overlapping windows, 1 for overlapping ones):
[`next_window`][vpintegrator.stepping.next_window]. [`iterate_windows`][vpintegrator.stepping.iterate_windows] applies a model ``n_calls`` times on its own predictions.
([`ModelStep`][vpintegrator.rollout.steps.ModelStep] writes the same windows into one buffer instead of concatenating,
so that a batch-1 rollout allocates nothing per call; tests check it against [`iterate_windows`][vpintegrator.stepping.iterate_windows].)

The failure rule. A trajectory fails at the first state that is not finite or whose norm exceeds
``limit = blowup × ‖z_0‖`` (‖z_0‖ = 1 where it is 0): [`failure_limit`][vpintegrator.stepping.failure_limit], [`bad_states`][vpintegrator.stepping.bad_states]; the
engines record that step and set the trajectory's states from then on to NaN ([`mark_failures`][vpintegrator.stepping.mark_failures]).
That is the failure policy ``"mark"`` of [`drive`][vpintegrator.stepping.drive]; its policy ``"raise"`` (``integrate``) refuses the first
state that is not finite, or a step the map cannot take ([`StepFailure`][vpintegrator.stepping.StepFailure]), with a one-line error.

The block loop. States leave an engine in blocks of steps ``k0 .. k0 + n − 1`` ([`block_schedule`][vpintegrator.stepping.block_schedule]);
[`run_blocks`][vpintegrator.stepping.run_blocks] produces each block, applies the failure rule to it, restarts the rows that failed in it
and hands it over. Which blocks (the host driver's chunks of ``chunk_steps`` rounded down to the map's advance,
the device engine's output blocks) is each engine's schedule: the block boundaries are where a step map
restarts its own solves ([`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep]), so each engine keeps its own to keep its
numbers. [`Stage`][vpintegrator.stepping.Stage] stages states into blocks for both engines (the host driver's re-blocking
to ``block_steps``, the device engine's model calls).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np

from .arrays import array_namespace, copy_array
from .clock import PROCESS_CPU, THREAD_CPU, process_cpu, thread_cpu
from .errors import VPIntegratorError

__all__ = [
    "time_grid",
    "StepMap", "StepFailure", "Driven", "drive", "FAILURE_POLICIES",
    "next_window", "iterate_windows", "failure_limit", "bad_states", "mark_failures", "block_schedule", "run_blocks",
    "Stage",
]

#: what a driver does with a trajectory that fails: NaN from its failure step on and go on ("mark"), or
#: a one-line error at the first state that is not finite or step that cannot be taken ("raise")
FAILURE_POLICIES = ("mark", "raise")


class StepMap:
    """The contract between a driver and whatever produces states (model, integrator, exact flow).

    A step map maps windows (n_traj, ``seq_len``, ``dim``) to the next (n_traj, ``pred_window``, ``dim``)
    states and keeps its own state between calls. The driver ([`drive`][vpintegrator.stepping.drive]) calls, in this order:

    1. [`start`][vpintegrator.stepping.StepMap.start] ``(window0, limit)`` once: ``window0`` (n_traj, seq_len, dim) float64 holds steps
       0 .. seq_len − 1; ``limit`` (n_traj,) bounds valid norms (for the map's own restarts), or is None
       under the failure policy ``"raise"``: then a map that can tell raises [`StepFailure`][vpintegrator.stepping.StepFailure] from
       ``generate`` at the first step it cannot take or whose state is not finite (the driver checks the
       states too). One-off set-up (tracing, compiling) belongs here: it is timed apart from the steps
       (``setup_seconds``).
    2. [`generate`][vpintegrator.stepping.StepMap.generate] ``(n)`` repeatedly: the next ``n`` states (n_traj, n, dim) float64, continuing
       from the last ones produced. ``n`` is a multiple of [`advance`][vpintegrator.stepping.StepMap.advance] except at the end.
    3. [`reset`][vpintegrator.stepping.StepMap.reset] ``(rows)`` after a row failed (non-finite or blown up): put those rows back to their
       first window, so that no NaN enters the next call (their output is discarded as NaN anyway).

    [`log_abs_det_jacobian`][vpintegrator.stepping.StepMap.log_abs_det_jacobian] ``(windows)`` gives ``log|det J|`` of the step or window map at windows
    (n, seq_len, dim) -> (n,) (the volume metric); [`describe`][vpintegrator.stepping.StepMap.describe] the metadata recorded with a rollout
    (str/int/float/bool values).

    Attributes
    ----------
    seq_len, pred_window, dim : int
    kind : str
        ``"integrator"``, ``"model"`` or ``"flow"``.
    name : str
        The method's name (an integrator's registry name, ``"exact_flow"``, a model's registry name).
    overlap : bool
        Overlapping windows: advance by one state per call, keeping the first predicted state.
    """

    name: str

    seq_len: int = 1
    pred_window: int = 1
    dim: int = 0
    kind: str = ""
    overlap: bool = False

    @property
    def advance(self) -> int:
        """States kept per call: ``pred_window`` (non-overlapping windows) or 1 (overlapping)."""
        return 1 if self.overlap else self.pred_window

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        """Begin from ``window0`` (n_traj, seq_len, dim) float64; ``limit`` (n_traj,) bounds valid norms
        (None: the failure policy ``"raise"``)."""
        raise NotImplementedError

    def generate(self, n: int) -> np.ndarray:
        """The next ``n`` states, (n_traj, n, dim) float64."""
        raise NotImplementedError

    def reset(self, rows: np.ndarray) -> None:
        """Restart the rows ``rows`` (int array) from their first window."""
        raise NotImplementedError

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """``log|det J|`` of the map at windows (n, seq_len, dim) -> (n,)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Metadata recorded with the rollout (str/int/float/bool values)."""
        return {"kind": self.kind, "seq_len": self.seq_len, "pred_window": self.pred_window, "overlap": self.overlap}

    @property
    def cpu_clock(self) -> str:
        """The clock that counts all the CPU this map's steps use, read by the driver after ``start``:
        ``"thread_cpu"`` (the default: the steps run in the calling thread) or ``"process_cpu"`` (a map that
        hands work to other threads, e.g. torch's intra-op pool: every thread of the process counts;
        [`vpintegrator.clock`][vpintegrator.clock])."""
        return THREAD_CPU


def next_window(window: Any, pred: Any, seq_len: int) -> Any:
    """The window after a model call: the last ``seq_len`` states of ``window`` (..., seq_len, dim) followed
    by ``pred`` (..., advance, dim), i.e. ``concat(window, pred)[..., -seq_len:, :]`` (states on the
    second-to-last axis, so a leading member axis of a vmapped ensemble rides along); ``pred`` itself when
    it already holds ``seq_len`` states."""
    if pred.shape[-2] == seq_len:
        return pred
    xp = array_namespace(window)
    joined = xp.concatenate((window, pred), axis=-2) if xp is np else xp.cat((window, pred), -2)
    return joined[..., -seq_len:, :]


def iterate_windows(model: Any, window: Any, n_calls: int, advance: int | None = None) -> list[Any]:
    """The predictions of ``n_calls`` calls of ``model`` on its own output, starting from ``window``
    (..., seq_len, dim): a list of ``n_calls`` arrays (..., advance, dim) (``advance`` default: every
    predicted state, the non-overlapping windows of the paper). Differentiable when ``model`` is."""
    seq_len = window.shape[-2]
    outs = []
    for _ in range(int(n_calls)):
        pred = model(window)
        if advance is not None:
            pred = pred[..., :advance, :]
        outs.append(pred)
        window = next_window(window, pred, seq_len)
    return outs


def time_grid(t0: float, dt: float, n_steps: int) -> np.ndarray:
    """The times ``t0 + k dt``, k = 0 .. n_steps (float64), bit for bit as ``t0 + dt * np.arange(n_steps + 1)``
    without the integer array and its conversion (a third of a batch-1 rollout's overhead at 10⁴ steps)."""
    t = np.arange(int(n_steps) + 1, dtype=np.float64)
    t *= float(dt)
    t += float(t0)
    return t


def failure_limit(window0: np.ndarray, blowup: float) -> np.ndarray:
    """The norm bound per trajectory, ``blowup × ‖z_0‖`` (‖z_0‖ = 1 where it is 0), from the first
    windows (n_traj, seq_len, dim) float64."""
    first = window0[:, 0]
    scale = np.sqrt(np.add.reduce(first * first, axis=-1))  # np.linalg.norm's own sum, bit for bit (no dispatch)
    scale[~(scale > 0)] = 1.0  # 0 (or NaN) -> 1, as np.where(scale > 0, scale, 1.0)
    scale *= blowup
    return scale


def bad_states(y: Any, limit: Any) -> Any:
    """Where states ``y`` (n, dim) or (n, k, dim) are not finite or have a norm above ``limit`` (n,):
    a boolean (n,) or (n, k). NaN counts as bad."""
    xp = array_namespace(y)
    if xp is np:
        with np.errstate(over="ignore", invalid="ignore"):
            norm = np.sqrt(np.einsum("...j,...j->...", y, y))
    else:
        norm = xp.sqrt((y * y).sum(-1))
    lim = limit if y.ndim == 2 else limit[:, None]
    return ~(norm <= lim)


def mark_failures(block: Any, k0: int, limit: Any, failed: Any) -> tuple[Any, Any]:
    """Apply the failure rule to a block ``block`` (n_traj, n, dim) holding steps ``k0 .. k0 + n − 1``.

    ``failed`` (n_traj,) int holds each trajectory's failure step so far (−1: none). The first bad step of a
    trajectory that had not failed is recorded, and every state of a failed trajectory from its failure
    step on becomes NaN (in ``block``, in place). Returns ``(new, failed)``: the trajectories that failed in
    this block (bool, n_traj) and the updated failure steps (the NumPy array is also updated in place).
    """
    xp = array_namespace(block)
    n = block.shape[1]
    bad = bad_states(block, limit)  # (n_traj, n)
    if xp is np:
        new = (failed < 0) & bad.any(axis=1)
        if new.any():
            failed[new] = k0 + np.argmax(bad[new], axis=1)
        dead = failed >= 0
        if dead.any():
            after = dead[:, None] & (np.arange(k0, k0 + n)[None, :] >= failed[:, None])  # (n_traj, n)
            block[after] = np.nan
        return new, failed
    # torch: no host synchronisation (no data-dependent branches)
    new = (failed < 0) & bad.any(1)
    failed = xp.where(new, k0 + xp.argmax(bad.to(xp.uint8), dim=1), failed)
    steps = xp.arange(k0, k0 + n, device=block.device)
    after = (failed >= 0)[:, None] & (steps[None, :] >= failed[:, None])
    block.masked_fill_(after[:, :, None], float("nan"))
    return new, failed


def block_schedule(k_start: int, k_end: int, length: int) -> list[tuple[int, int]]:
    """The blocks ``(k0, n)`` that cover steps ``k_start .. k_end − 1`` in order, ``length`` steps each (the
    last one may be shorter)."""
    return [(k0, min(int(length), k_end - k0)) for k0 in range(int(k_start), int(k_end), int(length))]


def run_blocks(
    schedule: Sequence[tuple[int, int]],
    produce: Callable[[int, int, int], Any],
    deliver: Callable[[int, int, Any], None],
    *,
    limit: Any = None,
    failed: Any = None,
    restart: Callable[[Any], None] | None = None,
) -> Any:
    """The one block loop: for block ``i`` of ``schedule`` (``(k0, n)``: steps ``k0 .. k0 + n − 1``),
    ``block = produce(i, k0, n)`` (n_traj, n, dim), the failure rule on it, the restart of the rows that
    failed in it, ``deliver(i, k0, block)``.

    ``limit`` (n_traj,) and ``failed`` (n_traj,) int (−1: not failed) in the blocks' namespace turn the
    failure rule on ([`mark_failures`][vpintegrator.stepping.mark_failures]; None: off, for callers that refuse a bad state where it is
    produced). ``restart(rows)`` gets the rows that failed in the block: a NumPy int array (called only when
    there are any) or, for tensors, the boolean mask (always called: no host synchronisation).
    Returns the failure steps (``failed``).
    """
    for i, (k0, n) in enumerate(schedule):
        block = produce(i, k0, n)
        if limit is not None:
            new, failed = mark_failures(block, k0, limit, failed)
            if restart is not None:
                if array_namespace(new) is not np:
                    restart(new)
                elif new.any():
                    restart(np.flatnonzero(new))
        deliver(i, k0, block)
        del block  # before the next one is produced: it may reuse the memory
    return failed


class Stage:
    """The one staging of states into blocks: states (n_traj, k, dim) appended in pieces of any length (model
    calls, generated chunks) and taken from the front in blocks of any length, in one buffer (NumPy or torch).

    Both engines stage through it: the host engine re-blocks the map's chunks into blocks aligned to
    ``chunk_steps`` (``vpintegrator.rollout.engine``), the device engine gathers its model calls into the
    output blocks (``vpintegrator.rollout.device.DeviceStepper``), keeping a call's states beyond a block.

    Parameters
    ----------
    buffer : array, shape (n_traj, capacity, dim)
        The buffer; its first ``n`` states are staged already (e.g. the first window).
    n : int
    """

    def __init__(self, buffer: Any, n: int = 0) -> None:
        self.buffer: Any = buffer
        self.n: int = int(n)

    @property
    def room(self) -> int:
        """States that fit before the buffer is full."""
        return self.buffer.shape[1] - self.n

    def reserve(self, size: int) -> None:
        """Room for ``size`` states in all (a larger buffer, the staged states copied, when needed)."""
        if self.buffer.shape[1] < size:
            old, shape = self.buffer, (self.buffer.shape[0], size, self.buffer.shape[2])
            self.buffer = np.empty(shape, dtype=old.dtype) if array_namespace(old) is np else old.new_empty(shape)
            self.buffer[:, : self.n] = old[:, : self.n]

    def put(self, states: Any) -> int:
        """Append the first states of ``states`` (n_traj, k, dim) that fit; returns how many."""
        n, take = self.n, states.shape[1]
        room = self.buffer.shape[1] - n
        if take > room:
            states, take = states[:, :room], room
        self.buffer[:, n : n + take] = states  # (a model call's states whole: no extra view per call)
        self.n = n + take
        return take

    def head(self, n: int) -> Any:
        """The first ``n`` staged states (a view, valid until the next ``drop`` or ``put``)."""
        return self.buffer[:, :n]

    def drop(self, n: int) -> None:
        """Remove the first ``n`` staged states; the rest move to the front."""
        rest = self.n - n
        if rest:
            self.buffer[:, :rest] = copy_array(self.buffer[:, n : self.n])
        self.n = rest


class StepFailure(Exception):
    """Raised by a step map's ``generate`` under the failure policy ``"raise"`` at the first step it cannot
    take; [`drive`][vpintegrator.stepping.drive] hands ``states`` over and turns it into a one-line
    [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming the map, the step and its time.

    Parameters
    ----------
    states : ndarray, shape (n_traj, j, dim)
        The good states this call produced before the failing step (its ``j``-th, 0-based).
    row : int
        The first trajectory whose state is not finite (when ``detail`` is None).
    detail : str or None
        Why the step could not be taken (e.g. a Newton solve that did not converge); None: a state that
        is not finite.
    """

    def __init__(self, states: np.ndarray, row: int = 0, detail: str | None = None) -> None:
        super().__init__(detail or f"trajectory {row} became non-finite")
        self.states: np.ndarray = states
        self.row: int = int(row)
        self.detail: str | None = detail


@dataclass(eq=False)
class Driven:
    """What [`drive`][vpintegrator.stepping.drive] reports (the states went to ``deliver``).

    Attributes
    ----------
    failed_step : ndarray, shape (n_traj,)
        int: the first step at which each trajectory failed, −1 if never (all −1 under the policy
        ``"raise"``, which returns only when nothing failed).
    seconds : float
        CPU seconds in the map's ``generate`` calls on the clock ``clock`` names: the cost figure, which a
        loaded machine does not bend (wall time does: a preempted call's wall time counts the other
        processes' turns). The map's [`cpu_clock`][vpintegrator.stepping.StepMap.cpu_clock] chooses it: the
        calling thread's (``time.thread_time``), or every thread's of the process (``time.process_time``) for
        a map that hands work to other threads (torch's intra-op pool), so that no thread's work is left out.
    setup_seconds : float
        The same clock around its ``start``.
    wall_seconds : float
        Wall time (``time.perf_counter``) of the ``generate`` calls, beside it.
    clock : str
        ``"thread_cpu"`` or ``"process_cpu"``: the clock of ``seconds`` and ``setup_seconds``.
    """

    failed_step: np.ndarray
    seconds: float
    setup_seconds: float
    wall_seconds: float = 0.0
    clock: str = THREAD_CPU


def drive(
    step_map: StepMap,
    window0: np.ndarray,
    n_steps: int,
    deliver: Callable[[int, np.ndarray], None],
    *,
    chunk_steps: int,
    block_steps: int | None = None,
    copy_blocks: bool = False,
    failure: Literal["mark", "raise"] = "mark",
    blowup: float = 1e3,
    dt: float = 1.0,
    t0: float = 0.0,
) -> Driven:
    """The one host driver: iterate ``step_map`` from ``window0`` to step ``n_steps`` by the block loop
    ([`run_blocks`][vpintegrator.stepping.run_blocks]), handing the states to ``deliver(k0, block)`` (block (n_traj, n, dim): steps
    ``k0 .. k0 + n − 1``, in order, every step once, starting with the first window).

    The map runs in chunks of ``chunk_steps`` rounded down to a multiple of its advance, from step
    ``seq_len`` on (where a map that restarts its own solves restarts them: part of the numbers).

    Parameters
    ----------
    step_map : StepMap
    window0 : ndarray, shape (n_traj, seq_len, dim)
        The first window, float64, checked by the caller.
    n_steps : int
        The last step.
    deliver : callable
        ``deliver(k0, block)``; the block is the driver's (a view valid until the call returns) unless
        ``copy_blocks``.
    chunk_steps : int
        Steps per call of the map's ``generate``.
    block_steps : int or None
        Re-block the states to blocks starting at multiples of ``block_steps`` (one block of buffer; a chunked
        HDF5 sink gets whole chunks); None: hand the first window and each chunk over as produced.
    copy_blocks : bool
        Hand over copies of the re-blocked states (for a ``deliver`` that keeps them).
    failure : {"mark", "raise"}
        ``"mark"``: the failure rule ([`mark_failures`][vpintegrator.stepping.mark_failures] with ``blowup``; failed rows restarted by the
        map's ``reset``); ``"raise"``: the map starts with ``limit`` None and the first state that is not
        finite, or a [`StepFailure`][vpintegrator.stepping.StepFailure] of the map, is a
        [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] (``"<name>: step k (t = a -> b): <detail>"`` or
        ``"<name>: trajectory i became non-finite at step k (t = b); ..."``, with ``t = t0 + k dt``), after
        the states before it were delivered.
    blowup : float
        The blow-up factor of the policy ``"mark"``.
    dt, t0 : float
        The time grid, for the policy ``"raise"``'s message.

    Returns
    -------
    Driven
    """
    if failure not in FAILURE_POLICIES:
        raise VPIntegratorError(f"failure must be one of {list(FAILURE_POLICIES)}; got {failure!r}")
    T, adv = step_map.seq_len, step_map.advance
    n_steps = int(n_steps)
    n_traj = window0.shape[0]
    marking = failure == "mark"
    limit = failure_limit(window0, blowup) if marking else None
    restage = None if block_steps is None else _Restage(deliver, window0, n_steps, int(block_steps), copy_blocks)
    hand: Callable[[int, np.ndarray], None] = deliver if restage is None else restage

    tic_thread, tic_process = thread_cpu(), process_cpu()
    step_map.start(window0, limit)  # one-off set-up (e.g. a torch.compile build): not part of the per-step time
    clock = getattr(step_map, "cpu_clock", THREAD_CPU)  # known once the map chose how it runs (its runner)
    cpu_clock = process_cpu if clock == PROCESS_CPU else thread_cpu
    setup_seconds = process_cpu() - tic_process if clock == PROCESS_CPU else thread_cpu() - tic_thread
    seconds = wall = 0.0

    def produce(i: int, k0: int, n: int) -> np.ndarray:
        nonlocal seconds, wall
        if i == 0:
            return window0.copy()  # the first window (steps 0 .. seq_len - 1): checked, not produced
        tic, wall_tic = cpu_clock(), time.perf_counter()
        try:
            chunk = step_map.generate(n)
        except StepFailure as exc:
            seconds, wall = seconds + cpu_clock() - tic, wall + time.perf_counter() - wall_tic
            stop = exc
        else:
            seconds, wall = seconds + cpu_clock() - tic, wall + time.perf_counter() - wall_tic
            if marking or np.isfinite(chunk).all():  # (one reduction over all: fast)
                return chunk
            finite = np.isfinite(chunk).all(axis=2)  # (n_traj, n): a map that does not raise StepFailure itself
            j = int(np.argmin(finite.all(axis=0)))
            stop = StepFailure(chunk[:, :j], row=int(np.argmin(finite[:, j])))
        # the policy "raise": the states before the failing step go out, then the one-line error
        if stop.states.shape[1]:
            hand(k0, stop.states)
        if restage is not None:
            restage.flush()
        raise VPIntegratorError(_failure_message(step_map.name, stop, k0 + stop.states.shape[1], dt, t0))

    chunk_len = max(adv, (int(chunk_steps) // adv) * adv)
    schedule = [(0, T), *block_schedule(T, n_steps + 1, chunk_len)]
    failed = np.full(n_traj, -1, dtype=np.int64)
    failed = run_blocks(schedule, produce, lambda i, k0, block: hand(k0, block), limit=limit,
                        failed=failed, restart=step_map.reset if marking else None)
    return Driven(failed_step=failed, seconds=seconds, setup_seconds=setup_seconds, wall_seconds=wall,
                  clock=clock)


def _failure_message(name: str, failure: StepFailure, k: int, dt: float, t0: float) -> str:
    """The policy ``"raise"``'s one-line message for a failure of the map ``name`` at step ``k`` (time
    ``t0 + k dt``): ``"<name>: step k (t = a -> b): <detail>"``, or for a state that is not finite
    ``"<name>: trajectory i became non-finite at step k (t = b); reduce dt or use a stable method"``."""
    if failure.detail is not None:
        return f"{name}: step {k} (t = {t0 + (k - 1) * dt:g} -> {t0 + k * dt:g}): {failure.detail}"
    return (f"{name}: trajectory {failure.row} became non-finite at step {k} (t = {t0 + k * dt:g}); "
            "reduce dt or use a stable method")


class _Restage:
    """``deliver`` behind a [`Stage`][vpintegrator.stepping.Stage]: pieces in, blocks starting at multiples of ``block_steps`` out
    (the last one at step ``n_steps``, or at ``flush``)."""

    def __init__(self, deliver: Callable[[int, np.ndarray], None], window0: np.ndarray, n_steps: int,
                 block_steps: int, copy_blocks: bool) -> None:
        self.deliver, self.n_end, self.copy = deliver, n_steps + 1, copy_blocks
        shape = (window0.shape[0], min(block_steps, n_steps + 1), window0.shape[2])
        self.stage = Stage(np.empty(shape))  # steps k .. k + stage.n - 1
        self.k = 0

    def __call__(self, k0: int, chunk: np.ndarray) -> None:
        stage, j = self.stage, 0
        while j < chunk.shape[1]:
            j += stage.put(chunk[:, j:])
            if stage.room == 0 or self.k + stage.n == self.n_end:
                self.flush()

    def flush(self) -> None:
        """Hand over what is staged."""
        staged = self.stage.n
        if staged:
            self.deliver(self.k, self.stage.head(staged).copy() if self.copy else self.stage.head(staged))
            self.stage.drop(staged)
            self.k += staged
