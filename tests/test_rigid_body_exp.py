"""The rigid body with an exponential term in its Hamiltonian (issue 43, item 3): exact invariants, the
integrators that apply (and the rotation splittings refused in one line), compiled speed, and its spec
generated end to end by vp-gen.

The registry-wide tests cover it too: Jacobian against finite differences, divergence 0, invariants along
DOP853 and dI/dt = 0 (tests/test_systems.py), the convergence order of every method that runs on it
(tests/test_integrators.py), the compiled kernels against NumPy (tests/test_compiled_integrators.py).
"""

from __future__ import annotations


import numpy as np
import pytest
from click.testing import CliRunner
from scipy.integrate import solve_ivp

import vpintegrator as vp
from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import get_integrator, list_integrators, supported_integrators
from vpintegrator.systems import RigidBody, RigidBodyExp, get_system


def _sphere(n: int, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed).normal(size=(n, 3))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _fd_jacobian(fun, y: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    cols = [(fun(y + eps * e) - fun(y - eps * e)) / (2 * eps) for e in np.eye(3)]
    return np.stack(cols, axis=-1)


def test_field_is_z_cross_grad_h():
    """f(z) = z x grad H(z), grad H against finite differences of the energy."""
    system = get_system("rigid_body_exp", epsilon=0.7)
    y = _sphere(32) * 1.3
    grad = system.hamiltonian_gradient(y)
    fd = _fd_jacobian(lambda x: system.invariant("energy", x)[..., None], y)[:, 0, :]
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-8)
    np.testing.assert_allclose(system.vector_field(y), np.cross(y, grad), rtol=0, atol=1e-14)


def test_epsilon_zero_is_the_free_rigid_body():
    y = _sphere(16)
    free, body = RigidBody(inertia=(1.5, 1.0, 0.5)), RigidBodyExp(inertia=(1.5, 1.0, 0.5), epsilon=0.0)
    np.testing.assert_array_equal(body.vector_field(y), free.vector_field(y))
    np.testing.assert_array_equal(body.jacobian(y), free.jacobian(y))


def test_jacobian_and_divergence():
    system = get_system("rigid_body_exp")
    y = _sphere(40, seed=3) * 1.7
    np.testing.assert_allclose(system.jacobian(y), _fd_jacobian(system.vector_field, y), rtol=0, atol=1e-8)
    assert np.max(np.abs(system.divergence(y))) == 0.0  # f_i does not depend on z_i: trace exactly 0
    assert system.shear_splittable


def test_dynamics_differ_from_the_quadratic_body():
    """The exponential term moves the orbits (median distance at t = 10 of order 1 on the unit sphere)."""
    y0 = _sphere(20, seed=1)
    free = vp.integrate(get_system("rigid_body"), y0, 0.2, 50, method="gauss_legendre4").y[:, -1]
    exp = vp.integrate(get_system("rigid_body_exp"), y0, 0.2, 50, method="gauss_legendre4").y[:, -1]
    assert np.median(np.linalg.norm(free - exp, axis=1)) > 0.3


def test_invariants_kept_by_dop853():
    """Energy and Casimir of the exact flow (DOP853 at 1e-12) to ~1e-10 over t = 20."""
    system = get_system("rigid_body_exp")
    for y0 in _sphere(4, seed=5):
        sol = solve_ivp(system, (0.0, 20.0), y0, method="DOP853", rtol=1e-12, atol=1e-12)
        path = sol.y.T
        for name, values in system.invariants(path).items():
            assert np.max(np.abs(values - values[0])) / abs(values[0]) <= 1e-10, name


def test_generated_file_keeps_both_invariants(tmp_path):
    """vp-gen's compiled DOP853 on the new kernel: drifts ~1e-11 (as solve_ivp's)."""
    from vpintegrator.data import generate, load_spec

    spec = load_spec("rigid_body_exp", n_traj=6, t_end=10.0)
    traj = generate(spec)
    system = traj.system
    for name, values in system.invariants(traj.y).items():
        drift = np.max(np.abs(values - values[:, :1]) / np.abs(values[:, :1]))
        assert drift <= 1e-10, (name, drift)


@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
def test_casimir_kept_by_implicit_methods(method):
    """The Casimir is quadratic: implicit midpoint and GL4 keep it to rounding over 1000 steps of h = 0.2
    (the energy, not quadratic, only to the method's order)."""
    system = get_system("rigid_body_exp")
    y = vp.integrate(system, _sphere(4, seed=7), 0.2, 1000, method=method).y
    c = system.invariant("casimir", y)
    assert np.max(np.abs(c - c[:, :1])) <= 1e-13
    e = system.invariant("energy", y)
    assert np.max(np.abs(e - e[:, :1])) > 1e-13  # not kept exactly: the claim is the Casimir's only


