"""Sizes are checked before they are allocated, in one place (``vpintegrator.resources.check_size``: one
message naming the key and the estimate), and inputs whose intermediate values overflow float64 are one
line naming the input."""

from __future__ import annotations

import itertools

import h5py
import numpy as np
import pytest

from vpintegrator import resources
from vpintegrator.errors import VPIntegratorError


@pytest.fixture
def small_memory(monkeypatch):
    """A machine with 1 GiB available."""
    monkeypatch.setattr(resources, "available_memory", lambda: 2**30)


def test_check_size_names_the_key_and_the_estimate(small_memory):
    resources.check_size("n_test", 1000, 8, "the test set")  # 8 kB: fine
    with pytest.raises(VPIntegratorError, match=r"n_test: the test set would hold 10,000,000,000 values \(74\.5 GiB\)"
                                                r" but 1\.0 GiB of memory are available \(refused before allocating\); lower it") as err:
        resources.check_size("n_test", 10**10, 8, "the test set")
    assert err.value.key == "n_test"
    with pytest.raises(VPIntegratorError, match="unbounded"):
        resources.check_size("horizon", float("inf"), 8)
    with pytest.raises(VPIntegratorError, match="n_traj"):  # a product of sizes far past float range stays exact
        resources.check_size("n_traj", 10**400, 8)


def test_check_finite_names_the_input():
    resources.check_finite("dt", 0.1)
    with pytest.raises(VPIntegratorError, match=r"data: values overflow float64 \(not finite \(first at index \(1,\)"):
        resources.check_finite("data", np.array([1.0, np.inf, 2.0]))


def test_a_grid_is_never_built_in_memory_and_gives_the_products_points_in_order(small_memory):
    from vpintegrator.data.param_dists import draw_parameters
    from vpintegrator.systems import get_system

    system = get_system("coupled_oscillator")
    small = {"k1": {"dist": "grid", "values": [1.0, 2.0, 3.0]}, "k2": {"dist": "grid", "values": [0.1, 0.2]},
             "k": {"dist": "grid", "values": [0.5, 0.6, 0.7, 0.8]}}
    _, values = draw_parameters(system, small, 30, 0)
    product = list(itertools.product([1.0, 2.0, 3.0], [0.1, 0.2], [0.5, 0.6, 0.7, 0.8]))  # the first varies slowest
    assert [tuple(v) for v in values] == [product[i % 24] for i in range(30)]
    # three grids of 10^5 points: a product of 10^15 points (the old code built it: MemoryError)
    huge = {n: {"dist": "grid", "values": list(np.linspace(1.0, 2.0, 10**5))} for n in ("k1", "k2", "k")}
    _, values = draw_parameters(system, huge, 3, 0)
    assert values[:, :2].tolist() == [[1.0, 1.0]] * 3 and values[1, 2] > values[0, 2]
    with pytest.raises(VPIntegratorError, match="n_traj: parameters: the drawn parameters would hold"):
        draw_parameters(system, small, 10**9, 0)  # 3 × 10^9 values: refused before drawing


def test_an_empty_rollout_dataset_is_one_line(tmp_path):
    from vpintegrator.data.rollouts import _series

    with h5py.File(tmp_path / "r.h5", "w") as f:
        with pytest.raises(VPIntegratorError, match=r"the rollout's y would have shape \(4, 0, 3\): nothing to write"):
            _series(f, "y", (4, 0, 3), (64, 256, 3))


@pytest.mark.parametrize("system, params", [("coupled_oscillator", {"k1": 1e300}),
                                            ("rigid_body", {"inertia": (1e-300, 1.0, 2.0)})])
def test_float64_overflow_in_the_integration_is_one_line_naming_the_input(system, params):
    from vpintegrator.data import solve_flow
    from vpintegrator.systems import get_system

    s = get_system(system, **params)
    y0 = np.ones((1, s.dim)) / np.sqrt(s.dim)
    with pytest.raises(VPIntegratorError, match="intermediate values overflow float64 .*system parameters"):
        solve_flow(s, y0, np.linspace(0.0, 1.0, 6))


def test_data_near_the_float64_limit_is_one_line():
    from vpintegrator.data import solve_flow

    y0 = np.array([[0.6, 0.8, 0.0]]) * 1e307
    with np.errstate(over="ignore"), pytest.raises(VPIntegratorError, match=r"largest \|initial state\| 8e\+306"):
        solve_flow("rigid_body", y0, np.linspace(0.0, 1.0, 6))


def test_a_params_column_named_twice_is_refused(tmp_path, tiny_data):
    import shutil

    from vpintegrator.data import read_trajectories

    path = tmp_path / "dup.h5"
    shutil.copy(tiny_data, path)
    with h5py.File(path, "a") as f:
        ds = f.create_dataset("params", data=np.ones((f["y"].shape[0], 3)))
        ds.attrs["names"] = np.array(["inertia[0]", "inertia[1]", "inertia[0]"], dtype=h5py.string_dtype())
    with pytest.raises(VPIntegratorError, match=r"names the column 'inertia\[0\]' twice"):
        read_trajectories(path)


@pytest.mark.parametrize("args, words", [(["--n-test", "1000000000000"], "--n-test: the test rollouts"),
                                         (["--context-lens", "150"], "--context-lens: a context of 150 states is not "
                                                                     "shorter than the test rollout"),
                                         (["--context-lens", "25"], "not shorter than the trajectories")])
def test_the_context_study_refuses_sizes_before_training(tmp_path, capsys, args, words):
    from vpintegrator.studies.context import STUDY
    from vpintegrator.studies.driver import main as drive

    def main(argv):
        return drive(STUDY, argv)

    data = _family(tmp_path)
    out = tmp_path / "study"
    assert main(["--data", str(data), "--out", str(out), "--seeds", "0", "--epochs", "1", "--models", "lpnet_ctx",
                 "--splits", "interpolation", "--noise", "0", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
    assert not out.exists()  # nothing trained, nothing written


def _family(tmp_path):
    """A rigid-body family file of 21 states (4 trajectories)."""
    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as gen_main

    res = CliRunner().invoke(gen_main, ["rigid_body_family", "--set", "n_traj=4", "--set", "t_end=4", "--dt", "0.2",
                                        "--out", str(tmp_path / "fam.h5"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    return tmp_path / "fam.h5"
