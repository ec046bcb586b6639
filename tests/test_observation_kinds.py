"""Observations as fitted objects: a kind of observation is one subclass of ``Observation`` (its spec prefix,
``parse``, ``fit``), registered by subclassing, and every parser and call site asks the one registry. The kind
defined here, in the test, trains through ``vp-train --observe``, is recorded in the checkpoint, reloads as
itself, rolls out through ``vp-rollout`` and is refused against another observation, with no other file
touched. Records written before the kinds (plain dicts, file attributes) read as the kinds they name."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.data import integrate, write_trajectories
from vpintegrator.data.observation import (Components, Observation, SVDBasis, check_observe_spec, kind_of,
                                           observation_from_record, observation_kinds, observation_of,
                                           resolve_observation)
from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction.observation import BalancedPSDReduction, PSDReduction, ReductionFile
from vpintegrator.systems import CoupledOscillator


class ScaledDifferences(Observation):
    """``sdiff:K``: the K differences ``y[i+1] - y[i]`` (i < K) of the state's components, each divided by its
    standard deviation over the training split's states: a linear kind fitted on the training split."""

    prefix = "sdiff:"
    fits_on_training_split = True

    @classmethod
    def parse(cls, raw):
        text = super().parse(raw)
        k = text[len(cls.prefix):]
        if not k.isdigit() or int(k) < 1:
            raise VPIntegratorError(f"observe {raw!r}: give sdiff:K with K >= 1", key="observe")
        return text

    @classmethod
    def fit(cls, spec, full_dim, names=(), system=None, train_states=None):
        k = int(spec[len(cls.prefix):])
        if k >= full_dim:
            raise VPIntegratorError(f"observe {spec!r}: at most {full_dim - 1} differences", key="observe")
        diff = np.eye(full_dim, k=1)[:k] - np.eye(full_dim)[:k]  # (k, full_dim): row i is y[i+1] - y[i]
        scale = np.std(np.asarray(train_states).reshape(-1, full_dim) @ diff.T, axis=0)
        return cls(spec, diff / scale[:, None], None, tuple(f"d{i + 1}" for i in range(k)), system)


def _scaled_differences_by_hand(states, k):
    """The slow reference: each channel written out component by component."""
    x = np.asarray(states, dtype=np.float64).reshape(-1, states.shape[-1])
    rows = []
    for i in range(k):
        d = x[:, i + 1] - x[:, i]
        s = np.sqrt(np.mean((d - d.mean()) ** 2))
        row = np.zeros(x.shape[1])
        row[i + 1], row[i] = 1 / s, -1 / s
        rows.append(row)
    return np.array(rows)


@pytest.fixture(scope="module")
def co_file(tmp_path_factory):
    """24 coupled-oscillator trajectories of 41 states (Gauss-Legendre 4, h = 0.2)."""
    rng = np.random.default_rng(5)
    y0 = rng.uniform([-1, -1, -2, -2], [1, 1, 2, 2], size=(24, 4))
    traj = integrate("coupled_oscillator", y0, 0.2, 40, method="gauss_legendre4")
    return write_trajectories(tmp_path_factory.mktemp("kinds") / "co.h5", traj)


def test_the_registry_holds_one_kind_per_prefix():
    kinds = observation_kinds()
    assert kinds[""] is Components and kinds["basis:"] is SVDBasis and kinds["psd:"] is PSDReduction
    assert kinds["psd_balanced:"] is BalancedPSDReduction and kinds["file:"] is ReductionFile
    assert kinds["sdiff:"] is ScaledDifferences and kind_of("sdiff:2") is ScaledDifferences
    assert kind_of("psd_balanced:4") is BalancedPSDReduction and kind_of("q1,q2") is Components
    with pytest.raises(VPIntegratorError, match="the prefix 'sdiff:' is ScaledDifferences's"):
        type("Another", (Observation,), {"prefix": "sdiff:"})
    assert observation_kinds()["sdiff:"] is ScaledDifferences


@pytest.mark.parametrize("spec, words", [("sdiff:0", "give sdiff:K with K >= 1"),
                                         ("nokind:3", "no kind of observation owns the prefix 'nokind:'")])
def test_a_kind_checks_its_spec_and_an_unknown_prefix_is_one_line(spec, words):
    with pytest.raises(VPIntegratorError, match=words) as err:
        check_observe_spec(spec)
    assert err.value.key == "observe" and "\n" not in str(err.value)


def test_a_kind_fits_records_reloads_and_compares_by_its_channels():
    states = np.random.default_rng(0).normal(size=(5, 7, 4)) * [1.0, 2.0, 3.0, 4.0]
    obs = resolve_observation(" sdiff: 2 ", 4, CoupledOscillator.state_names, "coupled_oscillator", states)
    assert isinstance(obs, ScaledDifferences) and obs.spec == "sdiff:2" and obs.names == ("d1", "d2")
    np.testing.assert_allclose(obs.matrix, _scaled_differences_by_hand(states, 2), rtol=1e-13, atol=0)
    y = states[0]
    np.testing.assert_allclose(obs.apply(y), y @ _scaled_differences_by_hand(states, 2).T, rtol=1e-13)
    import torch

    np.testing.assert_allclose(obs.apply(torch.as_tensor(y)).numpy(), obs.apply(y), rtol=1e-15)
    back = observation_from_record(json.loads(json.dumps(obs.record())))
    assert type(back) is ScaledDifferences and back.same_as(obs) and back.names == obs.names
    from_file = observation_of(obs.meta())
    assert type(from_file) is ScaledDifferences and from_file.same_as(obs) and from_file.indices is None
    other = resolve_observation("sdiff:2", 4, (), None, states * 2)  # another training split: other channels
    assert not other.same_as(obs)
    with pytest.raises(VPIntegratorError, match="not a reduction"):
        obs.decode(obs.apply(y))


