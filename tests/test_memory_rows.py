"""The fitted memory rows of vp-rollout (``arx``, ``delay_dmd``, ``narx``, ``delay_sindy+METHOD``): each held
against a slow reference written here (known linear and cubic recurrences recovered to round-off, delay DMD
against exact DMD written out and equal to ARX at full rank, delay SINDy against select_sindy on delay vectors
integrated by ``integrate``), the ladder from the CLI on a data-only file of Hénon–Heiles positions, and bad
input in one line."""

from __future__ import annotations

import importlib.util
import json
import math

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from scipy.integrate import solve_ivp

from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.data import read_rollout
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import ARXStep, DelayDMDStep, NARXStep, rollout

pytestmark = pytest.mark.usefixtures("one_thread")
HAS_PYSINDY = importlib.util.find_spec("pysindy") is not None
H = 0.1


# --------------------------------------------------------------------------- slow references


def _recurrence(A, c, n, K, seed=0, P=None, powers=None, scale=1.0):
    """Trajectories (n, K, k) of x_{t} = c + Σ_j A[j] x_{t−1−j} (+ P^T monomials of x_{t−1}), from random
    first windows: a plain Python loop."""
    rng = np.random.default_rng(seed)
    T, k = len(A), A[0].shape[0]
    y = np.zeros((n, K, k))
    y[:, :T] = scale * rng.normal(size=(n, T, k))
    for t in range(T, K):
        for i in range(n):
            x = c + sum(A[j] @ y[i, t - 1 - j] for j in range(T))
            if P is not None:
                x = x + P.T @ np.array([np.prod(y[i, t - 1] ** p) for p in powers])
            y[i, t] = x
    return y


A3 = [np.array([[0.5, 0.1], [-0.2, 0.4]]), np.array([[0.2, 0.0], [0.1, -0.3]]),
      np.array([[0.1, 0.05], [0.0, 0.2]])]
C = np.array([0.01, -0.02])


def _blocks(step, T, k):
    """The fitted A_j (newest first: A_0 multiplies x_n) of a window model."""
    W = step.fit.W  # rows: the window oldest first
    return [W[(T - 1 - j) * k:(T - j) * k].T for j in range(T)]


def test_arx_recovers_a_linear_recurrence_and_rolls_it_out():
    train, val = _recurrence(A3, C, 20, 40), _recurrence(A3, C, 4, 40, seed=1)
    step = ARXStep(train, val, context_len=3)
    fit = step.fit_now()
    assert fit.score < 1e-12 and fit.n_coefficients == 3 * 4 + 2
    for got, want in zip(_blocks(step, 3, 2), A3):
        np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(fit.c, C, atol=1e-13)
    out = rollout(step, val[:, :3], H, 39)
    np.testing.assert_allclose(out.y, val, atol=1e-12)
    info = step.describe()
    assert info["context_len"] == 3 and info["memory_n_coefficients"] == 14 and info["fit_seconds"] >= 0
    assert len(json.loads(info["memory_candidates"])) == 5 and "memory_ridge" in info
    assert np.allclose(np.asarray(json.loads(info["memory_coefficients"])["c"]), C)


def test_arx_window_volume_is_the_companion_determinant():
    train = _recurrence(A3, C, 20, 40)
    step = ARXStep(train, context_len=3, ridges=0.0)
    step.fit_now()
    companion = np.zeros((6, 6))  # the window map (oldest first) written out
    companion[:4, 2:] = np.eye(4)
    companion[4:] = np.concatenate([A3[2], A3[1], A3[0]], axis=1)
    want = np.linalg.slogdet(companion)[1]
    np.testing.assert_allclose(step.log_abs_det_jacobian(train[:3, :3]), want, atol=1e-10)


