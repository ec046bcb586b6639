"""The unknown-form study (vpintegrator/studies/unknown_form/): tables and figures from its JSON, the
per-seed target verdicts, the plateau check, bad input in one line, and a tiny end-to-end run (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from vpintegrator._shipped import results_files
from vpintegrator.studies import unknown_form as uf
from vpintegrator.studies.unknown_form import design as uf_design, runs as uf_runs
from vpintegrator.studies.stats import write_json


def _main(argv):
    from vpintegrator.studies.driver import main

    return main(uf.STUDY, argv)


def _row(system, method, seed, median, structure=1e-15, noise=0.0, **extra):
    rng = np.random.default_rng(seed)
    errors = {f"{t:g}": list(median * t / 10 * rng.uniform(0.5, 1.5, 20)) for t in uf.HORIZONS}
    return {"system": system, "noise": noise, "seed": seed, "method": method, "approach": method.split("@")[0],
            "errors": errors, "structure": structure, "structure_kind": uf.SYSTEMS[system]["structure"],
            "failed": 0, "cost": 1e-5, "runner": "numba", "train_cpu": 40.0, **extra}


def _rows():
    curve = {"cpu": [1.0, 2.0, 4.0, 8.0], "val": [1e-2, 1e-4, 2e-5, 1.9e-5]}
    sweep = [{"point": 0, "best_loss": 1.9e-5, "cpu_seconds": 8.0, "n_params": 128, "curve": curve},
             {"point": 1, "best_loss": 3e-5, "cpu_seconds": 8.0, "n_params": 448,
              "curve": {"cpu": [1.0, 2.0, 4.0, 8.0], "val": [1e-2, 1e-3, 1e-4, 1e-5]}}]
    rows = []
    for seed in range(5):
        # the flow map meets the target on 4 seeds of 5 (seed 4: 3e-4)
        rows.append(_row("rigid_body_exp", "lpnet", seed, 3e-4 if seed == 4 else 5e-5, point=0, sweep=sweep))
        rows.append(_row("rigid_body_exp", "lphnn@implicit_midpoint", seed, 1e-2, casimir_long=2e-15))
        rows.append(_row("rigid_body_exp", "oracle gauss_legendre4", seed, 2e-6, train_cpu=0.0))
        rows.append(_row("coupled_oscillator", "g_sympnet", seed, 1e-3, structure=1e-4))
    rows.append({**_row("rigid_body_exp", "poly2+gauss_legendre4", 0, 1.0), "errors": {f"{t:g}": [math.inf]
                 for t in uf.HORIZONS}, "failed": -1, "cost": math.nan, "structure": None,
                 "failure": "no degree-2 polynomial fit has skill on the validation trajectories"})
    return rows


def test_summary_holds_per_seed_verdicts_and_bootstrap_intervals():
    summary = uf.summarize_rows(_rows())
    lp = next(s for s in summary if s["method"] == "lpnet")
    assert lp["target"]["per_seed"] == [True, True, True, True, False]
    assert lp["target"]["met"] == 4 and lp["target"]["verdict"] is True
    t10 = lp["horizons"]["10"]
    assert len(t10["per_seed"]) == 5 and t10["boot_lo"] <= t10["median"] <= t10["boot_hi"]
    for p in t10["per_seed"]:
        assert p["lo"] <= p["median"] <= p["hi"] and p["n"] == 20
    mid = next(s for s in summary if s["method"] == "lphnn@implicit_midpoint")
    assert mid["target"]["verdict"] is True and mid["casimir_long"] == [2e-15] * 5
    # the amortised cost adds the training CPU spread over N rollouts of length 10
    assert lp["amortised_cost"] == pytest.approx(1e-5 + 40.0 / (1e5 * 10))
    # the canonical system has no flow-map Casimir target
    assert "target" not in next(s for s in summary if s["method"] == "g_sympnet")
    wrong = next(s for s in summary if s["method"] == "poly2+gauss_legendre4")
    assert wrong["horizons"]["10"]["median"] == math.inf and wrong["failures"]


def test_plateau_is_the_gain_of_the_second_half_of_the_budget():
    flat = uf.plateau({"cpu": [1.0, 2.0, 4.0, 8.0], "val": [1e-2, 1e-4, 2e-5, 1.9e-5]})
    assert flat["plateaued"] is True and flat["gain_last_half"] == pytest.approx(2e-5 / 1.9e-5)
    steep = uf.plateau({"cpu": [1.0, 2.0, 4.0, 8.0], "val": [1e-2, 1e-3, 1e-4, 1e-5]})
    assert steep["plateaued"] is False and steep["gain_last_half"] == pytest.approx(10.0)
    assert uf.plateau({"cpu": [1.0], "val": [1.0]})["plateaued"] is None


def test_the_tables_say_which_trainings_a_wall_ceiling_cut_short():
    """Read from each run's own record (the sweep point's ``stopped``), never from its seconds."""
    rows = _rows()
    summary = uf.summarize_rows(rows)
    assert uf.wall_ceiling_line(summary).startswith("Whether a wall-time ceiling stopped any of the 10 training "
                                                    "runs is not known")
    for r in rows:
        for i, point in enumerate(r.get("sweep") or []):
            r["sweep"][i] = {**point, "wall_limited": False, "stopped": ["plateau (patience)"]}
    assert uf.wall_ceiling_line(uf.summarize_rows(rows)) == (
        "No training run stopped at its wall-time ceiling (10 runs, each run's own record).")
    rows[0] = {**rows[0], "sweep": [{**rows[0]["sweep"][0], "wall_limited": True, "cpu_seconds": 31.0,
                                     "stopped": ["wall ceiling"]}, rows[0]["sweep"][1]]}
    line = uf.wall_ceiling_line(uf.summarize_rows(rows))
    assert line.startswith("**1 of 10 training runs stopped at their wall-time ceiling**")
    assert "rigid_body_exp σ = 0 lpnet seed 0 point 0: 31 CPU s" in line
    assert line in uf.tables(uf.summarize_rows(rows))


def _record(run, cpu, wall, stopped="time_limit", clock="wall", **extra):
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.toml").write_text("cpu_time_limit = 50.0\ntime_limit = 200.0\n")
    write_json(run / "summary.json", {"cpu_time": cpu, "wall_time": wall, "stopped": stopped, "best_loss": 1e-5,
                                      "n_params": 128, **({"stop_clock": clock} if clock != "absent" else {}),
                                      **extra})


def test_a_wall_limited_phase_marks_its_sweep_point(tmp_path):
    """The loop stops before an epoch that would overrun: a wall-cut run ends short of its ceiling (193 of 200
    s here, which the old ``wall >= 0.99 * limit`` rule missed); the run's stop_clock says it."""
    run = tmp_path / "rigid_body_exp" / "lpnet_p0"
    _record(run, 31.0, 193.0)
    point = uf_runs.point(tmp_path, "lpnet", 0, run)
    assert point["wall_limited"] is True and point["cpu_seconds"] == 31.0 and point["stopped"] == ["wall ceiling"]
    _record(run, 50.1, 80.0, clock="cpu")
    assert uf_runs.point(tmp_path, "lpnet", 0, run)["wall_limited"] is False
    _record(run, 20.0, 30.0, stopped="early_stopping", clock=None)
    point = uf_runs.point(tmp_path, "lpnet", 0, run)
    assert point["wall_limited"] is False and point["stopped"] == ["plateau (patience)"]
    _record(run, 31.0, 199.0, clock="absent")  # a run from before the record: not known, not guessed
    assert uf_runs.point(tmp_path, "lpnet", 0, run)["wall_limited"] is None


