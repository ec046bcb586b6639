"""The train/validation/test split is fixed by the data and ``split_seed``, never by ``seed`` (issue 46, item
3): runs of several seeds on one file share their test trajectories, the split seed is recorded, a
comparison of models whose test splits differ says that its sample shrank (or refuses when nothing is
shared), and a run made when ``seed`` drew the split resumes and rolls out on its own split."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator.cli import rollout as rollout_cli
from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.data.windows import split_train_val_test
from vpintegrator.models import load_checkpoint
from vpintegrator.training.plan import build_plan

N_TRAJ, TEST = 20, 0.2  # 4 test trajectories per split


def _config(data, out, **kw):
    return dict(data=[data], epochs=1, model={"name": "vpt", "seq_len": 2, "n_blocks": 1}, out=str(out),
                val_fraction=0.2, test_fraction=TEST, dtype="float64", batch_size=64, **kw)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("split_seed")
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(N_TRAJ, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    write_trajectories(root / "d.h5", vp.integrate("rigid_body", y0, 0.2, 7, method="rk4"))
    torch.set_num_threads(1)
    for seed in (1, 2):
        vp.fit(_config(str(root / "d.h5"), root / f"seed{seed}", seed=seed), progress=False)
    return root


def _tests(split_seed):
    return set(split_train_val_test(N_TRAJ, 0.2, TEST, split_seed)[2].tolist())


def _split_seeds():
    """A split seed whose test trajectories overlap split seed 0's in part, and one where they do not."""
    base = _tests(0)
    partial = next(s for s in range(1, 500) if 0 < len(_tests(s) & base) < len(base))
    disjoint = next(s for s in range(1, 500) if not _tests(s) & base)
    return partial, disjoint


def test_runs_of_two_seeds_share_one_recorded_split(root):
    one, two = (json.loads((root / f"seed{s}" / "summary.json").read_text()) for s in (1, 2))
    assert one["split"] == two["split"] and one["split_seed"] == two["split_seed"] == 0
    assert set(one["split"]["test"]) == _tests(0)
    for name in ("best.pt", "last.pt"):
        ckpt = load_checkpoint(root / "seed1" / name)
        assert ckpt["split_seed"] == 0 and ckpt["split"] == one["split"]
    a, b = vp.load_model(root / "seed1"), vp.load_model(root / "seed2")  # other initialisations all the same
    assert any(not torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    config = (root / "seed1" / "config.toml").read_text()
    assert "split_seed = 0" in config


def _rollout(root, out, *models):
    args = ["--data", str(root / "d.h5"), "--integrators", "rk4", "--t-end", "0.6", "--out", str(root / out)]
    for m in models:
        args += ["--model", m]
    return CliRunner().invoke(rollout_cli.main, args)


def test_same_split_compares_on_the_whole_test_split_without_a_shrink_line(root):
    result = _rollout(root, "same.h5", f"a={root / 'seed1'}", f"b={root / 'seed2'}")
    assert result.exit_code == 0, result.output
    assert "shrank" not in result.output and "rolling out the test split: 4 of 20" in result.output


def test_other_split_seeds_say_the_sample_shrank_or_refuse(root):
    partial, disjoint = _split_seeds()
    torch.set_num_threads(1)
    vp.fit(_config(str(root / "d.h5"), root / "partial", seed=1, split_seed=partial), progress=False)
    n = len(_tests(partial) & _tests(0))
    result = _rollout(root, "partial.h5", f"a={root / 'seed1'}", f"b={root / 'partial'}")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "shrank" in line]
    assert len(lines) == 1 and f"shrank to the {n} of 4 test trajectories" in lines[0], result.output
    assert "'a' 4, 'b' 4" in lines[0] and "split_seed" in lines[0]
    assert vp.read_rollout(root / "partial.h5").traj_index.tolist() == sorted(_tests(partial) & _tests(0))
    from vpintegrator.rollout.run import run_rollouts
    from vpintegrator.rollout.config import RolloutConfig

    models = [("a", str(root / "seed1")), ("b", str(root / "partial"))]
    report = run_rollouts(RolloutConfig(data=str(root / "d.h5"), models=models, t_end=0.6,
                                        out=str(root / "partial_py.h5")))
    assert any("shrank" in w for w in report.warnings)
    vp.fit(_config(str(root / "d.h5"), root / "disjoint", seed=1, split_seed=disjoint), progress=False)
    refused = _rollout(root, "disjoint.h5", f"a={root / 'seed1'}", f"b={root / 'disjoint'}")
    assert refused.exit_code != 0 and "no test trajectory in common" in refused.output
    assert not (root / "disjoint.h5").exists()


def test_a_run_from_before_split_seed_resumes_and_rolls_out_on_its_own_split(root, tmp_path):
    """An old run: its split was seed's (seed 3 here), its config.toml and files have no split_seed."""
    old = tmp_path / "old"
    vp.fit(_config(str(root / "d.h5"), old, seed=3, split_seed=3), progress=False)
    toml = old / "config.toml"
    toml.write_text("\n".join(line for line in toml.read_text().splitlines() if not line.startswith("split_seed")))
    for name in ("best.pt", "last.pt"):
        payload = torch.load(old / name, weights_only=True)
        payload.pop("split_seed")
        torch.save(payload, old / name)
    recorded = load_checkpoint(old / "best.pt")["split"]
    assert set(recorded["test"]) == _tests(3) != _tests(0)
    resumed = build_plan(resume=old, epochs=2)
    assert resumed.data.split_seed == 3 == resumed.seed
    result = vp.fit(resume=str(old), epochs=2)
    assert result.epochs == 2
    assert json.loads((old / "summary.json").read_text())["split"] == recorded
    rolled = _rollout(root, "old.h5", f"old={old}")
    assert rolled.exit_code == 0, rolled.output
    assert vp.read_rollout(root / "old.h5").traj_index.tolist() == recorded["test"]


def test_a_shipped_model_in_a_shrunk_comparison_names_its_fixed_split():
    """Issue 88: beside a shipped model (whose split cannot change) the advice is to train the other model with
    the shipped model's split settings, read from its provenance, not "train them with one split_seed"."""
    from types import SimpleNamespace

    from vpintegrator._shipped import PRETRAINED_DIR
    from vpintegrator.rollout import splits as sp

    shipped = SimpleNamespace(source_file=str(PRETRAINED_DIR / "rigid_body_lpnet.pt"))
    assert sp._shipped_name(shipped) == "rigid_body_lpnet"
    assert sp._shipped_name(SimpleNamespace(source_file="/elsewhere/pretrained/rigid_body_lpnet.pt")) is None
    one = {"train": [0, 1], "val": [2], "test": [3, 4, 5]}
    other = {"train": [0, 3], "val": [2], "test": [1, 4, 5]}
    mine = sp.ModelSplit("mine", other, None)
    idx = np.array([4, 5])
    line = sp.shrink_note([sp.ModelSplit("lpnet", one, None, shipped="rigid_body_lpnet"), mine], idx)
    assert "shrank to the 2 of 3" in line and "train them with one split_seed" not in line
    assert "pretrained:rigid_body_lpnet is shipped" in line
    assert "vp-train --split-seed 1 --val-fraction 0.1 --test-fraction 0.1" in line
    plain = sp.shrink_note([sp.ModelSplit("a", one, None), mine], idx)
    assert "train them with one split_seed" in plain
