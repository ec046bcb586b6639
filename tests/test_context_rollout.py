"""Context models and identification baselines in the rollout (issue 34): ContextStep, IdentifiedStep,
identify, and the CLI path vp-gen -> vp-train -> vp-rollout (with --work-precision) on a family file."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import vpintegrator as vp
from vpintegrator.data import solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import ContextStep, IdentifiedStep, identify_parameters, rollout
from vpintegrator.rollout.identify import add_noise, system_from_theta, theta_of
from vpintegrator.systems import CoupledOscillator, RigidBody

H = 0.2


def _family_prefixes(n=6, k=3, seed=0):
    rng = np.random.default_rng(seed)
    systems, prefixes = [], []
    for _ in range(n):
        s = RigidBody(tuple(rng.uniform(0.5, 3.0, 3)))
        y0 = rng.normal(size=(1, 3))
        y0 /= np.linalg.norm(y0)
        systems.append(s)
        prefixes.append(solve_flow(s, y0, H * np.arange(k))[0])
    return systems, np.stack(prefixes)


def test_shooting_recovers_the_rigid_body_coefficients_from_a_noiseless_prefix():
    systems, prefix = _family_prefixes()
    theta = identify_parameters(RigidBody(), prefix, H, "shooting")
    true = np.stack([theta_of(s) for s in systems])
    np.testing.assert_allclose(theta, true, rtol=0, atol=1e-8)
    fd = identify_parameters(RigidBody(), prefix, H, "fd")
    assert 1e-8 < np.abs(fd - true).max() < 0.05  # second order in h: far from shooting, close to the truth
    np.testing.assert_allclose(fd.sum(1), 0.0, atol=1e-14)  # projected on a + b + c = 0


def test_shooting_recovers_the_oscillator_parameters():
    s = CoupledOscillator(m=(1.3, 0.7), k1=1.2, k2=0.3, k=0.8)
    prefix = solve_flow(s, np.array([[1.0, 0.2, 0.5, -0.3]]), 0.2 * np.arange(5))
    np.testing.assert_allclose(identify_parameters(CoupledOscillator(), prefix, 0.2, "shooting")[0], theta_of(s), atol=1e-8)


def test_too_short_a_prefix_for_the_parameters_is_refused():
    prefix = np.zeros((2, 3, 4))
    with pytest.raises(VPIntegratorError, match="context_len >= 4"):
        identify_parameters(CoupledOscillator(), prefix, 0.2, "fd")


def test_the_fitted_system_has_the_fitted_coefficients():
    theta = np.array([0.3, -1.1, 0.8])
    assert np.allclose(system_from_theta(RigidBody(), theta).coefficients, theta, atol=1e-14)
    with pytest.raises(VPIntegratorError, match="not positive"):
        system_from_theta(CoupledOscillator(), np.array([-1.0, 1.0, 1.0, 1.0, 1.0]))


def test_noise_is_one_draw_shared_by_every_method():
    _, prefix = _family_prefixes()
    a, b = add_noise(prefix, 1e-3, seed=0), add_noise(prefix, 1e-3, seed=0)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(add_noise(prefix[2:4], 1e-3, seed=0), a[2:4])  # a row's draw, in any batch
    assert 1e-4 < np.abs(a - prefix).std() < 1e-2
    theta = identify_parameters(RigidBody(), a, H, "shooting")  # noisy: close, not exact
    assert np.abs(theta - identify_parameters(RigidBody(), prefix, H, "shooting")).max() < 0.5


def test_identified_step_is_the_integrator_with_the_fitted_parameters():
    systems, prefix = _family_prefixes(n=3)
    step = IdentifiedStep(RigidBody(), "shooting", "rk4", H, context_len=3)
    out = rollout(step, prefix, H, 12).y
    for i, s in enumerate(systems):  # the oracle: rk4 with the true parameters from the prefix's last state
        ref = vp.data.integrate(s, prefix[i, -1:], H, 10, method="rk4").y[0]
        np.testing.assert_allclose(out[i, 2:], ref, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(out[:, :3], prefix)
    with pytest.raises(VPIntegratorError, match="identification knows"):
        IdentifiedStep(vp.get_system("volterra"), "fd", "rk4", H)


def test_context_step_freezes_the_prefix_context():
    torch.manual_seed(0)
    model = vp.build_model("lpnet_ctx", dim=3).double()
    systems, prefix = _family_prefixes(n=4)
    out = rollout(ContextStep(model), prefix, H, 8).y
    x = torch.as_tensor(prefix)
    c = model.encode(x)
    z = x[:, -1:]
    with torch.no_grad():
        for j in range(6):
            z = model.step(z, c)
            np.testing.assert_allclose(out[:, 3 + j], z[:, 0].numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(out[:, 2:], axis=-1), np.linalg.norm(prefix[:, -1:], axis=-1) + 0 * out[:, 2:, 0],
                               rtol=0, atol=1e-13)  # Casimir-exact steps
    theta = np.stack([theta_of(s) for s in systems])
    oracle = rollout(ContextStep(model, context="oracle", theta=theta, dt=H), prefix, H, 8).y
    with torch.no_grad():
        z = model.step(x[:, -1:], torch.as_tensor(H * theta))
    np.testing.assert_allclose(oracle[:, 3], z[:, 0].numpy(), rtol=0, atol=1e-14)
    with pytest.raises(VPIntegratorError, match="finite_difference encoder"):
        ContextStep(vp.build_model("lpnet_ctx", dim=3, encoder="attention"), context="oracle", theta=theta, dt=H)


def test_context_step_volume_is_zero_for_each_rows_context():
    model = vp.build_model("vpff_ctx", dim=3).double()
    _, prefix = _family_prefixes(n=3)
    step = ContextStep(model)
    step.start(prefix, np.full(3, 1e3))
    logdet = step.log_abs_det_jacobian(prefix[[0, 2, 1]], rows=np.array([0, 2, 1]))
    np.testing.assert_allclose(logdet, 0.0, atol=1e-13)


def _rows(path):
    with open(path) as f:
        return {(r["method"], r["split"]): r for r in csv.DictReader(f)}


def test_cli_trains_and_rolls_out_a_context_model_beside_the_identification_rows(tmp_path):
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    data = tmp_path / "rbf.h5"
    res = CliRunner().invoke(gen_main, ["rigid_body_family", "--set", "n_traj=16", "--set", "t_end=2", "--out",
                                        str(data), "--workers", "1"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(train_main, ["--data", str(data), "--model", "lpnet_ctx", "--set", "epochs=3",
                                          "--set", "dtype=float64", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout_main, [
        "--data", str(data), "--model", f"m={tmp_path / 'run'}", "--integrators", "rk4,fd+rk4,shooting+rk4",
        "--t-end", "2", "--heldout", "4", "--set", "context_noise=0.0", "--work-precision", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "ro.csv")
    assert {"m", "m_oracle", "fd+rk4", "shooting+rk4", "rk4"} <= {m for m, _ in rows}
    # shooting recovers the parameters: its rows are the oracle rk4's (from the prefix's last state) to rounding
    assert float(rows[("shooting+rk4", "new")]["final_rel_error"]) < 1e-4
    assert float(rows[("m", "new")]["max_rel_drift_casimir"]) < 1e-10  # Casimir-exact steps
    assert "m" in (tmp_path / "ro_work_precision.md").read_text()
    res = CliRunner().invoke(rollout_main, ["--data", str(data), "--integrators", "fd+magic", "--out",
                                            str(tmp_path / "bad.h5")])
    assert res.exit_code != 0 and "magic" in res.output and "Traceback" not in res.output


def test_fit_from_python_trains_a_context_model_on_a_family():
    from vpintegrator.data import generate, load_spec

    traj = generate(load_spec("rigid_body_family", n_traj=12, t_end=2.0))
    first = vp.fit(model="lpnet_ctx", train=traj, epochs=1, dtype="float64", seed=0)
    res = vp.fit(model="lpnet_ctx", train=traj, epochs=15, dtype="float64", optimizer="lm", seed=0)
    assert res.n_params == 430 and res.best_loss < first.best_loss
