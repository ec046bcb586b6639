"""Rollout files: schema 2 as written by run_rollouts, read_rollout's result, reading schema-1 files."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from vpintegrator.data import generate, load_spec
from vpintegrator.data.rollouts import (
    ROLLOUT_SCHEMA_VERSION,
    MethodMetrics,
    RolloutResult,
    read_rollout,
)
from vpintegrator.data.trajectories import Trajectories
from vpintegrator.errors import VPIntegratorError

DT = 0.2


@pytest.fixture(scope="module")
def rollout_file(tmp_path_factory):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    root = tmp_path_factory.mktemp("rf")
    data = root / "rb.h5"
    generate(load_spec("rigid_body", n_traj=4, t_end=2.0, dt=DT), out=data)
    out = root / "ro.h5"
    run_rollouts(RolloutConfig(data=data, out=out, integrators=["rk4", "splitting"], traj=[3, 1, 0], t_end=3.0))
    return out


def test_result_interface(rollout_file):
    r = read_rollout(rollout_file)
    assert isinstance(r, RolloutResult) and r.path == rollout_file
    assert r.meta["schema_version"] == ROLLOUT_SCHEMA_VERSION == 2
    assert r.meta["n_states"] == 16 and r.meta["n_steps"] == 15
    assert r.meta["data_n_states"] == 11 and r.meta["data_n_steps"] == 10
    assert r.t.shape == (16,) and r.traj_index.tolist() == [3, 1, 0]
    assert r.system.name == "rigid_body" and r.dt == DT and r.n_traj == 3
    assert r.invariant_names == ("energy", "casimir") and r.labels == ["rk4", "splitting"]
    assert isinstance(r.reference, Trajectories)
    assert r.reference.meta["label"] == "reference" and r.reference.meta["kind"] == "reference"
    assert r.reference.failed_step.tolist() == [-1, -1, -1] and r.reference.n_steps == 15
    for label, m in r.methods.items():
        assert isinstance(m, Trajectories) and m.meta["label"] == label and m.meta["kind"] == "integrator"
        assert m.system == r.system and m.failed_step is not None
        assert m.meta["seconds_per_step"] >= 0 and m.meta["init"] == "initial condition"
    assert set(r.metrics) == {"reference", "rk4", "splitting"}
    assert all(isinstance(m, MethodMetrics) for m in r.metrics.values())
    assert r.metrics["reference"].rel_error is None and r.metrics["rk4"].rel_error.shape == (3, 16)
    assert r.metrics["rk4"].invariants["energy"].shape == (3, 16)
    assert r.metrics["splitting"].log_det_J.shape == r.metrics["splitting"].cum_log_det_J.shape == (3, 15)
    assert r.metrics["splitting"].map_t.shape == (15,)
    assert [row["method"] for row in r.table] == ["rk4", "splitting"]


def test_traj_positions_and_max_points(rollout_file):
    full = read_rollout(rollout_file)
    sub = read_rollout(rollout_file, traj=[2, 0], max_points=6)
    assert sub.traj_index.tolist() == [3, 0]  # positions in the file, sorted
    assert sub.t.tolist() == full.t[::3].tolist()
    np.testing.assert_array_equal(sub.methods["rk4"].y, full.methods["rk4"].y[[0, 2]][:, ::3])
    np.testing.assert_array_equal(sub.metrics["rk4"].rel_error, full.metrics["rk4"].rel_error[[0, 2]][:, ::3])
    with pytest.raises(VPIntegratorError, match="out of range; the file holds 3") as info:
        read_rollout(rollout_file, traj=[3])
    assert info.value.key == "traj"


def test_reads_schema_version_1(rollout_file, tmp_path):
    """Version 1 stored counts of states in n_steps and data_n_steps; the reader gives v2 meanings."""
    old = tmp_path / "v1.h5"
    old.write_bytes(rollout_file.read_bytes())
    with h5py.File(old, "r+") as f:
        f.attrs["schema_version"] = 1
        f.attrs["n_steps"] = 16
        f.attrs["data_n_steps"] = 11
        del f.attrs["n_states"], f.attrs["data_n_states"]
    r = read_rollout(old)
    assert (r.meta["n_states"], r.meta["n_steps"], r.meta["data_n_states"], r.meta["data_n_steps"]) == (16, 15, 11, 10)
    np.testing.assert_array_equal(r.methods["rk4"].y, read_rollout(rollout_file).methods["rk4"].y)
    with h5py.File(old, "r+") as f:
        f.attrs["schema_version"] = 9
    with pytest.raises(VPIntegratorError, match="schema_version 9 is not supported"):
        read_rollout(old)


def test_reading_imports_neither_torch_nor_the_engine(rollout_file):
    code = (
        "import sys; from vpintegrator.data.rollouts import read_rollout; r = read_rollout(sys.argv[1]); "
        "r.system; print('torch' in sys.modules, 'vpintegrator.rollout' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(rollout_file)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_rollout_returns_trajectories():
    from vpintegrator.rollout import IntegratorStep, rollout

    y0 = np.array([[0.6, 0.0, 0.8]])
    res = rollout(IntegratorStep("rigid_body", "rk4", DT), y0, DT, 10, t0=1.0)
    assert isinstance(res, Trajectories) and res.n_steps == 10 and res.t[0] == 1.0
    assert res.failed_step.tolist() == [-1] and res.system.name == "rigid_body"
    assert {"seconds", "seconds_per_step", "setup_seconds", "integrator"} <= set(res.meta)
