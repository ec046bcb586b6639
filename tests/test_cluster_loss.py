"""Issue 36: a dask cluster lost during ``vp-gen --dask-scheduler``. The client printed dask's tracebacks;
now the run ends with one line saying how many shards were written (whole: shards are written
atomically), and the same command on a running cluster computes only the missing shards and removes what
the killed workers left (their temporary files and locks).

The cluster is a scheduler and a worker process started apart from the client (``dask scheduler``,
``dask worker``) so that the scheduler can be killed alone, as on a real cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs kill -9")

_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


class _Cluster:
    """A scheduler on 127.0.0.1 and 2 single-thread worker processes, each a process of its own."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(exist_ok=True)
        file = folder / "scheduler.json"
        file.unlink(missing_ok=True)
        quiet = dict(env=_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                           "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                                           str(file)], **quiet)
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert time.monotonic() < deadline and self.scheduler.poll() is None, "the scheduler did not start"
            time.sleep(0.1)
        time.sleep(0.2)
        self.address = json.loads(file.read_text())["address"]
        self.workers = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                         str(file), "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                                        start_new_session=True, **quiet)  # (their nannies and workers: one group)
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)

    def kill(self) -> None:
        """The whole cluster dies at once (kill -9): the scheduler, then every worker process."""
        os.kill(self.scheduler.pid, signal.SIGKILL)
        self.scheduler.wait()
        os.killpg(self.workers.pid, signal.SIGKILL)
        self.workers.wait()

    def close(self) -> None:
        for p in (self.workers, self.scheduler):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.workers, self.scheduler):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _gen(out: Path, address: str) -> list[str]:
    # 4 blocks of 3000 trajectories of 201 states: a second or more each, so the scheduler dies mid-run
    return [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", "12000", "--t-end", "20",
            "--chunk-size", "1000", "--workers", "1", "--out", str(out), "--dask-scheduler", address,
            "--shards", "4"]


def _shards(folder: Path) -> dict[str, tuple[int, int]]:
    """shard file -> (inode, mtime): a shard written again is a new file (written atomically: renamed)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("data.shard-*.h5")}


def _kill_cluster_mid_run(command, folder: Path, written):
    """Run ``command(address)`` on a fresh cluster in ``folder``; once ``written()`` says a first shard exists
    (the others still running) kill the whole cluster. Returns (the cluster, the run's stderr, its exit code)."""
    cluster = _Cluster(folder)
    try:
        proc = subprocess.Popen(command(cluster.address), env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 240
        while not written():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no shard was written"
            time.sleep(0.05)
        cluster.kill()
        _, err = proc.communicate(timeout=240)
    finally:
        cluster.close()
    return cluster, err, proc.returncode


@pytest.mark.slow  # two clusters started, a run killed and resumed: about a minute here
def test_a_lost_scheduler_is_one_line_and_the_rerun_computes_only_the_missing_shards(tmp_path):
    from vpintegrator.data import generate, load_spec, read_trajectories

    work = tmp_path / "work"
    work.mkdir()
    out = work / "data.h5"
    # the first shard is written: kill the cluster while the others run
    cluster, err, code = _kill_cluster_mid_run(lambda address: _gen(out, address), tmp_path / "c1",
                                               lambda: _shards(work))
    assert code == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"Error: scheduler {cluster.address}: the dask cluster was lost during the run ("), err
    assert "shard(s) sent were written whole, none half: run the same vp-gen command again" in err, err
    kept = _shards(work)
    assert 1 <= len(kept) < 4 and not out.exists()
    assert not [p.name for p in work.iterdir() if p.suffix == ".h5" and p.name not in kept]  # nothing half-written
    assert [p for p in work.iterdir() if p.name.endswith(".tmp")]  # (what the killed workers were writing)

    cluster = _Cluster(tmp_path / "c2")
    try:
        res = subprocess.run(_gen(out, cluster.address), env=_ENV, capture_output=True, text=True, timeout=300)
    finally:
        cluster.close()
    assert res.returncode == 0, res.stderr
    now = _shards(work)
    assert sorted(now) == [f"data.shard-{i}-of-4.h5" for i in range(1, 5)]
    assert {k: now[k] for k in kept} == kept  # the shards written before were kept, not computed again
    assert all(now[k] != kept.get(k) for k in now if k not in kept)
    # no temporary file or lock of the killed writers is left; the data equal one run's, bit for bit
    assert sorted(p.name for p in work.iterdir()) == ["data.h5", *sorted(now)]
    spec = load_spec("rigid_body", n_traj=12000, t_end=20.0, chunk_size=1000)
    assert read_trajectories(out).y.tobytes() == generate(spec, workers=1).y.tobytes()


def _rollout(data: Path, out: Path, address: str) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators",
            "rk4,implicit_midpoint", "--t-end", "300", "--no-volume", "--out", str(out), "--quiet", "--workers", "1",
            "--dask-scheduler", address, "--shards", "4"]


