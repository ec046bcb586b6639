"""Issue 20: the train/val/test split of vp-train (recorded, disjoint, seeded, test never trained on), and
vp-rollout's out-of-sample default (the models' test split, the ``split`` column, ``heldout``), with errors
against the exact flow (``reference``) by default."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.data import generate, load_spec, read_trajectories
from vpintegrator.data.windows import split_train_val_test, split_trajectories
from vpintegrator.metrics import read_table
from vpintegrator.rollout import RolloutConfig, run_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}
KW = dict(epochs=1, batch_size=64, lr=1e-3, dtype="float64", device="cpu", init_scale=0.1)


@pytest.fixture(scope="module")
def im_data(tmp_path_factory):
    """10 rigid-body trajectories made with implicit midpoint (h = 0.2, t <= 2), random sphere sampler."""
    path = tmp_path_factory.mktemp("im") / "im.h5"
    generate(load_spec("rigid_body", n_traj=10, t_end=2.0, dt=0.2, method="implicit_midpoint"), out=path)
    return path


@pytest.fixture(scope="module")
def run(im_data, tmp_path_factory):
    """A 1-epoch VPT run on ``im_data`` (val 0.2, test 0.3)."""
    from vpintegrator.training import fit

    out = tmp_path_factory.mktemp("run") / "run"
    fit(dict(data=[str(im_data)], model=MODEL, out=str(out), seed=3, split_seed=3, val_fraction=0.2, test_fraction=0.3, **KW))
    return out


# --------------------------------------------------------------------------- the split


def test_split_is_disjoint_covering_and_seeded():
    train, val, test = split_train_val_test(40, 0.1, 0.2, seed=7)
    assert (len(train), len(val), len(test)) == (28, 4, 8)
    both = np.concatenate([train, val, test])
    assert sorted(both.tolist()) == list(range(40))  # disjoint and covering
    again = split_train_val_test(40, 0.1, 0.2, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again))
    other = split_train_val_test(40, 0.1, 0.2, seed=8)
    assert not np.array_equal(test, other[2])
    # test_fraction 0: exactly the two-way split of runs made before the test split
    t2, v2 = split_trajectories(40, 0.1, 7)
    t3, v3, e3 = split_train_val_test(40, 0.1, 0.0, 7)
    assert np.array_equal(t2, t3) and np.array_equal(v2, v3) and e3.size == 0
    # a positive fraction holds out at least one trajectory; none left for training is an error
    assert split_train_val_test(5, 0.0, 0.01, 0)[2].size == 1
    with pytest.raises(VPIntegratorError, match="test_fraction") as err:
        split_train_val_test(3, 0.5, 0.5, 0)
    assert err.value.key == "test_fraction"


def test_run_records_the_split_in_summary_and_every_checkpoint(run, im_data):
    summary = json.loads((run / "summary.json").read_text())
    split = summary["split"]
    assert set(split) == {"train", "val", "test"}
    assert (len(split["train"]), len(split["val"]), len(split["test"])) == (5, 2, 3)
    assert sorted(split["train"] + split["val"] + split["test"]) == list(range(10))
    assert summary["data"]["n_test_traj"] == 3
    # the split the config's split_seed gives
    train, val, test = split_train_val_test(10, 0.2, 0.3, 3)
    assert split == {"train": train.tolist(), "val": val.tolist(), "test": test.tolist()}
    for name in ("best.pt", "last.pt"):
        ckpt = torch.load(run / name, weights_only=True)
        assert ckpt["split"] == split, name
        assert ckpt["split_data"]["n_traj"] == 10
    from vpintegrator.models import load_model

    assert load_model(run).training_split == split


def test_test_trajectories_are_never_in_the_training_windows(im_data):
    from vpintegrator.training.config import TrainConfig
    from vpintegrator.training.plan import build_plan, load_data, window_sets

    plan = build_plan(TrainConfig.from_dict(dict(data=[str(im_data)], model=MODEL, seed=11, test_fraction=0.3, **KW)))
    paths, data = load_data(plan.data.files)
    train_set, val_set, _, info = window_sets(plan, data, paths, 2, 1, "cpu")
    test = set(info["split"]["test"])
    assert test and not test & set(train_set.traj_indices.tolist())
    assert not test & set(val_set.traj_indices.tolist())
    assert set(train_set.traj_indices.tolist()) == set(info["split"]["train"])


def test_ensemble_members_share_the_split(im_data, tmp_path):
    from vpintegrator.training import fit

    res = fit(dict(data=[str(im_data)], model=MODEL, out=str(tmp_path / "ens"), seeds=[1, 2], **KW))
    splits = [json.loads((m.run_dir / "summary.json").read_text())["split"] for m in res.members]
    assert splits[0] == splits[1] and splits[0]["test"]
    for m in res.members:
        assert torch.load(m.run_dir / "best.pt", weights_only=True)["split"] == splits[0]
    assert res.members[0].model.training_split == splits[0]


def test_old_run_without_test_fraction_resumes_with_its_own_split(im_data, tmp_path):
    """A run directory from before the key (config.toml without test_fraction) resumes with test_fraction 0."""
    from vpintegrator.training import fit
    from vpintegrator.training.plan import build_plan

    out = tmp_path / "old"
    fit(dict(data=[str(im_data)], model=MODEL, out=str(out), **KW))
    toml = out / "config.toml"
    toml.write_text("".join(ln for ln in toml.read_text().splitlines(True) if not ln.startswith("test_fraction")))
    assert build_plan(resume=out).data.test_fraction == 0.0
    result = fit(dict(data=[str(im_data)], model=MODEL, out=str(out), **{**KW, "epochs": 2}), resume=out)
    assert result.epochs == 2
    assert json.loads((out / "summary.json").read_text())["split"]["test"] == []


# --------------------------------------------------------------------------- vp-rollout


def _ref_solution(y0: np.ndarray, t: np.ndarray) -> np.ndarray:
    """An independent exact flow: scipy's solve_ivp DOP853 at rtol = atol = 1e-12, one call per trajectory."""
    from scipy.integrate import solve_ivp

    from vpintegrator.systems import get_system

    system = get_system("rigid_body")

    def rhs(_t, y):
        return system.vector_field(y[None])[0]

    return np.stack([solve_ivp(rhs, (t[0], t[-1]), y, method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12).y.T
                     for y in y0])


