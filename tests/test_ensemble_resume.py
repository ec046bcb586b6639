"""Resuming a seed ensemble (issue 36): ``fit(resume=out)`` / ``vp-train --resume OUT`` continues every
member from ``out/ensemble_last.pt``, and the continuation equals the uninterrupted run bit for bit (one
process, the same code on the same data: exact equality is the promise here), after an interrupt at an
epoch's end or in its middle, with a torch optimiser or Levenberg–Marquardt, with members that stopped.
The kill -9 cases are in tests/test_crash_train.py."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data import windows
from vpintegrator.training import TrainingInterrupted, fit
from vpintegrator.rundir import read_log as read_log_rows

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name, **kw) -> dict:
    base = dict(
        data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, epochs=4, batch_size=16,
        lr=3e-3, dtype="float64", seed=5, ensemble=3, init_scale=0.1, out=str(tmp_path / name),
    )
    return base | kw


def _interrupt_at_batch(monkeypatch, n: int) -> None:
    """SIGINT as the ``n``-th batch is gathered (the loop finishes that step, saves and stops)."""
    original = windows.WindowDataset.batch
    calls = {"n": 0}

    def batch_then_signal(self, index):
        calls["n"] += 1
        if calls["n"] == n:
            signal.raise_signal(signal.SIGINT)
        return original(self, index)

    monkeypatch.setattr(windows.WindowDataset, "batch", batch_then_signal)


def _same_members(a, b) -> None:
    """Every member's files of ensemble ``a`` equal ``b``'s: weights bit for bit, logs but the seconds."""
    for ma, mb in zip(sorted(a.glob("member_*")), sorted(b.glob("member_*")), strict=True):
        assert ma.name == mb.name
        for name in ("last.pt", "best.pt"):
            sa = torch.load(ma / name, weights_only=True)
            sb = torch.load(mb / name, weights_only=True)
            assert sa["epoch"] == sb["epoch"] and sa.get("step") == sb.get("step")
            for key, t in sa["state_dict"].items():
                assert torch.equal(t, sb["state_dict"][key]), (ma.name, name, key)
        ra, rb = read_log_rows(ma / "log.csv"), read_log_rows(mb / "log.csv")
        assert [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in ra] == \
            [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in rb]
        ja, jb = (json.loads((m / "summary.json").read_text()) for m in (ma, mb))
        for key in ("epochs", "steps", "best_epoch", "best_loss", "train_loss", "val_loss", "stopped",
                    "still_improving", "plateau_slope", "lm_restarts"):
            assert ja.get(key) == jb.get(key), (ma.name, key)
    assert (a / "ensemble.csv").read_text() == (b / "ensemble.csv").read_text()
    assert json.loads((a / "selected.json").read_text()) == json.loads((b / "selected.json").read_text())


@pytest.mark.parametrize("batch", [3, 4, 5], ids=["epoch-1-mid", "epoch-end", "epoch-2-start"])
def test_interrupted_ensemble_resumes_to_the_uninterrupted_run(tiny_data, tmp_path, monkeypatch, batch):
    """Killed politely at a few moments (batch 3 of 4 per epoch, the last batch of epoch 1, the first of
    epoch 2): the resume's files equal the uninterrupted run's exactly (weights, optimiser state, data order
    and RNGs all restored)."""
    ref = fit(_config(tiny_data, tmp_path, "ref"))
    _interrupt_at_batch(monkeypatch, batch)
    with pytest.raises(TrainingInterrupted, match=r"resume from"):
        fit(_config(tiny_data, tmp_path, "ens"))
    monkeypatch.undo()
    assert (tmp_path / "ens" / "ensemble_last.pt").is_file()
    res = fit(resume=tmp_path / "ens")
    assert res.epochs == ref.epochs == 4 and res.selected == ref.selected
    _same_members(tmp_path / "ens", tmp_path / "ref")


def test_resume_extends_a_finished_ensemble(tiny_data, tmp_path):
    """A finished ensemble resumed with more epochs equals one trained for them at once (up to the schedule:
    decay_epochs is fixed by the first run, so both runs fix it)."""
    fit(_config(tiny_data, tmp_path, "ref", epochs=4, decay_epochs=4.0))
    fit(_config(tiny_data, tmp_path, "ens", epochs=2, decay_epochs=4.0))
    fit(resume=tmp_path / "ens", epochs=4)
    _same_members(tmp_path / "ens", tmp_path / "ref")


def test_lm_ensemble_resumes_exactly(tiny_data, tmp_path, monkeypatch):
    kw = dict(optimizer="lm", lm_windows=8, lm_iters_per_epoch=3, lm_resample_every=2, epochs=3, ensemble=2)
    fit(_config(tiny_data, tmp_path, "ref", **kw))
    calls = {"n": 0}
    from vpintegrator.training import ensemble_lm

    original = ensemble_lm.EnsembleLM.step

    def step_then_signal(self):
        calls["n"] += 1
        if calls["n"] == 5:  # epoch 2, second iteration
            signal.raise_signal(signal.SIGINT)
        return original(self)

    monkeypatch.setattr(ensemble_lm.EnsembleLM, "step", step_then_signal)
    with pytest.raises(TrainingInterrupted):
        fit(_config(tiny_data, tmp_path, "ens", **kw))
    monkeypatch.undo()
    fit(resume=tmp_path / "ens")
    _same_members(tmp_path / "ens", tmp_path / "ref")


def test_members_stopped_by_patience_stay_stopped_after_resume(tiny_data, tmp_path, monkeypatch):
    kw = dict(epochs=8, patience=1, min_delta=1e9, monitor="val_loss")  # every member stops after epoch 2
    fit(_config(tiny_data, tmp_path, "ref", **kw))
    _interrupt_at_batch(monkeypatch, 6)  # epoch 2
    with pytest.raises(TrainingInterrupted):
        fit(_config(tiny_data, tmp_path, "ens", **kw))
    monkeypatch.undo()
    fit(resume=tmp_path / "ens")
    _same_members(tmp_path / "ens", tmp_path / "ref")


def test_a_member_directory_names_its_ensemble(tiny_data, tmp_path):
    ens = fit(_config(tiny_data, tmp_path, "ens", epochs=2))
    member = ens.members[1].run_dir
    with pytest.raises(VPIntegratorError, match=r"a member of an ensemble is resumed with its ensemble; give resume = "):
        fit(resume=member, epochs=2)
    with pytest.raises(VPIntegratorError, match=r"ensemble or seeds with resume"):
        fit(resume=ens.run_dir, epochs=2, ensemble=3)
    with pytest.raises(VPIntegratorError, match=r"epochs 1 is less than the 2 epochs"):
        fit(resume=ens.run_dir, epochs=1)


def test_missing_or_foreign_state_is_one_line(tiny_data, tmp_path):
    fit(_config(tiny_data, tmp_path, "a", epochs=1))
    fit(_config(tiny_data, tmp_path, "b", epochs=1, seeds=[7, 8, 9]))
    state = tmp_path / "a" / "ensemble_last.pt"
    log = next((tmp_path / "a").glob("member_0_*")) / "log.csv"
    kept = log.read_bytes()
    log.unlink()
    with pytest.raises(VPIntegratorError, match=r"log.csv is missing, but ensemble_last.pt is at epoch 1"):
        fit(resume=tmp_path / "a", epochs=2)
    log.write_bytes(kept)
    state.write_bytes((tmp_path / "b" / "ensemble_last.pt").read_bytes())
    with pytest.raises(VPIntegratorError, match=r"holds the members of seeds \[7, 8, 9\]"):
        fit(resume=tmp_path / "a", epochs=2)
    state.unlink()
    with pytest.raises(VPIntegratorError, match=r"no ensemble_last.pt there"):
        fit(resume=tmp_path / "a", epochs=2)


def test_resume_refuses_changed_data(tiny_data, tmp_path):
    import shutil

    data = tmp_path / "data.h5"
    shutil.copy(tiny_data, data)
    fit(_config(str(data), tmp_path, "ens", epochs=1, data=[str(data)]))
    other = tmp_path / "other.h5"
    from vpintegrator.data import integrate
    from vpintegrator.data.trajectory_files import write_trajectories
    import numpy as np

    y0 = np.random.default_rng(3).normal(size=(12, 3))
    write_trajectories(other, integrate("rigid_body", y0 / np.linalg.norm(y0, axis=1, keepdims=True), 0.2, 15,
                                        method="rk4"))
    shutil.copy(other, data)
    with pytest.raises(VPIntegratorError, match=r"has changed since the run's last checkpoint"):
        fit(resume=tmp_path / "ens", epochs=2)


def test_overwrite_replaces_the_state_and_keeps_user_files(tiny_data, tmp_path):
    """ensemble_last.pt is one of vp-train's own files: --overwrite replaces it with the new run's (a resume then
    continues the new run), a file of the user's in the directory is kept."""
    fit(_config(tiny_data, tmp_path, "ens", epochs=3))
    notes = tmp_path / "ens" / "notes.txt"
    notes.write_text("mine\n")
    fit(_config(tiny_data, tmp_path, "ens", epochs=1), overwrite=True)
    assert torch.load(tmp_path / "ens" / "ensemble_last.pt", weights_only=True)["epoch"] == 1
    assert notes.read_text() == "mine\n"
    res = fit(resume=tmp_path / "ens", epochs=2)
    assert res.epochs == 2 and all(len(read_log_rows(m.run_dir / "log.csv")) == 2 for m in res.members)


