"""The shipped context-conditioned Lie–Poisson map ``pretrained:rigid_body_family_lpnet`` (issue 34): a
``lpnet_ctx`` that keeps the Casimir and the Poisson structure for every context, and that ``vp-rollout
--model`` rolls out on any parametric rigid-body file, the context read from each trajectory's first states."""

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

NAME = "rigid_body_family_lpnet"


def test_shipped_with_its_provenance():
    assert NAME in vp.list_pretrained()
    model = vp.load_model(f"pretrained:{NAME}")
    assert type(model).__name__ == "ContextLiePoissonNet" and model.context_len == 3 and model.dim == 3
    prov = json.loads((vp.models.files.PRETRAINED_DIR / "provenance.json").read_text())["models"][NAME]
    best = min(prov["val_by_seed"], key=prov["val_by_seed"].get)  # the best validation seed, of 5
    assert prov["file"] == f"{NAME}.pt" and int(best) == prov["seed"] and len(prov["val_by_seed"]) == 5
    assert prov["best_val"] == prov["val_by_seed"][best] and prov["source"].endswith("best.pt")


def test_keeps_casimir_and_poisson_for_any_context():
    model = vp.load_model(f"pretrained:{NAME}").double()
    for c in ([0.0, 0.0, 0.0], [0.1, -0.3, 0.2]):
        errs = assert_preserves(model, context=np.asarray(c), atol=1e-10)
        assert {"casimir", "poisson"} <= set(errs)


def test_vp_rollout_on_a_parametric_file(tmp_path):
    data = tmp_path / "fam.h5"
    generate(load_spec("rigid_body_family", n_traj=12, t_end=2.0), out=data, workers=1)
    res = CliRunner().invoke(rollout_main, ["--data", str(data), "--model", f"pretrained:{NAME}", "--integrators",
                                            "rk4", "--t-end", "4", "--out", str(tmp_path / "ro.h5")])
    assert res.exit_code == 0, res.output
    ro = read_rollout(tmp_path / "ro.h5")
    label = next(k for k in ro.methods if k not in ("rk4",) and not k.endswith("_oracle"))
    y, ref = ro.methods[label].y, ro.reference.y
    np.testing.assert_array_equal(y[:, :3], ref[:, :3])  # the context prefix: the trajectory's first states
    err = np.linalg.norm(y[:, -1] - ref[:, -1], axis=-1) / np.linalg.norm(ref[:, -1], axis=-1)
    # each body's own dynamics: a parameter-blind map stays near the identity map's ~0.4 at t = 4
    assert np.median(err) < 1e-2
    norms = np.linalg.norm(y, axis=-1)  # every step a rotation: ‖z‖ of the last prefix state kept
    assert np.abs(norms[:, 3:] - norms[:, 2:3]).max() < 1e-12
