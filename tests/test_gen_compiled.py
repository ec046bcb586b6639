"""The compiled per-trajectory DOP853 (vpintegrator.compiled.dop853) behind solve_flow and generate.

What is guaranteed: each trajectory is integrated by SciPy's DOP853 algorithm on its own (tableau, error
norm over its own components, step-size controller, dense output at t), so it carries exactly the
guarantee of its own ``solve_ivp(method="DOP853", t_eval=t, rtol, atol)`` call; the numbers equal that
call's up to rounding (tested: within 10 * rtol * |y|), and its error against a tight reference is no
worse than that call's (tested: <= 2 x the solve_ivp error + 10 * tol).
"""

from __future__ import annotations

import importlib

import h5py
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from vpintegrator.compiled import dop853
from vpintegrator.data import generate, load_spec, solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import get_system

gen_mod = importlib.import_module("vpintegrator.data.generation")

pytestmark = pytest.mark.skipif(not dop853.available(), reason="numba not installed")

EPS = np.finfo(float).eps


def _loop(system, y0, t, rtol, atol):
    out = np.empty((len(y0), t.size, system.dim))
    for i, y in enumerate(y0):
        sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y, method="DOP853", t_eval=t, rtol=rtol, atol=atol)
        out[i] = sol.y.T
    return out


def _y0(name, n, seed=0):
    rng = np.random.default_rng(seed)
    if name in ("rigid_body", "rigid_body_exp"):
        y = rng.normal(size=(n, 3))
        return y / np.linalg.norm(y, axis=1, keepdims=True)
    if name == "coupled_oscillator":
        return rng.uniform(-1.5, 1.5, size=(n, 4))
    if name == "volterra":
        return rng.uniform(0.5, 2.0, size=(n, 3))
    return rng.uniform(-3, 3, size=(n, 3))


def test_tableau_is_scipys():
    from scipy.integrate._ivp import dop853_coefficients as dc

    for name in ("A", "B", "C", "E3", "E5", "D"):
        assert np.array_equal(getattr(dop853, "_" + name), getattr(dc, name)), name
    assert (dop853._N_STAGES, dop853._N_EXT) == (dc.N_STAGES, dc.N_STAGES_EXTENDED)


@pytest.mark.parametrize("name", ["rigid_body", "volterra", "abc_flow", "coupled_oscillator", "rigid_body_exp"])
@pytest.mark.parametrize("rtol", [1e-8, 1e-12])
def test_matches_per_trajectory_solve_ivp(name, rtol):
    system = get_system(name)
    y0 = _y0(name, 12)
    t = np.arange(41) * 0.25
    y = solve_flow(system, y0, t, rtol=rtol, atol=rtol, compiled=True)
    ref = _loop(system, y0, t, rtol, rtol)
    scale = 1.0 + np.max(np.abs(ref))
    assert np.max(np.abs(y - ref)) <= 10 * rtol * scale
    assert np.array_equal(y[:, 0], y0)


@pytest.mark.parametrize("name", ["rigid_body", "coupled_oscillator"])
def test_error_against_tight_reference_no_worse_than_solve_ivp(name):
    system = get_system(name)
    y0 = _y0(name, 10, seed=1)
    t = np.arange(101) * 0.2
    tol = 1e-10
    y = solve_flow(system, y0, t, rtol=tol, atol=tol, compiled=True)
    loop = _loop(system, y0, t, tol, tol)
    tight = _loop(system, y0, t, 100 * EPS, 1e-16)
    err = np.max(np.abs(y - tight), axis=(1, 2))
    err_loop = np.max(np.abs(loop - tight), axis=(1, 2))
    assert np.all(err <= 2 * err_loop + 10 * tol)
    assert err.max() <= 1e3 * tol  # C * tol over t in [0, 20]


def test_samples_at_the_exact_times():
    """Output k is the dense output at t[k] itself (as solve_ivp's t_eval), also for an irregular grid."""
    system = get_system("rigid_body")
    y0 = _y0("rigid_body", 4)
    dt = 0.3
    t = np.arange(34) * dt  # t[k] = k * dt exactly as generate builds it
    y = solve_flow(system, y0, t, rtol=1e-12, atol=1e-12, compiled=True)
    for i in range(4):
        sol = solve_ivp(lambda s, z: system.vector_field(z), (0, t[-1]), y0[i], method="DOP853", dense_output=True, rtol=1e-12, atol=1e-12)
        assert np.max(np.abs(y[i] - sol.sol(t).T)) < 1e-10
    irregular = np.array([0.0, 1e-3, 0.5, 0.5 + 1e-9, 2.0, 7.123])
    y2 = solve_flow(system, y0, irregular, rtol=1e-12, atol=1e-12, compiled=True)
    assert np.max(np.abs(y2 - _loop(system, y0, irregular, 1e-12, 1e-12))) < 1e-10


