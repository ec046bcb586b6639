"""Crash safety of vp-gen: after ``kill -9`` the earlier output is intact, and the next run with the same
``--out`` removes the orphaned temporary file (its name carries the dead writer's pid)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vpintegrator.data import read_trajectories

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs kill -9")


def _cmd(out: Path, n_traj: int) -> list[str]:
    # t_end 10: 101 states, so a million trajectories are 2.4 GB before compression (minutes of DOP853)
    return [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", str(n_traj), "--t-end", "10",
            "--out", str(out), "--no-progress"]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _orphans(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.tmp"))


def test_kill_9_leaves_earlier_output_and_next_run_removes_the_orphan(tmp_path):
    out = tmp_path / "X.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    # an earlier, finished data set at the same path
    subprocess.run(_cmd(out, 3), check=True, env=env, capture_output=True, timeout=120)
    earlier = _sha(out)

    # a long one, killed outright once it writes its temporary file
    proc = subprocess.Popen(_cmd(out, 1_000_000), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _orphans(out):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.05)
        time.sleep(1.0)  # let it write some chunks
        assert proc.poll() is None, "the long run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    orphans = _orphans(out)
    assert len(orphans) == 1 and f".{proc.pid}." in orphans[0].name  # the name carries the writer's pid
    assert _sha(out) == earlier  # the earlier output is intact
    assert read_trajectories(out).n_traj == 3

    # the next run to the same --out removes the dead writer's temporary file
    res = subprocess.run(_cmd(out, 2), env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert _orphans(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.h5"]
    assert read_trajectories(out).n_traj == 2


def test_a_running_writer_keeps_its_temporary_file(tmp_path):
    """Only dead writers' files are removed: a second vp-gen to the same --out leaves a live one's alone."""
    out = tmp_path / "X.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(_cmd(out, 1_000_000), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _orphans(out):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.05)
        live = _orphans(out)
        res = subprocess.run(_cmd(out, 2), env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert set(live) <= set(_orphans(out))  # the running writer's file is still there
    finally:
        proc.kill()
        proc.wait()
    subprocess.run(_cmd(out, 2), check=True, env=env, capture_output=True, timeout=120)
    assert _orphans(out) == []