def test_implicit_midpoint_error_is_its_true_error_against_the_exact_flow(im_data, tmp_path):
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "e.h5"),
                                     integrators=["implicit_midpoint", "gauss_legendre4"]))
    rows = {r["method"]: r for r in rep.rows}
    assert set(rows) == {"implicit_midpoint", "gauss_legendre4"}  # the generator is already a row
    data = read_trajectories(im_data)
    exact = _ref_solution(data.y[:, 0], data.t)
    with h5py.File(tmp_path / "e.h5") as f:
        assert f.attrs["reference_mode"] == "exact" and f.attrs["reference_method"] == "dop853"
        assert f.attrs["reference_rtol"] == 1e-12 and f.attrs["reference_atol"] == 1e-12
        assert np.allclose(f["reference/y"][:], exact, rtol=0, atol=1e-9)  # the reference is the exact flow
        y_im = f["methods/implicit_midpoint/y"][:]
    true = np.linalg.norm(y_im[:, -1] - exact[:, -1], axis=-1) / np.linalg.norm(exact[:, -1], axis=-1)
    assert rows["implicit_midpoint"]["final_rel_error"] == pytest.approx(true.mean(), rel=1e-6)
    assert rows["implicit_midpoint"]["final_rel_error"] > 1e-5  # not 0: it is not its own reference
    assert rows["gauss_legendre4"]["final_rel_error"] < 0.1 * rows["implicit_midpoint"]["final_rel_error"]
    assert all(r["reference"] == "exact" for r in rep.rows)
    assert rep.reference.startswith("exact flow: DOP853 (rtol = atol = 1e-12)")
    assert (tmp_path / "e.md").read_text().startswith("Errors against the exact flow")
    assert [r["split"] for r in read_table(tmp_path / "e.csv")] == ["unknown", "unknown"]  # no model in the run

    # --reference data: the old behaviour, implicit midpoint against itself
    old = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "d.h5"),
                                     integrators=["implicit_midpoint", "gauss_legendre4"], reference="data"))
    rows = {r["method"]: r for r in old.rows}
    assert rows["implicit_midpoint"]["final_rel_error"] < 1e-12
    assert rows["gauss_legendre4"]["final_rel_error"] > 1e-5
    with h5py.File(tmp_path / "d.h5") as f:
        assert f.attrs["reference_mode"] == "data" and f.attrs["reference_method"] == "implicit_midpoint"
        assert np.array_equal(f["reference/y"][:], read_trajectories(im_data).y)


