"""A study's seeds trained as one ensemble run (``--seeds-as-members DEVICE``, ``vpintegrator.studies.runner``): the
runner's vp-train tasks that differ only by seed run as one ``vp-train --set seeds=[...]``, and each seed's run
directory afterwards holds what the seed's own run writes, with the same numbers (float64, to round-off); the
others run as planned; studies that do not train through the runner refuse the flag in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from vpintegrator.studies.members import seed_and_out, seeds_as_members
from vpintegrator.studies.runner import Runner, StudyError, Task

pytestmark = pytest.mark.usefixtures("one_thread")

SEEDS = (3, 8)


def _config(tmp_path: Path, tiny_data: str) -> Path:
    path = tmp_path / "vpt.toml"
    path.write_text(f'data = ["{tiny_data}"]\nepochs = 4\nbatch_size = 16\nlr = 3e-3\ndtype = "float64"\n'
                    'init_scale = 0.1\nmonitor = "val_rollout"\nval_rollout_steps = 10\npatience = 2\n'
                    'min_rel_delta = 0.01\n\n[model]\nname = "vpt"\nseq_len = 3\nL = 2\nn_blocks = 1\n')
    return path


def _plan(run: Path, config: Path, members: str | None) -> Runner:
    runner = Runner(run, jobs=2, members=members)
    for seed in SEEDS:
        out = run / "train" / f"vpt_s{seed}"
        runner.add(Task(f"train_vpt_s{seed}", ["vp-train", config, "--out", out, "--seed", str(seed),
                                               "--cpu-time-limit", "600", "--quiet"],
                        [out / "summary.json", out / "log.csv"]))
    return runner


def _numbers(run_dir: Path) -> tuple[list[dict], dict, dict]:
    log = [line.split(",") for line in (run_dir / "log.csv").read_text().splitlines()]
    rows = [dict(zip(log[0], r)) for r in log[1:]]
    summary = json.loads((run_dir / "summary.json").read_text())
    weights = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=False)
    return rows, summary, weights


def test_the_seeds_as_members_give_each_seed_its_own_run(tiny_data, tmp_path):
    config = _config(tmp_path, tiny_data)
    alone, grouped = _plan(tmp_path / "alone", config, None), _plan(tmp_path / "grouped", config, "cpu")
    assert alone.execute() and grouped.execute()
    assert sorted(grouped.groups) == ["members_train_vpt_s3"]  # one ensemble run of both seeds
    trainings = [line for line in (tmp_path / "grouped" / "study.log").read_text().splitlines() if "cli.train" in line]
    assert len(trainings) == 1 and "seeds=[3,8]" in trainings[0] and "--device cpu" in trainings[0]
    assert "--cpu-time-limit 1200" in trainings[0]  # the two runs' budget together
    for seed in SEEDS:
        a, g = tmp_path / "alone" / "train" / f"vpt_s{seed}", tmp_path / "grouped" / "train" / f"vpt_s{seed}"
        assert {p.name for p in a.iterdir()} <= {p.name for p in g.iterdir()}  # the files a single run writes
        rows_a, sum_a, pt_a = _numbers(a)
        rows_g, sum_g, pt_g = _numbers(g)
        assert len(rows_a) == len(rows_g)  # the same epochs: its own plateau (patience 2)
        for ra, rg in zip(rows_a, rows_g):
            for key in ("train_loss", "val_loss", "val_rollout"):
                x, y = float(ra[key]), float(rg[key])
                assert (math.isnan(x) and math.isnan(y)) or y == pytest.approx(x, rel=1e-9, abs=1e-13), (seed, key)
        for key in ("best_epoch", "stopped", "steps", "seed"):
            assert sum_a.get(key) == sum_g.get(key), key
        state_a, state_g = pt_a["state_dict"], pt_g["state_dict"]
        assert max(float((state_a[k] - state_g[k]).abs().max()) for k in state_a) <= 1e-10
        stamp = json.loads((tmp_path / "grouped" / ".tasks" / f"train_vpt_s{seed}.json").read_text())
        assert stamp["ensemble"]["task"] == "members_train_vpt_s3" and stamp["ensemble"]["seed"] == seed
    # the ensemble's own directory still lists its members (links to the moved directories)
    ens = tmp_path / "grouped" / "members" / "train_vpt_s3"
    assert (ens / "ensemble.csv").exists() and (ens / "member_1_seed_8" / "summary.json").exists()


def test_only_tasks_that_differ_by_seed_are_grouped(tmp_path):
    runner = Runner(tmp_path / "run", members="cuda")
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    tasks = [Task("a0", ["vp-train", a, "--out", tmp_path / "a0", "--seed", "0", "--time-limit", "10"], []),
             Task("a1", ["vp-train", a, "--out", tmp_path / "a1", "--seed", "1", "--time-limit", "10"], []),
             Task("a2", ["vp-train", a, "--out", tmp_path / "a2", "--seed", "2", "--time-limit", "10"], []),
             Task("b0", ["vp-train", b, "--out", tmp_path / "b0", "--seed", "0", "--time-limit", "10"], []),
             Task("r0", ["vp-train", "--resume", tmp_path / "r0", "--time-limit", "10"], []),
             Task("d1", ["vp-train", a, "--out", tmp_path / "d1", "--seed", "1", "--time-limit", "10"], [], ["x"])]
    runner._group(tasks)
    assert list(runner.groups) == ["members_a0"]
    assert [t.name for t, _, _ in runner.groups["members_a0"]] == ["a0", "a1", "a2"]
    unit = runner._unit["a1"]
    words = [str(c) for c in unit.cmd]
    assert words[:2] == ["vp-train", str(a)] and "seeds=[0,1,2]" in words and words[-2:] == ["--device", "cuda"]
    assert words[words.index("--time-limit") + 1] == "30" and "--seed" not in words
    assert seed_and_out(["vp-gen", "--out", "x"]) is None


def test_the_driver_passes_the_flag_to_the_runners_a_study_makes(tmp_path):
    assert Runner(tmp_path).members is None
    with seeds_as_members("cuda:1"):
        assert Runner(tmp_path).members == "cuda:1"
    assert Runner(tmp_path).members is None


def test_a_study_that_does_not_train_through_the_runner_refuses_it():
    from vpintegrator.studies.reduction import STUDY

    with pytest.raises(StudyError) as err:
        STUDY.parse(["--out", "x", "--seeds-as-members", "cuda"])
    assert "\n" not in str(err.value) and "--seeds-as-members" in str(err.value)
    from vpintegrator.studies.rigid_body import STUDY as RIGID

    with pytest.raises(StudyError, match="--seeds-as-members must name a device"):
        RIGID.parse(["--out", "x", "--seeds-as-members", "gpu"])
    assert RIGID.parse(["--out", "x", "--seeds-as-members", "cuda"]).seeds_as_members == "cuda"


def test_a_grouped_run_runs_again_over_its_own_outputs(tiny_data, tmp_path):
    """--overwrite (or --skip-existing) over an earlier grouped run: the ensemble's links to the moved members are
    not written through, and each seed's directory is again a run directory of its own."""
    config = _config(tmp_path, tiny_data)
    first = _plan(tmp_path / "run", config, "cpu")
    assert first.execute()
    before = [_numbers(tmp_path / "run" / "train" / f"vpt_s{seed}")[0] for seed in SEEDS]
    again = Runner(tmp_path / "run", jobs=2, members="cpu", overwrite=True)
    for t in first.tasks.values():
        again.add(Task(t.name, list(t.cmd), list(t.outputs)))
    assert again.execute()
    for seed, rows in zip(SEEDS, before):
        out = tmp_path / "run" / "train" / f"vpt_s{seed}"
        assert out.is_dir() and not out.is_symlink()
        assert [r["train_loss"] for r in _numbers(out)[0]] == [r["train_loss"] for r in rows]
