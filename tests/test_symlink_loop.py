"""Issue 36, item 2: a loop of symbolic links given as an input or an output raised Python's
``RuntimeError: Symlink loop`` (a traceback) in every command. Each is now one line naming the flag or the
input, exit 1, and the links are left as they were. Subprocesses, as a user runs the commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vpintegrator._io import resolve_path
from vpintegrator.data import integrate, write_trajectories
from vpintegrator.errors import VPIntegratorError


def _cli(tool: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", f"vpintegrator.cli.{tool}", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    ws = tmp_path_factory.mktemp("loop")
    y0 = np.array([[0.6, 0.0, 0.8], [0.0, 0.6, 0.8]])
    write_trajectories(ws / "data.h5", integrate("rigid_body", y0, 0.2, 10, method="rk4"))
    os.symlink("loop_b", ws / "loop_a")
    os.symlink("loop_a", ws / "loop_b")
    return ws


CASES = {
    "gen-out": ("gen", ["rigid_body", "--n-traj", "2", "--t-end", "0.4", "--out", "loop_a"], "--out loop_a"),
    "rollout-data": ("rollout", ["--data", "loop_a", "--integrators", "rk4", "--out", "r.h5"], "loop_a"),
    "rollout-out": ("rollout", ["--data", "data.h5", "--integrators", "rk4", "--out", "loop_a"], "--out loop_a"),
    "rollout-model": ("rollout", ["--data", "data.h5", "--model", "loop_a", "--out", "r.h5"], "loop_a"),
    "train-data": ("train", ["--data", "loop_a", "--model", "vpff", "--epochs", "1", "--out", "run"], "loop_a"),
    "train-out": ("train", ["--data", "data.h5", "--model", "vpff", "--epochs", "1", "--out", "loop_a"], "--out loop_a"),
    "plot-input": ("plot", ["loop_a", "--out", "figs"], "loop_a"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_symlink_loop_is_one_line(ws, case):
    tool, args, words = CASES[case]
    res = _cli(tool, *args, cwd=ws)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "Traceback" not in res.stderr, res.stderr
    assert words in lines[0] and "loop of symbolic links" in lines[0], lines[0]
    assert os.readlink(ws / "loop_a") == "loop_b" and os.readlink(ws / "loop_b") == "loop_a"
    assert not (ws / "r.h5").exists() and not (ws / "run").exists() and not (ws / "figs").exists()


def test_resolve_path_names_the_key(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(VPIntegratorError, match=r"^--data .*a: a loop of symbolic links"):
        resolve_path(tmp_path / "a", "--data")
    assert resolve_path(tmp_path / "c", "--out") == (tmp_path / "c").resolve()  # a missing path resolves
