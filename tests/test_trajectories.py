"""The trajectory container, the atomic writer and the lazy package root."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import vpintegrator
from vpintegrator import Trajectories, VPIntegratorError
from vpintegrator._io import atomic_path


def _traj(n_traj=4, n_steps=5, dim=3):
    return Trajectories(np.arange(n_traj * n_steps * dim, dtype=float).reshape(n_traj, n_steps, dim),
                        np.linspace(0.0, 0.8, n_steps), {"dt": 0.2})


def test_shape_properties():
    tr = _traj()
    assert (tr.n_traj, tr.n_states, tr.n_steps, tr.dim, tr.dt) == (4, 5, 4, 3, 0.2)


@pytest.mark.parametrize(
    "traj, steps, shape",
    [(1, None, (1, 5, 3)), (None, 3, (4, 1, 3)), (1, 2, (1, 1, 3)), ([0, 2], slice(1, 3), (2, 2, 3))],
)
def test_select_keeps_three_axes(traj, steps, shape):
    tr = _traj()
    sub = tr.select(traj=traj, steps=steps)
    assert sub.y.shape == shape
    assert sub.t.shape == (shape[1],)
    np.testing.assert_array_equal(sub.y, tr.y[np.atleast_1d(np.arange(4)[traj if traj is not None else slice(None)])][:, np.atleast_1d(np.arange(5)[steps if steps is not None else slice(None)])])


@pytest.mark.parametrize("y, t", [(np.zeros((5, 3)), np.zeros(5)), (np.zeros((2, 5, 3)), np.zeros(4))])
def test_bad_shapes_raise(y, t):
    with pytest.raises(VPIntegratorError, match="shape"):
        Trajectories(y, t)


def test_atomic_path_keeps_earlier_file_on_error(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new, half written")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_path_replaces_on_success_with_normal_mode(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_root_exports_resolve():
    for name in vpintegrator.__all__:
        assert getattr(vpintegrator, name) is not None, name


def test_importing_the_root_does_not_import_torch():
    code = "import vpintegrator, sys; vpintegrator.generate; vpintegrator.integrate; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
