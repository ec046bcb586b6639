"""The lean lattice references of ``scripts/bench_lattice.py`` (the ratios of ``scripts/bench_engine.py`` divide by
them) step the package's states: the implicit midpoint's Newton (Toda on a ring, FPU-beta with fixed ends) and
the exponential splitting's kicks + FFT, each against the compiled kernel at a tiny N; the engine benchmark's plain
fixed points of the rigid body's implicit midpoint and Gauss-Legendre 4; and its verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.compiled import compiled_stepper
from vpintegrator.systems import get_system, sample_initial_conditions

N_SITES, N_STEPS = 12, 40


def _start(name):
    system = get_system(name, N=N_SITES)
    return system, sample_initial_conditions(system, "bump", mu=[0.45])[0]


def _lean_run(lattice, method, name, system, stepper, y0, h, got):
    """The script's lean loop of ``method``: the midpoint returns the steps it took, the exponential splitting all."""
    if method == "implicit_midpoint":
        return lattice.MIDPOINT[name](float(system.bond_params()[0]), y0.copy(), h, N_STEPS, got, stepper.tol,
                                      stepper.max_iter)
    lattice._lean_exponential(system, lattice.KICK[name], y0.copy(), h, N_STEPS, got)
    return N_STEPS


@pytest.mark.parametrize("method", ["implicit_midpoint", "exponential_splitting"])
@pytest.mark.parametrize("name, h", [("toda", 1.2), ("fpu_beta", 0.9)])
def test_lean_lattice_loops_step_the_package_states(repo_script, name, h, method):
    lattice = repo_script("bench_lattice")
    system, y0 = _start(name)
    stepper = compiled_stepper(system, method, h)
    want, got = np.empty((N_STEPS, system.dim)), np.full((N_STEPS, system.dim), np.nan)
    assert stepper.step_block(y0.copy(), N_STEPS, want) == N_STEPS
    assert _lean_run(lattice, method, name, system, stepper, y0, h, got) == N_STEPS
    assert np.max(np.abs(want - y0)) > 0.1  # the states move
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
def test_plain_fixed_points_step_the_package_states(repo_script, method):
    """The engine benchmark's plain fixed points (its rigid-body implicit references) step the compiled kernel's states
    to the solver's tolerance (the midpoint's kernel iterates by Newton: the converged iterates differ at rounding)."""
    engine = repo_script("bench_engine")
    system = get_system("rigid_body")
    y0 = np.array(system.default_y0, dtype=np.float64)
    stepper = compiled_stepper(system, method, 0.2)
    want, got = np.empty((N_STEPS, 3)), np.full((N_STEPS, 3), np.nan)
    assert stepper.step_block(y0.copy(), N_STEPS, want) == N_STEPS
    assert engine.fixed_point_lean(stepper)(y0.copy(), N_STEPS, got) == N_STEPS
    assert np.max(np.abs(want - y0)) > 0.1  # the states move
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


def test_verdicts(repo_script):
    engine = repo_script("bench_engine")
    assert engine.verdict(1.05, 1.3, 1.1) == "met, goal met"
    assert engine.verdict(1.1, 1.3, 1.1) == "met, goal met"
    assert engine.verdict(1.2, 1.3, 1.1) == "met"
    assert engine.verdict(1.31, 1.3, 1.1) == "not met"
    assert engine.verdict(19.0, 20.0) == "met"
    assert engine.verdict(float("nan"), 1.3) == "not met"


def test_a_lattice_that_blows_up_is_a_one_line_error(repo_script):
    """Toda's bump at h = 1.2 blows up at N = 16: the benchmark names the flag to change, exit 1, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    repo_script("bench_engine")  # skips without the repository's scripts
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_engine.py"
    res = subprocess.run([sys.executable, str(script), "--repeats", "1", "--t-end", "2", "--call-steps", "5",
                          "--method", "rk4", "--lattice-n", "16", "--lattice-steps", "20", "--fixed-calls", "2"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lattice-n 16" in lines[0] and "give a larger --lattice-n" in lines[0]
