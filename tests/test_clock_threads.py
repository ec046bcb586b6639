"""The cost clock counts every thread a rollout uses: a torch model run by torch with more than one intra-op
thread is timed on the process clock (every thread), on one thread (or by the compiled runner) on the calling
thread's; the rollout's ``clock`` says which. Fake clocks, so the test asserts which clock is read, not a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator import stepping
from vpintegrator.clock import PROCESS_CPU, THREAD_CPU
from vpintegrator.models import build_model
from vpintegrator.rollout import rollout
from vpintegrator.rollout.steps import ModelStep


@pytest.fixture
def fake_clocks(monkeypatch):
    """The process clock advances 1 s per reading, the thread clock never: which one a cost holds shows."""
    ticks = {"n": 0.0}

    def process():
        ticks["n"] += 1.0
        return ticks["n"]

    monkeypatch.setattr(stepping, "process_cpu", process)
    monkeypatch.setattr(stepping, "thread_cpu", lambda: 0.0)


def _rollout(threads: int, scalar_max_batch: int = 0):
    model = build_model("vpt", dim=3, seq_len=2, L=1, n_blocks=1).double()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(0)
        y0 = rng.normal(size=(64, 2, 3))
        return rollout(ModelStep(model, device="cpu", scalar_max_batch=scalar_max_batch), y0, 0.1, 20,
                       chunk_steps=4)
    finally:
        torch.set_num_threads(old)


def test_a_threaded_torch_rollout_is_timed_on_the_process_clock(fake_clocks):
    tr = _rollout(2)
    assert tr.meta["runner"] != "numba" and tr.meta["clock"] == PROCESS_CPU
    assert tr.meta["seconds"] > 0  # the process clock's readings around every generate call


def test_one_torch_thread_is_timed_on_the_calling_threads_clock(fake_clocks):
    tr = _rollout(1)
    assert tr.meta["clock"] == THREAD_CPU and tr.meta["seconds"] == 0.0


def test_the_compiled_runner_runs_in_the_calling_thread(fake_clocks):
    pytest.importorskip("numba")
    tr = _rollout(2, scalar_max_batch=128)
    if tr.meta["runner"] != "numba":
        pytest.skip("the compiled runner did not take this model")
    assert tr.meta["clock"] == THREAD_CPU