def test_a_kind_defined_in_one_class_trains_and_rolls_out_through_the_clis(co_file, tmp_path):
    from vpintegrator.cli.rollout import main as rollout
    from vpintegrator.cli.train import main as train
    from vpintegrator.data import read_trajectories
    from vpintegrator.models import load_model

    run = tmp_path / "run"
    res = CliRunner().invoke(train, ["--data", str(co_file), "--model", "vpt", "--set", "model.seq_len=3",
                                     "--observe", "sdiff:2", "--epochs", "1", "--set", "batch_size=64",
                                     "--set", "dtype=float64", "--out", str(run)])
    assert res.exit_code == 0, res.output
    summary = json.loads((run / "summary.json").read_text())
    record = summary["observation"]
    assert record["spec"] == "sdiff:2" and record["dim"] == 2 and record["names"] == ["d1", "d2"]
    train_states = read_trajectories(co_file).y[summary["split"]["train"]]  # fitted on the training split only
    np.testing.assert_allclose(np.asarray(record["matrix"]), _scaled_differences_by_hand(train_states, 2),
                               rtol=1e-12, atol=0)
    model_obs = observation_from_record(load_model(run).trained_on["observation"])
    assert isinstance(model_obs, ScaledDifferences) and model_obs.same_as(observation_from_record(record))

    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout, ["--data", str(co_file), "--model", f"vpt={run}", "--n-traj", "3",
                                       "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    with h5py.File(out, "r") as f:
        attrs = dict(f.attrs)
        predicted = np.asarray(f["methods"]["vpt"]["y"])
    assert attrs["observation"] == "sdiff:2" and predicted.shape[-1] == 2
    held = observation_of(attrs)
    assert isinstance(held, ScaledDifferences) and held.same_as(model_obs)

    same = CliRunner().invoke(rollout, ["--data", str(co_file), "--model", f"vpt={run}", "--n-traj", "3",
                                        "--observe", "sdiff:2", "--out", str(tmp_path / "same.h5"), "-q"])
    assert same.exit_code == 0, same.output  # the spec of the model's kind: its recorded (fitted) channels
    other = CliRunner().invoke(rollout, ["--data", str(co_file), "--model", f"vpt={run}", "--n-traj", "3",
                                         "--observe", "q", "--out", str(tmp_path / "q.h5"), "-q"])
    assert other.exit_code != 0 and "vpt is on observation sdiff:2 (d1, d2" in other.output
    assert "Traceback" not in other.output and not (tmp_path / "q.h5").exists()


# -- records written before the kinds -------------------------------------------------------------------


def test_old_records_and_file_attributes_read_as_the_kinds_they_name():
    """A checkpoint's ``trained_on["observation"]`` and a file's attributes as written before the kinds
    existed (the same keys: the record did not change) read as their kinds, with the same map."""
    q = {"spec": "q", "matrix": [[1.0, 0, 0, 0], [0, 1.0, 0, 0]], "indices": [0, 1], "names": ["q1", "q2"],
         "system": "coupled_oscillator", "dim": 2, "full_dim": 4}
    obs = observation_from_record(q)
    assert type(obs) is Components and obs.indices == (0, 1) and obs.spelled_by("0,1")
    basis = {"spec": "basis:1", "matrix": [[0.6, 0.8]], "indices": None, "names": ["b1"], "system": None,
             "dim": 1, "full_dim": 2}
    assert type(observation_from_record(basis)) is SVDBasis
    psd = {"spec": "psd:2", "matrix": [[1.0, 0, 0, 0], [0, 0, 1.0, 0]], "indices": None,
           "names": ["xi1", "eta1"], "system": "toda", "dim": 2, "full_dim": 4,
           "reduction": {"kind": "psd", "method": "cotangent_lift", "linear": True, "n_sites": 2,
                         "reduced_dim": 2, "fitted_on": "the training split"}}
    red = observation_from_record(psd)
    assert type(red) is PSDReduction
    np.testing.assert_array_equal(red.decode([[2.0, 3.0]]), [[2.0, 0, 3.0, 0]])
    attrs = {"observation": "psd:2", "observation_matrix": np.asarray(psd["matrix"]), "observed_system": "toda",
             "observation_full_dim": 4, "observation_reduction": json.dumps(psd["reduction"], sort_keys=True)}
    held = observation_of(attrs)
    assert type(held) is PSDReduction and held.same_as(red) and held.names == ("r1", "r2")
    assert held.record()["reduction"] == psd["reduction"]
