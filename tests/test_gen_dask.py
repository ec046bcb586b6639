"""vp-gen on a dask.distributed cluster: a LocalCluster of 2 worker processes on localhost.

The cluster path writes one shard per block on the workers and the index on the client; read back it
equals the local path bit for bit, also when a worker is killed while it integrates a block (the block
is computed again elsewhere: nothing lost, nothing twice, no temporary file left).
"""

from __future__ import annotations

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from dask_helpers import local_cluster, with_a_worker_killed  # noqa: E402
from vpintegrator.data import generate, load_spec, read_trajectories  # noqa: E402
from vpintegrator.errors import VPIntegratorError  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with local_cluster() as pair:
        yield pair


def _local(spec, tmp_path):
    return read_trajectories(generate(spec, tmp_path / "local.h5", workers=1))


def _files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("data"))


def test_cluster_equals_local(cluster, tmp_path):
    _, client = cluster
    spec = load_spec("rigid_body", n_traj=600, t_end=1.0, chunk_size=100)
    out = generate(spec, tmp_path / "data.h5", scheduler=client.scheduler.address, n_shards=3, workers=1)
    got, ref = read_trajectories(out), _local(spec, tmp_path)
    assert got.y.tobytes() == ref.y.tobytes() and got.t.tobytes() == ref.t.tobytes()
    assert _files(tmp_path) == ["data.h5", "data.shard-1-of-3.h5", "data.shard-2-of-3.h5", "data.shard-3-of-3.h5"]
    with pytest.raises(VPIntegratorError, match=r"data\.h5 already exists"):  # the overwrite rule, before work
        generate(spec, tmp_path / "data.h5", scheduler=client, n_shards=3)


def test_default_one_shard_per_worker_and_env_address(cluster, tmp_path, monkeypatch):
    _, client = cluster
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", client.scheduler.address)
    spec = load_spec("rigid_body_paper", t_end=0.4, chunk_size=300)  # the deterministic sampler
    generate(spec, tmp_path / "data.h5", scheduler=True, workers=1)
    assert _files(tmp_path) == ["data.h5", "data.shard-1-of-2.h5", "data.shard-2-of-2.h5"]
    assert read_trajectories(tmp_path / "data.h5").y.tobytes() == _local(spec, tmp_path).y.tobytes()


@pytest.mark.slow  # waits for the killed worker's restart (12-14 s here); the other tests run by default
def test_killed_worker_block_is_recomputed(cluster, tmp_path):
    _, client = cluster
    # blocks of a second or more each on this machine: long enough to be killed in the middle of one
    spec = load_spec("rigid_body", n_traj=12000, t_end=20.0, chunk_size=1000)
    killed = with_a_worker_killed(
        client, lambda: generate(spec, tmp_path / "data.h5", scheduler=client, n_shards=4, workers=1),
        settle=0.2, deadline=60)
    out = tmp_path / "data.h5"
    assert killed, "no worker was busy to be killed"
    got, ref = read_trajectories(out), _local(spec, tmp_path)
    assert got.y.shape == ref.y.shape == (12000, 201, 3)
    assert got.y.tobytes() == ref.y.tobytes()  # nothing lost, nothing twice, in order
    assert _files(tmp_path) == ["data.h5", *(f"data.shard-{i}-of-4.h5" for i in range(1, 5))]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".lock"))]
    np.testing.assert_array_equal(got.y[:, 0], ref.y[:, 0])


def test_no_scheduler_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    with pytest.raises(VPIntegratorError, match=r"scheduler not given and DASK_SCHEDULER_ADDRESS not set"):
        generate("rigid_body", tmp_path / "d.h5", scheduler=True)


def test_cli_scheduler(cluster, tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as vp_gen

    _, client = cluster
    args = ["rigid_body", "--n-traj", "300", "--t-end", "0.4", "--chunk-size", "100", "--workers", "1"]
    res = CliRunner().invoke(vp_gen, [*args, "--out", str(tmp_path / "data.h5"), "--dask-scheduler",
                                      client.scheduler.address, "--shards", "3"])
    assert res.exit_code == 0, res.output
    assert "index of the shards" in res.output
    ref = generate(load_spec("rigid_body", n_traj=300, t_end=0.4, chunk_size=100), workers=1)
    assert read_trajectories(tmp_path / "data.h5").y.tobytes() == ref.y.tobytes()
    res = CliRunner().invoke(vp_gen, [*args, "--out", str(tmp_path / "x.h5"), "--dask-scheduler",
                                      client.scheduler.address, "--shard", "1/2"])
    assert res.exit_code == 2 and "--shard and --dask-scheduler exclude each other" in res.output
