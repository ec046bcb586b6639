"""One run's bookkeeping (vpintegrator.training.record.RunRecord), shared by a single run and each ensemble
member, and the one log.csv reader (vpintegrator.rundir) reading back what it writes."""

from __future__ import annotations

import math

import pytest
import torch

from vpintegrator.errors import VPIntegratorError
from vpintegrator.rundir import LOG_COLUMNS, ROLLOUT_COLUMN, read_log
from vpintegrator.training.record import RunRecord


def test_the_best_epoch_rule_with_min_delta_and_patience():
    rec = RunRecord(None, LOG_COLUMNS, min_delta=0.1)
    calls = []

    def state():
        calls.append(1)
        return {"w": torch.zeros(1)}

    assert rec.judge(1, math.nan, state)  # the first epoch is the best even with a NaN score
    assert rec.judge(2, 1.0, state)  # any finite score beats a non-finite best
    assert not rec.judge(3, 0.95, state)  # better, but not by more than min_delta
    assert rec.bad_epochs == 1
    assert rec.judge(4, 0.85, state) and rec.bad_epochs == 0
    assert (rec.best_epoch, rec.best_loss, len(calls)) == (4, 0.85, 3)  # the weights copied only when best


def test_log_round_trips_exactly_and_resume_keeps_rows_up_to_the_checkpoint(tmp_path):
    cols = (*LOG_COLUMNS, ROLLOUT_COLUMN)
    rec = RunRecord(tmp_path, cols, 0.0)
    rec.start_log()
    rows = [{"epoch": e, "train_loss": 1 / (e + 3), "val_loss": math.nan, "lr": 1e-3 * 0.9**e,
             "seconds": 0.1 * e, ROLLOUT_COLUMN: 2.0 / 7 * e} for e in (1, 2, 3)]
    for r in rows:
        rec.log(r)
    got = read_log(tmp_path / "log.csv")
    assert [r["epoch"] for r in got] == [1, 2, 3]
    for g, r in zip(got, rows):
        assert all(g[k] == r[k] or (math.isnan(g[k]) and math.isnan(r[k])) for k in cols)  # floats by repr
    with open(tmp_path / "log.csv", "a") as f:
        f.write("4,0.1,0.")  # a torn last line of a killed run
    assert len(read_log(tmp_path / "log.csv")) == 3
    resumed = RunRecord(tmp_path, cols, 0.0)
    resumed.history = read_log(tmp_path / "log.csv", max_epoch=2)  # the checkpoint was at epoch 2
    resumed.start_log()
    assert [r["epoch"] for r in read_log(tmp_path / "log.csv")] == [1, 2]


def test_a_log_without_the_standard_columns_is_one_line_error(tmp_path):
    (tmp_path / "log.csv").write_text("epoch,loss\n1,0.5\n")
    with pytest.raises(VPIntegratorError, match=r"missing column 'train_loss'"):
        read_log(tmp_path / "log.csv")
    assert read_log(tmp_path / "missing.csv") == []
