"""The rigid-body structure study (issue 21): its plan, its one-line errors, its numbers from rollout files; the
studies' equal-cost reading of a work-precision table; (slow) the study end to end at tiny settings."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vpintegrator.errors import VPIntegratorError
from vpintegrator.studies import _rollouts, rigid_body_structure as study
from vpintegrator.studies.rigid_body_structure import results
from vpintegrator.studies.stats import write_results_files
from vpintegrator.studies.runner import TOOLS, Task
from vpintegrator.studies.driver import main as run_study

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "reproduce_rigid_body_structure.py"
RUN = ([sys.executable, str(SCRIPT)] if SCRIPT.is_file() else
       [sys.executable, "-c", "from vpintegrator.studies.driver import main; raise SystemExit(main(\'rigid_body_structure\'))"])


def test_plan_trains_every_model_on_exact_data_and_evaluates_held_out(tmp_path):
    a = study.STUDY.parse(["--out", str(tmp_path / "run"), "--seeds", "0,2", "--models", "lpnet,vpt",
                          "--n-heldout", "30", "--n-long", "4"])
    tasks = study.plan(a).tasks
    assert [k for k in tasks if k.startswith("train_")] == ["train_lpnet_s0", "train_vpt_s0", "train_lpnet_s2",
                                                            "train_vpt_s2"]
    assert all(isinstance(t, Task) for t in tasks.values())
    assert all(t.cmd[0] in TOOLS or t.cmd[:3] == ["python", "-m", "vpintegrator.studies.attention"]
               for t in tasks.values())
    train = [str(c) for c in tasks["train_vpt_s2"].cmd]
    assert train[train.index("--data") + 1].endswith("data/exact.h5") and train[train.index("--seed") + 1] == "2"
    assert "val_rollout_error=final" in train and "val_rollout_drift_weight=50" in train  # the target's score
    assert any(c.endswith("configs/study/rigid_body_vpt.toml") for c in train)
    gen = [str(c) for c in tasks["gen_exact"].cmd]
    assert gen[gen.index("--method") + 1] == "dop853"  # training data from the exact flow
    held = [str(c) for c in tasks["rollout_heldout_vpt_s2"].cmd]
    assert held[held.index("--data") + 1].endswith("data/heldout.h5") and "--reference" not in held  # exact: default
    assert held[held.index("--init") + 1] == "reference"
    long = [str(c) for c in tasks["rollout_long_lpnet_s0"].cmd]
    assert long[long.index("--traj") + 1] == "0,1,2,3" and long[long.index("--t-end") + 1] == "10000"
    paper = [str(c) for c in tasks["rollout_paper_lpnet_s0"].cmd]
    assert paper[paper.index("--traj") + 1] == "100,719"
    # the attention of the window model only (the VPT), on held-out ICs
    assert [k for k in tasks if k.startswith("attention_")] == ["attention_vpt_s0", "attention_vpt_s2"]
    assert set(tasks["rollout_heldout_lpnet_s0"].deps) == {"gen_heldout", "train_lpnet_s0"}
    wp = [str(c) for c in tasks["rollout_work_precision"].cmd]
    assert "--work-precision" in wp and f"lpnet={tmp_path / 'run' / 'train' / 'lpnet_s0'}" in wp
    assert not any("_s2" in c for c in wp)  # the first seed's models only
    assert tasks["plot_work_precision"].cmd[:2] == ["vp-plot", tmp_path / "run" / "rollout" / "work_precision_work_precision.csv"]
    assert not (tmp_path / "run").exists()  # planning writes nothing


def test_heldout_spec_draws_fresh_conditions_on_the_sphere(tmp_path):
    from vpintegrator.data import load_spec

    spec = load_spec(study.write_spec(tmp_path, 17))  # a valid spec of the package
    assert spec.params["inertia"] == load_spec("rigid_body_paper").params["inertia"]
    text = (tmp_path / "data" / "heldout.toml").read_text()
    assert "n_traj = 17" in text
    assert 'sampler = "sphere"' in text and f"seed = {study.HELDOUT_SEED}" in text and 'method = "dop853"' in text


@pytest.mark.parametrize("args, needle", [
    (["--models", "lpnet,nope"], "--models"), (["--models", "vpt,vpt"], "--models"), (["--seeds", "x"], "--seeds"),
    (["--seeds", "1,1"], "--seeds"), (["--train-seconds", "0"], "--train-seconds"),
    (["--long-t-end", "50"], "--long-t-end"), (["--n-heldout", "0"], "--n-heldout"),
    (["--n-heldout", "5", "--n-long", "6"], "--n-long"), (["--jobs", "0"], "--jobs"),
    (["--models", "vpt", "--export-pretrained", "x"], "--ship"), (["--table-only"], "--table-only"),
    (["--bogus"], "--bogus"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, needle):
    assert run_study(study.STUDY, ["--out", str(tmp_path / "run"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], lines
    assert not (tmp_path / "run").exists()


def _fake_rollout(monkeypatch, values):
    """study's rollout reads return ``values`` (label -> invariants/rel_error arrays) for every file."""
    from types import SimpleNamespace

    t = np.arange(0.0, 300.0 + 1e-9, 0.2)

    def read(path):
        methods = {label: SimpleNamespace(failed_step=np.full(v["err"].shape[0], -1), meta={"seconds_per_step": 1e-4})
                   for label, v in values.items()}
        metrics = {label: SimpleNamespace(rel_error=v["err"], invariants={"energy": v["energy"], "casimir": v["casimir"]})
                   for label, v in values.items()}
        return SimpleNamespace(t=t, methods=methods, metrics=metrics, traj_index=np.array([100, 719, 5]),
                               table=[{"method": k, "split": "train"} for k in values])

    monkeypatch.setattr(_rollouts, "read", read)
    return t


