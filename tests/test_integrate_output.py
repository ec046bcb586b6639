"""The output of ``integrate`` on its compiled path: the kernel writes straight into the returned array (one
allocation, no copy), the result is the object ``Trajectories``' constructor makes from it, and the stepper a
thread keeps between calls gives each call the states of a fresh one (after a failure too, in other threads too).
Held against the kernel's own ``step_block`` and a slow explicit Euler written here."""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np
import pytest

from ulp import assert_ulp_close
from vpintegrator.compiled import compiled_stepper
from vpintegrator.data.integration import integrate
from vpintegrator.data.trajectories import Trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import get_system

Y0 = np.array([math.sin(1.1), 0.0, math.cos(1.1)])


def _euler_reference(y0, h: float, n: int) -> np.ndarray:
    """Explicit Euler on the rigid body, z' = (a z2 z3, b z1 z3, c z1 z2), one Python float at a time."""
    a, b, c = get_system("rigid_body").coefficients
    z1, z2, z3 = (float(v) for v in y0)
    states = [(z1, z2, z3)]
    for _ in range(n):
        z1, z2, z3 = z1 + h * (a * z2 * z3), z2 + h * (b * z1 * z3), z3 + h * (c * z1 * z2)
        states.append((z1, z2, z3))
    return np.array(states)


@pytest.mark.parametrize("method,h", [("euler", 0.01), ("rk4", 0.2), ("splitting_mclachlan2", 0.2),
                                      ("implicit_midpoint", 0.2), ("gauss_legendre4", 0.2)])
def test_the_returned_states_are_the_kernels_own(method, h):
    n = 700
    y0 = Y0.copy()
    tr = integrate("rigid_body", y0, h, n, method=method)
    assert tr.meta["runner"] == "numba"
    np.testing.assert_array_equal(y0, Y0)  # the caller's y0 is not stepped in place
    kernel = np.empty((n, 3))
    stepper = compiled_stepper("rigid_body", method, h)
    assert stepper.step_block(Y0.copy(), n, kernel) == n
    np.testing.assert_array_equal(tr.y[0, 0], Y0)
    np.testing.assert_array_equal(tr.y[0, 1:], kernel)
    # one allocation, written in place: the array owns its memory, float64, C order
    assert tr.y.dtype == np.float64 and tr.y.flags.owndata and tr.y.flags.c_contiguous and tr.y.base is None
    assert tr.t.dtype == np.float64 and tr.t.shape == (n + 1,)
    if method == "euler":
        assert_ulp_close(tr.y[0], _euler_reference(Y0, h, n), steps=n)


def test_the_result_is_the_constructors_object():
    tr = integrate("rigid_body", Y0, 0.2, 50, method="rk4")
    made = Trajectories(y=tr.y, t=tr.t, meta=tr.meta)
    assert type(tr) is Trajectories and vars(tr).keys() == vars(made).keys()
    for field in dataclasses.fields(Trajectories):
        got, want = getattr(tr, field.name), getattr(made, field.name)
        if isinstance(want, np.ndarray):
            assert got is want
        else:
            assert got == want and type(got) is type(want), field.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        tr.y = None  # type: ignore[misc]
    assert tr.n_traj == 1 and tr.n_steps == 50 and tr.dim == 3


def test_a_kept_stepper_after_a_failure_gives_a_fresh_ones_states_and_errors():
    good = integrate("rigid_body", Y0, 0.2, 300, method="euler")
    for _ in range(2):  # a blow-up on the compiled path is redone on the NumPy path from the caller's y0
        with pytest.raises(VPIntegratorError) as fast:
            integrate("rigid_body", np.array([0.1, 2.0, 3.0]), 0.2, 400, method="euler")
        with pytest.raises(VPIntegratorError) as exact:
            integrate("rigid_body", np.array([0.1, 2.0, 3.0]), 0.2, 400, method="euler", compiled=False)
        assert str(fast.value) == str(exact.value)
        again = integrate("rigid_body", Y0, 0.2, 300, method="euler")
        np.testing.assert_array_equal(again.y, good.y)
        assert again.meta == good.meta


