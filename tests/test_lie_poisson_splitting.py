"""The rigid body's Lie-Poisson rotation splittings and their compositions (issue 32, item 2).

Order by halving h, Casimir to rounding over long runs, Poisson map (J B(z) J^T = B(phi(z))), symmetry,
det J = 1, the fast step against a slow expm reference, compositions of a user's own symmetric method, and the
compiled kernel against NumPy. (The registry-wide tests in test_integrators.py / test_method_registry.py
also run every new method: order on the default body, step Jacobian by finite differences, claimed flags.)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import vpintegrator.compiled as compiled
from vpintegrator.data import integrate
from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import (
    Composition,
    Integrator,
    get_integrator,
    list_integrators,
    register_compositions,
    register_integrator,
    registry,
)
from vpintegrator.integrators.composition import SUZUKI4
from vpintegrator.integrators.lie_poisson import poisson_tensor, rotation_rates
from vpintegrator.systems import RigidBody, get_system, sample_initial_conditions

BASES = ("rotation_splitting", "rotation_splitting_centred")
METHODS = [b + s for b in BASES for s in ("", "_tj4", "_suzuki4", "_y6")]
ORDERS = {"": 2, "_tj4": 4, "_suzuki4": 4, "_y6": 6}
BODIES = {"default": RigidBody(), "other": RigidBody(inertia=(1.0, 2.0, 3.5))}
needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _sphere(n: int, seed: int) -> np.ndarray:
    return sample_initial_conditions(get_system("rigid_body"), "sphere", n, np.random.default_rng(seed))


def _order(name: str) -> int:
    base = next(b for b in sorted(BASES, key=len, reverse=True) if name.startswith(b))
    return ORDERS[name[len(base):]]


# --- registry ----------------------------------------------------------------------------------------------
def test_registered_with_order_and_structure():
    for name in METHODS:
        assert name in list_integrators()
        info = get_integrator(name).info
        assert (info.order, info.implicit, info.symmetric, info.preserves_volume, info.symplectic) == (
            _order(name), False, True, True, True), name
        assert not info.preserves_quadratic_invariants  # the energy is not conserved exactly
        assert info.needs == ("inertia",)
    for name in ("rotation_splitting_tj4", "rotation_splitting_centred_y6"):
        assert isinstance(get_integrator(name), Composition)


@pytest.mark.parametrize("system_name", ["coupled_oscillator", "volterra", "abc_flow"])
def test_other_systems_refused_in_one_line(system_name):
    for name in ("rotation_splitting", "rotation_splitting_centred_y6"):
        with pytest.raises(VPIntegratorError, match="needs a free rigid body") as err:
            get_integrator(name).step(get_system(system_name), np.ones((1, get_system(system_name).dim)), 0.1)
        assert "\n" not in str(err.value)


# --- accuracy ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("name", METHODS)
def test_convergence_order_by_halving_h(name, body):
    """Error at t = 2 against DOP853 (3e-14) for h = T/n, n doubling; the log-log slope of the last three
    points above the rounding floor is the claimed order (within [p - 0.3, p + 1))."""
    system, y0, t_end = BODIES[body], _sphere(3, 7), 2.0
    ref = np.array([solve_ivp(system, (0.0, t_end), z, method="DOP853", rtol=3e-14, atol=3e-14).y[:, -1] for z in y0])
    order = _order(name)
    n, steps, errors = 2 ** max(0, 4 - order // 2), [], []
    while len(errors) < 5 and n <= 512:
        error = float(np.max(np.abs(integrate(system, y0, t_end / n, n, name).y[:, -1] - ref)))
        if error < 5e-12:
            break
        steps.append(n)
        errors.append(error)
        n *= 2
    assert len(errors) >= 3, (steps, errors)
    slope = np.polyfit(np.log(t_end / np.array(steps[-3:])), np.log(errors[-3:]), 1)[0]
    assert order - 0.3 <= slope < order + 1.0, (steps, errors, slope)


def test_centred_rates_depend_on_the_equations_only():
    """1/I_k + s for any s gives the same (a, b, c): the centred splitting is the same map, the plain one
    is not (it splits H + s C / 2 differently)."""
    one = RigidBody(inertia=(2.0, 1.0, 2.0 / 3.0))
    other = RigidBody(inertia=tuple(1.0 / (1.0 / v + 0.7) for v in one.inertia))
    np.testing.assert_allclose(one.coefficients, other.coefficients, rtol=0, atol=1e-15)
    np.testing.assert_allclose(rotation_rates(one, True), rotation_rates(other, True), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(rotation_rates(one, True), [-0.5, 0.0, 0.5])  # R_2 is the identity
    y = _sphere(10, 1)
    centred, plain = get_integrator("rotation_splitting_centred"), get_integrator("rotation_splitting")
    np.testing.assert_allclose(centred.step(one, y, 0.2), centred.step(other, y, 0.2), rtol=0, atol=1e-14)
    assert np.max(np.abs(plain.step(one, y, 0.2) - plain.step(other, y, 0.2))) > 1e-4


def _reference_step(system: RigidBody, y: np.ndarray, h: float, gammas=(1.0,), centred: bool = False) -> np.ndarray:
    """Slow and obvious: each sub-flow of H_k = w_k z_k^2 / 2 is dz/dt = B(z) grad H_k = -[grad H_k]_x z with
    grad H_k = w_k z_k e_k constant along it, so z(t) = expm(-t [grad H_k]_x) z; R_1 R_2 R_3 R_2 R_1 per gamma."""
    w = 1.0 / np.array(system.inertia)
    if centred:
        w = w - w.mean()
    out = []
    for z in y:
        z = z.copy()
        for g in gammas:
            for axis, frac in ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5)):
                grad = np.zeros(3)
                grad[axis] = w[axis] * z[axis]
                z = expm(-(g * frac * h) * poisson_tensor(grad)) @ z
        out.append(z)
    return np.array(out)


@pytest.mark.parametrize("name", METHODS)
def test_fast_step_matches_expm_reference(name):
    method = get_integrator(name)
    gammas = getattr(method, "gammas", (1.0,))
    centred = name.startswith("rotation_splitting_centred")
    for system in BODIES.values():
        y = 1.5 * _sphere(12, 2)
        np.testing.assert_allclose(method.step(system, y, 0.3), _reference_step(system, y, 0.3, gammas, centred),
                                   rtol=0, atol=2e-14)


# --- structure ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rotation_splitting", "rotation_splitting_centred", "rotation_splitting_y6",
                                  "rotation_splitting_centred_suzuki4"])
def test_casimir_conserved_to_rounding_over_long_runs(name):
    system = BODIES["other"]
    y0 = _sphere(8, 3) * np.array([[1.0], [2.0], [0.5], [3.0], [1.0], [1.0], [0.1], [1.0]])
    tr = integrate(system, y0, 0.2, 20_000, name)  # t = 4000
    casimir = system.invariant("casimir", tr.y)
    assert np.max(np.abs(casimir / casimir[:, :1] - 1.0)) <= 5e-13
    energy = system.invariant("energy", tr.y)
    drift = np.abs(energy / energy[:, :1] - 1.0)
    assert 1e-10 < drift.max() < 0.2  # not conserved exactly, but bounded (no secular growth):
    assert drift[:, 10_000:].max() < 2.0 * drift[:, :10_000].max() + 1e-12


@pytest.mark.parametrize("name", METHODS)
def test_poisson_map_det_one_and_jacobian(name):
    """J B(z) J^T = B(phi(z)) and det J = 1 with the analytic step Jacobian, which matches finite differences."""
    method = get_integrator(name)
    for system in BODIES.values():
        y = 2.0 * _sphere(16, 4) * np.random.default_rng(5).uniform(0.2, 1.0, size=(16, 1))
        jac = method.step_jacobian(system, y, 0.25)
        y1 = method.step(system, y, 0.25)
        np.testing.assert_allclose(jac @ poisson_tensor(y) @ jac.transpose(0, 2, 1), poisson_tensor(y1), rtol=0,
                                   atol=1e-13)
        np.testing.assert_allclose(np.linalg.det(jac), 1.0, rtol=0, atol=1e-13)
        eps = 1e-6
        cols = [(method.step(system, y + eps * e, 0.25) - method.step(system, y - eps * e, 0.25)) / (2 * eps)
                for e in np.eye(3)]
        np.testing.assert_allclose(jac, np.stack(cols, axis=-1), rtol=0, atol=1e-8)


def test_implicit_midpoint_is_not_a_poisson_map_here():
    """The Poisson check can fail: implicit midpoint keeps both invariants but is not a Poisson map."""
    system, y = BODIES["default"], _sphere(16, 4)
    method = get_integrator("implicit_midpoint")
    jac, y1 = method.step_jacobian(system, y, 0.25), method.step(system, y, 0.25)
    assert np.max(np.abs(jac @ poisson_tensor(y) @ jac.transpose(0, 2, 1) - poisson_tensor(y1))) > 1e-6


@pytest.mark.parametrize("name", METHODS)
def test_symmetric(name):
    method = get_integrator(name)
    for system in BODIES.values():
        y = 2.0 * _sphere(10, 6)
        back = method.signed_step(system, method.signed_step(system, y, 0.3), -0.3)
        np.testing.assert_allclose(back, y, rtol=0, atol=1e-14)


# --- compositions of a user's own symmetric method ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class UserStrang(Integrator):
    """A user's symmetric order-2 method: the Strang splitting of the rigid body into shears, written out."""

    name: ClassVar[str] = "user_strang"
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    description: ClassVar[str] = "a user's Strang shear splitting"
    family: ClassVar[str] = "user"

    def _step(self, system, y, h):
        y = y.copy()
        for i, c in ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5)):
            y[:, i] += c * h * system.vector_field(y)[:, i]
        return y