def test_the_tables_print_the_stop_rule_and_say_whether_the_gaps_are_at_plateau():
    rule = uf.StopRule(patience=7, max_steps={"lm": 300, "adam": 900})
    rows = [{**r, "stop_rule": rule.describe()} for r in _rows()]
    for r in rows:
        for i, point in enumerate(r.get("sweep") or []):
            r["sweep"][i] = {**point, "wall_limited": False, "stopped": ["plateau (patience)"]}
    text = uf.tables(uf.summarize_rows(rows))
    assert text.startswith("Stop rule of the trainings: the validation plateau: patience 7 epochs without a 1 "
                           "percent fall of the monitored score, or a cap of 300 LM steps, 900 Adam steps.")
    assert "Every vp-train run stopped at its validation plateau (10 runs): the gaps between the rows are at " \
           "plateau." in text
    assert "| plateau (patience) |" in text
    rows[0] = {**rows[0], "sweep": [{**rows[0]["sweep"][0], "stopped": ["step budget"]}, rows[0]["sweep"][1]]}
    text = uf.tables(uf.summarize_rows(rows))
    assert "9 of 10 vp-train runs stopped at their validation plateau (9 by plateau (patience), 1 by step " \
           "budget)" in text
    old = uf.tables(uf.summarize_rows(_rows()))  # rows from before the record: said, not guessed
    assert "Stop rule of the trainings: not recorded" in old and "not shown to be at plateau" in old