@pytest.mark.slow  # as above, for vp-rollout
def test_a_lost_cluster_during_vp_rollout_is_one_line_and_the_rerun_computes_only_the_missing_shards(tmp_path):
    import numpy as np

    from vpintegrator.data import integrate, write_trajectories
    from vpintegrator.rollout import read_rollout

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(16, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = tmp_path / "data.h5"
    write_trajectories(data, integrate("rigid_body", y0, 0.2, 20, method="rk4"))
    work = tmp_path / "work"
    work.mkdir()
    out = work / "r.h5"

    def shards():
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in work.glob("r.shard-*.h5")}

    cluster, err, code = _kill_cluster_mid_run(lambda address: _rollout(data, out, address), tmp_path / "c1", shards)
    assert code == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "the dask cluster was lost during the run (" in err and "run the same vp-rollout command again" in err, err
    kept = shards()
    assert 1 <= len(kept) < 4 and not out.exists()

    cluster = _Cluster(tmp_path / "c2")
    try:
        res = subprocess.run(_rollout(data, out, cluster.address), env=_ENV, capture_output=True, text=True,
                             timeout=300)
    finally:
        cluster.close()
    assert res.returncode == 0, res.stderr
    now = shards()
    assert sorted(now) == [f"r.shard-{i}-of-4.h5" for i in range(1, 5)]
    assert {k: now[k] for k in kept} == kept  # kept, not computed again
    assert not [p.name for p in work.iterdir() if p.name.endswith((".tmp", ".lock"))]
    got = read_rollout(out)
    local = tmp_path / "local.h5"  # the same run on this machine, unsharded: the same bits
    cmd = _rollout(data, local, "")
    subprocess.run(cmd[: cmd.index("--dask-scheduler")], check=True, env=_ENV, capture_output=True, timeout=300)
    want = read_rollout(local)
    assert got.methods["rk4"].y.shape == (16, 1501, 3)
    for m in ("rk4", "implicit_midpoint"):
        assert got.methods[m].y.tobytes() == want.methods[m].y.tobytes()
    assert got.reference.y.tobytes() == want.reference.y.tobytes()


@pytest.mark.parametrize("change, kept", [({}, True), ({"seed": 1}, False), ({"n_traj": 3000}, False),
                                          ({"t_end": 0.5}, False), ({"method": "rk4"}, False)])
def test_only_a_finished_shard_of_the_same_data_set_is_kept(tmp_path, change, kept):
    """What a continued cluster run keeps: a shard of the same spec, seed, size, grid and method only."""
    from vpintegrator.data import generate, load_spec
    from vpintegrator.data.generation import plan_chunks
    from vpintegrator.data.generation_plan import build_plan
    from vpintegrator.data.shards import finished_gen_shard

    spec = load_spec("rigid_body", n_traj=2000, t_end=0.4, chunk_size=500)
    generate(spec, tmp_path / "d.h5", shard=(1, 2), workers=1, write_index=False)
    other = load_spec("rigid_body", **{"n_traj": 2000, "t_end": 0.4, "chunk_size": 500, **change})
    plan = build_plan(other)
    n_traj, _ = plan_chunks(plan)
    assert finished_gen_shard(tmp_path / "d.shard-1-of-2.h5", plan, n_traj, (1, 2)) is kept
    assert not finished_gen_shard(tmp_path / "d.shard-1-of-2.h5", plan, n_traj, (1, 3))
    assert not finished_gen_shard(tmp_path / "d.shard-2-of-2.h5", plan, n_traj, (2, 2))  # not there
