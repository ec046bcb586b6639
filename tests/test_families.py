"""Families of systems: per-trajectory parameters from the spec to the file, the readers, the shards, the
exact reference, the classical integrators, the invariants, ``--heldout`` and the parameter splits."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from vpintegrator.data import Trajectories, read_trajectories, write_trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import CoupledOscillator, RigidBody
from vpintegrator.systems.family import SystemFamily, param_columns, param_row, system_with

FIXTURE = Path(__file__).parent / "data" / "trajectories" / "rigid_body_before_params.h5"
INERTIA = ("inertia[0]", "inertia[1]", "inertia[2]")


# --------------------------------------------------------------------------- columns and families

def test_columns_flatten_vectors_with_zero_based_indices():
    assert param_columns(RigidBody()) == list(INERTIA)
    assert param_columns(CoupledOscillator()) == ["m[0]", "m[1]", "k1", "k2", "k"]
    s = system_with(CoupledOscillator(), ["m[1]", "k"], [3.0, 0.25])
    assert s.m == (2.0, 3.0) and s.k == 0.25 and s.k1 == 1.5
    assert param_row(s, ["k", "m[1]"]).tolist() == [0.25, 3.0]
    with pytest.raises(VPIntegratorError, match="no parameter column 'inertia\\[3\\]'|out of range"):
        system_with(RigidBody(), ["inertia[3]"], [1.0])
    with pytest.raises(VPIntegratorError, match="vector"):
        system_with(RigidBody(), ["inertia"], [1.0])


def test_family_evaluates_each_row_with_its_own_parameters():
    systems = [RigidBody((1.0, 2.0, 3.0)), RigidBody((0.7, 1.1, 2.9)), RigidBody((1.0, 2.0, 3.0))]
    fam = SystemFamily(systems, INERTIA)
    y = np.random.default_rng(0).normal(size=(3, 4, 3))
    energy = fam.invariant("energy", y)
    for i, s in enumerate(systems):
        np.testing.assert_array_equal(energy[i], s.invariant("energy", y[i]))
        np.testing.assert_array_equal(fam.vector_field(y)[i], s.vector_field(y[i]))
    assert len(fam.groups()) == 2
    with pytest.raises(VPIntegratorError, match="one row per trajectory"):
        fam.invariants(y[:2])


# --------------------------------------------------------------------------- the schema and Trajectories

def _traj(n=4, params=True):
    rng = np.random.default_rng(1)
    kw = dict(params=rng.uniform(0.5, 3, size=(n, 3)), param_names=INERTIA) if params else {}
    return Trajectories(rng.normal(size=(n, 3, 3)), np.arange(3) * 0.1, {"system": RigidBody(), "dt": 0.1}, **kw)


def test_params_round_trip_select_and_system_for(tmp_path):
    tr = _traj()
    write_trajectories(tmp_path / "a.h5", tr)
    with h5py.File(tmp_path / "a.h5") as f:
        assert f["params"].shape == (4, 3) and list(f["params"].attrs["names"]) == list(INERTIA)
    back = read_trajectories(tmp_path / "a.h5")
    np.testing.assert_array_equal(back.params, tr.params)
    assert back.param_names == INERTIA and back.parametric
    assert back.system_for(2).inertia == tuple(tr.params[2])
    sub = back.select([3, 1])
    np.testing.assert_array_equal(sub.params, tr.params[[3, 1]])
    assert sub.system_for(0).inertia == tuple(tr.params[3])
    assert isinstance(back.system, SystemFamily) and back.system[1].inertia == tuple(tr.params[1])
    one = read_trajectories(tmp_path / "a.h5", traj=[2])
    np.testing.assert_array_equal(one.params, tr.params[[2]])
    both = read_trajectories([tmp_path / "a.h5", tmp_path / "a.h5"], traj=[5, 0])
    np.testing.assert_array_equal(both.params, tr.params[[1, 0]])
    names, table = back.param_table()
    assert names == INERTIA and np.array_equal(table, tr.params)


def test_old_file_reads_as_constant_parameters():
    tr = read_trajectories(FIXTURE)  # written by vp-gen before per-trajectory parameters existed
    assert tr.params is None and not tr.parametric and tr.param_names == ()
    assert isinstance(tr.system, RigidBody) and tr.system_for(1) == tr.system
    names, table = tr.param_table()
    assert names == INERTIA and np.array_equal(table, np.tile(tr.system.inertia, (tr.n_traj, 1)))
    assert "params" not in h5py.File(FIXTURE, "r")


def test_bad_params_refused(tmp_path):
    with pytest.raises(VPIntegratorError, match="Trajectories.params must have shape"):
        Trajectories(np.zeros((2, 3, 3)), np.arange(3.0), {}, params=np.zeros((3, 3)), param_names=INERTIA)
    write_trajectories(tmp_path / "a.h5", _traj())
    with h5py.File(tmp_path / "a.h5", "r+") as f:
        del f["params"].attrs["names"]
    with pytest.raises(VPIntegratorError, match="'/params'"):
        read_trajectories(tmp_path / "a.h5")


