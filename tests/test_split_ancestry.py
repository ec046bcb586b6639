"""A split travels with a model through ``init_from``: a fine-tuned run records what the models it started
from trained on (``ancestors``), and ``vp-rollout``'s ``test`` means held out of every ancestor's training too
(a trajectory an ancestor trained or validated on is ``ancestor_seen``, and is left out of the default)."""

from __future__ import annotations

import json

import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data import generate, load_spec
from vpintegrator.rollout import RolloutConfig, run_rollouts
from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}
KW = dict(epochs=1, batch_size=64, lr=1e-3, dtype="float64", device="cpu", init_scale=0.1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A parent trained on every trajectory (test_fraction 0, as the shipped pretrained models), a child
    fine-tuned from it on the same file with the default split, a grandchild from the child."""
    root = tmp_path_factory.mktemp("anc")
    data = root / "im.h5"
    generate(load_spec("rigid_body", n_traj=20, t_end=2.0, dt=0.2, method="implicit_midpoint"), out=data)
    parent, child, grand = root / "parent", root / "child", root / "grand"
    fit(dict(data=[str(data)], model=MODEL, out=str(parent), test_fraction=0.0, val_fraction=0.2, **KW))
    fit(dict(data=[str(data)], model=MODEL, out=str(child), init_from=str(parent / "best.pt"), **KW))
    fit(dict(data=[str(data)], model=MODEL, out=str(grand), init_from=str(child), split_seed=5, **KW))
    return data, parent, child, grand


def test_a_fine_tuned_run_records_its_ancestors_splits(runs):
    data, parent, child, grand = runs
    p = json.loads((parent / "summary.json").read_text())
    c = json.loads((child / "summary.json").read_text())
    g = json.loads((grand / "summary.json").read_text())
    assert "ancestors" not in p
    assert [a["split"] for a in c["ancestors"]] == [p["split"]]
    assert c["ancestors"][0]["split_data"] == p["split_data"] and c["ancestors"][0]["source"].endswith("best.pt")
    assert [a["split"] for a in g["ancestors"]] == [c["split"], p["split"]]  # nearest first
    for name in ("best.pt", "last.pt"):
        assert torch.load(child / name, weights_only=True)["ancestors"] == c["ancestors"]
    from vpintegrator.models import load_model

    assert load_model(child).training_ancestors == c["ancestors"]


def test_the_childs_test_split_seen_by_its_parent_is_not_labelled_test(runs, tmp_path):
    data, parent, child, _ = runs
    c = json.loads((child / "summary.json").read_text())
    assert c["split"]["test"]  # the child holds out trajectories of its own ...
    # ... that its parent trained or validated on (it held out none): no trajectory is out of sample
    with pytest.raises(VPIntegratorError, match="fine-tuned from did not train or validate on"):
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "a.h5"), models=[("c", str(child))],
                                   device="cpu"))
    traj = c["split"]["test"][:1] + c["split"]["train"][:1]
    rep = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "b.h5"), models=[("c", str(child))],
                                     traj=traj, device="cpu"))
    rows = {(r["method"], r["split"]) for r in rep.rows}
    assert ("c", "ancestor_seen") in rows and ("c", "test") not in rows and ("c", "train") in rows
    assert any("'ancestor_seen'" in w and "fine-tuned from" in w for w in rep.warnings)


def test_only_trajectories_no_ancestor_saw_are_the_default(runs, tmp_path):
    data, _, _, grand = runs
    # the grandchild's test trajectories: its parent (the child) held some out, its grandparent none
    with pytest.raises(VPIntegratorError, match="fine-tuned from"):
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "g.h5"), models=[("g", str(grand))],
                                   device="cpu"))


def test_a_model_split_drops_what_an_ancestor_saw():
    from vpintegrator.rollout.splits import default_traj, model_split

    class M:
        training_split = {"train": [0, 1, 2, 3], "val": [4], "test": [5, 6, 7]}
        training_split_data = {"n_traj": 8, "first_states_sha256": "x"}
        training_ancestors = [{"source": "pretrained:p", "split": {"train": [5, 0], "val": [6], "test": []},
                               "split_data": {"n_traj": 8, "first_states_sha256": "x"}},
                              {"source": "gml:old.h5", "split": None, "split_data": None}]

    ms = model_split("m", M(), (8, "x"), "d.h5")
    assert [ms.of(i) for i in (5, 6, 7, 0)] == ["ancestor_seen", "ancestor_seen", "test", "train"]
    assert default_traj([ms]).tolist() == [7]
    assert "gml:old.h5, which records no trajectory split" in ms.note
    M.training_ancestors[0]["split_data"] = {"n_traj": 9, "first_states_sha256": "y"}  # another file
    other = model_split("m", M(), (8, "x"), "d.h5")
    assert other.of(5) == "test" and "trained on other data than d.h5" in other.note


def test_init_from_a_pretrained_model_records_its_split():
    from vpintegrator.training.plan import ancestry

    anc = ancestry("pretrained:rigid_body_vpt")
    assert len(anc) == 1 and anc[0]["source"] == "pretrained:rigid_body_vpt"
    assert anc[0]["split_data"]["n_traj"] == 1238
    assert len(anc[0]["split"]["train"]) + len(anc[0]["split"]["val"]) == 1238 and not anc[0]["split"]["test"]