def test_ensemble_checkpoints_mid_epoch_and_resumes_from_there(tiny_data, tmp_path, monkeypatch):
    """The loop's mid-epoch checkpoints (every ``checkpoint_seconds``) hold for an ensemble too: its
    ``ensemble_last.pt`` is written between batches, and a resume from one such file ends where the
    uninterrupted run does, bit for bit."""
    import shutil

    from vpintegrator.training.ensemble import EnsembleSteps

    full = tmp_path / "full"
    fit(_config(tiny_data, tmp_path, "full"))
    original = EnsembleSteps.save_state
    mid: list[int] = []

    def save_and_keep(self, out, members, at):
        original(self, out, members, at)
        if self.batch_in_epoch and not mid:  # the first mid-epoch checkpoint: keep a copy to resume from
            mid.append(self.batch_in_epoch)
            shutil.copytree(out, tmp_path / "mid")

    monkeypatch.setattr(EnsembleSteps, "save_state", save_and_keep)
    fit(_config(tiny_data, tmp_path, "ticking", checkpoint_seconds=1e-9))
    monkeypatch.undo()
    assert mid and mid[0] > 0
    state = torch.load(tmp_path / "mid" / "ensemble_last.pt", weights_only=True)
    assert state["batch_in_epoch"] == mid[0] and state["losses"].shape[0] == mid[0]
    _same_members(tmp_path / "ticking", full)
    fit(resume=tmp_path / "mid")
    _same_members(tmp_path / "mid", full)