@pytest.mark.parametrize("method, order", [("rk4", 4), ("gauss_legendre4", 4), ("implicit_midpoint", 2)])
def test_convergence_order(method, order):
    system = get_system("rigid_body_exp")
    y0 = _sphere(3, seed=9)
    ref = np.array([solve_ivp(system, (0, 2.0), y, method="DOP853", rtol=3e-14, atol=3e-14).y[:, -1] for y in y0])
    ns = [8, 16, 32]
    errors = [np.max(np.abs(vp.integrate(system, y0, 2.0 / n, n, method=method).y[:, -1] - ref)) for n in ns]
    slope = np.polyfit(np.log(2.0 / np.array(ns)), np.log(errors), 1)[0]
    assert order - 0.3 <= slope < order + 1.0, (errors, slope)


def test_rotation_splittings_refused_in_one_line():
    system = get_system("rigid_body_exp")
    rotations = [m for m in list_integrators() if m.startswith("rotation_splitting")]
    assert rotations
    for name in rotations:
        with pytest.raises(VPIntegratorError, match=r"rigid_body_exp' is not one") as err:
            get_integrator(name).supports(system)
        assert "\n" not in str(err.value)
    ok = supported_integrators(list_integrators(), system)
    assert {"rk4", "implicit_midpoint", "gauss_legendre4", "splitting"} <= set(ok)
    assert not set(rotations) & set(ok) and "stormer_verlet" not in ok


def test_compiled_steppers_exist_and_agree():
    from vpintegrator.compiled import available, compiled_stepper

    if not available():
        pytest.skip("numba is not installed")
    system = get_system("rigid_body_exp")
    y0 = np.array(system.default_y0)
    for method in ("rk4", "implicit_midpoint", "gauss_legendre4", "splitting"):
        stepper = compiled_stepper(system, method, 0.2)
        assert stepper is not None, method
        ys = stepper.run(y0.copy(), 50)
        step = get_integrator(method)
        y = y0[None].copy()
        for k in range(50):
            y = step.step(system, y, 0.2)
            np.testing.assert_allclose(ys[k + 1], y[0], rtol=0, atol=1e-12)  # ys[0] is y0


def test_bad_parameters_are_one_line():
    for kw, key in (({"inertia": (1.0, -1.0, 2.0)}, "inertia"), ({"epsilon": float("nan")}, "epsilon"),
                    ({"inertia": (1.0, 2.0)}, "inertia")):
        with pytest.raises(VPIntegratorError, match=key) as err:
            get_system("rigid_body_exp", **kw)
        assert "\n" not in str(err.value)


def test_spec_generates_with_vp_gen(tmp_path):
    from vpintegrator.cli.gen import main

    out = tmp_path / "rbe.h5"
    result = CliRunner().invoke(main, ["rigid_body_exp", "--n-traj", "5", "--t-end", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    traj = vp.read_trajectories(out)
    assert traj.y.shape == (5, 11, 3)
    assert isinstance(traj.system, RigidBodyExp) and traj.system.epsilon == 0.5
    np.testing.assert_allclose(np.linalg.norm(traj.y[:, 0], axis=1), 1.0, rtol=0, atol=1e-14)  # on the unit sphere
    assert traj.meta["dt"] == 0.2 and traj.meta["method"] == "dop853"


def test_shipped_spec_is_the_issue_protocol():
    from vpintegrator.data import load_spec

    spec = load_spec("rigid_body_exp")
    assert spec.system == "rigid_body_exp" and spec.n_traj >= 100 and spec.dt == 0.2 and spec.t_end == 20.0
    assert spec.sampler == "sphere"


def test_oracle_rows_of_a_rollout(tmp_path):
    """The true equations as rows of a comparison run: the exact flow (DOP853) and GL4, errors against the
    exact-flow reference; the Casimir of GL4 kept to rounding."""
    from vpintegrator.data import generate, load_spec, write_trajectories
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    data = write_trajectories(tmp_path / "d.h5", generate(load_spec("rigid_body_exp", n_traj=3, t_end=4.0)))
    report = run_rollouts(RolloutConfig(data=str(data), integrators=["gauss_legendre4", "rk4"],
                                        out=str(tmp_path / "r.h5")))
    rows = {r["method"]: r for r in report.rows}
    assert rows["gauss_legendre4"]["max_rel_drift_casimir"] <= 1e-13
    assert rows["gauss_legendre4"]["final_rel_error"] < 1e-3
