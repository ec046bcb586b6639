"""Flow maps trained on reduced coordinates (observe = psd:K or file:PATH, at a step Δ), rolled out in the reduced
space by vp-rollout and decoded to the full state at an output cadence (--decode-every)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.data import integrate, read_trajectories, write_trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.reduction import fit_psd, save_reduction
from vpintegrator.training import fit_symplectic_autoencoder
from vpintegrator.systems import get_system, sample_initial_conditions


def _toda(n_sites: int, mu) -> object:
    system = get_system("toda", N=n_sites)
    return integrate(system, sample_initial_conditions(system, "bump", mu=list(mu)), 0.5, 40,
                     method="stormer_verlet_y6", compiled=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Toda N = 12: a training file (11 mu, dt = 0.5, 41 states) and a held-out one (its midpoints)."""
    where = tmp_path_factory.mktemp("red")
    train = write_trajectories(where / "train.h5", _toda(12, 0.30 + 0.03 * np.arange(11)))
    held = write_trajectories(where / "held.h5", _toda(12, 0.315 + 0.03 * np.arange(10)))
    return where, train, held


def _train(args, tmp_path):
    from vpintegrator.cli.train import main

    res = CliRunner().invoke(main, [*args, "--epochs", "2", "--set", "batch_size=64", "--set", "dtype=float64",
                                    "--test-fraction", "0"])
    return res


def _rollout(args):
    from vpintegrator.cli.rollout import main

    return CliRunner().invoke(main, [*args, "--set", "volume=false", "--reference", "data", "-q"])


def _manual_errors(ro_path, data_path, decode, every):
    """The full-state errors written out: every K-th state of each model's reduced rollout, decoded, against
    the data file's states."""
    with h5py.File(ro_path, "r") as f:
        label = next(iter(f["methods"]))
        z = np.asarray(f["methods"][label]["y"])
        idx = np.asarray(f["traj_index"])
    y = read_trajectories(data_path).y[idx]
    ks = sorted(set(range(0, z.shape[1], every)) | {z.shape[1] - 1})
    dec = decode(z[:, ks])
    return np.linalg.norm(dec - y[:, ks], axis=-1) / np.linalg.norm(y[:, ks], axis=-1)


def test_psd_reduced_sympnet_trains_at_a_step_rolls_out_and_decodes(files, tmp_path):
    where, train, held = files
    run = tmp_path / "run"
    res = _train(["--data", str(train), "--model", "g_sympnet", "--observe", "psd:6", "--set", "step=1.0",
                  "--out", str(run)], tmp_path)
    assert res.exit_code == 0, res.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["dt"] == 1.0
    obs = summary["observation"]
    assert obs["spec"] == "psd:6" and obs["dim"] == 6 and obs["reduction"]["kind"] == "psd"
    # the recorded basis is the cotangent-lift PSD of the training split's states at the step (every 2nd state)
    data = read_trajectories(train)
    split = summary["split"]["train"]
    basis = fit_psd(data.y[split][:, ::2], 6)
    np.testing.assert_allclose(np.abs(np.asarray(obs["matrix"])), np.abs(basis.matrix().T), atol=1e-10)
    # the rollout needs data at the model's step: the held-out file at dt = 1.0
    held1 = write_trajectories(tmp_path / "held1.h5", read_trajectories(held).select(steps=slice(None, None, 2)))
    with h5py.File(held1, "a") as f:
        f.attrs["dt"] = 1.0
    out = tmp_path / "ro.h5"
    res = _rollout(["--data", str(held1), "--model", str(run), "--out", str(out), "--decode-every", "3"])
    assert res.exit_code == 0, res.output
    table = (tmp_path / "ro_decoded.csv").read_text().splitlines()
    assert table[0].startswith("method,reduction,every")
    row = dict(zip(table[0].split(","), table[1].split(",")))
    matrix = np.asarray(obs["matrix"])
    manual = _manual_errors(out, held1, lambda z: z @ matrix, 3)
    assert float(row["error_at_end"]) == pytest.approx(float(np.median(manual[:, -1])), rel=1e-12)
    assert int(row["decoded_states"]) == manual.size == 10 * 8  # t = 0, 3, .., 18, and the last (20)


def test_balanced_psd_observation_trains_rolls_out_and_decodes(files, tmp_path):
    """observe = psd_balanced:K: the balanced cotangent lift of the training split, through psd:K's code path."""
    where, train, held = files
    run = tmp_path / "run"
    res = _train(["--data", str(train), "--model", "g_sympnet", "--observe", "psd_balanced:6", "--out", str(run)],
                 tmp_path)
    assert res.exit_code == 0, res.output
    obs = json.loads((run / "summary.json").read_text())["observation"]
    assert obs["spec"] == "psd_balanced:6" and obs["dim"] == 6
    assert obs["reduction"]["kind"] == "psd" and obs["reduction"]["method"] == "balanced_cotangent_lift"
    data = read_trajectories(train)
    states = data.y[json.loads((run / "summary.json").read_text())["split"]["train"]]
    matrix = np.asarray(obs["matrix"])
    np.testing.assert_allclose(np.abs(matrix), np.abs(fit_psd(states, 6, "balanced_cotangent_lift").matrix().T),
                               atol=1e-10)
    assert np.max(np.abs(np.abs(matrix) - np.abs(fit_psd(states, 6).matrix().T))) > 1e-3  # not the plain lift
    out = tmp_path / "ro.h5"
    res = _rollout(["--data", str(held), "--model", str(run), "--out", str(out), "--decode-every", "10"])
    assert res.exit_code == 0, res.output
    table = (tmp_path / "ro_decoded.csv").read_text().splitlines()
    row = dict(zip(table[0].split(","), table[1].split(",")))
    manual = _manual_errors(out, held, lambda z: z @ matrix, 10)
    assert float(row["error_at_end"]) == pytest.approx(float(np.median(manual[:, -1])), rel=1e-12)