def test_the_data_generator_is_a_row_of_its_own(im_data, tmp_path):
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "g.h5"), integrators=["rk4"]))
    assert [r["method"] for r in rep.rows] == ["rk4", "implicit_midpoint"]
    rows = {r["method"]: r for r in rep.rows}
    assert rows["implicit_midpoint"]["final_rel_error"] > 1e-5
    assert rows["rk4"]["final_rel_error"] < rows["implicit_midpoint"]["final_rel_error"]
    with h5py.File(tmp_path / "g.h5") as f:  # the generator's trajectories are the data's
        assert np.allclose(f["methods/implicit_midpoint/y"][:], read_trajectories(im_data).y, atol=1e-10)


def test_rollout_defaults_to_the_models_test_split(run, im_data, tmp_path):
    split = json.loads((run / "summary.json").read_text())["split"]
    logs: list[str] = []
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "t.h5"), models=[str(run)],
                                     integrators=["rk4"], device="cpu"), log=logs.append)
    assert [(r["method"], r["split"]) for r in rep.rows] == [("rk4", "test"), ("run", "test"),
                                                             ("implicit_midpoint", "test")]
    assert all(r["n_traj"] == len(split["test"]) for r in rep.rows)
    with h5py.File(tmp_path / "t.h5") as f:
        assert f["traj_index"][:].tolist() == split["test"]
        assert list(f["methods/run"].attrs["split"]) == ["test"] * len(split["test"])
    assert not rep.warnings and any("rolling out the test split" in line for line in logs)
    assert [r["split"] for r in read_table(tmp_path / "t.csv")] == ["test"] * 3


def test_training_trajectory_warns_once_and_is_marked_train(run, im_data, tmp_path):
    split = json.loads((run / "summary.json").read_text())["split"]
    traj = [split["train"][0], split["val"][0], split["test"][0]]
    logs: list[str] = []
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "w.h5"), models=[("m", str(run))],
                                     traj=traj, device="cpu"), log=logs.append)
    assert [(r["method"], r["split"], r["n_traj"]) for r in rep.rows] == [
        ("m", "train", 1), ("m", "val", 1), ("m", "test", 1),
        ("implicit_midpoint", "train", 1), ("implicit_midpoint", "val", 1), ("implicit_midpoint", "test", 1)]
    assert len(rep.warnings) == 1 and "training split" in rep.warnings[0] and "'m'" in rep.warnings[0]
    assert sum("are in the training split" in line for line in logs) == 1, logs  # (the NRMSE line names it too)
    # the CLI: one warning line (also with --quiet), the split column
    res = CliRunner().invoke(__import__("vpintegrator.cli.rollout", fromlist=["main"]).main, [
        "--data", str(im_data), "--model", f"m={run}", "--traj", ",".join(map(str, traj)), "--device", "cpu",
        "--out", str(tmp_path / "c.h5"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert sum(ln.startswith("Warning:") and "training split" in ln for ln in res.output.splitlines()) == 1
    header = next(ln for ln in res.output.splitlines() if ln.startswith("method"))
    assert header.split()[:2] == ["method", "split"]


def test_model_without_split_is_unknown_and_empty_test_split_is_an_error(run, im_data, tmp_path):
    from vpintegrator.models import load_model, save_model
    from vpintegrator.training import fit

    old = tmp_path / "old.pt"
    save_model(load_model(run), old)  # a checkpoint without a split (as before splits were recorded)
    logs: list[str] = []
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "u.h5"), models=[str(old)], n_traj=2,
                                     device="cpu", reference="data"), log=logs.append)
    assert [(r["method"], r["split"]) for r in rep.rows] == [("old", "unknown")]
    assert any("no trajectory split recorded" in line for line in logs)
    # a model with test_fraction = 0 has no test trajectory to roll out by default: one-line error
    fit(dict(data=[str(im_data)], model=MODEL, out=str(tmp_path / "nt"), test_fraction=0.0, **KW))
    with pytest.raises(VPIntegratorError, match=r"empty test split.*give traj .* or heldout") as err:
        run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "n.h5"), models=[str(tmp_path / "nt")],
                                   device="cpu"))
    assert err.value.key == "traj"


