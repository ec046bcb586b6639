"""Every shipped pretrained model records its step, system and split, and says so before use (issue 46, item 1):
``vp.pretrained_info(name)`` (torchvision's ``Weights.meta``), the same record inside the ``.pt`` file (so
``vp-rollout`` step-checks it like a ``vp-train`` run), and weights bit-identical to the files shipped before
the record was written (``weights_sha256`` in provenance.json was taken from those files)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator._shipped import pretrained_records
from vpintegrator.cli import rollout as rollout_cli
from vpintegrator.data.windows import split_train_val_test
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import count_parameters, load_checkpoint, weights_sha256

NAMES = vp.list_pretrained()
#: the weights of the shipped files as they were before issue 46 re-saved them with their record
OLD_WEIGHTS = {
    "coupled_oscillator_family_g_sympnet_ctx": "b01d6c8c8e43",  # shipped with its record (issue 46, item 4)
    "coupled_oscillator_g_sympnet": "5b9b7f32808b",
    "coupled_oscillator_symplectic_transformer": "61ccc8c71c25",
    "rigid_body_family_lpnet": "c4c494a22633",
    "rigid_body_lpnet": "4aedb187af44",
    "rigid_body_st": "c1eb8eab0180",
    "rigid_body_vpff": "d477b826df21",
    "rigid_body_vpt": "074579da83ea",
}


def test_every_shipped_model_is_covered():
    assert set(NAMES) == set(OLD_WEIGHTS) == set(pretrained_records())


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_the_files_shipped_before(name):
    ckpt = load_checkpoint(f"pretrained:{name}")
    digest = weights_sha256(ckpt["state_dict"])
    assert digest.startswith(OLD_WEIGHTS[name])
    assert vp.pretrained_info(name)["weights_sha256"] == digest


@pytest.mark.parametrize("name", NAMES)
def test_file_records_step_system_and_split_and_info_agrees(name):
    ckpt = load_checkpoint(f"pretrained:{name}")
    info = vp.pretrained_info(name)
    model = vp.load_model(f"pretrained:{name}")
    assert set(info) == set(vp.models.files.PRETRAINED_INFO_KEYS)
    assert info["name"] == name and info["file"] == f"{name}.pt"
    assert ckpt["dt"] == info["dt"] == model.trained_on["dt"] and info["dt"] in (0.2, 0.4)
    assert ckpt["system"] == info["system"] == model.trained_on["system"]
    assert info["system"] == ("coupled_oscillator" if name.startswith("coupled") else "rigid_body")
    assert ckpt["system_params"] == info["system_params"] and ckpt["parametric"] is info["parametric"]
    assert info["model"] == ckpt["config"] and info["n_params"] == count_parameters(model)
    split = model.training_split
    assert info["split"]["n_traj"] == ckpt["split_data"]["n_traj"] == sum(len(split[k]) for k in split)
    assert [info["split"][f"n_{k}"] for k in ("train", "val", "test")] == [len(split[k]) for k in ("train", "val", "test")]
    assert info["data"]["command"].startswith("vp-gen ") and info["recipe"]["command"]
    assert info["metrics"]["command"] and info["metrics"]["protocol"]
    assert info["selection"]["seed"] == info["split"]["seed"]
    json.dumps(info)  # plain data


@pytest.mark.parametrize("name", [n for n in NAMES if not pretrained_records()[n]["trained_on"].get("parametric")])
def test_recorded_split_is_the_runs_seeded_split_of_its_data(name):
    """The split is the one vp-train made from the run's seed (split_train_val_test), over the initial
    conditions of the spec that made its training data (their digest)."""
    info, ckpt = vp.pretrained_info(name), load_checkpoint(f"pretrained:{name}")
    s = info["split"]
    train, val, test = split_train_val_test(s["n_traj"], s["val_fraction"], s["test_fraction"], s["seed"])
    assert ckpt["split"] == {"train": train.tolist(), "val": val.tolist(), "test": test.tolist()}
    spec = vp.load_spec(info["data"]["spec"], **info["data"].get("overrides", {}))
    first = vp.generate(spec.replace(t_end=2 * spec.dt))
    assert float(first.dt) == info["dt"]
    from vpintegrator.data.trajectories import first_states_digest

    assert ckpt["split_data"] == {"n_traj": first.n_traj, "first_states_sha256": first_states_digest(first.y[:, 0])}


@pytest.mark.parametrize("name", NAMES)
def test_the_recipe_is_a_command_a_pip_user_can_run(name):
    """Issue 88: no repository path (``configs/...``); a vp-train recipe names a shipped config, found by name
    (``vp-train NAME`` reads the packaged copy in a wheel), and trains on the file the data command writes."""
    from vpintegrator._shipped import config_path, list_configs

    recipe, data = vp.pretrained_info(name)["recipe"], vp.pretrained_info(name)["data"]
    assert "configs/" not in json.dumps(recipe)
    words = recipe["command"].split()
    if words[0] == "vp-train":
        assert words[1] == recipe["config"] in list_configs() and config_path(words[1]).is_file()
        assert words[words.index("--data") + 1] == data["command"].split("--out ")[1].split()[0]


def test_info_accepts_the_prefix_and_refuses_unknown_names_in_one_line():
    assert vp.pretrained_info("pretrained:rigid_body_vpt")["name"] == "rigid_body_vpt"
    with pytest.raises(VPIntegratorError, match=r"did you mean 'rigid_body_vpt'\?\); available: ") as err:
        vp.pretrained_info("rigid_body_vp")
    assert "\n" not in str(err.value)


def _data(path, system, dt, dim):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(3, dim)) * 0.5
    if system == "rigid_body":
        y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    traj = vp.integrate(system, y0, dt, 6, method="rk4")
    from vpintegrator.data.trajectory_files import write_trajectories

    return str(write_trajectories(path, traj))


@pytest.mark.parametrize("name, system, dim, trained, other", [
    ("rigid_body_vpt", "rigid_body", 3, 0.2, 0.1),
    ("rigid_body_lpnet", "rigid_body", 3, 0.2, 0.1),
    ("coupled_oscillator_g_sympnet", "coupled_oscillator", 4, 0.4, 0.2),
])
def test_rollout_refuses_a_pretrained_model_at_another_step(tmp_path, name, system, dim, trained, other):
    torch.set_num_threads(1)
    data = _data(tmp_path / "d.h5", system, other, dim)
    args = ["--data", data, "--model", f"pretrained:{name}", "--out", str(tmp_path / "r.h5"), "-q"]
    result = CliRunner().invoke(rollout_cli.main, args)
    line = result.output.strip()
    assert result.exit_code == 1 and not (tmp_path / "r.h5").exists()
    assert "\n" not in line and f"dt = {trained:g}" in line and f"dt = {other:g}" in line, line
    assert "--allow-dt-mismatch" in line and f"pretrained:{name}" in line
    ok = CliRunner().invoke(rollout_cli.main, [*args, "--allow-dt-mismatch"])
    assert ok.exit_code == 0, ok.output
    same = _data(tmp_path / "same.h5", system, trained, dim)
    ok = CliRunner().invoke(rollout_cli.main, ["--data", same, "--model", f"pretrained:{name}", "--out",
                                               str(tmp_path / "same_r.h5"), "-q"])
    assert ok.exit_code == 0, ok.output
