"""Systems: equations, Jacobians, divergence, invariants, parameters, initial-condition samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import (
    PAPER_SPHERE_SIZE,
    PAPER_TRAJECTORY_INDEX,
    ABCFlow,
    CoupledOscillator,
    RigidBody,
    System,
    Volterra,
    get_system,
    list_samplers,
    list_systems,
    paper_sphere_points,
    paper_trajectory_index,
    sample_initial_conditions,
)

SYSTEMS = ["rigid_body", "coupled_oscillator", "volterra", "abc_flow", "rigid_body_exp", "toda", "fpu_beta", "kac_zwanzig",
           "particle_chain"]
# allclose float64 tolerance of the team table
ALLCLOSE64 = 1e-12
NAN = float("nan")


def _points(system: System, n: int = 16, seed: int = 0) -> np.ndarray:
    """Random states (n, dim); Volterra on the positive orthant where its orbits are periodic."""
    rng = np.random.default_rng(seed)
    if system.name == "volterra":
        return rng.uniform(0.3, 2.0, (n, system.dim))
    if system.name in ("toda", "fpu_beta", "kac_zwanzig", "particle_chain"):  # 202-400 components: bonds of O(1)
        return rng.uniform(-0.5, 0.5, (n, system.dim))
    return rng.uniform(-2.0, 2.0, (n, system.dim))


def _fd_jacobian(fun, y: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite-difference Jacobian of fun: (n, d) -> (n, m), returns (n, m, d)."""
    cols = [(fun(y + eps * e) - fun(y - eps * e)) / (2 * eps) for e in np.eye(y.shape[-1])]
    return np.stack(cols, axis=-1)


def test_registry_names():
    # a dysts flow is registered on first use (``dysts:NAME``, the optional extra): an earlier test in this process
    # with dysts installed may have used one; the shipped systems are the rest
    assert [n for n in list_systems() if not n.startswith("dysts:")] == sorted(SYSTEMS)
    assert isinstance(get_system("rigid_body"), RigidBody)
    assert isinstance(get_system("coupled_oscillator"), CoupledOscillator)
    assert isinstance(get_system("volterra"), Volterra)
    assert isinstance(get_system("abc_flow"), ABCFlow)


@pytest.mark.parametrize("name", SYSTEMS)
def test_vector_field_batched_over_leading_axes(name):
    system = get_system(name)
    y = _points(system, 12).reshape(3, 4, system.dim)
    f = system.vector_field(y)
    jac = system.jacobian(y)
    assert f.shape == y.shape and f.dtype == np.float64
    assert jac.shape == y.shape + (system.dim,)
    # batched result equals the one-state-at-a-time result
    slow = np.stack([system.vector_field(state) for state in y.reshape(-1, system.dim)])
    np.testing.assert_allclose(f.reshape(-1, system.dim), slow, rtol=0, atol=ALLCLOSE64)
    assert system.divergence(y).shape == (3, 4)
    for values in system.invariants(y).values():
        assert values.shape == (3, 4)


