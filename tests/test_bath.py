"""The hidden-bath arena: the particle-bath systems (``kac_zwanzig``, ``particle_chain``), their compiled O(N)
steppers against SciPy's DOP853 at 1e-12 written here, the GLE row against the full-order model (order 2 in the
step), the coarse bath and the truncated chain against the full ones, one-line refusals, and ``vp-gen`` /
``vp-rollout`` end to end."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.integrate import solve_ivp

from vpintegrator.compiled.bath import bath_stepper
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout.gle import GLEStep, gle_solve, particle_channels
from vpintegrator.systems import get_system, sample_initial_conditions

PARTICLES = ([0.8, -1.2, 0.1], [0.3, 0.1, -0.4])  # (Q, P) of three conditions: both wells and the barrier


def _dop853(system, y0: np.ndarray, t_end: float, t_eval=None) -> np.ndarray:
    """The exact flow (SciPy DOP853, rtol = atol = 1e-12) of each row of y0: (rows, dim) at t_end, or
    (rows, len(t_eval), dim)."""
    out = []
    for y in np.atleast_2d(y0):
        sol = solve_ivp(system, (0.0, t_end), y, method="DOP853", rtol=1e-12, atol=1e-12,
                        t_eval=None if t_eval is None else t_eval)
        assert sol.success
        out.append(sol.y[:, -1] if t_eval is None else sol.y.T)
    return np.array(out)


def _orders(errors: list[float]) -> np.ndarray:
    return np.log2(np.array(errors[:-1]) / np.array(errors[1:]))


# --- the systems ---------------------------------------------------------------------------------------------


def test_the_bath_at_rest_makes_the_documented_kernel_and_state_names():
    kz = get_system("kac_zwanzig", N=100)
    assert kz.dim == 202 and kz.state_names[0] == "q0" and kz.state_names[101] == "p0"
    t = np.array([0.0, 2.0, 5.0, 10.0])
    gauss = 0.05 * np.sqrt(2 * np.pi) * 0.3 * np.exp(-0.045 * t**2) * np.cos(1.2 * t)  # K of the continuous density
    np.testing.assert_allclose(kz.kernel(t), gauss, atol=2e-5)
    y = kz.bath_at_rest(*PARTICLES)
    assert y.shape == (3, 202) and np.all(y[:, 102:] == 0.0)
    assert np.allclose(kz.potential_gradient(y[:, :101])[:, 1:], 0.0)  # the bath in equilibrium around the particle
    chain = get_system("particle_chain", N=7)
    yc = chain.bath_at_rest(*PARTICLES)
    assert np.all(yc[:, 1:8] == 0.0) and np.all(yc[:, 9:] == 0.0) and np.all(yc[:, 0] == PARTICLES[0])


def test_the_particle_sampler_lifts_a_box_or_given_states():
    kz = get_system("kac_zwanzig", N=5)
    y = sample_initial_conditions(kz, "particle", 4, 0)
    assert y.shape == (4, 12) and np.all(np.abs(y[:, 0]) <= 1.5) and np.all(np.abs(y[:, 6]) <= 0.5)
    np.testing.assert_array_equal(y, kz.bath_at_rest(y[:, 0], y[:, 6]))
    given = sample_initial_conditions(kz, "particle", Q=[1.0, -1.0], P=[0.0, 0.2])
    np.testing.assert_array_equal(given[:, [0, 6]], [[1.0, 0.0], [-1.0, 0.2]])


@pytest.mark.parametrize("name, params, key", [
    ("kac_zwanzig", {"N": 0}, "N"),
    ("kac_zwanzig", {"N": 10_001}, "N"),
    ("kac_zwanzig", {"N": 2.5}, "N"),
    ("kac_zwanzig", {"gamma": -0.1}, "gamma"),
    ("kac_zwanzig", {"width": 0.0}, None),
    ("kac_zwanzig", {"omega_max": float("nan")}, None),
    ("particle_chain", {"N": 20_000}, "N"),
    ("particle_chain", {"beta": -1.0}, "beta"),
    ("particle_chain", {"coupling": 0.0}, None),
])
def test_bad_parameters_are_one_line(name, params, key):
    with pytest.raises(VPIntegratorError) as err:
        get_system(name, **params)
    text = str(err.value)
    assert "\n" not in text and next(iter(params)) in text, text
    if key is not None:
        assert err.value.key == key
        assert "10000" in text or key != "N"


@pytest.mark.parametrize("call, words", [
    (lambda: sample_initial_conditions("rigid_body", "particle", 2, 0), "no bath"),
    (lambda: sample_initial_conditions(get_system("kac_zwanzig", N=3), "particle", Q=[1.0]), "both Q and P"),
    (lambda: sample_initial_conditions(get_system("kac_zwanzig", N=3), "particle", 2, 0, low=[1, 1], high=[0, 0]),
     "low <= high"),
    (lambda: bath_stepper(get_system("particle_chain", N=3), "bath_splitting", 0.1), "steps kac_zwanzig"),
    (lambda: bath_stepper(get_system("kac_zwanzig", N=3), "rk4", 0.1), "unknown method"),
    (lambda: GLEStep(get_system("particle_chain", N=3), 0.1), "linear memory kernel"),
    (lambda: GLEStep(get_system("kac_zwanzig", N=3), -0.1), "dt"),
])
def test_bad_use_is_one_line(call, words):
    with pytest.raises(VPIntegratorError) as err:
        call()
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


# --- the compiled steppers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, method, order", [
    ("kac_zwanzig", "stormer_verlet", 2), ("kac_zwanzig", "bath_splitting", 2), ("particle_chain", "stormer_verlet", 2),
    ("kac_zwanzig", "bath_splitting_suzuki4", 4), ("kac_zwanzig", "stormer_verlet_suzuki4", 4),
    ("particle_chain", "stormer_verlet_suzuki4", 4), ("kac_zwanzig", "bath_splitting_y6", 6),
])
def test_compiled_steppers_converge_at_their_order_to_dop853(name, method, order):
    system = get_system(name, N=12)
    y0 = system.bath_at_rest(*PARTICLES)
    T = 10.0
    ref = _dop853(system, y0, T)
    errors = []
    steps = (0.1, 0.05, 0.025) if order < 6 else (0.4, 0.2, 0.1)  # order 6 meets DOP853's own error sooner
    for h in steps:
        ys = bath_stepper(system, method, h).run(y0, int(round(T / h)), full=True)
        errors.append(float(np.abs(ys[:, -1] - ref).max()))
    assert np.all(np.abs(_orders(errors) - order) < 0.15 * order), errors
    assert errors[-1] < 2e-3  # the whole state, the bath's fastest oscillator (omega = 3.8) included


@pytest.mark.parametrize("name, method", [("kac_zwanzig", "stormer_verlet"), ("kac_zwanzig", "bath_splitting"),
                                          ("particle_chain", "stormer_verlet")])
def test_energy_error_is_bounded_and_second_order(name, method):
    system = get_system(name, N=30)
    y0 = system.bath_at_rest(*PARTICLES)
    spreads = []
    for h in (0.1, 0.05):
        ys = bath_stepper(system, method, h).run(y0, int(round(200.0 / h)), full=True)
        e = system.hamiltonian(ys)
        spreads.append(float(np.abs(e - e[:, :1]).max()))
        half = ys.shape[1] // 2  # no drift: the second half's band is the first half's
        assert np.abs(e[:, half:] - e[:, :1]).max() < 1.5 * np.abs(e[:, :half] - e[:, :1]).max()
    assert 3.0 < spreads[0] / spreads[1] < 5.0, spreads


@pytest.mark.parametrize("name", ["kac_zwanzig", "particle_chain"])
@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_suzuki4", "stormer_verlet_y6"])
def test_compiled_verlet_is_the_package_stormer_verlet(name, method):
    from vpintegrator.data import integrate

    system = get_system(name, N=9)
    y0 = system.bath_at_rest(*PARTICLES)
    numpy_path = integrate(system, y0, 0.1, 50, method, compiled=False).y
    ours = bath_stepper(system, method, 0.1).run(y0, 50, full=True)
    np.testing.assert_allclose(ours, numpy_path, rtol=0, atol=1e-12)


def _verlet_by_hand(system, y0, hs, n_steps: int) -> np.ndarray:
    """Velocity Verlet written out in Python floats, one component at a time (kick ``p += h/2 F(q)``, drift
    ``q += h p``, kick), each step the sub-steps ``hs``; the bath's sum in index order. F = -dV/dq from the
    Hamiltonians of the systems' docstrings. The states of y0 (dim,) after each step: (n_steps, dim)."""
    m = system.dim // 2
    chain = system.name == "particle_chain"
    if not chain:
        w2, cs, ss = ((system.frequencies**2).tolist(), system.couplings.tolist(), system.shifts.tolist())

    def forces(q):
        Q = q[0]
        if chain:  # tensions phi'(r) of the spring r = q1 - Q and of the bonds r = q_{b+1} - q_b, q_{N+1} = 0
            t = [system.coupling * (q[1] - Q)]
            for b in range(1, m):
                r = (q[b + 1] if b + 1 < m else 0.0) - q[b]
                t.append(r + system.beta * r * r * r)
            return [-(Q * Q * Q - Q) + t[0]] + [t[b] - t[b - 1] for b in range(1, m)]
        x = [q[1 + j] - ss[j] * Q for j in range(m - 1)]  # the oscillators' stretch
        acc = 0.0
        for j in range(m - 1):
            acc += cs[j] * x[j]
        return [-(Q * Q * Q - Q) + acc] + [-w2[j] * x[j] for j in range(m - 1)]

    q, p = list(y0[:m]), list(y0[m:])
    F = forces(q)
    out = []
    for _ in range(n_steps):
        for h in hs:
            p = [p[i] + 0.5 * h * F[i] for i in range(m)]
            q = [q[i] + h * p[i] for i in range(m)]
            F = forces(q)
            p = [p[i] + 0.5 * h * F[i] for i in range(m)]
        out.append(q + p)
    return np.array(out)


