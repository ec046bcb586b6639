"""kill -9 of vp-train: last.pt loads, log.csv agrees with it, resume finishes, no temporary file is left."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from vpintegrator.data.hdf5 import write_trajectories
from vpintegrator.data import integrate
from vpintegrator.training.checkpoint import read_last


def _epochs(log) -> list[int]:
    with open(log, newline="") as f:
        return [int(r["epoch"]) for r in csv.DictReader(f)]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_kill_9_then_resume(tmp_path):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(16, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = write_trajectories(tmp_path / "data.h5", integrate("rigid_body", y0, 0.2, 40, method="rk4"))
    config = tmp_path / "config.toml"
    config.write_text(
        f'data = ["{data}"]\nepochs = 400\nbatch_size = 16\ndtype = "float64"\ndevice = "cpu"\nlr = 1e-3\n'
        "lr_min = 1e-4\ncheckpoint_seconds = 30\n[model]\nname = \"vpt\"\nseq_len = 2\nL = 1\n"
    )
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vpintegrator.cli.train", str(config), "--out", str(run), "--no-progress"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (run / "log.csv").exists() and len(_epochs(run / "log.csv")) >= 3:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail("vp-train did not get through 3 epochs in 60 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "vp-train finished before it was killed; give it more epochs"

    last = read_last(run / "last.pt")  # loads: a checkpoint is never half-written
    done = int(last["epoch"])
    assert done >= 2
    rows = _epochs(run / "log.csv")
    # the log row of an epoch is written just before its checkpoint: at most one row beyond last.pt
    assert rows == list(range(1, len(rows) + 1)) and done <= len(rows) <= done + 1
    orphan = run / f".last.pt.{_dead_pid()}.abcd.pt.tmp"  # what a kill during a write leaves
    orphan.write_bytes(b"partial")

    total = done + 2
    result = subprocess.run(
        [sys.executable, "-m", "vpintegrator.cli.train", "--resume", str(run), "--epochs", str(total), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert int(read_last(run / "last.pt")["epoch"]) == total
    assert _epochs(run / "log.csv") == list(range(1, total + 1))
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    assert torch.load(run / "best.pt", weights_only=True)["epoch"] >= 1


def _tiny_data(path):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(16, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return write_trajectories(path, integrate("rigid_body", y0, 0.2, 40, method="rk4"))


def _kill_after_epochs(cmd, pattern, count, n, env, cwd):
    """Run ``cmd`` in ``cwd`` until ``count`` files match ``pattern`` (log.csv files) with ``n`` rows each, then
    kill -9 it."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            logs = list(cwd.glob(pattern))
            if len(logs) == count and all(len(_epochs(p)) >= n for p in logs):
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail(f"vp-train did not get through {n} epochs in 90 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "vp-train finished before it was killed; give it more epochs"


def test_kill_9_of_an_ensemble_leaves_a_run_directory_that_is_recognised(tmp_path):
    """After kill -9 of `vp-train --ensemble 3` (before its ensemble.csv), the directory still holds a run: a
    new run into it is refused as "already holds a run" (not "holds no run"), --resume says in one line that an
    ensemble is trained again, and --overwrite does that, from any working directory (issue 36)."""
    work = tmp_path / "work"
    work.mkdir()
    _tiny_data(work / "data.h5")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vpintegrator.cli.train", "--data", "data.h5", "--model", "vpt", "--seq-len", "2",
           "--set", "model.L=1", "--set", "model.n_blocks=1", "--batch-size", "16", "--dtype", "float64",
           "--device", "cpu", "--ensemble", "3", "--out", "ens", "--no-progress"]
    _kill_after_epochs([*cmd, "--epochs", "400"], "ens/member_*/log.csv", 3, 2, env, work)
    ens = work / "ens"
    assert not (ens / "ensemble.csv").exists() and len(list(ens.glob("member_*"))) == 3
    again = subprocess.run([*cmd, "--epochs", "2"], env=env, cwd=work, capture_output=True, text=True, timeout=120)
    lines = again.stderr.splitlines()  # the dead writer's lock taken over (a warning), then the one error line
    assert again.returncode == 1 and lines[-1].startswith("Error:") and "already holds a run" in lines[-1], lines
    assert len(lines) == 2 and lines[0].startswith("Warning: took over") and "Traceback" not in again.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run([sys.executable, "-m", "vpintegrator.cli.train", "--resume", str(ens), "--epochs", "5"],
                         env=env, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "cannot be resumed; train the ensemble again" in res.stderr, res.stderr
    res = subprocess.run([*cmd, "--epochs", "2", "--overwrite"], env=env, cwd=work, capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, res.stderr
    assert all(_epochs(m / "log.csv") == [1, 2] for m in ens.glob("member_*"))
    assert not list(work.glob("*.lock")) and not list(ens.rglob("*.tmp"))
