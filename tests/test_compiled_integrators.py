"""The compiled (numba) single-trajectory integrators: system kernels, blocks, errors as NumPy's, fallbacks, the lean
loops (their states against the reference of tests/reference_steppers.py; every path: tests/test_parity.py)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from ulp import assert_ulp_close

import vpintegrator as vp
import vpintegrator.compiled as compiled
import vpintegrator.compiled._jit as jit
from vpintegrator.compiled import compiled_stepper
from vpintegrator.integrators import get_integrator
from vpintegrator.systems import ABCFlow, CoupledOscillator, RigidBody, get_system, list_systems

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
SHIPPED = ["rigid_body", "coupled_oscillator", "volterra", "abc_flow", "rigid_body_exp"]
N_STEPS = 200




# --- the system kernels --------------------------------------------------------------------------------
@needs_numba
@pytest.mark.parametrize("name", SHIPPED)
def test_system_kernels_match_numpy(name):
    from vpintegrator.compiled.systems import jacobian_rows, system_kernel, vector_field_rows

    rng = np.random.default_rng(0)
    for system in (get_system(name), _other_parameters(name)):
        kid, params = system_kernel(system)
        y = rng.normal(size=(64, system.dim)) * 2.0
        f, jac = np.empty_like(y), np.empty((64, system.dim, system.dim))
        vector_field_rows(kid, params, y, f)
        jacobian_rows(kid, params, y, jac)
        # numba against NumPy: two code paths, a few ulp of the values' scale
        assert_ulp_close(f, system.vector_field(y))
        assert_ulp_close(jac, system.jacobian(y))


def _other_parameters(name):
    return {"rigid_body": RigidBody(inertia=(1.0, 2.0, 2.0 / 3.0)),
            "coupled_oscillator": CoupledOscillator(m=(1.5, 0.7), k1=0.9, k2=0.4, k=2.0),
            "volterra": get_system("volterra"), "abc_flow": ABCFlow(A=1.0, B=0.5, C=0.25),
            "rigid_body_exp": get_system("rigid_body_exp", inertia=(1.0, 2.0, 2.0 / 3.0), epsilon=-0.8)}[name]


# --- states ------------------------------------------------------------------------------------------------
# Every path's states against an independent reference: tests/test_parity.py.
@needs_numba
@pytest.mark.parametrize("method", ["rk4", "implicit_midpoint", "gauss_legendre4", "splitting",
                                    "implicit_midpoint_tj4"])
def test_blocks_continue_where_the_last_one_stopped(method):
    from reference_steppers import reference_trajectory

    system = get_system("rigid_body")
    y0 = np.array([0.6, -0.3, 0.74])
    ref = reference_trajectory(system, method, y0, 0.2, 60)
    stepper = compiled_stepper(system, method, 0.2)
    y, out = y0.copy(), np.empty((60, 3))
    assert stepper.step_block(y, 25, out) == 25 and stepper.step_block(y, 35, out[25:]) == 35
    np.testing.assert_allclose(out, ref[1:], rtol=0, atol=2e-12)
    np.testing.assert_array_equal(y, out[-1])


@needs_numba
def test_gauss_tableau_of_any_stage_count():
    from vpintegrator.compiled.integrators import _tableau

    for s in (1, 2, 3, 5):
        a, b, c = _tableau(object(), s)  # computed here (the method exposes no tableau)
        k = np.arange(1, 2 * s + 1)
        np.testing.assert_allclose((b[None, :] * c[None, :] ** (k[:, None] - 1)).sum(1), 1.0 / k, atol=1e-14)
        for q in range(1, s + 1):  # C(s): sum_j a_ij c_j^(q-1) = c_i^q / q
            np.testing.assert_allclose(a @ c ** (q - 1), c**q / q, atol=1e-14)
        method = get_integrator(f"gauss_legendre{2 * s}")
        if hasattr(method, "tableau"):
            for mine, theirs in zip((a, b, c), method.tableau):
                np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-14)


# --- errors --------------------------------------------------------------------------------------------------
def _same_error(system, method, y0, dt, n):
    with pytest.raises(vp.VPIntegratorError) as numpy_err:
        vp.integrate(system, y0, dt, n, method=method)
    stepper = compiled_stepper(system, method, dt)
    with pytest.raises(vp.VPIntegratorError) as compiled_err:
        stepper.run(np.asarray(y0, dtype=np.float64), n)
    assert str(compiled_err.value) == str(numpy_err.value)
    with pytest.raises(vp.VPIntegratorError) as batch_err:
        stepper.run_batch(np.asarray(y0, dtype=np.float64)[None], n)
    assert str(batch_err.value) == str(numpy_err.value)
    return str(numpy_err.value)


@needs_numba
@pytest.mark.parametrize("name", ["implicit_midpoint", "gauss_legendre4"])
def test_newton_failure_same_error(name):
    method = get_integrator(name, max_iter=2)
    msg = _same_error(get_system("rigid_body"), method, [1.0, 0.5, -0.3], 0.5, 10)
    assert "step 1" in msg and "did not converge" in msg


@needs_numba
def test_newton_failure_later_step_and_status():
    method = get_integrator("implicit_midpoint", max_iter=4)
    system = get_system("volterra")
    y0 = np.array([1.0, -2.0, 1.5])  # grows towards a finite-time blow-up: Newton needs more and more
    msg = _same_error(system, method, y0, 0.05, 400)
    stepper = compiled_stepper(system, method, 0.05)
    out = np.empty((400, 3))
    y = y0.copy()
    done = stepper.step_block(y, 400, out)
    assert stepper.status == 1 and stepper.failed_step == done + 1 > 1
    np.testing.assert_array_equal(y, out[done - 1])
    assert f"step {done + 1} " in msg


@needs_numba
def test_singular_newton_matrix_same_error():
    # k = 0, k1 = -4, m1 = 1, h = 1: I - h/2 f'(0) is exactly singular at the origin
    system = CoupledOscillator(m=(1.0, 1.0), k1=-4.0, k2=0.3, k=0.0)
    msg = _same_error(system, "implicit_midpoint", [0.0, 0.0, 0.0, 0.0], 1.0, 3)
    assert "singular" in msg


@needs_numba
def test_blow_up_same_error():
    msg = _same_error(get_system("rigid_body"), "euler", [0.9, 0.1, 0.4], 0.2, 2000)
    assert "non-finite" in msg


# --- fallbacks -----------------------------------------------------------------------------------------------
def test_a_user_system_written_as_numpy_methods_falls_back(caplog):
    """A system that overrides vector_field (not its field written once) runs in NumPy, and says so once; a subclass
    of a shipped system compiles its own field (tests/test_user_compiled.py), not the shipped kernel."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from user_systems import NumpyOscillator
    finally:
        sys.path.pop(0)

    with caplog.at_level("WARNING", logger="vpintegrator"):
        assert compiled_stepper(NumpyOscillator(), "rk4", 0.1) is None
        assert compiled_stepper(NumpyOscillator(), "implicit_midpoint", 0.1) is None
    said = [r.getMessage() for r in caplog.records if "numpy_oscillator" in r.getMessage()]
    assert len(said) <= 1 and all("overrides vector_field" in m for m in said)

    @dataclasses.dataclass(frozen=True)
    class Faster(RigidBody):  # may change the equations: its own field, compiled as a user's
        pass

    stepper = compiled_stepper(Faster(), "implicit_midpoint", 0.1)
    assert stepper is not None and not isinstance(stepper.kid, int)