@pytest.mark.parametrize("name", SYSTEMS)
def test_jacobian_matches_finite_differences(name):
    system = get_system(name)
    y = _points(system)
    np.testing.assert_allclose(system.jacobian(y), _fd_jacobian(system.vector_field, y), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", SYSTEMS)
def test_divergence_is_zero(name):
    system = get_system(name)
    y = _points(system, 100)
    assert np.max(np.abs(system.divergence(y))) <= ALLCLOSE64
    # and the finite-difference trace agrees, so the analytic Jacobian is not hiding a nonzero trace
    fd_trace = np.trace(_fd_jacobian(system.vector_field, y), axis1=-2, axis2=-1)
    assert np.max(np.abs(fd_trace)) <= 1e-8


@pytest.mark.parametrize("name", ["rigid_body", "coupled_oscillator", "volterra", "rigid_body_exp"])
def test_invariants_conserved_along_dop853_flow(name):
    system = get_system(name)
    y0 = _points(system, 3, seed=1)
    for state in y0:
        sol = solve_ivp(system, (0.0, 10.0), state, method="DOP853", rtol=1e-12, atol=1e-12, dense_output=False)
        path = sol.y.T  # (n_times, dim)
        for inv_name, values in system.invariants(path).items():
            drift = np.max(np.abs(values - values[0])) / abs(values[0])
            assert drift <= 1e-9, (inv_name, drift)


@pytest.mark.parametrize("name", ["rigid_body", "coupled_oscillator", "volterra", "rigid_body_exp"])
def test_invariants_have_zero_time_derivative(name):
    """grad I . f = 0 pointwise (finite-difference gradient of each invariant)."""
    system = get_system(name)
    y = _points(system, 20, seed=2)
    f = system.vector_field(y)
    for inv_name in system.invariant_names:
        grad = _fd_jacobian(lambda x: system.invariant(inv_name, x)[..., None], y)[:, 0, :]
        assert np.max(np.abs(np.sum(grad * f, axis=-1))) <= 1e-7, inv_name


def test_rigid_body_parameters():
    body = RigidBody()
    assert body.inertia == (2.0, 1.0, 2.0 / 3.0)
    np.testing.assert_allclose(body.coefficients, (0.5, -1.0, 0.5), rtol=1e-14)
    params = body.params()
    assert set(params) == {"inertia", "a", "b", "c"}
    np.testing.assert_allclose(params["inertia"], [2.0, 1.0, 2.0 / 3.0])
    assert params["b"] == pytest.approx(-1.0)
    paper_text = get_system("rigid_body", inertia=(1.0, 2.0, 2.0 / 3.0))
    i1, i2, i3 = 1.0, 2.0, 2.0 / 3.0
    np.testing.assert_allclose(
        paper_text.coefficients, ((i2 - i3) / (i2 * i3), (i3 - i1) / (i3 * i1), (i1 - i2) / (i1 * i2))
    )
    z = np.array([0.3, -0.4, 0.5])
    np.testing.assert_allclose(body.invariant("energy", z), 0.5 * (0.09 / 2 + 0.16 / 1 + 0.25 / (2 / 3)))
    np.testing.assert_allclose(body.invariant("casimir", z), 0.5)


def test_coupled_oscillator_is_hamiltonian_with_its_split():
    """f = (dH/dp, -dH/dq), and the separable split matches H and its Hessians."""
    system = CoupledOscillator()
    assert system.params() == {"m": [2.0, 1.0], "k1": 1.5, "k2": 0.3, "k": 1.0}
    y = _points(system, 20, seed=3)
    grad_h = _fd_jacobian(lambda x: system.invariant("energy", x)[..., None], y)[:, 0, :]  # (n, 4)
    f = system.vector_field(y)
    np.testing.assert_allclose(f[:, :2], grad_h[:, 2:], atol=1e-8)
    np.testing.assert_allclose(f[:, 2:], -grad_h[:, :2], atol=1e-8)
    q, p = y[:, :2], y[:, 2:]
    np.testing.assert_allclose(system.potential_gradient(q), grad_h[:, :2], atol=1e-8)
    np.testing.assert_allclose(system.kinetic_gradient(p), grad_h[:, 2:], atol=1e-8)
    np.testing.assert_allclose(system.potential_hessian(q), _fd_jacobian(system.potential_gradient, q), atol=1e-8)
    np.testing.assert_allclose(system.kinetic_hessian(p), _fd_jacobian(system.kinetic_gradient, p), atol=1e-8)


def test_coupled_oscillator_sigmoid_does_not_overflow():
    y = np.array([[-800.0, 0.0, 0.0, 0.0], [800.0, 0.0, 0.0, 0.0]])
    with np.errstate(over="raise"):
        assert np.all(np.isfinite(CoupledOscillator().vector_field(y)))


@pytest.mark.parametrize("name", SYSTEMS)
def test_params_are_plain_and_rebuild_the_system(name):
    system = get_system(name)
    params = system.params()
    for value in params.values():
        assert isinstance(value, (float, list))
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k not in ("a", "b", "c")}
    assert get_system(name, **fields) == system


