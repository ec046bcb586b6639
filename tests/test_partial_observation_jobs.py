"""The partial-observation study's training runs ``--jobs`` processes at a time (``train_runs``): the same runs
in the plan's order as one at a time, and a run that fails in a worker is one line naming the run."""

from __future__ import annotations

import json

import pytest


def _plan(out, jobs):
    from vpintegrator.studies.options import parse
    from vpintegrator.studies.partial_observation import STUDY, build_plan

    return build_plan(parse(STUDY, ["--out", str(out), "--jobs", str(jobs), "--set", "systems=coupled_oscillator",
                                    "--set", "windows=1,2", "--set", "approaches=delay_mlp", "--seeds", "0,1",
                                    "--set", "budget_seconds=0.5", "--set", "patience=1"]))


def test_the_plan_records_jobs():
    assert _plan("r", 3).jobs == 3 and _plan("r", 1).jobs == 1


def test_a_training_that_fails_in_a_worker_is_one_line_naming_the_run(tmp_path):
    from vpintegrator.studies.partial_observation import train_runs
    from vpintegrator.studies.runner import StudyError

    missing = tmp_path / "missing.h5"
    for jobs in (1, 2):
        with pytest.raises(StudyError) as err:
            next(train_runs(_plan(tmp_path / f"out{jobs}", jobs), {"coupled_oscillator": missing}))
        assert "training delay_mlp T = 1 seed 0 on coupled_oscillator" in str(err.value)
        assert "missing.h5" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_two_jobs_train_the_same_runs_in_the_plans_order_as_one(tmp_path):
    """Each yielded seed has every (approach, T) of the plan, finished (``complete.json``), with the plan's
    recipe and seed in its config; the order is the plan's, with 1 job and with 2."""
    from vpintegrator.studies.partial_observation import make_data, train_runs

    seen = {}
    for jobs in (1, 2):
        plan = _plan(tmp_path / f"out{jobs}", jobs)
        trains = {"coupled_oscillator": make_data(plan.out, "coupled_oscillator", 20, 20.0)}
        got = [(system, seed, sorted(runs)) for system, seed, runs in train_runs(plan, trains)]
        assert got == [("coupled_oscillator", s, [("delay_mlp", 1), ("delay_mlp", 2)]) for s in (0, 1)]
        for system, seed, runs in train_runs(plan, trains):  # finished runs are reused, not trained again
            for (approach, T), run in runs.items():
                assert (run / "complete.json").is_file()
                config = json.loads((run / "summary.json").read_text())
                assert config.get("seed", seed) == seed
        seen[jobs] = sorted(p.name for p in (plan.out / "runs" / "coupled_oscillator").iterdir())
    assert seen[1] == seen[2] == ["delay_mlp_T1_seed0", "delay_mlp_T1_seed1", "delay_mlp_T2_seed0",
                                  "delay_mlp_T2_seed1"]