def test_compiled_unavailable_is_an_error_and_auto_falls_back(monkeypatch):
    class Sub(type(get_system("rigid_body"))):
        pass

    class Numpy(type(get_system("rigid_body"))):  # its vector field in NumPy: never the compiled field
        def vector_field(self, y):
            return super().vector_field(y)

    assert not isinstance(dop853.kernel_for(Sub())[0], int)  # a subclass: its own field compiled, not kernel 0
    assert dop853.kernel_for(Numpy()) is None
    monkeypatch.setattr(dop853, "NUMBA", False)
    system = get_system("rigid_body")
    with pytest.raises(VPIntegratorError, match="numba is not installed"):
        solve_flow(system, _y0("rigid_body", 2), np.arange(5) * 0.1, compiled=True)
    y = solve_flow(system, _y0("rigid_body", 2), np.arange(5) * 0.1)  # vectorised solve_ivp
    assert y.shape == (2, 5, 3)


def test_generate_without_numba_uses_the_vectorised_path(monkeypatch, tmp_path):
    spec = load_spec("rigid_body", n_traj=50, t_end=2.0)
    fast = generate(spec)
    assert fast.meta["generator"].startswith(dop853.GENERATOR)
    monkeypatch.setattr(dop853, "NUMBA", False)
    slow = generate(spec, out=tmp_path / "slow.h5")
    with h5py.File(slow) as fh:
        assert "solve_ivp DOP853, vectorised" in fh.attrs["generator"]
        y_slow = fh["y"][:]
    assert np.max(np.abs(fast.y - y_slow)) < 1e-10


def test_generate_compiled_chunks_and_shards_change_nothing(tmp_path):
    """Per-trajectory integration: the chunking (and the pipelined write) does not change one bit."""
    spec = load_spec("rigid_body", n_traj=300, t_end=3.0)
    whole = generate(spec)
    progress = []
    path = generate(load_spec("rigid_body", n_traj=300, t_end=3.0, chunk_size=64), out=tmp_path / "c.h5",
                    progress=lambda done, total: progress.append((done, total)))
    with h5py.File(path) as fh:
        assert np.array_equal(fh["y"][:], whole.y)
        assert fh.attrs["chunk_size"] == 64
        for name in ("energy", "casimir"):
            assert fh.attrs[f"max_rel_drift_{name}"] == pytest.approx(whole.meta[f"max_rel_drift_{name}"], rel=0, abs=0)
    assert progress == [(0, 300), (64, 300), (128, 300), (192, 300), (256, 300), (300, 300)]
    # a shard of the same initial conditions gives the same trajectories
    y0 = whole.y[:, 0]
    part = solve_flow("rigid_body", y0[100:137], spec.t, rtol=spec.rtol, atol=spec.atol)
    assert np.array_equal(part, whole.y[100:137])


def test_generate_compiled_error_in_a_chunk_leaves_no_file(monkeypatch, tmp_path):
    calls = []
    real = gen_mod._solve_compiled

    def flaky(*args):
        calls.append(1)
        if len(calls) == 3:
            raise VPIntegratorError("solve_flow: DOP853 failed for initial condition 0 at t = 1: test")
        return real(*args)

    monkeypatch.setattr(gen_mod, "_solve_compiled", flaky)
    out = tmp_path / "x.h5"
    with pytest.raises(VPIntegratorError, match="DOP853 failed"):
        generate(load_spec("rigid_body", n_traj=200, t_end=2.0, chunk_size=50), out=out)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_step_size_underflow_is_reported():
    """A solution that blows up in finite time (Volterra from a negative state): a one-line error."""
    y0 = np.array([[1.0, 2.0, 1.5], [-5.0, 5.0, 5.0]])
    with pytest.raises(VPIntegratorError, match="initial condition 1"):
        solve_flow("volterra", y0, np.arange(11) * 1.0, compiled=True)