def test_paper_sphere_set():
    points = paper_sphere_points()
    assert points.shape == (PAPER_SPHERE_SIZE, 3) == (1238, 3)
    np.testing.assert_allclose(np.linalg.norm(points, axis=1), 1.0, rtol=0, atol=1e-15)
    assert PAPER_TRAJECTORY_INDEX == {1: 100, 4: 719}
    # trajectory 1 = (sin 1.1, 0, cos 1.1); trajectory 4 = (0, sin 1.1, cos 1.1), bit for bit
    assert points[paper_trajectory_index(1)].tolist() == [math.sin(1.1), 0.0, math.cos(1.1)]
    assert points[paper_trajectory_index(4)].tolist() == [0.0, math.sin(1.1), math.cos(1.1)]
    # first family v = 0.10 .. 6.28, then the second family
    assert points[0].tolist() == [math.sin(0.1), 0.0, math.cos(0.1)]
    assert points[618].tolist() == [math.sin(6.28), 0.0, math.cos(6.28)]
    assert points[619].tolist() == [0.0, math.sin(0.1), math.cos(0.1)]
    assert np.all(points[:619, 1] == 0) and np.all(points[619:, 0] == 0)
    sampled = sample_initial_conditions("rigid_body", "paper_sphere", None, None)
    np.testing.assert_array_equal(sampled, points)
    with pytest.raises(VPIntegratorError, match="trajectory number"):
        paper_trajectory_index(2)


def test_paper_sphere_subset_is_spread_over_both_families():
    subset = sample_initial_conditions("rigid_body", "paper_sphere", 10, None)
    points = paper_sphere_points()
    assert subset.shape == (10, 3)
    np.testing.assert_array_equal(subset[0], points[0])
    np.testing.assert_array_equal(subset[-1], points[-1])


@pytest.mark.parametrize("name", SYSTEMS)
def test_sphere_sampler_any_dim(name):
    system = get_system(name)
    a = sample_initial_conditions(system, "sphere", 500, np.random.default_rng(5), radius=2.5)
    b = sample_initial_conditions(system, "sphere", 500, 5, radius=2.5)
    assert a.shape == (500, system.dim)
    np.testing.assert_array_equal(a, b)  # an int seed is the same as a Generator with that seed
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 2.5, rtol=1e-14)
    # roughly uniform: the mean of a uniform sphere sample is near the centre
    assert np.all(np.abs(a.mean(axis=0)) < 0.5)


def test_box_sampler():
    low, high = [0.5, -1.0, 2.0], [1.0, 1.0, 3.0]
    y = sample_initial_conditions("volterra", "box", 1000, np.random.default_rng(0), low=low, high=high)
    assert y.shape == (1000, 3)
    assert np.all(y >= low) and np.all(y <= high)
    y = sample_initial_conditions("coupled_oscillator", "box", 10, 0, low=-0.5, high=0.5)
    assert y.shape == (10, 4) and np.all(np.abs(y) <= 0.5)


