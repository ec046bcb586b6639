"""The training run records why and by which clock it stopped (``summary.json`` ``stopped``, ``stop_clock``,
``stop_rule``), and stops by rules no load moves: a step budget (``max_steps``) and the plateau rule
(``patience`` with ``min_rel_delta``)."""

from __future__ import annotations

import json
import math

import pytest

from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tiny_data, tmp_path, name="run", **kw) -> dict:
    base = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=3,
                batch_size=32, dtype="float64", out=str(tmp_path / name))
    return base | kw


def _summary(tmp_path, name="run") -> dict:
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_a_wall_ceiling_stop_says_wall_and_a_cpu_budget_stop_says_cpu(tiny_data, tmp_path, monkeypatch):
    result = fit(_config(tiny_data, tmp_path, "wall", epochs=None, decay_epochs=10, cpu_time_limit=1e9,
                         time_limit=1e-6))
    s = _summary(tmp_path, "wall")
    assert result.stopped == s["stopped"] == "time_limit"
    assert result.stop_clock == s["stop_clock"] == "wall"
    assert s["stop_rule"]["time_limit"] == 1e-6 and s["stop_rule"]["cpu_time_limit"] == 1e9

    from vpintegrator.training import loop

    clock = {"t": 0.0}

    def fake_process_time():  # 10 CPU s per reading: the CPU budget ends the run long before the wall one
        clock["t"] += 10.0
        return clock["t"]

    monkeypatch.setattr(loop.time, "process_time", fake_process_time)
    result = fit(_config(tiny_data, tmp_path, "cpu", epochs=50, cpu_time_limit=75.0, time_limit=1e6))
    s = _summary(tmp_path, "cpu")
    assert result.stopped == "time_limit" and result.stop_clock == s["stop_clock"] == "cpu"


def test_other_stops_record_no_clock(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=2))
    s = _summary(tmp_path)
    assert result.stopped == s["stopped"] == "epochs" and result.stop_clock is None and s["stop_clock"] is None
    assert s["stop_rule"] == {"epochs": 2, "time_limit": None, "cpu_time_limit": None, "max_steps": None,
                              "patience": 0, "min_delta": 0.0, "min_rel_delta": 0.0, "monitor": "val_loss"}


def test_max_steps_stops_at_exactly_that_many_steps_mid_epoch(tiny_data, tmp_path):
    first = fit(_config(tiny_data, tmp_path, "one", epochs=1))
    per_epoch = first.steps
    result = fit(_config(tiny_data, tmp_path, epochs=None, max_steps=per_epoch + 1, scheduler="constant"))
    s = _summary(tmp_path)
    assert result.stopped == s["stopped"] == "steps"
    # the second epoch ends after its first step, short, validated and judged like any epoch
    assert result.epochs == 2 and result.steps == s["steps"] == per_epoch + 1 and s["short_epoch"] is True
    assert len(result.history) == 2


def test_max_steps_alone_is_a_stop_rule():
    from vpintegrator.training import TrainConfig

    TrainConfig.from_dict({"data": ["x.h5"], "model": {"name": "vpt"}, "epochs": None, "max_steps": 5,
                           "scheduler": "constant"}).validate()


def test_the_plateau_rule_counts_relative_improvement_and_keeps_the_best_epoch(tiny_data, tmp_path):
    """min_rel_delta close to 1: no epoch improves on the reference by that share, so patience 2 ends the run
    after 3 epochs; best.pt still follows every improvement (min_delta 0)."""
    plain = fit(_config(tiny_data, tmp_path, "plain", epochs=3, scheduler="constant"))
    result = fit(_config(tiny_data, tmp_path, epochs=20, patience=2, min_rel_delta=0.999999, scheduler="constant"))
    assert result.stopped == "early_stopping" and result.epochs == 3
    assert result.best_epoch == plain.best_epoch  # the same epochs, the same best one
    assert _summary(tmp_path)["stop_rule"]["min_rel_delta"] == 0.999999


def test_the_trend_of_a_plateau_says_whether_it_still_fell():
    from vpintegrator.training.record import plateau_trend

    import numpy as np

    scores = [1.0, 0.9, 0.8, 0.7, 0.6]
    slope, falling = plateau_trend(scores)
    assert falling is True and slope == pytest.approx(np.polyfit(np.arange(5), np.log(scores), 1)[0], rel=1e-12)
    assert plateau_trend([0.7, 0.6, 0.7, 0.6, 0.7])[1] is False  # noise about a level: a plateau
    assert plateau_trend([0.9, 1.0, 0.7, 0.9, 0.6])[1] is False  # falls, but not clearly (2 standard errors)
    # it falls clearly, but less than the rule counts as progress: 1 - 0.6 = 40 %, asked 50 % (or 0.5 absolute)
    assert plateau_trend([1.0, 0.9, 0.8, 0.7, 0.6], min_rel_delta=0.5)[1] is False
    assert plateau_trend([1.0, 0.9, 0.8, 0.7, 0.6], min_delta=0.5)[1] is False
    assert plateau_trend([1.0, 0.9]) == (None, None) and plateau_trend([1.0, math.nan, 0.8]) == (None, None)


def _scripted(monkeypatch, cls, scores: list[list[float]]) -> None:
    """The validation losses of ``cls`` (a step strategy) at its epochs: ``scores[k]`` member ``k``'s."""
    calls = {"n": 0}

    def val_losses(self, dataset=None):
        i = calls["n"]
        calls["n"] += 1
        return [float(member[min(i, len(member) - 1)]) for member in scores]

    monkeypatch.setattr(cls, "val_losses", val_losses)


#: a lucky first epoch, then a score that falls but never below it (the plateau rule stops at epoch 6)
FALLING = [0.5, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
#: the same reference, then noise about a level
LEVEL = [0.5, 0.7, 0.6, 0.7, 0.6, 0.7, 0.6]


def test_a_run_stopped_while_its_score_still_falls_says_so(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.training.single import SingleSteps

    _scripted(monkeypatch, SingleSteps, [FALLING])
    result = fit(_config(tiny_data, tmp_path, epochs=20, patience=5))
    s = _summary(tmp_path)
    assert result.stopped == s["stopped"] == "early_stopping" and result.epochs == 6
    assert result.still_improving is True and s["still_improving"] is True and s["plateau_slope"] < 0
    _scripted(monkeypatch, SingleSteps, [LEVEL])
    result = fit(_config(tiny_data, tmp_path, "level", epochs=20, patience=5))
    s = _summary(tmp_path, "level")
    assert result.epochs == 6 and result.still_improving is False and s["still_improving"] is False


def test_ensemble_members_judge_their_own_trend(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.training.ensemble import EnsembleSteps

    _scripted(monkeypatch, EnsembleSteps, [FALLING, LEVEL])
    result = fit(_config(tiny_data, tmp_path, "ens", epochs=20, patience=5, seeds=[1, 2]))
    assert [m.still_improving for m in result.members] == [True, False]
    assert [json.loads((m.run_dir / "summary.json").read_text())["still_improving"] for m in result.members] == [
        True, False]


def test_other_stops_record_no_trend(tiny_data, tmp_path):
    result = fit(_config(tiny_data, tmp_path, epochs=2, patience=5))
    s = _summary(tmp_path)
    assert result.still_improving is None and s["still_improving"] is None and s["plateau_slope"] is None
