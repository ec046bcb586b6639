"""What a new user met first (issue 69): ``vp-train`` on data not written yet answers with the path as given and
the ``vp-gen`` command that writes it; ``vp-train --list`` has configs for observed windows and reduced
coordinates; ``vp-study --list`` names every study's shipped results; the metrics table ``vp-rollout`` prints
says what its numbers are and why a ``split`` is ``unknown``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vpintegrator.cli import rollout, study, train

pytestmark = pytest.mark.usefixtures("one_thread")


def _invoke(command, *args):
    return CliRunner().invoke(command, [str(a) for a in args])


@pytest.mark.parametrize("args, message", [
    (["tiny"], "config tiny: data: datasets/rigid_body_paper.h5 not found; write it first with: vp-gen rigid_body_paper"),
    (["--data", "datasets/rigid_body.h5", "--model", "vpt"],
     "--data: datasets/rigid_body.h5 not found; write it first with: vp-gen rigid_body"),
    (["--data", "nothere.h5", "--model", "vpt"], "--data: nothere.h5 not found; write it first with vp-gen SPEC"),
])
def test_train_on_data_not_written_yet_says_how_to_write_it(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty directory
    result = _invoke(train.main, *args)
    assert result.exit_code == 1
    line = result.output.strip()
    assert "\n" not in line and line.startswith(f"Error: {message}"), line
    assert str(tmp_path) not in line  # the path as given, not made absolute
    assert not list(tmp_path.iterdir())  # nothing written


def test_train_lists_configs_for_observed_windows_and_reduced_coordinates():
    from vpintegrator._shipped import config_path
    from vpintegrator.training import TrainConfig

    listed = _invoke(train.main, "--list").output
    assert "coupled_oscillator_observed_q" in listed and "toda_psd32_g_sympnet" in listed
    observed = TrainConfig.from_toml(config_path("coupled_oscillator_observed_q"))
    assert observed.observe == "q" and observed.model == {"name": "delay_mlp", "seq_len": 4, "width": 32, "depth": 2,
                                                          "increment": "second"}
    reduced = TrainConfig.from_toml(config_path("toda_psd32_g_sympnet"))
    assert reduced.observe == "psd:32" and reduced.step == 2.0 and reduced.model["name"] == "g_sympnet"


def test_study_list_names_every_shipped_results_file():
    from vpintegrator._shipped import results_files

    listed = _invoke(study.main, "--list").output
    shipped = listed.split("shipped results")[1]
    for name in results_files():
        assert name in shipped, name
    lines = {line.split()[0]: line for line in shipped.splitlines()[1:] if line.strip()}
    assert "partial_observation/default" in lines["partial_observation"]
    assert "reduction/default" in lines["reduction"]


def test_the_printed_metrics_table_says_its_statistic_and_why_a_split_is_unknown(tiny_data, tmp_path):
    result = _invoke(rollout.main, "--data", tiny_data, "--integrators", "rk4", "--t-end", 1, "--n-traj", 2,
                     "--out", tmp_path / "ro.h5", "--quiet")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[:4] == ["method", "split", "final_rel_error", "valid_time"]
    assert lines[2].split()[:2] == ["rk4", "unknown"]
    assert lines[3].startswith("final_rel_error and valid_time: the mean over the row's n_traj trajectories")
    assert "work-precision table's errors are medians" in lines[3]
    assert lines[4].startswith("mean_nrmse: the NRMSE against each component's spread over the training data")
    assert lines[5].startswith("split unknown: no model of this run records a training split of this file")