@pytest.mark.parametrize("name, n, exact", [("particle_chain", 5, True), ("particle_chain", 12, True),
                                            ("kac_zwanzig", 3, True), ("kac_zwanzig", 40, False)])
@pytest.mark.parametrize("method", ["stormer_verlet", "stormer_verlet_suzuki4"])
def test_compiled_verlet_is_verlet_by_hand_bit_for_bit(name, n, exact, method):
    """Every state, full and particle-only output: bit for bit, but for the harmonic bath of 40 oscillators, whose
    sum the compiled loop reassociates (vectorised) — there to rounding."""
    from vpintegrator.integrators.coefficients import SUZUKI4

    system = get_system(name, N=n)
    y0 = system.bath_at_rest(*PARTICLES)
    hs = [0.1] if method == "stormer_verlet" else [0.1 * g for g in SUZUKI4]
    stepper = bath_stepper(system, method, 0.1)
    full, particle = stepper.run(y0, 40, full=True), stepper.run(y0, 40)
    for r in range(y0.shape[0]):
        want = np.concatenate([y0[r:r + 1], _verlet_by_hand(system, y0[r], hs, 40)])
        if exact:
            np.testing.assert_array_equal(full[r], want)
        else:
            np.testing.assert_allclose(full[r], want, rtol=0, atol=1e-14)
        np.testing.assert_array_equal(particle[r], full[r][:, [0, n + 1]])


