"""Every study table says how a training stopped in the shared words (issue 92): Levenberg–Marquardt stuck at its
damping cap is "LM damping stuck at its cap" (never ``lm_stuck`` raw) and a plateau stop whose trend still fell
is "plateau (patience) while still improving" (``vpintegrator.studies.rigid_body_results.values``), in the memory
and partial-observation tables as in the unknown-form and rigid-body ones."""

from __future__ import annotations

import json

import pytest

from vpintegrator._shipped import results_files
from vpintegrator.studies.rigid_body_results.values import LM_STUCK, STILL_IMPROVING, stop_cell, stop_record
from vpintegrator.studies.stats import unplain


def _rows(name: str) -> list[dict]:
    rows = unplain(json.loads(results_files(archived=True)[name].read_text()))["rows"]
    models = [r for r in rows if r.get("stopped") is not None]
    assert len(models) >= 2
    models[0].update(stop_record({"stopped": "lm_stuck"}))
    models[1].update(stop_record({"stopped": "early_stopping", "still_improving": True}))
    return rows


@pytest.mark.parametrize("study", ["memory/quick", "partial_observation/quick"])
def test_the_tables_name_a_stuck_lm_and_a_plateau_still_improving(study):
    if study.startswith("memory"):
        from vpintegrator.studies.memory.tables import summarize_rows, tables
    else:
        from vpintegrator.studies.partial_observation import summarize_rows, tables
    text = tables(summarize_rows(_rows(study)))
    cells = [line for line in text.splitlines() if line.startswith("| ")]
    assert any(LM_STUCK in line for line in cells) and any(STILL_IMPROVING in line for line in cells)
    assert "lm_stuck" not in text


def test_a_results_file_that_kept_the_raw_token_is_said_in_words():
    assert stop_cell(["early_stopping", "lm_stuck", "steps"]) == f"early_stopping, {LM_STUCK}, steps"
    assert stop_cell([]) == "—" and stop_cell([], "-") == "-"
    assert stop_record({"stopped": "early_stopping", "still_improving": True, "epochs": 3}) == {
        "stopped": "early_stopping", "stop_clock": None, "still_improving": True}
