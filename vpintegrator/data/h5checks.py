"""The checks at the boundary of the HDF5 files the package writes and reads: an output path that cannot be
written (a one-line error before work starts), time grids and states that are not finite (a one-line error
naming the file, the dataset and the first bad index, when bad data would enter).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["CHECK_BYTES", "check_finite_t", "check_finite_y", "check_output_path", "time_grid_problem"]

#: states checked for non-finite values at a time, in bytes (bounds the temporary boolean array)
CHECK_BYTES = 8 * 2**20


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_path(path: str | os.PathLike[str], key: str | None = "out") -> Path:
    """Refuse an output file path that cannot be written, before any work starts.

    A one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] (carrying ``key``) when ``path`` is a directory, when a
    folder on the way is a file, or when the folder it would go into is not writable. Creates nothing.
    Returns the nearest existing folder (where the file, or the folders leading to it, will be created).
    """
    label = f"{key} {path}" if key else str(path)
    p = Path(path)
    if not os.fspath(path):
        raise VPIntegratorError(f"{label}: empty output path; give a file path such as data.h5", key=key)
    if p.is_dir():
        raise VPIntegratorError(
            f"{label} is a directory; give a file path, e.g. {p / 'data.h5'}", key=key
        )
    folder = _nearest_existing(p.parent)
    if not folder.is_dir():
        raise VPIntegratorError(
            f"{label}: {folder} is a file, not a directory; give a path in an existing or new folder", key=key
        )
    reason = "permission denied" if not os.access(folder, os.W_OK | os.X_OK) else _probe_write(folder)
    if reason:
        raise VPIntegratorError(
            f"{label}: cannot write in folder {folder} ({reason}); give a path in a folder you can write", key=key
        )
    return folder


def _probe_write(folder: Path) -> str:
    """"" if a file can be created in ``folder`` (an unnamed temporary file, gone when closed), else why."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return ""


def time_grid_problem(t: np.ndarray, offset: int = 0) -> str:
    """Why ``t`` is not a finite, strictly increasing time grid ("" when it is)."""
    finite = np.isfinite(t)
    if not finite.all():
        i = int(np.argmin(finite))
        return f"holds {_nonfinite_name(t[i])} at [{i + offset}]"
    if t.size > 1:
        steps = np.diff(t)
        if not (steps > 0).all():
            i = int(np.argmin(steps > 0)) + 1
            return f"is not strictly increasing at index {i + offset} ({float(t[i - 1])!r} then {float(t[i])!r})"
    return ""


def _nonfinite_name(value: float) -> str:
    return "NaN" if np.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def check_finite_t(path: Path, t: np.ndarray) -> None:
    bad = time_grid_problem(t)
    if bad:
        raise VPIntegratorError(
            f"{path}: dataset '/t' {bad}; the sample times must be finite and strictly increasing; "
            "regenerate the file"
        )


def check_finite_y(path: Path, y: np.ndarray, traj_idx: Any, steps_idx: Any, n_traj: int, n_states: int) -> None:
    """Refuse non-finite values in the states read from ``path``, block by block of trajectories;
    the message gives the first bad index in the file's own coordinates."""
    if y.size == 0:
        return
    per_traj = max(1, y[0].size)
    block = max(1, CHECK_BYTES // per_traj)
    for start in range(0, y.shape[0], block):
        part = y[start : start + block]
        if np.isfinite(part).all():
            continue
        i, k, d = (int(v) for v in np.unravel_index(int(np.argmin(np.isfinite(part))), part.shape))
        i += start
        file_i = int(np.atleast_1d(np.arange(n_traj)[traj_idx])[i])
        file_k = int(np.atleast_1d(np.arange(n_states)[steps_idx])[k]) if steps_idx is not None else k
        raise VPIntegratorError(
            f"{path}: dataset '/y' holds {_nonfinite_name(y[i, k, d])} at [{file_i}, {file_k}, {d}] "
            f"(trajectory {file_i}, state {file_k}); regenerate it, or pass allow_nonfinite=True to inspect it"
        )
