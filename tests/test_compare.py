"""``vp-study compare`` (issue 87, items 1–2): a problem in, its rows chosen from what is known, a verdict out;
``--dry-run`` prints the plan and runs nothing; bad input is one line before anything trains."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from vpintegrator.data import read_trajectories
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.studies.compare import _problem, rows_for
from vpintegrator.studies.driver import main

pytestmark = pytest.mark.usefixtures("one_thread")

#: a network by import path, as a user names their own (here one of the package's, not by its registry name)
USER, USER_ROW = "vpintegrator.models.volume:VolumePreservingFeedForward", "VolumePreservingFeedForward"
TINY = ["--quick", "--n-train", "10", "--n-test", "4", "--n-steps", "10", "--max-steps", "20", "--seeds", "0,1"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """A --quick run on the rigid body at tiny sizes (RK4, the seeds' VPT, a user's network by import path, the
    identity): (out, exit, stdout)."""
    out = tmp_path_factory.mktemp("compare") / "run"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main("compare", ["--problems", "rigid_body", "--model", USER, "--rows", f"rk4,vpt,{USER_ROW},identity",
                                  *TINY, "--out", str(out)])
    return out, status, stdout.getvalue()


def test_quick_run_writes_a_verdict_and_a_table(quick_run):
    out, status, stdout = quick_run
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
    # the work–precision ladder with the learned rows on it: the equal-cost section and its figure
    assert "### At equal cost" in (out / "compare.md").read_text()
    assert {Path(f).name for f in problem["figures"]} >= {"error.png", "work_precision.png"}
    assert all(Path(f).is_file() for f in problem["figures"])


def test_quick_run_trains_on_a_step_budget_and_holds_out_its_test_conditions(quick_run):
    out, _, _ = quick_run
    for seed in (0, 1):
        summary = json.loads((out / "rigid_body" / f"vpt@s{seed}" / "summary.json").read_text())
        assert summary["steps"] == 20
    result = json.loads((out / "compare.json").read_text())["problems"][0]
    assert {r["split"] for r in result["rows"]} == {"new"} and {r["n_traj"] for r in result["rows"]} == {4}
    train = read_trajectories(out / "rigid_body" / "train.h5", steps=[0]).y[:, 0]
    held_out = read_rollout(result["rollout"]).reference.y[:, 0]
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
    (["--problems", "toda"], "toda's conditions are a list of bump parameters"),
    (["--problems", "rigid_body", "--model", "SAVED4"], "its dim is 4, problem rigid_body has dim 3"),
])
def test_bad_input_is_one_line_before_anything_trains(tmp_path, capsys, args, says):
    args = [_saved_model(tmp_path, 4) if a == "SAVED4" else a for a in args]
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
