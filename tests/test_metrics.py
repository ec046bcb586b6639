"""Metrics on arrays, and their streaming (chunked) versions against the whole-array ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.integrators import get_integrator
from vpintegrator.metrics import (
    TrajectoryMetricsStream,
    VolumeStream,
    drift_slope,
    format_markdown,
    invariant_drift,
    log_abs_det,
    read_table,
    relative_drift,
    relative_error,
    step_log_det_jacobian,
    summary_row,
    valid_prediction_time,
    write_table,
)
from vpintegrator.systems import get_system

RB = get_system("rigid_body")
Y0 = np.array([[np.sin(1.1), 0.0, np.cos(1.1)], [0.0, np.sin(1.1), np.cos(1.1)]])


def test_relative_error():
    ref = np.ones((2, 4, 3))
    y = ref.copy()
    y[1, 2] += [0.0, 0.0, np.sqrt(3.0)]
    e = relative_error(y, ref)
    assert e.shape == (2, 4)
    np.testing.assert_allclose(e[1], [0, 0, 1, 0])
    assert (e[0] == 0).all()
    with pytest.raises(VPIntegratorError, match="shape"):
        relative_error(y[:, :3], ref)


def test_valid_prediction_time():
    t = np.arange(5.0)
    err = np.array([[0, 0.05, 0.2, 0.01, 0.3], [0, 0.01, 0.02, 0.03, 0.04], [0, 0.01, np.nan, 0, 0]])
    assert valid_prediction_time(err, t).tolist() == [2.0, 4.0, 2.0]


def test_relative_drift_and_slope(tol):
    t = np.linspace(0, 10, 101)
    values = np.stack([2.0 + 0.5 * t, -4.0 + 0.0 * t, 0.0 + t])  # I0 = 2, -4, 0
    d = relative_drift(values)
    np.testing.assert_allclose(d[0], 0.25 * t)
    assert (d[1] == 0).all()
    np.testing.assert_allclose(d[2], t)  # I0 = 0: absolute drift
    np.testing.assert_allclose(drift_slope(d, t), [0.25, 0.0, 1.0], atol=tol())
    d[0, 10:20] = np.nan  # a gap does not change the fit of a line
    np.testing.assert_allclose(drift_slope(d, t)[0], 0.25, atol=tol())


def test_invariant_drift_of_implicit_midpoint_is_rounding():
    y = integrate(RB, Y0, 0.2, 200, method="implicit_midpoint").y
    drift = invariant_drift(RB, y)
    assert set(drift) == {"energy", "casimir"}
    assert max(np.abs(v).max() for v in drift.values()) < 1e-13


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_streaming_metrics_equal_whole_array(chunk):
    t = 0.2 * np.arange(301)
    ref = integrate(RB, Y0, 0.2, 300, method="gauss_legendre4").y
    y = integrate(RB, Y0, 0.2, 300, method="rk4").y
    y[1, 250:] = np.nan  # a failed trajectory
    stream = TrajectoryMetricsStream(RB, 2, t_center=30.0)
    errs = []
    for k0 in range(0, 301, chunk):
        out = stream.update(t[k0 : k0 + chunk], y[:, k0 : k0 + chunk], ref[:, k0 : k0 + chunk])
        errs.append(out["rel_error"])
    s = stream.summary()
    err = relative_error(y, ref)
    np.testing.assert_array_equal(np.concatenate(errs, axis=1), err)
    np.testing.assert_array_equal(s["valid_time"], valid_prediction_time(err, t))
    np.testing.assert_array_equal(s["final_rel_error"], err[:, -1])
    for name, d in invariant_drift(RB, y).items():
        assert s[f"max_rel_drift_{name}"][0] == np.abs(d[0]).max()
        assert np.isnan(s[f"max_rel_drift_{name}"][1])  # failed: NaN, counted as inf in the table
        np.testing.assert_allclose(s[f"drift_slope_{name}"], drift_slope(d, t), rtol=1e-8, atol=1e-20)


@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_volume_stream_equals_step_log_det(chunk, tol):
    rk4 = get_integrator("rk4")
    y = integrate(RB, Y0, 0.2, 50, method="rk4").y
    vol = VolumeStream(lambda w: log_abs_det(rk4.step_jacobian(RB, w[:, -1], 0.2)), 2, 1, 1, 50)
    parts = [vol.update(y[:, k0 : k0 + chunk]) for k0 in range(0, 51, chunk)]
    logdet = np.concatenate([p[1] for p in parts], axis=1)
    cum = np.concatenate([p[2] for p in parts], axis=1)
    want = step_log_det_jacobian(RB, rk4, y, 0.2)
    np.testing.assert_allclose(logdet, want, rtol=0, atol=tol())
    np.testing.assert_allclose(cum, np.cumsum(want, axis=1), rtol=0, atol=tol())
    assert vol.map_step.tolist() == list(range(1, 51))
    np.testing.assert_allclose(vol.max_abs_cum, np.abs(np.cumsum(want, axis=1)).max(axis=1), atol=tol())


@pytest.mark.parametrize("seq_len, advance, n_steps, expected", [(3, 3, 10, [5, 8, 10]), (3, 1, 5, [3, 4, 5]), (2, 3, 9, [4, 7, 9])])
def test_volume_stream_window_bookkeeping(seq_len, advance, n_steps, expected):
    seen = []

    def fn(w):  # record the first state index of each window (states hold their step index)
        seen.extend(w[:, 0, 0].tolist())
        return np.zeros(len(w))

    vol = VolumeStream(fn, 1, seq_len, advance, n_steps)
    y = np.arange(n_steps + 1, dtype=float)[None, :, None] * np.ones(3)
    for k0 in range(0, n_steps + 1, 2):
        vol.update(y[:, k0 : k0 + 2])
    assert vol.map_step.tolist() == expected
    assert seen == [float(advance * j) for j in range(len(expected))]


def test_summary_row_and_tables(tmp_path):
    per = {
        "final_rel_error": np.array([0.1, 0.3]),
        "valid_time": np.array([10.0, 20.0]),
        "max_rel_drift_energy": np.array([1e-3, 2e-3]),
        "drift_slope_energy": np.array([1e-5, -3e-5]),
    }
    row = summary_row("m", per, ["energy"], max_abs_cum_log_det_J=np.array([1e-3, 5e-3]), seconds_per_step=1e-4,
                      failed_step=np.array([-1, -1]))
    assert row == pytest.approx({
        "method": "m", "final_rel_error": 0.2, "valid_time": 15.0, "max_rel_drift_energy": 2e-3,
        "drift_slope_energy": -3e-5, "max_abs_cum_log_det_J": 5e-3, "seconds_per_step": 1e-4, "n_traj": 2, "failed": 0,
    })
    per["final_rel_error"][1] = np.nan
    failed = summary_row("m", per, ["energy"], max_abs_cum_log_det_J=None, seconds_per_step=1.0, failed_step=np.array([-1, 3]))
    assert failed["final_rel_error"] == np.inf and failed["failed"] == 1 and np.isnan(failed["max_abs_cum_log_det_J"])
    csv_path, md_path = write_table([row, failed], tmp_path / "metrics")
    back = read_table(csv_path)
    assert back[0] == pytest.approx(row) and back[1]["final_rel_error"] == np.inf
    md = md_path.read_text()
    assert md.splitlines()[0].startswith("| method | final_rel_error") and md == format_markdown([row, failed])


def test_relative_drift_of_a_window_model_is_taken_against_each_states_own_first_window_value():
    # a window model with T = 3 keeps each state's Casimir exactly; its first window has a reference error
    first = np.array([[1.0, 1.0 + 3e-12, 1.0 - 2e-12]])
    values = np.tile(first, (1, 4))  # (1, 12): states k and k mod 3 share the value
    assert np.max(np.abs(relative_drift(values))) == pytest.approx(3e-12, rel=1e-3)  # the reference's error
    assert np.max(np.abs(relative_drift(values, period=3))) == 0.0  # the model's own drift
    moved = values.copy()
    moved[0, 7] *= 1 + 1e-9  # state 7 descends from state 1
    d = relative_drift(moved, period=3)
    assert d[0, 7] == pytest.approx(1e-9, rel=1e-6) and np.count_nonzero(d) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_relative_drift_refuses_a_bad_period(bad):
    with pytest.raises(VPIntegratorError, match="period"):
        relative_drift(np.ones((1, 4)), period=bad)


# --------------------------------------------------------------------------- the one formula of each measure


def test_the_relative_measures_are_one_formula_on_numpy_and_torch():
    """vpintegrator.arrays holds each relative measure once; the metrics, the training loss, the data's and
    work-precision's drift are that formula, on NumPy arrays and torch tensors alike."""
    import torch

    from vpintegrator import arrays
    from vpintegrator.training import relative_loss

    rng = np.random.default_rng(3)
    pred, target = rng.standard_normal((2, 4, 5, 3)), rng.standard_normal((2, 4, 5, 3))
    # relative error per state: sqrt(Σd²) / sqrt(Σt²), as np.linalg.norm computes it
    want = np.linalg.norm(pred - target, axis=-1) / np.linalg.norm(target, axis=-1)
    np.testing.assert_array_equal(arrays.relative_error(pred, target), want)
    np.testing.assert_array_equal(relative_error(pred[0], target[0]), want[0])
    got = arrays.relative_error(torch.as_tensor(pred), torch.as_tensor(target))
    np.testing.assert_allclose(got.numpy(), want, rtol=4e-16)
    # the training loss: sqrt(Σ(p − t)² / Σt²) over the batch, or per member (start = 1)
    p, t = torch.as_tensor(pred), torch.as_tensor(target)
    assert relative_loss is arrays.relative_loss
    assert float(relative_loss(p, t)) == pytest.approx(
        math.sqrt(((pred - target) ** 2).sum() / (target**2).sum()), rel=1e-15)
    per_member = arrays.relative_loss(p, t, start=1)
    assert per_member.shape == (2,)
    for k in range(2):
        assert float(per_member[k]) == pytest.approx(float(relative_loss(p[k], t[k])), rel=1e-15)
    assert arrays.squared_norm(pred, start=-1).shape == (2, 4, 5)
    np.testing.assert_allclose(arrays.squared_norm(pred, start=2), (pred**2).sum(axis=(2, 3)), rtol=1e-15)


def test_relative_drift_zero_rule_and_floor():
    from vpintegrator import arrays

    values = np.array([[2.0, 3.0, 1.0], [0.0, 0.5, -0.25]])
    i0 = values[:, :1]
    # I₀ = 0: the absolute drift (default), or the floor's scale, or no guard (floor 0: inf)
    np.testing.assert_array_equal(arrays.relative_drift(values, i0), [[0.0, 0.5, -0.5], [0.0, 0.5, -0.25]])
    np.testing.assert_array_equal(arrays.relative_drift(values, i0, floor=0.25)[1], [0.0, 2.0, -1.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(arrays.relative_drift(values, i0, floor=0.0)[1], [np.nan, np.inf, -np.inf])
    # metrics.relative_drift is the same formula (float64, I₀ the first state by default)
    np.testing.assert_array_equal(relative_drift(values), arrays.relative_drift(values, i0))
