"""A user's system compiled (issue 91): its field written once runs in every compiled loop, held to the shipped system
with the same equations and to the NumPy path (an independent reference), and a system that cannot compile says why."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vpintegrator as vp
from vpintegrator.compiled import compiled_stepper
from vpintegrator.compiled.systems import system_kernel, why_not_compiled
from vpintegrator.compiled.user import _source_hash
from vpintegrator.systems import RigidBody

pytest.importorskip("numba")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    from user_systems import HarmonicOscillator, HenonHeiles, NotCompilable, NumpyOscillator, UserToda  # noqa: E402
finally:
    sys.path.pop(0)

PAGE = HERE.parent / "docs" / "own_system.md"


def _page_rigid_body(tmp_path):
    """The user's rigid body of docs/own_system.md, as the page writes it (its module block run as a file)."""
    text = PAGE.read_text()
    block = re.search(r"```python\n(# myrigidbody\.py.*?)```", text, re.S)
    assert block, "docs/own_system.md lost its myrigidbody.py block"
    (tmp_path / "myrigidbody.py").write_text(block.group(1))
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        return importlib.import_module("myrigidbody").MyRigidBody
    finally:
        sys.path.pop(0)


Y0 = np.array([[np.sin(1.1), 0.0, np.cos(1.1)], [0.3, -0.8, 0.5]])
METHODS = ["euler", "rk4", "implicit_midpoint", "gauss_legendre4", "gauss_legendre8", "splitting",
           "splitting_mclachlan2", "splitting_blanes_moan4", "implicit_midpoint_tj4", "splitting_y6"]


def test_the_pages_rigid_body_runs_compiled_with_the_shipped_states(tmp_path):
    """The page's user rigid body through vp.integrate: the shipped rigid body's states to 1e-12, on a compiled loop."""
    user = _page_rigid_body(tmp_path)()
    for method in METHODS:
        stepper = compiled_stepper(user, method, 0.1)
        assert stepper is not None and not isinstance(stepper.kid, int), method
        got = vp.integrate(user, Y0, 0.1, 300, method=method).y
        want = vp.integrate("rigid_body", Y0, 0.1, 300, method=method).y
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=method)


@pytest.mark.parametrize("method", ["rk4", "implicit_midpoint", "gauss_legendre4", "gauss_legendre6", "splitting"])
def test_a_user_field_compiled_matches_its_numpy_path(method):
    """The compiled loops against the method's NumPy step on the same user system (the reference written apart):
    a few ulp a step."""
    system = HarmonicOscillator(omega=1.7)
    y0 = np.array([[1.0, 0.0], [0.2, -0.5]])
    assert compiled_stepper(system, method, 0.05) is not None
    fast = vp.integrate(system, y0, 0.05, 400, method=method).y
    slow = vp.integrate(system, y0, 0.05, 400, method=method, compiled=False).y
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_a_subclass_that_changes_the_field_runs_its_own_field():
    """A subclass of a shipped system with other equations compiles its own field, never the shipped kernel's."""
    @dataclasses.dataclass(frozen=True)
    class Damped(RigidBody):
        @staticmethod
        def field(p, x):
            return (p[0] * x[1] * x[2] - 0.1 * x[0], p[1] * x[0] * x[2], p[2] * x[0] * x[1])

    fast = vp.integrate(Damped(), Y0, 0.1, 200, method="rk4").y
    slow = vp.integrate(Damped(), Y0, 0.1, 200, method="rk4", compiled=False).y
    shipped = vp.integrate("rigid_body", Y0, 0.1, 200, method="rk4").y
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)
    assert np.abs(fast - shipped).max() > 1e-2


def _verlet(system, y, h, n):
    """Stormer-Verlet written out in plain Python from the system's NumPy gradients (the independent reference)."""
    d = system.dim // 2
    q, v = y[:d].copy(), y[d:].copy()
    out = [np.concatenate([q, v])]
    for _ in range(n):
        v = v - 0.5 * h * system.potential_gradient(q)
        q = q + h * system.kinetic_gradient(v)
        v = v - 0.5 * h * system.potential_gradient(q)
        out.append(np.concatenate([q, v]))
    return np.array(out)


def test_a_separable_user_hamiltonian_runs_stormer_verlet_compiled():
    system = HenonHeiles(lam=0.8)
    y0 = np.array(system.default_y0)
    stepper = compiled_stepper(system, "stormer_verlet", 0.05)
    assert stepper is not None and stepper.engine == "lean"
    fast = vp.integrate(system, y0, 0.05, 500, method="stormer_verlet").y[0]
    np.testing.assert_allclose(fast, _verlet(system, y0, 0.05, 500), rtol=0, atol=1e-13)
    np.testing.assert_allclose(fast, vp.integrate(system, y0, 0.05, 500, method="stormer_verlet", compiled=False).y[0],
                               rtol=0, atol=1e-13)
    energy = system.invariant("energy", fast)
    assert np.abs(energy - energy[0]).max() < 1e-4  # symplectic: bounded energy error


