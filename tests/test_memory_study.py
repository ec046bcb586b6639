"""The memory study (``vp-study memory``): its plan from the options (every refusal one line naming the flag), the
composition of its rows at tiny size, the tables redrawn byte for byte from a results file, and a verdict that
follows the numbers it is given."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vpintegrator.studies.driver import main
from vpintegrator.studies.memory import STUDY, draw
from vpintegrator.studies.memory.plan import DEFAULTS, QUICK
from vpintegrator.studies.runner import StudyError


def test_the_plan_takes_the_sizes_and_every_option(tmp_path):
    quick = STUDY.parse(["--out", str(tmp_path), "--quick"])
    assert quick.windows == (1, 4) and quick.seeds == (0,) and quick.bath_sizes == (100,) and quick.noise == (0.0, 1e-3)
    assert [c for c, _, _ in quick.cases()] == ["coupled_oscillator", "kac_zwanzig_N100"]
    assert ("delay_mlp2", 1) not in quick.training_runs() and ("delay_mlp2", 4) in quick.training_runs()
    assert quick.stop_keys()["max_steps"] == QUICK["max_steps"]
    plan = STUDY.parse(["--out", str(tmp_path), "--systems", "particle_chain", "--bath-sizes", "10,30", "--windows",
                        "2,1", "--noise", "0,1e-3", "--approaches", "gru", "--max-steps", "7", "--n-test", "3"])
    assert [c for c, _, _ in plan.cases()] == ["particle_chain_N10", "particle_chain_N30"]
    assert plan.windows == (1, 2) and plan.noise == (0.0, 1e-3) and plan.training_runs() == [("gru", 1), ("gru", 2)]
    assert plan.max_steps == 7 and plan.n_test == 3


def test_the_default_size_is_planned_and_says_its_size(tmp_path):
    plan = STUDY.parse(["--out", str(tmp_path)])
    line = plan.size_line()
    assert plan.seeds == tuple(DEFAULTS["seeds"]) and plan.bath_sizes == (100, 1000, 10000)
    assert "4 cases" in line and "kac_zwanzig_N10000" in line and "trainings of 30 steps" in line, line
    assert f"{4 * 5 * 9} trainings" in line, line  # 4 cases x 5 seeds x (5 models x 2 windows - delay_mlp2 at T = 1)


def test_the_default_size_is_estimated_within_two_cpu_hours_and_a_dry_run_writes_nothing(tmp_path, capsys):
    """The plan's estimate (``CPU_BASIS`` times the plan's counts) of the default size is at most 2 CPU hours with 5
    seeds and at least 100 held-out conditions; the old default (4 windows, 100 trajectories, 100 steps) was not;
    ``--dry-run`` prints the size and the estimate by part and writes nothing."""
    plan = STUDY.parse(["--out", str(tmp_path / "o")])
    est = plan.cpu_estimate()
    assert len(plan.seeds) == 5 and plan.n_test >= 100 and est["total"] <= 2 * 3600, est
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"))
    old = STUDY.parse(["--out", str(tmp_path / "o"), "--windows", "1,2,4,8", "--n-train", "100", "--max-steps", "100"])
    assert old.cpu_estimate()["trainings"] > 10 * 3600
    assert main(STUDY, ["--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimate total:" in out and "CPU h" in out and not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, message", [
    (["--windows", "60", "--t-train", "40"], "--windows: T = 60 reaches t = 10"),
    (["--t-train", "1", "--windows", "4"], "--windows: T = 4 needs 8 states per training window"),
    (["--systems", "lorenz"], "--systems must be a comma list out of coupled_oscillator, kac_zwanzig"),
    (["--bath-sizes", "20000"], "--bath-sizes: N = 20000 is out of range"),
    (["--bath-sizes", "0"], "--bath-sizes must be a comma list of bath sizes N >= 1"),
    (["--noise", "-1e-3"], "--noise must be a comma list of noise sigmas >= 0"),
    (["--approaches", "mamba"], "--approaches must be a comma list out of delay_mlp"),
    (["--skip-existing"], "--skip-existing"),
    (["--score-times", "10.1"], "--score-times: t = 10.1 is not a whole number of steps h = 0.2"),
    (["--score-times", "0"], "--score-times must be a comma list of times >= 0.2"),
    (["--score-times", "0.4,20"], "--windows: T = 4 reaches t = 0.4 (step 2), where the errors are first scored"),
])
def test_bad_options_are_one_line(argv, message, tmp_path):
    with pytest.raises(StudyError) as err:
        STUDY.parse(["--out", str(tmp_path), *argv])
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_score_times_are_a_plan_key(tmp_path):
    """Errors are scored at t = 10, 20 (a bath's particle still moves) and 100 by default; ``--score-times`` sets
    them (sorted) and the plan's size line says them."""
    assert STUDY.parse(["--out", str(tmp_path), "--quick"]).score_times == (10.0, 20.0, 100.0)
    plan = STUDY.parse(["--out", str(tmp_path), "--quick", "--score-times", "20,12"])
    assert plan.score_times == (12.0, 20.0) and "scored at t = 12, 20;" in plan.size_line()


def test_the_tables_take_the_horizons_of_the_file():
    """A file scored at t = 10, 20 and 100 draws a column and verdict bullets at each; a file of before the key
    (t = 10 and 100 only) draws no t = 20 at all."""
    doc = _doc()
    assert "| t = 10 | t = 100 | 10-90 % at t = 100 |" in draw(doc) and "t = 20" not in draw(doc)
    for r in doc["rows"]:
        r["err_t20"] = {"median": 0.5 * r["err_t100"]["median"], "lo": None, "hi": None, "n": 5}
    text = draw(doc)
    assert "| t = 10 | t = 20 | t = 100 | 10-90 % at t = 100 |" in text
    assert "  - At t = 20 the best row is estimate+exact_flow at T = 4 (2.50e-14) (known)" in text


def test_an_arx_fit_is_exact_on_the_oscillator_with_its_coupling_frozen():
    """The linear control of the memory study's oscillator: with the sigmoid-switched coupling k sigma(q1) frozen at
    k / 2 the system is linear, and ARX over two observed q states is its exact flow map (error at round-off at
    t = 20); with the coupling switched as the arena's, the same fit is off by tens of percent (the oscillator is
    nonlinear)."""
    from scipy.integrate import solve_ivp

    from vpintegrator.rollout import ARXStep, rollout

    h, K, (m1, m2, k1, k2, k) = 0.2, 100, (2.0, 1.0, 1.5, 0.3, 1.0)  # the arena's parameters (coupled_oscillator)

    def field(t, y, frozen):
        q1, q2, p1, p2 = y
        s = 0.5 if frozen else 1.0 / (1.0 + math.exp(-q1))
        d, ds = q1 - q2, 0.0 if frozen else s * (1.0 - s)
        return [p1 / m1, p2 / m2, -k1 * q1 - k * s * d - 0.5 * k * ds * d * d, -k2 * q2 + k * s * d]

    def observed(y0, frozen):  # (n, K + 1, 2): q of the exact flow
        t = h * np.arange(K + 1)
        return np.stack([solve_ivp(field, (0.0, t[-1]), y, args=(frozen,), t_eval=t, method="DOP853", rtol=1e-12,
                                   atol=1e-12).y.T[:, :2] for y in y0])

    errors = {}
    for frozen in (True, False):
        rng = np.random.default_rng(0)
        train, test = observed(rng.standard_normal((12, 4)), frozen), observed(rng.standard_normal((6, 4)), frozen)
        y = rollout(ARXStep(train[2:], train[:2], context_len=2), test[:, :2], h, K).y
        errors[frozen] = float(np.median(np.linalg.norm(y[:, K] - test[:, K], axis=-1)
                                         / np.linalg.norm(test[:, K], axis=-1)))
    assert errors[True] < 1e-9 and errors[False] > 1e-2, errors


def test_the_ladder_composes_on_tiny_data(tmp_path):
    """Fitted and known rows of one case from a tiny file: every row scored at both horizons against the exact flow
    from held-out conditions, with its fit cost and its batch-1 cost on the meter (no learned row: the slow test
    trains them)."""
    from vpintegrator.studies.memory.ladder import evaluate_case, make_data

    plan = STUDY.parse(["--out", str(tmp_path), "--quick", "--windows", "2,5", "--n-train", "8", "--n-test", "3",
                        "--noise", "0,1e-3", "--seeds", "0"])
    train = make_data(tmp_path, "coupled_oscillator", None, plan.n_train, plan.t_train)
    rows = evaluate_case(plan, "coupled_oscillator", "coupled_oscillator", None, train, {})
    labels = {(r["label"], r["noise"]) for r in rows}
    for label in ("arx_T2", "delay_dmd_T2", "narx_T2", "parrot_T2", "estimate+gauss_legendre4", "estimate+exact_flow",
                  "estimate+gauss_legendre4_T5", "estimate+exact_flow_T5"):
        assert (label, 0.0) in labels and (label, 1e-3) in labels, label
    for r in rows:
        assert r["err_t10"]["n"] == 3 and r["err_t100"]["n"] == 3 and r["cost"] > 0
    exact = next(r for r in rows if r["label"] == "estimate+exact_flow" and r["noise"] == 0.0)
    assert exact["err_t100"]["median"] < 1e-8 and exact["kind"] == "known" and exact["seed"] is None
    assert next(r for r in rows if r["label"] == "arx_T2")["fit_cpu"] is not None
    whole = next(r for r in rows if r["label"] == "estimate+exact_flow_T5" and r["noise"] == 0.0)
    assert whole["T"] == 5 and whole["kind"] == "known" and whole["err_t100"]["median"] < 1e-8  # the batch smoother


def test_the_bath_rows_compose_and_order_six_is_the_known_equations_ceiling(tmp_path):
    """The hidden-bath case at a small N: the GLE and Verlet at h = 0.2 (both order 2: errors of one size), the
    order-6 full-order row far below them (the accuracy of knowing the equations), every row from the particle's
    first observed state."""
    from vpintegrator.studies.memory.ladder import evaluate_case, make_data

    plan = STUDY.parse(["--out", str(tmp_path), "--quick", "--windows", "1", "--n-train", "6", "--n-test", "3",
                        "--bath-sizes", "10", "--noise", "0"])
    train = make_data(tmp_path, "kac_zwanzig", 10, plan.n_train, plan.t_train)
    rows = {r["label"]: r for r in evaluate_case(plan, "kac_zwanzig_N10", "kac_zwanzig", 10, train, {})}
    err = {label: rows[label]["err_t10"]["median"] for label in ("gle", "bath+stormer_verlet", "bath+bath_splitting_y6")}
    assert rows["gle"]["kind"] == "known" and rows["bath+bath_splitting_y6"]["kind"] == "full_order"
    assert 0.2 < err["gle"] / err["bath+stormer_verlet"] < 5 and err["bath+bath_splitting_y6"] < 0.01 * err["gle"], err
    assert {"arx_T1", "narx_T1", "parrot_T1"} <= set(rows) and rows["gle"]["N"] == 10


def test_a_finished_training_is_reused_only_under_the_same_stop_rule(tmp_path, monkeypatch):
    import vpintegrator.training as training
    from vpintegrator.studies.memory.ladder import train_run

    calls = []
    monkeypatch.setattr(training, "fit", lambda config, overwrite=False: calls.append(config["max_steps"]))
    run = tmp_path / "runs" / "c" / "delay_mlp_T1_seed0"
    run.mkdir(parents=True)
    (run / "complete.json").write_text("{}")
    (run / "summary.json").write_text(json.dumps({"stop_rule": {"max_steps": 20, "patience": 5}}))
    train_run(tmp_path, tmp_path / "d.h5", "c", "coupled_oscillator", None, "delay_mlp", 1, 0, {"max_steps": 20}, 5)
    assert calls == []
    train_run(tmp_path, tmp_path / "d.h5", "c", "coupled_oscillator", None, "delay_mlp", 1, 0, {"max_steps": 30}, 5)
    assert calls == [30]


def _row(system, approach, T, kind, e10, e100, cost, seed=None, N=None, arena=None):
    return {"system": system, "arena": arena or system, "N": N, "observe": "q", "approach": approach,
            "label": f"{approach}_T{T}", "T": T, "kind": kind, "seed": seed, "noise": 0.0, "cost": cost,
            "fit_cpu": 1.0, "err_t10": {"median": e10, "lo": e10, "hi": e10, "n": 5},
            "err_t100": {"median": e100, "lo": e100, "hi": e100, "n": 5}}


def _doc():
    co = "coupled_oscillator"
    rows = [_row(co, "estimate+exact_flow", 3, "known", 1e-13, 1e-13, 1e-5),
            _row(co, "estimate+exact_flow", 4, "known", 2e-13, 5e-14, 1e-5),
            _row(co, "arx", 4, "fitted", 1e-3, 0.05, 1e-6), _row(co, "arx", 1, "fitted", math.inf, math.inf, 1e-6),
            _row(co, "delay_mlp", 1, "model", 0.5, 1.0, 1e-4, 0), _row(co, "delay_mlp", 4, "model", 0.01, 0.3, 1e-4, 0),
            _row(co, "vpt_mix", 4, "model", 0.005, 0.4, 2e-4, 0)]
    for n, (gle, verlet, data_cost) in {100: (1e-7, 2e-6, 1e-6), 10000: (1e-7, 2e-4, 1e-6)}.items():
        case = f"kac_zwanzig_N{n}"
        rows += [_row(case, "gle", 1, "known", 0.01, 0.1, gle, N=n, arena="kac_zwanzig"),
                 _row(case, "bath+stormer_verlet", 1, "full_order", 0.01, 0.12, verlet, N=n, arena="kac_zwanzig"),
                 _row(case, "narx", 4, "fitted", 0.02, 0.11, data_cost, N=n, arena="kac_zwanzig")]
    rows[-1]["err_t100"]["median"] = 0.09  # at N = 10^4 the data-only row is the most accurate and cheapest there
    return {"commands": ["vp-study memory --out x"], "budget": "hand-made", "rows": rows}


def test_the_verdict_follows_the_numbers():
    text = draw(_doc())
    assert max(len(line) for line in text.splitlines() if line.startswith(("- **", "  - "))) <= 300  # short bullets
    co = text.split("**coupled_oscillator, noise 0**:\n")[1].split("\n\n")[0]
    assert all(line.startswith("  - At t = ") for line in co.splitlines())  # one finding a bullet
    t10, t100 = co.split("At t = 100", 1)
    assert "the best row is estimate+exact_flow" in t10 and "the best network is vpt_mix at T = 4" in t10
    assert "attention beat the window MLP (vpt_mix at T = 4 (0.005) against delay_mlp at T = 4 (0.01))" in t10
    assert "attention did not beat the window MLP" in t100 and "the best network is delay_mlp at T = 4 (0.3)" in t100
    assert "a least-squares fit beats every network (arx at T = 4 (0.05))" in t100
    assert "memory helps the data-only rows" in t100
    assert "the estimate over the whole window does not beat the one from the first states (estimate+exact_flow at " \
           "T = 4 (2.00e-13) against estimate+exact_flow at T = 3 (1.00e-13))" in t10
    assert "the estimate over the whole window beats the one from the first states" in t100
    bath = text.split("**kac_zwanzig, t = 100, who is cheapest at equal accuracy**:\n")[1].split("\n\n")[0]
    assert "N = 100: the best data-only row is narx at T = 4 (0.11)" in bath
    assert "the cheapest row at least as accurate is gle (0.1)" in bath
    assert "A data-only row is first the cheapest at its accuracy at N = 10000." in bath


def test_table_only_redraws_byte_for_byte_from_a_results_file(tmp_path):
    from vpintegrator.studies.stats import write_json

    results = tmp_path / "memory.json"
    write_json(results, _doc())
    for out in ("a", "b"):
        assert main(STUDY, ["--out", str(tmp_path / out), "--table-only", "--results", str(results), "-q"]) == 0
    first = (tmp_path / "a" / "results.md").read_bytes()
    assert first == (tmp_path / "b" / "results.md").read_bytes() == draw(_doc()).encode()
    assert b"| arx | 1 | fitted | inf | inf |" in first
    assert (tmp_path / "a" / "memory_work_precision_kac_zwanzig.png").stat().st_size > 0  # the bath's figure


def test_a_foreign_results_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"commands": [], "rows": [{"system": "x", "label": "y"}]}))
    assert main(STUDY, ["--out", str(tmp_path / "o"), "--table-only", "--results", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json: row 0 (y) has no key" in err[0], err


@pytest.mark.slow
def test_the_study_runs_end_to_end_and_redraws_its_tables(tmp_path):
    """Both arenas at tiny size from the command line: the fitted, known, full-order and learned rows (one network
    trained one epoch of 10 steps), the tables, and ``--table-only`` drawing the same bytes from the JSON it wrote."""
    out = tmp_path / "run"
    assert main(STUDY, ["--out", str(out), "--quick", "--windows", "1,2", "--n-train", "8", "--n-test", "3",
                        "--max-steps", "10", "--approaches", "delay_mlp", "--bath-sizes", "20", "--jobs", "1",
                        "--score-times", "6,20", "-q"]) == 0
    doc = json.loads((out / "memory.json").read_text())
    assert all("err_t6" in r and "err_t20" in r and "err_t100" not in r for r in doc["rows"])  # the plan's times
    labels = {(r["system"], r["label"]) for r in doc["rows"]}
    assert {("coupled_oscillator", "delay_mlp_T2"), ("kac_zwanzig_N20", "gle"),
            ("kac_zwanzig_N20", "bath+stormer_verlet"), ("kac_zwanzig_N20", "bath+bath_splitting_y6"),
            ("kac_zwanzig_N20", "arx_T2")} <= labels
    net = next(r for r in doc["rows"] if r["label"] == "delay_mlp_T1")
    assert net["steps"] == 10 and net["seed"] == 0 and net["fit_cpu"] > 0
    assert doc["cpu_seconds"] > 0 and math.isfinite(doc["cpu_seconds"])
    again = tmp_path / "again"
    assert main(STUDY, ["--out", str(again), "--table-only", "--results", str(out / "memory.json"), "-q"]) == 0
    assert (again / "results.md").read_bytes() == (out / "memory.md").read_bytes()


@pytest.mark.parametrize("name", ["quick", "default", "chain_default"])
def test_the_documented_tables_and_verdict_are_the_shipped_json(name):
    """docs/memory.md shows every table line and every verdict line the study draws from its shipped results file
    memory/<name> (read through ``results_files``, as from an installed wheel): a number edited on the page, or a
    file from another run, fails here; the file names no path of the machine it ran on."""
    from pathlib import Path

    from vpintegrator._shipped import results_files
    from vpintegrator.studies.memory.tables import read_doc

    path = results_files()[f"memory/{name}"]
    raw = Path(path).read_text()
    assert "/tmp/" not in raw and "/work/" not in raw and "/home/" not in raw
    page_file = Path(__file__).resolve().parents[1] / "docs" / "memory.md"
    if not page_file.is_file():
        pytest.skip("the documentation page (not in the wheel)")
    page = page_file.read_text()
    drawn = [line for line in draw(read_doc(path)).splitlines() if line.startswith(("| ", "- **", "  - "))]
    assert len(drawn) > 20 and [line for line in drawn if line not in page] == []


def test_the_results_say_how_many_trainings_the_valve_cut_each_run_once():
    """The safety valve's cuts are counted per trained run (a run has a row per noise level), by clock (issue 88)."""
    doc = _doc()
    models = [r for r in doc["rows"] if r["kind"] == "model"]
    for r, (stopped, clock) in zip(models, [("steps", None), ("time_limit", "cpu"), ("early_stopping", None)]):
        r.update(stopped=stopped, stop_clock=clock, run=f"{r['label']}_seed0")
    doc["rows"].append({**models[1], "noise": 0.01})  # the cut run again at a second noise level: still one run
    assert "Training: hand-made; cut by the valve: 1 of 3 trainings (cpu 1)." in draw(doc).splitlines()