@dataclasses.dataclass(frozen=True)
class UserEuler(Integrator):
    name: ClassVar[str] = "user_euler"
    order: ClassVar[int] = 1
    description: ClassVar[str] = "a user's explicit Euler"
    family: ClassVar[str] = "user"

    def _step(self, system, y, h):
        return y + h * system.vector_field(y)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test are dropped after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_register_compositions_of_a_user_symmetric_method(scratch_registry):
    made = register_compositions(UserStrang())  # registers the base too
    assert [c.name for c in made] == ["user_strang_tj4", "user_strang_suzuki4", "user_strang_y6"]
    assert "user_strang" in list_integrators() and "user_strang_y6" in list_integrators()
    system, y0, t_end = BODIES["other"], _sphere(3, 8), 2.0
    ref = np.array([solve_ivp(system, (0.0, t_end), z, method="DOP853", rtol=3e-14, atol=3e-14).y[:, -1] for z in y0])
    for name, order in (("user_strang_tj4", 4), ("user_strang_suzuki4", 4), ("user_strang_y6", 6)):
        info = get_integrator(name).info
        assert (info.order, info.symmetric) == (order, True)
        steps = np.array([8, 16, 32])
        errors = [float(np.max(np.abs(integrate(system, y0, t_end / n, int(n), name).y[:, -1] - ref))) for n in steps]
        slope = np.polyfit(np.log(t_end / steps), np.log(errors), 1)[0]
        assert order - 0.3 <= slope < order + 1.0, (name, errors, slope)
    # by name, one scheme; a second registration needs replace=True
    assert [c.name for c in register_compositions("user_strang", ["y6"], replace=True)] == ["user_strang_y6"]
    with pytest.raises(VPIntegratorError, match="already registered; pass replace=True"):
        register_compositions("user_strang", ["tj4"])


