"""Why the window-to-window VP models fail on observed q (issue 55): the windows the training loader hands a
model on observed data are the file's states cut and observed by hand (no misalignment), the VPT is
equivariant under permutations of the window's states (it cannot tell which state is the latest; the window MLPs
and ``delay_vpff`` can), and the premise of the error floor that equivariance implies on a reversible system:
the reversed observed window is the observed window of the trajectory through (q, -p), whose next window is the
previous one reversed (``scripts/vpt_observed_probe.py`` measures the floor on data)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from vpintegrator.data import solve_flow
from vpintegrator.models.delay import DelayMLP, DelayVolumeNet
from vpintegrator.models.volume import VolumePreservingTransformer
from vpintegrator.training.plan import build_plan, prepare

from test_observation import H, co_file  # noqa: F401  (24 coupled-oscillator trajectories at h = 0.2: a fixture)


@pytest.mark.parametrize("name, T, pred", [("vpt", 2, 2), ("vpt", 4, 4), ("delay_mlp", 3, 1), ("delay_vpff", 1, 1)])
def test_the_loader_hands_observed_windows_cut_by_hand_from_the_file(co_file, name, T, pred):
    plan = build_plan({"data": [str(co_file)], "model": {"name": name, "seq_len": T}, "observe": "q",
                       "val_fraction": 0.25, "test_fraction": 0.0, "dtype": "float64", "epochs": 1})
    prep = prepare(plan, torch.device("cpu"))
    with h5py.File(co_file, "r") as f:
        q = np.asarray(f["y"], dtype=np.float64)[:, :, :2]  # (q1, q2): the observation, by hand
    for dataset in (prep.train_set, prep.val_set):
        x, target = (t.numpy() for t in dataset.windows())
        xs, ts = [], []
        for i in dataset.traj_indices.tolist():
            for s in range(q.shape[1] - T - pred + 1):
                xs.append(q[i, s:s + T])
                ts.append(q[i, s + T:s + T + pred])
        assert x.shape == (len(xs), T, 2) and target.shape == (len(ts), pred, 2)
        np.testing.assert_array_equal(x, np.stack(xs))
        np.testing.assert_array_equal(target, np.stack(ts))


def _randomised(model: torch.nn.Module) -> torch.nn.Module:
    g = torch.Generator().manual_seed(1)
    model = model.double()
    for p in model.parameters():
        p.data.normal_(0.0, 0.5, generator=g)
    return model


@pytest.mark.parametrize("T", [2, 4])
def test_the_vpt_cannot_tell_the_order_of_its_window_but_the_window_maps_can(T):
    x = torch.randn(5, T, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    perm = torch.roll(torch.arange(T), 1)
    vpt = _randomised(VolumePreservingTransformer(2, T, n_blocks=2, L=3))
    with torch.no_grad():
        y = vpt(x)
        assert float(y.abs().max()) > 1e-2  # not a trivial map
        torch.testing.assert_close(vpt(x[:, perm]), y[:, perm], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(vpt(x.flip(1)), y.flip(1), rtol=1e-10, atol=1e-10)
        for other in (DelayVolumeNet(2, T, n_blocks=2), DelayMLP(2, T)):
            m = _randomised(other)
            out = m(x)
            moved = m(x[:, perm])
            want = out[:, perm] if out.shape[1] == T else out
            assert float((moved - want).abs().max()) > 1e-2 * float(out.abs().max())


def test_a_reversed_observed_window_is_the_window_of_the_trajectory_through_flipped_momenta(co_file):
    """The premise of the equivariance floor: the coupled oscillator is reversible (H(q, -p) = H(q, p)), so the
    observed states q_s, q_{s-1}, ..., q_0 are the flow of (q_s, -p_s); the next window of the reversed window is
    the previous window, reversed."""
    with h5py.File(co_file, "r") as f:
        y = np.asarray(f["y"], dtype=np.float64)
    s = 10
    z = y[:, s].copy()
    z[:, 2:] *= -1.0
    back = solve_flow("coupled_oscillator", z, H * np.arange(s + 1))  # (n, s + 1, 4)
    np.testing.assert_allclose(back[:, :, :2], y[:, s::-1, :2], atol=1e-4)  # the file: Gauss-Legendre 4
    forward = solve_flow("coupled_oscillator", y[:, s], H * np.arange(s + 1))
    assert np.abs(forward[:, :, :2] - back[:, :, :2]).max() > 0.1  # a different window: the order matters
