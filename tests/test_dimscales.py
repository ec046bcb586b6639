"""HDF5 dimension scales and units (issue 33, item 11): trajectory files (plain, parametric, shards and their
index) and rollout files name their axes (``/t``, ``/trajectory``, ``/state``, ``/param``, ``map_step``) so
that xarray (h5netcdf) and generic HDF5 tools see real dimensions; ``Trajectories.to_xarray``; files
written before the scales read unchanged and the numbers of a new file are the old ones to the bit."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.gen import main as gen_main
from vpintegrator.data import Trajectories, generate, load_spec, read_trajectories
from vpintegrator.data.shards import shard_path
from vpintegrator.errors import VPIntegratorError

OLD = Path(__file__).parent / "data" / "trajectories" / "rigid_body_main_8e741bd.h5"


def _scale_names(ds: h5py.Dataset) -> list[str]:
    return [ds.dims[i][0].name if len(ds.dims[i]) else None for i in range(ds.ndim)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "rb.h5"
    result = CliRunner().invoke(gen_main, ["rigid_body", "--n-traj", "5", "--t-end", "1.0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_vp_gen_file_names_its_axes_with_units(data):
    with h5py.File(data, "r") as f:
        assert _scale_names(f["y"]) == ["/trajectory", "/t", "/state"]
        assert f["t"].is_scale and f["trajectory"].is_scale and f["state"].is_scale
        assert f["t"].attrs["units"] == "1" and f["y"].attrs["units"] == "1"
        assert [s.decode() for s in f["state"][()]] == ["z1", "z2", "z3"]  # RigidBody.state_names
        assert f["trajectory"][()].tolist() == [0, 1, 2, 3, 4]


def test_old_file_reads_unchanged_and_new_numbers_are_the_old(tmp_path):
    """A file of the vp-gen before the scales (no /trajectory, /state) reads as before, and the same spec
    written today has the same /t and /y to the last bit."""
    old = read_trajectories(OLD)
    with h5py.File(OLD, "r") as f:
        assert set(f) == {"t", "y"}
        raw_y, raw_t = f["y"][()], f["t"][()]
    assert np.array_equal(old.y, raw_y) and np.array_equal(old.t, raw_t)
    new_path = generate(load_spec("rigid_body", n_traj=4, t_end=1.0, method="implicit_midpoint"),
                        tmp_path / "new.h5", workers=1)
    new = read_trajectories(new_path)
    assert new.y.tobytes() == old.y.tobytes() and new.t.tobytes() == old.t.tobytes()
    assert new.meta["dt"] == old.meta["dt"] and new.meta["system"] == old.meta["system"]


def test_parametric_file_labels_params(tmp_path):
    path = generate(load_spec("rigid_body_family", n_traj=4, t_end=1.0, chunk_size=2), tmp_path / "fam.h5",
                    workers=1)
    with h5py.File(path, "r") as f:
        assert _scale_names(f["params"]) == ["/trajectory", "/param"]
        assert [s.decode() for s in f["param"][()]] == [str(s) for s in f["params"].attrs["names"]]
    traj = read_trajectories(path)
    assert traj.params.shape == (4, 3)


def test_shards_count_trajectories_in_the_whole_set_and_the_index_is_labelled(tmp_path):
    spec = load_spec("rigid_body", n_traj=6, t_end=1.0, chunk_size=2)
    out = tmp_path / "s.h5"
    for i in (1, 2):
        generate(spec, out, shard=f"{i}/2", workers=1)
    with h5py.File(shard_path(out, (2, 2)), "r") as f:
        start = int(f.attrs["shard_traj_start"])
        assert start > 0 and f["trajectory"][0] == start
        assert _scale_names(f["y"]) == ["/trajectory", "/t", "/state"]
    with h5py.File(out, "r") as f:  # the index: a virtual /y over the shards, labelled like a plain file
        assert f["trajectory"][()].tolist() == list(range(6))
        assert _scale_names(f["y"]) == ["/trajectory", "/t", "/state"]
    assert read_trajectories(out).y.shape == (6, 11, 3)


def test_rollout_file_names_its_axes(data, tmp_path):
    from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts

    out = tmp_path / "roll.h5"
    run_rollouts(RolloutConfig(data=str(data), out=str(out), integrators=["rk4"], traj=[1, 3]))
    with h5py.File(out, "r") as f:
        assert f["trajectory"][()].tolist() == [1, 3]  # the rows' indices in the data file
        for group in ("reference", "methods/rk4"):
            assert _scale_names(f[group]["y"]) == ["/trajectory", "/t", "/state"]
            assert _scale_names(f[group]["failed_step"]) == ["/trajectory"]
        assert _scale_names(f["methods/rk4/rel_error"]) == ["/trajectory", "/t"]
        assert _scale_names(f["methods/rk4/invariants/energy"]) == ["/trajectory", "/t"]
        assert _scale_names(f["methods/rk4/log_det_J"]) == ["/trajectory", "/methods/rk4/map_step"]
    assert read_rollout(out).n_traj == 2


def test_system_without_state_names_gets_numbered_components():
    from vpintegrator.data.trajectories import state_names, state_units

    assert state_names("coupled_oscillator", 4) == ("q1", "q2", "p1", "p2")
    assert state_names(None, 2) == ("y1", "y2")
    assert state_names("no_such_system", 3) == ("y1", "y2", "y3")
    assert state_units("rigid_body") == "1"


# --------------------------------------------------------------------------- xarray (optional)


def test_xarray_sees_real_dimensions_and_to_xarray_agrees(data):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    with xr.open_dataset(data, engine="h5netcdf") as ds:
        ds = ds.load()
    assert dict(ds.sizes) == {"trajectory": 5, "t": 11, "state": 3}
    assert not any(d.startswith("phony") for d in ds.dims)
    assert list(ds.state.values) == ["z1", "z2", "z3"] and ds.t.attrs["units"] == "1"
    traj = read_trajectories(data)
    mine = traj.to_xarray()
    assert mine.y.dims == ("trajectory", "t", "state")
    assert mine.y.values.tobytes() == ds.y.values.tobytes() == traj.y.tobytes()
    assert np.array_equal(mine.t.values, ds.t.values) and list(mine.state.values) == list(ds.state.values)
    assert mine.attrs["system"] == "rigid_body" and mine.attrs["dt"] == traj.meta["dt"]
    assert float(mine.y.sel(t=traj.t[4], state="z2")[0]) == traj.y[0, 4, 1]


def test_to_xarray_of_a_parametric_set_has_params_coordinates(tmp_path):
    pytest.importorskip("xarray")
    traj = Trajectories(y=np.zeros((2, 3, 3)), t=np.arange(3.0), meta={"system": "rigid_body", "dt": 1.0},
                        params=np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                        param_names=("inertia[0]", "inertia[1]", "inertia[2]"),
                        failed_step=np.array([-1, 2]))
    ds = traj.to_xarray()
    assert ds.params.dims == ("trajectory", "param") and list(ds.param.values) == list(traj.param_names)
    assert float(ds.params.sel(param="inertia[1]")[1]) == 5.0
    assert ds.failed_step.values.tolist() == [-1, 2]


def test_to_xarray_without_xarray_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "xarray", None)
    traj = Trajectories(y=np.zeros((1, 2, 3)), t=np.arange(2.0))
    with pytest.raises(VPIntegratorError, match=r"needs xarray.*pip install") as err:
        traj.to_xarray()
    assert "\n" not in str(err.value)
