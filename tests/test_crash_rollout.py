"""Crash safety of vp-rollout: after ``kill -9`` the earlier output is intact, and the next run with the same
``--out`` removes the orphaned temporary file (its name carries the dead writer's pid)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from crash_helpers import kill_9_while_writing, orphans, sha

from vpintegrator.data import write_trajectories
from vpintegrator.data import integrate

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs kill -9")


def _cmd(data: Path, out: Path, t_end: float) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators", "rk4",
            "--n-traj", "2", "--t-end", str(t_end), "--no-volume", "--out", str(out), "--quiet"]



def test_kill_9_leaves_earlier_output_and_next_run_removes_the_orphan(tmp_path):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(2, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = tmp_path / "data.h5"
    write_trajectories(data, integrate("rigid_body", y0, 0.2, 20, method="rk4"))
    out = tmp_path / "roll.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    # an earlier, finished rollout at the same path
    subprocess.run(_cmd(data, out, 4.0), check=True, env=env, capture_output=True, timeout=120)
    earlier = {p: sha(p) for p in (out, out.with_suffix(".csv"), out.with_suffix(".md"))}

    # a long one (1e6 steps of rk4: minutes), killed outright once it writes its temporary file
    pid = kill_9_while_writing([*_cmd(data, out, 2e5), "--overwrite"], out, env)
    left = orphans(out)
    assert len(left) == 1 and f".{pid}." in left[0].name  # the name carries the writer's pid
    assert {p: sha(p) for p in earlier} == earlier  # the earlier output is intact

    # the next run to the same --out removes the dead writer's temporary file and takes over its locks
    assert (tmp_path / "roll.h5.lock").read_text().split()[0] == str(pid)
    res = subprocess.run([*_cmd(data, out, 2.0), "--overwrite"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"left by process {pid} (vp-rollout), which no longer runs" in res.stderr
    assert orphans(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5", "roll.csv", "roll.h5", "roll.md", "roll.tex"]
    from vpintegrator.rollout import read_rollout

    assert read_rollout(out).meta["n_steps"] == 10


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_kill_9_with_workers_kills_the_workers_and_the_next_run_removes_their_folder(tmp_path):
    """Issue 36: after kill -9 of `vp-rollout --workers 2` the forked workers lived on holding the output's
    lock (every re-run refused) and the hidden parts folder stayed. Now they die with their parent, and the
    next run removes the folder."""
    import time

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(12, 3))  # more than SCALAR_MAX_BATCH: the work is cut into blocks
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = tmp_path / "data.h5"
    write_trajectories(data, integrate("rigid_body", y0, 0.2, 20, method="rk4"))
    out = tmp_path / "roll.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators", "rk4",
           "--no-volume", "--out", str(out), "--quiet", "--workers", "2"]
    proc = subprocess.Popen([*cmd, "--t-end", "4e4"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while not (list(tmp_path.glob(".roll.h5.parts-*")) and len(_children(proc.pid)) >= 2):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no worker processes appeared"
            time.sleep(0.05)
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "the workers outlived their parent"
    parts = list(tmp_path.glob(".roll.h5.parts-*"))
    assert len(parts) == 1 and f"-{proc.pid}-" in parts[0].name
    res = subprocess.run([*cmd, "--t-end", "2"], env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5", "roll.csv", "roll.h5", "roll.md", "roll.tex"]
