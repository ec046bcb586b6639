"""A training budget holds inside an epoch: in one process the CPU and wall budgets are checked after every
optimiser step, and an epoch they run out in ends there (a short epoch, validated and judged), so one long
epoch -- many Levenberg–Marquardt iterations of a large model -- cannot overrun a budget many-fold (the
partial-observation study's Toda case found 548 CPU s spent against a 30-s budget when it was checked per
epoch only). The CPU clock here is a fake one (one second per reading), so the tests count steps, not time."""

from __future__ import annotations

import json

import pytest
import torch

from vpintegrator.training import fit
from vpintegrator.training.ensemble import EnsembleSteps
from vpintegrator.training.single import SingleSteps


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    base = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=None,
                batch_size=1, dtype="float64", lr=1e-3, scheduler="constant", out=str(tmp_path / name))
    return base | kw


def _fake_cpu(monkeypatch) -> dict[str, float]:
    """The training loop's CPU clock, advancing one second at every reading."""
    from vpintegrator.training import loop

    clock = {"t": 0.0}

    def fake() -> float:
        clock["t"] += 1.0
        return clock["t"]

    monkeypatch.setattr(loop, "process_cpu", fake)
    return clock


def _record_steps(monkeypatch, cls) -> list[torch.Tensor]:
    """Every optimiser step's reported losses (one per member), as the strategy ``cls`` returns them."""
    seen: list[torch.Tensor] = []
    original = cls.step

    def step(self, b, stop, save):
        reported, agreed = original(self, b, stop, save)
        seen.append(reported.detach().double().reshape(-1).clone())
        return reported, agreed

    monkeypatch.setattr(cls, "step", step)
    return seen


def test_a_cpu_budget_ends_a_long_lm_epoch_where_it_runs_out(tiny_data, tmp_path, monkeypatch):
    _fake_cpu(monkeypatch)
    seen = _record_steps(monkeypatch, SingleSteps)
    result = fit(_config(tiny_data, tmp_path, optimizer="lm", lm_windows=16, lm_iters_per_epoch=400,
                         cpu_time_limit=12.0))
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert result.stopped == "time_limit" and summary["stop_clock"] == "cpu"
    # one short epoch: a few iterations of its 400, not all of them (per-epoch checks would run 400)
    assert result.epochs == 1 and len(result.history) == 1 and 1 <= result.steps == len(seen) < 20
    assert summary["cpu_time"] >= 12.0 and summary["short_epoch"] is True
    # the run is whole: its best model is the short epoch's, its last.pt at the epoch's end
    ckpt = torch.load(result.run_dir / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["batch_in_epoch"] == 0 and result.best_epoch == 1


def test_a_wall_budget_ends_the_epoch_after_one_step(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, optimizer="lm", lm_windows=16, lm_iters_per_epoch=400,
                         time_limit=1e-6))
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert result.stopped == "time_limit" and summary["stop_clock"] == "wall"
    assert result.epochs == 1 and result.steps == 1


def test_a_short_epochs_training_loss_is_the_mean_over_the_steps_taken(tiny_data, tmp_path, monkeypatch):
    _fake_cpu(monkeypatch)
    seen = _record_steps(monkeypatch, SingleSteps)
    result = fit(_config(tiny_data, tmp_path, cpu_time_limit=8.0))
    assert result.stopped == "time_limit" and result.epochs == 1
    assert 1 <= len(seen) == result.steps < 20  # batch size 1: an epoch is every training window (> 100)
    expected = float(torch.cat(seen).mean())
    assert result.history[0]["train_loss"] == pytest.approx(expected, rel=1e-12)


def test_an_ensembles_short_epoch_averages_each_member_over_the_steps_taken(tiny_data, tmp_path, monkeypatch):
    _fake_cpu(monkeypatch)
    seen = _record_steps(monkeypatch, EnsembleSteps)
    result = fit(_config(tiny_data, tmp_path, ensemble=2, cpu_time_limit=8.0))
    assert result.stopped == "time_limit"
    losses = torch.stack(seen)  # (steps, members)
    assert 1 <= losses.shape[0] < 20 and losses.shape[1] == 2
    for k, member in enumerate(result.members):
        assert member.epochs == 1
        assert member.history[0]["train_loss"] == pytest.approx(float(losses[:, k].mean()), rel=1e-12)


def test_a_run_cut_by_its_budget_resumes_with_a_larger_one(tiny_data, tmp_path, monkeypatch):
    clock = _fake_cpu(monkeypatch)
    cut = fit(_config(tiny_data, tmp_path, optimizer="lm", lm_windows=16, lm_iters_per_epoch=30,
                      cpu_time_limit=6.0))
    assert cut.epochs == 1 and cut.steps < 30
    clock["t"] = 0.0
    resumed = fit(resume=tmp_path / "run", cpu_time_limit=1e6, epochs=2)
    # the next epoch is a whole one: 30 iterations after the short first
    assert resumed.stopped == "epochs" and resumed.epochs == 2 and resumed.steps == cut.steps + 30
    assert json.loads((resumed.run_dir / "summary.json").read_text())["short_epoch"] is False


@pytest.mark.parametrize("kw", [dict(optimizer="lm", lm_windows=16, lm_iters_per_epoch=10),
                                dict(batch_size=8), dict(batch_size=8, ensemble=2)],
                         ids=["lm", "adam", "ensemble"])
def test_a_step_budget_stops_at_exactly_its_steps_inside_an_epoch(tiny_data, tmp_path, kw):
    """``--max-steps 3`` takes 3 optimiser steps, not a whole epoch's 10 (issue 88): every optimiser, every
    strategy; the short epoch is validated and judged as any epoch."""
    seen_steps = []
    result = fit(_config(tiny_data, tmp_path, max_steps=3, **kw),
                 callback=lambda info: seen_steps.append((info if isinstance(info, list) else [info])[0].step))
    assert result.stopped == "steps" and result.epochs == 1 and seen_steps == [3]
    for run in result.runs:
        summary = json.loads((run.run_dir / "summary.json").read_text())
        assert run.steps == summary["steps"] == 3 and len(run.history) == 1 and summary["short_epoch"] is True


def test_a_step_budgets_progress_counts_steps(tiny_data, tmp_path, monkeypatch):
    """The progress of a step-budgeted run counts in the budget's unit: 30 steps read 30/30, not 1/100000."""
    import io

    from vpintegrator import _progress

    out = io.StringIO()
    monkeypatch.setattr(_progress, "on_terminal", lambda stream=None: False)
    original = _progress.ProgressLines.__init__

    def lines_to(self, *a, **k):
        original(self, *a, **{**k, "stream": out, "interval": 0})

    monkeypatch.setattr(_progress.ProgressLines, "__init__", lines_to)
    fit(_config(tiny_data, tmp_path, optimizer="lm", lm_windows=16, lm_iters_per_epoch=8, epochs=100000,
                max_steps=30), progress=True)
    got = [line for line in out.getvalue().splitlines() if line.startswith("training: ")]
    assert got[0].startswith("training: 8/30 (27%)") and got[-1].startswith("training: 30/30 (100%)")
    assert "steps" in got[0]
