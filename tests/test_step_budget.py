"""Training budgets in work (issue 65): a study's CPU budget becomes a number of optimiser steps made of measured
step costs, so that the same command trains the same steps and writes the same rows on any machine under any
load; CPU and wall limits stay a safety valve whose stop the tables call a cut."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os

import pytest

from vpintegrator.studies.partial_observation import STEP_COSTS, STUDY
from vpintegrator.studies.runner import StudyError
from vpintegrator.studies.step_budget import VALVE_FACTOR, nearest_cost, step_budget, stop_keys

TIMING = {"seconds", "cpu_seconds", "wall_time", "cpu_time", "stop_clock", "provenance"}  # clocks, and when


def test_seconds_become_whole_epochs_of_the_measured_cost():
    b = step_budget(30.0, 4.0, 10)
    assert (b.max_steps, b.epoch_cost, b.source) == (70, 4.0, "measured")  # 7 whole epochs of 4 s
    assert step_budget(1.0, 4.0, 10).max_steps == 10  # at least one epoch
    assert step_budget(30.0, 4.0, 10, given=25).record() == {"max_steps": 25, "budget_seconds": 30.0,
                                                             "epoch_cost": 4.0, "step_cost_source": "--max-steps"}
    with pytest.raises(StudyError, match="no measured step cost .* give --max-steps N"):
        step_budget(30.0, None, 10, what="vpt T = 16")


def test_a_window_never_measured_takes_the_nearest_shorter_ones_cost_scaled():
    costs = {("s", "a", 1): 1.0, ("s", "a", 2): 2.5}
    assert nearest_cost(costs, ("s", "a"), 2) == (2.5, "measured")
    assert nearest_cost(costs, ("s", "a"), 8) == (10.0, "extrapolated from T = 2")
    assert nearest_cost(costs, ("s", "b"), 2) == (None, "")
    # a reduced dimension: the nearest measured one on either side (the reduction study's flow maps)
    dims = {(16,): 1.0, (32,): 6.0}
    assert nearest_cost(dims, (), 8, below_only=False, label="2n") == (0.5, "extrapolated from 2n = 16")
    assert nearest_cost(dims, (), 64, below_only=False, label="2n") == (12.0, "extrapolated from 2n = 32")
    assert nearest_cost(dims, (), 8) == (None, "")  # below only: nothing below 16


def test_the_stop_keys_of_each_budget():
    b = step_budget(10.0, 2.0, 10)
    # the valve counts the training's own CPU seconds: no wall limit a loaded machine could reach first (issue 88)
    assert stop_keys("plateau", 10.0, 4.0, b) == {"max_steps": 50, "cpu_time_limit": VALVE_FACTOR * 10.0}
    assert stop_keys("cpu", 10.0, 4.0, None) == {"cpu_time_limit": 10.0, "time_limit": 40.0}
    assert stop_keys("wall", 10.0, 4.0, None) == {"time_limit": 10.0}


def test_the_valve_count_says_how_many_trainings_were_cut_and_by_which_clock():
    from vpintegrator.studies.step_budget import valve_line, valve_record

    rows = [{"stopped": "time_limit", "stop_clock": "cpu"}, {"stopped": "steps"}, {"stopped": "early_stopping"},
            {"stopped": "time_limit", "stop_clock": "wall"}, {"stopped": "time_limit"}, {"label": "a fitted row"}]
    record = valve_record(rows)
    assert record == {"cut": 3, "of": 5, "by": {"cpu": 1, "not recorded": 1, "wall": 1}}
    assert valve_line(record) == "cut by the valve: 3 of 5 trainings (cpu 1, not recorded 1, wall 1)"
    assert valve_line(valve_record([{"stopped": "steps"}])) == "cut by the valve: 0 of 1 trainings"


def _plan(*argv):
    return STUDY.parse(["--out", "unused", "--quick", *argv])


def test_the_partial_observation_plan_trains_by_steps_from_its_cost_table():
    plan = _plan()
    assert plan.budget == "plateau"
    cost = STEP_COSTS[("coupled_oscillator", "vpt", 4)]
    keys = plan.stop_keys("coupled_oscillator", "vpt", 4)
    assert keys["max_steps"] == 10 * max(1, int(plan.budget_seconds // cost))
    assert keys["cpu_time_limit"] == VALVE_FACTOR * plan.budget_seconds  # a valve, not the budget
    assert _plan("--max-steps", "40").stop_keys("rigid_body", "vpt", 1)["max_steps"] == 40
    # the old rule on request, its wall ceiling from --wall-ceiling (no hidden clock)
    assert _plan("--budget", "cpu", "--wall-ceiling", "3").stop_keys("toda", "vpt", 1) == {
        "cpu_time_limit": plan.budget_seconds, "time_limit": 3 * plan.budget_seconds}


def test_the_plan_names_every_training_whose_step_cost_is_a_guess():
    """The default windows' T = 8 of delay_vpff and vpt_mix were never measured (their cost is scaled from T = 4,
    which at T = 8 came out 16 times too low for delay_vpff): the plan lists exactly those, the header prints them."""
    plan = STUDY.parse(["--out", "unused", "--systems", "coupled_oscillator", "--seeds", "0"])
    assert plan.estimated_costs() == ["vpt_mix T = 8 on coupled_oscillator (extrapolated from T = 4)",
                                      "delay_vpff T = 8 on coupled_oscillator (extrapolated from T = 4)"]
    measured = STUDY.parse(["--out", "unused", "--systems", "coupled_oscillator", "--windows", "1,2,4"])
    assert measured.estimated_costs() == []
    assert _plan("--max-steps", "40").estimated_costs() == []  # steps given: nothing guessed


def test_a_configuration_without_a_measured_cost_is_refused_at_plan_time(monkeypatch):
    from vpintegrator.studies.partial_observation import plan as po_plan  # the module that prices a plan's runs

    costs = {k: v for k, v in STEP_COSTS.items() if k[:2] != ("coupled_oscillator", "delay_mlp")}
    monkeypatch.setattr(po_plan, "STEP_COSTS", costs)
    args = ("--systems", "coupled_oscillator", "--approaches", "delay_mlp", "--windows", "1")
    with pytest.raises(StudyError, match="delay_mlp T = 1 on coupled_oscillator: no measured step cost"):
        _plan(*args)
    assert _plan(*args, "--max-steps", "10").stop_keys("coupled_oscillator", "delay_mlp", 1)["max_steps"] == 10


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def _train(data: str, out: str) -> tuple[list[dict], dict]:
    from vpintegrator.training import fit

    fit(dict(data=[data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, optimizer="lm",
             lm_windows=64, lm_iters_per_epoch=3, dtype="float64", device="cpu", seed=3, epochs=1000, max_steps=9,
             cpu_time_limit=VALVE_FACTOR * 30.0, out=out))
    with open(os.path.join(out, "log.csv"), newline="") as fh:
        log = [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(fh)]
    with open(os.path.join(out, "summary.json")) as fh:
        summary = {k: v for k, v in json.load(fh).items() if k not in TIMING}
    return log, summary


def test_a_step_budget_trains_the_same_run_beside_a_load_on_every_core(tiny_data, tmp_path):
    import torch

    quiet = _train(tiny_data, str(tmp_path / "quiet"))
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    spinners = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(max(2, os.cpu_count() or 2))]
    for p in spinners:
        p.start()
    try:
        loaded = _train(tiny_data, str(tmp_path / "loaded"))
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=10)
    assert quiet[1]["stopped"] == "steps" and quiet[1]["steps"] == 9
    assert loaded == quiet  # every loss of every epoch, the step count, the stop: only the clocks differ
    a, b = (torch.load(tmp_path / d / "best.pt", weights_only=False) for d in ("quiet", "loaded"))
    sa, sb = a.get("state_dict", a), b.get("state_dict", b)
    assert all(torch.equal(sa[k], sb[k]) for k in sa if isinstance(sa[k], torch.Tensor))


def test_the_differ_sees_every_field_but_the_clocks(same_rows):
    mod = same_rows
    a = {"rows": [{"label": "x", "err_t10": {"median": 0.1}, "train_cpu": 3.0, "cost": 1e-4,
                   "curve": {"cpu": [1.0], "val": [2.0]}}]}
    b = {"rows": [{"label": "x", "err_t10": {"median": 0.1}, "train_cpu": 9.0, "cost": 2e-4,
                   "curve": {"cpu": [5.0], "val": [2.0]}}]}
    assert list(mod.differences(a, b)) == []  # clocks aside
    b["rows"][0]["curve"]["val"] = [2.5]
    assert list(mod.differences(a, b)) == ["/rows[0]/curve/val[0]: 2.0 against 2.5"]


@pytest.mark.slow
def test_a_tiny_study_writes_the_same_rows_beside_a_load(tmp_path, same_rows):
    """The study-level target (scripts/same_rows_under_load.py): two runs of a tiny partial-observation study, the
    second beside a CPU-bound load on every core, write the same rows (errors, steps, stops), clocks aside."""
    import subprocess
    import sys

    script = same_rows.__file__
    res = subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 differing fields" in res.stdout


def test_the_partial_observation_tables_count_the_trainings_the_valve_cut():
    from vpintegrator.studies.partial_observation.tables import summarize_rows, tables

    def row(approach, seed, stopped, clock=None):
        return {"system": "toda", "approach": approach, "T": 2, "label": f"{approach}_T2", "kind": "model",
                "seed": seed, "stopped": stopped, "stop_clock": clock}

    rows = [row("vpt", 0, "time_limit", "cpu"), row("vpt", 1, "steps"), row("delay_mlp", 0, "time_limit", "cpu"),
            row("delay_mlp", 1, "early_stopping"), {"system": "toda", "approach": "arx", "T": 2, "label": "arx_T2",
                                                    "kind": "fitted", "seed": None}]
    assert "Training: cut by the valve: 2 of 4 trainings (cpu 2)." in tables(summarize_rows(rows)).splitlines()


def test_the_reduction_tables_count_the_flow_maps_the_valve_cut():
    from vpintegrator.studies.reduction.tables import summarize_rows, tables

    err = {"median": 0.1, "lo": 0.05, "hi": 0.2, "n": 10}

    def row(label, seed, **run):
        return {"system": "toda", "N": 40, "row": label.split()[0], "label": label, "seed": seed, "cost": 1e-3,
                "offline_cpu": 2.0, "err_t120": err, "err_t960": err, **run}

    rows = [row("full_order rk4", None), row("flow_map 2n=8", 0, stopped="time_limit", stop_clock="cpu"),
            row("flow_map 2n=8", 1, stopped="steps"), row("flow_map 2n=16", 0, stopped="early_stopping")]
    assert "Training: cut by the valve: 1 of 3 trainings (cpu 1)." in tables(summarize_rows(rows)).splitlines()
