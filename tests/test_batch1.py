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


BATCH_CASES = [("rigid_body", "rk4", 0.2), ("rigid_body", "gauss_legendre4", 0.2), ("rigid_body", "splitting_mclachlan2", 0.2),
               ("rigid_body", "gauss_legendre10", 0.2), ("rigid_body", "rotation_splitting_tj4", 0.2),
               ("coupled_oscillator", "stormer_verlet_y6", 0.4)]


@pytest.mark.parametrize("system,method,dt", BATCH_CASES, ids=lambda v: str(v))
def test_integrate_of_a_large_batch_runs_compiled_each_row_as_at_batch_1(system, method, dt):
    """Issue 59: any number of trajectories run compiled (lean, shear, generic and rotation loops alike), each
    row's states those of the row integrated alone, bit for bit, and within a few ulp per step of NumPy."""
    y0 = _y0(system, SCALAR_MAX_BATCH + 4)
    big = integrate(system, y0, dt, 60, method=method)
    assert big.meta["runner"] == "numba"
    for i in range(y0.shape[0]):
        np.testing.assert_array_equal(big.y[i], integrate(system, y0[i], dt, 60, method=method).y[0])
    assert_ulp_close(big.y, integrate(system, y0, dt, 60, method=method, compiled=False).y, steps=60)


def test_integrate_with_a_callback_is_the_numpy_step():
    y0 = _y0("rigid_body", SCALAR_MAX_BATCH + 1)
    seen = []
    tr = integrate("rigid_body", y0, 0.2, 5, method="rk4", callback=lambda k, y: seen.append(k))
    assert tr.meta["runner"] == "numpy" and seen == [1, 2, 3, 4, 5]


def test_integrate_compiled_flag():
    with pytest.raises(VPIntegratorError, match="compiled must be None"):
        integrate("rigid_body", _y0("rigid_body", 1), 0.2, 5, compiled="yes")
    with pytest.raises(VPIntegratorError, match="compiled=True: no compiled kernel"):
        integrate("rigid_body", _y0("rigid_body", 2), 0.2, 5, compiled=True, callback=lambda k, y: None)
    assert integrate("rigid_body", _y0("rigid_body", 1), 0.2, 5, compiled=True).meta["runner"] == "numba"
    assert integrate("rigid_body", _y0("rigid_body", 40), 0.2, 5, compiled=True).meta["runner"] == "numba"


def test_a_large_rollout_with_failing_rows_is_each_row_alone():
    """The engine's compiled path of many rows, some blowing up (euler at a huge step): each row's states and
    failing step are those of the row rolled out alone, bit for bit, on the direct path and the block loop."""
    rng = np.random.default_rng(5)
    y0 = rng.normal(size=(SCALAR_MAX_BATCH + 3, 3)) * rng.uniform(0.2, 3.0, size=(SCALAR_MAX_BATCH + 3, 1))
    y0[::3] = [0.0, 0.0, 1.0]  # a fixed point of the rigid body: these rows do not fail
    direct = rollout(IntegratorStep("rigid_body", "euler", 1.5), y0, 1.5, 300)
    loop = rollout(IntegratorStep("rigid_body", "euler", 1.5), y0, 1.5, 300, callback=lambda k0, block: None)
    assert direct.meta["runner"] == loop.meta["runner"] == "numba"
    assert (direct.failed_step >= 0).any() and (direct.failed_step < 0).any()
    for res in (direct, loop):
        for i in range(y0.shape[0]):
            alone = rollout(IntegratorStep("rigid_body", "euler", 1.5), y0[i : i + 1], 1.5, 300)
            np.testing.assert_array_equal(res.y[i], alone.y[0])
            assert res.failed_step[i] == alone.failed_step[0]


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


def test_integrate_takes_initial_conditions_in_any_memory_order():
    """A Fortran-ordered (or strided) y0 runs compiled like its C-ordered copy; the compiled rows loop needs
    C-contiguous rows, and integrate used to hand it np.array(y), which keeps Fortran order and was refused."""
    y0 = _y0("coupled_oscillator", 100)
    c = integrate("coupled_oscillator", np.ascontiguousarray(y0), 0.2, 20, method="rk4", compiled=True)
    for odd in (np.asfortranarray(y0), np.repeat(y0, 2, axis=1)[:, ::2]):
        assert not odd.flags.c_contiguous
        f = integrate("coupled_oscillator", odd, 0.2, 20, method="rk4", compiled=True)
        assert f.meta["runner"] == "numba"
        np.testing.assert_array_equal(f.y, c.y)
