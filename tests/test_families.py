"""Families of systems: per-trajectory parameters from the spec to the file, the readers, the shards, the
exact reference, the classical integrators, the invariants, ``--heldout`` and the parameter splits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from vpintegrator.data import Trajectories, generate, load_spec, read_metadata, read_trajectories, write_trajectories
from vpintegrator.data.param_dists import check_parameters, draw_parameters
from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import CoupledOscillator, RigidBody, get_system
from vpintegrator.systems.family import SystemFamily, param_columns, param_row, system_with

FIXTURE = Path(__file__).parent / "data" / "trajectories" / "rigid_body_before_params.h5"
INERTIA = ("inertia[0]", "inertia[1]", "inertia[2]")


def _dop853(system, y0, t):
    """An independent per-trajectory solve: SciPy's DOP853 on the system's own vector field."""
    sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y0, method="DOP853", t_eval=t,
                    rtol=1e-12, atol=1e-12)
    return sol.y.T


def _small(name, **over):
    return load_spec(name, **{"n_traj": 5, "t_end": 2.0, "chunk_size": 2, **over})


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


# --------------------------------------------------------------------------- the spec section

def test_distributions_are_seeded_and_checked():
    rb = RigidBody()
    table = {"inertia": {"dist": "log_uniform", "low": [0.5, 1, 2], "high": 3.0}}
    cols, a = draw_parameters(rb, table, 50, seed=3)
    _, b = draw_parameters(rb, table, 50, seed=3)
    _, c = draw_parameters(rb, table, 50, seed=4)
    assert cols == INERTIA and np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.all(a >= [0.5, 1, 2]) and np.all(a <= 3)
    co = CoupledOscillator()
    table = {"m": {"dist": "list", "values": [[1.0, 2.0], [3.0, 4.0]]}, "k1": {"dist": "grid", "values": [1, 2, 3]},
             "k2": {"dist": "grid", "values": [0.1, 0.2]}, "k": {"dist": "normal", "mean": 1.0, "std": 0.1},
             }
    cols, v = draw_parameters(co, table, 12, seed=0)
    assert cols == ("m[0]", "m[1]", "k1", "k2", "k")
    assert {tuple(r) for r in v[:, :2]} <= {(1.0, 2.0), (3.0, 4.0)}
    assert [tuple(r) for r in v[:6, 2:4]] == [(1, .1), (1, .2), (2, .1), (2, .2), (3, .1), (3, .2)]
    np.testing.assert_array_equal(v[6:, 2:4], v[:6, 2:4])  # the grid's points in turn
    _, f = draw_parameters(co, {"k": {"dist": "fixed", "value": 0.5}}, 3, seed=0)
    assert f.tolist() == [[0.5]] * 3
    for bad, match in [({"inertia": {"dist": "uniform", "low": 2, "high": 1}}, "low must be < high"),
                       ({"inertia": {"dist": "beta"}}, "unknown dist"),
                       ({"mass": {"dist": "fixed", "value": 1}}, "no parameter 'mass'"),
                       ({"inertia": {"dist": "uniform", "low": [1, 2], "high": 3}}, "3 numbers"),
                       ({"inertia": {"dist": "normal", "mean": 1.0}}, "missing std")]:
        with pytest.raises(VPIntegratorError, match=match):
            check_parameters(rb, bad)
    with pytest.raises(VPIntegratorError, match="trajectory 0's draw is not a valid system"):
        draw_parameters(rb, {"inertia": {"dist": "fixed", "value": -1.0}}, 2, seed=0)


def test_shipped_family_specs_and_overrides(tmp_path):
    spec = load_spec("rigid_body_family")
    assert spec.parameters["inertia"] == {"dist": "uniform", "low": 0.5, "high": 3.0}
    assert set(load_spec("coupled_oscillator_family").parameters) == {"m", "k1", "k2", "k"}
    # the spec written back reads to an equal spec, [parameters] included
    (tmp_path / "s.toml").write_text(spec.to_toml())
    assert load_spec(tmp_path / "s.toml").parameters == spec.parameters
    with pytest.raises(VPIntegratorError, match="unknown dist"):
        spec.replace(parameters={"inertia": {"dist": "beta"}})
    from vpintegrator.data.spec import spec_overrides_from_set

    over = spec_overrides_from_set({"parameters": {"inertia": {"dist": "fixed", "value": 1.0}}})
    assert spec.replace(**over).parameters["inertia"]["dist"] == "fixed"


# --------------------------------------------------------------------------- generation

@pytest.mark.parametrize("name", ["rigid_body_family", "coupled_oscillator_family"])
def test_generate_matches_independent_dop853_per_trajectory(name):
    spec = _small(name)
    tr = generate(spec, workers=1)
    assert tr.params.shape == (5, len(tr.param_names)) and len(np.unique(tr.params[:, 0])) == 5
    for i in range(tr.n_traj):
        system = tr.system_for(i)
        ref = _dop853(system, tr.y[i, 0], tr.t)
        np.testing.assert_allclose(tr.y[i], ref, rtol=0, atol=1e-10)
        for inv in system.invariant_names:  # each invariant conserved with the trajectory's own parameters
            v = system.invariant(inv, tr.y[i])
            assert np.max(np.abs(v - v[0])) < 1e-9
    # the initial conditions are those of the same spec without [parameters]: the draws are a stream of their own
    plain = generate(dataclasses.replace(spec, parameters={}), workers=1)
    np.testing.assert_array_equal(plain.y[:, 0], tr.y[:, 0])
    assert plain.params is None


def test_constant_parameters_bit_identical_to_a_plain_file(tmp_path):
    """A [parameters] section that fixes every parameter at the base values gives the plain file's states bit
    for bit (each trajectory is integrated on its own in both)."""
    spec = _small("rigid_body", n_traj=6)
    fixed = spec.replace(parameters={"inertia": {"dist": "fixed", "value": list(RigidBody().inertia)}})
    a, b = generate(spec, workers=1), generate(fixed, workers=1)
    np.testing.assert_array_equal(a.y, b.y)
    assert b.params.shape == (6, 3) and np.all(b.params == RigidBody().inertia)


def test_vp_gen_writes_params_and_shards_carry_them(tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main

    args = ["rigid_body_family", "--set", "n_traj=5", "--set", "t_end=1.0", "--set", "chunk_size=2", "--workers", "1"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "whole.h5")])
    assert res.exit_code == 0, res.output
    whole = read_trajectories(tmp_path / "whole.h5")
    assert whole.param_names == INERTIA and whole.params.shape == (5, 3)
    assert "parameter_dists" in read_metadata(tmp_path / "whole.h5")
    for i in (1, 2):
        res = CliRunner().invoke(main, [*args, "--shard", f"{i}/2", "--out", str(tmp_path / "set.h5")])
        assert res.exit_code == 0, res.output
    index = read_trajectories(tmp_path / "set.h5")
    np.testing.assert_array_equal(index.y, whole.y)
    np.testing.assert_array_equal(index.params, whole.params)
    part = read_trajectories(tmp_path / "set.h5", traj=[4, 1])
    np.testing.assert_array_equal(part.params, whole.params[[4, 1]])
    with h5py.File(tmp_path / "set.h5") as f:  # the index's own /params: a virtual dataset over the shards'
        np.testing.assert_array_equal(f["params"][:], whole.params)
    shard1 = read_trajectories(tmp_path / "set.shard-1-of-2.h5")
    np.testing.assert_array_equal(shard1.params, whole.params[: shard1.n_traj])


# --------------------------------------------------------------------------- vp-rollout of a parametric file

@pytest.fixture(scope="module")
def family_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fam") / "rb_family.h5"
    generate(_small("rigid_body_family", n_traj=4, t_end=2.0), out=path, workers=1)
    return path


def _rollout(tmp_path, data, name="ro.h5", **kw):
    from vpintegrator.data.rollouts import read_rollout
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    cfg = dict(data=str(data), out=str(tmp_path / name), integrators=["rk4", "implicit_midpoint", "exact_flow"],
               t_end=4.0, workers=1)
    report = run_rollouts(RolloutConfig(**{**cfg, **kw}))
    return report, read_rollout(tmp_path / name)


def test_rollout_uses_each_trajectorys_parameters(tmp_path, family_file):
    from vpintegrator.data.integration import integrate

    data = read_trajectories(family_file)
    _, ro = _rollout(tmp_path, family_file)
    assert isinstance(ro.system, SystemFamily)
    np.testing.assert_array_equal(ro.reference.params, data.params)
    assert ro.meta["parameter_columns"] == list(INERTIA)
    t = ro.t
    for i in range(data.n_traj):
        system = data.system_for(i)
        # the reference: the data, continued beyond t = 2 by DOP853 with the trajectory's own inertia
        np.testing.assert_allclose(ro.reference.y[i], _dop853(system, data.y[i, 0], t), rtol=0, atol=1e-9)
        np.testing.assert_allclose(ro.methods["exact_flow"].y[i], ro.reference.y[i], rtol=0, atol=1e-9)
        rk4 = integrate(system, data.y[i : i + 1, 0], 0.2, t.size - 1, method="rk4").y[0]
        np.testing.assert_allclose(ro.methods["rk4"].y[i], rk4, rtol=0, atol=1e-13)
        for label in ("rk4", "implicit_midpoint", "reference"):
            got = ro.metrics[label].invariants["energy"][i]
            states = ro.reference.y[i] if label == "reference" else ro.methods[label].y[i]
            np.testing.assert_allclose(got, system.invariant("energy", states), rtol=1e-15, atol=0)
    # implicit midpoint keeps every quadratic invariant of the trajectory's own system to rounding; with
    # another trajectory's inertia its energy would drift at the level of the method's error
    row = next(r for r in ro.table if r["method"] == "implicit_midpoint")
    assert row["max_rel_drift_energy"] < 1e-13 and row["max_rel_drift_casimir"] < 1e-13


def test_rollout_of_constant_parameters_bit_identical_to_plain_file(tmp_path):
    spec = _small("rigid_body", n_traj=4)
    plain, fixed = tmp_path / "plain.h5", tmp_path / "fixed.h5"
    generate(spec, out=plain, workers=1)
    generate(spec.replace(parameters={"inertia": {"dist": "fixed", "value": list(RigidBody().inertia)}}),
             out=fixed, workers=1)
    _, a = _rollout(tmp_path, plain, "a.h5")
    _, b = _rollout(tmp_path, fixed, "b.h5")
    assert b.reference.params is not None and a.reference.params is None
    np.testing.assert_array_equal(a.reference.y, b.reference.y)
    for label in a.methods:
        np.testing.assert_array_equal(a.methods[label].y, b.methods[label].y)
        for name in ("energy", "casimir"):
            np.testing.assert_array_equal(a.metrics[label].invariants[name], b.metrics[label].invariants[name])
    assert [r["final_rel_error"] for r in a.table] == [r["final_rel_error"] for r in b.table]


def test_heldout_draws_new_conditions_and_new_parameters(tmp_path, family_file):
    import json

    from vpintegrator.rollout.splits import heldout_seed

    data = read_trajectories(family_file)
    _, ro = _rollout(tmp_path, family_file, heldout=3, n_traj=4, integrators=["rk4"])
    assert ro.reference.params.shape == (7, 3)
    np.testing.assert_array_equal(ro.reference.params[:4], data.params)
    new = ro.reference.params[4:]
    meta = read_metadata(family_file)
    seed = heldout_seed(meta, None)
    assert ro.meta["heldout_seed"] == seed
    _, expect = draw_parameters(RigidBody(), json.loads(meta["parameter_dists"]), 3, seed)
    np.testing.assert_array_equal(new, expect)
    assert not np.isin(new, data.params).any() and np.all((new >= 0.5) & (new <= 3.0))
    for i in range(4, 7):
        system = RigidBody(tuple(ro.reference.params[i]))
        np.testing.assert_allclose(ro.reference.y[i], _dop853(system, ro.reference.y[i, 0], ro.t), rtol=0, atol=1e-9)
    # another heldout seed: other parameters
    _, other = _rollout(tmp_path, family_file, "o.h5", heldout=3, n_traj=4, heldout_seed=seed + 1,
                        integrators=["rk4"])
    assert not np.array_equal(other.reference.params[4:], new)


def test_rollout_shards_and_workers_carry_parameters(tmp_path):
    from vpintegrator.data.rollouts import read_rollout
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    path = tmp_path / "d.h5"
    generate(_small("rigid_body_family", n_traj=10, t_end=1.0), out=path, workers=1)
    cfg = dict(data=str(path), integrators=["rk4", "implicit_midpoint"], t_end=2.0, workers=1)
    run_rollouts(RolloutConfig(**cfg, out=str(tmp_path / "whole.h5")))
    for i in (1, 2):
        run_rollouts(RolloutConfig(**cfg, out=str(tmp_path / "set.h5")), shard=(i, 2))
    whole, index = read_rollout(tmp_path / "whole.h5"), read_rollout(tmp_path / "set.h5")
    np.testing.assert_array_equal(index.reference.params, whole.reference.params)
    for label in whole.methods:
        np.testing.assert_array_equal(index.methods[label].y, whole.methods[label].y)
    run_rollouts(RolloutConfig(**{**cfg, "workers": 2}, out=str(tmp_path / "w2.h5")))
    w2 = read_rollout(tmp_path / "w2.h5")
    for label in whole.methods:
        np.testing.assert_array_equal(w2.methods[label].y, whole.methods[label].y)


def test_model_on_a_parametric_file_gets_per_trajectory_rows(tmp_path, family_file):
    import torch

    from vpintegrator.models import build_model

    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3).double()
    report, ro = _rollout(tmp_path, family_file, models=[("vpt", model)], integrators=["rk4"], init="rk4")
    data = read_trajectories(family_file)
    for i in range(data.n_traj):  # the model's invariants are measured with each trajectory's own energy
        system = data.system_for(i)
        states = ro.methods["vpt"].y[i]
        ok = np.isfinite(states).all(-1)
        np.testing.assert_allclose(ro.metrics["vpt"].invariants["energy"][i][ok],
                                   system.invariant("energy", states[ok]), rtol=1e-15)
        # its first window: RK4 with the trajectory's own inertia
        from vpintegrator.data.integration import integrate

        np.testing.assert_allclose(states[:3], integrate(system, data.y[i : i + 1, 0], 0.2, 2, method="rk4").y[0],
                                   rtol=0, atol=1e-14)


# --------------------------------------------------------------------------- parameter splits

@pytest.mark.parametrize("mode", ["interpolation", "extrapolation"])
def test_parameter_split_holds_out_a_region_of_the_box(mode):
    from vpintegrator.rollout.splits import parameter_split

    rng = np.random.default_rng(0)
    params = rng.uniform(0.5, 3.0, size=(200, 3))
    tr = Trajectories(rng.normal(size=(200, 2, 3)), np.arange(2) * 0.1, {"system": RigidBody()}, params=params,
                      param_names=INERTIA)
    rec = parameter_split(tr, mode, test_fraction=0.2, val_fraction=0.1, seed=5)
    split, by = rec["split"], rec["split_by"]
    assert len(split["test"]) == 40 and len(split["val"]) == 20 and len(split["train"]) == 140
    assert sorted(split["train"] + split["val"] + split["test"]) == list(range(200))
    u = (params - params.min(0)) / (params.max(0) - params.min(0))
    d = np.max(np.abs(u - np.array(by["center"])), axis=1)
    test = np.zeros(200, bool)
    test[split["test"]] = True
    if mode == "interpolation":  # a cube inside the box: every test point nearer its centre than any other
        assert np.all((np.array(by["center"]) >= 0.25) & (np.array(by["center"]) <= 0.75))
        assert d[test].max() <= d[~test].min()
    else:  # the box's ends: every test point farther from the centre than any other
        assert by["center"] == [0.5, 0.5, 0.5] and d[test].min() >= d[~test].max()
    assert by["radius"] == pytest.approx(d[test].max() if mode == "interpolation" else d[test].min())
    assert parameter_split(tr, mode, 0.2, 0.1, seed=5) == rec
    with pytest.raises(VPIntegratorError, match="no /params"):
        parameter_split(read_trajectories(FIXTURE))


def test_rollout_labels_rows_by_a_models_parameter_split(tmp_path):
    import torch

    from vpintegrator.models import build_model
    from vpintegrator.rollout.splits import parameter_split

    path = tmp_path / "d.h5"
    generate(_small("rigid_body_family", n_traj=10, t_end=1.0), out=path, workers=1)
    rec = parameter_split(read_trajectories(path), "extrapolation", test_fraction=0.3, val_fraction=0.2, seed=1)
    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3).double()
    model.training_split, model.training_split_data = rec["split"], rec["split_data"]
    _, ro = _rollout(tmp_path, path, models=[("vpt", model)], integrators=["rk4"], t_end=1.0)
    assert ro.traj_index.tolist() == rec["split"]["test"]  # the test split rolled out by default
    assert {r["split"] for r in ro.table} == {"test"}
    _, ro = _rollout(tmp_path, path, "all.h5", models=[("vpt", model)], integrators=["rk4"], t_end=1.0,
                     traj=list(range(10)))
    labels = ro.methods["vpt"].meta["split"]
    for name in ("train", "val", "test"):
        assert [i for i, lab in enumerate(labels) if lab == name] == rec["split"][name]


# --------------------------------------------------------------------------- work-precision

def test_work_precision_of_a_parametric_file_uses_true_parameters(tmp_path, family_file):
    from vpintegrator.data.integration import integrate
    from vpintegrator.metrics import relative_error
    from vpintegrator.rollout import RolloutConfig
    from vpintegrator.rollout.precision import run_work_precision

    cfg = RolloutConfig(data=str(family_file), out=str(tmp_path / "ro.h5"), integrators=["rk4", "implicit_midpoint"],
                        t_end=2.0)
    csv, md, rows = run_work_precision(cfg, repeats=1)
    assert csv.exists() and md.exists()
    data = read_trajectories(family_file)
    rk4 = next(r for r in rows if r.method == "rk4" and r.h == pytest.approx(0.2))
    errors = []
    for i in range(data.n_traj):  # independently: RK4 and DOP853 with trajectory i's inertia
        system = data.system_for(i)
        y = integrate(system, data.y[i : i + 1, 0], 0.2, 10, method="rk4").y[0, -1]
        ref = _dop853(system, data.y[i, 0], np.array([0.0, 2.0]))[-1]
        errors.append(relative_error(y[None, None], ref[None, None])[0, 0])
    assert rk4.error_max == pytest.approx(max(errors), rel=1e-6)
    assert rk4.error_median == pytest.approx(np.percentile(errors, 50), rel=1e-6)
    # implicit midpoint keeps each trajectory's own energy to rounding at every step size
    assert all(r.drift_max < 1e-13 for r in rows if r.method == "implicit_midpoint")
    dop = [r for r in rows if r.method == "dop853"]
    assert dop and all(r.n_traj == data.n_traj for r in dop)


# --------------------------------------------------------------------------- users' systems, the CLI, torch

USER_SPEC = """description = "a family of a user's harmonic oscillators"
[system]
name = "user_systems:HarmonicOscillator"
[parameters]
omega = { dist = "log_uniform", low = 0.5, high = 4.0 }
[initial_conditions]
sampler = "box"
n_traj = 4
low = [-1.0, -1.0]
high = [1.0, 1.0]
[integration]
dt = 0.1
t_end = 2.0
seed = 3
"""


def test_users_system_family_generates_and_rolls_out(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from vpintegrator.systems import registry

    # the user's class registers itself on first use: leave the registry as it was for the other tests
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.data.rollouts import read_rollout

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    (tmp_path / "h.toml").write_text(USER_SPEC)
    res = CliRunner().invoke(gen_main, [str(tmp_path / "h.toml"), "--out", str(tmp_path / "h.h5"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    tr = read_trajectories(tmp_path / "h.h5")
    assert tr.param_names == ("omega",) and len(np.unique(tr.params)) == 4
    for i in range(4):  # the exact solution of q'' = -omega_i^2 q
        w = tr.params[i, 0]
        q0, p0 = tr.y[i, 0]
        q = q0 * np.cos(w * tr.t) + p0 / w * np.sin(w * tr.t)
        np.testing.assert_allclose(tr.y[i, :, 0], q, rtol=0, atol=1e-9)
    res = CliRunner().invoke(rollout_main, ["--data", str(tmp_path / "h.h5"), "--integrators", "implicit_midpoint,rk4",
                                            "--t-end", "3", "--out", str(tmp_path / "r.h5"), "--heldout", "2",
                                            "--n-traj", "4"])
    assert res.exit_code == 0, res.output
    ro = read_rollout(tmp_path / "r.h5")
    assert ro.reference.params.shape == (6, 1)
    for i in range(6):
        w = ro.reference.params[i, 0]
        q0, p0 = ro.reference.y[i, 0]
        np.testing.assert_allclose(ro.reference.y[i, :, 0], q0 * np.cos(w * ro.t) + p0 / w * np.sin(w * ro.t),
                                   rtol=0, atol=1e-9)


def test_bad_parameters_section_is_a_one_line_cli_error(tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as gen_main

    (tmp_path / "bad.toml").write_text(USER_SPEC.replace("user_systems:HarmonicOscillator", "rigid_body")
                                       .replace("omega", "inertia").replace("low = [-1.0, -1.0]", "low = -1.0")
                                       .replace("high = [1.0, 1.0]", "high = 1.0").replace('"log_uniform", low = 0.5',
                                                                                          '"log_uniform", low = -0.5'))
    res = CliRunner().invoke(gen_main, [str(tmp_path / "bad.toml"), "--out", str(tmp_path / "b.h5")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "log_uniform needs low > 0" in res.output and len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(gen_main, ["rigid_body_family", "--set", "n_traj=3", "--set", "t_end=0.4", "--workers",
                                        "1", "--set", 'parameters.inertia={dist="fixed", value=1.5}',
                                        "--out", str(tmp_path / "f.h5")])
    assert res.exit_code == 0, res.output
    assert np.all(read_trajectories(tmp_path / "f.h5").params == 1.5)


def test_family_invariants_on_torch_tensors():
    torch = pytest.importorskip("torch")
    systems = [RigidBody((1.0, 2.0, 3.0)), RigidBody((0.7, 1.1, 2.9))]
    fam = SystemFamily(systems, INERTIA)
    y = np.random.default_rng(2).normal(size=(2, 5, 3))
    got = fam.invariants(torch.as_tensor(y))
    for name, value in fam.invariants(y).items():
        assert isinstance(got[name], torch.Tensor)
        np.testing.assert_allclose(got[name].numpy(), value, rtol=1e-15)


def test_a_family_where_one_system_is_needed_is_a_clear_error():
    from vpintegrator.rollout.steps import IntegratorStep

    fam = SystemFamily([RigidBody((1.0, 2.0, 3.0)), RigidBody((0.7, 1.1, 2.9))], INERTIA)
    with pytest.raises(VPIntegratorError, match="one system per trajectory"):
        IntegratorStep(fam, "rk4", 0.1)
    with pytest.raises(VPIntegratorError, match="one system per trajectory"):
        get_system(fam)


def test_device_engine_measures_each_trajectorys_invariants(tmp_path, family_file):
    """The device engine (here on the CPU) evaluates the family's invariants on tensors, row by row: the same
    metrics as the host engine."""
    import torch

    from vpintegrator.models import build_model

    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3).double()
    _, host = _rollout(tmp_path, family_file, "host.h5", models=[("vpt", model)], integrators=[], engine="host",
                       device="cpu")
    _, dev = _rollout(tmp_path, family_file, "dev.h5", models=[("vpt", model)], integrators=[], engine="device",
                      device="cpu")
    assert dev.methods["vpt"].meta["engine"] == "device"
    for name in ("energy", "casimir"):
        np.testing.assert_allclose(dev.metrics["vpt"].invariants[name], host.metrics["vpt"].invariants[name],
                                   rtol=1e-12)
        np.testing.assert_allclose(dev.metrics["reference"].invariants[name],
                                   host.metrics["reference"].invariants[name], rtol=1e-14)


def test_a_parametric_rollout_always_has_the_oracle_rows(tmp_path, family_file):
    """Named no integrator, a rollout of a parametric file still measures the model against the classical
    methods with each trajectory's true parameters."""
    import torch

    from vpintegrator.models import build_model

    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3).double()
    report, ro = _rollout(tmp_path, family_file, models=[("vpt", model)], integrators=[])
    assert list(ro.methods) == ["rk4", "implicit_midpoint", "gauss_legendre4", "vpt"]
    assert {r["method"] for r in report.rows} == {"rk4", "implicit_midpoint", "gauss_legendre4", "vpt"}
    assert ro.metrics["implicit_midpoint"].invariants["energy"].shape == (4, 21)
    # a plain file gets no rows it was not asked for
    plain = tmp_path / "plain.h5"
    generate(_small("rigid_body", n_traj=2), out=plain, workers=1)
    _, ro = _rollout(tmp_path, plain, "p.h5", models=[("vpt", model)], integrators=[])
    assert list(ro.methods) == ["vpt"]