def test_list_sampler():
    pts = [[1.0, 0.0, 2.0, 0.0], [0.5, 0.1, 0.2, 0.3]]
    y = sample_initial_conditions("coupled_oscillator", "list", None, None, points=pts)
    np.testing.assert_array_equal(y, pts)
    default = sample_initial_conditions("coupled_oscillator", "list", None, None)
    np.testing.assert_array_equal(default, [[1.0, 0.0, 2.0, 0.0]])  # the system's default_y0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: get_system("pendulum"), r"unknown system 'pendulum'.*rigid_body"),
        (lambda: get_system("rigid_body", mass=1.0), r"no parameter\(s\) mass; valid parameters: inertia"),
        (lambda: RigidBody(inertia=(1.0, -1.0, 2.0)), "inertia"),
        (lambda: RigidBody(inertia=(1.0, 2.0)), "inertia"),
        (lambda: CoupledOscillator(k=float("nan")), "'k'"),
        (lambda: get_system("rigid_body").invariant("momentum", np.ones(3)), "energy, casimir"),
        (lambda: get_system("rigid_body").vector_field(np.ones(4)), r"shape \(\.\.\., 3\)"),
        (lambda: get_system("volterra").kinetic_gradient(np.ones(2)), "not a separable"),
        (lambda: sample_initial_conditions("rigid_body", "cube", 3, 0), "valid samplers: around, box, bump, list"),
        (lambda: sample_initial_conditions("coupled_oscillator", "paper_sphere", None, None), "dim=4"),
        (lambda: sample_initial_conditions("rigid_body", "paper_sphere", 5000, None), "1..1238"),
        (lambda: sample_initial_conditions("rigid_body", "sphere", None, 0), "needs n"),
        (lambda: sample_initial_conditions("rigid_body", "sphere", 3, None), "needs rng"),
        (lambda: sample_initial_conditions("rigid_body", "sphere", 0, 0), "n .* >= 1"),
        (lambda: sample_initial_conditions("rigid_body", "sphere", 3, 0, radius=-1), "radius"),
        (
            lambda: sample_initial_conditions("rigid_body", "sphere", 3, 0, size=2),
            r"unknown arguments \(size\).*radius",
        ),
        (lambda: sample_initial_conditions("rigid_body", "box", 3, 0, low=1, high=0), "low < high"),
        (lambda: sample_initial_conditions("rigid_body", "list", None, None, points=[[1, 2]]), r"shape \(n, 3\)"),
        (
            lambda: sample_initial_conditions("rigid_body", "list", None, None, points=[[1, 0, 0], [0, NAN, 1]]),
            "point 1 is not finite",
        ),
        (lambda: sample_initial_conditions("volterra", "list", 3, None, points=[[1, 2, 3]] * 2), "n=3"),
    ],
)
def test_bad_inputs_raise_one_line_errors(call, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_list_samplers():
    assert list_samplers() == ["around", "box", "bump", "list", "paper_sphere", "particle", "sphere"]


@pytest.mark.parametrize("name, params, match", [
    ("rigid_body", {"inertia": None}, r"'inertia' must be 3 positive numbers"),
    ("rigid_body", {"inertia": 2.0}, r"'inertia' must be 3 positive numbers"),
    ("rigid_body", {"inertia": {"a": 1, "b": 2, "c": 3}}, r"'inertia' must be 3 positive numbers"),
    ("rigid_body", {"inertia": (1, 2, -3)}, r"'inertia' must be a finite number > 0; got -3"),
    ("coupled_oscillator", {"m": None}, r"'m' must be 2 positive masses"),
    ("coupled_oscillator", {"m": "ab"}, r"'m' must be 2 positive masses"),
    ("rigid_body", {"name": "x"}, r"has no parameter\(s\) name"),
])
def test_bad_parameters_are_one_line_errors(name, params, match):
    with pytest.raises(VPIntegratorError, match=match):
        get_system(name, **params)


def test_a_user_module_that_fails_to_import_is_a_one_line_error(tmp_path, monkeypatch):
    import sys

    (tmp_path / "vp_fails_at_import.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "vp_bad_syntax.py").write_text("def (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(VPIntegratorError, match=r"cannot import module 'vp_fails_at_import' "
                                                    r"\(RuntimeError: boom\); fix the module"):
            get_system("vp_fails_at_import:Sys")
        with pytest.raises(VPIntegratorError, match=r"cannot import module 'vp_bad_syntax' \(SyntaxError") as info:
            get_system("vp_bad_syntax:Sys")
        assert "\n" not in str(info.value)
    finally:
        sys.modules.pop("vp_fails_at_import", None)
        sys.modules.pop("vp_bad_syntax", None)