def test_a_phase_records_a_stuck_lm_and_a_plateau_still_improving(tmp_path):
    """A run's summary.json says lm_stuck, or early_stopping with still_improving: the sweep point's stop says so
    and records that the run recorded it (runs from before did not: not recorded)."""
    run = tmp_path / "rigid_body_exp" / "lphnn_p0"
    _record(run, 20.0, 30.0, stopped="lm_stuck", clock=None, still_improving=None)
    point = uf_runs.point(tmp_path, "lphnn", 0, run)
    assert point["stopped"] == ["LM damping stuck at its cap"] and point["trend_recorded"] == [True]
    _record(run, 20.0, 30.0, stopped="early_stopping", clock=None, still_improving=True)
    assert uf_runs.point(tmp_path, "lphnn", 0, run)["stopped"] == ["plateau (patience) while still improving"]
    _record(run, 20.0, 30.0, stopped="early_stopping", clock=None)  # before the record
    point = uf_runs.point(tmp_path, "lphnn", 0, run)
    assert point["stopped"] == ["plateau (patience)"] and point["trend_recorded"] == [False]


def test_the_tables_count_per_row_the_runs_stuck_or_still_improving():
    rows = _rows()
    stops = ["plateau (patience) while still improving", "LM damping stuck at its cap"]
    for r in rows:
        for i, point in enumerate(r.get("sweep") or []):
            r["sweep"][i] = {**point, "wall_limited": False, "stopped": [stops[i % 2]], "trend_recorded": [True]}
    text = uf.tables(uf.summarize_rows(rows))
    line = next(x for x in text.splitlines() if x.startswith("| rigid_body_exp | 0 | lpnet | 10 |"))
    assert line == "| rigid_body_exp | 0 | lpnet | 10 | 5 | 5 | 5 | 0 |"  # 5 seeds × 2 points
    assert "0 of 10 vp-train runs stopped at their validation plateau (5 by plateau (patience) while still " \
           "improving, 5 by LM damping stuck at its cap)" in text
    # points from before the record (the rows share their sweep: every seed's point 1): counted apart, not guessed
    rows[0]["sweep"][1] = {**rows[0]["sweep"][1], "stopped": ["plateau (patience)"], "trend_recorded": None}
    text = uf.tables(uf.summarize_rows(rows))
    line = next(x for x in text.splitlines() if x.startswith("| rigid_body_exp | 0 | lpnet | 10 |"))
    assert line == "| rigid_body_exp | 0 | lpnet | 10 | 10 | 5 (+5 not recorded) | 0 (+5 not recorded) | 0 |"


def test_the_plateau_rule_is_vp_trains_patience_and_min_rel_delta_with_a_step_cap():
    rule = uf.StopRule()
    assert rule.flags("lm", 50.0, 3.0) == ["--set", "patience=10", "--set", "min_rel_delta=0.01", "--set",
                                           f"max_steps={uf.MAX_STEPS['lm']}", "--set", "time_limit=1500"]
    assert f"max_steps={uf.MAX_STEPS['adam']}" in rule.flags("adam", 20.0, 3.0)
    assert uf.StopRule("cpu").flags("lm", 50.0, 3.0) == ["--set", "cpu_time_limit=50", "--set", "time_limit=150"]
    a = uf.STUDY.parse(["--out", "x"])
    assert a.budget == "plateau" and a.patience == 10


def test_merge_rows_replaces_a_reruns_rows_and_keeps_the_others():
    old = [_row("rigid_body", "lpnet", 0, 1e-3), _row("rigid_body", "lpnet", 1, 1e-3)]
    new = [_row("rigid_body", "lpnet", 1, 5e-4)]
    merged = uf.merge_rows(old, new)
    assert [(r["seed"], np.median(r["errors"]["10"]) < 8e-4) for r in merged] == [(0, False), (1, True)]