def test_without_numba_everything_falls_back(monkeypatch):
    monkeypatch.setattr(jit, "HAVE_NUMBA", False)
    for name in SHIPPED:
        assert compiled_stepper(name, "rk4", 0.1) is None


def test_unsupported_method_raises_like_numpy():
    if not compiled.available():
        pytest.skip("numba is not installed")
    with pytest.raises(vp.VPIntegratorError, match="separable"):
        compiled_stepper("rigid_body", "stormer_verlet", 0.1)
    with pytest.raises(vp.VPIntegratorError, match="dt"):
        compiled_stepper("rigid_body", "rk4", -0.1)


def test_every_shipped_system_is_covered():
    assert set(SHIPPED) <= set(list_systems())


def test_the_kernel_table_is_read_from_the_self_registered_classes():
    """A shipped system is one module: its class registers itself and carries its kernel id, and the compiled
    table is built from the classes (no list of systems elsewhere); a subclass, which may change the equations,
    is not compiled."""
    from dataclasses import dataclass

    from vpintegrator.compiled import systems as compiled_systems
    from vpintegrator.systems import RigidBody, shipped_systems, system_class

    assert [cls.name for cls in shipped_systems()] == SHIPPED
    assert {kid: cls.name for kid, cls in compiled_systems.SHIPPED.items()} == dict(enumerate(SHIPPED))
    for name in SHIPPED:  # registered by their own module, found by the package's import of its folder
        cls = system_class(name)
        assert cls.__module__ == f"vpintegrator.systems.{name}" and compiled_systems.SHIPPED[cls.kernel_id] is cls

    @dataclass(frozen=True)
    class Heavier(RigidBody):  # inherits kernel_id 0, but its field may differ: NumPy only
        pass

    kid, _ = compiled_systems.system_kernel(Heavier())  # its own field compiled as a user's, never kernel 0
    assert Heavier.kernel_id == 0 and not isinstance(kid, int) and compiled_systems.COMPILED[type(kid)].system is Heavier
    kid, p = compiled_systems.system_kernel(RigidBody())
    assert kid == 0 and p.dtype == np.float64