def test_narx_recovers_a_cubic_recurrence():
    powers = np.array([[2, 0], [1, 1], [0, 2], [3, 0], [2, 1], [1, 2], [0, 3]])
    P = np.zeros((7, 2))
    P[3, 1], P[1, 0], P[6, 0] = -0.3, 0.2, 0.1  # x_{n+1} ∋ −0.3 q1³ (2nd comp.), 0.2 q1 q2, 0.1 q2³
    A2 = [np.array([[0.9, 0.2], [-0.2, 0.9]]) * 0.9, np.array([[-0.1, 0.0], [0.0, -0.05]])]
    train = _recurrence(A2, C, 30, 30, P=P, powers=powers, scale=0.5)
    val = _recurrence(A2, C, 4, 30, seed=1, P=P, powers=powers, scale=0.5)
    assert np.isfinite(train).all() and np.abs(train).max() < 5
    step = NARXStep(train, val, context_len=2, libraries=["poly3"], ridges=[0.0])
    fit = step.fit_now()
    assert fit.library == "poly3" and fit.P.shape == (7, 2)
    np.testing.assert_array_equal(fit.powers, powers)  # the library's order: degree 2, then 3, lexicographic
    np.testing.assert_allclose(fit.P, P, atol=1e-10)
    for got, want in zip(_blocks(step, 2, 2), A2):
        np.testing.assert_allclose(got, want, atol=1e-10)
    out = rollout(step, val[:, :2], H, 29)
    np.testing.assert_allclose(out.y, val, atol=1e-9)
    # a library the data does not need: the linear row cannot, the cubic one can
    arx = ARXStep(train, val, context_len=2)
    arx.fit_now()
    assert arx.fit.score > 1e3 * max(fit.score, 1e-15)


def _exact_dmd(train, T, r, first, m):
    """Exact DMD of the delay vectors written out: h' = μ_Y + A_r (h − μ_X), A_r = Y_cᵀ U_r Σ_r⁻¹ V_rᵀ,
    iterated on the whole delay vector; the newest block of each."""
    n, K, k = train.shape
    X = np.array([train[i, s:s + T].ravel() for i in range(n) for s in range(K - T)])
    Y = np.array([train[i, s + 1:s + T + 1].ravel() for i in range(n) for s in range(K - T)])
    mx, my = X.mean(0), Y.mean(0)
    U, s, Vt = np.linalg.svd(X - mx, full_matrices=False)
    A = (Y - my).T @ U[:, :r] @ np.diag(1 / s[:r]) @ Vt[:r]
    out = np.empty((first.shape[0], m, k))
    for i in range(first.shape[0]):
        h = first[i].ravel()
        for j in range(m):
            h = my + A @ (h - mx)
            out[i, j] = h[-k:]
    return out


def test_delay_dmd_is_exact_dmd_and_equals_arx_at_full_rank():
    rng = np.random.default_rng(3)
    train = _recurrence(A3, C, 15, 40) + 1e-3 * rng.normal(size=(15, 40, 2))  # noise: every rank differs
    first = train[:3, :3]
    for r in (2, 4, 6):
        step = DelayDMDStep(train, context_len=3, ranks=r)
        step.fit_now()
        np.testing.assert_allclose(rollout(step, first, H, 23).y[:, 3:], _exact_dmd(train, 3, r, first, 21),
                                   rtol=1e-9, atol=1e-11)
    full = DelayDMDStep(train, context_len=3, ranks=6)
    arx = ARXStep(train, context_len=3, ridges=0.0)
    np.testing.assert_allclose(rollout(full, first, H, 40).y, rollout(arx, first, H, 40).y, atol=1e-10)
    chosen = DelayDMDStep(train, _recurrence(A3, C, 4, 40, seed=5), context_len=3)
    assert chosen.fit_now().rank in range(1, 7) and [f.rank for f in chosen.candidates] == [1, 2, 3, 4, 5, 6]
    assert chosen.describe()["memory_rank"] == chosen.fit.rank


def test_a_row_without_skill_has_no_model_and_produces_nan():
    rng = np.random.default_rng(0)
    train, val = rng.normal(size=(10, 20, 2)), rng.normal(size=(3, 20, 2))  # noise: nothing to predict
    step = ARXStep(train, val, context_len=3)
    out = rollout(step, val[:, :3], H, 10)
    assert step.fit is None and np.isnan(out.y[:, 3:]).all() and (out.failed_step == 3).all()
    assert "no arx candidate has skill" in step.describe()["fit_failure"]


# --------------------------------------------------------------------------- delay SINDy


