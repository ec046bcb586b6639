"""Context parroting as a rollout row (issue 43, item 6): exact reproduction of a training trajectory, the
continuation beyond the training horizon, finite errors on held-out data, and the CLI on a family file."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.data import generate, load_spec, read_rollout, solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import ParrotStep, RolloutConfig, rollout, run_rollouts
from vpintegrator.systems import RigidBody

H = 0.2


def _train(n=8, n_states=31, seed=0):
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return solve_flow(RigidBody(), y0, H * np.arange(n_states))


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    path = tmp_path_factory.mktemp("parrot") / "rbf.h5"
    generate(load_spec("rigid_body_family", n_traj=30, t_end=6.0), out=path)
    return path


def test_a_training_initial_window_is_reproduced_exactly():
    train = _train()
    step = ParrotStep(train, context_len=3)
    out = rollout(step, train[[5, 2], :3], H, train.shape[1] - 1)
    np.testing.assert_array_equal(out.y, train[[5, 2]])


def test_beyond_the_training_horizon_it_matches_the_latest_window_again():
    train = _train()
    step = ParrotStep(train, context_len=3)
    n = 3 * train.shape[1]  # three training horizons
    out = rollout(step, train[[1], :3], H, n)
    assert out.y.shape == (1, n + 1, 3) and np.isfinite(out.y).all()
    # every predicted state is a state of a training trajectory (copied verbatim)
    states = train.reshape(-1, 3)
    d = np.min(np.linalg.norm(out.y[0, 3:, None] - states[None], axis=-1), axis=1)
    assert np.all(d == 0)
    # up to the training horizon the copy is trajectory 1 itself; after it, copies of re-matched windows
    assert np.array_equal(out.y[0, : train.shape[1]], train[1])


def test_parrot_errors_on_held_out_conditions_are_finite_and_small_near_the_start():
    train = _train(n=60, n_states=51)
    test = _train(n=5, n_states=51, seed=7)
    out = rollout(ParrotStep(train, context_len=3), test[:, :3], H, 50)
    err = np.linalg.norm(out.y - test, axis=-1) / np.linalg.norm(test, axis=-1)
    assert np.isfinite(err).all() and np.median(err[:, 5]) < 0.5
    np.testing.assert_allclose(np.linalg.norm(out.y, axis=-1), 1.0, atol=1e-10)  # copies of unit-sphere states


def test_bad_context_is_one_line():
    with pytest.raises(VPIntegratorError, match="context_len"):
        ParrotStep(_train(), context_len=0)
    step = ParrotStep(_train(n_states=3), context_len=3)
    with pytest.raises(VPIntegratorError, match="T >= context_len"):
        rollout(step, np.zeros((1, 3, 3)) + 0.5, H, 5)


def test_parrot_row_on_a_family_file(family, tmp_path):
    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(family), out=str(tmp_path / "r.h5"), integrators=["parrot"],
                                        heldout=4, t_end=10.0))
    result = read_rollout(report.out)
    err = result.metrics["parrot"].rel_error
    assert err.shape == (4, 51) and np.isfinite(err).all()
    meta = result.methods["parrot"].meta
    assert meta["kind"] == "fitted" and meta["context_len"] == 3 and meta["parrot_context_traj"] == 24
    # a delay map that claims no volume preservation: no volume column, and the reason (issue 88)
    assert np.isnan(result.table[0]["max_abs_cum_log_det_J"]) and result.metrics["parrot"].log_det_J is not None
    assert "claims no volume preservation" in meta["volume_note"]


def test_only_a_delay_map_that_claims_no_volume_loses_the_volume_column():
    from types import SimpleNamespace as NS

    from vpintegrator.rollout.write import delay_map_note

    def step(seq_len, advance, preserves=None):
        return NS(seq_len=seq_len, advance=advance, **({} if preserves is None else {"model": NS(preserves=preserves)}))

    assert "delay map (3 states in, 1 new per step)" in delay_map_note("arx", step(3, 1))  # fitted: claims nothing
    assert delay_map_note("mlp", step(4, 1, ())) is not None
    assert delay_map_note("vpt", step(3, 1, ("volume",))) is None  # an overlapping VPT claims it: measured
    assert delay_map_note("st", step(3, 3, ())) is None  # a window map (3 in, 3 out): its volume is one
    assert delay_map_note("rk4", step(1, 1)) is None


def test_parrot_reproduces_a_training_trajectory_of_the_file(family, tmp_path):
    from vpintegrator.data.windows import split_train_val_test
    from vpintegrator.rollout.methods import DEFAULT_SPLIT

    i = int(split_train_val_test(30, *DEFAULT_SPLIT)[0][3])
    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(family), out=str(tmp_path / "r.h5"), integrators=["parrot"],
                                        traj=[i], reference="data"))
    assert report.rows[0]["split"] == "train"
    np.testing.assert_array_equal(read_rollout(report.out).metrics["parrot"].rel_error, 0.0)


def test_vp_rollout_cli_parrot_beside_identification(family, tmp_path):
    from vpintegrator.cli.rollout import main

    out = tmp_path / "cli.h5"
    res = CliRunner().invoke(main, ["--data", str(family), "--fit-on-data", "--integrators", "parrot,fd+rk4", "--context-len", "4",
                                    "--t-end", "8", "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "parrot: fitted on vp-train's default split" in res.output
    result = read_rollout(out)
    assert set(result.methods) >= {"parrot", "fd+rk4"} and result.methods["parrot"].meta["context_len"] == 4
    assert np.isfinite(result.metrics["parrot"].rel_error).all()


def test_the_context_study_has_a_parrot_row(family):
    from vpintegrator.data import read_trajectories
    from vpintegrator.studies.context import _methods, evaluate_methods, heldout_pairs

    split = {"columns": ["inertia[0]", "inertia[1]", "inertia[2]"], "low": [0.5] * 3, "high": [3.0] * 3,
             "mode": "interpolation", "center": [0.5] * 3, "radius": 0.3}
    systems, y0 = heldout_pairs(split, 4, 0)
    train = read_trajectories(family).y
    methods = _methods({}, split, systems, 3, 0.0, parrot_context=train)
    assert "parrot" in methods and "parrot" not in _methods({}, split, systems, 3, 0.0)
    rows = evaluate_methods({"parrot": methods["parrot"]}, systems, y0, 3, 1e-3, horizons=(2.0, 4.0))
    assert rows[0]["method"] == "parrot" and rows[0]["failed"] == 0
    assert np.isfinite(rows[0]["errors"]["4"]).all()


def test_a_horizon_shorter_than_the_context_is_refused_before_anything_runs(family, tmp_path):
    with pytest.raises(VPIntegratorError, match="t_end: the horizon has 2 steps") as err:
        run_rollouts(RolloutConfig(fit_on_data=True, data=str(family), out=str(tmp_path / "r.h5"), integrators=["rk4", "parrot"],
                                   context_len=5, t_end=0.4))
    assert err.value.key == "t_end" and not (tmp_path / "r.h5").exists()


def test_the_volume_figure_names_the_copy_map(family, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from vpintegrator.plotting import plot_volume

    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(family), out=str(tmp_path / "r.h5"), integrators=["parrot", "rk4"],
                                        t_end=4.0))
    fig = plot_volume(report.out)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("det J = 0" in n and "parrot" in n for n in notes)
    assert not any("exactly 0" in n for n in notes)
