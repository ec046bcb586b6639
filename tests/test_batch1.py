"""Batch-1 calls on the compiled path (issue 42, item 3): ``integrate`` of a few trajectories and the engine's
whole-rollout path of a classical method agree with the NumPy step to a few ulp per step and with the engine's
block loop bit for bit (the same kernel on the same data), failures included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ulp import assert_ulp_close
from vpintegrator.data.integration import SCALAR_MAX_BATCH, integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout.engine import rollout
from vpintegrator.rollout.steps import IntegratorStep
from vpintegrator.systems import get_system

CASES = [("rigid_body", "rk4", 0.2), ("rigid_body", "implicit_midpoint", 0.2), ("rigid_body", "gauss_legendre4", 0.2),
         ("rigid_body", "splitting", 0.2), ("rigid_body", "rotation_splitting", 0.2),
         ("coupled_oscillator", "stormer_verlet", 0.4), ("coupled_oscillator", "implicit_midpoint", 0.4)]


def _y0(system, n):
    rng = np.random.default_rng(3)
    base = np.asarray(get_system(system).default_y0, dtype=np.float64)
    return base + 0.1 * rng.standard_normal((n, base.size))


@pytest.mark.parametrize("system,method,dt", CASES, ids=lambda v: str(v))
def test_integrate_runs_compiled_within_a_few_ulp_per_step(system, method, dt):
    y0 = _y0(system, 3)
    fast = integrate(system, y0, dt, 200, method=method)
    exact = integrate(system, y0, dt, 200, method=method, compiled=False)
    assert fast.meta["runner"] == "numba" and exact.meta["runner"] == "numpy"
    assert_ulp_close(fast.y, exact.y, steps=200)
    np.testing.assert_array_equal(fast.t, exact.t)
    assert {k: v for k, v in fast.meta.items() if k != "runner"} == {k: v for k, v in exact.meta.items() if k != "runner"}


def test_integrate_of_a_large_batch_or_with_a_callback_is_the_numpy_step():
    y0 = _y0("rigid_body", SCALAR_MAX_BATCH + 1)
    assert integrate("rigid_body", y0, 0.2, 5, method="rk4").meta["runner"] == "numpy"
    seen = []
    tr = integrate("rigid_body", y0[:1], 0.2, 5, method="rk4", callback=lambda k, y: seen.append(k))
    assert tr.meta["runner"] == "numpy" and seen == [1, 2, 3, 4, 5]


def test_integrate_compiled_flag():
    with pytest.raises(VPIntegratorError, match="compiled must be None"):
        integrate("rigid_body", _y0("rigid_body", 1), 0.2, 5, compiled="yes")
    with pytest.raises(VPIntegratorError, match="compiled=True: no compiled kernel"):
        integrate("rigid_body", _y0("rigid_body", SCALAR_MAX_BATCH + 1), 0.2, 5, compiled=True)
    assert integrate("rigid_body", _y0("rigid_body", 1), 0.2, 5, compiled=True).meta["runner"] == "numba"


def test_a_failure_on_the_compiled_path_raises_the_numpy_error():
    y0 = np.array([[0.1, 2.0, 3.0]])
    with pytest.raises(VPIntegratorError) as fast:
        integrate("rigid_body", y0, 2.0, 400, method="euler")
    with pytest.raises(VPIntegratorError) as exact:
        integrate("rigid_body", y0, 2.0, 400, method="euler", compiled=False)
    assert str(fast.value) == str(exact.value) and "became non-finite" in str(fast.value)


@pytest.mark.parametrize("method,dt,n", [("rk4", 0.2, 3000), ("euler", 1.5, 400), ("implicit_midpoint", 0.2, 500)])
def test_whole_rollout_path_equals_the_block_loop(method, dt, n):
    """The engine's direct path (IntegratorMap.rollout_direct: no callback) against its block loop (a callback
    turns the direct path off): the same kernel on the same data, so the same bits, failures included."""
    y0 = np.array([[math.sin(1.1), 0.0, math.cos(1.1)], [0.3, -2.0, 4.0]])
    direct = rollout(IntegratorStep("rigid_body", method, dt), y0, dt, n)
    loop = rollout(IntegratorStep("rigid_body", method, dt), y0, dt, n, callback=lambda k0, block: None)
    np.testing.assert_array_equal(direct.y, loop.y)
    np.testing.assert_array_equal(direct.failed_step, loop.failed_step)
    assert direct.meta["runner"] == loop.meta["runner"] == "numba"
    assert direct.meta["clock"] == "thread_cpu" and direct.meta["seconds"] > 0 and "wall_seconds" in direct.meta
    if method == "euler":  # the explicit Euler blows up: the failure rule's NaN from the failing step on
        assert (direct.failed_step >= 0).any()