@pytest.mark.skipif(not HAS_PYSINDY, reason="pysindy (the sindy extra) is not installed")
def test_delay_sindy_is_select_sindy_on_delay_vectors_integrated():
    from vpintegrator.data import integrate
    from vpintegrator.rollout import DelaySindyStep
    from vpintegrator.rollout.sindy import select_sindy

    y = _henon_heiles(12, 60)
    train, val, test = y[:8], y[8:10], y[10:]
    kw = dict(libraries=["poly2", "poly3"], thresholds=[1e-3])
    step = DelaySindyStep(train, val, "rk4", H, context_len=2, component_names=("q1", "q2"), **kw)
    out = rollout(step, test[:, :2], H, 40)
    z = [np.concatenate([a[:, :-1], a[:, 1:]], axis=-1) for a in (train, val)]  # (x_n, x_{n+1})
    fit, _ = select_sindy(z[0], z[1], H, "rk4", **kw)
    assert fit.library == step.fit.library and np.array_equal(fit.field.coefficients, step.field.coefficients)
    want = integrate(fit.field, test[:, :2].reshape(2, 4), H, 39, method="rk4", compiled=False).y[..., 2:]
    np.testing.assert_allclose(out.y[:, 1:], want, rtol=1e-10, atol=1e-12)
    err = np.linalg.norm(out.y - test[:, :41], axis=-1).max()
    assert err < 1e-3
    info = step.describe()
    assert info["fit_seconds"] > 0 and info["context_len"] == 2 and "q2[n-1]" in info["sindy_features"]


# --------------------------------------------------------------------------- the ladder from the CLI


def _hh(t, y):
    q1, q2, p1, p2 = y
    return [p1, p2, -q1 - 2.0 * q1 * q2, -q2 - q1 * q1 + q2 * q2]


def _henon_heiles(n, n_states, seed=0):
    """Positions (q1, q2) of Hénon–Heiles trajectories at h = 0.1, energies 0.02 ... 0.1 (DOP853, 1e-12)."""
    rng = np.random.default_rng(seed)
    t = H * np.arange(n_states)
    out = []
    while len(out) < n:
        y0 = np.concatenate([rng.uniform(-0.35, 0.35, 2), rng.uniform(-0.4, 0.4, 2)])
        q1, q2, p1, p2 = y0
        e = 0.5 * (p1 ** 2 + p2 ** 2 + q1 ** 2 + q2 ** 2) + q1 ** 2 * q2 - q2 ** 3 / 3
        if 0.02 < e < 0.1:
            out.append(solve_ivp(_hh, (0, t[-1]), y0, method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12).y[:2].T)
    return np.array(out)


@pytest.fixture(scope="module")
def hh_file(tmp_path_factory):
    """A data-only file: /t and /y = (q1, q2) of 20 trajectories, nothing else."""
    path = tmp_path_factory.mktemp("memory") / "hh_q.h5"
    y = _henon_heiles(20, 81)
    with h5py.File(path, "w") as f:
        f["t"] = H * np.arange(y.shape[1])
        f["y"] = y
    return path