def test_the_splitting_has_no_step_limit_from_the_bath():
    """h = 0.6 is past Verlet's stability limit 2 / omega_max = 0.5: Verlet blows up, the splitting's energy error
    stays bounded (no drift over 1200 time units; its size is the particle's own error at h omega = 0.85)."""
    system = get_system("kac_zwanzig", N=50)
    y0 = system.bath_at_rest(*PARTICLES)
    with pytest.raises(VPIntegratorError, match="non-finite"):
        bath_stepper(system, "stormer_verlet", 0.6).run(y0, 2000)
    ys = bath_stepper(system, "bath_splitting", 0.6).run(y0, 2000, full=True)
    e = system.hamiltonian(ys)
    assert np.isfinite(ys).all() and np.abs(e - e[:, :1]).max() < 0.25 * np.abs(e[:, 0]).max()
    assert np.abs(e[:, 1000:] - e[:, :1]).max() < 1.5 * np.abs(e[:, :1000] - e[:, :1]).max()


# --- the GLE row and the coarse bath ---------------------------------------------------------------------------


def test_gle_converges_at_order_2_to_the_full_order_particle():
    """The GLE with the bath's own kernel is the particle's exact reduced dynamics: the only error is the
    quadrature's, second order in the step (N = 100, exact flow by DOP853)."""
    system = get_system("kac_zwanzig", N=100)
    T = 20.0
    ref = _dop853(system, system.bath_at_rest(*PARTICLES), T)[:, [0, 101]]
    errors = [float(np.abs(gle_solve(system, *PARTICLES, h, int(round(T / h)))[:, -1] - ref).max())
              for h in (0.2, 0.1, 0.05, 0.025)]
    assert np.all(np.abs(_orders(errors) - 2.0) < 0.1), errors
    assert errors[-1] < 5e-4


