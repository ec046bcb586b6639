"""A checkpoint and summary.json record the step, the system and its parameters of the training data;
vp-rollout refuses a model trained at another step or on another system (issue 33, item 1), and
``init_from`` accepts every shipped pretrained model (item 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator.cli import rollout as rollout_cli
from vpintegrator.data import integrate
from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.models import load_checkpoint


def _data(path, dt, n_states=8, system="rigid_body", dim=3, seed=0, **params):
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(6, dim)) * 0.5
    if system == "rigid_body":
        y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    traj = integrate(vp.get_system(system, **params) if params else system, y0, dt, n_states - 1, method="rk4")
    return str(write_trajectories(path, traj))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained_on")
    data = _data(root / "h02.h5", 0.2)
    torch.set_num_threads(1)
    vp.fit(dict(data=[data], epochs=1, model={"name": "vpt", "seq_len": 2, "n_blocks": 1}, out=str(root / "run"),
                val_fraction=0.34, test_fraction=0.0, dtype="float64", batch_size=64))
    return root


def test_checkpoints_and_summary_record_dt_system_and_parameters(run):
    want_params = vp.get_system("rigid_body").params()
    for name in ("best.pt", "last.pt"):
        ckpt = load_checkpoint(run / "run" / name)
        assert ckpt["dt"] == pytest.approx(0.2, rel=1e-12) and ckpt["system"] == "rigid_body"
        assert ckpt["parametric"] is False
        assert set(ckpt["system_params"]) == set(want_params)
        np.testing.assert_allclose(ckpt["system_params"]["inertia"], want_params["inertia"])
    summary = json.loads((run / "run" / "summary.json").read_text())
    assert summary["dt"] == pytest.approx(0.2) and summary["system"] == "rigid_body"
    assert summary["data"]["system"] == "rigid_body"  # as before
    assert set(summary["system_params"]) == set(want_params)
    assert vp.load_model(run / "run").trained_on["dt"] == pytest.approx(0.2)


def _rollout(*args):
    return CliRunner().invoke(rollout_cli.main, [str(a) for a in args], catch_exceptions=False)


def test_rollout_refuses_another_step_unless_allowed(run):
    data01 = _data(run / "h01.h5", 0.1)
    result = _rollout("--data", data01, "--model", run / "run", "--out", run / "r01.h5", "--n-traj", 2, "-q")
    assert result.exit_code == 1 and not (run / "r01.h5").exists()
    line = result.output.strip()
    assert "\n" not in line and "dt = 0.2" in line and "dt = 0.1" in line and "--allow-dt-mismatch" in line, line
    ok = _rollout("--data", data01, "--model", run / "run", "--out", run / "r01.h5", "--n-traj", 2, "-q",
                  "--allow-dt-mismatch")
    assert ok.exit_code == 0, ok.output
    same = _rollout("--data", run / "h02.h5", "--model", run / "run", "--out", run / "r02.h5", "--n-traj", 2, "-q")
    assert same.exit_code == 0, same.output


def test_rollout_refuses_another_system_and_other_parameters(run):
    other = _data(run / "inertia.h5", 0.2, inertia=[3.0, 2.0, 1.0])
    result = _rollout("--data", other, "--model", run / "run", "--out", run / "ri.h5", "--n-traj", 2, "-q",
                      "--allow-dt-mismatch")
    assert result.exit_code == 1 and "inertia" in result.output and "\n" not in result.output.strip()
    volterra = _data(run / "volterra.h5", 0.2, system="volterra", seed=1)
    result = _rollout("--data", volterra, "--model", run / "run", "--out", run / "rv.h5", "--n-traj", 2, "-q")
    assert result.exit_code == 1 and "'rigid_body'" in result.output and "'volterra'" in result.output


def test_old_checkpoint_without_record_still_rolls_out(run):
    ckpt = torch.load(run / "run" / "best.pt", weights_only=True)
    for k in ("dt", "system", "system_params", "parametric"):
        ckpt.pop(k)
    torch.save(ckpt, run / "old.pt")
    assert not hasattr(vp.load_model(run / "old.pt"), "trained_on")
    data01 = _data(run / "h01b.h5", 0.1)
    result = _rollout("--data", data01, "--model", run / "old.pt", "--out", run / "rold.h5", "--n-traj", 2, "-q")
    assert result.exit_code == 0, result.output


def test_rollout_provenance_hashes_every_model_file(run):
    out = run / "rp.h5"
    result = _rollout("--data", run / "h02.h5", "--model", run / "run", "--model", "pretrained:rigid_body_vpt",
                      "--out", out, "--n-traj", 2, "-q")
    assert result.exit_code == 0, result.output
    import h5py

    with h5py.File(out, "r") as f:
        record = json.loads(f.attrs["provenance"])
    hashes = {e["sha256"] for e in record["inputs"]}
    from vpintegrator.provenance import file_sha256
    from vpintegrator.models.files import PRETRAINED_DIR

    assert file_sha256(run / "run" / "best.pt") in hashes
    assert file_sha256(PRETRAINED_DIR / "rigid_body_vpt.pt") in hashes
    assert all(not e["path"].startswith("/") for e in record["inputs"])


@pytest.mark.parametrize("name", vp.list_pretrained())
def test_init_from_every_shipped_pretrained_model(name, tmp_path):
    cfg = dict(load_checkpoint(f"pretrained:{name}")["config"])
    dim = int(cfg["dim"])
    system = "rigid_body" if dim == 3 else "coupled_oscillator"
    data = _data(tmp_path / "d.h5", 0.2, n_states=10, system=system, dim=dim)
    torch.set_num_threads(1)
    result = vp.fit(dict(data=[data], epochs=1, model=cfg, init_from=f"pretrained:{name}",
                         out=str(tmp_path / "run"), val_fraction=0.34, test_fraction=0.0, dtype="float64",
                         batch_size=64, lr=1e-12, lr_min=1e-13))
    assert result.epochs == 1
