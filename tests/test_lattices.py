"""The lattices (toda, fpu_beta): equations, the bump family, the compiled array loops, the exponential splitting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg

from vpintegrator.compiled import compiled_stepper
from vpintegrator.data import integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import get_integrator
from vpintegrator.systems import get_system, sample_initial_conditions, system_from_meta, system_meta

LATTICES = [("toda", {"alpha": 0.64}), ("fpu_beta", {"beta": 0.7})]


def _state(system, seed: int = 0, scale: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal(system.dim)


def _reference_potential(name: str, par: float, q: np.ndarray) -> float:
    """V(q) from the textbook formulas, site by site."""
    n = q.size
    if name == "toda":  # alpha sum exp(q_n - q_{n+1}), q_N = q_0
        return sum(par * math.exp(q[i] - q[(i + 1) % n]) for i in range(n))
    ext = np.concatenate([[0.0], q, [0.0]])  # fixed ends
    return sum(0.5 * (ext[i + 1] - ext[i]) ** 2 + 0.25 * par * (ext[i + 1] - ext[i]) ** 4 for i in range(n + 1))


@pytest.mark.parametrize("name, params", LATTICES)
def test_energy_and_force_are_the_textbook_ones(name, params):
    system = get_system(name, N=7, **params)
    par = next(iter(params.values()))
    y = _state(system)
    q, p = y[:7], y[7:]
    assert system.hamiltonian(y) == pytest.approx(0.5 * p @ p + _reference_potential(name, par, q), rel=1e-13)
    eps = 1e-6
    grad = [(_reference_potential(name, par, q + eps * e) - _reference_potential(name, par, q - eps * e)) / (2 * eps)
            for e in np.eye(7)]
    np.testing.assert_allclose(system.potential_gradient(q), grad, atol=1e-8)
    np.testing.assert_allclose(system.vector_field(y), np.concatenate([p, -np.asarray(grad)]), atol=1e-8)


def test_bump_is_geometric_problems_family():
    system = get_system("toda", N=200)
    mus = [0.3, 0.45]
    y0 = sample_initial_conditions(system, "bump", mu=mus)
    assert y0.shape == (2, 400)
    assert np.all(y0[:, 200:] == 0.0)
    x = -0.5 + np.arange(200) / 199.0  # GeometricProblems: -0.5 : 1 / (N - 1) : 0.5

    def h(s):
        if 0 <= s <= 1:
            return 1 - 3 * s**2 / 2 + 3 * s**3 / 4
        if 1 < s <= 2:
            return (2 - s) ** 3 / 4
        return 0.0

    for row, mu in zip(y0, mus):
        np.testing.assert_allclose(row[:200], [h(20 * mu * abs(xi + mu / 2)) for xi in x], rtol=0, atol=1e-15)


@pytest.mark.parametrize("call, match", [
    (lambda: get_system("toda", N=2), r"'N' \(the number of lattice sites\) must be an int >= 3; got 2"),
    (lambda: get_system("fpu_beta", N=4.5), "must be an int >= 3"),
    (lambda: get_system("toda", alpha=-1.0), "alpha"),
    (lambda: sample_initial_conditions("rigid_body", "bump", mu=0.3), "not a lattice"),
    (lambda: sample_initial_conditions("toda", "bump"), "needs 'mu'"),
    (lambda: sample_initial_conditions("toda", "bump", mu=[0.3, -0.1]), "must be > 0"),
])
def test_bad_input_one_line(call, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_system_survives_file_metadata():
    system = get_system("toda", N=17, alpha=0.5)
    back = system_from_meta(system_meta(system))
    assert back == system and back.dim == 34 and isinstance(back.N, int)


@pytest.mark.parametrize("name, params", LATTICES)
def test_linear_flow_is_the_exact_flow_of_the_quadratic_part(name, params):
    system = get_system(name, N=9, **params)
    n = 9
    stiffness = system.potential_hessian(np.zeros(n))  # the quadratic part's Hessian
    generator = np.block([[np.zeros((n, n)), np.eye(n)], [-stiffness, np.zeros((n, n))]])
    y = np.stack([_state(system, s) for s in range(3)])
    for t in (0.37, -2.5, 40.0):
        q, p = system.linear_flow(y[:, :n], y[:, n:], t)
        np.testing.assert_allclose(np.concatenate([q, p], axis=1), y @ scipy.linalg.expm(t * generator).T,
                                   rtol=0, atol=1e-11)
    # the remainder's force is the force less the quadratic part's
    np.testing.assert_allclose(system.nonlinear_gradient(y[:, :n]),
                               system.potential_gradient(y[:, :n]) - y[:, :n] @ stiffness, rtol=0, atol=1e-14)


def test_exponential_splitting_is_exact_on_a_linear_chain():
    system = get_system("fpu_beta", N=6, beta=0.0)  # harmonic: no nonlinear remainder
    y0 = np.stack([_state(system, s) for s in range(2)])
    stiffness = system.potential_hessian(np.zeros(6))
    generator = np.block([[np.zeros((6, 6)), np.eye(6)], [-stiffness, np.zeros((6, 6))]])
    y = integrate(system, y0, 25.0, 4, method="exponential_splitting").y[:, -1]
    np.testing.assert_allclose(y, y0 @ scipy.linalg.expm(100.0 * generator).T, rtol=0, atol=1e-10)


def _reference_verlet(system, y, h, n_steps):
    """Kick-drift-kick with the textbook force (finite-free: the analytic dV/dq site by site)."""
    n = system.N
    y = y.copy()
    for _ in range(n_steps):
        y[n:] -= 0.5 * h * system.potential_gradient(y[None, :n])[0]
        y[:n] += h * y[n:]
        y[n:] -= 0.5 * h * system.potential_gradient(y[None, :n])[0]
    return y


@pytest.mark.parametrize("name, params", LATTICES)
def test_compiled_verlet_equals_a_plain_verlet(name, params):
    system = get_system(name, N=33, **params)
    y0 = _state(system, 1)
    out = integrate(system, y0, 0.2, 50, method="stormer_verlet")
    assert out.meta["runner"] == "numba"
    np.testing.assert_allclose(out.y[0, -1], _reference_verlet(system, y0, 0.2, 50), rtol=0, atol=1e-13)


@pytest.mark.parametrize("name, params", LATTICES)
@pytest.mark.parametrize("method", ["stormer_verlet_y6", "implicit_midpoint", "implicit_midpoint_tj4"])
def test_compiled_methods_equal_the_numpy_step(name, params, method):
    system = get_system(name, N=11, **params)
    y0 = np.stack([_state(system, s) for s in range(2)])
    fast = integrate(system, y0, 0.25, 40, method=method)
    slow = integrate(system, y0, 0.25, 40, method=method, compiled=False)  # dense Newton on all 2N unknowns
    assert fast.meta["runner"] == "numba" and slow.meta["runner"] == "numpy"
    np.testing.assert_allclose(fast.y, slow.y, rtol=0, atol=1e-12)


def test_midpoint_conserves_the_energy_of_a_large_ring():
    system = get_system("toda", N=1600)  # 3200 dimensions: the structured Newton solve, O(N) per iteration
    y0 = sample_initial_conditions(system, "bump", mu=0.4)[0]
    ys = compiled_stepper(system, "implicit_midpoint", 0.5).run(y0, 40)
    energy = system.hamiltonian(ys)
    assert np.max(np.abs(energy - energy[0])) / energy[0] < 1e-3
    np.testing.assert_allclose(system.momentum(ys), 0.0, atol=1e-10)  # a linear invariant, exact to rounding


def test_compiled_failures_are_reported_like_numpy():
    system = get_system("toda", N=8)
    y0 = np.concatenate([np.zeros(8), 40.0 * np.sin(np.arange(8))])
    with pytest.raises(VPIntegratorError, match="stormer_verlet: trajectory 0 became non-finite"):
        integrate(system, y0, 1.0, 50, method="stormer_verlet")
    stepper = compiled_stepper(system, "stormer_verlet", 0.1)
    out = np.empty((10, 16))
    done = stepper.step_block(_state(system), 10, out, limit=1e-3)  # the rollouts' norm limit
    assert done == 1 and stepper.status == 4
    assert compiled_stepper(system, "rk4", 0.1) is None  # no lattice loop: the NumPy path


def test_exponential_splitting_refuses_systems_without_a_linear_part():
    with pytest.raises(VPIntegratorError, match="exponential_splitting.*coupled_oscillator"):
        integrate("coupled_oscillator", [1.0, 0.0, 0.0, 0.0], 0.1, 2, method="exponential_splitting")
    assert get_integrator("exponential_splitting").info.symplectic


@pytest.mark.parametrize("name", ["toda_bump", "toda_bump_heldout", "fpu_beta_bump"])
def test_shipped_specs_generate_the_bump_family(name):
    from vpintegrator.data import generate, load_spec

    spec = load_spec(name)
    assert spec.sampler == "bump" and spec.params["N"] == 200 and spec.method == "dop853"
    mus = spec.sampler_args["mu"]
    small = load_spec(name, params={**spec.params, "N": 12}, t_end=0.3)
    traj = generate(small, workers=1)
    system = get_system(small.system, **small.params)
    assert traj.y.shape == (len(mus), 4, 24)
    np.testing.assert_array_equal(traj.y[:, 0], sample_initial_conditions(system, "bump", mu=mus))
    held_out = load_spec("toda_bump_heldout").sampler_args["mu"]
    training = load_spec("toda_bump").sampler_args["mu"]
    np.testing.assert_allclose(held_out, 0.5 * (np.array(training[1:]) + training[:-1]))  # the midpoints


def test_dense_jacobians_that_do_not_fit_are_refused_before_allocating():
    system = get_system("toda", N=30000)  # one dense Jacobian: 60000^2 floats = 29 GB
    with pytest.raises(VPIntegratorError, match="dense 60000 x 60000 Jacobians.*compiled=None") as info:
        system.jacobian(np.zeros((1, 60000)))
    assert "\n" not in str(info.value)
