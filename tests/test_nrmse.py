"""NRMSE, the valid-prediction horizon and the identity map's NRMSE of the metrics stream against a slow
hand-written reference; the spread and the offset flag of the relative error (issue 85 item 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vpintegrator.metrics import TrajectoryMetricsStream, nrmse, offset_note, spread, summary_row
from vpintegrator.systems import get_system

T = np.arange(6) * 0.5
SCALE = np.array([2.0, 0.5, 1.0])
CONTEXT = 2


def _arrays():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(2, 6, 3)) + 5.0
    err = np.zeros_like(ref)
    err[0, 2:] = np.array([0.1, 0.2, 0.0])[None] * np.arange(1, 5)[:, None]  # 0.23 j at step 1 + j: > 0.4 at t = 1.5
    err[1, 2:] = [0.9, 0.0, 0.0]  # 0.9 / 2 / sqrt(3) = 0.26 < 0.4 throughout
    err[1, 4] = [0.0, 0.5, 0.0]  # 0.5 / 0.5 / sqrt(3) = 0.58 at t = 2.0
    return ref + err, ref


def _slow_reference(y, ref):
    """Per trajectory: the time-mean NRMSE over the predicted steps, the identity's, and the VPT (threshold 0.4)."""
    out = {"nrmse": [], "identity_nrmse": [], "vpt": []}
    for i in range(y.shape[0]):
        per_step = [math.sqrt(sum(((y[i, k, c] - ref[i, k, c]) / SCALE[c]) ** 2 for c in range(3)) / 3)
                    for k in range(y.shape[1])]
        held = [math.sqrt(sum(((ref[i, CONTEXT - 1, c] - ref[i, k, c]) / SCALE[c]) ** 2 for c in range(3)) / 3)
                for k in range(y.shape[1])]
        out["nrmse"].append(sum(per_step[CONTEXT:]) / (len(per_step) - CONTEXT))
        out["identity_nrmse"].append(sum(held[CONTEXT:]) / (len(held) - CONTEXT))
        out["vpt"].append(next((T[k] for k, e in enumerate(per_step) if e > 0.4), T[-1]))
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("cut", [1, 2, 4])  # chunk boundaries before, at and after the context's last state
@pytest.mark.parametrize("torch_arrays", [False, True])  # the host engine (NumPy) and the device engine (tensors)
def test_stream_nrmse_vpt_and_identity_against_slow_reference(cut, torch_arrays):
    y, ref = _arrays()
    stream = TrajectoryMetricsStream(get_system("rigid_body"), 2, scale=SCALE, context=CONTEXT)
    conv = (lambda a: torch.as_tensor(a)) if torch_arrays else (lambda a: a)
    for a, b in ((0, cut), (cut, 6)):
        stream.update(T[a:b], conv(y[:, a:b]), conv(ref[:, a:b]))
    got, want = stream.summary(), _slow_reference(y, ref)
    for key in ("nrmse", "identity_nrmse", "vpt"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, err_msg=key)
    assert list(want["vpt"]) == [1.5, 2.0]  # the hand-made errors cross 0.4 where intended


def test_summary_row_columns():
    y, ref = _arrays()
    stream = TrajectoryMetricsStream(get_system("rigid_body"), 2, scale=SCALE, context=CONTEXT)
    stream.update(T, y, ref)
    per, want = stream.summary(), _slow_reference(y, ref)
    row = summary_row("m", per, (), max_abs_cum_log_det_J=None, seconds_per_step=0.0, failed_step=np.full(2, -1))
    assert row["mean_nrmse"] == pytest.approx(want["nrmse"].mean(), rel=1e-12)
    assert row["vpt"] == pytest.approx(want["vpt"].mean())
    assert row["vs_identity"] == pytest.approx(want["nrmse"].mean() / want["identity_nrmse"].mean(), rel=1e-12)
    per["nrmse"][1] = np.nan  # a failed trajectory: inf, never a mean that hides it
    row = summary_row("m", per, (), max_abs_cum_log_det_J=None, seconds_per_step=0.0, failed_step=np.full(2, -1))
    assert row["mean_nrmse"] == math.inf and row["vs_identity"] == math.inf


def test_nrmse_formula():
    y, ref = np.zeros((1, 1, 2)), np.array([[[2.0, 1.0]]])
    assert nrmse(y, ref, np.array([2.0, 0.5]))[0, 0] == pytest.approx(math.sqrt((1.0 + 4.0) / 2))