def test_tables_and_figures_regenerate_from_the_json(tmp_path, capsys):
    out = tmp_path / "run"
    write_json(out / "unknown_form.json", {"commands": ["test"], "rows": _rows()})
    assert _main(["--out", str(out), "--table-only"]) == 0
    md = (out / "unknown_form.md").read_text()
    assert "### rigid_body_exp" in md and "### coupled_oscillator" in md
    assert "| lpnet |" in md and "4/5" in md and "s4:no" in md
    assert "Casimir ≤ 1e-12 over 10000 steps" in md
    assert "no degree-2 polynomial fit has skill" in md
    assert "### Plateau check" in md and "| rigid_body_exp | 0 | lpnet | 0 | 0 | yes |" in md
    for stem in ("unknown_form_cost_rigid_body_exp", "unknown_form_cost_coupled_oscillator",
                 "unknown_form_plateau_rigid_body_exp"):
        assert (out / f"{stem}.png").is_file() and (out / f"{stem}.svg").is_file()
    printed = capsys.readouterr().out
    assert printed.startswith("Stop rule of the trainings:") and "\nCells:" in printed
    # --figures-only is the same path
    (out / "unknown_form.md").unlink()
    assert _main(["--out", str(out), "--figures-only"]) == 0 and (out / "unknown_form.md").is_file()


def _yt_file(path):
    import h5py

    with h5py.File(path, "w") as f:
        f["t"] = np.arange(11) * 0.2
        f["y"] = np.ones((4, 11, 3))
    return path