@pytest.mark.slow
def test_gle_against_a_large_bath_to_t_100():
    """N = 2000, reference by the exact-bath splitting at h = 0.0025 (its error ~1e-7 here): the GLE's error shrinks
    fourfold per halving of the step down to h = 0.025."""
    system = get_system("kac_zwanzig", N=2000)
    T = 100.0
    ref = bath_stepper(system, "bath_splitting", 0.0025).run(system.bath_at_rest(*PARTICLES), 40_000)[:, -1]
    errors = [float(np.abs(gle_solve(system, *PARTICLES, h, int(round(T / h)))[:, -1] - ref).max())
              for h in (0.1, 0.05, 0.025)]
    assert np.all(np.abs(_orders(errors) - 2.0) < 0.25), errors


def test_gle_step_map_chunks_resets_and_memory_cut():
    system = get_system("kac_zwanzig", N=100)
    window = np.stack(PARTICLES, axis=-1)[:, None, :]
    one = GLEStep(system, 0.1)
    one.start(window, None)
    whole = one.generate(300)
    parts = GLEStep(system, 0.1)
    parts.start(window, None)
    chunked = np.concatenate([parts.generate(7), parts.generate(93), parts.generate(200)], axis=1)
    np.testing.assert_array_equal(chunked, whole)
    parts.reset(np.array([1]))  # row 1 back to its first state, the others go on
    after = parts.generate(5)
    np.testing.assert_array_equal(after[1], whole[1, :5])
    cut = gle_solve(system, *PARTICLES, 0.1, 300, memory=21.5)
    assert 0 < np.abs(cut[:, 1:] - whole).max() < 1e-4  # K_N beyond its envelope is small, not zero


def test_the_exponential_fit_runs_the_same_quadrature_in_o_terms():
    """The gle row's kernel as a sum of exponentials (matrix pencil, within 1e-7 of K(0)): a few terms, and the
    recursion gives the direct quadrature's particle to ~1e-8 over 400 time units (below K_N's recurrence at
    2 pi N / omega_max = 1571, which the fit on its window does not have); chunks and resets as the direct."""
    from vpintegrator.rollout.gle import GLE_FIT_TOL, exponential_fit

    system = get_system("kac_zwanzig", N=1000)
    h = 0.1
    K = system.kernel(h * np.arange(431))
    a, z, worst = exponential_fit(K, h, GLE_FIT_TOL)
    j = np.arange(K.size)
    assert a.size <= 24 and np.all(np.abs(z) < 1) and worst <= GLE_FIT_TOL
    assert np.abs((z[None, :] ** j[:, None] @ a).real - K).max() <= GLE_FIT_TOL * abs(K[0]) * (1 + 1e-9)
    direct = gle_solve(system, *PARTICLES, h, 4000)
    fitted = gle_solve(system, *PARTICLES, h, 4000, fit=GLE_FIT_TOL)
    assert np.abs(fitted - direct).max() < 1e-7
    window = np.stack(PARTICLES, axis=-1)[:, None, :]
    step = GLEStep(system, h, fit=GLE_FIT_TOL)
    step.start(window, None)
    chunked = np.concatenate([step.generate(13), step.generate(87)], axis=1)
    np.testing.assert_array_equal(chunked, fitted[:, 1:101])
    step.reset(np.array([0]))
    np.testing.assert_array_equal(step.generate(4)[0], fitted[0, 1:5])
    assert step.describe()["gle_terms"] == step._soe[0].size


def test_a_small_bath_whose_kernel_recurs_in_the_fit_window_gets_the_direct_quadrature():
    """N = 20: K_N recurs at 2 pi 20 / 4 = 31 < the fit window (43): no decaying sum fits, and the row says so and
    runs the direct quadrature (the same particle)."""
    from vpintegrator.rollout.gle import GLE_FIT_TOL

    system = get_system("kac_zwanzig", N=20)
    step = GLEStep(system, 0.1, fit=GLE_FIT_TOL)
    window = np.stack(PARTICLES, axis=-1)[:, None, :]
    step.start(window, None)
    assert "direct quadrature" in step.describe()["gle_kernel"]
    np.testing.assert_array_equal(step.generate(500), gle_solve(system, *PARTICLES, 0.1, 500)[:, 1:])


def test_the_coarse_bath_reproduces_the_particle_to_its_horizon():
    system = get_system("kac_zwanzig", N=400)
    coarse = system.coarse(100.0)
    assert coarse.N < 80 and coarse.omega_max < system.omega_max
    T = 100.0
    h = 0.01
    full = bath_stepper(system, "bath_splitting", h).run(system.bath_at_rest(*PARTICLES), int(T / h))
    small = bath_stepper(coarse, "bath_splitting", h).run(coarse.bath_at_rest(*PARTICLES), int(T / h))
    assert np.abs(full - small).max() < 1e-6
    assert system.coarse(1e6) is system  # no smaller bath for so long a horizon