def _ladder(hh_file, tmp_path, rows, context_len=3):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "ladder.h5"
    result = CliRunner().invoke(rollout_main, ["--data", str(hh_file), "--integrators", ",".join(rows),
                                               "--fit-on-data", "--context-len", str(context_len), "--reference",
                                               "data", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return read_rollout(out)


LINEAR_ROWS = ("arx", "delay_dmd", "narx", "parrot")


def _check_ladder(ro, rows):
    k10 = 50  # t = 5, past every window
    med = {row: float(np.median(ro.metrics[row].rel_error[:, k10])) for row in rows}
    assert all(np.isfinite(ro.metrics[row].rel_error).all() for row in rows), med
    for row in rows:
        meta = ro.methods[row].meta
        assert meta["kind"] == "fitted" and meta["context_len"] == 3
        if row != "parrot":
            assert meta["fit_seconds"] > 0 and meta["fit_clock"] == "process_cpu" and "fit_source" in meta
            assert meta["seconds_per_step"] > 0
    for row in ("arx", "delay_dmd", "narx"):
        assert {"memory_validation_error", "memory_n_coefficients", "memory_candidates"} <= set(ro.methods[row].meta)
    assert "memory_library" in ro.methods["narx"].meta and "memory_rank" in ro.methods["delay_dmd"].meta
    # the cubic terms of the newest state carry Hénon–Heiles' quadratic force: far ahead of the linear memory
    assert med["narx"] < 0.05 * med["arx"], med
    return med


def test_the_linear_ladder_from_the_cli_on_a_data_only_file(hh_file, tmp_path):
    ro = _ladder(hh_file, tmp_path, LINEAR_ROWS)
    assert "system" not in ro.meta and ro.meta["reference_mode"] == "data"
    _check_ladder(ro, LINEAR_ROWS)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PYSINDY, reason="pysindy (the sindy extra) is not installed")
def test_every_ladder_row_from_the_cli_on_a_data_only_file(hh_file, tmp_path):
    """The issue's target: every fitted ladder row of vp-rollout on a data-only file of positions (about 20 s:
    delay SINDy's full validation grid)."""
    rows = (*LINEAR_ROWS, "delay_sindy+rk4")
    med = _check_ladder(_ladder(hh_file, tmp_path, rows), rows)
    assert med["delay_sindy+rk4"] < 0.1 * med["arx"], med


def test_the_memoryless_rung_from_the_cli(hh_file, tmp_path):
    """--context-len 1 is the memoryless rung (the window of one state); the CLI takes it and the window-2 ladder
    beats it, each row recording the window it read."""
    one = _ladder(hh_file, tmp_path / "one", ("arx", "narx"), context_len=1)
    two = _ladder(hh_file, tmp_path / "two", ("arx", "narx"), context_len=2)
    k = 50
    for row in ("arx", "narx"):
        assert one.methods[row].meta["context_len"] == 1 and two.methods[row].meta["context_len"] == 2
        e1, e2 = (float(np.median(np.nan_to_num(ro.metrics[row].rel_error[:, k], nan=np.inf))) for ro in (one, two))
        assert e2 < e1, (row, e1, e2)


def test_memory_beats_the_memoryless_map(hh_file):
    """ARX with a window of positions against ARX at T = 1 (the memoryless linear map of the observation):
    positions alone do not determine the motion; two or more of them do, to first order."""
    from vpintegrator.data import read_trajectories

    y = read_trajectories(hh_file).y
    train, val, test = y[:14], y[14:17], y[17:]
    score, err = {}, {}
    for T in (1, 2, 4):
        step = ARXStep(train, val, context_len=T)
        out = rollout(step, test[:, :T], H, 60)
        score[T] = min(f.score for f in step.candidates)
        err[T] = float(np.median(np.linalg.norm(out.y[:, 50] - test[:, 50], axis=-1)
                                 / np.linalg.norm(test[:, 50], axis=-1)))
    # the memoryless map has no skill on the validation trajectories: no model, NaN states
    assert score[1] >= 0.5 and math.isnan(err[1]), (score, err)
    assert score[2] < 0.8 * score[1] and score[4] < 0.8 * score[1], score  # skill: a model
    assert err[2] < 1 and err[4] < 1, err


def test_the_linear_ladder_on_a_generated_file_observed_in_q(tmp_path):
    """A generated file (a system, its exact flow) observed in q: the rows learn from the observed channels of
    its training split and start from the first observed window, beside the known-equations row."""
    from vpintegrator.data import integrate, write_trajectories

    y0 = np.random.default_rng(3).uniform([-1, -1, -2, -2], [1, 1, 2, 2], size=(30, 4))
    data = write_trajectories(tmp_path / "co.h5", integrate("coupled_oscillator", y0, 0.2, 60, method="gauss_legendre4"))
    out = tmp_path / "co_q.h5"
    result = CliRunner().invoke(rollout_main, ["--data", str(data), "--observe", "q", "--integrators",
                                               "arx,delay_dmd,narx,estimate+gauss_legendre4", "--fit-on-data",
                                               "--t-end", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    ro = read_rollout(out)
    assert ro.reference.y.shape[-1] == 2
    for row in ("arx", "delay_dmd", "narx"):
        err = ro.metrics[row].rel_error
        assert err.shape[-1] == 41 and np.isfinite(err).all() and np.all(err[:, :3] == 0)  # the window is given
        assert ro.methods[row].meta["context_len"] == 3 and ro.methods[row].meta["fit_seconds"] > 0
    assert np.median(ro.metrics["narx"].rel_error[:, -1]) < 0.1  # measured 0.013 at t = 8 (arx 0.026)
    assert np.median(ro.metrics["estimate+gauss_legendre4"].rel_error[:, -1]) < 1e-3  # measured 2.2e-5


# --------------------------------------------------------------------------- bad input, one line


def _one_line(result, *words):
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("row", ["arx", "delay_dmd", "narx", "delay_sindy+rk4"])
def test_a_window_longer_than_the_trajectories_is_one_line(hh_file, tmp_path, row):
    result = CliRunner().invoke(rollout_main, ["--data", str(hh_file), "--integrators", row, "--fit-on-data",
                                               "--context-len", "81", "--reference", "data", "--out",
                                               str(tmp_path / "x.h5")])
    _one_line(result, "context", "= 81 is longer than the trajectories")
    assert not (tmp_path / "x.h5").exists()


def test_a_window_longer_than_the_arrays_is_one_line():
    with pytest.raises(VPIntegratorError, match="context_len = 40") as err:
        ARXStep(np.zeros((3, 40, 2)), context_len=40)
    assert err.value.key == "context_len" and "\n" not in str(err.value)


def test_an_unknown_row_is_one_line(hh_file, tmp_path):
    result = CliRunner().invoke(rollout_main, ["--data", str(hh_file), "--integrators", "arxx", "--fit-on-data",
                                               "--out", str(tmp_path / "x.h5")])
    _one_line(result, "arxx", "narx", "delay_dmd", "delay_sindy+METHOD")
    result = CliRunner().invoke(rollout_main, ["--data", str(hh_file), "--integrators", "arx+rk4", "--fit-on-data",
                                               "--out", str(tmp_path / "x.h5")])
    _one_line(result, "takes no method")


_Y6 = np.random.default_rng(0).normal(size=(4, 12, 6))


@pytest.mark.parametrize("make, key, words", [
    (lambda: NARXStep(_Y6, context_len=2, libraries=["poly9"]), "libraries", "MAX_FEATURES"),
    (lambda: NARXStep(_Y6, context_len=2, libraries=["cubic"]), "libraries", "polyD"),
    (lambda: ARXStep(_Y6, context_len=2, ridges=[-1.0]), "ridges", ">= 0"),
    (lambda: DelayDMDStep(_Y6, context_len=2, ranks=[13]), "ranks", "1 ... T*k = 12"),
    # 4 trajectories x 2 windows of T = 10: 8 windows for 61 coefficients per component
    (lambda: ARXStep(_Y6, context_len=10, ridges=0.0).fit_now(), "context_len", "underdetermined"),
    (lambda: ARXStep(np.full((3, 12, 6), np.nan), context_len=2), "data", "NaN"),
], ids=["library-too-large", "library-unknown", "ridge", "rank", "underdetermined", "nan"])
def test_fits_that_do_not_fit_are_one_line(make, key, words):
    with pytest.raises(VPIntegratorError) as err:
        make()
    assert words in str(err.value) and err.value.key == key and "\n" not in str(err.value)


def test_a_single_candidate_needs_no_validation():
    step = NARXStep(_Y6, context_len=2, libraries=["poly2"], ridges=1e-6)
    assert math.isnan(step.fit_now().score) and step.fit.library == "poly2" and len(step.candidates) == 1


# --------------------------------------------------------------------------- the whole-window estimate


def test_the_whole_window_estimate_is_the_least_squares_smoother_of_a_linear_system():
    """``estimate+METHOD`` over a noisy window of K observed positions (the memory study's estimate from its longest
    window): on two uncoupled oscillators (k = 0, a linear flow) the least-squares initial state over the window is
    closed form, written here from the exact flow's matrices; the estimate is it, carried to the window's last
    state."""
    from vpintegrator.data.observation import resolve_observation
    from vpintegrator.rollout.observed import estimate_states
    from vpintegrator.systems import CoupledOscillator

    system = CoupledOscillator(k=0.0)
    obs = resolve_observation("q", 4, CoupledOscillator.state_names, "coupled_oscillator")
    (m1, m2), w = system.m, np.sqrt([system.k1 / system.m[0], system.k2 / system.m[1]])
    dt, K, sigma = 0.2, 8, 1e-3

    def flow(t):  # (4, 4): y(t) = flow(t) y(0), y = (q1, q2, p1, p2)
        c, s = np.cos(w * t), np.sin(w * t)
        F = np.zeros((4, 4))
        for i, m in enumerate((m1, m2)):
            F[i, i], F[i, 2 + i] = c[i], s[i] / (m * w[i])
            F[2 + i, i], F[2 + i, 2 + i] = -m * w[i] * s[i], c[i]
        return F

    rng = np.random.default_rng(3)
    z0 = rng.normal(size=(5, 4))
    windows = np.stack([[flow(j * dt)[:2] @ z for j in range(K)] for z in z0]) + sigma * rng.normal(size=(5, K, 2))
    M = np.concatenate([flow(j * dt)[:2] for j in range(K)])  # (2K, 4): the stacked observed flow
    best = np.stack([flow((K - 1) * dt) @ np.linalg.lstsq(M, win.ravel(), rcond=None)[0] for win in windows])
    z, residual = estimate_states(system, obs, windows, dt)
    np.testing.assert_allclose(z, best, rtol=0, atol=1e-8)
    assert np.all(residual > 0.3 * sigma) and np.all(residual < 3 * sigma)  # the fit's RMS is the noise's
    assert np.abs(best - np.stack([flow((K - 1) * dt) @ z for z in z0])).max() > 1e-5  # noise moved the estimate
