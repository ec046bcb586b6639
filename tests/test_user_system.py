"""A user-defined System runs through the whole pipeline: register_system from Python, and
``system = "package.module:ClassName"`` in specs, vp-gen, vp-train, vp-rollout (in a fresh process,
rebuilt from the file alone) and vp-plot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator import VPIntegratorError, get_system, integrate, list_systems, register_system
from vpintegrator.cli.gen import main as gen_main
from vpintegrator.cli.plot import main as plot_main
from vpintegrator.cli.train import main as train_main
from vpintegrator.data import read_trajectories
from vpintegrator.data.rollouts import read_rollout

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _registry_as_it_was():
    """The systems these tests register (the user's, through register_system, a spec or a file's metadata) leave the
    registry as they found it, so that a test run after them in the same process (test_systems' registry names,
    under ``pytest -n auto --dist load``) sees the shipped systems only."""
    from vpintegrator.systems import registry

    saved = dict(registry._REGISTRY), dict(registry._DEFAULT_INSTANCES)
    yield
    for table, kept in zip((registry._REGISTRY, registry._DEFAULT_INSTANCES), saved):
        table.clear()
        table.update(kept)

HERE = Path(__file__).resolve().parent
SPEC = """description = "a user's harmonic oscillator"
[system]
name = "user_systems:HarmonicOscillator"
omega = 2.0
[initial_conditions]
sampler = "box"
n_traj = 8
low = [-1.0, -1.0]
high = [1.0, 1.0]
[integration]
dt = 0.1
t_end = 2.0
method = "implicit_midpoint"
seed = 3
"""


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_register_system_from_python():
    from user_systems import HarmonicOscillator

    register_system(HarmonicOscillator)
    assert "harmonic_oscillator" in list_systems()
    system = get_system("harmonic_oscillator", omega=3.0)
    traj = integrate(system, [[1.0, 0.0]], dt=0.01, n_steps=100, method="implicit_midpoint")
    energy = system.invariant("energy", traj.y)
    assert np.max(np.abs(energy - energy[:, :1])) < 1e-12  # implicit midpoint keeps quadratic invariants
    assert traj.system == system  # rebuilt from the metadata it wrote


def test_a_name_taken_by_another_class_is_refused():
    from vpintegrator.systems import RigidBody

    class Impostor(RigidBody):
        pass

    with pytest.raises(VPIntegratorError, match="'rigid_body' is taken"):
        register_system(Impostor)


def test_bad_import_paths_give_one_line_errors():
    with pytest.raises(VPIntegratorError, match="cannot import module 'no_such_module'"):
        get_system("no_such_module:Thing")
    with pytest.raises(VPIntegratorError, match="has no attribute 'Nope'"):
        get_system("user_systems:Nope")
    with pytest.raises(VPIntegratorError, match="not a vpintegrator System subclass"):
        get_system("user_systems:np")


def test_user_system_gen_train_rollout_plot_from_the_clis(tmp_path):
    spec = tmp_path / "oscillator.toml"
    spec.write_text(SPEC)
    data = tmp_path / "osc.h5"
    _ok(CliRunner().invoke(gen_main, [str(spec), "--out", str(data), "--quiet"]))
    traj = read_trajectories(data)
    assert traj.meta["system_class"] == "user_systems:HarmonicOscillator" and traj.meta["param_omega"] == 2.0

    run = tmp_path / "run"
    _ok(CliRunner().invoke(train_main, ["--data", str(data), "--model", "vpt", "--epochs", "3", "--batch-size", "32",
                                        "--set", "monitor=val_rollout", "--set", "val_rollout_steps=40",
                                        "--set", "val_fraction=0.25", "--device", "cpu", "--out", str(run)]))

    # a fresh process that has never seen the class: the file's system_class brings it back
    out = tmp_path / "roll.h5"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--model", f"vpt={run}",
         "--integrators", "implicit_midpoint,rk4", "--t-end", "4", "--reference", "data", "--device", "cpu",
         "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    r = read_rollout(out)
    assert type(r.system).__name__ == "HarmonicOscillator" and r.system.omega == 2.0
    assert np.nanmax(r.metrics["implicit_midpoint"].rel_error) < 1e-10  # its own data (--reference data), past t = 2

    figures = tmp_path / "figures"
    _ok(CliRunner().invoke(plot_main, [str(out), "--kind", "invariants", "--kind", "error", "--out", str(figures)]))
    assert {p.name for p in figures.iterdir()} >= {"invariants.pdf", "invariants.png", "error.pdf", "error.png"}
