"""Classical integrators: convergence order, structure (invariants, det J), step Jacobians, errors."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from ulp import assert_ulp_close

from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.integrators import get_integrator, list_integrators
from vpintegrator.systems import System, get_system, paper_sphere_points, sample_initial_conditions
from vpintegrator.data.trajectories import Trajectories

METHODS = list_integrators()  # every registered method: a new one is tested automatically
LEGACY = ["euler", "rk4", "implicit_midpoint", "gauss_legendre4", "stormer_verlet", "splitting"]
SYSTEMS = ["rigid_body", "coupled_oscillator", "volterra", "abc_flow", "rigid_body_exp", "toda", "fpu_beta"]
#: the lattices at a size the dense Jacobians of these tests afford (their own tests: tests/test_lattices.py)
SMALL = {"toda": {"N": 5}, "fpu_beta": {"N": 5}}


def _system(name: str) -> System:
    return get_system(name, **SMALL.get(name, {}))


def _bump(name: str) -> np.ndarray:
    y = 0.5 * sample_initial_conditions(_system(name), "bump", mu=[0.3, 0.45])
    y[:, 5:] = [[0.1, -0.2, 0.05, 0.0, 0.3], [0.0, 0.1, 0.2, -0.1, 0.05]]
    return y

DET64 = 1e-10  # team tolerance table, det float64

# initial conditions per system for accuracy tests (Volterra on the positive orthant: periodic orbits)
Y0 = {
    "rigid_body": paper_sphere_points()[[100, 719, 300]],
    "coupled_oscillator": np.array([[1.0, 0.0, 2.0, 0.0], [0.5, -0.3, 0.1, 0.4]]),
    "volterra": np.array([[1.0, 2.0, 1.5], [0.5, 1.0, 2.0]]),
    "abc_flow": np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]]),
    "rigid_body_exp": 0.8 * paper_sphere_points()[[100, 719, 300]],  # on |z| = 1 GL8 at h = 2 is pre-asymptotic
    "toda": _bump("toda"),
    "fpu_beta": _bump("fpu_beta"),
}


def _supports(method: str, system_name: str) -> bool:
    try:
        get_integrator(method).supports(_system(system_name))
    except VPIntegratorError:
        return False
    return True


PAIRS = [(m, s) for m in METHODS for s in SYSTEMS if _supports(m, s)]


@functools.lru_cache(maxsize=None)
def _reference(system_name: str, t_end: float) -> np.ndarray:
    """DOP853 at tight tolerance from Y0[system_name], one state at a time: y(t_end) (n, dim)."""
    system = _system(system_name)
    ends = [
        solve_ivp(system, (0.0, t_end), state, method="DOP853", rtol=3e-14, atol=3e-14).y[:, -1]
        for state in Y0[system_name]
    ]
    return np.array(ends)


def test_registry():
    assert METHODS[: len(LEGACY)] == LEGACY
    assert len(METHODS) == len(set(METHODS))
    orders = {name: get_integrator(name).order for name in LEGACY}
    assert orders == {
        "euler": 1,
        "rk4": 4,
        "implicit_midpoint": 2,
        "gauss_legendre4": 4,
        "stormer_verlet": 2,
        "splitting": 2,
    }
    assert get_integrator("implicit_midpoint").implicit and not get_integrator("rk4").implicit
    for name in ("gauss_legendre2", "gauss_legendre6", "gauss_legendre8", "splitting_mclachlan2",
                 "splitting_blanes_moan4", "implicit_midpoint_tj4", "implicit_midpoint_y6", "splitting_tj4",
                 "splitting_suzuki4", "stormer_verlet_tj4", "stormer_verlet_y6"):
        assert name in METHODS
    # every method runs on at least one system
    assert {m for m, _ in PAIRS} == set(METHODS)


CONVERGENCE_T = 2.0
FLOOR = 5e-12  # errors below this are rounding / reference noise, left out of the fit


@pytest.mark.parametrize("compiled", [False, None], ids=["numpy", "compiled"])
@pytest.mark.parametrize("method, system_name", PAIRS)
def test_convergence_order(method, system_name, compiled):
    """Halve h against DOP853 from h0 = T / 2^(4 - p/2) (smaller first steps for higher orders p) until
    the error reaches the rounding floor or five points are in; fit the log-log slope of the last three
    points above the floor. It must be the claimed order, within [p - 0.3, p + 1) (a method of a higher
    order than it claims fails too: symmetric methods gain two orders at a time). Steps where Newton
    fails (too large for the method) are skipped. On the NumPy step (``compiled=False``: what every data file
    runs) and on the compiled path (``None``: 2-3 trajectories run the batch-1 loops); every path is also tied to an
    independent reference stepper in tests/test_parity.py."""
    system = _system(system_name)
    order = get_integrator(method).order
    y0, t_end = Y0[system_name], CONVERGENCE_T
    reference = _reference(system_name, t_end)
    n = 2 ** max(0, 4 - order // 2)
    steps, errors = [], []
    while len(errors) < 5 and n <= 512:
        try:
            end = integrate(system, y0, t_end / n, n, method, compiled=compiled).y[:, -1]
        except VPIntegratorError:
            n *= 2
            continue
        error = float(np.max(np.abs(end - reference)))
        if error < FLOOR:
            break
        steps.append(n)
        errors.append(error)
        n *= 2
    assert len(errors) >= 3, (steps, errors)
    h = t_end / np.array(steps[-3:])
    slope = np.polyfit(np.log(h), np.log(errors[-3:]), 1)[0]
    assert order - 0.3 <= slope < order + 1.0, (steps, errors, slope)


@pytest.mark.parametrize("compiled", [False, None])
@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
def test_implicit_methods_conserve_rigid_body_invariants(method, compiled):
    """On the NumPy step (25 trajectories) and on the compiled path (None: 4 trajectories, batch-1 loops)."""
    system = get_system("rigid_body")
    y0 = paper_sphere_points()[::50] if compiled is False else paper_sphere_points()[::300]
    traj = integrate(system, y0, 0.2, 1000, method, compiled=compiled)
    for name in ("energy", "casimir"):
        values = system.invariant(name, traj.y)  # (n_traj, n_steps)
        drift = np.max(np.abs(values / values[:, :1] - 1.0))
        assert drift <= 1e-12, (name, drift)


@pytest.mark.parametrize("compiled", [False, None])
def test_stormer_verlet_energy_bounded_on_oscillator(compiled):
    system = get_system("coupled_oscillator")
    traj = integrate(system, system.default_y0, system.default_dt, 10_000, "stormer_verlet", compiled=compiled)
    energy = system.invariant("energy", traj.y[0])
    error = np.abs(energy - energy[0]) / abs(energy[0])
    quarter = len(error) // 4
    first, last = error[:quarter].max(), error[-quarter:].max()
    assert last <= 1.1 * first  # bounded oscillation, no secular drift
    assert last < 0.05
    slope = np.polyfit(traj.t, error, 1)[0]
    assert abs(slope) * traj.t[-1] < 0.01 * first  # the fitted drift over the whole run is negligible


@pytest.mark.parametrize(
    "method, system_name",
    [
        ("splitting", "rigid_body"),
        ("splitting", "abc_flow"),
        # symplectic maps of a canonical Hamiltonian system preserve volume too
        ("stormer_verlet", "coupled_oscillator"),
        ("implicit_midpoint", "coupled_oscillator"),
        ("gauss_legendre4", "coupled_oscillator"),
    ],
)
def test_volume_preserving_step_maps(method, system_name):
    system = _system(system_name)
    y = sample_initial_conditions(system, "box", 500, 0, low=-3.0, high=3.0)
    det = np.linalg.det(get_integrator(method).step_jacobian(system, y, 0.2))
    assert np.max(np.abs(det - 1.0)) <= 1e-12


@pytest.mark.parametrize("method", ["stormer_verlet", "implicit_midpoint", "gauss_legendre4"])
def test_symplectic_on_canonical_hamiltonian(method):
    """J^T Omega J = Omega for the coupled oscillator, Omega = [[0, I], [-I, 0]]."""
    system = get_system("coupled_oscillator")
    y = sample_initial_conditions(system, "box", 100, 1, low=-2.0, high=2.0)
    jac = get_integrator(method).step_jacobian(system, y, 0.4)
    omega = np.block([[np.zeros((2, 2)), np.eye(2)], [-np.eye(2), np.zeros((2, 2))]])
    np.testing.assert_allclose(jac.transpose(0, 2, 1) @ omega @ jac, np.broadcast_to(omega, jac.shape), atol=1e-12)


def test_implicit_midpoint_is_not_volume_preserving_on_rigid_body():
    """det J = det(I + hA/2) / det(I - hA/2) = 1 + 2 det(hA/2) + O(h^5), A = f'(midpoint).

    For the rigid body det A = 2abc z1 z2 z3, so at h = 0.2 with (a, b, c) = (1/2, -1, 1/2)
    det J ~ 1 - 1e-3 z1 z2 z3: up to 3^(-3/2) * 1e-3 = 1.9e-4 away from 1 on the unit sphere.
    """
    system = get_system("rigid_body")
    h = 0.2
    z = sample_initial_conditions(system, "sphere", 2000, np.random.default_rng(0))
    integrator = get_integrator("implicit_midpoint")
    det = np.linalg.det(integrator.step_jacobian(system, z, h))
    deviation = np.abs(det - 1.0)
    assert deviation.max() <= 2e-4
    assert deviation.max() >= 1e-4  # clearly not 1: ten orders above the splitting's rounding
    a, b, c = system.coefficients
    mid = 0.5 * (z + integrator.step(system, z, h))
    leading = 1.0 + 2.0 * (h / 2) ** 3 * 2.0 * a * b * c * np.prod(mid, axis=1)
    assert np.max(np.abs(det - leading)) <= 1e-6


@pytest.mark.parametrize("method, system_name", PAIRS)
def test_step_jacobian_matches_finite_differences(method, system_name):
    system = _system(system_name)
    integrator = get_integrator(method)
    low = 0.3 if system_name == "volterra" else -2.0
    y = sample_initial_conditions(system, "box", 8, 1, low=low, high=2.0)
    h, eps = 0.2, 1e-5
    jac = integrator.step_jacobian(system, y, h)
    assert jac.shape == (8, system.dim, system.dim)
    cols = [
        (integrator.step(system, y + eps * e, h) - integrator.step(system, y - eps * e, h)) / (2 * eps)
        for e in np.eye(system.dim)
    ]
    np.testing.assert_allclose(jac, np.stack(cols, axis=-1), rtol=0, atol=1e-7)


@pytest.mark.parametrize("system_name", ["rigid_body", "coupled_oscillator", "volterra", "abc_flow"])
def test_implicit_midpoint_solves_its_equation_to_rounding(system_name):
    system = _system(system_name)
    y = Y0[system_name]
    h = 0.2
    y1 = get_integrator("implicit_midpoint").step(system, y, h)
    residual = y1 - y - h * system.vector_field(0.5 * (y + y1))
    assert np.max(np.abs(residual)) <= 1e-14


def test_gauss_legendre_matches_per_state_fsolve():
    """The batched Newton solve against SciPy's fsolve on the stage equations, one state at a time."""
    from scipy.optimize import fsolve

    system = get_system("abc_flow")
    y = Y0["abc_flow"]
    h, r = 0.3, np.sqrt(3.0) / 6.0
    a = np.array([[0.25, 0.25 - r], [0.25 + r, 0.25]])
    fast = get_integrator("gauss_legendre4").step(system, y, h)
    for state, expected in zip(y, fast):

        def stage_equations(z, state=state):
            z = z.reshape(2, 3)  # stage increments Z_i = Y_i - y
            return (z - h * a @ system.vector_field(state + z)).ravel()

        z = fsolve(stage_equations, np.zeros(6), xtol=1e-14).reshape(2, 3)
        slow = state + h * 0.5 * system.vector_field(state + z).sum(axis=0)
        np.testing.assert_allclose(expected, slow, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", METHODS)
def test_batch_equals_one_trajectory_at_a_time(method):
    system_name = next(s for s in SYSTEMS if _supports(method, s))
    y0 = Y0[system_name]
    batched = integrate(_system(system_name), y0, 0.1, 20, method, compiled=False).y
    single = np.concatenate([integrate(_system(system_name), state[None], 0.1, 20, method, compiled=False).y
                             for state in y0])
    # the same NumPy code on batches of other shapes (BLAS may pick another kernel): a few ulp per step (the
    # compiled batch and batch-1 paths against an independent reference: tests/test_parity.py)
    assert_ulp_close(batched, single, steps=20)


def test_gauss_legendre_agrees_with_reference_at_small_step():
    system = get_system("rigid_body")
    y0 = Y0["rigid_body"]
    traj = integrate(system, y0, 0.01, 100, "gauss_legendre4")
    np.testing.assert_allclose(traj.y[:, -1], _reference("rigid_body", 1.0), rtol=0, atol=1e-12)


def test_integrate_returns_trajectories_with_meta():
    system = get_system("rigid_body")
    y0 = paper_sphere_points()[:5]
    calls = []
    traj = integrate(system, y0, 0.2, 10, "implicit_midpoint", t0=1.0, callback=lambda k, y: calls.append(k))
    assert isinstance(traj, Trajectories)
    assert traj.y.shape == (5, 11, 3) and traj.y.dtype == np.float64
    np.testing.assert_array_equal(traj.y[:, 0], y0)
    np.testing.assert_allclose(traj.t, 1.0 + 0.2 * np.arange(11))
    assert calls == list(range(1, 11))
    meta = traj.meta
    assert meta["system"] == "rigid_body" and meta["method"] == "implicit_midpoint"
    assert meta["dt"] == 0.2 and meta["n_traj"] == 5 and meta["n_states"] == traj.n_states == 11 and meta["n_steps"] == traj.n_steps == 10
    assert meta["param_inertia"] == [2.0, 1.0, 2.0 / 3.0] and meta["param_b"] == pytest.approx(-1.0)
    assert meta["invariant_names"] == ["energy", "casimir"]
    for value in meta.values():
        assert isinstance(value, (str, int, float, bool, list))
    # integrate is the repeated step
    stepper = get_integrator("implicit_midpoint")
    y = y0
    for _ in range(10):
        y = stepper.step(system, y, 0.2)
    np.testing.assert_allclose(traj.y[:, -1], y, rtol=0, atol=1e-15)


def test_integrate_accepts_names_a_single_state_and_zero_steps():
    traj = integrate("coupled_oscillator", [1.0, 0.0, 2.0, 0.0], 0.4, 0, "stormer_verlet")
    assert traj.y.shape == (1, 1, 4)
    assert integrate("volterra", [[1.0, 2.0, 1.5]], 0.1, np.int64(3)).y.shape == (1, 4, 3)


def test_integrate_checks_arrays_and_builds_its_grid_as_the_general_helpers():
    """A float64 array y0 is taken without ``as_points``' general conversion, with its result and its errors; the
    time grid is ``stepping.time_grid``'s bit for bit (any t0, -0.0 included, past the counts kept too)."""
    from vpintegrator.data import integration
    from vpintegrator.stepping import time_grid
    from vpintegrator.systems.initial_conditions import as_points

    system = get_system("rigid_body")
    for y0 in (np.array([0.1, 0.2, 0.3]), np.ones((4, 3)), np.asfortranarray(np.ones((2, 3))),
               np.arange(18.0).reshape(3, 6)[:, ::2], np.ones((30, 3))):
        got = integration._check_initial_conditions(system, y0)
        np.testing.assert_array_equal(got, as_points(y0, 3, "y0"))
        assert got.flags.c_contiguous and not np.shares_memory(got, y0)
    for bad, match in ((np.array([[1.0, 0.0, 0.0], [0.0, np.inf, 1.0]]), "initial condition 1 is not finite"),
                       (np.full((30, 3), np.nan), "initial condition 0 is not finite"),
                       (np.ones((2, 4)), r"y0 must have shape \(n_traj, 3\)"), (np.ones((0, 3)), "y0 must have shape")):
        with pytest.raises(VPIntegratorError, match=match):
            integrate(system, bad, 0.2, 2)
    for t0, h, n in ((0.0, 0.2, 10), (-0.0, 0.1, 3), (1.5, 0.3, 7), (-2.0, 1e-3, 40_000), (0.25, 0.01, 200_000),
                     (0.0, 0.7, 0)):
        expected = time_grid(t0, h, n)
        got = integration._time_grid(t0, h, n)
        assert got.tobytes() == expected.tobytes() and got.flags.writeable
        got[:] = -1.0  # the caller's own array: the kept counts are untouched
    assert integration._time_grid(0.0, 1.0, 5).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_rollout_of_one_trajectory_fails_as_that_row_of_a_batch():
    """A batch-1 rollout runs the stepper's own loop (``step_block``), a batch ``step_rows``: a row that blows up
    has the same states and failing step either way."""
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.steps import IntegratorStep

    y0 = np.array([[1.0, 50.0, -50.0], [1.0, 1.0, 1.0]])
    two = rollout(IntegratorStep("volterra", "euler", 1.0), y0, 1.0, 50)
    for row in (0, 1):
        one = rollout(IntegratorStep("volterra", "euler", 1.0), y0[row : row + 1], 1.0, 50)
        np.testing.assert_array_equal(one.y[0], two.y[row])
        assert one.failed_step[0] == two.failed_step[row]
    assert two.failed_step[0] > 0


def test_newton_options_and_failure_name_the_step():
    system = get_system("rigid_body")
    y0 = paper_sphere_points()[:3]
    loose = get_integrator("implicit_midpoint", tol=1e-10, max_iter=20)
    assert loose.tol == 1e-10
    with pytest.raises(VPIntegratorError, match=r"step 1 .*did not converge in 1 iterations.*max_iter"):
        integrate(system, y0, 0.2, 5, get_integrator("implicit_midpoint", max_iter=1))
    with pytest.raises(VPIntegratorError, match=r"no option\(s\) tolerance; valid options: tol, max_iter"):
        get_integrator("implicit_midpoint", tolerance=1e-3)


def test_blow_up_names_the_step_and_trajectory():
    with pytest.raises(VPIntegratorError, match=r"trajectory 1 became non-finite at step \d+"):
        integrate("volterra", [[1.0, 1.0, 1.0], [1.0, 50.0, -50.0]], 1.0, 50, "euler")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "leapfrog"}, r"unknown method 'leapfrog'; valid methods: euler, rk4, implicit_midpoint"),
        ({"system": "pendulum"}, r"unknown system 'pendulum'"),
        ({"dt": 0.0}, "dt must be a finite number > 0; got 0.0"),
        ({"dt": -0.1}, "dt must be a finite number > 0"),
        ({"dt": float("nan")}, "dt must be a finite number > 0; got nan"),
        ({"dt": float("inf")}, "dt must be a finite number > 0"),
        ({"dt": "big"}, "dt must be"),
        ({"n_steps": -1}, "n_steps must be an int >= 0"),
        ({"n_steps": 2.5}, "n_steps must be an int >= 0"),
        ({"y0": [[1.0, 0.0, 0.0], [0.0, float("nan"), 1.0]]}, r"initial condition 1 is not finite"),
        ({"y0": [[1.0, 0.0]]}, r"y0 must have shape \(n_traj, 3\)"),
        ({"method": "stormer_verlet"}, "needs a separable Hamiltonian.*'rigid_body'"),
        (
            {"system": "coupled_oscillator", "y0": [[1.0, 0.0, 2.0, 0.0]], "method": "splitting"},
            "'coupled_oscillator' is not",
        ),
        ({"system": "volterra", "method": "splitting"}, "'volterra' is not"),
        ({"t0": float("nan")}, "t0 must be a finite number"),
    ],
)
def test_bad_inputs_raise_one_line_errors(kwargs, match):
    args = {"system": "rigid_body", "y0": [[1.0, 0.0, 0.0]], "dt": 0.2, "n_steps": 2, "method": "rk4"}
    args.update(kwargs)
    with pytest.raises(VPIntegratorError, match=match) as info:
        integrate(**args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("method", ["rk4", "implicit_midpoint", "splitting"])
def test_step_validates_its_inputs(method):
    integrator = get_integrator(method)
    system = get_system("rigid_body")
    with pytest.raises(VPIntegratorError, match=r"shape \(batch, 3\)"):
        integrator.step(system, np.ones(3), 0.1)
    with pytest.raises(VPIntegratorError, match="dt must be"):
        integrator.step_jacobian(system, np.ones((2, 3)), -1.0)


@dataclass(frozen=True)
class _Saddle(System):
    """dy/dt = (y2, y1): divergence free, eigenvalues +-1, so I - (h/2) f' is singular at h = 2."""

    name: ClassVar[str] = "saddle"
    dim: ClassVar[int] = 2

    def vector_field(self, y):
        return np.asarray(y, dtype=np.float64)[..., ::-1].copy()

    def jacobian(self, y):
        y = np.asarray(y, dtype=np.float64)
        return np.broadcast_to(np.array([[0.0, 1.0], [1.0, 0.0]]), y.shape[:-1] + (2, 2)).copy()


def test_user_defined_system_and_singular_newton_matrix():
    saddle = _Saddle()
    traj = integrate(saddle, [[1.0, 0.0]], 0.1, 10, "implicit_midpoint")
    exact = np.array([np.cosh(1.0), np.sinh(1.0)])
    np.testing.assert_allclose(traj.y[0, -1], exact, atol=1e-2)
    with pytest.raises(VPIntegratorError, match=r"step 1 .*singular for batch item 0; reduce dt"):
        integrate(saddle, [[1.0, 0.0]], 2.0, 1, "implicit_midpoint")


def test_gauss_legendre4_keeps_its_closed_form_tableau():
    """gauss_legendre4 is the s = 2 member of the family with today's closed-form numbers (same results)."""
    from vpintegrator.integrators import GaussLegendre, gauss_legendre_tableau

    r = np.sqrt(3.0) / 6.0
    a, b, c = gauss_legendre_tableau(2)
    np.testing.assert_array_equal(a, np.array([[0.25, 0.25 - r], [0.25 + r, 0.25]]))
    np.testing.assert_array_equal(b, [0.5, 0.5])
    np.testing.assert_array_equal(c, [0.5 - r, 0.5 + r])
    assert get_integrator("gauss_legendre4") == GaussLegendre(stages=2) == GaussLegendre()
    assert get_integrator("gauss_legendre", stages=2).name == "gauss_legendre4"


def test_integrate_refuses_what_cannot_fit_before_allocating():
    """Issue 36: integrate(..., n_steps=10**13) died of memory; now one line naming n_steps, before any work."""
    from vpintegrator.data import integrate
    from vpintegrator.errors import VPIntegratorError

    with pytest.raises(VPIntegratorError, match=r"integrate: 1 trajectories x 10000000000001 states x 3 needs about "
                                                r".* of memory but .* are available \(refused before starting\)"):
        integrate("rigid_body", np.array([0.6, 0.0, 0.8]), 0.1, 10**13)
