"""Issue 36, item 4: a FIFO (or another non-regular file) where a file is read or written waited forever.
Each is now refused with one line before anything opens it. Run as subprocesses with a timeout, so the old
behaviour fails the test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vpintegrator.data import integrate, write_trajectories

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


def _cli(tool: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run([sys.executable, "-m", f"vpintegrator.cli.{tool}", *map(str, args)], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"vp-{tool} {' '.join(map(str, args))}: still waiting after 120 s (a FIFO was opened)")


def _one_error_line(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "Traceback" not in res.stderr, res.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture
def ws(tmp_path):
    y0 = np.array([[0.6, 0.0, 0.8], [0.0, 0.6, 0.8]])
    write_trajectories(tmp_path / "data.h5", integrate("rigid_body", y0, 0.2, 10, method="rk4"))
    os.mkfifo(tmp_path / "pipe")
    return tmp_path


def test_vp_gen_out_fifo(ws):
    res = _cli("gen", "rigid_body", "--n-traj", "2", "--t-end", "0.4", "--out", ws / "pipe", "--overwrite", cwd=ws)
    _one_error_line(res, "pipe", "not a regular file")
    assert (ws / "pipe").is_fifo()


def test_data_fifo(ws):
    res = _cli("rollout", "--data", ws / "pipe", "--integrators", "rk4", "--out", ws / "r.h5", cwd=ws)
    _one_error_line(res, "pipe", "not a regular file")


def test_checkpoint_fifo(ws):
    res = _cli("rollout", "--data", ws / "data.h5", "--model", f"m={ws / 'pipe'}", "--out", ws / "r.h5", cwd=ws)
    _one_error_line(res, "pipe", "not a regular file", "FIFO")


def test_best_pt_of_a_run_that_is_not_a_file(ws):
    """Issue 36, item 5: a run whose best.pt is a directory rolled out its last.pt silently."""
    run = ws / "run"
    run.mkdir()
    (run / "best.pt").mkdir()
    (run / "last.pt").write_bytes(b"PK\x03\x04")
    res = _cli("rollout", "--data", ws / "data.h5", "--model", f"m={run}", "--out", ws / "r.h5", cwd=ws)
    _one_error_line(res, "best.pt is not a regular file (a directory)")


def test_figure_path_fifo(ws):
    roll = ws / "r.h5"
    res = _cli("rollout", "--data", ws / "data.h5", "--integrators", "rk4", "--out", roll, "--quiet", cwd=ws)
    assert res.returncode == 0, res.stderr
    figs = ws / "figs"
    figs.mkdir()
    os.mkfifo(figs / "error.png")
    res = _cli("plot", roll, "--kind", "error", "--out", figs, "--overwrite", cwd=ws)
    _one_error_line(res, "error.png", "not a regular file")
    assert (figs / "error.png").is_fifo()
