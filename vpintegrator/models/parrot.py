"""Context parroting (Zhang & Gilpin, ICLR 2025, "Context parroting: a simple but tough-to-beat baseline for
foundation models in scientific machine learning") as a rollout row ``parrot``.

Parroting predicts by copying: find, in the context, the stretch that best matches the most recent states and
repeat what followed it. Here the context is the data file's **training trajectories** (the same split the
models learn from), and the states to match are the test trajectory's first ``k = context_len`` states (the
window a context model reads).

**Rule.** Every window of k consecutive states of a training trajectory that is followed by at least one
state is a candidate; the candidate nearest to the current window (Euclidean distance over the k·dim numbers,
``scipy.spatial.cKDTree``; any one of them on an exact tie) is the match, and the states
that follow it in its training trajectory are the prediction, **verbatim** (the paper's definition: the
continuation is copied, not added as increments to the current state). When the match's trajectory ends
(beyond the training horizon), the last k predicted states are matched again in the same way and copying
goes on from the new match; so the parrot produces states to any horizon. A test trajectory whose first
window is a training window (the same initial condition, the same step) is reproduced exactly up to that
training trajectory's end.

The map is piecewise constant in its input: its Jacobian is 0 where defined, so its ``log|det J|`` is −inf
(the volume columns of a rollout say ``inf``: it keeps no volume).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError
from .fitted import FittedModel, RowData

__all__ = ["MAX_PARROT_STATES", "ParrotStep"]

#: at most this many training states enter the parrot's context (the first trajectories of the split; its
#: windows hold context_len times as many states)
MAX_PARROT_STATES = 1_000_000


class ParrotStep(FittedModel):
    """``parrot``: continue the nearest training window, verbatim (module docstring).

    Parameters
    ----------
    train : ndarray, shape (n_train, T, dim), or a callable returning it
        The context: training trajectories at the rollout's step (a callable: read when the row starts).
    context_len : int
        k, the states matched (the rollout's first window holds them).
    dim : int, optional
        Needed with a callable ``train``.
    """

    row = "parrot"
    summary = "context parroting: the nearest training window of context_len states, its continuation copied"
    validates = False
    max_fit_states = MAX_PARROT_STATES

    @classmethod
    def for_row(cls, data: RowData) -> "ParrotStep":
        return cls(data.train, context_len=data.context_len, dim=data.dim, source=data.source)

    def fit_now(self) -> None:
        """Read the context and index its windows (once)."""
        if self._tree is None:
            self._context()

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert self._y is not None
        return {"context_len": self.seq_len, "dim": self.dim, "source": self.source}, {"context": self._y}

    @classmethod
    def _restore(cls, settings: dict[str, Any], arrays: dict[str, np.ndarray]) -> "ParrotStep":
        return cls(arrays["context"], int(settings["context_len"]), int(settings["dim"]), str(settings["source"]))

    def __init__(self, train: np.ndarray | Callable[[], np.ndarray], context_len: int = 3, dim: int | None = None,
                 source: str = "") -> None:
        if isinstance(context_len, bool) or not isinstance(context_len, (int, np.integer)) or context_len < 1:
            raise VPIntegratorError(f"parrot: context_len must be an int >= 1; got {context_len!r}", key="context_len")
        if dim is None:
            if callable(train):
                raise VPIntegratorError("ParrotStep: give dim with a callable train")
            dim = int(np.asarray(train).shape[-1])
        self._train = train
        self.dim: int = int(dim)
        self.seq_len: int = int(context_len)
        self.pred_window: int = 1
        self.name: str = "parrot"
        self.source = source
        self._tree: Any = None
        self._y: np.ndarray | None = None

    def _context(self) -> None:
        from scipy.spatial import cKDTree

        y = self._train() if callable(self._train) else self._train
        y = np.asarray(y, dtype=np.float64)
        k = self.seq_len
        if y.ndim != 3 or y.shape[2] != self.dim or y.shape[0] == 0 or y.shape[1] < k + 1:
            raise VPIntegratorError(f"parrot: training trajectories must be (n >= 1, T >= context_len + 1 = {k + 1}, "
                                    f"{self.dim}); got {y.shape}", key="context_len")
        if not np.isfinite(y).all():
            raise VPIntegratorError("parrot: the training trajectories hold NaN/Inf", key="data")
        y = y[: max(1, MAX_PARROT_STATES // y.shape[1])]
        n, T, dim = y.shape
        starts = T - k  # windows y[i, s : s + k], s = 0 .. T - k - 1: each followed by >= 1 state
        win = np.lib.stride_tricks.sliding_window_view(y, k, axis=1)[:, :starts]  # (n, starts, dim, k)
        flat = np.ascontiguousarray(np.swapaxes(win, 2, 3)).reshape(n * starts, k * dim)  # state-major: (z_s, .., z_s+k-1)
        self._y, self._starts, self._tree = y, starts, cKDTree(flat)

    def _match(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(trajectory, next index to copy) of the nearest training window to each of ``windows`` (m, k, dim)."""
        _, j = self._tree.query(windows.reshape(windows.shape[0], -1), k=1)
        j = np.asarray(j, dtype=np.int64)
        return j // self._starts, j % self._starts + self.seq_len

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self.fit_now()
        self._window0 = np.array(window0, dtype=np.float64)
        self._win = self._window0.copy()  # (n, k, dim): the latest k states of each row
        self._traj, self._pos = self._match(self._win)
        self._first = (self._traj.copy(), self._pos.copy())

    def generate(self, n: int) -> np.ndarray:
        assert self._y is not None
        y, T = self._y, self._y.shape[1]
        out = np.empty((self._win.shape[0], n, self.dim))
        for j in range(n):
            out[:, j] = y[self._traj, self._pos]
            self._win = np.concatenate([self._win[:, 1:], out[:, j : j + 1]], axis=1)
            self._pos += 1
            ended = np.flatnonzero(self._pos >= T)
            if ended.size:  # beyond the matched trajectory's end: match the latest window again
                self._traj[ended], self._pos[ended] = self._match(self._win[ended])
        return out

    def reset(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self._win[rows] = self._window0[rows]
        self._traj[rows], self._pos[rows] = self._first[0][rows], self._first[1][rows]

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """−inf: the copied states do not depend on the window (locally), det J = 0."""
        return np.full(np.asarray(windows).shape[0], -np.inf)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {**super().describe(), "context_len": self.seq_len, "runner": "numpy",
                                "parrot_rule": "nearest training window of context_len states (Euclidean), its "
                                               "continuation copied verbatim; re-matched on the latest window where "
                                               "the matched trajectory ends"}
        if self.source:
            info["fit_source"] = self.source
        if self._y is not None:
            info["parrot_context_traj"] = int(self._y.shape[0])
            info["parrot_context_windows"] = int(self._y.shape[0] * self._starts)
        return info