def test_the_coarse_bath_row_grows_with_a_long_run():
    """A coarse bath for t = 100 recurs near t = 121; the row rebuilds it for longer runs and replays, so to t = 400
    it stays on the full bath's particle (the bath for t = 100 alone is off by O(1) there)."""
    from vpintegrator.rollout.gle import BathStep, CoarseBathStep

    system = get_system("kac_zwanzig", N=2000)
    window = np.stack(PARTICLES, axis=-1)[:, None, :]
    rows = {"grown": CoarseBathStep(system, "bath_splitting", 0.05), "full": BathStep(system, "bath_splitting", 0.05),
            "fixed": BathStep(system.coarse(100.0), "bath_splitting", 0.05)}
    out = {}
    for name, step in rows.items():
        step.start(window, None)
        out[name] = np.concatenate([step.generate(1000) for _ in range(8)], axis=1)
    assert rows["grown"].t_max >= 400 and rows["grown"].system.N < 500
    assert np.abs(out["grown"] - out["full"]).max() < 1e-6
    assert np.abs(out["fixed"] - out["full"]).max() > 1e-2
    rows["grown"].reset(np.array([2]))
    np.testing.assert_allclose(rows["grown"].generate(3)[2], out["full"][2, :3], atol=1e-9)


def test_a_truncated_chain_is_the_long_chain_before_the_echo():
    """The nonlinear bath is a nearest-neighbour chain started at rest: to t = 30 the particle on 60 sites is the
    particle on 400 sites to round-off (the disturbance has not come back from the wall)."""
    long, short = get_system("particle_chain", N=400), get_system("particle_chain", N=60)
    a = bath_stepper(long, "stormer_verlet", 0.05).run(long.bath_at_rest(*PARTICLES), 600)
    b = bath_stepper(short, "stormer_verlet", 0.05).run(short.bath_at_rest(*PARTICLES), 600)
    assert np.abs(a - b).max() < 1e-12


# --- the rows in a comparison run, and the CLI -------------------------------------------------------------------


def test_particle_channels_need_q0_and_p0():
    from vpintegrator.data.observation import resolve_observation
    from vpintegrator.rollout.observed import ObservedSystem

    kz = get_system("kac_zwanzig", N=4)
    obs = resolve_observation("p0,q0", kz.dim, kz.state_names, kz.name)
    full, channels = particle_channels(ObservedSystem(dim=2, full=kz, observation=obs))
    assert full is kz and channels == (1, 0)
    with pytest.raises(VPIntegratorError, match="observe must hold q0 and p0"):
        particle_channels(ObservedSystem(dim=5, full=kz, observation=resolve_observation("q", kz.dim, kz.state_names)))


def test_the_arena_rows_are_registered():
    """The arena's rows are registered ``vpintegrator.rollout.methods.ROW_KINDS`` entries (``vp-rollout --list``)."""
    from vpintegrator.rollout import gle, methods

    assert methods.ROW_KINDS["gle"].build is gle.gle_row and methods.ROW_KINDS["bath"].build is gle.bath_row
    assert methods.ROW_KINDS["coarse_bath"].build is gle.coarse_bath_row


