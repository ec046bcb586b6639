"""Windows over trajectories: index arithmetic against a slow loop, split, sampler, shards, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator import Trajectories, VPIntegratorError
from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.data.windows import (
    WindowBatchSampler,
    WindowDataset,
    load_trajectories,
    make_window_datasets,
    split_trajectories,
    states_tensor,
)


def _traj(n_traj=5, n_states=12, dim=3, offset=0.0) -> Trajectories:
    y = offset + np.arange(n_traj * n_states * dim, dtype=np.float64).reshape(n_traj, n_states, dim)
    t = 0.1 * np.arange(n_states)
    return Trajectories(y=y, t=t, meta={"system": "toy", "dt": 0.1})


def _slow_windows(y, seq_len, pred_window, stride, traj):
    """Every window by plain loops, in the documented order (trajectory-major, then start)."""
    xs, ts = [], []
    for i in traj:
        for s in range(0, y.shape[1] - seq_len - pred_window + 1, stride):
            xs.append(y[i, s : s + seq_len])
            ts.append(y[i, s + seq_len : s + seq_len + pred_window])
    return np.stack(xs), np.stack(ts)


@pytest.mark.parametrize("seq_len,pred_window,stride", [(1, 1, 1), (3, 3, 1), (3, 2, 2), (4, 1, 3), (6, 6, 1)])
@pytest.mark.parametrize("traj", [None, [4, 0, 2]])
def test_windows_match_slow_loop(seq_len, pred_window, stride, traj):
    data = _traj()
    y = torch.as_tensor(data.y)
    ds = WindowDataset(y, seq_len, pred_window, stride, traj)
    x_ref, t_ref = _slow_windows(data.y, seq_len, pred_window, stride, traj if traj is not None else range(5))
    assert len(ds) == len(x_ref)
    x, target = ds.windows()
    assert x.shape == (len(ds), seq_len, 3) and target.shape == (len(ds), pred_window, 3)
    np.testing.assert_array_equal(x.numpy(), x_ref)
    np.testing.assert_array_equal(target.numpy(), t_ref)
    k = len(ds) // 2
    xk, tk = ds[k]
    np.testing.assert_array_equal(xk.numpy(), x_ref[k])
    np.testing.assert_array_equal(tk.numpy(), t_ref[k])
    np.testing.assert_array_equal(ds[-1][0].numpy(), x_ref[-1])


def test_index_out_of_range():
    ds = WindowDataset(torch.zeros(2, 5, 3), 2, 1)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_dataloader_compatible():
    ds = WindowDataset(torch.as_tensor(_traj().y), 3, 3)
    loader = torch.utils.data.DataLoader(ds, batch_size=7, shuffle=False)
    x, target = next(iter(loader))
    assert x.shape == (7, 3, 3) and target.shape == (7, 3, 3)
    np.testing.assert_array_equal(x.numpy(), ds.windows()[0][:7].numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dtype_and_shared_storage(dtype):
    train, val, data = make_window_datasets(_traj(n_traj=10), 2, 2, val_fraction=0.3, seed=1, dtype=dtype)
    expected = getattr(torch, dtype)
    assert train.y.dtype == expected and train.batch(torch.tensor([0]))[0].dtype == expected
    # one tensor for both: memory is the data itself, not a copy per split or per window
    assert isinstance(data, Trajectories) and train.y.shape == data.y.shape
    assert train.y.data_ptr() == val.y.data_ptr()
    assert set(train.traj_indices.tolist()).isdisjoint(val.traj_indices.tolist())
    assert sorted(train.traj_indices.tolist() + val.traj_indices.tolist()) == list(range(10))


@pytest.mark.parametrize("n_traj,val_fraction,n_val", [(10, 0.1, 1), (10, 0.25, 2), (3, 0.01, 1), (10, 0.0, 0)])
def test_split_by_trajectory(n_traj, val_fraction, n_val):
    train, val = split_trajectories(n_traj, val_fraction, seed=7)
    assert len(val) == n_val and len(train) == n_traj - n_val
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(n_traj))
    again = split_trajectories(n_traj, val_fraction, seed=7)
    np.testing.assert_array_equal(again[1], val)


def test_split_depends_on_seed():
    vals = {tuple(split_trajectories(100, 0.1, seed=s)[1]) for s in range(5)}
    assert len(vals) == 5


@pytest.mark.parametrize("val_fraction", [-0.1, 1.0, 0.95])
def test_split_rejects_bad_fraction(val_fraction):
    with pytest.raises(VPIntegratorError, match="val_fraction"):
        split_trajectories(10, val_fraction)


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_visits_every_window_once(shuffle):
    sampler = WindowBatchSampler(103, 10, shuffle=shuffle, generator=torch.Generator().manual_seed(0))
    batches = list(sampler)
    assert len(batches) == len(sampler) == 11
    assert sorted(torch.cat(batches).tolist()) == list(range(103))
    assert (torch.cat(batches).tolist() == list(range(103))) is (not shuffle)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_sampler_shards_union_is_the_global_batch(world_size):
    """Rank r gets a contiguous slice of every global batch; together they are the 1-process batch."""
    single = list(WindowBatchSampler(23, 5, generator=torch.Generator().manual_seed(3)))
    per_rank = [
        list(WindowBatchSampler(23, 5, generator=torch.Generator().manual_seed(3), rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    for b, batch in enumerate(single):
        assert torch.equal(torch.cat([per_rank[r][b] for r in range(world_size)]), batch)


def test_sampler_order_follows_generator_state():
    g = torch.Generator().manual_seed(5)
    sampler = WindowBatchSampler(50, 8, generator=g)
    state = g.get_state()
    first = sampler.epoch_order()
    g.set_state(state)
    assert torch.equal(sampler.epoch_order(), first)
    assert not torch.equal(sampler.epoch_order(), first)  # the next epoch differs


def test_shards_concatenate(tmp_path):
    a, b = _traj(n_traj=3), _traj(n_traj=4, offset=1000.0)
    pa, pb = write_trajectories(tmp_path / "a.h5", a), write_trajectories(tmp_path / "b.h5", b)
    data = load_trajectories([pa, pb])
    np.testing.assert_array_equal(data.y, np.concatenate([a.y, b.y]))
    assert data.meta["n_traj"] == 7 and data.meta["source_files"] == [str(pa), str(pb)]
    torch.testing.assert_close(states_tensor(data, "float64"), torch.as_tensor(np.concatenate([a.y, b.y])))


def test_shards_must_agree(tmp_path):
    pa = write_trajectories(tmp_path / "a.h5", _traj(n_states=12))
    pb = write_trajectories(tmp_path / "b.h5", _traj(n_states=10))
    with pytest.raises(VPIntegratorError, match="'/t' differs"):
        load_trajectories([pa, pb])


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_trajectories(tmp_path / "nope.h5")


def test_wrong_schema_file(tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_text("not hdf5")
    with pytest.raises(VPIntegratorError, match="bad.h5"):
        load_trajectories(bad)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(seq_len=8, pred_window=5), "exceeds the n_states"),
        (dict(seq_len=0, pred_window=1), "seq_len"),
        (dict(seq_len=2, pred_window=1, stride=0), "stride"),
    ],
)
def test_bad_window_arguments(kwargs, match):
    with pytest.raises(VPIntegratorError, match=match):
        WindowDataset(torch.zeros(2, 12, 3), **kwargs)


def test_bad_source():
    with pytest.raises(VPIntegratorError, match="shape"):
        load_trajectories(np.zeros((3, 4)))