@pytest.mark.parametrize("argv, message", [
    (["--systems", "pendulum"], "--systems must be a comma list out of rigid_body_exp, coupled_oscillator, "
                                "rigid_body"),
    (["--noise", "-1"], "--noise must be a comma list of noise values >= 0"),
    (["--sweep", "3"], "--sweep"),
    (["--table-only"], "unknown_form.json not found"),
    (["--export-pretrained", "x"], "ships no pretrained model"),
    (["--systems", "rigid_body_exp", "--data", "YT"], "names no system (only /t and /y): the study's held-out "
                                                      "errors against the exact flow and its oracle row need"),
    (["--data", "YT"], "give the one system it holds with --systems"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, message, tmp_path, capsys):
    yt = str(_yt_file(tmp_path / "yt.h5"))
    out = tmp_path / "run"
    assert _main(["--out", str(out), *[yt if a == "YT" else a for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("unknown_form study: error: ")
    assert not out.exists()


def test_a_file_of_another_system_is_refused(tmp_path, capsys):
    import h5py

    path = _yt_file(tmp_path / "rb.h5")
    with h5py.File(path, "a") as f:
        f.attrs["system"] = "rigid_body"
    assert _main(["--out", str(tmp_path / "run"), "--systems", "rigid_body_exp", "--data", str(path)]) == 2
    assert "holds system 'rigid_body', not 'rigid_body_exp'" in capsys.readouterr().err


def test_listed_as_a_study():
    from vpintegrator.studies.options import STUDIES

    assert STUDIES["unknown_form"][0] == "unknown_form"


def test_a_cells_rows_are_priced_together_on_the_one_meter(monkeypatch):
    """batch1_costs prices every row of a cell in one call of the cost meter (interleaved rounds, set-up
    apart), each row's call one batch-1 rollout from its own condition; the cost is per unit time, and a
    slower row (RK4 against Euler at the same step) costs more."""
    import vpintegrator.clock as clock
    from vpintegrator.rollout import IntegratorStep
    from vpintegrator.studies.unknown_form.evaluation import METER_REPEATS, batch1_costs
    from vpintegrator.systems import get_system

    system = get_system("rigid_body")
    z0 = np.array([0.6, 0.5, 0.62])
    seen = []
    real = clock.meter_surviving

    def spy(calls, repeats=3, clock=clock.THREAD_CPU):
        seen.append((sorted(calls), repeats))
        return real(calls, repeats, clock)

    monkeypatch.setattr(clock, "meter_surviving", spy)
    costs = batch1_costs({"euler": (IntegratorStep(system, "euler", uf.H), z0),
                          "rk4": (IntegratorStep(system, "rk4", uf.H), z0)}, 2000)
    assert seen == [(["euler", "rk4"], METER_REPEATS)]
    for c in costs.values():
        assert 0 < c["cost"] < 1e-2 and c["cost_setup"] >= 0 and c["cost_clock"] == "thread_cpu"
        assert c["cost_repeats"] == METER_REPEATS and c["runner"] != "?"
    assert costs["rk4"]["cost"] > costs["euler"]["cost"]


def test_metered_costs_say_so_in_the_tables():
    """A row priced on the meter shows its set-up beside its cost, and the tables say how the costs were taken;
    rows from before the meter keep their cells as they were."""
    rows = _rows()
    plain = uf.tables(uf.summarize_rows(rows))
    assert "set-up excluded (results from before the cost meter)" in plain and "set-up 0" not in plain
    metered = [{**r, "cost_setup": 0.25, "cost_clock": "thread_cpu", "cost_repeats": 3} for r in rows]
    text = uf.tables(uf.summarize_rows(metered))
    assert "| 1e-05 (numba; set-up 0.25 s) |" in text and "taken on the cost meter (warm: the minimum" in text
    assert "separate rollouts" not in text
    mixed = uf.tables(uf.summarize_rows(metered[:3] + rows[3:]))
    assert "the other rows are the minimum over 3 separate rollouts each" in mixed


@pytest.mark.slow
def test_tiny_end_to_end_run_on_the_control_system(tmp_path, capsys):
    """The whole code path on the rigid body (every row, one seed, σ = 0 and 1e-3, 1 CPU s per training)."""
    out = tmp_path / "run"
    argv = ["--out", str(out), "--systems", "rigid_body", "--seeds", "0", "--n-train", "20", "--n-test", "6",
            "--budget-seconds", "1", "--sweep", "1", "--jobs", "1", "--max-steps", "20"]
    assert _main([*argv, "--noise", "0,0.001"]) == 0
    rows = json.loads((out / "unknown_form.json").read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert methods == {"lpnet", "lphnn@implicit_midpoint", "lphnn@gauss_legendre4", "node@rk4",
                       "sindy+gauss_legendre4", "poly2+gauss_legendre4", "oracle gauss_legendre4"}
    assert {r["noise"] for r in rows} == {0.0, 0.001}
    clean = {r["method"]: r for r in rows if r["noise"] == 0}
    # the control: the true field is in the degree-2 library, so SINDy and the "wrong class" find it
    for m in ("sindy+gauss_legendre4", "poly2+gauss_legendre4", "oracle gauss_legendre4"):
        assert np.median(clean[m]["errors"]["10"]) < 1e-4, m
        assert clean[m]["cost"] > 0
    assert clean["oracle gauss_legendre4"]["structure"] < 1e-12
    # every row priced on the cost meter: warm thread CPU, its set-up apart
    assert all(r["cost_clock"] == "thread_cpu" and r["cost_setup"] >= 0 and r["cost_repeats"] == 3
               for r in rows if math.isfinite(r["cost"]))
    assert clean["lpnet"]["structure"] < 1e-12 and clean["lpnet"]["sweep"][0]["curve"]["cpu"]
    # node: an Adam warm start, then LM from its best.pt; the point's CPU is both phases'
    node = clean["node@rk4"]["sweep"][0]
    assert (out / node["run"]).with_name(node["run"].split("/")[-1] + "_adam").joinpath("best.pt").is_file()
    assert node["model_run"] in (node["run"], node["run"] + "_adam") and node["cpu_seconds"] > 0
    assert clean["lphnn@implicit_midpoint"]["casimir_long"] < 1e-12
    assert all(len(r["errors"]["10"]) == 6 for r in rows if r.get("failed", 0) >= 0)
    assert (out / "unknown_form.md").is_file() and (out / "unknown_form_cost_rigid_body.png").is_file()
    # the plateau rule by default: every phase stopped at its plateau or its 20-step cap, as its record says
    stops = {s for r in rows for p in r.get("sweep") or [] for s in p["stopped"]}
    assert stops <= {"plateau (patience)", "step budget", "wall ceiling"} and stops
    assert "Stop rule of the trainings: the validation plateau" in (out / "unknown_form.md").read_text()
    # a second invocation reuses the finished runs and replaces its own rows only
    assert _main([*argv, "--noise", "0"]) == 0
    again = json.loads((out / "unknown_form.json").read_text())["rows"]
    assert len(again) == len(rows)


def test_recipes_train_fields_through_their_rollout_method_and_warm_start_hnn_and_node():
    """lphnn is trained through Gauss–Legendre 4 and rolled out by it first (implicit midpoint is the Casimir
    check); hnn and node start with Adam, then LM from Adam's best.pt, in the same budget."""
    model, optimizer, methods, sweep = uf.RECIPES["lphnn"]
    assert optimizer == "lm" and methods == ("gauss_legendre4", "implicit_midpoint")
    assert all(p["model.method"] == "gauss_legendre4" and p["lm_check_windows"] > 0 for p in sweep)
    for approach, method in (("hnn", "gauss_legendre4"), ("node", "rk4")):
        _, optimizer, methods, sweep = uf.RECIPES[approach]
        assert optimizer == "lm" and methods == (method,)
        assert all(p["model.method"] == method for p in sweep)
        phases = uf_design.phases(Path("runs/x_p0_seed0"), approach, 0)
        (adam, adam_set, adam_share), (lm, lm_set, lm_share) = phases
        assert adam.name == "x_p0_seed0_adam" and lm.name == "x_p0_seed0"
        assert adam_set["optimizer"] == "adam" and adam_set["model.width"] == lm_set["model.width"]
        assert lm_set["init_from"] == str(adam / "best.pt") and "warm_start" not in lm_set
        assert adam_share + lm_share == pytest.approx(1.0)
    assert len(uf_design.phases(Path("runs/y"), "lpnet", 1)) == 1


def _fake_run(path, cpu, val, best, cpu_time, n_params=100):
    path.mkdir(parents=True)
    lines = ["epoch,train_loss,val_loss,lr,seconds,cpu_seconds,val_rollout"]
    lines += [f"{i},1.0,1.0,0.001,{c},{c},{v}" for i, (c, v) in enumerate(zip(cpu, val))]
    (path / "log.csv").write_text("\n".join(lines) + "\n")
    write_json(path / "summary.json", {"best_loss": best, "cpu_time": cpu_time, "n_params": n_params})


def test_a_warm_started_point_sums_its_phases_and_keeps_the_better_model(tmp_path):
    run = tmp_path / "runs" / "s" / "hnn_p0_seed0"
    _fake_run(run.with_name("hnn_p0_seed0_adam"), [1.0, 2.0], [1e-2, 5e-3], 5e-3, 2.5)
    _fake_run(run, [1.0, 3.0], [1e-3, 2e-4], 2e-4, 3.5)
    p = uf_runs.point(tmp_path, "hnn", 0, run)
    assert p["cpu_seconds"] == pytest.approx(6.0) and p["best_loss"] == 2e-4
    assert p["curve"]["cpu"] == [1.0, 2.0, 3.5, 5.5] and p["curve"]["val"] == [1e-2, 5e-3, 1e-3, 2e-4]
    assert p["model_run"] == "runs/s/hnn_p0_seed0"
    # an LM phase that never beat Adam's validation score leaves Adam's best.pt as the model
    run2 = tmp_path / "runs" / "s" / "hnn_p1_seed0"
    _fake_run(run2.with_name("hnn_p1_seed0_adam"), [1.0, 2.0], [1e-2, 5e-3], 5e-3, 2.5)
    _fake_run(run2, [1.0], [9e-3], 9e-3, 1.0)
    info = uf.chosen(tmp_path, "hnn", [run, run2])
    assert info["sweep"][1]["model_run"] == "runs/s/hnn_p1_seed0_adam"
    assert info["point"] == 0 and info["run"] == run and info["train_cpu"] == pytest.approx(9.5)


def test_the_plan_counts_runs_and_the_default_fits_two_hours_on_two_cores():
    default = uf.plan(list(uf.SYSTEMS), range(5), uf.DEFAULTS["noise"], uf.DEFAULTS["budget_seconds"],
                      uf.DEFAULTS["sweep"])
    assert default["cells"] == 30 and default["trainings"] == 30 * 6
    # warm-started points (hnn, node) are two vp-train processes each
    assert default["processes"] == 10 * (8 + 10 + 8)
    assert default["training_cpu"] == pytest.approx(180 * uf.DEFAULTS["budget_seconds"] + 260 * uf.STARTUP_CPU)
    assert default["wall"] <= 2 * 3600
    quick = uf.plan(list(uf.SYSTEMS), [0], uf.QUICK["noise"], uf.QUICK["budget_seconds"], uf.QUICK["sweep"])
    assert quick["trainings"] == 9 and quick["wall"] <= 600
    assert "180 training runs" in uf.plan_line(default)


def test_the_plan_prices_a_plateau_run_from_its_measured_cpu_and_a_budget_run_at_its_budget():
    args = (list(uf.SYSTEMS), range(5), uf.DEFAULTS["noise"], uf.DEFAULTS["budget_seconds"], uf.DEFAULTS["sweep"])
    plateau = uf.plan(*args, rule=uf.StopRule())
    budget = uf.plan(*args, rule=uf.StopRule("cpu"))
    assert plateau["priced"] == "plateau" and budget["priced"] == "budget"
    assert budget == {**uf.plan(*args), "priced": "budget"}
    measured = sum(sum(points) for by in uf.PLATEAU_CPU.values() for points in by.values())
    assert plateau["training_cpu"] == pytest.approx(10 * measured + 260 * uf.STARTUP_CPU)
    assert "at their plateau" in uf.plan_line(plateau) and "x 50 CPU s" in uf.plan_line(budget)
    # a cell takes at least its longest training (hnn's second point on the oscillator, both phases)
    one = uf.plan(["coupled_oscillator"], [0], [0.0], 50.0, 2, jobs=2, rule=uf.StopRule())
    longest = uf.PLATEAU_CPU["coupled_oscillator"]["hnn"][1] + 2 * uf.STARTUP_CPU
    assert one["wall"] - one["evaluation_cpu"] - one["data_cpu"] == pytest.approx(
        max(one["training_cpu"] / 2, longest))
    # other caps or patience: not what was measured, priced at the budget
    for rule in (uf.StopRule(patience=5), uf.StopRule(max_steps={"lm": 100, "adam": 2000})):
        assert uf.plan(*args, rule=rule)["priced"] == "budget"


@pytest.mark.skipif(not (Path(__file__).resolve().parent.parent / "docs" / "data"
                         / "unknown_form_plateau.json").is_file(), reason="repository files (not in the wheel)")
def test_the_measured_plateau_cpu_is_drawn_from_the_shipped_plateau_rows():
    """PLATEAU_CPU is the mean over σ and seeds of each sweep point's CPU in the shipped plateau rows, rounded
    to the second: no figure of it is typed by hand."""
    root = Path(__file__).resolve().parent.parent
    rows = json.loads((root / "docs" / "data" / "unknown_form_plateau.json").read_text("utf-8"))["rows"]
    seen: dict[tuple, float] = {}
    for row in rows:
        for point in row.get("sweep") or []:
            seen[(row["system"], row["approach"], row["noise"], row["seed"], point["point"])] = point["cpu_seconds"]
    drawn: dict[str, dict[str, list[list[float]]]] = {}
    for (system, approach, _, _, p), cpu in seen.items():
        points = drawn.setdefault(system, {}).setdefault(approach, [[], []])
        points[p].append(cpu)
    assert {s: {a: tuple(float(round(sum(v) / len(v))) for v in pts) for a, pts in by.items()}
            for s, by in drawn.items()} == uf.PLATEAU_CPU
    seeds = sorted({row["seed"] for row in rows})
    assert f"seed{'s' if len(seeds) > 1 else ''} {','.join(map(str, seeds))}," in uf.PLATEAU_CPU_SOURCE


def test_estimate_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    pytest.importorskip("pysindy")
    out = tmp_path / "run"
    assert _main(["--out", str(out), "--estimate"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("unknown_form plan: 30 (seed, system, σ) cells, 180 training runs") and "\n" not in line
    assert not out.exists()


@pytest.mark.skipif(not (Path(__file__).resolve().parent.parent / "docs" / "data" / "archive" / "unknown_form.json").is_file(),
                    reason="repository files (not in the wheel)")
@pytest.mark.parametrize("name", ["unknown_form", "unknown_form_plateau"])
def test_the_shipped_results_are_the_docs_tables(name):
    """docs/data/NAME.json (the earlier record: docs/data/archive/unknown_form.json) is the file the tables of its
    section of docs/unknown_form.md come from: every line of the tables `--table-only` draws from it is in that section, so no number there is typed by hand."""
    root = Path(__file__).resolve().parent.parent
    path = results_files(archived=True)[name]
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["commands"] and all(c.startswith("vp-study unknown_form ") for c in doc["commands"])
    text = (root / "docs" / "unknown_form.md").read_text(encoding="utf-8")
    marker = f"--results {path.relative_to(root).as_posix() if 'archive' in path.parts else name} "
    assert text.count(marker) == 1, f"one section of the page names {marker!r}"
    start = text.index(marker)
    section = text[text.rindex("\n## ", 0, start):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    drawn = uf.tables(uf.summarize_rows(doc["rows"])).splitlines()
    missing = [line for line in drawn if line.startswith("|") and line not in section]
    assert len(drawn) > 20 and not missing, missing[:3]