def test_spread_keeps_its_digits_under_an_offset():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(5, 40, 3)) * [1.0, 2.0, 0.0] + 1e8  # the third component never moves
    mean, std = spread([y[:2], y[2:]])
    np.testing.assert_allclose(std[:2], y.reshape(-1, 3).std(0)[:2], rtol=1e-6)
    assert std[2] == 1.0  # no spread: NRMSE in absolute units, never a division by 0
    np.testing.assert_allclose(mean, y.reshape(-1, 3).mean(0), rtol=1e-12)


@pytest.mark.parametrize("offset, flagged", [(0.0, False), (2.9, False), (3.1, True), (1000.0, True)])
def test_offset_flag(offset, flagged):
    std = np.array([0.6, 0.8, 0.0])  # ‖std‖ = 1
    note = offset_note(np.array([offset, 0.0, 0.0]), std)
    assert (note is not None) is flagged
    if flagged:
        assert note.startswith("note: ‖y‖ is dominated by an offset") and "mean_nrmse" in note


@pytest.mark.parametrize("a, lam", [([[0.5, 0.0], [0.0, -1.0]], 0.5), ([[0.3, 1.0], [-1.0, 0.3]], 0.3),
                                     ([[0.0, 1.0], [-1.0, 0.0]], 0.0)])
def test_lyapunov_max_of_linear_flows(a, lam):
    """Benettin on y' = A y (its flow exp(A k dt)): the largest real part of A's eigenvalues."""
    from scipy.linalg import expm

    from vpintegrator.metrics import lyapunov_max

    dt = 0.1
    step = expm(np.array(a) * dt)
    advance = lambda y, k: y @ np.linalg.matrix_power(step, k).T  # noqa: E731
    est = lyapunov_max(advance, np.array([[1.0, 0.5], [-0.3, 2.0]]), dt, 2000)
    np.testing.assert_allclose(est, lam, atol=5e-3)


def test_rollout_vpt_in_lyapunov_times(tmp_path):
    """lyapunov = true: the table's vpt_lyapunov is (vpt − t0) times the estimate its note gives."""
    from vpintegrator.data import integrate
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.rollout import run_rollouts
    from vpintegrator.rollout.config import RolloutConfig

    y0 = np.array([[1.0, 0.2, -0.3], [0.1, 1.0, 0.4], [-0.5, 0.3, 1.0]])
    data = write_trajectories(tmp_path / "rb.h5", integrate(get_system("rigid_body"), y0, 0.1, 50, method="rk4"))
    report = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["euler"],
                                        reference="data", lyapunov=True))
    note = next(n for n in report.notes if n.startswith("lyapunov: largest exponent"))
    lam = float(note.split("largest exponent ")[1].split()[0])
    row = report.rows[0]
    assert list(row).index("vpt_lyapunov") == list(row).index("vpt") + 1
    assert row["vpt_lyapunov"] == pytest.approx(row["vpt"] * lam, rel=1e-3)  # t0 = 0; λ printed to 4 digits
    assert note in report.markdown.read_text()


@pytest.mark.parametrize("name, chaotic", [("rigid_body", False), ("abc_flow", True)])
def test_rollout_gives_lyapunov_times_where_the_flow_is_chaotic(tmp_path, name, chaotic):
    """lyapunov unset (the default): the ABC flow's separation grows exponentially, so its table has vpt_lyapunov;
    the rigid body's grows like t (a regular motion: Benettin's finite-time estimate is positive there too), so
    its table has none and a line says why."""
    from vpintegrator.data import integrate
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.rollout import run_rollouts
    from vpintegrator.rollout.config import RolloutConfig

    y0 = {"rigid_body": np.array([[1.0, 0.2, -0.3], [0.1, 1.0, 0.4], [-0.5, 0.3, 1.0]]),
          "abc_flow": np.random.default_rng(1).uniform(0.0, 2 * np.pi, (8, 3))}[name]
    data = write_trajectories(tmp_path / "d.h5", integrate(get_system(name), y0, 0.1, 50, method="rk4"))
    report = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["euler"],
                                        reference="data"))
    note = next(n for n in report.notes if n.startswith("lyapunov: largest exponent"))
    assert ("vpt_lyapunov" in report.rows[0]) is chaotic
    assert ("not exponentially: a regular motion" in note) is not chaotic
    off = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "o.h5"), integrators=["euler"],
                                     reference="data", lyapunov=False))
    assert "vpt_lyapunov" not in off.rows[0] and not any(n.startswith("lyapunov") for n in off.notes)
