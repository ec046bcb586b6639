"""The one trajectory split rule: vp-train's default split, and the seeded split of trajectory indices into
training, validation and test that every row learning from data uses (a model, SINDy, parrot). NumPy only, so
that a config (``TrainConfig``'s defaults) reads it without importing torch (``vp-train --help``)."""

from __future__ import annotations

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["DEFAULT_SPLIT", "default_split", "split_train_val_test"]


#: vp-train's default trajectory split: (val_fraction, test_fraction, split_seed), ``TrainConfig``'s defaults; the
#: one rule of every row that learns from data without a model's recorded split (``default_split``)
DEFAULT_SPLIT: tuple[float, float, int] = (0.1, 0.1, 0)


def default_split(n_traj: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, val, test)`` of ``n_traj`` trajectories by vp-train's default split (``DEFAULT_SPLIT``:
    ``split_train_val_test`` with ``TrainConfig``'s default ``val_fraction``, ``test_fraction`` and
    ``split_seed``): the trajectories a model trained on the file with the default settings trains on,
    validates and holds out, so that a data-fitted row (SINDy, parrot) fits on the same ones."""
    val_fraction, test_fraction, split_seed = DEFAULT_SPLIT
    return split_train_val_test(n_traj, val_fraction, test_fraction, split_seed)


def split_train_val_test(
    n_traj: int, val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded split of trajectory indices into training, validation and test (disjoint, covering
    ``0 .. n_traj - 1``).

    One permutation ``numpy.random.default_rng(seed).permutation(n_traj)``: its first ``n_val`` entries
    are the validation trajectories, the next ``n_test`` the test trajectories, the rest training. So
    ``test_fraction = 0`` gives exactly the split of ``split_trajectories`` (and of runs made before
    the test split existed).

    Parameters
    ----------
    n_traj : int
    val_fraction, test_fraction : float in [0, 1), summing to less than 1
        ``n_val = round(val_fraction * n_traj)`` and ``n_test = round(test_fraction * n_traj)``, each at
        least 1 when its fraction is positive; at least one trajectory must be left for training.
    seed : int
        Seeds a ``numpy.random.Generator`` of its own (the global RNGs are untouched).

    Returns
    -------
    train, val, test : ndarray of int64, sorted
    """
    if not 0.0 <= float(val_fraction) < 1.0:
        raise VPIntegratorError(f"val_fraction must be in [0, 1); got {val_fraction}", key="val_fraction")
    if not 0.0 <= float(test_fraction) < 1.0:
        raise VPIntegratorError(f"test_fraction must be in [0, 1); got {test_fraction}", key="test_fraction")
    n_val = int(round(float(val_fraction) * n_traj))
    if val_fraction > 0:
        n_val = max(n_val, 1)
    n_test = int(round(float(test_fraction) * n_traj))
    if test_fraction > 0:
        n_test = max(n_test, 1)
    if n_val >= n_traj:
        raise VPIntegratorError(
            f"val_fraction={val_fraction} leaves no training trajectory out of n_traj={n_traj}; "
            "lower val_fraction or use more trajectories", key="val_fraction"
        )
    if n_val + n_test >= n_traj:
        raise VPIntegratorError(
            f"val_fraction={val_fraction} and test_fraction={test_fraction} hold out {n_val} + {n_test} of "
            f"n_traj={n_traj} trajectories and leave none for training; lower test_fraction (0 for no test "
            "set) or use more trajectories", key="test_fraction"
        )
    perm = np.random.default_rng(seed).permutation(n_traj)
    val, test, train = perm[:n_val], perm[n_val : n_val + n_test], perm[n_val + n_test :]
    return tuple(np.sort(a).astype(np.int64) for a in (train, val, test))  # type: ignore[return-value]
