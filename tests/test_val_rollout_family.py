"""``monitor = "val_rollout"`` on a parametric file (issue 34): the reference beyond the data is continued
with each trajectory's own parameters, and the invariant drift is measured with each trajectory's own
invariants (it used to hand the whole ``SystemFamily`` to ``reference_step_map`` and fail)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.integrate import solve_ivp

from vpintegrator.cli.train import main as train_main
from vpintegrator.data import generate, load_spec, read_trajectories
from vpintegrator.systems.family import SystemFamily
from vpintegrator.training import fit
from vpintegrator.training.validation import RolloutValidator

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def family_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("valfam") / "rbf.h5"
    generate(load_spec("rigid_body_family", n_traj=12, t_end=2.0, chunk_size=4), out=path, workers=1)
    return path


def _dop853(system, y0, t):
    sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y0, method="DOP853", t_eval=t,
                    rtol=1e-12, atol=1e-12)
    return sol.y.T


def test_reference_continued_with_each_trajectorys_parameters(family_file):
    val = read_trajectories(family_file)
    assert isinstance(val.system, SystemFamily) and len({tuple(p) for p in val.params}) == val.n_traj
    v = RolloutValidator(val, 25, 3, 1)  # the data stops at step 10: 15 steps continued
    t = val.dt * np.arange(26)
    assert v.ref.shape == (val.n_traj, 26, 3)
    np.testing.assert_array_equal(v.ref[:, : val.n_states].numpy(), val.y)
    for i in range(val.n_traj):
        np.testing.assert_allclose(v.ref[i].numpy(), _dop853(val.system_for(i), val.y[i, 0], t), rtol=0, atol=1e-9)
    # with one body's inertia for every row the continuation differs by far more than that
    wrong = _dop853(val.system_for(0), val.y[1, 0], t)
    assert np.abs(wrong[-1] - v.ref[1, -1].numpy()).max() > 1e-3


def test_drift_term_uses_each_trajectorys_invariants(family_file):
    val = read_trajectories(family_file)
    v0 = RolloutValidator(val, 20, 3, 1, error="final")
    v = RolloutValidator(val, 20, 3, 1, error="final", drift_weight=2.0)
    ref = v._ref(torch.zeros((), dtype=torch.float64))
    pred = 1.01 * ref[:, 3:]  # every state 1 % longer: Casimir +2.01 %, energy +2.01 % in every row
    want = 2.0 * 0.0201
    assert float(v.score(pred, ref) - v0.score(pred, ref)) == pytest.approx(want, rel=1e-9)
    # a leading member axis (an ensemble): each member scored as alone
    both = torch.stack([pred, ref[:, 3:]])
    np.testing.assert_allclose(v.score(both, ref).numpy(), [float(v.score(pred, ref)), float(v.score(ref[:, 3:], ref))],
                               rtol=1e-12, atol=1e-15)
    assert float(v.score(ref[:, 3:], ref)) < 1e-9  # the reference itself: DOP853 drift only


def test_fit_and_vp_train_monitor_val_rollout_on_a_parametric_file(family_file, tmp_path):
    cfg = dict(data=[str(family_file)], model={"name": "lpnet_ctx", "n_layers": 2, "width": 2}, epochs=2,
               optimizer="lm", dtype="float64", seed=3, monitor="val_rollout", val_rollout_steps=25,
               val_rollout_drift_weight=1.0, split_by="parameters_interpolation", val_fraction=0.25,
               test_fraction=0.25, out=str(tmp_path / "fit"))
    result = fit(cfg)
    scores = [r["val_rollout"] for r in result.history]
    assert len(scores) == 2 and all(np.isfinite(s) and 0 < s < RolloutValidator.CAP for s in scores)
    res = CliRunner().invoke(train_main, [
        "--data", str(family_file), "--model", "lpnet_ctx", "--set", "model.n_layers=2", "--set", "model.width=2",
        "--optimizer", "lm", "--epochs", "1", "--dtype", "float64", "--monitor", "val_rollout",
        "--val-rollout-steps", "25", "--split-by", "parameters_interpolation", "-q", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert "val_rollout" in (tmp_path / "cli" / "log.csv").read_text().splitlines()[0]
