"""Delay SINDy's search is bounded by a count with a CPU valve said when it binds (issue 86 item 4); that its fit
is the same bits whatever the BLAS's kernels and thread count: tests/test_stlsq.py."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pysindy") is None,
                                reason="pysindy (the sindy extra) is not installed")

H = 0.1
KW = dict(libraries=["poly1", "poly2"], thresholds=[1e-3, 1e-2])


def _oscillator(n: int, K: int, seed: int) -> np.ndarray:
    """(q, p) of a unit harmonic oscillator at step H, random amplitudes and phases."""
    rng = np.random.default_rng(seed)
    phase, amp = rng.uniform(0, 2 * np.pi, n), rng.uniform(0.5, 1.5, n)
    t = H * np.arange(K)
    return np.stack([amp[:, None] * np.cos(t + phase[:, None]), -amp[:, None] * np.sin(t + phase[:, None])], axis=-1)


def test_the_search_says_which_bound_stopped_it():
    """A count (``max_candidates``) stops the search at the same candidate on every machine; the CPU valve is said
    when it stopped it (where depends on the machine's speed and load); the whole grid is cut by neither."""
    from vpintegrator.rollout.delay_sindy import DelaySindyStep

    train, val = _oscillator(8, 60, 0), _oscillator(3, 60, 1)
    rows = {name: DelaySindyStep(train, val, "rk4", H, context_len=2, **KW, **extra)
            for name, extra in (("whole", {}), ("count", {"max_candidates": 3}), ("valve", {"max_fit_seconds": 1e-9}))}
    assert rows["whole"].cut is None  # not fitted yet
    for step in rows.values():
        step.fit_now()
    assert [rows[n].cut for n in ("whole", "count", "valve")] == [None, "candidates", "cpu"]
    assert [len(rows[n].candidates) for n in ("whole", "count", "valve")] == [4, 3, 1]
    assert "valve" in rows["valve"].budget and "valve" not in rows["count"].budget + rows["whole"].budget
    assert rows["valve"].describe()["sindy_budget"] == rows["valve"].budget
