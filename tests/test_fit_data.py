"""Fitted rows (sindy+METHOD, parrot) fit on a training file and are scored on another (``fit_data``,
``--fit-data``); fitting on the file they are scored on is refused unless asked (``fit_on_data``)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.data import generate, load_spec
from vpintegrator.rollout import RolloutConfig, read_rollout, run_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    train, heldout = root / "train.h5", root / "heldout.h5"
    generate(load_spec("rigid_body", n_traj=30, t_end=4.0, dt=0.2, method="rk4", seed=11), out=train)
    generate(load_spec("rigid_body", n_traj=8, t_end=4.0, dt=0.2, method="rk4", seed=12), out=heldout)
    return train, heldout


def test_a_fitted_row_on_the_scored_file_is_refused_unless_asked(files, tmp_path):
    _, heldout = files
    with pytest.raises(VPIntegratorError, match="the file they are scored on") as err:
        run_rollouts(RolloutConfig(data=str(heldout), out=str(tmp_path / "r.h5"), integrators=["parrot", "rk4"]))
    assert err.value.key == "fit_data" and "\n" not in str(err.value) and not (tmp_path / "r.h5").exists()
    with pytest.raises(VPIntegratorError, match="holds the trajectories of"):  # the same file under fit_data
        run_rollouts(RolloutConfig(data=str(heldout), fit_data=str(heldout), out=str(tmp_path / "r.h5"),
                                   integrators=["parrot"]))
    asked = run_rollouts(RolloutConfig(data=str(heldout), fit_on_data=True, out=str(tmp_path / "a.h5"),
                                       integrators=["parrot"], t_end=2.0))
    assert {r["split"] for r in asked.rows} == {"test"}  # its own held-out split only


def test_fit_data_fits_on_the_training_file_and_scores_every_trajectory_of_the_other(files, tmp_path):
    train, heldout = files
    logs: list[str] = []
    rep = run_rollouts(RolloutConfig(data=str(heldout), fit_data=str(train), out=str(tmp_path / "f.h5"),
                                     integrators=["parrot", "rk4"], t_end=2.0), log=logs.append)
    result = read_rollout(rep.out)
    assert sorted(result.traj_index) == list(range(8))  # every held-out trajectory, not a split of them
    meta = result.methods["parrot"].meta
    assert str(train) in meta["fit_source"] and meta["parrot_context_traj"] == 24  # vp-train's default split of 30
    assert any(line.startswith("parrot: fitted on vp-train's default split") and str(train) in line
               and f"scored on {heldout}" in line for line in logs)
    assert {r["split"] for r in rep.rows if r["method"] == "parrot"} == {"unknown"}
    with h5py.File(train) as f:  # the training file is read, never written
        assert f["y"].shape[0] == 30


def test_fit_data_of_another_step_is_refused(files, tmp_path):
    train, heldout = files
    other = tmp_path / "coarse.h5"
    generate(load_spec("rigid_body", n_traj=10, t_end=4.0, dt=0.4, method="rk4", seed=13), out=other)
    with pytest.raises(VPIntegratorError, match="fit_data .*step dt") as err:
        run_rollouts(RolloutConfig(data=str(heldout), fit_data=str(other), out=str(tmp_path / "r.h5"),
                                   integrators=["parrot"]))
    assert err.value.key == "fit_data"


def test_vp_rollout_fit_data_flag(files, tmp_path):
    from vpintegrator.cli.rollout import main

    train, heldout = files
    out = tmp_path / "cli.h5"
    res = CliRunner().invoke(main, ["--data", str(heldout), "--fit-data", str(train), "--integrators", "parrot",
                                    "--t-end", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"fitted on vp-train's default split (val_fraction 0.1, test_fraction 0.1, split_seed 0) of {train}" in res.output
    res = CliRunner().invoke(main, ["--data", str(heldout), "--integrators", "parrot", "--out", str(tmp_path / "x.h5")])
    assert res.exit_code != 0 and "--fit-data" in res.output and "Traceback" not in res.output
    assert np.isfinite(read_rollout(out).metrics["parrot"].rel_error).all()
