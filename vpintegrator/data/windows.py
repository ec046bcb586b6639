"""Training windows cut from trajectories by index arithmetic, never materialised.

A window is the pair ``(y[i, s : s+seq_len], y[i, s+seq_len : s+seq_len+pred_window])`` for a
trajectory ``i`` and a start ``s`` in ``0, stride, 2*stride, ...`` (the paper's protocol: every (start, trajectory)
pair once per epoch). The trajectories stay one tensor ``(n_traj, n_states, dim)``
(``states_tensor``); a batch of windows is
one ``index_select`` on it, so memory stays at the data itself (train and validation share it) and a
whole batch costs one gather instead of ``batch`` Python calls.

The split into training, validation and test is by trajectory (``split_train_val_test``): a
validation or test window never shares a state with a training window.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..arrays import resolve_dtype
from ..errors import VPIntegratorError
from .split_rule import DEFAULT_SPLIT, default_split, split_train_val_test  # noqa: F401 (re-exported: the one rule)
from .trajectories import Trajectories, first_states_digest  # noqa: F401 (re-exported)

__all__ = [
    "states_tensor",
    "WindowDataset",
    "WindowBatchSampler",
    "load_trajectories",
    "split_trajectories",
    "split_train_val_test",
    "default_split",
    "DEFAULT_SPLIT",
    "first_states_digest",
    "make_window_datasets",
]


Source = str | os.PathLike[str] | Trajectories | np.ndarray | torch.Tensor


def states_tensor(data: Trajectories, dtype: str | torch.dtype = "float32", device: Any = "cpu") -> torch.Tensor:
    """The states ``data.y`` as one torch tensor (n_traj, n_states, dim) of ``dtype`` on ``device``: what the
    window datasets slice (one copy; batches are gathered from it by index)."""
    return torch.as_tensor(np.asarray(data.y), dtype=resolve_dtype(dtype), device=device)


def load_trajectories(source: Source | Sequence[str | os.PathLike[str]]) -> Trajectories:
    """The training data as one [`Trajectories`][vpintegrator.data.trajectories.Trajectories].

    Parameters
    ----------
    source : path, list of paths, Trajectories, or array (n_traj, n_states, dim)
        Files are read by [`vpintegrator.data.trajectory_files.read_trajectories`][vpintegrator.data.trajectory_files.read_trajectories] (several shards are
        concatenated along n_traj in the order given, and must agree on system, parameters, dt and time
        grid); an array gets the time grid ``0, 1, ...`` and no metadata.
    """
    if isinstance(source, Trajectories):
        return source
    if isinstance(source, torch.Tensor):
        source = source.detach().cpu().numpy()
    if isinstance(source, np.ndarray):
        if source.ndim != 3:
            raise VPIntegratorError(
                f"data: a trajectory array must have shape (n_traj, n_states, dim); got shape {source.shape}",
                key="data",
            )
        return Trajectories(y=source, t=np.arange(source.shape[1], dtype=np.float64))
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not paths:
        raise VPIntegratorError("data: no data source given; give at least one HDF5 file", key="data")
    if not all(isinstance(p, (str, os.PathLike)) for p in paths):
        raise VPIntegratorError(
            "data: give HDF5 path(s), one Trajectories or one array (n_traj, n_states, dim); got a list of "
            f"{', '.join(sorted({type(p).__name__ for p in paths}))}",
            key="data",
        )
    from .trajectory_files import read_trajectories  # lazy: h5py only when files are read

    return read_trajectories([Path(p) for p in paths])


def split_trajectories(
    n_traj: int, val_fraction: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of trajectory indices into training and validation (no test set):
    ``split_train_val_test`` with ``test_fraction = 0``.

    Parameters
    ----------
    n_traj : int
    val_fraction : float in [0, 1)
        Share of trajectories held out; ``round(val_fraction * n_traj)``, at least 1 when the fraction
        is positive, and at least one trajectory is always left for training.
    seed : int
        Seeds a ``numpy.random.Generator`` of its own (the global RNGs are untouched).

    Returns
    -------
    train, val : ndarray of int64, sorted
    """
    train, val, _ = split_train_val_test(n_traj, val_fraction, 0.0, seed)
    return train, val


