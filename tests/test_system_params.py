"""Non-default system parameters survive every boundary: gen -> train (validation rollout) -> rollout.

The bug this guards against: readers that rebuilt the *default* system from a file, so that implicit
midpoint rolled out against its own data (rigid body, inertia (1, 2, 3)) showed relative errors of
0.48 and 0.63 instead of ~1e-12.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.gen import main as gen_main
from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.cli.train import main as train_main
from vpintegrator.data import read_trajectories
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.data import integrate
from vpintegrator.systems import get_system

pytestmark = pytest.mark.usefixtures("one_thread")

# spec, non-default parameters as --set entries (Volterra has no parameters), the method that makes the data
CASES = {
    "rigid_body": ("rigid_body", ["system.inertia=[1.0, 2.0, 3.0]"], "implicit_midpoint"),
    "coupled_oscillator": ("coupled_oscillator_box", ["system.m=[1.0, 3.0]", "system.k1=0.7", "system.k=2.0"],
                           "implicit_midpoint"),
    "abc_flow": ("abc_flow", ["system.A=0.5", "system.B=2.0", "system.C=1.5"], "rk4"),
    "volterra": ("volterra", [], "rk4"),
}


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("name", sorted(CASES))
def test_non_default_parameters_through_gen_train_rollout(tmp_path, name):
    spec, sets, method = CASES[name]
    data = tmp_path / "data.h5"
    set_args = [x for s in sets for x in ("--set", s)]
    _ok(CliRunner().invoke(gen_main, [spec, "--n-traj", "6", "--t-end", "2.0", "--dt", "0.1", "--method", method,
                                      *set_args, "--out", str(data), "--quiet"]))
    traj = read_trajectories(data)
    system = traj.system
    expected = get_system(name, **{s.split("=")[0].split(".")[1]: json.loads(s.split("=")[1]) for s in sets})
    assert system == expected
    if sets:
        assert system != get_system(name)

    # training: the validation rollout's reference beyond the data is continued with the file's system
    from vpintegrator.training.validation import RolloutValidator

    val = RolloutValidator(traj, n_steps=traj.n_steps + 10, seq_len=3, pred_window=3)
    again = integrate(expected, traj.y[:, -1], traj.dt, 10, method=method).y
    np.testing.assert_allclose(val.ref[:, traj.n_steps:].numpy(), again, rtol=0, atol=1e-12)
    run = tmp_path / "run"
    _ok(CliRunner().invoke(train_main, ["--data", str(data), "--model", "vpt", "--epochs", "2", "--batch-size", "16",
                                        "--set", "monitor=val_rollout", "--set", "val_rollout_steps=30",
                                        "--set", "val_fraction=0.34", "--device", "cpu", "--out", str(run)]))
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2

    # rollout: the data's own method against the data (--reference data), continued beyond the horizon with the
    # file's system: error ~0, not O(1)
    out = tmp_path / "roll.h5"
    _ok(CliRunner().invoke(rollout_main, ["--data", str(data), "--integrators", method, "--model", f"vpt={run}",
                                          "--t-end", "3.0", "--reference", "data", "--device", "cpu", "--out", str(out)]))
    r = read_rollout(out)
    assert r.system == expected
    assert np.nanmax(r.metrics[method].rel_error) < 1e-10
