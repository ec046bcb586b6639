"""Issue 36: ``kill -9`` at random moments (seeded) of ``vp-gen --workers 2``, ``vp-gen --shard`` and
``vp-rollout --workers 2``. Afterwards no process of the killed run lives on, and the next run of the same
command succeeds, leaves no temporary file, lock or parts folder, and writes what an uninterrupted run
writes, bit for bit (the same code on the same data: exact equality; the creation times and timings in
the attributes apart)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.skipif(not hasattr(signal, "SIGKILL") or not Path("/proc/self/stat").exists(),
                                 reason="needs kill -9 and /proc"),
              pytest.mark.slow]  # each kills a run at 3 moments and runs it again: a minute or two

_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
#: the moments (seconds after the start) of the kills: random, but the same on every run of the tests
_MOMENTS = np.round(np.random.default_rng(36).uniform(0.3, 4.0, size=3), 2).tolist()
_VARYING = {"created", "provenance", "seconds_per_step", "wall_time"}  # what differs between two runs


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            found.append(k)
            todo.append(k)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_at(cmd: list[str], moment: float) -> None:
    """Start ``cmd``, ``kill -9`` it ``moment`` seconds later (if it still runs), and check that none of the
    processes it started lives on."""
    proc = subprocess.Popen(cmd, env=_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    end = time.monotonic() + moment
    while time.monotonic() < end and proc.poll() is None:
        seen.update(_descendants(proc.pid))
        time.sleep(0.02)
    if proc.poll() is None:
        seen.update(_descendants(proc.pid))
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in seen if _alive(p)], "a process of the killed run lives on"


def _content(path: Path) -> dict:
    """Every dataset's bytes and every attribute (those that differ between runs apart) of an HDF5 file."""
    import h5py

    out: dict = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj.dtype.str, obj.shape, obj[()].tobytes())
            for k, v in obj.attrs.items():
                if k == "summary_json":  # the table: its timings apart
                    v = [{c: x for c, x in row.items() if "seconds" not in c} for row in json.loads(v)]
                if k not in _VARYING and "seconds" not in k:
                    out[f"{name}@{k}"] = repr(v)
        visit("/", f)
        f.visititems(visit)
    return out


def _clean(folder: Path, names: list[str]) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)  # no .tmp, .lock or parts folder


def _gen(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", "4000", "--t-end", "20",
            "--chunk-size", "500", "--out", str(out), "--quiet", *extra]


def test_kill_9_of_vp_gen_with_workers_at_random_moments(tmp_path):
    ref = tmp_path / "ref" / "a.h5"
    subprocess.run(_gen(ref, "--workers", "2"), check=True, env=_ENV, capture_output=True, timeout=300)
    want = _content(ref)
    for i, moment in enumerate(_MOMENTS):
        work = tmp_path / f"k{i}"
        work.mkdir()
        out = work / "a.h5"
        _kill_at(_gen(out, "--workers", "2"), moment)
        res = subprocess.run(_gen(out, "--workers", "2", "--overwrite"), env=_ENV, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, (moment, res.stderr)
        _clean(work, ["a.h5"])
        assert _content(out) == want, moment


def test_kill_9_of_vp_gen_shard_at_random_moments(tmp_path):
    from vpintegrator.data import read_trajectories

    ref = tmp_path / "ref" / "a.h5"
    subprocess.run(_gen(ref, "--workers", "1"), check=True, env=_ENV, capture_output=True, timeout=300)
    want = read_trajectories(ref).y.tobytes()
    for i, moment in enumerate(_MOMENTS):
        work = tmp_path / f"k{i}"
        work.mkdir()
        out = work / "a.h5"
        subprocess.run(_gen(out, "--workers", "1", "--shard", "1/2"), check=True, env=_ENV, capture_output=True,
                       timeout=300)
        first = _content(work / "a.shard-1-of-2.h5")
        _kill_at(_gen(out, "--workers", "1", "--shard", "2/2"), moment)  # the last shard: it writes the index too
        res = subprocess.run(_gen(out, "--workers", "1", "--shard", "2/2", "--overwrite"), env=_ENV,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, (moment, res.stderr)
        _clean(work, ["a.h5", "a.shard-1-of-2.h5", "a.shard-2-of-2.h5"])
        assert _content(work / "a.shard-1-of-2.h5") == first
        assert read_trajectories(out).y.tobytes() == want, moment


def test_kill_9_of_vp_rollout_with_workers_at_random_moments(tmp_path):
    from vpintegrator.data import integrate, write_trajectories

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(40, 3))  # more than SCALAR_MAX_BATCH: the work is cut into blocks
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = tmp_path / "data.h5"
    write_trajectories(data, integrate("rigid_body", y0, 0.2, 20, method="rk4"))

    def cmd(out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators",
                "rk4,implicit_midpoint", "--t-end", "200", "--no-volume", "--out", str(out), "--quiet",
                "--workers", "2", *extra]

    ref = tmp_path / "ref" / "r.h5"
    subprocess.run(cmd(ref), check=True, env=_ENV, capture_output=True, timeout=300)
    want = _content(ref)
    for i, moment in enumerate(_MOMENTS):
        work = tmp_path / f"k{i}"
        work.mkdir()
        out = work / "r.h5"
        _kill_at(cmd(out), moment)
        res = subprocess.run(cmd(out, "--overwrite"), env=_ENV, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, (moment, res.stderr)
        _clean(work, ["r.csv", "r.h5", "r.md", "r.tex"])
        assert _content(out) == want, moment