def test_register_compositions_refuses_non_symmetric_bases_in_one_line(scratch_registry):
    register_integrator(UserEuler())
    for base, what in (("user_euler", "not symmetric of order 1"), ("rk4", "not symmetric of order 4"),
                       ("gauss_legendre4", "symmetric of order 4")):
        pattern = f"base '{base}' must be a symmetric method of order 2.*{what}"
        with pytest.raises(VPIntegratorError, match=pattern) as err:
            register_compositions(base)
        assert "\n" not in str(err.value)
    with pytest.raises(VPIntegratorError, match="unknown scheme"):
        register_compositions("rotation_splitting", ["y8"])
    with pytest.raises(VPIntegratorError, match="unknown method 'nope'"):
        register_compositions("nope")
    assert not any(n.startswith("user_euler_") for n in list_integrators())


# --- compiled kernel ---------------------------------------------------------------------------------------
@needs_numba
@pytest.mark.parametrize("name", METHODS)
def test_compiled_and_numpy_match_the_reference(name):
    """The NumPy step, the compiled loop (one trajectory, a batch, blocks) against the slow reference of
    tests/reference_steppers.py (each rotation by the matrix exponential of its generator), on both bodies."""
    from reference_steppers import reference_trajectory

    from vpintegrator.compiled import compiled_stepper

    for system in BODIES.values():
        y0 = 1.3 * _sphere(2, 9)
        ref = np.array([reference_trajectory(system, name, y, 0.2, 60) for y in y0])
        stepper = compiled_stepper(system, name, 0.2)
        assert stepper is not None
        np.testing.assert_allclose(integrate(system, y0, 0.2, 60, name, compiled=False).y, ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(stepper.run(y0[0], 60), ref[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(stepper.run_batch(y0, 60), ref, rtol=0, atol=1e-12)
        # blocks continue where the last one stopped
        y, out = y0[1].copy(), np.empty((60, 3))
        assert stepper.step_block(y, 25, out) == 25 and stepper.step_block(y, 35, out[25:]) == 35
        np.testing.assert_allclose(out, ref[1, 1:], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(y, out[-1])


@needs_numba
def test_compiled_user_composition_and_fallbacks():
    from vpintegrator.compiled import compiled_stepper

    mine = Composition(base="rotation_splitting_centred", gammas=SUZUKI4, scheme="mine", scheme_order=4)
    system, y0 = BODIES["other"], _sphere(1, 10)[0]
    stepper = compiled_stepper(system, mine, 0.1)
    assert stepper is not None
    np.testing.assert_allclose(stepper.run(y0, 300), integrate(system, y0, 0.1, 300, mine).y[0], rtol=0, atol=1e-12)

    @dataclasses.dataclass(frozen=True)
    class OwnBody(RigidBody):  # a subclass may change the equations: not compiled
        pass

    assert compiled_stepper(OwnBody(), "rotation_splitting", 0.1) is None


@needs_numba
def test_compiled_blow_up_same_error():
    from vpintegrator.compiled import compiled_stepper

    system, y0 = BODIES["default"], np.array([1.7e308, 1.7e308, 1.7e308])  # a rotation overflows
    with pytest.raises(VPIntegratorError) as want:
        integrate(system, y0, 0.2, 5, "rotation_splitting")
    stepper = compiled_stepper(system, "rotation_splitting", 0.2)
    with pytest.raises(VPIntegratorError) as got:
        stepper.run(y0, 5)
    assert str(got.value) == str(want.value) and "non-finite" in str(got.value)
    with pytest.raises(VPIntegratorError) as got:
        stepper.run_batch(np.array([[0.1, 0.2, 0.3], y0]), 5)
    assert "trajectory 1 became non-finite at step 1" in str(got.value)


# --- work-precision defaults -------------------------------------------------------------------------------
def test_work_precision_defaults_include_the_rotation_splittings_where_supported():
    from vpintegrator.rollout.precision import DEFAULT_METHODS, work_precision

    assert {"rotation_splitting", "rotation_splitting_y6", "rotation_splitting_centred_y6"} <= set(DEFAULT_METHODS)
    ladder = (1.0, 0.5, 0.25, 0.125)
    rows = work_precision("rigid_body", _sphere(2, 11), 0.2, 0.8, ladder=ladder, dop853_rtols=None, repeats=1)
    methods = {r.method for r in rows}
    assert {"rotation_splitting", "rotation_splitting_y6", "rotation_splitting_centred_y6", "rk4"} <= methods
    runner = "numba" if compiled.available() else "numpy"
    for r in rows:
        if r.method.startswith("rotation_splitting"):
            assert r.drift_max < 1e-2 and np.isfinite(r.error_median) and r.runner == runner
    # the coupled oscillator is no rigid body: the defaults skip them instead of failing
    y0 = np.array([[1.0, 0.0, 2.0, 0.0]])
    rows = work_precision("coupled_oscillator", y0, 0.4, 1.6, ladder=ladder, dop853_rtols=None, repeats=1)
    assert not any(r.method.startswith("rotation") for r in rows) and "stormer_verlet_y6" in {r.method for r in rows}