def test_autoencoder_file_trains_and_decodes_by_the_autoencoder(files, tmp_path):
    where, train, held = files
    ae = fit_symplectic_autoencoder(read_trajectories(train), 4, max_steps=10)
    path = tmp_path / "ae.npz"
    ae.save(path)
    run = tmp_path / "run"
    res = _train(["--data", str(train), "--model", "g_sympnet", "--observe", f"file:{path}", "--out", str(run)],
                 tmp_path)
    assert res.exit_code == 0, res.output
    rec = json.loads((run / "summary.json").read_text())["observation"]["reduction"]
    assert rec["kind"] == "symplectic_autoencoder" and rec["linear"] is False and rec["sha256"]
    out = tmp_path / "ro.h5"
    res = _rollout(["--data", str(held), "--model", str(run), "--out", str(out), "--decode-every", "10"])
    assert res.exit_code == 0, res.output
    # the reference the models are scored on is the autoencoder's encoding of the full reference
    with h5py.File(out, "r") as f:
        ref = np.asarray(f["reference"]["y"])
    np.testing.assert_allclose(ref[:, 0], ae.encode(read_trajectories(held).y[:, 0]), atol=1e-12)
    row = (tmp_path / "ro_decoded.csv").read_text().splitlines()
    got = dict(zip(row[0].split(","), row[1].split(",")))
    manual = _manual_errors(out, held, ae.decode, 10)
    assert float(got["error_at_end"]) == pytest.approx(float(np.median(manual[:, -1])), rel=1e-12)
    # the file changed since training: refused in one line
    save_reduction(fit_psd(read_trajectories(train), 4), path)
    res = _rollout(["--data", str(held), "--model", str(run), "--out", str(tmp_path / "ro2.h5")])
    assert res.exit_code != 0 and "has changed since" in res.output and res.output.count("\n") == 1


def test_bad_reductions_and_steps_are_one_line(files, tmp_path):
    where, train, held = files
    big = tmp_path / "big.npz"
    other = _toda(20, [0.3, 0.4])
    save_reduction(fit_psd(other, 4), big, fitted_on=other)
    cases = [
        (["--observe", f"file:{big}"], "big.npz: a reduction of a toda lattice of N = 20"),
        (["--observe", "psd:200"], "needs 100 basis vectors"),
        (["--observe", "psd:5"], "psd:K with an even K"),
        (["--observe", "psd_balanced:5"], "psd_balanced:K with an even K"),
        (["--observe", "psd:4", "--set", "step=0.7"], "step = 0.7 is not a multiple of the step 0.5"),
    ]
    for args, words in cases:
        res = _train(["--data", str(train), "--model", "g_sympnet", *args, "--out", str(tmp_path / "r")], tmp_path)
        assert res.exit_code != 0 and words in res.output, (args, res.output)
        assert "Traceback" not in res.output and res.output.strip().count("\n") == 0, res.output
        assert not (tmp_path / "r").exists()


def test_a_model_on_one_reduction_refuses_another(files, tmp_path):
    where, train, held = files
    run = tmp_path / "run"
    assert _train(["--data", str(train), "--model", "g_sympnet", "--observe", "psd:4", "--out", str(run)],
                  tmp_path).exit_code == 0
    other = tmp_path / "other.npz"
    save_reduction(fit_psd(read_trajectories(train), 4, "complex_svd"), other)
    res = _rollout(["--data", str(held), "--model", str(run), "--observe", f"file:{other}",
                    "--out", str(tmp_path / "ro.h5")])
    assert res.exit_code != 0 and "rolls out on the observation it was trained on" in res.output
    assert res.output.strip().count("\n") == 0
    # a run on the full state has nothing to decode: refused once planned, before it runs (issue 69: after)
    res = _rollout(["--data", str(held), "--integrators", "stormer_verlet", "--out", str(tmp_path / "ro3.h5"),
                    "--decode-every", "2"])
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    assert "--decode-every: this run is on the full state: there is nothing to decode" in res.output.strip().splitlines()[-1]
    assert not (tmp_path / "ro3.h5").exists() and not list(tmp_path.glob("ro3*"))


def test_observation_decode_refuses_an_observation_that_is_not_a_reduction():
    from vpintegrator.data.observation import resolve_observation

    obs = resolve_observation("0,1", 4)
    with pytest.raises(VPIntegratorError, match="is not a reduction"):
        obs.decode(np.ones(2))


def test_fit_from_python_trains_on_a_reduction_at_a_step(files, tmp_path):
    from vpintegrator.training import fit

    where, train, held = files
    res = fit({"data": [str(train)], "model": {"name": "g_sympnet"}, "observe": "psd:4", "step": 1.5, "epochs": 1,
               "batch_size": 64, "dtype": "float64", "test_fraction": 0, "out": str(tmp_path / "run")})
    assert res.model.dim == 4 and res.model.trained_on["observation"]["reduction"]["kind"] == "psd"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["dt"] == 1.5
