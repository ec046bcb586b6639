"""The rigid-body quality study over seeds: its plan, its one-line errors and its table."""

from __future__ import annotations

import json

import pytest

from vpintegrator.studies import rigid_body_quality as study
from vpintegrator.studies.runner import Task
from vpintegrator.studies.driver import main as run_study


def test_plan_two_phases_per_seed(tmp_path):
    a = study.STUDY.parse(["--out", str(tmp_path / "run"), "--seeds", "0,3", "--unroll", "2"])
    tasks = study.plan(a).tasks
    assert list(tasks) == ["gen_im", "gen_exact", "train_p1_s0", "rollout_im_p1_s0", "rollout_exact_p1_s0",
                           "train_p2_s0", "rollout_im_p2_s0", "rollout_exact_p2_s0",
                           "train_p1_s3", "rollout_im_p1_s3", "rollout_exact_p1_s3",
                           "train_p2_s3", "rollout_im_p2_s3", "rollout_exact_p2_s3"]
    p2 = [str(c) for c in tasks["train_p2_s3"].cmd]
    assert "unroll=2" in p2 and f"init_from={tmp_path / 'run' / 'train' / 'p1_s3' / 'best.pt'}" in p2
    assert tasks["train_p2_s3"].deps == ["train_p1_s3"] and all(isinstance(t, Task) for t in tasks.values())
    assert not (tmp_path / "run").exists()  # planning writes nothing
    a = study.STUDY.parse(["--out", str(tmp_path / "run"), "--seeds", "1", "--phase3-seconds", "60", "--unroll3", "4"])
    tasks = study.plan(a).tasks
    assert list(tasks)[-3:] == ["train_p3_s1", "rollout_im_p3_s1", "rollout_exact_p3_s1"]
    p3 = [str(c) for c in tasks["train_p3_s1"].cmd]
    assert "unroll=4" in p3 and any(c.endswith("p2_s1/best.pt") for c in p3)


@pytest.mark.parametrize("args, needle", [
    (["--seeds", "a"], "--seeds"), (["--seeds", "1,1"], "--seeds"), (["--phase1-seconds", "0"], "--phase1-seconds"),
    (["--phase2-seconds", "nan"], "--phase2-seconds"), (["--unroll", "0"], "--unroll"), (["--jobs", "0"], "--jobs"),
    (["--phase3-seconds", "-1"], "--phase3-seconds"), (["--unroll3", "0"], "--unroll3"),
    (["--config", "no/such.toml"], "--config"), (["--table-only"], "--table-only"), (["--bogus"], "--bogus"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, needle):
    assert run_study(study.STUDY, ["--out", str(tmp_path / "run"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_table_counts_targets_per_phase(tmp_path, monkeypatch):
    run = tmp_path / "run"
    for phase, seed, loss in (("p1", 0, 2e-4), ("p2", 0, 1e-4), ("p1", 1, 3e-4), ("p2", 1, 5e-5)):
        d = run / "train" / f"{phase}_s{seed}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"train_loss": loss, "best_loss": loss * 10, "best_epoch": 3,
                                                    "wall_time": 300.0}))
    quality = {  # label -> (error traj1/4, band traj1/4)
        "im": {"p1_s0": ([0.2, 0.01], [5e-3, 1e-4]), "p2_s0": ([0.01, 0.02], [1e-4, 2e-4]),
               "p1_s1": ([0.01, 0.01], [1e-4, 1e-4]), "p2_s1": ([0.04, 0.03], [9e-4, 1e-4])},
    }

    def fake(path):  # rollout/<ref>_<phase>_s<seed>.h5 holds the model <phase>_s<seed>
        ref, label = path.stem.split("_", 1)
        return {k: {"error": v[0], "band": v[1]} for k, v in quality.get(ref, {}).items() if k == label}

    monkeypatch.setattr(study, "_quality", fake)
    (run / "rollout").mkdir()
    for ref in ("im", "exact"):
        for phase in ("p1", "p2"):
            for s in (0, 1):
                (run / "rollout" / f"{ref}_{phase}_s{s}.h5").write_text("")
    (run / "settings.json").write_text(json.dumps({"phase1_seconds": 300, "phase2_seconds": 300, "unroll": 3,
                                                   "commands": ["vp-gen rigid_body_paper"]}))
    text = study.write_results(run)
    assert "- p1, im: targets met by 1 of 2 seeds (1)" in text
    assert "- p2, im: targets met by 2 of 2 seeds (0, 1)" in text
    assert "- p2: the validation score selects seed 1" in text
    assert json.loads((run / "results.json").read_text())["rows"][0]["im_met"] is False


def test_a_run_records_its_settings_and_every_command(tmp_path, monkeypatch):
    """RUN/settings.json after a run (``StudyPlan.run_recorded``): the plan's keys in their order, then the commands,
    an earlier run's first with --skip-existing, only this run's with --overwrite; a failed task raises once the
    settings are written; --table-only runs nothing."""
    from types import SimpleNamespace

    from vpintegrator.studies.runner import StudyError

    run = tmp_path / "run"
    outcomes = [(True, ["c1"]), (False, ["c2"]), (True, ["c3"])]

    def fake_plan(a):
        assert run.is_dir()  # made, under the lock, before the plan
        ok, commands = outcomes.pop(0)
        return SimpleNamespace(execute=lambda: ok, commands=commands, failure=lambda: StudyError("a task failed"))

    monkeypatch.setattr(study, "plan", fake_plan)
    monkeypatch.setattr(study, "write_results", lambda run: "the table")
    base = ["--out", str(run), "--seeds", "0,3", "--unroll", "2", "--phase1-seconds", "30", "--phase2-seconds", "40"]
    keys = ["seeds", "phase1_seconds", "phase2_seconds", "unroll", "phase3_seconds", "unroll3", "config", "jobs",
            "budget", "wall_ceiling", "patience", "step_budgets", "commands"]

    def settings():
        return json.loads((run / "settings.json").read_text())

    assert study.run(study.STUDY.parse(base)) == 0
    s = settings()
    assert list(s) == keys and s["commands"] == ["c1"]
    assert (s["seeds"], s["phase1_seconds"], s["phase2_seconds"], s["unroll"]) == ([0, 3], 30.0, 40.0, 2)
    with pytest.raises(StudyError, match="a task failed"):
        study.run(study.STUDY.parse([*base, "--skip-existing"]))
    assert settings()["commands"] == ["c1", "c2"]  # written before the failure is raised
    (run / ".tasks").mkdir()  # a study's run directory: --overwrite may run it again
    assert study.run(study.STUDY.parse([*base, "--overwrite"])) == 0
    assert settings()["commands"] == ["c3"]
    assert study.run(study.STUDY.parse([*base, "--table-only"])) == 0 and not outcomes
