"""Rollout files: schema 2 as written by run_rollouts, read_rollout's result, reading schema-1 files; the
writer (RolloutWriter) read back by the reader; the one attribute codec of both file kinds."""

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
    RolloutWriter,
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


def _write_by_hand(path, extra_attrs=None, fail=False):
    """A two-method rollout file written with RolloutWriter from known arrays; returns them."""
    from vpintegrator.systems import get_system, system_meta

    rng = np.random.default_rng(0)
    system = get_system("rigid_body")
    n_traj, n_states = 3, 9
    t = 0.1 * np.arange(n_states)
    ref, y = rng.normal(size=(n_traj, n_states, 3)), rng.normal(size=(n_traj, n_states, 3))
    inv = {name: rng.normal(size=(n_traj, n_states)) for name in system.invariant_names}
    err = rng.normal(size=(n_traj, n_states))
    map_step = np.arange(1, n_states)
    ld = rng.normal(size=(n_traj, n_states - 1))
    attrs = {**system_meta(system), "dt": 0.1, "t0": 0.0, "t_end": float(t[-1]), "n_traj": n_traj,
             "n_states": n_states, "n_steps": n_states - 1, "invariant_names": list(system.invariant_names),
             "methods": ["a"], "method_kinds": ["integrator"], "init": None}
    with RolloutWriter(path, attrs, t, np.array([5, 1, 2]), dim=3, invariant_names=system.invariant_names,
                       chunk_steps=4, extra_attrs=extra_attrs) as w:
        r = w.reference()
        for k0 in range(0, n_states, 4):  # blocks as the engines hand them over
            r.write(k0, {"y": ref[:, k0 : k0 + 4], **{f"invariant/{n}": v[:, k0 : k0 + 4] for n, v in inv.items()}})
        r.close(np.full(n_traj, -1), {"label": "reference", "kind": "reference", "source": "by hand"})
        m = w.method("a", map_step=map_step)
        for k0 in range(0, n_states, 4):
            maps = np.flatnonzero((map_step >= k0) & (map_step < k0 + 4))
            m.write(k0, {"y": y[:, k0 : k0 + 4], "rel_error": err[:, k0 : k0 + 4], "maps": maps,
                         "log_det_J": ld[:, maps], "cum_log_det_J": np.cumsum(ld, axis=1)[:, maps],
                         **{f"invariant/{n}": v[:, k0 : k0 + 4] for n, v in inv.items()}})
        if fail:
            raise KeyboardInterrupt
        m.close(np.array([-1, 4, -1]), {"kind": "integrator", "seconds_per_step": 0.5, "note": None})
        w.finish([{"method": "a", "final_rel_error": 1.5}])
    return ref, y, inv, err, ld


def test_writer_read_back_by_the_reader(tmp_path):
    path = tmp_path / "hand.h5"
    ref, y, inv, err, ld = _write_by_hand(path, extra_attrs={"provenance": {"command": "vp-rollout", "n": 2}})
    r = read_rollout(path)
    np.testing.assert_array_equal(r.reference.y, ref)
    np.testing.assert_array_equal(r.methods["a"].y, y)
    np.testing.assert_array_equal(r.metrics["a"].rel_error, err)
    np.testing.assert_array_equal(r.metrics["a"].log_det_J, ld)
    np.testing.assert_array_equal(r.metrics["a"].cum_log_det_J, np.cumsum(ld, axis=1))
    for name, v in inv.items():
        np.testing.assert_array_equal(r.metrics["reference"].invariants[name], v)
        np.testing.assert_array_equal(r.metrics["a"].invariants[name], v)
    assert r.traj_index.tolist() == [5, 1, 2] and r.methods["a"].failed_step.tolist() == [-1, 4, -1]
    assert r.meta["schema"] == "vpintegrator-rollout" and r.meta["schema_version"] == ROLLOUT_SCHEMA_VERSION
    # a mapping (the extra attributes) by the one codec: JSON text listed in json_keys, a dict again when read
    assert r.meta["provenance"] == {"command": "vp-rollout", "n": 2} and "json_keys" not in r.meta
    assert "init" not in r.meta and "note" not in r.methods["a"].meta  # None: left out
    assert r.methods["a"].meta["seconds_per_step"] == 0.5 and r.table == [{"method": "a", "final_rel_error": 1.5}]
    assert r.system.name == "rigid_body"
    with h5py.File(path) as f:
        assert [str(k.decode() if isinstance(k, bytes) else k) for k in f.attrs["json_keys"]] == ["provenance"]
        assert "json_keys" not in f["methods/a"].attrs  # written only where some value is JSON


def test_writer_is_atomic(tmp_path):
    path = tmp_path / "hand.h5"
    with pytest.raises(KeyboardInterrupt):
        _write_by_hand(path, fail=True)
    assert list(tmp_path.iterdir()) == []


def test_a_vp_rollout_file_stores_no_json_keys(rollout_file):
    """Every attribute vp-rollout writes is stored natively, as before the one codec: no json_keys, so files
    of earlier versions (which had none) and of this one read alike."""
    with h5py.File(rollout_file) as f:
        groups = [f, f["reference"], *f["methods"].values()]
        assert all("json_keys" not in g.attrs for g in groups)


def test_write_attrs_keeps_earlier_json_keys(tmp_path):
    """The one attribute encoder (trajectory and rollout files): values written in two calls keep their
    JSON keys; the reader decodes both."""
    from vpintegrator.data.h5attrs import _attrs_to_meta, write_attrs

    with h5py.File(tmp_path / "a.h5", "w") as f:
        write_attrs(f, {"a": {"x": 1}, "b": 2, "s": np.str_("v")})
        write_attrs(f, {"c": [[1, 2], [3, 4]], "d": None, "a2": "text"}, skip_none=True)
        meta = _attrs_to_meta(f.attrs)
        assert isinstance(f.attrs["s"], str)
    assert meta == {"a": {"x": 1}, "b": 2, "s": "v", "c": [[1, 2], [3, 4]], "a2": "text"}


def test_a_listed_method_group_that_is_gone_is_one_line(rollout_file, tmp_path):
    """Issue 36: a rollout file whose method group was deleted raised h5py's KeyError in vp-plot."""
    import shutil

    import h5py

    damaged = tmp_path / "damaged.h5"
    shutil.copy(rollout_file, damaged)
    with h5py.File(damaged, "a") as f:
        label = sorted(f["methods"])[0]
        del f[f"methods/{label}"]
    with pytest.raises(VPIntegratorError, match=rf"damaged.h5: the rollout file lists 'methods/{label}' but has no "
                                                r"readable object"):
        read_rollout(damaged)


def test_a_label_per_trajectory_of_many_trajectories_is_written(tmp_path):
    """A rollout of 5 000 trajectories: its per-trajectory labels (``traj_split``, over 64 KiB) are an attribute
    HDF5's earliest format refuses; the rollout files use the 1.8 format, which stores it densely."""
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    data = generate(load_spec("rigid_body", n_traj=5000, t_end=0.4, dt=0.2, compression="none"),
                    out=tmp_path / "big.h5")
    report = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "roll.h5"), integrators=["rk4"],
                                        t_end=0.4))
    with h5py.File(report.out, "r") as f:
        assert len(f.attrs["traj_split"]) == 5000
    assert read_rollout(report.out).n_traj == 5000
