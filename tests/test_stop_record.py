"""The training run records why and by which clock it stopped (``summary.json`` ``stopped``, ``stop_clock``,
``stop_rule``), and stops by rules no load moves: a step budget (``max_steps``) and the plateau rule
(``patience`` with ``min_rel_delta``)."""

from __future__ import annotations

import json

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


def test_max_steps_stops_at_the_first_epoch_end_past_the_count(tiny_data, tmp_path):
    first = fit(_config(tiny_data, tmp_path, "one", epochs=1))
    per_epoch = first.steps
    result = fit(_config(tiny_data, tmp_path, epochs=None, max_steps=per_epoch + 1, scheduler="constant"))
    assert result.stopped == _summary(tmp_path)["stopped"] == "steps"
    assert result.epochs == 2 and result.steps == 2 * per_epoch


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
