"""vp-gen on every core (``workers``) and in shards (``shard``): the same data set to the last bit.

Compared bitwise against one worker / no shards: the compiled DOP853 (each trajectory alone), a classical
implicit method (Newton on a whole chunk: shards must be made of whole chunks) and the deterministic
paper sampler; the index file, the shard list in any order, the VDS ``/y``; the one-line errors for shards
that do not belong together.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.gen import main as vp_gen
from vpintegrator.data import generate, load_spec, read_metadata, read_trajectories
from vpintegrator.data._parallel import encode_chunks
from vpintegrator.data.shards import parse_shard, shard_bounds, shard_path
from vpintegrator.errors import VPIntegratorError

SPECS = {
    # compiled DOP853, 5 chunks of 70 (the last one short)
    "dop853": dict(name="rigid_body", n_traj=320, t_end=2.0, chunk_size=70),
    # Newton on whole chunks: a different chunking would change the last bits
    "implicit_midpoint": dict(name="rigid_body", n_traj=150, t_end=1.0, chunk_size=40, method="implicit_midpoint"),
    # the deterministic sampler (1238 points), 4 chunks
    "paper": dict(name="rigid_body_paper", t_end=0.6, chunk_size=320),
}


def _spec(which):
    kw = dict(SPECS[which])
    return load_spec(kw.pop("name"), **kw)


@pytest.fixture(scope="module", params=sorted(SPECS))
def reference(request, tmp_path_factory):
    """(spec, the one-worker unsharded file, its contents)."""
    spec = _spec(request.param)
    path = tmp_path_factory.mktemp(request.param) / "one.h5"
    generate(spec, path, workers=1)
    return spec, path, read_trajectories(path)


def _same(a, b):
    assert a.y.shape == b.y.shape
    assert a.y.tobytes() == b.y.tobytes()  # to the last bit (NaN-safe)
    assert a.t.tobytes() == b.t.tobytes()
    for key in [k for k in a.meta if k.startswith("max_rel_drift_")]:
        assert a.meta[key] == b.meta[key]


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_give_the_same_file(reference, tmp_path, workers):
    spec, _, ref = reference
    out = generate(spec, tmp_path / "w.h5", workers=workers)
    _same(ref, read_trajectories(out))


def test_workers_in_memory_give_the_same_array(reference):
    spec, _, ref = reference
    _same(ref, generate(spec, workers=2))


@pytest.mark.parametrize("n", [2, 3])
def test_shards_read_as_one_equal_the_unsharded_file(reference, tmp_path, n):
    spec, _, ref = reference
    out = tmp_path / "data.h5"
    order = list(range(n, 0, -1))  # the last shard first: the index appears only after the last one written
    for k, i in enumerate(order):
        path = generate(spec, out, shard=f"{i}/{n}", workers=2)
        assert path == shard_path(out, (i, n))
        assert out.exists() == (k == n - 1)
    whole = read_trajectories(out)
    _same(ref, whole)
    assert whole.meta["n_traj"] == ref.y.shape[0]
    assert read_metadata(out)["n_traj"] == ref.y.shape[0]
    shards = [shard_path(out, (i, n)) for i in order]  # any order: read in shard order
    _same(ref, read_trajectories(shards))
    with h5py.File(out, "r") as f:  # the index's /y is a virtual dataset over the shards
        assert f["y"].is_virtual
        np.testing.assert_array_equal(f["y"][:], ref.y)
    pick = [ref.y.shape[0] - 1, 0, 7, 7]
    part = read_trajectories(out, traj=pick, steps=[0, 2])
    np.testing.assert_array_equal(part.y, ref.y[pick][:, [0, 2]])


def test_shards_are_contiguous_blocks_of_whole_chunks():
    assert [shard_bounds(320, 70, (i, 3)) for i in (1, 2, 3)] == [(0, 70), (70, 210), (210, 320)]
    assert [shard_bounds(1238, 320, (i, 2)) for i in (1, 2)] == [(0, 640), (640, 1238)]
    with pytest.raises(VPIntegratorError, match=r"only 1 chunk.*at most 1 shards"):
        shard_bounds(10, 2048, (2, 2))


@pytest.mark.parametrize("value, match", [
    ("0/4", r"shard 0/4 is out of range"), ("5/4", r"shard 5/4 is out of range"), ("3", r"must be I/N"),
    ("a/b", r"must be I/N"), ((1, 0), r"out of range"), ((True, 2), r"I/N or a pair"), (2, r"I/N or a pair"),
])
def test_bad_shard(value, match):
    with pytest.raises(VPIntegratorError, match=match):
        parse_shard(value)


def test_parse_shard():
    assert parse_shard(" 2 / 8 ") == (2, 8)
    assert parse_shard((1, 1)) == (1, 1)
    assert parse_shard(None) is None


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_workers(workers):
    with pytest.raises(VPIntegratorError, match=r"workers must be an integer >= 1"):
        generate(_spec("dop853"), workers=workers)


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    """The index and two shards of the dop853 spec, plus a third shard of a different seed."""
    d = tmp_path_factory.mktemp("two")
    spec = _spec("dop853")
    for i in (1, 2):
        generate(spec, d / "data.h5", shard=(i, 2), workers=1)
    generate(dataclasses.replace(spec, seed=spec.seed + 1), d / "other.h5", shard=(2, 2), workers=1, write_index=False)
    return d


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        shutil.copy(p, dst / p.name)
    return dst


def test_missing_shard_is_named(two_shards, tmp_path):
    d = _copy(two_shards, tmp_path / "c")
    os.remove(d / "data.shard-2-of-2.h5")
    with pytest.raises(VPIntegratorError, match=r"data\.h5: shard file .*data\.shard-2-of-2\.h5 is missing") as err:
        read_trajectories(d / "data.h5")
    assert "\n" not in str(err.value)
    first = read_trajectories(d / "data.shard-1-of-2.h5")  # one shard alone: the block it holds
    assert first.meta["shard_traj_start"] == 0 and first.y.shape[0] == first.meta["shard_traj_stop"]


def test_foreign_shard_is_named(two_shards):
    d = two_shards
    with pytest.raises(VPIntegratorError, match=r"other\.shard-2-of-2\.h5: belongs to another data set \(attribute 'seed'"):
        read_trajectories([d / "data.shard-1-of-2.h5", d / "other.shard-2-of-2.h5"])


def test_shard_given_twice_is_named(two_shards):
    d = two_shards
    with pytest.raises(VPIntegratorError, match=r"shard 1/2 given twice"):
        read_trajectories([d / "data.shard-1-of-2.h5", d / "data.shard-1-of-2.h5"])


def test_plain_file_among_shards_is_named(two_shards, reference):
    _, one, _ = reference
    with pytest.raises(VPIntegratorError, match=r"one\.h5: not a shard"):
        read_trajectories([two_shards / "data.shard-1-of-2.h5", one])


def test_index_is_not_mixed_with_shards(two_shards):
    with pytest.raises(VPIntegratorError, match=r"data\.h5: is a shard index; give it alone"):
        read_trajectories([two_shards / "data.h5", two_shards / "data.shard-1-of-2.h5"])


def test_an_overlap_is_named(two_shards, tmp_path):
    d = _copy(two_shards, tmp_path / "c")
    with h5py.File(d / "data.shard-2-of-2.h5", "r+") as f:
        f.attrs["shard_traj_start"] = 60
    with pytest.raises(VPIntegratorError, match=r"shard-2-of-2\.h5: an overlap in the trajectories"):
        read_trajectories(d / "data.h5")


def test_encoded_chunks_read_back_as_the_array(tmp_path):
    """The hand-made shuffle + deflate chunks are what HDF5 decodes to the same values."""
    y = np.random.default_rng(0).normal(size=(130, 7, 3))
    with h5py.File(tmp_path / "x.h5", "w") as f:
        ds = f.create_dataset("y", shape=y.shape, dtype=np.float64, chunks=(64, 5, 3), compression="gzip",
                              compression_opts=4, shuffle=True)
        for start in (0, 64, 128):
            pieces = encode_chunks(y[start : start + 64], start, 130, ds.chunks, 4)
            for offset, data in pieces:
                ds.id.write_direct_chunk(offset, data)
        assert encode_chunks(y[10:20], 10, 130, ds.chunks, 4) is None  # not on a chunk boundary
        np.testing.assert_array_equal(ds[:], y)


def test_cli_shard_and_workers(tmp_path):
    runner = CliRunner()
    args = ["rigid_body", "--n-traj", "200", "--t-end", "0.4", "--chunk-size", "50", "--quiet"]
    one = runner.invoke(vp_gen, [*args, "--out", str(tmp_path / "one.h5"), "--workers", "1"])
    assert one.exit_code == 0, one.output
    for i in (1, 2):
        res = runner.invoke(vp_gen, [*args, "--out", str(tmp_path / "s.h5"), "--shard", f"{i}/2"])
        assert res.exit_code == 0, res.output
        assert "shard-%d-of-2" % i in res.output
    _same(read_trajectories(tmp_path / "one.h5"), read_trajectories(tmp_path / "s.h5"))
    bad = runner.invoke(vp_gen, [*args, "--out", str(tmp_path / "b.h5"), "--shard", "3/2"])
    assert bad.exit_code == 1 and bad.output.strip().splitlines() == [
        "Error: --shard 3/2 is out of range; give shard as I/N with 1 <= I <= N, e.g. 2/8 for the second of eight blocks"]
    bad = runner.invoke(vp_gen, [*args, "--out", str(tmp_path / "b.h5"), "--workers", "0"])
    assert bad.exit_code == 1 and bad.output.startswith("Error: --workers must be an integer >= 1")
    assert not (tmp_path / "b.h5").exists()


def test_training_reads_the_index(two_shards):
    """vp-train --data INDEX: the windows loader reads the index as the whole data set."""
    pytest.importorskip("torch")
    from vpintegrator.data.windows import load_trajectories

    got = load_trajectories([two_shards / "data.h5"])
    assert got.y.shape[0] == 320


def test_workers_on_the_vectorised_fallback(monkeypatch):
    """Without numba (solve_ivp on stacked chunks) the threads give the same array too."""
    import vpintegrator.compiled.dop853 as dop853

    monkeypatch.setattr(dop853, "NUMBA", False)
    spec = load_spec("rigid_body", n_traj=90, t_end=0.6, chunk_size=30)
    one, two = generate(spec, workers=1), generate(spec, workers=2)
    assert "solve_ivp" in two.meta["generator"]
    _same(one, two)
