"""The partial-observation study's Toda case (issue 55 item 5): the Toda lattice in a few PSD coordinates, trained
on toda_bump's initial conditions and scored on held-out mu between them, against the exact flow projected on the
basis fitted on the training split."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest


def test_the_toda_system_leaves_out_the_full_state_row():
    """The plan's training runs for toda are the others' without ``fullstate`` (its LM Jacobian on 100
    components does not fit); the other systems keep it."""
    from vpintegrator.studies.options import parse
    from vpintegrator.studies.partial_observation import STUDY, build_plan

    plan = build_plan(parse(STUDY, ["--out", "r", "--quick", "--set", "systems=toda"]))
    assert plan.systems == ("toda",)
    assert ("fullstate", 1) in plan.training_runs("coupled_oscillator")
    assert [r for r in plan.training_runs("toda") if r[0] == "fullstate"] == []
    assert set(plan.training_runs("toda")) == set(plan.training_runs()) - {("fullstate", 1)}


def test_toda_is_in_the_quick_run_but_not_the_default_size():
    """The default size stays within its two hours without the lattice (about 45 min more); --quick has it."""
    from vpintegrator.studies.options import parse
    from vpintegrator.studies.partial_observation import STUDY, SYSTEMS, build_plan

    assert build_plan(parse(STUDY, ["--out", "r"])).systems == ("coupled_oscillator", "rigid_body")
    assert build_plan(parse(STUDY, ["--out", "r", "--quick"])).systems == tuple(SYSTEMS)
    assert "toda" in SYSTEMS


def test_toda_held_out_mu_are_the_midpoints_between_the_training_values_and_never_one_of_them():
    """``heldout_mu(n)``: n midpoints of equal bins of [0.30, 0.60]; n = 10 gives toda_bump_heldout's ten
    (the reduction study's held-out split); n = 100 has no training mu (0.30, 0.33 ... 0.60) among them."""
    from vpintegrator.data import load_spec
    from vpintegrator.studies.partial_observation import heldout_mu

    ten = load_spec("toda_bump_heldout").sampler_args["mu"]
    assert heldout_mu("toda", 10) == pytest.approx(ten, abs=1e-12)
    train = [0.30 + 0.03 * j for j in range(11)]
    hundred = heldout_mu("toda", 100)
    assert len(set(hundred)) == 100 and 0.30 < min(hundred) and max(hundred) < 0.60
    assert min(abs(m - t) for m in hundred for t in train) == pytest.approx(0.0015, abs=1e-9)


@pytest.mark.slow
def test_the_toda_case_scores_held_out_conditions_on_the_training_splits_psd_basis(tmp_path):
    """End to end from the study's command (one tiny run): the rows are scored on ``n_test`` = 12 held-out
    conditions (mu at the midpoints of 12 equal bins of the training range, none a training mu), observed in the PSD basis of the training split (recomputed here from the split rule and
    ``fit_psd``), and each row's median relative error at t = 10 and t = 100 (observed, and decoded to the full
    state) is what a direct computation from the rollout file gives."""
    from vpintegrator.data import read_rollout, read_trajectories
    from vpintegrator.data.split_rule import split_train_val_test
    from vpintegrator.models import load_model
    from vpintegrator.reduction.psd import fit_psd
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.partial_observation import RECIPE, STUDY, heldout_mu

    out = tmp_path / "po"
    args = ["--out", str(out), "--quick", "--set", "systems=toda", "--set", "windows=2", "--set",
            "budget_seconds=0.5", "--set", "patience=1", "--set", "n_test=12", "--set", "approaches=delay_mlp,fullstate", "--seeds", "0",
            "-q"]
    assert main(STUDY, args) == 0
    rows = json.loads((out / "partial_observation.json").read_text())["rows"]
    labels = {r["label"] for r in rows}
    # no fullstate (left out for toda), no estimate row; the parrot and delay SINDy fitted on the training file
    assert labels == {"delay_mlp_T2", "parrot"} | ({"delay_sindy+rk4"} if importlib.util.find_spec("pysindy")
                                                   else set())
    train = read_trajectories(out / "data" / "toda_train_N50_t20.h5")
    held = read_trajectories(out / "data" / "toda_heldout_N50_n12_t100.h5")
    assert train.y.shape[0] == 11 and held.y.shape[0] == 12 and held.y.shape[-1] == 100
    mu_train, mu_held = (json.loads(d.meta["sampler_args"])["mu"] for d in (train, held))
    assert len(mu_train) == 11 and not set(mu_train) & set(mu_held)  # held out
    assert mu_held == pytest.approx([0.30 + 0.30 * (k + 0.5) / 12 for k in range(12)], abs=1e-12)
    assert heldout_mu("toda", 12) == mu_held

    # the basis: the cotangent-lift PSD of the models' training split (vp-train's split rule, the recipe's fractions)
    idx, _, _ = split_train_val_test(11, RECIPE["val_fraction"], RECIPE["test_fraction"], 0)
    basis = fit_psd(train.y[idx].reshape(-1, 100), 4).matrix().T  # (4, 100)
    model = load_model(out / "runs" / "toda" / "delay_mlp_T2_seed0")
    np.testing.assert_allclose(np.asarray(model.trained_on["observation"]["matrix"]), basis, atol=1e-12)

    ref = held.y @ basis.T  # the exact flow, observed
    ro = read_rollout(out / "rollouts" / "toda_seed0.h5")
    np.testing.assert_allclose(np.asarray(ro.reference.y), ref, rtol=1e-8, atol=1e-10)
    for label in ("delay_mlp_T2", "parrot"):
        row = next(r for r in rows if r["label"] == label)
        y = np.asarray(ro.methods[label].y)
        for t, k in ((10, 50), (100, 500)):
            err = np.linalg.norm(y[:, k] - ref[:, k], axis=-1) / np.linalg.norm(ref[:, k], axis=-1)
            full = np.linalg.norm(y[:, k] @ basis - held.y[:, k], axis=-1) / np.linalg.norm(held.y[:, k], axis=-1)
            err, full = np.where(np.isfinite(err), err, np.inf), np.where(np.isfinite(full), full, np.inf)
            assert row[f"err_t{t}"]["n"] == 12
            assert row[f"err_t{t}"]["median"] == pytest.approx(float(np.percentile(err, 50)),
                                                               rel=1e-9)
            assert row[f"full_err_t{t}"]["median"] == pytest.approx(
                float(np.percentile(full, 50)), rel=1e-9)
    text = (out / "partial_observation.md").read_text()
    assert "## toda, observed in psd:4" in text and "No `estimate` row" in text
