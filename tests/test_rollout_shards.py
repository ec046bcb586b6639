"""vp-rollout in blocks of trajectories (issue 23): ``workers`` processes and ``--shard I/N`` files.

Compared bitwise against one process and no shards: every dataset of the rollout file (states, relative
error, invariants, volume, failure steps) and every attribute but the timings and the provenance, for
classical integrators (explicit, implicit with per-trajectory Newton, splitting), the exact flow and the
reference continued beyond the data by its generator; shards read back as one (their index, their list in
any order); the one-line errors for shards that do not belong together; the CLI and vp-plot.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.data import generate, load_spec
from vpintegrator.data.rollout_shards import rollout_bounds
from vpintegrator.data.shards import shard_path
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts

INTEGRATORS = ["rk4", "implicit_midpoint", "splitting", "exact_flow"]
TIMING = ("seconds", "setup_seconds", "seconds_per_step", "summary_seconds_per_step", "wall_seconds", "warmup_seconds")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.h5"
    generate(load_spec("rigid_body", n_traj=40, t_end=2.0), path, workers=1)
    return path


def _config(data, out, **kw):
    # t_end beyond the data (2.0): the reference is continued by the data's generator
    kw = {"t_end": 3.0, "traj": list(range(1, 38)), **kw}
    return RolloutConfig(data=str(data), out=str(out), integrators=INTEGRATORS, chunk_steps=8, **kw)


@pytest.fixture(scope="module")
def one(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "one.h5"
    run_rollouts(_config(data, out, workers=1))
    return out


def _datasets(f):
    out = {}
    f.visititems(lambda k, o: out.__setitem__(k, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def _attrs(f):
    out = {"/": dict(f.attrs)}
    f.visititems(lambda k, o: out.__setitem__(k, dict(o.attrs)) if isinstance(o, h5py.Group) else None)
    return out


def _drop_timing(attrs):
    return {k: v for k, v in attrs.items() if k not in (*TIMING, "provenance", "summary_json")}


def _table(text):
    return [{k: v for k, v in row.items() if k != "seconds_per_step"} for row in json.loads(text)]


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_give_the_same_file(data, one, tmp_path, workers):
    report = run_rollouts(_config(data, tmp_path / "w.h5", workers=workers))
    with h5py.File(one) as a, h5py.File(report.out) as b:
        da, db = _datasets(a), _datasets(b)
        assert sorted(da) == sorted(db)
        for name in da:
            assert da[name].tobytes() == db[name].tobytes(), name  # to the last bit
        aa, ab = _attrs(a), _attrs(b)
        assert sorted(aa) == sorted(ab)
        for group in aa:
            x, y = _drop_timing(aa[group]), _drop_timing(ab[group])
            assert sorted(x) == sorted(y), group
            for key in x:
                assert np.array_equal(np.asarray(x[key]), np.asarray(y[key])), (group, key)
        assert _table(a.attrs["summary_json"]) == _table(b.attrs["summary_json"])
    assert [p.name for p in tmp_path.iterdir() if "parts" in p.name] == []  # the workers' files are gone


def test_workers_one_is_the_single_process_path(data, tmp_path, monkeypatch):
    import vpintegrator.jobs.executors as blocks  # (the process pools of the job runtime)

    def no_pool(*args, **kwargs):
        raise AssertionError("a process pool was started")

    monkeypatch.setattr(blocks, "ProcessPoolExecutor", no_pool)
    run_rollouts(_config(data, tmp_path / "w1.h5", workers=1))
    run_rollouts(_config(data, tmp_path / "wd.h5"))  # unset: every core, but too little work to repay processes
    run_rollouts(_config(data, tmp_path / "w8.h5", workers=2, traj=list(range(8))))  # the compiled runner's size


def _same(a, b):
    assert a.t.tobytes() == b.t.tobytes() and a.traj_index.tobytes() == b.traj_index.tobytes()
    assert a.reference.y.tobytes() == b.reference.y.tobytes()
    assert a.labels == b.labels
    for label in ["reference", *a.labels]:
        ma, mb = a.metrics[label], b.metrics[label]
        for key in ("rel_error", "map_t", "log_det_J", "cum_log_det_J"):
            assert np.asarray(getattr(ma, key)).tobytes() == np.asarray(getattr(mb, key)).tobytes(), (label, key)
        assert {k: v.tobytes() for k, v in ma.invariants.items()} == {k: v.tobytes() for k, v in mb.invariants.items()}
    for label in a.labels:
        ta, tb = a.methods[label], b.methods[label]
        assert ta.y.tobytes() == tb.y.tobytes() and ta.failed_step.tobytes() == tb.failed_step.tobytes()
        assert _drop_timing(ta.meta) == _drop_timing(tb.meta), label
    assert _table(json.dumps(a.table)) == _table(json.dumps(b.table))
    skip = ("provenance", "summary_json", "source_files", "index_file")
    assert {k: v for k, v in a.meta.items() if k not in skip} == {k: v for k, v in b.meta.items() if k not in skip}


@pytest.mark.parametrize("n", [2, 3])
def test_shards_read_as_one_equal_the_unsharded_file(data, one, tmp_path, n):
    out = tmp_path / "r.h5"
    for k, i in enumerate(range(n, 0, -1)):  # the last shard first: the index appears after the last one
        report = run_rollouts(_config(data, out, workers=1), shard=f"{i}/{n}")
        assert report.out == shard_path(out, (i, n))
        assert out.exists() == (k == n - 1)
    ref = read_rollout(one)
    _same(ref, read_rollout(out))  # the index
    _same(ref, read_rollout([shard_path(out, (i, n)) for i in reversed(range(1, n + 1))]))  # the list
    part = read_rollout(out, traj=[0, 14, 36], max_points=10)
    _same(read_rollout(one, traj=[0, 14, 36], max_points=10), part)
    # the whole run's table beside the index, and the index as a plain HDF5 file (virtual datasets)
    assert out.with_suffix(".csv").read_text().splitlines()[0] == one.with_suffix(".csv").read_text().splitlines()[0]
    with h5py.File(out) as f, h5py.File(one) as g:
        assert f["methods/implicit_midpoint/y"][()].tobytes() == g["methods/implicit_midpoint/y"][()].tobytes()
    # the index's table says what its errors are measured against, as the unsharded table does
    caption = one.with_suffix(".md").read_text().splitlines()[0]
    assert caption.startswith("Errors against the exact flow") and caption.endswith(".")
    assert out.with_suffix(".md").read_text().splitlines()[0] == caption
    assert report.reference and caption == f"Errors against the {report.reference}."


def test_shards_with_workers(data, one, tmp_path):
    out = tmp_path / "r.h5"
    for i in (1, 2):
        run_rollouts(_config(data, out, workers=2), shard=(i, 2))
    _same(read_rollout(one), read_rollout(out))


def test_bounds_are_contiguous_and_cover_the_selection():
    for n_traj in (1, 7, 64, 100, 1000):
        for n in range(1, min(n_traj, 9) + 1):
            bounds = [rollout_bounds(n_traj, (i, n)) for i in range(1, n + 1)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n_traj
            assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(bounds, bounds[1:]))


@pytest.fixture
def shards(data, tmp_path):
    out = tmp_path / "r.h5"
    for i in (1, 2, 3):
        run_rollouts(_config(data, out, workers=1), shard=f"{i}/3", write_index=False)
    assert not out.exists()
    return out


def test_missing_shard_is_named(shards):
    paths = [shard_path(shards, (i, 3)) for i in (1, 3)]
    with pytest.raises(VPIntegratorError, match=r"shard 2/3 is missing .*run vp-rollout with --shard 2/3") as err:
        read_rollout(paths)
    assert "\n" not in str(err.value)


def test_missing_shard_of_an_index_is_named(data, shards):
    run_rollouts(_config(data, shards, workers=1), shard="3/3", overwrite=True)  # writes the index
    shard_path(shards, (2, 3)).unlink()
    with pytest.raises(VPIntegratorError, match=r"shard file .*r\.shard-2-of-3\.h5 is missing"):
        read_rollout(shards)


def test_foreign_shard_is_named(data, shards, tmp_path):
    other = tmp_path / "other" / "r.h5"
    other.parent.mkdir()
    run_rollouts(_config(data, other, workers=1, t_end=2.5), shard="2/3", write_index=False)
    paths = [shard_path(shards, (1, 3)), shard_path(other, (2, 3)), shard_path(shards, (3, 3))]
    with pytest.raises(VPIntegratorError, match=r"other/r\.shard-2-of-3\.h5: belongs to another .*'t_end'"):
        read_rollout(paths)
    twice = [shard_path(shards, (1, 3)), shard_path(shards, (1, 3))]
    with pytest.raises(VPIntegratorError, match=r"shard 1/3 given twice"):
        read_rollout(twice)


def test_other_selection_is_foreign(data, shards, tmp_path):
    other = tmp_path / "sel" / "r.h5"
    other.parent.mkdir()
    run_rollouts(_config(data, other, workers=1, traj=list(range(0, 37))), shard="2/3", write_index=False)
    paths = [shard_path(shards, (1, 3)), shard_path(other, (2, 3)), shard_path(shards, (3, 3))]
    with pytest.raises(VPIntegratorError, match=r"'shard_selection'"):
        read_rollout(paths)


def test_bad_shard_argument(data, tmp_path):
    with pytest.raises(VPIntegratorError, match=r"shard must be I/N") as err:
        run_rollouts(_config(data, tmp_path / "r.h5"), shard="2of3")
    assert err.value.key == "shard"
    with pytest.raises(VPIntegratorError, match=r"shard 4/3 is out of range"):
        run_rollouts(_config(data, tmp_path / "r.h5"), shard="4/3")
    with pytest.raises(VPIntegratorError, match=r"selects only 3 trajectories.*give at most 3 shards"):
        run_rollouts(_config(data, tmp_path / "r.h5", traj=[0, 1, 2]), shard="1/4")


def test_cli_shard_workers_and_plot(data, one, tmp_path):
    from vpintegrator.cli.plot import main as vp_plot
    from vpintegrator.cli.rollout import main as vp_rollout

    out = tmp_path / "r.h5"
    base = ["--set", f"data={json.dumps(str(data))}", "--out", str(out), "--integrators", ",".join(INTEGRATORS),
            "--t-end", "3.0", "--traj", ",".join(map(str, range(1, 38))), "--set", "chunk_steps=8"]
    for i in (1, 2):
        res = CliRunner().invoke(vp_rollout, [*base, "--shard", f"{i}/2", "--workers", "2"])
        assert res.exit_code == 0, res.output
    _same(read_rollout(one), read_rollout(out))
    res = CliRunner().invoke(vp_rollout, [*base, "--workers", "0"])
    assert res.exit_code != 0 and "--workers" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(vp_rollout, [*base, "--shards", "2"])
    assert res.exit_code == 2 and "--shards goes with --dask-scheduler" in res.output
    shards = [str(shard_path(out, (i, 2))) for i in (1, 2)]
    res = CliRunner().invoke(vp_plot, [*shards, "--kind", "error", "--out", str(tmp_path / "fig")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fig" / "error.png").is_file()


@pytest.fixture(scope="module")
def split_model(data, tmp_path_factory):
    """A VPT trained one epoch on ``data`` with a recorded train/val/test split (12 test trajectories)."""
    from vpintegrator.training import fit

    out = tmp_path_factory.mktemp("model") / "run"
    fit(dict(data=[str(data)], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=1,
             batch_size=256, val_fraction=0.2, test_fraction=0.3, dtype="float64", seed=2, out=str(out)))
    return out


def _rows(report):
    return [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in report.rows]


def test_shards_of_a_model_run_default_to_its_test_split_and_keep_the_split_rows(data, split_model, tmp_path):
    """The shards cut what the unsharded run rolls out (the model's test split), and the index's table has
    the same rows, split column included, as the unsharded table."""
    split = json.loads((split_model / "summary.json").read_text())["split"]
    base = dict(models={"vpt": str(split_model)}, integrators=["rk4", "implicit_midpoint"], t_end=3.0, chunk_steps=8)
    whole = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "whole.h5"), **base))
    out = tmp_path / "s.h5"
    for i in (2, 1):
        run_rollouts(RolloutConfig(data=str(data), out=str(out), **base), shard=(i, 2))
    a, b = read_rollout(whole.out), read_rollout(out)
    assert sorted(a.traj_index.tolist()) == sorted(split["test"]) and np.array_equal(a.traj_index, b.traj_index)
    assert {r["split"] for r in whole.rows} == {"test"}
    merged = json.loads(h5py.File(out)["/"].attrs["summary_json"])
    assert _table(json.dumps(merged)) == _rows(whole)
    with h5py.File(whole.out) as fa, h5py.File(out) as fb:
        assert list(fa["methods/vpt"].attrs["split"]) == list(fb["methods/vpt"].attrs["split"])


def test_workers_label_rows_relative_to_the_run_models(data, split_model, tmp_path):
    """Classical methods on worker processes (which run without the models) still get rows per split label
    relative to the run's models, equal to the one-process run's."""
    base = dict(models={"vpt": str(split_model)}, integrators=["rk4", "splitting"], t_end=3.0, chunk_steps=8,
                traj=list(range(0, 30)))
    one = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "one.h5"), workers=1, **base))
    two = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "two.h5"), workers=2, **base))
    assert {r["split"] for r in one.rows} >= {"train", "test"}
    assert _rows(two) == _rows(one)
    with h5py.File(one.out) as fa, h5py.File(two.out) as fb:
        for name in ("reference", "methods/rk4", "methods/splitting"):
            assert list(fa[name].attrs["split"]) == list(fb[name].attrs["split"]), name


def test_heldout_is_not_sharded(data, tmp_path):
    with pytest.raises(VPIntegratorError, match=r"each shard would draw its own new conditions") as err:
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "h.h5"), integrators=["rk4"], heldout=3),
                     shard=(1, 2))
    assert err.value.key == "shard"