def test_heldout_conditions_are_new_with_an_exact_reference(run, im_data, tmp_path):
    rep = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "h.h5"), models=[str(run)],
                                     heldout=3, heldout_seed=99, device="cpu"))
    assert [(r["method"], r["split"], r["n_traj"]) for r in rep.rows] == [("run", "new", 3), ("implicit_midpoint", "new", 3)]
    data = read_trajectories(im_data)
    with h5py.File(tmp_path / "h.h5") as f:
        assert f["traj_index"][:].tolist() == [-1, -1, -1] and f.attrs["heldout"] == 3 and f.attrs["heldout_seed"] == 99
        y0 = f["reference/y"][:, 0]
        ref = f["reference/y"][:]
        t = f["t"][:]
    assert np.allclose(np.linalg.norm(y0, axis=1), 1.0)  # the data's sampler: the unit sphere
    assert np.min(np.linalg.norm(y0[:, None] - data.y[None, :, 0], axis=-1)) > 1e-6  # not the data's conditions
    assert np.allclose(ref, _ref_solution(y0, t), rtol=0, atol=1e-9)  # integrated from the fresh conditions
    # the same seed draws the same conditions; with traj, both sets are rolled out
    rep2 = run_rollouts(RolloutConfig(data=str(im_data), out=str(tmp_path / "h2.h5"), integrators=["rk4"],
                                      heldout=3, heldout_seed=99, traj=[0, 1]))
    assert [(r["method"], r["split"]) for r in rep2.rows] == [("rk4", "new"), ("rk4", "unknown"),
                                                              ("implicit_midpoint", "new"), ("implicit_midpoint", "unknown")]
    with h5py.File(tmp_path / "h2.h5") as f:
        assert np.array_equal(f["reference/y"][2:, 0], y0) and f["traj_index"][:].tolist() == [0, 1, -1, -1, -1]


def test_heldout_needs_a_random_sampler(tmp_path):
    data = tmp_path / "p.h5"
    generate(load_spec("rigid_body_paper", n_traj=4, t_end=0.4, method="implicit_midpoint"), out=data)
    with pytest.raises(VPIntegratorError, match=r"deterministic") as err:
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "x.h5"), integrators=["rk4"], heldout=2))
    assert err.value.key == "heldout" and not (tmp_path / "x.h5").exists()


def test_a_huge_heldout_is_refused_before_drawing(tmp_path, monkeypatch):
    """Issue 36: --heldout 1000000000 drew the conditions (24 GB) before the size check; now the check comes first."""
    from vpintegrator.rollout import splits

    data = tmp_path / "d.h5"
    generate(load_spec("rigid_body", n_traj=4, t_end=0.4), out=data)

    def must_not_draw(*args, **kwargs):
        raise AssertionError("the held-out conditions were drawn before the size check")

    monkeypatch.setattr(splits, "draw_heldout", must_not_draw)
    with pytest.raises(VPIntegratorError, match=r"needs about .* of memory .*refused before starting"):
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "x.h5"), integrators=["rk4"], heldout=10**9))
    assert not (tmp_path / "x.h5").exists()
