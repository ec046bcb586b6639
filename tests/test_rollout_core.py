"""The rollout core (vpintegrator.rollout.core): the one window advance and the one failure rule, each
against an independent, obviously correct computation, on NumPy and on torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout import ModelStep
from vpintegrator.rollout.core import bad_states, failure_limit, iterate_windows, mark_failures, next_window


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