def test_threads_each_get_their_own_states():
    starts = [Y0 * (1.0 + 0.05 * i) for i in range(6)]
    want = [integrate("rigid_body", y, 0.2, 2000, method="implicit_midpoint").y for y in starts]
    got: list = [None] * len(starts)

    def work(i: int) -> None:
        for _ in range(5):
            got[i] = integrate("rigid_body", starts[i], 0.2, 2000, method="implicit_midpoint").y

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(starts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("t0,h,n,every", [(0.0, 0.2, 10, 1), (-0.0, 0.1, 3, 1), (1.5, 0.3, 700, 3),
                                          (-2.0, 1e-3, 40_000, 7), (0.25, 0.01, 200_000, 1), (0.0, 0.7, 0, 1),
                                          (1e-9, 0.37, 9_999, 10)])
def test_the_compiled_time_grid_is_the_numpy_one_bit_for_bit(t0, h, n, every):
    """The compiled call's grid (one compiled loop into the returned array) is ``stepping.time_grid``'s, kept
    states only, and the NumPy path's, bit for bit."""
    from vpintegrator.stepping import time_grid

    fast = integrate("coupled_oscillator", np.array([0.1, 0.0, 0.0, 0.1]), h, n, method="stormer_verlet", t0=t0,
                     save_every=every)
    assert fast.meta["runner"] == "numba" and fast.t.flags.writeable and fast.t.flags.owndata
    assert fast.t.tobytes() == time_grid(t0, h, n)[::every].tobytes()
    # t_end is the grid's last time, sign included
    assert fast.meta["t_end"] == float(fast.t[-1]) and math.copysign(1.0, fast.meta["t_end"]) == math.copysign(
        1.0, fast.t[-1])
    if n <= 1000:
        exact = integrate("coupled_oscillator", np.array([0.1, 0.0, 0.0, 0.1]), h, n, method="stormer_verlet",
                          t0=t0, save_every=every, compiled=False)
        assert fast.t.tobytes() == exact.t.tobytes() and fast.meta["t_end"] == exact.meta["t_end"]


def test_turning_numba_off_turns_the_kept_stepper_off(monkeypatch):
    """As ``compiled_stepper`` gives None once numba is off (``compiled._jit.HAVE_NUMBA``), so does the stepper a
    thread kept from an earlier call: the NumPy path runs."""
    import vpintegrator.compiled._jit as jit

    assert integrate("rigid_body", Y0, 0.2, 20, method="rk4").meta["runner"] == "numba"
    monkeypatch.setattr(jit, "HAVE_NUMBA", False)
    off = integrate("rigid_body", Y0, 0.2, 20, method="rk4")
    assert off.meta["runner"] == "numpy"
    np.testing.assert_array_equal(off.y, integrate("rigid_body", Y0, 0.2, 20, method="rk4", compiled=False).y)


@pytest.mark.parametrize("y0", [Y0, Y0[None], np.stack([Y0, 2 * Y0])[1:], np.arange(9.0).reshape(3, 3)[1:2],
                                np.arange(9.0).reshape(3, 3)[:, 1], np.asfortranarray(Y0[None]), Y0.astype(">f8")])
def test_one_initial_state_is_taken_as_as_points_takes_it(y0):
    """A single float64 state ((dim,) or (1, dim), any strides) is checked on the fast path: its copy, C order, is
    ``as_points``'s, and a NaN or an infinity anywhere in it is ``as_points``' error."""
    from vpintegrator.data import integration
    from vpintegrator.systems.initial_conditions import as_points

    system = get_system("rigid_body")
    got = integration._check_initial_conditions(system, y0)
    np.testing.assert_array_equal(got, as_points(y0, 3, "y0"))
    assert got.shape == (1, 3) and got.dtype == np.float64 and got.flags.c_contiguous
    assert not np.shares_memory(got, y0)
    for k in range(3):
        for bad_value in (np.nan, np.inf, -np.inf):
            bad = y0.copy()
            bad.reshape(-1)[k] = bad_value
            with pytest.raises(VPIntegratorError, match="initial condition 0 is not finite"):
                integrate(system, bad, 0.2, 3, method="rk4")


def test_a_result_s_meta_is_its_own_even_where_the_call_kept_its_head():
    """The compiled path keeps each (system, method, h)'s metadata head between calls; the meta a call returns is the
    caller's own, its list parameters included: editing it never edits the next call's (nor the kept head)."""
    y0 = np.array([1.0, 0.5, 0.2])
    first = integrate("rigid_body", y0, 0.1, 10, "euler")
    inertia = list(first.meta["param_inertia"])
    first.meta["param_inertia"][0] = 99.0
    first.meta["invariant_names"].append("edited")
    first.meta["method"] = "edited"
    again = integrate("rigid_body", y0, 0.1, 10, "euler")
    assert again.meta["runner"] == first.meta["runner"]
    assert again.meta["param_inertia"] == inertia and again.meta["method"] == "euler"
    assert "edited" not in again.meta["invariant_names"]