def test_numbers_and_targets_from_rollouts(tmp_path, monkeypatch):
    n = 1501  # t in [0, 300], dt 0.2
    t = np.arange(n) * 0.2
    err_good = np.tile(np.linspace(0, 0.01, n), (3, 1)) * np.array([[1.0], [2.0], [3.0]])  # final 0.01, 0.02, 0.03
    bounded = 1e-5 * np.abs(np.sin(t))[None].repeat(3, 0)  # a bounded energy error
    secular = 1e-5 * t[None].repeat(3, 0)  # grows linearly: 3x over [0, 100] by t = 300
    values = {
        "lpnet": {"err": err_good, "energy": 1.0 + bounded, "casimir": np.ones((3, n))},
        "vpt": {"err": 10 * err_good, "energy": 1.0 + secular, "casimir": 1.0 + 1e-3 * t[None].repeat(3, 0)},
    }
    _fake_rollout(monkeypatch, values)
    run = tmp_path / "run"
    for name in ("lpnet_s0", "vpt_s0"):
        d = run / "train" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"train_loss": 1e-6, "best_loss": 1e-3, "wall_time": 240.0}))
    (run / "rollout").mkdir()
    for f in ("heldout", "long", "paper"):
        for m in ("lpnet", "vpt"):
            (run / "rollout" / f"{f}_{m}_s0.h5").touch()
    res = study.build_results(run)
    lp, vpt = (next(r for r in res["rows"] if r["model"] == m) for m in ("lpnet", "vpt"))
    k100 = 500
    # the 90th percentile of three values lies 0.8 of the way from the middle one to the largest (vpintegrator.quantiles)
    p90 = err_good[1, k100] + 0.8 * (err_good[2, k100] - err_good[1, k100])
    assert lp["median"] == pytest.approx(err_good[1, k100]) and lp["hi"] == pytest.approx(p90)
    assert lp["casimir_long"] == 0.0 and lp["met"] == {"error": True, "casimir": True, "energy": True}
    assert vpt["energy_growth"] == pytest.approx(3.0, rel=1e-9) and vpt["energy_fit"]["kind"] == "secular"
    assert lp["energy_fit"]["kind"] == "bounded"
    assert vpt["met"]["error"] is False and vpt["met"]["casimir"] is False
    assert lp["paper"]["traj1"] == pytest.approx(err_good[0, k100]) and lp["paper"]["split"] == "train"
    assert res["per_model"]["lpnet"]["met_all"] == 1 and res["per_model"]["vpt"]["met_all"] == 0
    text = study.format_results(res)
    assert "| lpnet | 0 |" in text and "error casimir energy" in text
    # the results.json it writes draws the same page without the run directory (a shipped file, docs/data/)
    write_results_files(run, text, res)
    shutil.rmtree(run / "rollout")
    back = study.read_results(run / "results.json")
    assert back["rows"][1]["energy_growth"] == pytest.approx(3.0, rel=1e-9) and study.format_results(back) == text


def test_results_carry_the_equal_cost_table(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "equal_cost_section", lambda path, title: [f"### {title}", "| a | b |"])
    run = tmp_path / "run"
    (run / "rollout").mkdir(parents=True)
    (run / "rollout" / "work_precision_work_precision.csv").touch()
    res = study.build_results(run)
    assert res["equal_cost"][1] == "| a | b |" and "| a | b |" in study.format_results(res)
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(VPIntegratorError, match="not the results.json of vp-study rigid_body_structure"):
        study.read_results(tmp_path / "other.json")


def test_a_drift_at_round_off_counts_as_conserved(monkeypatch):
    n = 1501
    t = np.arange(n) * 0.2
    ones = np.ones((2, n))
    _fake_rollout(monkeypatch, {"im": {"err": 0.01 * ones, "energy": 1.0 + 1e-18 * t[None].repeat(2, 0) ** 2,
                                       "casimir": ones}})
    v = study.long_values(Path("any.h5"))["im"]
    assert v["energy_growth"] == pytest.approx(9.0, rel=1e-6) and v["energy_fit"]["kind"] == "round-off"
    assert results._met(v)["energy"] is True  # 9e-14 at t = 300: rounding, not drift, whatever its growth


