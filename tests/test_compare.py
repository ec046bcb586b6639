"""``vp-study compare`` (issue 87, items 1–2): a problem in, its rows chosen from what is known, a verdict out;
``--dry-run`` prints the plan and runs nothing; bad input is one line before anything trains."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from vpintegrator.data import read_trajectories
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.studies.compare import _problem, rows_for
from vpintegrator.studies.driver import main

pytestmark = pytest.mark.usefixtures("one_thread")

#: a network by import path, as a user names their own (here one of the package's, not by its registry name)
#: sha256 (first 16 hex digits) of the tables the coupled-oscillator study drew from its archived results file
LEGACY_DIGEST = "4316a532040d71f0"
USER, USER_ROW = "vpintegrator.models.volume:VolumePreservingFeedForward", "VolumePreservingFeedForward"
TINY = ["--quick", "--n-train", "10", "--n-test", "4", "--n-steps", "10", "--max-steps", "20", "--seeds", "0,1"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """A --quick run on the rigid body at tiny sizes (RK4, the seeds' VPT, a user's network by import path, the
    identity): (out, exit, stdout)."""
    out = tmp_path_factory.mktemp("compare") / "run"
    stdout, said = io.StringIO(), io.StringIO()
    handler, logger = logging.StreamHandler(said), logging.getLogger("vpintegrator.rollout.run")
    logger.addHandler(handler)
    try:
        with contextlib.redirect_stdout(stdout):
            status = main("compare", ["--problems", "rigid_body", "--model", USER, "--rows",
                                      f"rk4,vpt,{USER_ROW},identity", *TINY, "--out", str(out)])
    finally:
        logger.removeHandler(handler)
    return out, status, stdout.getvalue(), said.getvalue()


def test_quick_run_writes_a_verdict_and_a_table(quick_run):
    out, status, stdout, said = quick_run
    assert status == 0
    result = json.loads((out / "compare.json").read_text())
    assert result["schema"] == "vpintegrator.compare/1"
    (problem,) = result["problems"]
    rows = {r["method"]: r for r in problem["rows"]}
    assert list(rows) == ["rk4", "vpt", USER_ROW, "identity"]
    assert rows[USER_ROW]["kind"] == "user" and rows[USER_ROW]["n_seeds"] == 2
    # the verdict line first on stdout, the one the file records
    assert stdout.splitlines()[0] == problem["verdict"]
    assert problem["verdict"].startswith("rigid_body: with the equations rk4 NRMSE ")
    assert "the seeds' VPT vpt NRMSE" in problem["verdict"] and "over 2 seeds" in problem["verdict"]
    # RK4 at dt 0.2 over 10 steps is close to the exact flow; the identity map is far from it
    assert rows["rk4"]["mean_nrmse"] < 1e-4 and rows["rk4"]["failed"] == 0
    # the identity map rolled out as a row: the baseline every row's vs_identity divides by
    assert rows["identity"]["kind"] == "baseline" and rows["identity"]["vs_identity"] == pytest.approx(1.0)
    assert rows["identity"]["mean_nrmse"] == pytest.approx(rows["rk4"]["mean_nrmse"] / rows["rk4"]["vs_identity"])
    assert rows["identity"]["mean_nrmse"] > 1e-2 and rows["identity"]["final_rel_error"] > 1e-2
    # the seeds: a median inside its [min, max]; every row priced on the one meter
    lo, hi = map(float, rows["vpt"]["mean_nrmse_range"])  # a seed that blew up: "inf" in strict JSON
    assert rows["vpt"]["n_seeds"] == 2 and lo <= float(rows["vpt"]["mean_nrmse"]) <= hi
    assert rows["rk4"]["seconds_per_step"] > 0 and rows["vpt"]["seconds_per_step"] > 0
    assert "| method | kind | final rel. error | mean NRMSE |" in (out / "compare.md").read_text()
    assert "identity (new): worse than the identity map" not in (out / "compare.md").read_text()
    # nor in the rollout's lines: the baseline is not held to itself ("... 1x that of holding the last given state")
    assert "vpt@s0: rolling out" in said and "identity (new): worse than the identity map" not in said
    # the work–precision ladder with the learned rows on it: the equal-cost section and its figure
    assert "### At equal cost" in (out / "compare.md").read_text()
    assert {Path(f).name for f in problem["figures"]} >= {"error.png", "work_precision.png"}
    assert all((out / f).is_file() for f in problem["figures"])  # (paths in the run directory: relative to it)


def test_quick_run_trains_on_a_step_budget_and_holds_out_its_test_conditions(quick_run):
    out, _, _, _ = quick_run
    for seed in (0, 1):
        summary = json.loads((out / "rigid_body" / f"vpt@s{seed}" / "summary.json").read_text())
        assert summary["steps"] == 20
    result = json.loads((out / "compare.json").read_text())["problems"][0]
    assert {r["split"] for r in result["rows"]} == {"new"} and {r["n_traj"] for r in result["rows"]} == {4}
    train = read_trajectories(out / "rigid_body" / "train.h5", steps=[0]).y[:, 0]
    held_out = read_rollout(out / result["rollout"]).reference.y[:, 0]
    assert np.min(np.linalg.norm(train[:, None] - held_out[None], axis=-1)) > 1e-6


def test_a_data_only_file_is_judged_on_its_models_test_split(tmp_path, capsys):
    from vpintegrator.data.generation import generate
    from vpintegrator.data.spec import GenerationSpec

    data = generate(GenerationSpec(name="rb", system="rigid_body", sampler="sphere", n_traj=20, dt=0.2, t_end=3.0),
                    out=tmp_path / "rb.h5", workers=1)
    status = main("compare", ["--problems", str(data), "--rows", "vpt,identity", *TINY, "--out", str(tmp_path / "run")])
    assert status == 0
    (problem,) = json.loads((tmp_path / "run" / "compare.json").read_text())["problems"]
    assert not problem["equations"] and [r["method"] for r in problem["rows"]] == ["vpt", "identity"]
    assert problem["verdict"].startswith("rb: with the equations none (data only); data only ")
    assert problem["verdict"] in capsys.readouterr().out


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    status = main("compare", ["--problems", "rigid_body,coupled_oscillator", "--quick", "--dry-run",
                              "--out", str(tmp_path / "run")])
    text = capsys.readouterr().out
    assert status == 0 and not (tmp_path / "run").exists()
    assert "rigid_body (dim 3" in text and "rows rk4, implicit_midpoint, gauss_legendre4, vpt, st, identity" in text
    assert "g_sympnet" in text.split("coupled_oscillator (dim 4")[1]  # canonical Hamiltonian: the symplectic net
    assert "estimated cost:" in text


@pytest.mark.parametrize("name, has", [("rigid_body", {"volume", "jacobian"}),
                                       ("coupled_oscillator", {"volume", "canonical", "separable"})])
def test_rows_follow_the_measured_structure(name, has):
    problem = _problem(name, 8, 8)
    assert has <= set(problem.structure)
    rows = rows_for(problem)
    assert rows[0] == "rk4" and rows[-1] == "identity" and "vpt" in rows and "st" in rows
    assert ("g_sympnet" in rows) == ("canonical" in problem.structure)
    assert ("stormer_verlet" in rows) == ("separable" in problem.structure)


def _saved_model(tmp_path, dim):
    from vpintegrator import build_model, save_model

    path = tmp_path / f"net{dim}.pt"
    save_model(build_model("vpt", dim=dim), path)
    return str(path)


@pytest.mark.parametrize("args, says", [
    (["--problems", "not_a_system"], "unknown system 'not_a_system'"),
    (["--problems", "rigid_body", "--rows", "g_sympnet"], "problem rigid_body: no applicable row"),
    (["--problems", "rigid_body", "--rows", "rk5"], "--rows: unknown row 'rk5'"),
    (["--problems", "missing.h5"], "data file 'missing.h5' not found"),
    (["--problems", "toda"], "toda's conditions are a fixed list (sampler 'bump')"),
    (["--preset", "no_such_preset"], "--preset: unknown preset 'no_such_preset'; valid: coupled_oscillator"),
    (["--preset", "BADKEY"], "unknown key 'n_step' (did you mean 'n_steps'?); valid: problems, rows, model, seeds, max_steps"),
    (["--preset", "BADROW"], "unknown key 'train.vpt.max_step' (did you mean 'max_steps'?); valid: config, step_cpu_s, "),
    (["--preset", "BADSIZE"], "n_test must be an integer >= 1"),
    (["--problems", "rigid_body", "--model", "SAVED4"], "its dim is 4, problem rigid_body has dim 3"),
])
def test_bad_input_is_one_line_before_anything_trains(tmp_path, capsys, args, says):
    presets = {"BADKEY": 'problems = "rigid_body"\nn_step = 10\n', "BADROW": "[train.vpt]\nmax_step = 3\n",
               "BADSIZE": "[quick]\nn_test = 0\n"}
    for name, text in presets.items():
        (tmp_path / f"{name}.toml").write_text(text)
    args = [_saved_model(tmp_path, 4) if a == "SAVED4" else str(tmp_path / f"{a}.toml") if a in presets else a
            for a in args]
    status = main("compare", [*args, "--quick", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(importlib.util.find_spec("dysts") is None, reason="dysts (the optional extra) is not installed")
def test_a_dysts_flow_is_a_problem():
    problem = _problem("dysts:Lorenz", 8, 8)
    assert problem.dim == 3 and problem.has_equations and "vpt" in rows_for(problem)


@pytest.mark.skipif(importlib.util.find_spec("dysts") is None, reason="dysts (the optional extra) is not installed")
def test_a_dysts_flow_without_a_jacobian_gets_the_adapters_measured_structure():
    """dysts gives the ABC flow and the swinging Atwood machine no Jacobian: their structure is the adapter's, by
    differences of the field (volume-preserving; the Atwood machine canonical, so a symplectic row too)."""
    abc, atwood = _problem("dysts:ArnoldBeltramiChildress", 8, 8), _problem("dysts:SwingingAtwood", 8, 8)
    assert abc.structure == ("volume",) and "g_sympnet" not in rows_for(abc)
    assert atwood.structure == ("volume", "canonical") and "g_sympnet" in rows_for(atwood)
    assert "implicit_midpoint" not in rows_for(abc)  # no Jacobian: no Newton solve


# --------------------------------------------------------------------------- presets: the studies as data


def test_a_study_that_became_a_preset_runs_the_engine_by_its_name(tmp_path, capsys):
    """vp-study coupled_oscillator is vp-study compare --preset coupled_oscillator: its problem, rows (the study's
    integrators and models by their configs), budgets and named evaluation; --quick takes the preset's [quick]
    table, a flag wins over both, and the dry run prices each row at its measured step cost."""
    assert main("coupled_oscillator", ["--dry-run"]) == 0
    full = capsys.readouterr().out
    assert main("compare", ["--preset", "coupled_oscillator", "--quick", "--seeds", "7", "--dry-run"]) == 0
    quick = capsys.readouterr().out
    assert full.startswith("compare (preset coupled_oscillator): 1 problem(s), seeds 0,1,2,3,4, 270/360/430/1300 "
                           "optimiser steps per training, 1000 training / 100 held-out conditions, 10000 steps; "
                           "also at coupled_oscillator")
    assert ("rows rk4, stormer_verlet, stormer_verlet_y6, vpt, g_sympnet, st, symplectic_transformer, identity "
            "(20 trainings)") in full
    assert "seeds 7, 60 optimiser steps per training, 100 training / 8 held-out" in quick and "(4 trainings)" in quick
    cost = {k: float(t.split("estimated cost: ")[1].split()[0]) for k, t in (("full", full), ("quick", quick))}
    # 5 seeds x (360 x 0.332 + 430 x 0.275 + 270 x 0.433 + 1300 x 0.092) CPU s of training alone
    assert cost["full"] > 5 * (360 * 0.332 + 430 * 0.275 + 270 * 0.433 + 1300 * 0.092) and cost["quick"] < 600


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory):
    """The coupled-oscillator preset at tiny sizes: one seed, two optimiser steps, Yoshida 6 and the G-SympNet
    by its study config, the default initial condition as a named evaluation."""
    out = tmp_path_factory.mktemp("preset") / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        status = main("coupled_oscillator", ["--quick", "--rows", "rk4,stormer_verlet_y6,g_sympnet,identity",
                                             "--seeds", "0", "--n-train", "12", "--n-test", "2", "--n-steps", "20",
                                             "--max-steps", "2", "--out", str(out), "-q"])
    return out, status


def test_the_preset_trains_its_config_and_scores_energy_drift_at_the_named_condition(preset_run):
    from vpintegrator._toml import tomllib

    out, status = preset_run
    assert status == 0
    (problem,) = json.loads((out / "compare.json").read_text())["problems"]
    folder = out / "coupled_oscillator_box"
    summary = json.loads((folder / "g_sympnet@s0" / "summary.json").read_text())
    used = tomllib.loads((folder / "g_sympnet@s0" / "config.toml").read_text())
    config = tomllib.loads((Path(__file__).parent.parent / "configs/study/coupled_oscillator_g_sympnet.toml")
                           .read_text())
    assert summary["steps"] == 2 and used["model"]["n_layers"] == config["model"]["n_layers"] == 8
    assert used["patience"] == 10 and config["patience"] == 0  # the preset's key over the config's
    assert read_trajectories(folder / "train.h5").y.shape[1] == 251  # the preset's 250-step training trajectories
    rows = {r["method"]: r for r in problem["rows"]}
    assert list(rows) == ["rk4", "stormer_verlet_y6", "g_sympnet", "identity"]
    # energy drift as a metric: Yoshida 6 at dt 0.4 keeps the energy far better than RK4; the identity exactly
    assert rows["stormer_verlet_y6"]["max_rel_drift_energy"] < rows["rk4"]["max_rel_drift_energy"] / 10
    assert rows["identity"]["max_rel_drift_energy"] == 0
    (named,) = problem["evaluations"].values()
    assert list(problem["evaluations"]) == ["coupled_oscillator"]
    assert [r["method"] for r in named] == list(rows) and {r["n_traj"] for r in named} == {1}
    start = read_rollout(folder / "coupled_oscillator_rollout.h5").reference.y[0, 0]
    assert np.allclose(start, [1.0, 0.0, 2.0, 0.0])  # GeometricProblems' default initial condition
    md = (out / "compare.md").read_text()
    assert "### From coupled_oscillator's conditions" in md and "max rel. energy drift" in md


def test_a_compare_run_and_the_replaced_studys_file_redraw_byte_for_byte(preset_run, tmp_path, capsys):
    """--table-only --results: a compare.json gives the tables its run wrote; the coupled-oscillator study's own
    archived run (before it became a preset) its tables as that study drew them (the text's digest, taken from
    the study's format_results before its modules were folded)."""
    import hashlib

    out, _ = preset_run
    assert main("coupled_oscillator", ["--table-only", "--results", str(out / "compare.json"),
                                       "--out", str(tmp_path / "a"), "-q"]) == 0
    assert (tmp_path / "a" / "results.md").read_bytes() == (out / "compare.md").read_bytes()
    archived = Path(__file__).parent.parent / "docs/data/archive/coupled_oscillator_study.json"
    assert main("coupled_oscillator", ["--table-only", "--results", str(archived), "--out", str(tmp_path / "b"),
                                       "-q"]) == 0
    text = (tmp_path / "b" / "results.md").read_bytes()
    assert hashlib.sha256(text).hexdigest()[:16] == LEGACY_DIGEST
    capsys.readouterr()
    assert main("compare", ["--table-only", "--results", str(archived), "--out", str(tmp_path / "c")]) == 2
    assert "not a compare.json (schema vpintegrator.compare/1)" in capsys.readouterr().err


def test_the_reproduce_script_is_the_preset(tmp_path):
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "scripts" / "reproduce_coupled_oscillator.py"
    if not script.is_file():
        pytest.skip("repository file (not in the wheel)")
    done = subprocess.run([sys.executable, str(script), "--dry-run", "--quick"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("compare (preset coupled_oscillator): 1 problem(s), seeds 0,1, 60 optimiser steps")
