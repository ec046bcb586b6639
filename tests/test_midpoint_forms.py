"""Every compiled form of implicit midpoint against one slow, obviously-correct dense Newton written here.

The forms: the lean batch-1 loop (``compiled.lean``: a full-state system and a separable one), its loop over the
rows of a batch (``step_rows``), the generic kernel loop of ``compiled.kernels`` (the exact rule of
``compiled.newton`` that the lean loops fall back to), and the lattices' structured Newton (``compiled.lattice``:
Toda and FPU-beta, each on a ring and with fixed ends). The reference knows nothing of them: the whole state's
``y1 = y + h f((y + y1) / 2)`` by Newton with ``numpy.linalg.solve`` on the dense ``I - h/2 J``, iterated until the
update is below 1e-14 of the state (or stops shrinking at the rounding floor), from the system's own equations.
"""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.compiled import compiled_stepper
from vpintegrator.compiled import kernels as K
from vpintegrator.compiled.lattice import lattice_stepper
from vpintegrator.compiled.newton import NOT_CONVERGED, OK, workspace
from vpintegrator.compiled.systems import system_kernel
from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import get_integrator
from vpintegrator.systems import get_system
from vpintegrator.systems.fpu_beta import FPUBeta
from vpintegrator.systems.toda import Toda


class _FixedEndsToda(Toda):
    """Toda with fixed ends (the lattice loops' non-periodic branch with Toda's bond)."""

    periodic = False


class _RingFPU(FPUBeta):
    """FPU-beta on a ring (the periodic branch, with its cyclic solve, with FPU's bond)."""

    periodic = True


def _dense_midpoint(system, y: np.ndarray, h: float, n_steps: int) -> np.ndarray:
    """States (n_steps + 1, dim): each step the dense Newton iteration on all of y1, to 1e-14 relative."""
    out = [np.array(y, dtype=np.float64)]
    eye = np.eye(y.size)
    for _ in range(n_steps):
        y0 = out[-1]
        z = y0 + h * system.vector_field(y0[None])[0]
        scale = max(1.0, float(np.max(np.abs(y0))))
        prev = np.inf
        for _ in range(100):
            mid = 0.5 * (y0 + z)
            residual = z - y0 - h * system.vector_field(mid[None])[0]
            delta = np.linalg.solve(eye - 0.5 * h * system.jacobian(mid[None])[0], residual)
            z = z - delta
            e = float(np.max(np.abs(delta)))
            if e <= 1e-14 * scale or (e >= 0.5 * prev and e <= 1e-12 * scale):
                break
            prev = e
        else:
            raise AssertionError("the reference did not converge")
        out.append(z)
    return np.array(out)


def _states(system, rows: int, seed: int, size: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return size * rng.standard_normal((rows, system.dim))


SMALL = [("rigid_body", {}, 0.1), ("coupled_oscillator", {}, 0.1)]  # a full-state Newton; the separable one


@pytest.mark.parametrize("name, params, h", SMALL)
def test_lean_loop_and_its_rows_are_the_dense_midpoint(name, params, h):
    system = get_system(name, **params)
    ys = _states(system, 3, 1, 0.8)
    stepper = compiled_stepper(system, "implicit_midpoint", h)
    assert stepper.engine == "lean"
    one = stepper.run(ys[0], 30)
    rows = stepper.run_batch(ys, 30)
    for r in range(3):
        np.testing.assert_allclose(rows[r], _dense_midpoint(system, ys[r], h, 30), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(rows[0], one)  # a row of the batch is the batch-1 loop, bit for bit


@pytest.mark.parametrize("name, params, h", SMALL)
def test_generic_kernel_loop_is_the_dense_midpoint(name, params, h):
    system = get_system(name, **params)
    kid, p = system_kernel(system)
    y = _states(system, 1, 2, 0.8)[0]
    ws, m = workspace(system.dim)
    out, info = np.empty((30, system.dim)), np.array([np.inf, 0.0, 0.0, np.inf])
    start = y.copy()
    a, b, c = (np.zeros((1, 1)), np.zeros(1), np.zeros(1))  # the loop's Gauss-Legendre tableau: unused here
    assert K.run_implicit(K.IMPLICIT_MIDPOINT, kid, p, y, h, 30, out, ws, m, a, b, c, 1e-15, 50, info) == 30
    assert info[1] == OK
    np.testing.assert_allclose(out, _dense_midpoint(system, start, h, 30)[1:], rtol=0, atol=1e-12)


LATTICES = [(Toda, {"alpha": 0.64}), (_FixedEndsToda, {"alpha": 0.64}), (FPUBeta, {"beta": 0.7}),
            (_RingFPU, {"beta": 0.7})]


@pytest.mark.parametrize("cls, params", LATTICES, ids=["toda-ring", "toda-fixed", "fpu-fixed", "fpu-ring"])
@pytest.mark.parametrize("method", ["implicit_midpoint", "implicit_midpoint_tj4"])
def test_lattice_loop_is_the_dense_midpoint(cls, params, method):
    system = cls(N=7, **params)
    ys = _states(system, 2, 3, 0.4)
    stepper = lattice_stepper(system, get_integrator(method), 0.3)
    assert stepper is not None and stepper.periodic == cls.periodic
    got = stepper.run_batch(ys, 25)
    if method == "implicit_midpoint":
        want = np.stack([_dense_midpoint(system, y, 0.3, 25) for y in ys])
    else:  # the composition: sub-steps gamma_i h of the same dense step
        gammas = get_integrator(method).gammas
        want = np.empty_like(got)
        for r, y in enumerate(ys):
            want[r, 0] = y
            for k in range(25):
                for g in gammas:
                    y = _dense_midpoint(system, y, float(g) * 0.3, 1)[-1]
                want[r, k + 1] = y
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_lattice_newton_failure_keeps_the_last_good_state():
    system = get_system("toda", N=8)
    y = _states(system, 1, 4, 0.4)[0]
    start = y.copy()
    stepper = lattice_stepper(system, get_integrator("implicit_midpoint", max_iter=2), 0.3)
    out = np.zeros((5, system.dim))
    assert stepper.step_block(y, 5, out) == 0
    assert stepper.status == NOT_CONVERGED and stepper.failed_step == 1 and 0.0 < stepper.last_update < 1e-3
    np.testing.assert_array_equal(y, start)  # nothing of the failed step kept
    with pytest.raises(VPIntegratorError, match="implicit_midpoint: step 1 .* Newton did not converge in 2 iterations"):
        stepper.run(start, 5)


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_nan_component_is_never_overwritten_by_a_later_finite_one(where):
    """The stopping test's norms (``lean._max_abs``, ``lean._max_diff``): NaN wherever it sits, so an update with a
    NaN component never passes ``err <= tol``; finite inputs give the plain maximum."""
    from vpintegrator.compiled.lean import _max_abs, _max_diff

    x = np.array([0.5, -2.0, 1.0])
    assert _max_abs(0.0, x) == 2.0 and _max_diff(0.0, x, np.zeros(3)) == 2.0
    x[where] = np.nan
    assert np.isnan(_max_abs(0.0, x))
    assert np.isnan(_max_diff(0.0, x, np.zeros(3)))
    assert np.isnan(_max_abs(0.0, (float(x[0]), float(x[1]), float(x[2]))))  # the lean loops' tuples