@pytest.mark.parametrize("mode", ["interpolation", "extrapolation"])
def test_vp_train_holds_out_parameters_and_vp_rollout_rolls_them_out(tmp_path, mode):
    """split_by = parameters_*: vp-train's recorded split is parameter_split's, and vp-rollout rolls out the
    held-out parameters by default (issue 31's parameter splits from the CLI)."""
    import json

    from click.testing import CliRunner

    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main
    from vpintegrator.rollout.splits import parameter_split

    data = tmp_path / "family.h5"
    generate(_small("rigid_body_family", n_traj=12, t_end=2.0), out=data, workers=1)
    run = tmp_path / "run"
    result = CliRunner().invoke(train_main, [
        "--data", str(data), "--out", str(run), "--model", "vpff", "--epochs", "1", "--seed", "3",
        "--set", f"split_by=parameters_{mode}", "--set", "test_fraction=0.25", "--set", "val_fraction=0.25",
        "--set", "dtype=float64", "--quiet"])
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    # the cube is split_seed's (default 0), not the run's seed's
    want = parameter_split(read_trajectories(data), mode, test_fraction=0.25, val_fraction=0.25, seed=0)
    assert summary["split"] == want["split"]
    assert summary["split_by"]["mode"] == mode and summary["split_by"]["kind"] == "parameters"
    out = tmp_path / "ro.h5"
    result = CliRunner().invoke(rollout_main, ["--data", str(data), "--model", f"m={run}", "--integrators", "rk4",
                                               "--t-end", "1", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    from vpintegrator.data import read_rollout

    assert read_rollout(out).traj_index.tolist() == want["split"]["test"]


def test_split_by_parameters_of_a_plain_file_is_a_one_line_error(tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.train import main as train_main

    data = tmp_path / "plain.h5"
    generate(_small("rigid_body_paper", n_traj=8, t_end=2.0), out=data, workers=1)
    result = CliRunner().invoke(train_main, ["--data", str(data), "--out", str(tmp_path / "run"), "--model", "vpff",
                                             "--epochs", "1", "--set", "split_by=parameters_extrapolation", "--quiet"])
    assert result.exit_code != 0
    assert "no /params" in result.output and "Traceback" not in result.output
