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