@pytest.mark.parametrize("method", ["stormer_verlet", "implicit_midpoint", "exponential_splitting", "stormer_verlet_y6"])
def test_a_users_lattice_runs_the_lattice_loops_with_the_shipped_states(method):
    """A user's Toda lattice giving its bond force and stiffness on scalars steps by the compiled array loops, with the
    shipped toda's states (the same loops, its bond functions in place of the shipped branch)."""
    from vpintegrator.compiled.lattice import LatticeStepper

    user, shipped = UserToda(N=16), vp.get_system("toda", N=16)
    y0 = np.random.default_rng(0).normal(size=(2, 32)) * 0.3
    assert system_kernel(user) is None  # asked for a field kernel first (DOP853 does): its lattice loops all the same
    assert isinstance(compiled_stepper(user, method, 0.1), LatticeStepper)
    np.testing.assert_allclose(vp.integrate(user, y0, 0.1, 200, method=method).y,
                               vp.integrate(shipped, y0, 0.1, 200, method=method).y, rtol=0, atol=1e-12)
    if method == "stormer_verlet":  # and the NumPy path of the user's own lattice (the reference written apart)
        np.testing.assert_allclose(vp.integrate(user, y0, 0.1, 50, method=method).y,
                                   vp.integrate(user, y0, 0.1, 50, method=method, compiled=False).y, rtol=0, atol=1e-12)


def test_a_field_numba_cannot_type_runs_in_numpy_and_names_its_line(caplog):
    with caplog.at_level("WARNING", logger="vpintegrator"):
        assert system_kernel(NotCompilable()) is None and compiled_stepper(NotCompilable(), "rk4", 0.1) is None
    why = why_not_compiled(NotCompilable())
    assert why is not None and "numba cannot compile its field" in why and "user_systems.py:" in why
    assert "\n" not in why
    np.testing.assert_allclose(vp.integrate(NotCompilable(), np.array([1.0, 0.0]), 0.1, 10).y[0, -1],
                               vp.integrate(HarmonicOscillator(), np.array([1.0, 0.0]), 0.1, 10).y[0, -1], atol=1e-12)
    assert "overrides vector_field" in why_not_compiled(NumpyOscillator())
    assert why_not_compiled(HarmonicOscillator()) is None


def test_the_cache_key_is_the_users_source(tmp_path):
    """An edited field is a new parameter class (compiled anew); the same source keeps its name (its cache)."""
    module = tmp_path / "editme.py"
    text = ("from dataclasses import dataclass\nfrom typing import ClassVar\nfrom vpintegrator.systems import System\n"
            "@dataclass(frozen=True)\nclass Edit(System):\n    name: ClassVar[str] = 'edit'\n    dim: ClassVar[int] = 1\n"
            "    @staticmethod\n    def field(p, x):\n        return (-x[0],)\n")
    module.write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        from editme import Edit
    finally:
        sys.path.pop(0)
    before = _source_hash(Edit)
    assert _source_hash(Edit) == before
    module.write_text(text.replace("(-x[0],)", "(-2.0 * x[0],)"))
    assert _source_hash(Edit) != before


def test_a_rollout_row_on_a_user_system_says_it_ran_compiled():
    """vp-rollout's classical rows on a user's system record their runner: numba for a field that compiles."""
    from vpintegrator.rollout.steps import IntegratorStep

    for system, runner in ((HarmonicOscillator(), "numba"), (NumpyOscillator(), "numpy")):
        step = IntegratorStep(system, "implicit_midpoint", 0.1)
        step.start(np.array([[[1.0, 0.0]]]), np.array([np.inf]))  # one trajectory, a window of one state
        assert step.describe()["runner"] == runner


@pytest.mark.slow
def test_a_new_process_loads_the_user_loops_from_the_cache(tmp_path):
    """Two fresh processes with one NUMBA_CACHE_DIR: the first compiles (its INFO line), the second loads (no line),
    the same states."""
    code = ("import logging, sys, numpy as np; logging.basicConfig(level=logging.INFO)\n"
            f"sys.path.insert(0, {str(HERE)!r})\n"
            "import vpintegrator as vp; from user_systems import HarmonicOscillator\n"
            "print(repr(vp.integrate(HarmonicOscillator(), np.array([1.0, 0.0]), 0.1, 50, method='rk4').y[0, -1, 0]))\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout
    assert "compiling the numba kernels" not in runs[1].stderr, runs[1].stderr[-2000:]


def test_a_system_without_a_jacobian_rolls_out_without_a_volume_column(tmp_path, monkeypatch):
    """A classical row on a system given by its field alone: its states and errors, no volume column, one note (not
    NotImplementedError from the step's Jacobian, as a dysts flow without _jac got)."""
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.data.rollouts import read_rollout
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    monkeypatch.syspath_prepend(str(HERE))
    (tmp_path / "s.toml").write_text('[system]\nname = "user_systems:FieldOnly"\n[initial_conditions]\nsampler = "box"\n'
                                     'n_traj = 4\nlow = [-1.0, -1.0]\nhigh = [1.0, 1.0]\n[integration]\ndt = 0.1\n'
                                     't_end = 2.0\nmethod = "rk4"\n')
    res = CliRunner().invoke(gen_main, [str(tmp_path / "s.toml"), "--out", str(tmp_path / "d.h5"), "--quiet"])
    assert res.exit_code == 0, res.output
    run_rollouts(RolloutConfig(data=str(tmp_path / "d.h5"), out=str(tmp_path / "r.h5"), integrators=["rk4", "euler"],
                               heldout=2, workers=1))
    r = read_rollout(tmp_path / "r.h5")
    for row in ("rk4", "euler"):
        assert "gives no Jacobian" in r.methods[row].meta["volume_note"]
        assert np.isfinite(r.metrics[row].rel_error).all()