@pytest.mark.parametrize("spec", ["kac_zwanzig", "particle_chain"])
def test_vp_gen_makes_a_tiny_file_of_each_spec(spec, tmp_path):
    from vpintegrator.cli.gen import main
    from vpintegrator.data import read_trajectories

    out = tmp_path / "b.h5"
    res = CliRunner().invoke(main, [spec, "--n-traj", "3", "--t-end", "2", "--set", "system.N=4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    traj = read_trajectories(out)
    assert traj.y.shape == (3, 21, 10) and traj.system.name == spec and traj.system.N == 4
    np.testing.assert_array_equal(traj.y[:, 0], traj.system.bath_at_rest(traj.y[:, 0, 0], traj.y[:, 0, 5]))
    e = traj.system.hamiltonian(traj.y)
    assert np.abs(e - e[:, :1]).max() < 1e-9


def test_training_observes_the_particle_by_name_at_any_bath_size(tmp_path):
    """observe = "q0,p0" names the particle of a bath of any N (the names are the file's system instance's, not
    the class default's N = 100), and the model sees exactly those two channels."""
    from vpintegrator.cli.gen import main
    from vpintegrator.training import fit

    data = tmp_path / "kz.h5"
    res = CliRunner().invoke(main, ["kac_zwanzig", "--n-traj", "8", "--t-end", "4", "--set", "system.N=7",
                                    "--out", str(data)])
    assert res.exit_code == 0, res.output
    result = fit({"data": [str(data)], "model": {"name": "delay_mlp", "seq_len": 2, "width": 4}, "observe": "q0,p0",
                  "epochs": 1, "batch_size": 32, "dtype": "float64", "optimizer": "adam", "out": str(tmp_path / "r")})
    from vpintegrator.data.observation import observation_from_record
    from vpintegrator.models import load_model

    assert result.model.dim == 2
    observation = observation_from_record(load_model(tmp_path / "r").trained_on["observation"], "model")
    assert np.nonzero(observation.matrix)[1].tolist() == [0, 8]  # q0 and p0 of the 2 (N + 1) = 16 components


def test_vp_rollout_scores_the_arena_rows_on_the_observed_particle(tmp_path):
    from vpintegrator.cli.gen import main as gen
    from vpintegrator.cli.rollout import main
    from vpintegrator.data import read_rollout

    data = tmp_path / "kz.h5"
    res = CliRunner().invoke(gen, ["kac_zwanzig", "--n-traj", "2", "--t-end", "4", "--set", "system.N=150",
                                   "--out", str(data)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "ro.h5"
    rows = "gle,bath+bath_splitting,bath+stormer_verlet,coarse_bath+bath_splitting"
    res = CliRunner().invoke(main, ["--data", str(data), "--observe", "q0,p0", "--integrators", rows,
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    ro = read_rollout(out)
    assert ro.reference.y.shape == (2, 41, 2)
    for name in rows.split(","):
        err = np.abs(ro.methods[name].y - ro.reference.y).max()
        assert err < 2e-2, (name, err)  # each row's own second-order error at dt = 0.1
    assert np.abs(ro.methods["coarse_bath+bath_splitting"].y - ro.methods["bath+bath_splitting"].y).max() < 1e-6


def test_the_work_precision_script_runs_at_a_tiny_size(tmp_path, repo_script):
    """``scripts/bath_work_precision.py`` end to end at N = 20 to t = 5 (one condition): every row scored and priced."""
    import json

    module = repo_script("bath_work_precision")
    out = tmp_path / "wp.json"
    module.main(["--sizes", "20", "--n-cond", "1", "--t-end", "5", "--repeats", "1", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    names = {(r["system"], r["row"]) for r in rows}
    assert ("kac_zwanzig", "gle 0.1") in names and ("particle_chain", "trunc(N=20)-y6 0.1") in names
    for r in rows:
        assert np.isfinite(r["error_T"]) and r["cpu_per_unit_time"] > 0, r
        if r["h"] <= 0.1:
            assert r["error_T"] < 1e-2, r


def test_a_file_whose_bath_is_not_at_rest_is_refused_by_the_rows(tmp_path):
    """The rows lift the bath at rest from the particle: on a file made by another sampler (here 'box') they would
    integrate another motion, so each is refused in one line (a row's failure: marked, its reason said); when every
    row asked for is refused, the command says so in one line, exits 1 and writes nothing (issue 88)."""
    from vpintegrator.cli.gen import main as gen
    from vpintegrator.cli.rollout import main

    data = tmp_path / "box.h5"
    res = CliRunner().invoke(gen, ["kac_zwanzig", "--n-traj", "2", "--t-end", "1", "--set", "system.N=3", "--set",
                                   "initial_conditions.sampler=box", "--set", "initial_conditions.low=-0.5",
                                   "--set", "initial_conditions.high=0.5", "--out", str(data)])
    assert res.exit_code == 0, res.output
    rows = ("gle", "bath+stormer_verlet", "coarse_bath+bath_splitting")
    res = CliRunner().invoke(main, ["--data", str(data), "--observe", "q0,p0", "--integrators", ",".join(rows),
                                    "--out", str(tmp_path / "ro.h5")])
    assert "Traceback" not in res.output, res.output
    said = [line for line in res.output.splitlines() if "does not start with the bath at rest" in line]
    assert {row for row in rows if any(row in line for line in said)} == set(rows), res.output
    assert res.exit_code == 1 and "no row could be made, so nothing was written" in res.output, res.output
    assert not (tmp_path / "ro.h5").exists()