def test_the_fields_declared_linear_in_their_parameters_are_exactly_those():
    """A lean shear folds its coefficient into the parameters (``y_i += f_i(c p, y)``) on the fields declared
    linear in them: there ``f(c p, y) = c f(p, y)`` to rounding; on every other shipped field it does not hold."""
    from vpintegrator.compiled.systems import LINEAR_IN_PARAMS
    from vpintegrator.compiled.systems import SHIPPED as KIDS

    rng = np.random.default_rng(1)
    for kid, cls in KIDS.items():
        p = np.asarray(cls().field_params(), dtype=np.float64)
        ys = rng.normal(size=(8, cls.dim))
        holds = all(np.allclose(cls.field(c * p, tuple(y)), c * np.array(cls.field(p, tuple(y))), rtol=1e-14, atol=0)
                    for y in ys for c in (0.3, -1.7))
        assert holds == (kid in LINEAR_IN_PARAMS), cls.name


# --- the lean loops ------------------------------------------------------------------------------------
@needs_numba
@pytest.mark.parametrize(("system_name", "method"), [("rigid_body", "gauss_legendre4"),
                                                      ("coupled_oscillator", "implicit_midpoint_tj4"),
                                                      ("rigid_body", "splitting_y6"),
                                                      ("coupled_oscillator", "stormer_verlet_y6")])
def test_lean_loop_runs_the_method(system_name, method):
    """The stepper runs the lean scalar loop for these methods, and its states match the reference's."""
    from reference_steppers import reference_trajectory

    system = get_system(system_name)
    stepper = compiled_stepper(system, method, system.default_dt)
    assert stepper._fast[1] is not None
    y0 = np.array(system.default_y0)
    ref = reference_trajectory(system, method, y0, system.default_dt, N_STEPS)
    np.testing.assert_allclose(stepper.run(y0, N_STEPS), ref, rtol=0, atol=1e-11)


@needs_numba
def test_fast_iteration_falls_back_to_the_exact_rule():
    """A step the fixed-point iteration cannot do (h |J| large) is done by NumPy's Newton: same states as the
    NumPy step (the reference's fixed point cannot do it either)."""
    system = get_system("rigid_body")
    y0 = np.array([3.0, -2.0, 2.5])  # |J| ~ 3: h = 0.8 makes Z <- h A f(y + Z) diverge
    ref = vp.integrate(system, y0, 0.8, 20, method="gauss_legendre4", compiled=False).y[0]
    stepper = compiled_stepper(system, "gauss_legendre4", 0.8)
    np.testing.assert_allclose(stepper.run(y0, 20), ref, rtol=0, atol=1e-11)


# --- compilation is set-up, never a timed step ---------------------------------------------------------------
_COMPILED_IN_SETUP = r"""
import numpy as np
import vpintegrator.compiled.kernels as K
import vpintegrator.data.integration as I
import vpintegrator.stepping as S
from vpintegrator.rollout.engine import rollout
from vpintegrator.rollout.steps import IntegratorStep

ROWS = [K.rows_explicit, K.rows_shears, K.rows_implicit, K.rows_verlet]
y0 = np.random.default_rng(0).normal(size=(4, 3))
for module, path in ((I, "direct"), (S, "blocks")):
    for method in ("rk4", "splitting", "implicit_midpoint"):
        seen, real = [], module.thread_cpu
        def clock():  # every reading of the rollout's clock, with the loops' compiled signatures at that moment
            seen.append(sum(len(d.signatures) for d in ROWS))
            return real()
        module.thread_cpu = clock
        try:  # a callback takes the engine's block loop (generate); none, the whole-rollout path
            rollout(IntegratorStep("rigid_body", method, 0.1), y0, 0.1, 30,
                    **({"callback": lambda k0, b: None} if path == "blocks" else {}))
        finally:
            module.thread_cpu = real
        # the direct path reads: start, tic, toc; the block loop: two for set-up, then tic/toc per chunk
        timed = seen[1:] if path == "direct" else seen[2:]
        print(path, method, seen)
        assert len(timed) >= 2 and len(set(timed)) == 1, (path, method, seen)
"""


@needs_numba
def test_a_rollout_compiles_its_loops_in_set_up_never_in_its_timed_steps():
    """The loop over rows (``step_rows``) is a kernel of its own, compiled per memory layout of its output: a
    classical row's first rollout in a process compiles (or loads from the disk cache) every loop it runs before
    its clock starts, on both of the engine's paths, so its cost is that of warm steps (a fresh install's first
    table as its second). Run in a fresh process: in this one, earlier tests may have compiled them already."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _COMPILED_IN_SETUP], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("\n") == 6, done.stdout
