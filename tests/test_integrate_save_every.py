"""``integrate(..., save_every=k)``: the states at steps 0, k, 2k, ... only, held against slicing the full output, on
every kind of compiled loop (the lean loops, the generic ones, the lattices' array loops) and on the NumPy path."""

from __future__ import annotations

import numpy as np
import pytest

import vpintegrator.compiled as compiled
from vpintegrator import VPIntegratorError
from vpintegrator.compiled import compiled_stepper
from vpintegrator.data.integration import integrate
from vpintegrator.systems import get_system

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")

CASES = [("rigid_body", "rk4", 0.2), ("rigid_body", "splitting_mclachlan2", 0.2),
         ("rigid_body", "implicit_midpoint", 0.2), ("coupled_oscillator", "stormer_verlet_tj4", 0.4),
         ("rigid_body", "rotation_splitting", 0.2), ("toda", "stormer_verlet", 0.5),
         ("fpu_beta", "exponential_splitting", 0.5)]


def _y0(system):
    y0 = getattr(system, "default_y0", None)
    y0 = 0.1 * np.sin(0.37 * np.arange(system.dim)) if y0 is None else np.asarray(y0, dtype=np.float64)
    return np.stack([y0, 0.9 * y0])


@needs_numba
@pytest.mark.parametrize(("system_name", "method", "h"), CASES)
def test_every_kth_state_is_the_full_outputs_slice(system_name, method, h):
    system = get_system(system_name)
    y0 = _y0(system)
    for y in (y0[0], y0):
        full = integrate(system, y, h, 23, method=method)
        assert full.meta["runner"] == "numba"
        for k in (1, 2, 5, 23, 30):
            part = integrate(system, y, h, 23, method=method, save_every=k)
            assert part.meta["runner"] == "numba" and part.y.shape[1] == 23 // k + 1
            np.testing.assert_array_equal(part.y, full.y[:, ::k])
            np.testing.assert_array_equal(part.t, full.t[::k])
            assert part.meta["n_steps"] == 23 and part.meta.get("save_every", 1) == k


@needs_numba
@pytest.mark.parametrize(("system_name", "method", "h"), [CASES[0], CASES[4], CASES[5]])
def test_the_loops_write_the_kept_states_only(system_name, method, h):
    """``step_block(..., every=k)`` fills an output of n // k rows (no room for the others), ``step_rows`` too."""
    system = get_system(system_name)
    y0 = _y0(system)
    stepper = compiled_stepper(system, method, h)
    ref = stepper.run(y0[0], 20)
    out = np.full((6, system.dim), np.nan)
    assert stepper.step_block(y0[0].copy(), 20, out, every=3) == 6 and stepper.status == 0
    np.testing.assert_array_equal(out, ref[3::3])
    rows = np.full((2, 4, system.dim), np.nan)
    done, status, _ = stepper.step_rows(y0.copy(), 20, rows, every=5)
    assert done.tolist() == [4, 4] and not status.any()
    np.testing.assert_array_equal(rows[0], ref[5::5])
    with pytest.raises(VPIntegratorError, match="step_block needs"):
        stepper.step_block(y0[0].copy(), 20, np.empty((5, system.dim)), every=3)


def test_numpy_path_keeps_the_same_states_and_calls_back_every_step():
    system = get_system("rigid_body")
    y0 = _y0(system)
    calls = []
    full = integrate(system, y0, 0.2, 2100, method="rk4", compiled=False)
    part = integrate(system, y0, 0.2, 2100, method="rk4", compiled=False, save_every=7,
                     callback=lambda k, y: calls.append((k, y.copy())))
    np.testing.assert_array_equal(part.y, full.y[:, ::7])
    np.testing.assert_array_equal(part.t, full.t[::7])
    assert [k for k, _ in calls] == list(range(1, 2101))
    np.testing.assert_array_equal(calls[-1][1], full.y[:, -1])


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3", None])
def test_bad_save_every_is_one_line_naming_it(bad):
    with pytest.raises(VPIntegratorError, match="save_every must be an int >= 1") as info:
        integrate("rigid_body", [1.0, 0.0, 0.0], 0.2, 4, save_every=bad)
    assert "\n" not in str(info.value)