def test_equal_cost_interpolates_along_a_ladder(tmp_path):
    from vpintegrator.rollout.precision import WorkPrecisionRow, write_work_precision
    from vpintegrator.studies.work_precision import at_equal_cost, equal_cost_section

    def row(method, kind, h, err, cost):
        return WorkPrecisionRow(method=method, kind=kind, h=h, rtol=math.nan, n_steps=10, t_end=1.0, n_traj=3,
                                error_median=err, error_p90=err, error_max=err, drift_max=0.0,
                                seconds_per_time=cost, runner="numba")

    rows = [row("rk4", "integrator", 0.4, 1e-2, 1e-6), row("rk4", "integrator", 0.2, 1e-4, 1e-4),
            row("net", "model", 0.2, 3e-3, 1e-5), row("cheap", "model", 0.2, 3e-3, 1e-8)]
    write_work_precision(tmp_path / "wp", rows)
    pairs = {p["model"]: p for p in at_equal_cost(tmp_path / "wp.csv")}
    assert pairs["net"]["how"] == "interpolated" and pairs["net"]["error"] == pytest.approx(1e-3)  # log-log midpoint
    assert pairs["cheap"]["how"] == "cheapest" and pairs["cheap"]["error"] == 1e-2
    assert "(cheapest rung)" in "\n".join(equal_cost_section(tmp_path / "wp.csv"))


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    run = tmp_path / "run"
    args = ["--out", str(run), "--models", "lpnet,lp_transformer", "--seeds", "0", "--train-seconds", "4",
            "--n-heldout", "4", "--n-long", "2", "--long-t-end", "200"]
    proc = subprocess.run([*RUN, *args, "--export-pretrained", str(tmp_path / "ship")], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((run / "results.json").read_text())
    lp = next(r for r in res["rows"] if r["model"] == "lpnet")
    assert lp["n"] == 4 and lp["casimir_long"] < 1e-12  # Casimir-exact by construction
    assert {r["model"] for r in res["rows"] if r.get("attention")} == {"lp_transformer"}
    assert (tmp_path / "ship" / "rigid_body_lpnet.pt").exists()
    prov = json.loads((tmp_path / "ship" / "provenance.json").read_text())
    assert prov["models"]["rigid_body_lpnet"]["seed"] == 0


def test_casimir_drift_of_a_window_model_is_its_own_not_the_first_windows():
    """The first window comes from DOP853 (Casimir error ~1e-12); a window model keeps each state's Casimir, so
    its drift is taken against each state's own first-window value (issue 32, item 5). Energy stays against I(z_0)."""
    from types import SimpleNamespace

    import numpy as np

    from vpintegrator.studies.rigid_body_structure.results import _drifts

    first = np.array([1.0, 1.0 + 3e-12, 1.0 - 2e-12])
    casimir = np.tile(first, 5)[None]  # (1, 15)
    inv = {"casimir": casimir, "energy": casimir.copy()}
    r = SimpleNamespace(
        methods={"lpt": SimpleNamespace(meta={"seq_len": 3, "pred_window": 3, "overlap": False}),
                 "lpnet": SimpleNamespace(meta={"seq_len": 1, "pred_window": 1})},
        metrics={"lpt": SimpleNamespace(invariants=inv), "lpnet": SimpleNamespace(invariants=inv)})
    assert _drifts(r, "lpt", "casimir").max() == 0.0
    assert _drifts(r, "lpt", "energy").max() > 2e-12
    assert _drifts(r, "lpnet", "casimir").max() > 2e-12  # a one-state map: against z_0 as before


def test_a_run_writes_the_heldout_spec_first_and_records_its_settings(tmp_path, monkeypatch):
    """Under RUN's lock the held-out spec is written before the plan runs (its tasks read it); settings.json holds
    the plan's keys in their order, then the commands."""
    from types import SimpleNamespace

    run = tmp_path / "run"

    def fake_plan(a):
        assert (run / "data" / "heldout.toml").is_file()
        return SimpleNamespace(execute=lambda: True, commands=["vp-gen x"], failure=None)

    monkeypatch.setattr(study, "plan", fake_plan)
    monkeypatch.setattr(study, "write_results", lambda run: "the table")
    a = study.STUDY.parse(["--out", str(run), "--models", "lpnet", "--seeds", "2", "--n-heldout", "7",
                           "--n-long", "3"])
    assert study.run(a) == 0
    s = json.loads((run / "settings.json").read_text())
    assert list(s) == ["models", "seeds", "train_seconds", "n_heldout", "n_long", "long_t_end", "jobs", "budget",
                       "wall_ceiling", "patience", "step_budgets", "commands"]
    assert (s["models"], s["seeds"], s["n_heldout"], s["commands"]) == (["lpnet"], [2], 7, ["vp-gen x"])
