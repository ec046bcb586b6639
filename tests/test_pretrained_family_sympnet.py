"""The shipped context-conditioned G-SympNet ``pretrained:coupled_oscillator_family_g_sympnet_ctx`` (issue 46,
item 4): the coupled-oscillator family row of docs/context.md, section 7, re-runnable from a shipped model. It
is symplectic for every context, reads its context from each trajectory's first states, carries its step,
system and split, and tells what it was trained on and reaches (``vp.pretrained_info``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator.cli.rollout import main as rollout_main
from vpintegrator.data import generate, load_spec
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.testing import assert_preserves

pytestmark = pytest.mark.usefixtures("one_thread")

NAME = "coupled_oscillator_family_g_sympnet_ctx"


def test_shipped_small_with_its_provenance_and_info():
    assert NAME in vp.list_pretrained()
    model = vp.load_model(f"pretrained:{NAME}")
    assert type(model).__name__ == "ContextGSympNet" and model.context_len == 5 and model.dim == 4
    path = vp.models.files.PRETRAINED_DIR / f"{NAME}.pt"
    assert path.stat().st_size < 64 * 1024  # kilobytes
    prov = json.loads((vp.models.files.PRETRAINED_DIR / "provenance.json").read_text())["models"][NAME]
    best = min(prov["val_by_seed"], key=prov["val_by_seed"].get)  # the best validation seed, of 5
    assert int(best) == prov["seed"] and len(prov["val_by_seed"]) == 5
    assert prov["source"] == f"runs/g_sympnet_ctx_k5_interpolation_seed{best}/best.pt"
    info = vp.pretrained_info(NAME)
    assert (info["dt"], info["system"], info["parametric"]) == (0.2, "coupled_oscillator", True)
    assert info["data"]["command"] == ("vp-gen coupled_oscillator_family --dt 0.2 --t-end 20 --n-traj 600 "
                                       "--out datasets/cof600.h5")
    assert info["split"]["split_by"] == "parameters_interpolation" and info["split"]["n_traj"] == 600
    assert "--models g_sympnet_ctx" in info["recipe"]["command"] and "--epochs 10" in info["recipe"]["command"]
    # its seed's median error at t = 10 on 100 held-out (initial condition, parameters) pairs (docs/context.md)
    assert 0.01 < info["metrics"]["rel_error_t10_median"] < 0.1
    assert info["n_params"] == vp.models.count_parameters(model) == 448


@pytest.mark.parametrize("c", [np.zeros(5), np.array([0.1, -0.3, 0.2, 0.05, 0.4])])
def test_symplectic_for_any_context(c):
    model = vp.load_model(f"pretrained:{NAME}").double()
    errs = assert_preserves(model, context=c, atol=1e-10, system="coupled_oscillator")
    assert errs["symplectic"] < 1e-12 and errs["volume"] < 1e-12


def test_vp_rollout_on_a_parametric_file(tmp_path):
    data = tmp_path / "fam.h5"
    generate(load_spec("coupled_oscillator_family", n_traj=12, t_end=2.0, dt=0.2), out=data, workers=1)
    res = CliRunner().invoke(rollout_main, ["--data", str(data), "--model", f"pretrained:{NAME}", "--integrators",
                                            "gauss_legendre4", "--t-end", "4", "--out", str(tmp_path / "ro.h5")])
    assert res.exit_code == 0, res.output
    ro = read_rollout(tmp_path / "ro.h5")
    label = next(k for k in ro.methods if k != "gauss_legendre4" and not k.endswith("_oracle"))
    y, ref = ro.methods[label].y, ro.reference.y
    np.testing.assert_array_equal(y[:, :5], ref[:, :5])  # the context prefix: the trajectory's first states
    err = np.linalg.norm(y[:, -1] - ref[:, -1], axis=-1) / np.linalg.norm(ref[:, -1], axis=-1)
    # each oscillator's own dynamics: the parameter-blind SympNet is at ~1 (docs/context.md, section 7)
    assert np.median(err) < 0.1
