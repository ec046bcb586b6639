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
