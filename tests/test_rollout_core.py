"""The rollout core (vpintegrator.stepping): the one window advance, the
one failure rule and the one block loop, each against an independent, obviously correct computation, on
NumPy and on torch; ``integrate`` (a call of the host driver with the failure policy "raise") against a
hand-written loop of the method's step, values, errors and callbacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout import ModelStep
from vpintegrator.errors import VPIntegratorError
from vpintegrator.stepping import (
    StepMap, bad_states, block_schedule, drive, failure_limit, iterate_windows, mark_failures, next_window, run_blocks,
)


def _slow_rollout(fn, window, n_calls, advance):
    """States z_T, z_T+1, ... one model call at a time, the window rebuilt from the list of all states."""
    states = [window[:, i] for i in range(window.shape[1])]
    T = window.shape[1]
    out = []
    for _ in range(n_calls):
        pred = fn(torch.stack(states[-T:], 1))[:, :advance]
        for j in range(pred.shape[1]):
            states.append(pred[:, j])
            out.append(pred[:, j])
    return torch.stack(out, 1)


@pytest.mark.parametrize("advance", [1, 2, 3])
def test_next_window_numpy_and_torch(advance):
    w = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2)
    p = -np.arange(2 * advance * 2, dtype=float).reshape(2, advance, 2)
    want = np.concatenate([w[:, advance:], p], axis=1)
    np.testing.assert_array_equal(next_window(w, p, 3), want)
    np.testing.assert_array_equal(next_window(torch.as_tensor(w), torch.as_tensor(p), 3).numpy(), want)


@pytest.mark.parametrize("name,overlap", [("vpt", False), ("vpt", True), ("vpff", False), ("st", False)])
def test_iterate_windows_and_model_step_equal_a_state_by_state_rollout(name, overlap):
    torch.manual_seed(0)
    model = build_model(name, dim=3, seq_len=1 if name == "vpff" else 3).double().eval()
    w0 = torch.randn(4, model.seq_len, 3, dtype=torch.float64)
    advance = 1 if overlap else model.pred_window
    n_calls = 7
    with torch.no_grad():
        want = _slow_rollout(model, w0, n_calls, advance)
    with torch.no_grad():
        got = torch.cat(iterate_windows(model, w0, n_calls, advance), 1)
    assert torch.equal(got, want)
    # ModelStep writes the same windows into one buffer (eager, no trace, no numba kernel)
    step = ModelStep(model, device="cpu", overlap=overlap, jit=False, scalar_max_batch=0)
    step.start(w0.numpy(), np.full(4, 1e9))
    n = n_calls * advance
    first = 2 * advance  # blocks are multiples of the advance except the last
    states = np.concatenate([step.generate(first), step.generate(n - first)], axis=1)
    np.testing.assert_array_equal(states, want.numpy())


def test_iterate_windows_is_differentiable():
    model = build_model("vpt", dim=3, seq_len=3).double()
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    torch.cat(iterate_windows(model, x, 3), 1).pow(2).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def _slow_failures(block, k0, limit, failed):
    """Per trajectory, per step: the first non-finite state or norm > limit; NaN from then on."""
    block, failed = block.copy(), failed.copy()
    for i in range(block.shape[0]):
        for j in range(block.shape[1]):
            z = block[i, j]
            if failed[i] < 0 and not (np.all(np.isfinite(z)) and np.sqrt(np.sum(z * z)) <= limit[i]):
                failed[i] = k0 + j
            if failed[i] >= 0 and k0 + j >= failed[i]:
                block[i, j] = np.nan
    return block, failed


def test_failure_rule_numpy_and_torch_against_a_per_state_loop():
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(6, 3, 3))
    w0[5, 0] = 0.0  # a zero first state: the limit is blowup x 1
    limit = failure_limit(w0, 10.0)
    np.testing.assert_allclose(limit, 10.0 * np.where(np.linalg.norm(w0[:, 0], axis=-1) > 0, np.linalg.norm(w0[:, 0], axis=-1), 1.0))
    block = rng.normal(size=(6, 8, 3))
    block[1, 3] = 1e6  # blows up at step k0 + 3
    block[2, 0, 1] = np.nan  # not finite at the first state of the block
    block[3, 7] = np.inf
    block[4, 2] = 1e6  # has failed earlier already: its state stays NaN from its old step on
    failed = np.full(6, -1)
    failed[4] = 11
    want_block, want_failed = _slow_failures(block, 10, limit, failed)
    for xp in ("numpy", "torch"):
        b = block.copy() if xp == "numpy" else torch.as_tensor(block.copy())
        f = failed.copy() if xp == "numpy" else torch.as_tensor(failed.copy())
        new, got = mark_failures(b, 10, limit if xp == "numpy" else torch.as_tensor(limit), f)
        got_block = b if xp == "numpy" else b.numpy()
        np.testing.assert_array_equal(np.asarray(got), want_failed, err_msg=xp)
        np.testing.assert_array_equal(np.isnan(got_block), np.isnan(want_block), err_msg=xp)
        np.testing.assert_array_equal(np.asarray(new), [False, True, True, True, False, False], err_msg=xp)
    assert bad_states(np.array([[1.0, 0.0], [np.nan, 0.0], [5.0, 5.0]]), np.array([2.0, 2.0, 2.0])).tolist() == [False, True, True]


def test_block_schedule_covers_the_steps_in_order():
    assert block_schedule(0, 10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert block_schedule(3, 11, 4) == [(3, 4), (7, 4)]
    assert block_schedule(5, 5, 4) == []


@pytest.mark.parametrize("xp", ["numpy", "torch"])
def test_block_loop_against_a_step_by_step_loop(xp):
    """A map that multiplies each row by its own factor, run by the block loop in uneven blocks, against the
    states computed step by step with the failure rule written out: the same states (NaN after a failure),
    the same failure steps, each failed row restarted once, the blocks handed over in order."""
    rng = np.random.default_rng(3)
    n_traj, dim, n_steps = 5, 2, 23
    y0 = rng.normal(size=(n_traj, dim))
    gain = np.array([1.0, 1.5, 0.9, 2.0, 1.2])  # rows 1, 3 and 4 blow up past blowup = 20
    limit = failure_limit(y0[:, None], 20.0)
    states = [y0]
    for _ in range(n_steps):
        states.append(states[-1] * gain[:, None])
    want = np.stack(states, axis=1)  # (n_traj, n_steps + 1, dim)
    want_failed = np.full(n_traj, -1)
    for i in range(n_traj):
        for k in range(n_steps + 1):
            if want_failed[i] < 0 and not np.linalg.norm(want[i, k]) <= limit[i]:
                want_failed[i] = k
        if want_failed[i] >= 0:
            want[i, want_failed[i]:] = np.nan
    as_xp = (lambda a: a) if xp == "numpy" else torch.as_tensor
    state = {"y": as_xp(y0.copy())}
    restarted = []
    handed = []

    def produce(i, k0, n):
        if i == 0:
            return as_xp(y0[:, None].copy())
        out = []
        for _ in range(n):
            state["y"] = state["y"] * as_xp(gain)[:, None]
            out.append(state["y"])
        return np.stack(out, 1) if xp == "numpy" else torch.stack(out, 1)

    def restart(rows):
        rows = np.flatnonzero(rows.numpy()) if xp == "torch" else rows
        assert xp == "torch" or rows.dtype.kind == "i"
        restarted.extend(int(r) for r in rows)
        state["y"][rows] = as_xp(y0)[rows]

    out = np.full((n_traj, n_steps + 1, dim), -7.0)

    def deliver(i, k0, block):
        handed.append((k0, block.shape[1]))
        out[:, k0 : k0 + block.shape[1]] = np.asarray(block)

    schedule = [(0, 1), *block_schedule(1, n_steps + 1, 5)]
    failed = run_blocks(schedule, produce, deliver, limit=as_xp(limit), failed=as_xp(np.full(n_traj, -1)),
                        restart=restart)
    assert handed == schedule
    np.testing.assert_array_equal(np.asarray(failed), want_failed)
    np.testing.assert_array_equal(out, want)
    assert sorted(restarted) == [1, 3, 4]


def test_block_loop_without_the_failure_rule_hands_blocks_over_unchanged():
    blocks = {0: np.array([[[np.nan]]]), 1: np.array([[[1e300], [np.inf]]])}
    got = []
    assert run_blocks([(0, 1), (1, 2)], lambda i, k0, n: blocks[i], lambda i, k0, b: got.append(b)) is None
    assert got[0] is blocks[0] and got[1] is blocks[1] and np.isinf(got[1][0, 1, 0])


def _every_method_on_a_system():
    from vpintegrator.integrators import list_integrators, supported_integrators
    from vpintegrator.systems import get_system

    out = []
    for name in list_integrators():
        for system in ("rigid_body", "coupled_oscillator"):
            if supported_integrators([name], get_system(system)):
                out.append((name, system))
                break
    return out


def _step_loop(system, method, y0, dt, n_steps, t0=0.0):
    """The loop ``integrate`` had before it became a call of the driver: the method's own step (the
    subclass hook ``_step``) ``n_steps`` times, a one-line error at the first failure. (states, calls, error)."""
    from vpintegrator.integrators import NotConverged

    y, states, calls = np.asarray(y0, dtype=np.float64), [np.asarray(y0, dtype=np.float64)], []
    for k in range(1, n_steps + 1):
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                y = method._step(system, y, dt)
        except NotConverged as exc:
            return states, calls, f"{method.name}: step {k} (t = {t0 + (k - 1) * dt:g} -> {t0 + k * dt:g}): {exc.detail}"
        finite = np.all(np.isfinite(y), axis=1)
        if not finite.all():
            return states, calls, (f"{method.name}: trajectory {int(np.argmin(finite))} became non-finite at step {k} "
                                   f"(t = {t0 + k * dt:g}); reduce dt or use a stable method")
        states.append(y)
        calls.append(k)
    return states, calls, None


@pytest.mark.parametrize("method, system", _every_method_on_a_system())
def test_integrate_is_a_hand_written_loop_of_step(method, system, monkeypatch):
    """integrate (the driver in chunks of 4 steps here) equals the method's step applied n times, bit for
    bit, for every registered method, and calls back once per step in order."""
    from vpintegrator.data import integration
    from vpintegrator.integrators import get_integrator
    from vpintegrator.systems import get_system

    monkeypatch.setattr(integration, "CHUNK_STEPS", 4)
    system = get_system(system)
    y0 = np.random.default_rng(0).normal(size=(3, system.dim))
    calls = []
    traj = integration.integrate(system, y0, 0.1, 11, method, callback=lambda k, y: calls.append((k, y.copy())))
    states, want_calls, error = _step_loop(system, get_integrator(method), y0, 0.1, 11)
    assert error is None
    np.testing.assert_array_equal(traj.y, np.stack(states, axis=1))
    assert [k for k, _ in calls] == want_calls == list(range(1, 12))
    np.testing.assert_array_equal(np.stack([y for _, y in calls], 1), traj.y[:, 1:])


@pytest.mark.parametrize("system, y0, dt, n_steps, method", [
    ("volterra", [[1.0, 1.0, 1.0], [1.0, 50.0, -50.0]], 1.0, 50, "euler"),  # a blow-up: non-finite
    ("rigid_body", [[1.0, 0.0, 0.2], [0.0, 1.0, 0.0]], 0.2, 9, ("implicit_midpoint", 1)),  # Newton: 1 iteration
    ("volterra", [[1.0, 1.0, 1.0], [1.0, 5.0, -5.0]], 0.05, 40, ("implicit_midpoint", 5)),  # Newton: step 8
])
def test_integrate_fails_as_the_hand_written_loop(system, y0, dt, n_steps, method, monkeypatch):
    """The failure policy "raise": the same one-line error as the step loop (method, step or trajectory,
    t), and every step before the failing one called back first, whatever the chunk length."""
    from vpintegrator.data import integration
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.integrators import get_integrator
    from vpintegrator.systems import get_system

    method = get_integrator(method) if isinstance(method, str) else get_integrator(method[0], max_iter=method[1])
    system = get_system(system)
    _, want_calls, error = _step_loop(system, method, np.array(y0), dt, n_steps, t0=0.5)
    assert error is not None
    for chunk in (1, 3, 1024):
        monkeypatch.setattr(integration, "CHUNK_STEPS", chunk)
        calls = []
        with pytest.raises(VPIntegratorError) as info:
            integration.integrate(system, y0, dt, n_steps, method, t0=0.5, callback=lambda k, y: calls.append(k))
        assert str(info.value) == error and calls == want_calls


class _NaNAt(StepMap):
    """A step map that counts up and gives NaN in row 1 from step ``bad`` on, without StepFailure."""

    name, dim = "nan_at", 2

    def __init__(self, bad):
        self.bad = bad

    def start(self, window0, limit):
        self.k, self.limit = 0, limit

    def generate(self, n):
        k = self.k + 1 + np.arange(n, dtype=np.float64)
        out = np.repeat(np.stack([k, k], -1)[None], 2, axis=0)
        out[1, k >= self.bad] = np.nan
        self.k += n
        return out

    def reset(self, rows):
        pass


@pytest.mark.parametrize("block_steps", [None, 4])
def test_driver_raise_policy_checks_the_states_of_any_map(block_steps):
    """drive(failure="raise") on a map that does not check itself: the states before the first non-finite
    one are delivered (re-blocked or not), then the one-line error; the map started without a limit."""
    got = {}

    def deliver(k0, block):
        for j in range(block.shape[1]):
            got[k0 + j] = block[:, j].copy()

    step_map = _NaNAt(bad=7)
    with pytest.raises(VPIntegratorError, match=r"^nan_at: trajectory 1 became non-finite at step 7 \(t = 4\.5\); "):
        drive(step_map, np.zeros((2, 1, 2)), 20, deliver, chunk_steps=3, block_steps=block_steps, failure="raise",
              dt=0.5, t0=1.0)
    assert step_map.limit is None
    assert sorted(got) == list(range(7)) and all(got[k][0, 0] == k for k in range(7))
    marked = drive(_NaNAt(bad=7), np.zeros((2, 1, 2)), 20, deliver, chunk_steps=3, block_steps=block_steps)
    np.testing.assert_array_equal(marked.failed_step, [-1, 7])  # the policy "mark" on the same map
    fine = drive(_NaNAt(bad=7), np.zeros((2, 1, 2)), 6, deliver, chunk_steps=3, failure="raise")
    np.testing.assert_array_equal(fine.failed_step, [-1, -1])  # "raise" returns only when nothing failed
    with pytest.raises(VPIntegratorError, match="failure must be one of"):
        drive(_NaNAt(bad=7), np.zeros((2, 1, 2)), 5, deliver, chunk_steps=3, failure="ignore")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_stage_hands_out_pieces_in_order_in_blocks_of_any_length(kind):
    """stepping.Stage, the one staging of both engines: pieces in, blocks out, every state once and in
    order; the buffer grows on reserve and keeps what is staged."""
    from vpintegrator.arrays import to_numpy
    from vpintegrator.stepping import Stage

    states = np.arange(2 * 23 * 3, dtype=np.float64).reshape(2, 23, 3)
    xp_states = torch.as_tensor(states) if kind == "torch" else states
    buffer = (torch.empty((2, 4, 3), dtype=torch.float64) if kind == "torch" else np.empty((2, 4, 3)))
    buffer[:, :2] = xp_states[:, :2]
    stage = Stage(buffer, 2)  # starts with two states staged (a first window)
    out, j = [], 2
    for piece, block in [(3, 4), (5, 1), (1, 6), (7, 3), (3, 9)]:
        stage.reserve(stage.n + piece)
        assert stage.put(xp_states[:, j : j + piece]) == piece
        j += piece
        take = min(block, stage.n)
        out.append(to_numpy(stage.head(take)).copy())
        stage.drop(take)
    out.append(to_numpy(stage.head(stage.n)).copy())
    np.testing.assert_array_equal(np.concatenate(out, axis=1), states[:, :j])
    full = Stage(np.empty((2, 3, 3)))
    assert full.put(states) == 3 and full.room == 0 and full.put(states) == 0
