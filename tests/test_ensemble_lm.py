"""Levenberg–Marquardt seed ensembles (``optimizer = "lm"`` with ``ensemble``/``seeds``): each member takes
the iterations of its own single LM run ``fit(seed=s_k)`` (subsample draws, residuals, Jacobian, damping λ
adapted by its own accept/reject), to 1e-10 in float64; a member that diverges does not stop the others;
the CLI writes the ensemble's files."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from vpintegrator.cli.train import main
from vpintegrator.training import fit
from vpintegrator.training.ensemble_lm import EnsembleLM

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-10  # relative, float64: the members' vmapped forward differs from a lone run's in rounding only


def _config(tiny_data, tmp_path, name, **kw) -> dict:
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3, batch_size=32,
        dtype="float64", seed=5, optimizer="lm", lm_windows=48, lm_iters_per_epoch=3, lm_resample_every=2,
        init_scale=0.1, out=str(tmp_path / name),
    )
    return base | kw


def _rel_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    scale = max(float(b[k].abs().max()) for k in b)
    return max(float((a[k] - b[k]).abs().max()) for k in a) / scale


def _same_history(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for key in ra:
            if key not in ("seconds", "cpu_seconds") and not (math.isnan(ra[key]) and math.isnan(rb[key])):
                assert ra[key] == pytest.approx(rb[key], rel=TOL, abs=0), (key, ra, rb)


def _log(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "log.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("case", ["no_validation_check_windows", "validation_rollout"])
def test_each_lm_member_equals_its_single_lm_run(tiny_data, tmp_path, monkeypatch, case):
    seeds = [5, 9, 11]
    if case == "no_validation_check_windows":  # no split at all: every lone run trains on the same windows
        extra = dict(val_fraction=0.0, test_fraction=0.0, monitor="val_loss", lm_check_windows=16)
    else:  # the split is split_seed's: the ensemble and the lone runs of every seed share it
        extra = dict(monitor="val_rollout", val_rollout_steps=12, val_fraction=0.25)
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=seeds, **extra))
    for k, s in enumerate(seeds):
        alone = fit(_config(tiny_data, tmp_path, f"alone{s}", seed=s, **extra))
        member = ens.members[k]
        _same_history(member.history, alone.history)  # full train loss, val loss, λ (lr), val_rollout
        assert member.steps == alone.steps == 9 and member.best_epoch == alone.best_epoch
        assert _rel_diff(member.model.state_dict(), alone.model.state_dict()) < TOL
        log_m, log_a = _log(member.run_dir), _log(alone.run_dir)
        assert [float(r["lr"]) for r in log_m] == pytest.approx([float(r["lr"]) for r in log_a], rel=TOL)
        best_m = torch.load(member.run_dir / "best.pt", weights_only=True)["state_dict"]
        best_a = torch.load(alone.run_dir / "best.pt", weights_only=True)["state_dict"]
        assert _rel_diff(best_m, best_a) < TOL
    # the members differ (own initialisation and subsamples)
    assert _rel_diff(ens.members[0].model.state_dict(), ens.members[1].model.state_dict()) > 1e-3


def test_lambda_adapts_per_member(tiny_data, tmp_path):
    """Each member's damping follows its own accept/reject: log.csv's lr column differs between members,
    and summary.json's lr is the member's own λ."""
    ens = fit(_config(tiny_data, tmp_path, "ens", ensemble=3, val_fraction=0.0, test_fraction=0.0,
                      monitor="val_loss", epochs=4, lm_lambda=1e-2))
    lams = [[float(r["lr"]) for r in _log(m.run_dir)] for m in ens.members]
    assert all(len(col) == 4 and all(v > 0 for v in col) for col in lams)
    assert any(len({col[e] for col in lams}) > 1 for e in range(4)), lams  # not one shared λ
    for m, col in zip(ens.members, lams):
        assert json.loads((m.run_dir / "summary.json").read_text())["lr"] == col[-1]


def test_a_diverged_member_does_not_stop_the_others(tiny_data, tmp_path, monkeypatch):
    """Member 1's weights turn NaN before the 4th iteration: it stops as diverged at that step, with its files
    kept at the last finite state; member 0 goes on exactly as in the same ensemble without the fault."""
    cfg = dict(ensemble=2, val_fraction=0.0, test_fraction=0.0, monitor="val_loss", epochs=3)
    clean = fit(_config(tiny_data, tmp_path, "clean", **cfg))
    original = EnsembleLM.step

    def step_with_fault(self):
        if self.iteration == 3:
            with torch.no_grad():
                next(iter(self.params.values()))[1] = math.nan
        return original(self)

    monkeypatch.setattr(EnsembleLM, "step", step_with_fault)
    ens = fit(_config(tiny_data, tmp_path, "faulty", **cfg))
    bad, good = ens.members[1], ens.members[0]
    assert bad.stopped == "diverged" and good.stopped == "epochs" and good.epochs == 3
    summary = json.loads((bad.run_dir / "summary.json").read_text())
    assert summary["diverged"] == {"what": "loss", "value": "nan", "epoch": 2, "step": 4}
    assert len(_log(bad.run_dir)) == 1 and (bad.run_dir / "best.pt").exists()
    _same_history(good.history, clean.members[0].history)
    assert _rel_diff(good.model.state_dict(), clean.members[0].model.state_dict()) < TOL


def test_cli_lm_ensemble(tiny_data, tmp_path):
    out = tmp_path / "cli"
    args = ["--data", tiny_data, "--model", "vpt", "--set", "model.seq_len=2", "--set", "model.L=2",
            "--set", "model.n_blocks=1", "--epochs", "2", "--batch-size", "32", "--dtype", "float64",
            "--optimizer", "lm", "--lm-windows", "32", "--lm-iters-per-epoch", "2", "--set", "init_scale=0.1",
            "--set", "val_fraction=0.25", "--set", "monitor=val_loss", "--ensemble", "2", "--out", str(out),
            "--quiet"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    members = sorted(p.name for p in out.iterdir() if p.name.startswith("member_"))
    assert members == ["member_0_seed_1234", "member_1_seed_1235"]
    for name in members:
        assert {p.name for p in (out / name).iterdir()} >= {"config.toml", "log.csv", "summary.json", "best.pt",
                                                           "last.pt"}
        assert len(_log(out / name)) == 2
    with open(out / "ensemble.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["seed"]) for r in rows] == [1234, 1235] and sum(int(r["selected"]) for r in rows) == 1
    selected = json.loads((out / "selected.json").read_text())
    assert selected["dir"] in members and selected["monitor"] == "val_loss"
    assert "(selected)" in (out / "ensemble.md").read_text() and ", lm, 2 epochs" in (out / "ensemble.md").read_text()
