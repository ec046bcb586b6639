"""The context study's pieces (vpintegrator.studies.context, issue 34): the held-out pairs come from the
region the split held out, the rows are the methods' own rollouts, the summary's statistics and tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vpintegrator.errors import VPIntegratorError
from vpintegrator.studies.context import evaluate_methods, heldout_pairs, summarize_rows, tables

pytestmark = pytest.mark.usefixtures("one_thread")

BOX = {"columns": ["inertia[0]", "inertia[1]", "inertia[2]"], "low": [0.5, 0.5, 0.5], "high": [3.0, 3.0, 3.0]}


def _u(systems):
    inertia = np.array([s.inertia for s in systems])
    return (inertia - 0.5) / 2.5


def test_interpolation_pairs_lie_in_the_held_out_cube():
    split = {**BOX, "mode": "interpolation", "center": [0.3, 0.6, 0.5], "radius": 0.2}
    systems, y0 = heldout_pairs(split, 200, 1)
    u = _u(systems)
    assert np.abs(u - [0.3, 0.6, 0.5]).max() <= 0.2 + 1e-12
    assert np.abs(u - [0.3, 0.6, 0.5]).max(1).min() < 0.05  # spread over the cube, not one point
    np.testing.assert_allclose(np.linalg.norm(y0, axis=1), 1.0, rtol=1e-14)
    again, y0b = heldout_pairs(split, 200, 1)
    np.testing.assert_array_equal(_u(again), u)
    np.testing.assert_array_equal(y0b, y0)
    other, _ = heldout_pairs(split, 200, 2)
    assert not np.array_equal(_u(other), u)


def test_extrapolation_pairs_lie_at_the_ends_of_the_box():
    split = {**BOX, "mode": "extrapolation", "center": [0.5, 0.5, 0.5], "radius": 0.4}
    systems, _ = heldout_pairs(split, 150, 0)
    u = _u(systems)
    assert len(systems) == 150
    assert (np.abs(u - 0.5).max(1) >= 0.4).all() and (u >= 0).all() and (u <= 1).all()


@pytest.mark.parametrize("radius", [0.5, 0.7])
def test_an_extrapolation_split_with_nothing_outside_is_refused_not_looped_on(radius):
    split = {**BOX, "mode": "extrapolation", "center": [0.5, 0.5, 0.5], "radius": radius}
    with pytest.raises(VPIntegratorError, match="leaves no held-out region") as info:
        heldout_pairs(split, 5, 0)
    assert info.value.key == "split_by" and "\n" not in str(info.value)


def test_pairs_need_the_inertia_columns():
    with pytest.raises(VPIntegratorError, match="three inertias"):
        heldout_pairs({**BOX, "columns": ["mass"], "mode": "interpolation", "center": [0.5], "radius": 0.1}, 5)


def test_rows_are_the_methods_rollouts_and_the_summary_their_medians():
    from vpintegrator.rollout import IdentifiedStep, IntegratorStep
    from vpintegrator.rollout.family import FamilyStep
    from vpintegrator.systems import RigidBody
    from vpintegrator.systems.family import SystemFamily

    split = {**BOX, "mode": "interpolation", "center": [0.5, 0.5, 0.5], "radius": 0.3}
    systems, y0 = heldout_pairs(split, 6, 0)
    methods = {"oracle rk4": lambda: FamilyStep(SystemFamily(systems), lambda s: IntegratorStep(s, "rk4", 0.2)),
               "fd+rk4": lambda: IdentifiedStep(RigidBody(), "fd", "rk4", 0.2, context_len=3)}
    rows = evaluate_methods(methods, systems, y0, 3, 0.0, horizons=(0.2, 2.0, 4.0))
    assert [r["method"] for r in rows] == ["oracle rk4", "fd+rk4"]
    oracle, fd = rows
    assert set(oracle["errors"]) == {"2", "4"}  # t = 0.2 lies inside the 3-state prefix
    assert max(oracle["errors"]["4"]) < 1e-5 < np.median(fd["errors"]["4"]) < 1e-2  # RK4 with true θ vs fitted θ
    assert oracle["failed"] == fd["failed"] == 0 and oracle["casimir_per_state"] < 1e-5
    seeded = [{"split": "interpolation", "context_len": 3, "noise": 0.0, "seed": s, **r}
              for s in (0, 1, 2) for r in rows]
    summary = summarize_rows(seeded)
    s = next(x for x in summary if x["method"] == "fd+rk4" and x["t"] == 4.0)
    assert s["median"] == pytest.approx(float(np.median(fd["errors"]["4"])))
    assert s["seeds"] == [0, 1, 2] and s["failed"] == 0
    text = tables(summary)
    assert "| fd+rk4 |" in text and "| oracle rk4 |" in text and "context_len 3" in text


def test_merge_rows_replaces_a_reruns_own_rows_and_keeps_the_others():
    from vpintegrator.studies.context import merge_rows

    def row(method, seed, noise=0.0, system=None, value=1.0):
        r = {"split": "interpolation", "context_len": 3, "noise": noise, "seed": seed, "method": method,
             "errors": {"10": [value]}}
        return r if system is None else {"system": system, **r}

    old = [row("lpnet_ctx", 0), row("lpnet_ctx", 1), row("fd+rk4", 0), row("lpnet_ctx", 0, noise=0.01)]
    new = [row("lpnet_ctx", 0, system="rigid_body", value=2.0), row("g_sympnet_ctx", 0, system="coupled_oscillator")]
    merged = merge_rows(old, new)
    # the old rigid-body row (no "system": the rigid body's) with the new row's key is replaced, the rest kept
    assert len(merged) == 5
    seed0 = [r for r in merged if r["method"] == "lpnet_ctx" and r["seed"] == 0 and r["noise"] == 0.0]
    assert len(seed0) == 1 and seed0[0]["errors"]["10"] == [2.0]
    assert {(r["method"], r["seed"], r["noise"]) for r in merged} == {
        ("lpnet_ctx", 0, 0.0), ("lpnet_ctx", 1, 0.0), ("fd+rk4", 0, 0.0), ("lpnet_ctx", 0, 0.01),
        ("g_sympnet_ctx", 0, 0.0)}
    assert merge_rows(merged, new) == merged  # a re-run of the same keys changes nothing


OSC = {"columns": ["m[0]", "m[1]", "k1", "k2", "k"], "low": [0.5, 0.5, 1.0, 0.1, 0.5], "high": [2.0, 2.0, 2.0, 0.5, 1.5]}


def test_oscillator_pairs_lie_in_the_held_out_cube_with_box_initial_conditions():
    split = {**OSC, "mode": "interpolation", "center": [0.3, 0.6, 0.5, 0.4, 0.7], "radius": 0.2}
    systems, y0 = heldout_pairs(split, 100, 3, "coupled_oscillator")
    low, high = np.array(OSC["low"]), np.array(OSC["high"])
    values = np.array([[s.m[0], s.m[1], s.k1, s.k2, s.k] for s in systems])
    u = (values - low) / (high - low)
    assert np.abs(u - split["center"]).max() <= 0.2 + 1e-12
    assert y0.shape == (100, 4) and (np.abs(y0[:, :2]) <= 1).all() and (np.abs(y0[:, 2:]) <= 2).all()
    assert np.abs(y0[:, 2:]).max() > 1.5  # the momenta fill their box
    with pytest.raises(VPIntegratorError, match="masses and springs"):
        heldout_pairs({**BOX, "mode": "interpolation", "center": [0.5] * 3, "radius": 0.1}, 5, 0, "coupled_oscillator")


def test_energy_structure_is_the_largest_relative_energy_error_past_the_prefix():
    from vpintegrator.studies.context import exact_reference, structure_per_state

    split = {**OSC, "mode": "interpolation", "center": [0.5] * 5, "radius": 0.3}
    systems, y0 = heldout_pairs(split, 3, 0, "coupled_oscillator")
    ref = exact_reference(systems, y0, 30)
    assert structure_per_state("energy", ref, systems, 5) < 1e-9  # the exact flow keeps each pair's energy
    bad = ref.copy()
    bad[1, 20:, 2:] *= 1.1  # momenta 10 % too large from step 20
    e = structure_per_state("energy", bad, systems, 5)
    assert 1e-3 < e < 0.5
    bad[2, 7] = np.nan  # a blown-up row is left out
    assert structure_per_state("energy", bad, systems, 5) == pytest.approx(e)


def test_the_attention_row_trains_by_its_recipe(tmp_path, monkeypatch):
    from vpintegrator.studies import context

    calls = []
    monkeypatch.setattr(context.evaluation, "run_child", lambda cmd, **kw: calls.append(cmd))
    run = context.train_run(tmp_path / "d.h5", tmp_path, "lpnet_ctx_attention", 2, 30, 3, "interpolation")
    assert run == tmp_path / "runs" / "lpnet_ctx_attention_k3_interpolation_seed2"
    cmd = calls[0]
    assert cmd[cmd.index("--model") + 1] == "lpnet_ctx" and cmd[cmd.index("--optimizer") + 1] == "adam"
    assert cmd[cmd.index("--epochs") + 1] == "120" and "model.encoder=attention" in cmd
    assert "model.context_len=3" in cmd and not any(c.startswith("lm_windows") for c in cmd)
    # the LM rows keep their command line
    context.train_run(tmp_path / "d.h5", tmp_path, "lpnet_ctx_attention", 2, 2, 3, "interpolation")
    assert calls[1][calls[1].index("--epochs") + 1] == "8"  # its Adam epochs scale with the study's --epochs
    context.train_run(tmp_path / "d.h5", tmp_path, "lpnet_ctx", 2, 30, 3, "interpolation", context.LPNET_CTX)
    cmd = calls[2]
    assert cmd[cmd.index("--optimizer") + 1] == "lm" and cmd[cmd.index("--epochs") + 1] == "30"
    assert [c for c in cmd if "=" in c] == ["lm_windows=4096", "model.n_layers=10", "model.width=4",
                                            "model.context_len=3"]


def test_study_on_a_tiny_oscillator_family_accumulates_rows_over_invocations(tmp_path, capsys):
    import json

    from click.testing import CliRunner

    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.studies.context import STUDY
    from vpintegrator.studies.driver import main as run_study

    data = tmp_path / "cof.h5"
    res = CliRunner().invoke(gen_main, ["coupled_oscillator_family", "--set", "n_traj=24", "--set", "t_end=4",
                                        "--dt", "0.2", "--out", str(data), "--workers", "1"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "study"
    base = ["--data", str(data), "--out", str(out), "--seeds", "0", "--epochs", "1", "--n-test", "4",
            "--models", "g_sympnet_ctx", "--context-lens", "5", "--splits", "interpolation"]
    assert run_study(STUDY, [*base, "--noise", "0"]) == 0
    rows = json.loads((out / "context_study.json").read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert methods == {"g_sympnet_ctx", "g_sympnet_ctx oracle context", "fd+gauss_legendre4",
                       "shooting+gauss_legendre4", "oracle gauss_legendre4", "parrot"}
    assert {r["system"] for r in rows} == {"coupled_oscillator"} and all(r["context_len"] == 5 for r in rows)
    shoot = next(r for r in rows if r["method"] == "shooting+gauss_legendre4")
    oracle = next(r for r in rows if r["method"] == "oracle gauss_legendre4")
    assert np.median(shoot["errors"]["10"]) < 1e-3 and oracle["energy_per_state"] < 1e-4
    # a second invocation on another axis adds its rows; the first invocation's stay
    assert run_study(STUDY, [*base, "--noise", "0.01"]) == 0
    doc = json.loads((out / "context_study.json").read_text())
    assert sorted({r["noise"] for r in doc["rows"]}) == [0.0, 0.01] and len(doc["rows"]) == 2 * len(rows)
    assert len(doc["commands"]) == 2
    text = (out / "context_study.md").read_text()
    assert "coupled_oscillator: interpolation, context_len 5, noise σ = 0.01" in text
    assert "max relative energy error" in text
    # --figures-only redraws from the json and changes nothing in it
    before = (out / "context_study.json").read_text()
    assert run_study(STUDY, ["--data", str(data), "--out", str(out), "--figures-only"]) == 0
    assert (out / "context_study.json").read_text() == before
    assert (out / "context_coupled_oscillator_noise.png").exists()
    # --figures-only --results: the tables of a results file (e.g. the shipped one) redrawn into another --out
    redraw = tmp_path / "redraw"
    results = str(out / "context_study.json")
    assert run_study(STUDY, ["--out", str(redraw), "--figures-only", "--results", results]) == 0
    assert (redraw / "context_study.md").read_text() == text
    assert (redraw / "context_coupled_oscillator_noise.png").exists() and not (redraw / "context_study.json").exists()
    # --export ships the family's g_sympnet_ctx seed with the lowest validation loss, with what it was
    # trained on (the data file's vp-gen command), its recipe and its seed's median error at t = 10
    ship = tmp_path / "ship"
    assert run_study(STUDY, ["--data", str(data), "--out", str(out), "--export", str(ship)]) == 0
    entry = json.loads((ship / "provenance.json").read_text())["models"]["coupled_oscillator_family_g_sympnet_ctx"]
    assert entry["file"] == "coupled_oscillator_family_g_sympnet_ctx.pt" and entry["seed"] == 0
    assert entry["source"] == "runs/g_sympnet_ctx_k5_interpolation_seed0/best.pt"
    assert entry["trained_on"]["data"]["command"].startswith("vp-gen coupled_oscillator_family --dt 0.2 --t-end 4 ")
    assert entry["trained_on"]["split"]["split_by"] == "parameters_interpolation"
    assert "--models g_sympnet_ctx" in entry["recipe"]["command"] and "--epochs 1" in entry["recipe"]["command"]
    seed0 = next(r for r in rows if r["method"] == "g_sympnet_ctx" and r["noise"] == 0)
    from vpintegrator.studies.stats import median_interval

    assert entry["metrics"]["rel_error_t10_median"] == median_interval(seed0["errors"]["10"])["median"]
    import torch

    shipped = torch.load(ship / entry["file"], weights_only=True)
    assert shipped["dt"] == 0.2 and shipped["system"] == "coupled_oscillator" and shipped["parametric"] is True


def test_an_identification_refused_for_one_pair_fails_that_pair_only():
    from vpintegrator.rollout import IdentifiedStep
    from vpintegrator.systems import CoupledOscillator

    split = {**OSC, "mode": "interpolation", "center": [0.5] * 5, "radius": 0.3}
    systems, y0 = heldout_pairs(split, 8, 0, "coupled_oscillator")

    def fd(sigma):
        return {"fd": lambda: IdentifiedStep(CoupledOscillator(), "fd", "gauss_legendre4", 0.2, context_len=5,
                                             noise=sigma)}

    # σ = 0.3: pair 3's noisy prefix fits a negative mass (a one-line refusal for the whole batch)
    noisy = evaluate_methods(fd(0.3), systems, y0, 5, 0.3, (2.0,), 0.2, "energy")[0]
    assert noisy["failed"] == 1 and noisy["errors"]["2"][3] == np.inf
    assert np.isfinite(np.delete(noisy["errors"]["2"], 3)).all()
    # the other pairs are the batch's rollouts of the same noise draw: σ = 0.1 refuses none, row by row or not
    clean = evaluate_methods(fd(0.1), systems, y0, 5, 0.1, (2.0,), 0.2, "energy")[0]
    assert clean["failed"] == 0


@pytest.mark.parametrize("args, message", [
    (["--noise", "0,-1"], "--noise must be a comma list of noise values >= 0; got '0,-1'"),
    (["--context-lens", "2"], "--context-lens must be a comma list of integers >= 3"),
    (["--context-lens", "3.5"], "--context-lens must be a comma list of integers >= 3"),
    (["--splits", "interp"], "--splits must be a comma list out of interpolation, extrapolation"),
    (["--seeds", "1,1"], "--seeds: 1 is given twice; give each once"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--set", "n_test=0"], "--n-test must be a positive integer"),
    ([], "--data is required"),
    (["--figures-only"], "context_study.json not found"),
    (["--figures-only", "--results", "no.json"], "--results: 'no.json' is neither a file nor a shipped results name; "
                                                 "shipped: context_oscillator"),
    (["--results", "x.json"], "--results is read by --table-only only"),
    (["--data", "DATA", "--models", "lpnet_ctxx"], "--models: unknown model 'lpnet_ctxx' (did you mean 'lpnet_ctx'?)"),
    (["--data", "DATA", "--models", "lpnet,lpnet"], "--models: 'lpnet' is given twice; give each once"),
    # a failed training (here: a model path that does not import) is one line naming the run, not a traceback
    (["--data", "DATA", "--models", "no_such_package:Net", "--splits", "interpolation", "--seeds", "0"],
     "vp-train of "),
])
def test_bad_context_study_input_is_one_line_and_writes_nothing(args, message, tmp_path, capsys):
    import h5py

    from vpintegrator.studies.context import STUDY
    from vpintegrator.studies.driver import main as run_study

    data = tmp_path / "d.h5"
    with h5py.File(data, "w") as f:  # what the study reads before it trains: the system and the step
        f.attrs["system"], f.attrs["dt"] = "rigid_body", 0.2
    out = tmp_path / "study"
    argv = [str(data) if a == "DATA" else a for a in args]
    assert run_study(STUDY, ["--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("context study: error: ")]
    assert len(ours) == 1 and message in ours[0]
    if "vp-train" not in message:
        assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_context_study_keys_from_a_plan_file(tmp_path, capsys):
    """The study's keys are Config keys: a --plan TOML file gives them (arrays or comma lists), --set and
    the flags go on top, and every value is checked once."""
    from vpintegrator.studies.context import STUDY
    from vpintegrator.studies.options import parse

    plan = tmp_path / "plan.toml"
    plan.write_text('out = "run"\nnoise = [0, 0.01]\ncontext_lens = "5,10"\nsplits = ["extrapolation"]\n'
                    'seeds = [2, 3]\n')
    a = parse(STUDY, ["--plan", str(plan), "--set", "epochs=3", "--n-test", "7"])
    assert (a.out, a.noise, a.context_lens, a.splits, a.seeds, a.epochs, a.n_test) == \
        ("run", [0.0, 0.01], [5, 10], ["extrapolation"], [2, 3], 3, 7)
    assert parse(STUDY, ["--out", "r"]).noise is None  # not given: the study's default axis
    plan.write_text('out = "run"\nnoise_level = 0.1\n')
    from vpintegrator.studies.runner import StudyError

    with pytest.raises(StudyError, match="noise_level"):
        parse(STUDY, ["--plan", str(plan)])


@pytest.mark.skipif(not (Path(__file__).resolve().parent.parent / "docs" / "data" / "context_oscillator.json").is_file(),
                    reason="repository files (not in the wheel)")
def test_shipped_oscillator_results_redraw_the_docs_tables():
    """docs/data/context_oscillator.json is the results file the coupled-oscillator tables of docs/context.md
    (section 7) come from (issue 46, item 4): its 5-seed medians at t = 10 [bootstrap 95 %] are the ones the
    page prints, and every command it records is the study's module (no path of the machine it ran on)."""
    from pathlib import Path

    from vpintegrator.studies.context import read_study_json, summarize_rows
    from vpintegrator.studies.stats import fmt_g as _g

    root = Path(__file__).resolve().parent.parent
    doc = read_study_json(root / "docs" / "data" / "context_oscillator.json")
    assert doc["commands"] and all(c.startswith("python -m vpintegrator.studies.context ") for c in doc["commands"])
    summary = summarize_rows(doc["rows"])
    text = (root / "docs" / "context.md").read_text()

    def shown(x):
        return _g(x).replace("e-0", "e-")

    for method in ("g_sympnet_ctx", "g_sympnet", "shooting+gauss_legendre4", "oracle gauss_legendre4"):
        s = next(x for x in summary if (x["system"], x["split"], x["context_len"], x["noise"], x["method"], x["t"])
                 == ("coupled_oscillator", "interpolation", 5, 0.0, method, 10.0))
        assert sorted(s["seeds"]) == [0, 1, 2, 3, 4]
        assert f"{shown(s['median'])} [{shown(s['boot_lo'])}, {shown(s['boot_hi'])}]" in text, method