class WindowDataset(torch.utils.data.Dataset):
    """(input, target) windows over a trajectory tensor, computed on the fly.

    Window ``k`` belongs to trajectory ``traj_indices[k // n_starts]`` and starts at
    ``starts[k % n_starts]`` with ``starts = 0, stride, 2*stride, ... <= n_states - seq_len - pred_window``.

    Parameters
    ----------
    y : Tensor, shape (n_traj, n_states, dim)
        Shared, not copied (several datasets can view one tensor).
    seq_len, pred_window : int
        Input and target window lengths.
    stride : int
        Distance between consecutive starts.
    traj_indices : array of int, shape (n_sel,), optional
        Trajectories this dataset uses (default all).
    shift : callable, optional
        A window's last input states (batch, dim) -> a translation K (batch, dim) taken off the whole window,
        input and target (a periodic normalisation's ``window_shift``: the model sees each window wrapped).
    """

    #: set by __init__ (declared for type checkers)
    seq_len: int
    pred_window: int
    stride: int
    starts: torch.Tensor

    def __init__(
        self,
        y: torch.Tensor,
        seq_len: int,
        pred_window: int,
        stride: int = 1,
        traj_indices: Sequence[int] | np.ndarray | torch.Tensor | None = None,
        shift: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if not isinstance(y, torch.Tensor) or y.ndim != 3:
            shape = tuple(y.shape) if hasattr(y, "shape") else type(y).__name__
            raise VPIntegratorError(f"y must be a tensor (n_traj, n_states, dim); got {shape}")
        for name, value in (("seq_len", seq_len), ("pred_window", pred_window), ("stride", stride)):
            if int(value) != value or int(value) < 1:
                raise VPIntegratorError(f"{name} must be a positive integer; got {value!r}")
        n_traj, n_states, dim = y.shape
        span = int(seq_len) + int(pred_window)
        if span > n_states:
            raise VPIntegratorError(
                f"seq_len + pred_window = {seq_len} + {pred_window} = {span} exceeds the n_states = {n_states} "
                "of the data; use shorter windows or longer trajectories", key="seq_len"
            )
        self.y = y
        self.shift = shift
        self.seq_len = int(seq_len)
        self.pred_window = int(pred_window)
        self.stride = int(stride)
        if traj_indices is None:
            traj = torch.arange(n_traj, device=y.device)
        else:
            traj = torch.as_tensor(np.asarray(traj_indices, dtype=np.int64), device=y.device)
            if traj.numel() and (int(traj.min()) < 0 or int(traj.max()) >= n_traj):
                raise VPIntegratorError(f"traj_indices must lie in [0, {n_traj}); got out-of-range indices")
        self.traj_indices = traj
        self.starts = torch.arange(0, n_states - span + 1, self.stride, device=y.device)
        self._flat = y.reshape(n_traj * n_states, dim)  # (n_traj * n_states, dim), a view
        self._offsets = torch.arange(span, device=y.device)  # (span,)

    @property
    def dim(self) -> int:
        return int(self.y.shape[2])

    @property
    def n_starts(self) -> int:
        return int(self.starts.numel())

    @property
    def n_traj(self) -> int:
        """Number of trajectories in this dataset."""
        return int(self.traj_indices.numel())

    def __len__(self) -> int:
        return self.n_traj * self.n_starts

    def first_rows(self, index: torch.Tensor) -> torch.Tensor:
        """Row of ``y.reshape(-1, dim)`` where each window starts; ``index`` (batch,) -> (batch,)."""
        index = index.to(self.starts.device)
        traj = self.traj_indices[torch.div(index, self.n_starts, rounding_mode="floor")]
        return traj * self.y.shape[1] + self.starts[index % self.n_starts]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of windows by one gather.

        Parameters
        ----------
        index : LongTensor, shape (batch,)
            Window numbers in ``[0, len(self))``.

        Returns
        -------
        x : Tensor, shape (batch, seq_len, dim)
        target : Tensor, shape (batch, pred_window, dim)
        """
        rows = self.first_rows(index)[:, None] + self._offsets  # (batch, span)
        w = self._flat.index_select(0, rows.reshape(-1)).view(rows.shape[0], -1, self.dim)  # (batch, span, dim)
        if self.shift is not None:
            w = w - self.shift(w[:, self.seq_len - 1])[:, None]
        return w[:, : self.seq_len], w[:, self.seq_len :]

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One window: ``x`` (seq_len, dim), ``target`` (pred_window, dim)."""
        k = int(k)
        if not -len(self) <= k < len(self):
            raise IndexError(f"window {k} out of range for {len(self)} windows")
        x, target = self.batch(torch.tensor([k % len(self)]))
        return x[0], target[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Batched fetch used by ``torch.utils.data.DataLoader`` (one gather for the whole list)."""
        x, target = self.batch(torch.as_tensor(list(indices), dtype=torch.long))
        return list(zip(x.unbind(0), target.unbind(0)))

    def windows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every window materialised: ``x`` (len, seq_len, dim), ``target`` (len, pred_window, dim)."""
        return self.batch(torch.arange(len(self), device=self.y.device))

    def __repr__(self) -> str:
        return (
            f"WindowDataset(n_traj={self.n_traj}, n_starts={self.n_starts}, windows={len(self)}, "
            f"seq_len={self.seq_len}, pred_window={self.pred_window}, stride={self.stride}, "
            f"dtype={self.y.dtype}, device={self.y.device})"
        )


class WindowBatchSampler:
    """Batches of window numbers; with ``world_size > 1`` each rank gets its slice of every global batch.

    One epoch is a permutation of ``range(n_windows)`` (or the identity without shuffling) cut into
    global batches of ``batch_size``; the last batch may be smaller. Rank ``r`` receives the ``r``-th
    of ``world_size`` contiguous, near-equal chunks of each global batch, so the union over ranks is
    exactly the single-process batch.

    Parameters
    ----------
    n_windows, batch_size : int
    shuffle : bool
    generator : torch.Generator, optional
        Draws the permutations; its state is the data order (checkpoint it to resume exactly).
    rank, world_size : int
    """

    #: set by __init__ (declared for type checkers)
    n_windows: int
    batch_size: int
    shuffle: bool
    rank: int
    world_size: int

    def __init__(
        self,
        n_windows: int,
        batch_size: int,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if int(batch_size) < 1:
            raise VPIntegratorError(f"batch_size must be a positive integer; got {batch_size!r}")
        if not 0 <= rank < world_size:
            raise VPIntegratorError(f"rank must lie in [0, world_size={world_size}); got {rank}")
        self.n_windows = int(n_windows)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.generator = generator
        self.rank = int(rank)
        self.world_size = int(world_size)

    def __len__(self) -> int:
        return -(-self.n_windows // self.batch_size)

    def epoch_order(self) -> torch.Tensor:
        """The window order of one epoch, shape (n_windows,); draws from ``generator`` when shuffling."""
        if self.shuffle:
            return torch.randperm(self.n_windows, generator=self.generator)
        return torch.arange(self.n_windows)

    def shard(self, order: torch.Tensor, b: int) -> torch.Tensor:
        """This rank's part of global batch ``b`` of ``order``, shape (<= ceil(batch_size / world_size),)."""
        batch = order[b * self.batch_size : (b + 1) * self.batch_size]
        if self.world_size == 1:
            return batch
        return torch.tensor_split(batch, self.world_size)[self.rank]

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = self.epoch_order()
        for b in range(len(self)):
            yield self.shard(order, b)


def make_window_datasets(
    source: Source | Sequence[str | os.PathLike[str]],
    seq_len: int,
    pred_window: int,
    stride: int = 1,
    val_fraction: float = 0.1,
    seed: int = 0,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    test_fraction: float = 0.0,
) -> tuple[WindowDataset, WindowDataset | None, Trajectories]:
    """Training and validation windows over the given trajectories, split by trajectory.

    Parameters
    ----------
    source : HDF5 path(s), Trajectories or array (n_traj, n_states, dim); see ``load_trajectories``
    seq_len, pred_window, stride : int
    val_fraction : float in [0, 1)
        Share of trajectories for validation (0: no validation set, ``None`` is returned for it).
    test_fraction : float in [0, 1)
        Share of trajectories held out for testing (in no returned window set; default 0 here, while
        ``vp-train``'s ``test_fraction`` defaults to 0.1); ``split_train_val_test``.
    seed : int
        Seeds the split.
    dtype : "float32" or "float64"
    device : torch device of the window tensor (batches are then gathered there).

    Returns
    -------
    train : WindowDataset
    val : WindowDataset or None
        Both view one tensor ``states_tensor(data, dtype, device)`` (``train.y``).
    data : Trajectories
    """
    data = load_trajectories(source)
    y = states_tensor(data, dtype, device)
    # Check the window length before splitting, so the error names the real cause.
    WindowDataset(y[:1], seq_len, pred_window, stride)
    train_idx, val_idx, _ = split_train_val_test(data.n_traj, val_fraction, test_fraction, seed)
    train = WindowDataset(y, seq_len, pred_window, stride, train_idx)
    val = WindowDataset(y, seq_len, pred_window, stride, val_idx) if len(val_idx) else None
    return train, val, data
