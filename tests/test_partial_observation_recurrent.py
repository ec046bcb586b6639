"""The recurrent rows of the partial-observation study (``gru``, ``lru``): opt-in approaches (``--approaches`` or
``approaches`` in a plan file), trained and scored as the other learned window rows, with their training CPU and
batch-1 cost; the default plan without them."""

from __future__ import annotations

import json
import math

import pytest


def test_the_recurrent_rows_are_approaches_but_not_in_the_default_plans():
    from vpintegrator.studies.partial_observation import APPROACHES, DEFAULTS, QUICK
    from vpintegrator.studies.partial_observation.design import RECURRENT

    assert RECURRENT == ("gru", "lru")
    assert APPROACHES["gru"] == {"name": "gru"} and APPROACHES["lru"] == {"name": "lru"}
    assert not set(RECURRENT) & set(DEFAULTS["approaches"]) and not set(RECURRENT) & set(QUICK["approaches"])
    assert DEFAULTS["approaches"] == [a for a in APPROACHES if a not in RECURRENT]


def test_the_option_and_the_plan_file_reach_the_plan(tmp_path):
    """``--approaches gru,lru`` (and ``approaches`` in a ``--plan`` file) become the plan's approaches and its
    training runs, with a step budget from the measured step costs; ``--help`` says how to add them."""
    import click

    from vpintegrator.studies.partial_observation import STUDY

    out = ["--out", str(tmp_path / "run"), "--set", "systems=coupled_oscillator"]
    plan = STUDY.parse([*out, "--approaches", "gru,lru", "--quick"])
    assert plan.approaches == ("gru", "lru")
    assert plan.training_runs("coupled_oscillator") == [("gru", 1), ("gru", 4), ("lru", 1), ("lru", 4)]
    assert plan.stop_keys("coupled_oscillator", "gru", 4)["max_steps"] >= 10
    (tmp_path / "plan.toml").write_text('approaches = ["gru", "delay_mlp2"]\nsystems = ["rigid_body"]\n')
    from_file = STUDY.parse(["--out", str(tmp_path / "run"), "--plan", str(tmp_path / "plan.toml")])
    assert from_file.approaches == ("gru", "delay_mlp2") and from_file.systems == ("rigid_body",)
    default = STUDY.parse(out)
    assert "gru" not in default.approaches and "lru" not in default.approaches
    command = STUDY.command(prog="vp-study partial_observation")
    assert "approaches=gru,lru" in " ".join(command.get_help(click.Context(command)).split())


def test_a_recurrent_row_on_the_toda_lattice_needs_max_steps_in_one_line(tmp_path):
    from vpintegrator.studies.partial_observation import STUDY
    from vpintegrator.studies.runner import StudyError

    with pytest.raises(StudyError, match="--max-steps") as err:
        STUDY.parse(["--out", str(tmp_path / "run"), "--set", "systems=toda", "--approaches", "gru"])
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_a_tiny_run_gives_rows_for_both(tmp_path):
    """A tiny run with ``--approaches gru,lru``: one row per model and window, finite errors, the stop reason and
    the step budget recorded, the training CPU and the batch-1 cost (CPU s per unit time) measured, and the tables
    with the cost column."""
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.partial_observation import STUDY

    out = tmp_path / "po"
    assert main(STUDY, ["--out", str(out), "--set", "systems=coupled_oscillator", "--set", "windows=2",
                        "--approaches", "gru,lru", "--seeds", "0", "--set", "n_train=12", "--set", "n_test=4",
                        "--max-steps", "10", "--set", "patience=1", "--jobs", "1", "-q"]) == 0
    rows = {r["label"]: r for r in json.loads((out / "partial_observation.json").read_text())["rows"]}
    assert {"gru_T2", "lru_T2"} <= set(rows)
    for label in ("gru_T2", "lru_T2"):
        r = rows[label]
        assert r["kind"] == "model" and r["coupling"] is None and r["stopped"] in ("steps", "early_stopping")
        assert r["stop_rule"]["max_steps"] == 10 and r["steps"] <= 10
        for key in ("err_t10", "err_t100", "full_err_t10"):
            assert math.isfinite(r[key]["median"]), (label, key)
        assert r["train_cpu"] > 0 and r["cost"] > 0 and r["cost_clock"] == "thread_cpu"
    assert "cost" not in rows["parrot"]  # the rows that are not trained are not priced
    table = (out / "partial_observation.md").read_text()
    assert "batch-1 CPU s / unit time" in table and "| gru | 2 | model |" in table


@pytest.mark.parametrize("name", ["recurrent_quick", "recurrent_steps30"])
def test_the_documented_recurrent_tables_are_drawn_from_the_shipped_json(name):
    """docs/partial_observation.md shows every table line the study draws from the shipped results of its recurrent
    section (read through ``results_files``: the repository's docs/data, or the wheel's copy), with the target's
    verdict; the rows hold the batch-1 cost of every learned row."""
    from pathlib import Path

    from vpintegrator._shipped import results_files
    from vpintegrator.studies.partial_observation import RESULTS, summarize_rows, tables

    rows = RESULTS.read_rows(results_files()[f"partial_observation/{name}"])
    assert {r["approach"] for r in rows} >= {"gru", "lru", "delay_mlp2"}
    assert all(r["cost"] > 0 for r in rows if r["kind"] == "model")
    page_file = Path(__file__).resolve().parents[1] / "docs" / "partial_observation.md"
    if not page_file.is_file():
        pytest.skip("the documentation page (not in the wheel)")
    text, page = tables(summarize_rows(rows)), page_file.read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines and [line for line in lines if line not in page] == [] and text.splitlines()[2] in page


@pytest.mark.parametrize("name", ["bath_window", "bath_window16"])
def test_the_documented_bath_window_numbers_are_the_shipped_json(name):
    """docs/memory.md's whole-window table: every number of the rows' first-state and whole-window errors is in the
    shipped results file (read through ``results_files``)."""
    from pathlib import Path

    from vpintegrator._shipped import results_files
    from vpintegrator.studies.memory.tables import read_doc
    from vpintegrator.studies.stats import fmt_num

    rows = read_doc(results_files()[f"memory/{name}"])["rows"]
    whole = max(int(r["T"]) for r in rows if str(r["approach"]).startswith("estimate+"))
    page_file = Path(__file__).resolve().parents[1] / "docs" / "memory.md"
    if not page_file.is_file():
        pytest.skip("the documentation page (not in the wheel)")
    section = page_file.read_text().split("## The bath's whole-window estimate")[1]
    for base in ("gle", "bath+stormer_verlet", "bath+bath_splitting_y6"):
        for noise in (0.0, 0.001):
            for approach, T in ((base, 1), (f"estimate+{base}", whole)):
                r = next(r for r in rows if r["approach"] == approach and int(r["T"]) == T and r["noise"] == noise)
                cell = f"{fmt_num(r['err_t10']['median'])} / {fmt_num(r['err_t100']['median'])}"
                assert cell in section, (name, approach, noise, cell)
