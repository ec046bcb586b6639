"""Seed ensembles (``ensemble = N`` / ``seeds``; ``vp-train --ensemble N``): each member equals the same seed
trained alone with ``fit`` (float64, ~1e-12), the best member is selected by the validation score, the run
directories load, and bad input is a one-line error."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.cli.train import main
from vpintegrator.data import windows
from vpintegrator.models import load_model
from vpintegrator.training import FitResult, fit
from vpintegrator._toml import tomllib

pytestmark = pytest.mark.usefixtures("one_thread")



def _config(tiny_data, tmp_path, name, **kw) -> dict:
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3, batch_size=32,
        lr=3e-3, dtype="float64", seed=5, monitor="val_rollout", val_rollout_steps=20, init_scale=0.1,
        out=str(tmp_path / name),
    )
    return base | kw


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].is_floating_point())


def _same_history(a: list[dict], b: list[dict], tol) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for key in ra:
            if key not in ("seconds", "cpu_seconds") and not (math.isnan(ra[key]) and math.isnan(rb[key])):
                assert ra[key] == pytest.approx(rb[key], rel=tol(), abs=tol()), (key, ra, rb)


@pytest.mark.parametrize("schedule_per", ["step", "epoch"])
def test_each_member_equals_the_seed_trained_alone(tiny_data, tmp_path, monkeypatch, schedule_per, tol):
    seeds = [5, 9, 11]
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=seeds, schedule_per=schedule_per))
    assert isinstance(ens, FitResult) and ens.is_ensemble and ens.seeds == seeds and len(ens.members) == 3
    for k, s in enumerate(seeds):  # the split is split_seed's for the ensemble and each lone run alike
        alone = fit(_config(tiny_data, tmp_path, f"alone{s}", seed=s, schedule_per=schedule_per))
        member = ens.members[k]
        _same_history(member.history, alone.history, tol)  # train, val loss, lr, val_rollout per epoch
        assert member.best_epoch == alone.best_epoch and member.steps == alone.steps
        assert _max_diff(member.model.state_dict(), alone.model.state_dict()) < tol()
        best_m = torch.load(member.run_dir / "best.pt", weights_only=True)["state_dict"]
        best_a = torch.load(alone.run_dir / "best.pt", weights_only=True)["state_dict"]
        assert _max_diff(best_m, best_a) < tol()
    # the members differ from each other (own initialisation and data order)
    assert _max_diff(ens.members[0].model.state_dict(), ens.members[1].model.state_dict()) > 1e-3


def test_without_validation_every_member_equals_fit_and_none_is_selected(tiny_data, tmp_path, tol):
    # no held-out trajectories at all: the lone runs (other seeds) then train on the same trajectories
    cfg = dict(val_fraction=0.0, test_fraction=0.0, monitor="val_loss", epochs=2)
    ens = fit(_config(tiny_data, tmp_path, "ens", ensemble=2, **cfg))
    assert ens.seeds == [5, 6]
    for k, s in enumerate(ens.seeds):
        alone = fit(_config(tiny_data, tmp_path, f"alone{s}", seed=s, **cfg))
        _same_history(ens.members[k].history, alone.history, tol)
        assert _max_diff(ens.members[k].model.state_dict(), alone.model.state_dict()) < tol()
    assert ens.selected is None  # selection uses validation data only
    assert json.loads((Path(ens.run_dir) / "selected.json").read_text())["selected"] is None
    assert not (Path(ens.run_dir) / "best").exists()


def test_best_member_is_selected_by_the_validation_score(tiny_data, tmp_path):
    ens = fit(_config(tiny_data, tmp_path, "ens", ensemble=4))
    out = Path(ens.run_dir)
    scores = []
    for k, s in enumerate(ens.seeds):
        with open(out / f"member_{k}_seed_{s}" / "log.csv") as f:
            scores.append(min(float(r["val_rollout"]) for r in csv.DictReader(f)))
    assert ens.selected == int(np.argmin(scores))
    assert [r["best_score"] for r in ens.table] == pytest.approx(scores, rel=1e-15)
    selected = json.loads((out / "selected.json").read_text())
    assert selected["selected"] == ens.selected and selected["monitor"] == "val_rollout"
    assert (out / "best").resolve() == (out / selected["dir"]).resolve()
    with open(out / "ensemble.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["selected"]) for r in rows] == [int(k == ens.selected) for k in range(4)]
    assert [int(r["seed"]) for r in rows] == ens.seeds
    assert "(selected)" in (out / "ensemble.md").read_text()


def test_run_directories_load(tiny_data, tmp_path):
    ens = fit(_config(tiny_data, tmp_path, "ens", ensemble=2, epochs=2))
    out = Path(ens.run_dir)
    for k, s in enumerate(ens.seeds):
        run = out / f"member_{k}_seed_{s}"
        assert {p.name for p in run.iterdir()} >= {"config.toml", "log.csv", "summary.json", "best.pt", "last.pt"}
        best = load_model(run)
        payload = torch.load(run / "best.pt", weights_only=True)
        assert _max_diff(best.state_dict(), payload["state_dict"]) == 0
        last = load_model(run / "last.pt")
        assert _max_diff(last.state_dict(), ens.members[k].model.state_dict()) == 0
        config = tomllib.loads((run / "config.toml").read_text())
        assert config["seed"] == s and "ensemble" not in config and "seeds" not in config
        summary = json.loads((run / "summary.json").read_text())
        assert summary["ensemble"]["seed"] == s and summary["ensemble"]["split_seed"] == 0
        assert summary["epochs"] == 2 and summary["stopped"] == "epochs"
    assert load_model(out / "best") is not None
    assert tomllib.loads((out / "config.toml").read_text())["seeds"] == [5, 6]


def test_patience_stops_each_member_as_it_would_alone(tiny_data, tmp_path, monkeypatch, tol):
    cfg = dict(epochs=8, patience=1, lr=3e-2, monitor="val_loss", split_seed=5)  # a split where patience bites
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=[5], **cfg))
    alone = fit(_config(tiny_data, tmp_path, "alone", seed=5, **cfg))
    _same_history(ens.members[0].history, alone.history, tol)
    assert ens.members[0].stopped == alone.stopped == "early_stopping" and len(alone.history) < 8


def test_cli_ensemble(tiny_data, tmp_path):
    out = tmp_path / "cli"
    args = ["--data", tiny_data, "--model", "vpt", "--set", "model.seq_len=2", "--set", "model.L=2",
            "--set", "model.n_blocks=1", "--epochs", "2", "--batch-size", "32", "--dtype", "float64",
            "--lr", "3e-3", "--ensemble", "2", "--out", str(out), "--quiet"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "<- selected" in res.output and (out / "ensemble.md").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("member_")) == [
        "member_0_seed_1234", "member_1_seed_1235"]


@pytest.mark.parametrize("args, match", [
    (["--ensemble", "0"], r"ensemble must be a positive integer"),
    (["--ensemble", "2", "--optimizer", "lbfgs"], r"optimizer 'lbfgs' cannot train an ensemble"),
    (["--set", "seeds=[1, 1]"], r"seeds must be distinct"),
    (["--set", "seeds=[]"], r"seeds must be a non-empty list"),
    (["--ensemble", "3", "--set", "seeds=[1, 2]"], r"ensemble = 3 but seeds lists 2 seeds"),
])
def test_bad_ensemble_input_is_one_line(tiny_data, tmp_path, args, match):
    res = CliRunner().invoke(main, ["--data", tiny_data, "--model", "vpt", "--epochs", "1",
                                    "--out", str(tmp_path / "r"), *args])
    assert res.exit_code == 1 and not isinstance(res.exception, AssertionError)
    lines = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and __import__("re").search(match, lines[0]), res.output
    assert not (tmp_path / "r").exists()


def test_resume_of_a_member_or_with_ensemble_is_refused(tiny_data, tmp_path):
    """A member's directory is resumed with its ensemble (tests/test_ensemble_resume.py resumes ensembles)."""
    ens = fit(_config(tiny_data, tmp_path, "ens", ensemble=2, epochs=1))
    member = ens.members[0].run_dir
    with pytest.raises(VPIntegratorError, match=r"a member of an ensemble is resumed with its ensemble"):
        fit(resume=member, epochs=2)
    res = CliRunner().invoke(main, ["--resume", str(member), "--ensemble", "2"])
    assert res.exit_code == 1 and "--ensemble with --resume" in res.output


