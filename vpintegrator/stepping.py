"""The rollout core: the one window advance, the one failure rule and the one block loop, on NumPy arrays or
torch tensors.

It sits below ``data`` (imports: arrays, errors) so that [`integrate`][vpintegrator.data.integration.integrate] runs on it too.

Every engine that iterates a map uses these: [`integrate`][vpintegrator.data.integration.integrate] (the block loop), the host engine ([`stream_rollout`][vpintegrator.rollout.engine.stream_rollout],
NumPy blocks), the device engine ([`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout], tensors on the
model's device), the step maps that restart their own rows ([`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep],
[`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep]), training's rollout validation
(``vpintegrator.training.validation.RolloutValidator``) and the unrolled training target
(``vpintegrator.training.unroll.Unrolled``).

The window advance. A model maps a window of ``seq_len`` states (batch, seq_len, dim) to the next
``pred_window`` states; the next window is the last ``seq_len`` states of the window followed by the first
``advance`` predictions (``advance = pred_window`` for non-overlapping windows, 1 for overlapping ones):
[`next_window`][vpintegrator.stepping.next_window]. [`iterate_windows`][vpintegrator.stepping.iterate_windows] applies a model ``n_calls`` times on its own predictions.
([`ModelStep`][vpintegrator.rollout.steps.ModelStep] writes the same windows into one buffer instead of concatenating,
so that a batch-1 rollout allocates nothing per call; tests check it against [`iterate_windows`][vpintegrator.stepping.iterate_windows].)

The failure rule. A trajectory fails at the first state that is not finite or whose norm exceeds
``limit = blowup × ‖z_0‖`` (‖z_0‖ = 1 where it is 0): [`failure_limit`][vpintegrator.stepping.failure_limit], [`bad_states`][vpintegrator.stepping.bad_states]; the
engines record that step and set the trajectory's states from then on to NaN ([`mark_failures`][vpintegrator.stepping.mark_failures]).

The block loop. States leave an engine in blocks of steps ``k0 .. k0 + n − 1`` ([`block_schedule`][vpintegrator.stepping.block_schedule]);
[`run_blocks`][vpintegrator.stepping.run_blocks] produces each block, applies the failure rule to it, restarts the rows that failed in it
and hands it over. Which blocks (the host engine's generation chunks, the device engine's output blocks,
``integrate``'s chunks) is each caller's schedule: the block boundaries are where a step map restarts its own
solves ([`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep]), so each engine keeps its own to keep its numbers.
[`Stage`][vpintegrator.stepping.Stage] stages states into blocks for both engines (the host engine's re-blocking
to ``chunk_steps``, the device engine's model calls).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .arrays import array_namespace, copy_array

__all__ = [
    "next_window", "iterate_windows", "failure_limit", "bad_states", "mark_failures", "block_schedule", "run_blocks",
    "Stage",
]


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


def iterate_windows(model, window: Any, n_calls: int, advance: int | None = None) -> list[Any]:
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


def failure_limit(window0: np.ndarray, blowup: float) -> np.ndarray:
    """The norm bound per trajectory, ``blowup × ‖z_0‖`` (‖z_0‖ = 1 where it is 0), from the first
    windows (n_traj, seq_len, dim) float64."""
    scale = np.linalg.norm(window0[:, 0], axis=-1)
    return blowup * np.where(scale > 0, scale, 1.0)


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
        self.buffer, self.n = buffer, int(n)

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
