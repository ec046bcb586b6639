"""vp-rollout on a dask.distributed cluster: a LocalCluster of 2 worker processes on localhost.

Each worker writes its shard, the client the index and the whole run's table; read back it equals the
single-process rollout bit for bit (the timings apart), also when a worker is killed while it rolls out a
block (the block is computed again elsewhere: nothing lost, nothing twice, no temporary file left).
"""

from __future__ import annotations

import json

import pytest

distributed = pytest.importorskip("distributed")

from dask_helpers import local_cluster, with_a_worker_killed  # noqa: E402
from vpintegrator.data import generate, load_spec  # noqa: E402
from vpintegrator.errors import VPIntegratorError  # noqa: E402
from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with local_cluster() as pair:
        yield pair


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.h5"
    generate(load_spec("rigid_body", n_traj=60, t_end=2.0), path, workers=1)
    return path


def _config(data, out, **kw):
    return RolloutConfig(data=str(data), out=str(out), integrators=["rk4", "implicit_midpoint", "exact_flow"],
                         workers=1, chunk_steps=16, **kw)


def _same(a, b):
    assert a.traj_index.tobytes() == b.traj_index.tobytes()
    assert a.reference.y.tobytes() == b.reference.y.tobytes()
    for label in a.labels:
        assert a.methods[label].y.tobytes() == b.methods[label].y.tobytes(), label
        assert a.metrics[label].rel_error.tobytes() == b.metrics[label].rel_error.tobytes(), label
    strip = [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in a.table]
    assert strip == [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in b.table]


def _files(folder, stem="r"):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(stem + ".") and p.suffix == ".h5")


def test_cluster_equals_local(cluster, data, tmp_path):
    _, client = cluster
    report = run_rollouts(_config(data, tmp_path / "r.h5"), scheduler=client.scheduler.address, n_shards=3)
    local = run_rollouts(_config(data, tmp_path / "local.h5"))
    _same(read_rollout(local.out), read_rollout(report.out))
    assert [r["method"] for r in report.rows] == ["rk4", "implicit_midpoint", "exact_flow"]
    # what the errors are measured against: the unsharded run's line, in the report and above the index's table
    assert report.reference == local.reference and report.reference.startswith("exact flow")
    caption = f"Errors against the {local.reference}."
    assert report.markdown.read_text().splitlines()[0] == caption == local.markdown.read_text().splitlines()[0]
    assert _files(tmp_path) == ["r.h5", "r.shard-1-of-3.h5", "r.shard-2-of-3.h5", "r.shard-3-of-3.h5"]
    assert (tmp_path / "r.csv").is_file()
    with pytest.raises(VPIntegratorError, match=r"r\.h5 already exists"):  # the overwrite rule, before work
        run_rollouts(_config(data, tmp_path / "r.h5"), scheduler=client, n_shards=3)


def test_default_one_shard_per_worker_and_env_address(cluster, data, tmp_path, monkeypatch):
    _, client = cluster
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", client.scheduler.address)
    run_rollouts(_config(data, tmp_path / "r.h5", n_traj=50), scheduler=True)
    assert _files(tmp_path) == ["r.h5", "r.shard-1-of-2.h5", "r.shard-2-of-2.h5"]
    local = run_rollouts(_config(data, tmp_path / "local.h5", n_traj=50))
    _same(read_rollout(local.out), read_rollout(tmp_path / "r.h5"))


@pytest.mark.slow  # waits for the killed worker's restart (12-14 s here); the other tests run by default
def test_killed_worker_block_is_recomputed(cluster, tmp_path):
    _, client = cluster
    data = tmp_path / "long.h5"
    generate(load_spec("rigid_body", n_traj=400, t_end=1.0), data, workers=1)
    # blocks of a second or more each: implicit midpoint far beyond the data (its generator continues it)
    config = RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["implicit_midpoint"],
                           t_end=60.0, workers=1, volume=False)
    killed = with_a_worker_killed(client, lambda: run_rollouts(config, scheduler=client, n_shards=4),
                                  settle=0.3, deadline=120)
    assert killed, "no worker was busy to be killed"
    local = run_rollouts(RolloutConfig(**{**config.to_dict(), "out": str(tmp_path / "local.h5")}))
    _same(read_rollout(local.out), read_rollout(tmp_path / "r.h5"))  # nothing lost, nothing twice, in order
    assert _files(tmp_path) == ["r.h5", *(f"r.shard-{i}-of-4.h5" for i in range(1, 5))]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".lock"))]


def test_no_scheduler_is_one_line_error(data, tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    with pytest.raises(VPIntegratorError, match=r"scheduler not given and DASK_SCHEDULER_ADDRESS not set"):
        run_rollouts(_config(data, tmp_path / "r.h5"), scheduler=True)


def test_cli_scheduler(cluster, data, tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.rollout import main as vp_rollout

    _, client = cluster
    args = ["--set", f"data={json.dumps(str(data))}", "--integrators", "rk4", "--n-traj", "30", "--workers", "1"]
    res = CliRunner().invoke(vp_rollout, [*args, "--out", str(tmp_path / "r.h5"), "--dask-scheduler",
                                          client.scheduler.address, "--shards", "3"])
    assert res.exit_code == 0, res.output
    assert "Rollout written to" in res.output
    assert "Errors against the exact flow" in res.output and "Errors against the ." not in res.output
    local = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "l.h5"), integrators=["rk4"], n_traj=30))
    _same(read_rollout(local.out), read_rollout(tmp_path / "r.h5"))
    res = CliRunner().invoke(vp_rollout, [*args, "--out", str(tmp_path / "x.h5"), "--dask-scheduler",
                                          client.scheduler.address, "--shard", "1/2"])
    assert res.exit_code == 2 and "--shard and --dask-scheduler exclude each other" in res.output
