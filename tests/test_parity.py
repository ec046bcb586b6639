"""Every path that steps a classical method against a slow, obviously-correct reference (tests/reference_steppers.py).

Paths: the NumPy step (``Integrator.step``, what ``integrate(..., compiled=False)`` and every data file run),
the generic numba kernels (``compiled/kernels.py``, ``compiled/newton.py``), the lean loops (``compiled/lean.py``,
what a compiled stepper runs on a shipped system), the compiled batch loop (``CompiledStepper.run_batch``),
``integrate`` of one trajectory (the compiled path) and of more than ``SCALAR_MAX_BATCH`` trajectories. None is
compared with another: each against the reference, so a path cannot agree with itself.

Tolerances: one step from each reference state to 5e-13 of the state's scale (the implicit equations are solved to
an update of 1e-15 by the package and to the rounding floor by the reference), whole trajectories of ``N_STEPS``
steps to 2e-12.
A coefficient of a method broken by 1e-6 moves a step by ~1e-7 of the field: far outside both
(``scripts/mutation_check.py`` breaks one in each path and checks that these tests fail).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import reference_steppers as R
import vpintegrator as vp
import vpintegrator.compiled as compiled
from vpintegrator.data.integration import SCALAR_MAX_BATCH
from vpintegrator.integrators import get_integrator, list_integrators
from vpintegrator.systems import get_system

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
SHIPPED = ["rigid_body", "coupled_oscillator", "volterra", "abc_flow", "rigid_body_exp", "toda", "fpu_beta"]
#: the lattices at a size the reference's dense matrix exponential affords; they have one compiled path (their
#: array loops, compiled/lattice.py: the "lean" path), no generic kernel
LATTICES = {"toda": {"N": 6}, "fpu_beta": {"N": 6}}


def _system(name: str):
    return get_system(name, **LATTICES.get(name, {}))


def _initial(system) -> np.ndarray:
    if system.default_y0 is not None:
        return np.asarray(system.default_y0, dtype=np.float64)
    n = system.dim // 2  # a lattice: a smooth displacement of the sites, at rest
    return np.concatenate([0.3 * np.sin(2 * np.pi * np.arange(n) / n), np.zeros(n)])
N_STEPS = 30
N_TRAJ = 3
#: one step from the same state, relative to max(1, |y|): the package stops its iterations on an update below 1e-15
#: (the lean Gauss-Legendre 2 on the oscillator at h = 0.4, a slow fixed point, is 1.0e-13 from the reference)
STEP_TOL = 5e-13
#: N_STEPS steps from the same y0, relative to max(1, |y|) (measured worst 1.7e-13, the same case)
TRAJ_TOL = 2e-12


def _supported(system_name: str) -> list[str]:
    system = _system(system_name)
    out = []
    for name in list_integrators():
        try:
            get_integrator(name).supports(system)
        except vp.VPIntegratorError:
            continue
        out.append(name)
    return out


CASES = [(s, m) for s in SHIPPED for m in _supported(s)]
PATHS = ["numpy", "kernels", "lean", "batch", "integrate_batch1", "integrate_batch"]
#: the compositions of a base method (its sub-steps gammas_j h): one composition loop per compiled path, whatever the
#: system, around the base step that the base method's own ids hold on every system
COMPOSITIONS = ("_suzuki4", "_tj4", "_y6")


def _kept(system_name: str, method: str, path: str) -> bool:
    """Every id, except that a composed method's compiled paths run on one system per compiled implementation (the
    first shipped system that supports it, and the first lattice: its array loops), not on all seven; its NumPy
    path runs everywhere. Each kept id is held to the independent reference, so a changed coefficient or sub-step
    of a composition still fails (scripts/mutation_check.py: coefficients_yoshida6, kernels_composition_substep,
    lean_composition_substep)."""
    if path == "numpy" or not method.endswith(COMPOSITIONS):
        return True
    supported = [s for s, m in CASES if m == method]
    firsts = {next(iter(s for s in supported if s not in LATTICES), None),
              next(iter(s for s in supported if s in LATTICES), None)}
    return system_name in firsts


GRID = [(s, m, path) for s, m in CASES for path in PATHS if _kept(s, m, path)]


@functools.lru_cache(maxsize=None)
def _case(system_name: str, method: str) -> tuple[float, np.ndarray, np.ndarray]:
    """(h, y0 (N_TRAJ, dim), reference states (N_TRAJ, N_STEPS + 1, dim)): the default step, halved until the
    reference stays bounded (explicit Euler blows up at some systems' default step)."""
    system = _system(system_name)
    base = _initial(system)
    y0 = base + 0.1 * np.random.default_rng(7).standard_normal((N_TRAJ, base.size))
    h = float(system.default_dt)
    while True:
        with np.errstate(all="ignore"):
            ref = np.array([R.reference_trajectory(system, method, y, h, N_STEPS) for y in y0])
        if np.all(np.isfinite(ref)) and np.abs(ref).max() < 1e3 * np.abs(y0).max():
            return h, y0, ref
        h /= 2


def _scale(ys: np.ndarray) -> np.ndarray:
    return np.maximum(1.0, np.max(np.abs(ys), axis=-1, keepdims=True))


def _assert_close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    err = np.abs(got - want) / _scale(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(err <= tol), f"{what}: max relative deviation from the reference {np.nanmax(err):.3g} > {tol:g}"


def _stepper(system, method, h, path):
    from vpintegrator.compiled import compiled_stepper

    stepper = compiled_stepper(system, method, h)
    assert stepper is not None, f"{method} on {system.name} is not compiled"
    if path == "kernels":  # the generic loops of compiled/kernels.py, not the lean one
        stepper._fast = ("", None, ())
    return stepper


@pytest.mark.parametrize(("system_name", "method", "path"), GRID)
def test_every_path_matches_the_reference(system_name, method, path):
    if path != "numpy" and not compiled.available():
        pytest.skip("numba is not installed")
    if path == "kernels" and system_name in LATTICES:
        pytest.skip("a lattice has one compiled path, its array loops (the 'lean' path here)")
    if path == "kernels" and "stormer_verlet" in method:
        pytest.skip("Stormer-Verlet has one compiled path, its lean loop (the 'lean' path here)")
    system = _system(system_name)
    h, y0, ref = _case(system_name, method)
    if path in ("lean", "batch", "integrate_batch1") and system_name in LATTICES:
        from vpintegrator.compiled import compiled_stepper

        if compiled_stepper(system, method, h) is None:
            pytest.skip(f"the lattices' array loops do not run {method} (integrate runs its NumPy step)")
    integrator = get_integrator(method)
    if path == "numpy":
        # one step from every reference state (one batch), then whole trajectories
        states = ref[:, :-1].reshape(-1, system.dim)
        _assert_close(integrator.step(system, states, h), ref[:, 1:].reshape(-1, system.dim), STEP_TOL, "one step")
        tr = vp.integrate(system, y0, h, N_STEPS, method=method, compiled=False)
        assert tr.meta["runner"] == "numpy"
        _assert_close(tr.y, ref, TRAJ_TOL, "trajectories")
    elif path in ("kernels", "lean"):
        stepper = _stepper(system, method, h, path)
        out = np.empty((1, system.dim))
        for r in range(N_TRAJ):
            for k in range(N_STEPS):
                y = ref[r, k].copy()
                assert stepper.step_block(y, 1, out) == 1 and stepper.status == 0
                _assert_close(out[0], ref[r, k + 1], STEP_TOL, f"one step from state {k} of trajectory {r}")
            _assert_close(stepper.run(y0[r], N_STEPS), ref[r], TRAJ_TOL, f"trajectory {r}")
    elif path == "batch":
        _assert_close(_stepper(system, method, h, path).run_batch(y0, N_STEPS), ref, TRAJ_TOL, "run_batch")
    elif path == "integrate_batch1":
        for r in range(N_TRAJ):
            tr = vp.integrate(system, y0[r : r + 1], h, N_STEPS, method=method, compiled=True)
            assert tr.meta["runner"] == "numba"
            _assert_close(tr.y[0], ref[r], TRAJ_TOL, f"trajectory {r}")
    else:  # more trajectories than the batch-1 path takes
        reps = SCALAR_MAX_BATCH // N_TRAJ + 1
        tr = vp.integrate(system, np.tile(y0, (reps, 1)), h, N_STEPS, method=method)
        _assert_close(tr.y, np.tile(ref, (reps, 1, 1)), TRAJ_TOL, f"{reps * N_TRAJ} trajectories ({tr.meta['runner']})")


# --- the reference itself -------------------------------------------------------------------------------------
def test_every_registered_method_has_a_reference():
    assert {m for _, m in CASES} == set(list_integrators())
    for name in list_integrators():
        R.reference_step(name)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_collocation_tableau_equals_the_closed_forms(s):
    for got, want in zip(R.collocation_tableau(s), R.gauss_tableau(s)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("s", [1, 2, 3, 4, 5])
def test_gauss_tableau_order_conditions(s):
    """B(2s), C(s), D(s) of the s-stage Gauss method: sum b c^(k-1) = 1/k (k <= 2s), sum_j a_ij c_j^(k-1) = c_i^k / k."""
    A, b, c = R.gauss_tableau(s)
    for k in range(1, 2 * s + 1):
        assert abs(b @ c ** (k - 1) - 1.0 / k) < 1e-14
    for k in range(1, s + 1):
        np.testing.assert_allclose(A @ c ** (k - 1), c**k / k, rtol=0, atol=1e-14)


def test_lie_trotter_fractions_reproduce_the_two_part_splitting():
    """For two parts the alternating sweeps are A(a1) B(b1) A(a2) ..: merged, the shears give back a and b."""
    g = R.lie_trotter_fractions(R._BA, R._BB)
    assert len(g) == 12 and abs(sum(g) - 1.0) < 1e-14
    merged_a = [g[0]] + [g[k] + g[k + 1] for k in range(1, 11, 2)] + [g[11]]
    merged_b = [g[k] + g[k + 1] for k in range(0, 12, 2)]
    np.testing.assert_allclose(merged_a, R._BA, atol=1e-15)
    np.testing.assert_allclose(merged_b, R._BB, atol=1e-15)


@pytest.mark.parametrize("method", ["rk4", "gauss_legendre4", "gauss_legendre8", "implicit_midpoint_y6",
                                    "splitting_blanes_moan4", "rotation_splitting_y6"])
def test_the_reference_converges_to_the_exact_flow_at_its_order(method):
    """The reference is right: against DOP853 at 3e-14 its error falls as h^p."""
    from scipy.integrate import solve_ivp

    system = get_system("rigid_body")
    y0 = np.array([0.6, 0.3, 0.7])
    exact = solve_ivp(system, (0.0, 1.6), y0, method="DOP853", rtol=3e-14, atol=3e-14).y[:, -1]
    order = get_integrator(method).order
    errors = []
    for n in (4, 8):
        errors.append(np.abs(R.reference_trajectory(system, method, y0, 1.6 / n, n)[-1] - exact).max())
    slope = np.log2(errors[0] / errors[1])
    assert order - 0.4 <= slope <= order + 1.0, (errors, slope)
