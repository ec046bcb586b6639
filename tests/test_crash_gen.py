"""Crash safety of vp-gen: after ``kill -9`` the earlier output is intact, and the next run with the same
``--out`` removes the orphaned temporary file (its name carries the dead writer's pid)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from crash_helpers import kill_9_while_writing, orphans, sha, start_writing

from vpintegrator.data import read_trajectories

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs kill -9")


def _cmd(out: Path, n_traj: int) -> list[str]:
    # t_end 10: 101 states, so a million trajectories are 2.4 GB before compression (minutes of DOP853)
    return [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", str(n_traj), "--t-end", "10",
            "--out", str(out), "--quiet"]



def test_kill_9_leaves_earlier_output_and_next_run_removes_the_orphan(tmp_path):
    out = tmp_path / "X.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    # an earlier, finished data set at the same path
    subprocess.run(_cmd(out, 3), check=True, env=env, capture_output=True, timeout=120)
    earlier = sha(out)

    # a long one, killed outright once it writes its temporary file
    pid = kill_9_while_writing([*_cmd(out, 1_000_000), "--overwrite"], out, env)
    left = orphans(out)
    assert len(left) == 1 and f".{pid}." in left[0].name  # the name carries the writer's pid
    assert sha(out) == earlier  # the earlier output is intact
    assert read_trajectories(out).n_traj == 3

    # the next run to the same --out (replacing it: --overwrite) removes the dead writer's temporary file and
    # takes over its lock, saying so
    assert (tmp_path / "X.h5.lock").read_text().split()[0] == str(pid)
    res = subprocess.run([*_cmd(out, 2), "--overwrite"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert re.search(rf"Warning: took over .*X\.h5\.lock, left by process {pid} \(vp-gen\), which no longer runs",
                     res.stderr), res.stderr
    assert orphans(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.h5"]
    assert read_trajectories(out).n_traj == 2


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_a_second_writer_is_refused_and_the_running_one_keeps_its_file(tmp_path, overwrite):
    """One writer per output: a second vp-gen to the same --out (also with --overwrite) is refused with one
    line naming the live writer, and leaves its temporary file alone."""
    out = tmp_path / "X.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = start_writing(_cmd(out, 1_000_000), out, env)
    try:
        live = orphans(out)
        res = subprocess.run([*_cmd(out, 2), *(["--overwrite"] if overwrite else [])], env=env, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 1, res.stderr
        assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr, res.stderr
        assert re.search(rf"^Error: --out .*X\.h5 is being written by process {proc.pid} \(vp-gen\)", res.stderr), \
            res.stderr
        assert set(live) <= set(orphans(out))  # the running writer's file is still there
        assert not out.exists()
    finally:
        proc.kill()
        proc.wait()
    subprocess.run(_cmd(out, 2), check=True, env=env, capture_output=True, timeout=120)  # the lock is taken over
    assert orphans(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.h5"]