def test_torchrun_is_refused(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(VPIntegratorError, match=r"an ensemble trains in one process"):
        fit(_config(tiny_data, tmp_path, "ens", ensemble=2))


def test_fit_keyword_and_float32(tiny_data, tmp_path):
    ens = fit(_config(tiny_data, tmp_path, "ens", dtype="float32", monitor="val_loss", epochs=1), ensemble=3)
    assert len(ens.members) == 3 and all(math.isfinite(m.train_loss) for m in ens.members)
    assert ens.best is ens.members[ens.selected]


def test_interrupt_saves_every_member_where_it_stopped(tiny_data, tmp_path, monkeypatch):
    """Ctrl-C mid-epoch (the one loop's interrupt path): each member's last.pt holds the weights after the step
    the signal landed on, its summary says interrupted, and the error says where to resume from."""
    import signal

    from vpintegrator.training import TrainingInterrupted

    original = windows.WindowDataset.batch
    calls = {"n": 0}

    def batch_then_signal(self, index):
        calls["n"] += 1
        if calls["n"] == 2:  # epoch 1, second step
            signal.raise_signal(signal.SIGINT)
        return original(self, index)

    monkeypatch.setattr(windows.WindowDataset, "batch", batch_then_signal)
    with pytest.raises(TrainingInterrupted, match=r"\(\+2 batches\); saved .*ensemble_last.pt, resume from") as info:
        fit(_config(tiny_data, tmp_path, "ens", ensemble=2, monitor="val_loss"))
    monkeypatch.setattr(windows.WindowDataset, "batch", original)
    out = tmp_path / "ens"
    for k, s in enumerate((5, 6)):
        run = out / f"member_{k}_seed_{s}"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["stopped"] == "interrupted" and summary["epochs"] == 0 and summary["steps"] == 2
        last = torch.load(run / "last.pt", weights_only=True)
        assert last["step"] == 2 and last["epoch"] == 0
        assert not (run / "best.pt").exists()  # no epoch finished
    assert info.value.result.steps == 2
    assert json.loads((out / "selected.json").read_text())["selected"] is None
