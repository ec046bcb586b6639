"""scripts/walk_files.py: the files and climbs of a parameter's walk through fit and run_rollouts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_walk_counts_the_same_tree_the_same_and_lists_the_drivers(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "walk_files.py"), "--base", str(ROOT), "--list",
                          "--work", str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    head, _, sequences = res.stdout.partition("\nthe first 400 calls, in order")
    rows = {(m[1], m[2]): (int(m[3]), int(m[4]))
            for m in re.finditer(r"^(?:(\S+)\s+)(base|here)\s+(\d+)\s+(\d+) ", head, re.M)}
    for entry in ("fit", "run_rollouts"):
        files, climbs = rows[(entry, "here")]
        assert rows[(entry, "base")] == (files, climbs)  # one tree, counted twice: the same walk
        assert files > 10 and climbs >= 0
    # the calls followed in order: the same counts for both, and the plan's part of run_rollouts enters plan.py
    tables = sequences.split("\nfit, base:")[0]
    seq = {(m[1], m[2]): m[3] for m in re.finditer(r"^(\S+)\s+(base|here)\s+(.+)$", tables, re.M)}
    assert seq[("run_rollouts", "base")] == seq[("run_rollouts", "here")]
    plan_part = {m[1]: m[2] for m in re.finditer(r"^(base|here)\s+(.+)$", tables.split("plan being made")[1], re.M)}
    assert plan_part["base"] == plan_part["here"] and int(plan_part["here"].split()[0]) > 10
    lists = res.stdout.split("\nfit, here:")[1]
    fit_files = lists.split("\nrun_rollouts, base:")[0]
    assert "  training/loop.py\n" in fit_files and "  training/run.py\n" in fit_files
    assert "  rollout/plan.py\n" in res.stdout.split("\nrun_rollouts, here:")[1]


@pytest.mark.skipif(not (ROOT / "scripts" / "walk_files.py").is_file(), reason="repository files (not in the wheel)")
def test_the_walk_counts_climbs_by_the_layouts_layers():
    """The script's copy of the layers is tests/test_layout.py's list and the root namespace on top: a part
    missing from the copy ranks above everything, and every call into it would count as a climb."""
    import ast

    def layers(path):
        tree = ast.parse(path.read_text())
        node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LAYERS")
        return ast.literal_eval(node.value)

    assert layers(ROOT / "scripts" / "walk_files.py") == [*layers(ROOT / "tests" / "test_layout.py"), "__init__", "__main__"]


@pytest.mark.skipif(not (ROOT / "scripts" / "walk_files.py").is_file(), reason="repository files (not in the wheel)")
def test_a_studys_tiny_plan_is_a_plan_of_that_study_and_an_unknown_study_is_one_line(tmp_path):
    """``--study NAME`` walks ``vp-study NAME`` at the script's tiny plan: each plan parses into the study's keys
    (one seed, ``--jobs 1``: nothing runs in a worker process); a study without one is refused naming --study."""
    import importlib.util

    from vpintegrator.studies.driver import load
    from vpintegrator.studies.options import parse

    spec = importlib.util.spec_from_file_location("walk_files", ROOT / "scripts" / "walk_files.py")
    walk_files = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk_files)
    for name, args in walk_files.study_args(["reduction", "partial_observation", "reduction"]).items():
        options = parse(load(name), [*args, "--out", str(tmp_path / name)])
        assert options.seeds == [0] and options.jobs == 1, name
    assert list(walk_files.study_args(["reduction", "reduction"])) == ["reduction"]
    with pytest.raises(SystemExit, match=r"^--study nosuch: no tiny plan for it here; valid: partial_observation"):
        walk_files.study_args(["nosuch"])
