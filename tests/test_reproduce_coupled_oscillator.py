"""vpintegrator.studies.coupled_oscillator (scripts/reproduce_coupled_oscillator.py): the results table from
a run directory, bad input, the plan on the shared task runner, and (slow) the whole pipeline at tiny
settings."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vpintegrator.studies import coupled_oscillator
from vpintegrator.studies.driver import main as run_study

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "reproduce_coupled_oscillator.py"
# the script in a checkout; its one line (the study's main) where the tests run against an installed wheel
RUN = ([sys.executable, str(SCRIPT)] if SCRIPT.is_file() else
       [sys.executable, "-c", "from vpintegrator.studies.driver import main; raise SystemExit(main(\'coupled_oscillator\'))"])


@pytest.fixture(scope="module")
def study():
    return coupled_oscillator


def _row(method, drift, slope, err, valid, logdet, failed=0):
    return {
        "method": method, "final_rel_error": err, "valid_time": valid, "max_rel_drift_energy": drift,
        "drift_slope_energy": slope, "max_abs_cum_log_det_J": logdet, "seconds_per_step": 1e-4,
        "n_traj": 1, "failed": failed,
    }


def _train_run(run: Path, name: str, best_epoch: int, train_losses: list[float], best_loss: float, wall: float):
    d = run / "train" / name
    d.mkdir(parents=True)
    lines = ["epoch,train_loss,val_loss,lr,seconds"]
    lines += [f"{i + 1},{v!r},{v * 1.1!r},0.001,{10.0 * (i + 1)}" for i, v in enumerate(train_losses)]
    (d / "log.csv").write_text("\n".join(lines) + "\n")
    summary = {"model": name.split("_")[0], "n_params": 282 if name.startswith("vpt") else 324,
               "epochs": len(train_losses), "train_loss": train_losses[-1], "best_loss": best_loss,
               "best_epoch": best_epoch, "wall_time": wall, "stopped": "time_limit"}
    (d / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def fake_run(tmp_path):
    """A run directory as the study leaves it (rollout tables written by the package's writer)."""
    from vpintegrator.metrics import write_table

    run = tmp_path / "run"
    (run / "rollout").mkdir(parents=True)
    rows = [
        _row("stormer_verlet", 0.02, 1e-6, 0.5, 40.0, 1e-15),
        _row("rk4", 0.3, -7e-5, 0.9, 60.0, 0.8),
        _row("vpt_s0", 0.01, 2e-6, 0.2, 100.0, 1e-12),
        _row("st_s0", 0.5, 1e-4, 1.0, 10.0, 3.0),
        _row("vpt_s1", 0.03, 4e-6, 0.4, 200.0, 3e-12),
        _row("st_s1", 0.7, 3e-4, math.nan, 20.0, 5.0, failed=1),
    ]
    write_table(rows, run / "rollout" / "default")
    _train_run(run, "vpt_s0", 2, [0.1, 0.01, 0.02], 0.011, 90.0)
    _train_run(run, "vpt_s1", 3, [0.1, 0.05, 0.03], 0.033, 92.0)
    _train_run(run, "st_s0", 1, [0.3], 0.31, 91.0)
    _train_run(run, "st_s1", 1, [0.5], 0.52, 93.0)
    (run / "settings.json").write_text(json.dumps({"seeds": [0, 1], "n_steps": 10000, "t_end": 4000.0,
                                                    "commands": ["vp-gen coupled_oscillator"]}))
    return run


def test_rows_aggregate_seeds_with_ddof_1(study, fake_run):
    rows = {r["method"]: r for r in study.build_rows(fake_run, "default")}
    assert list(rows) == ["stormer_verlet", "rk4", "vpt", "st"]
    sv, vpt, st = rows["stormer_verlet"], rows["vpt"], rows["st"]
    assert sv["kind"] == "integrator" and sv["max_rel_energy_drift"] == pytest.approx(0.02, rel=1e-12)
    assert math.isnan(sv["max_rel_energy_drift_std"])
    assert vpt["seeds"] == [0, 1]
    assert vpt["max_rel_energy_drift"] == pytest.approx(0.02, rel=1e-12)
    assert vpt["max_rel_energy_drift_std"] == pytest.approx(math.sqrt(2) * 0.01, rel=1e-12)  # ddof = 1
    assert vpt["valid_time"] == pytest.approx(150.0, rel=1e-12)
    # training numbers: the train loss at the best epoch (the rolled-out best.pt), the best val loss, wall time
    assert vpt["train_loss"] == pytest.approx((0.01 + 0.03) / 2, rel=1e-12)
    assert vpt["val_loss"] == pytest.approx(0.022, rel=1e-12)
    assert vpt["train_seconds"] == pytest.approx(91.0, rel=1e-12)
    assert vpt["n_params"] == 282
    assert st["failed"] == 1


@pytest.mark.parametrize(
    ("values", "mean", "std"),
    [([1.0], 1.0, math.nan), ([1.0, 3.0], 2.0, math.sqrt(2.0)), ([1.0, math.inf], math.inf, math.nan), ([], math.nan, math.nan)],
)
def test_mean_std(values, mean, std):
    from vpintegrator.studies.stats import mean_std

    m, s = mean_std(values)
    assert (math.isnan(m) and math.isnan(mean)) or m == pytest.approx(mean, rel=1e-12)
    assert (math.isnan(s) and math.isnan(std)) or s == pytest.approx(std, rel=1e-12)


def test_table_only_rebuilds_results(study, fake_run, capsys):
    assert run_study(study.STUDY, ["--out", str(fake_run), "--table-only"]) == 0
    md = (fake_run / "results.md").read_text()
    assert "| VPT (volume-preserving transformer) | 2 | 0.02 ± 0.0141 |" in md
    assert "| Störmer–Verlet | – | 0.02 |" in md
    assert "vp-gen coupled_oscillator" in md
    data = json.loads((fake_run / "results.json").read_text())
    assert [r["method"] for r in data["tables"]["default"]] == ["stormer_verlet", "rk4", "vpt", "st"]
    assert data["tables"]["heldout"] == []
    assert "| method |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seeds", "a,b"], "--seeds"),
        (["--seeds", "1,1"], "--seeds"),
        (["--seeds", ""], "--seeds"),
        (["--train-seconds", "-1"], "--train-seconds"),
        (["--train-seconds", "nan"], "--train-seconds"),
        (["--jobs", "0"], "--jobs"),
        (["--n-steps", "2"], "--n-steps"),
        (["--heldout", "-1"], "--heldout"),
        (["--init-scale", "0"], "--init-scale"),
        (["--vpt-config", "no/such.toml"], "--vpt-config"),
        (["--jobs", "two"], "--jobs"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_input_is_one_line(study, tmp_path, capsys, args, needle):
    assert run_study(study.STUDY, ["--out", str(tmp_path / "run"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_bad_run_directories(study, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert run_study(study.STUDY, ["--out", str(tmp_path / "full")]) == 2  # not empty, no --skip-existing
    assert run_study(study.STUDY, ["--out", str(tmp_path / "missing"), "--table-only"]) == 2
    (tmp_path / "empty").mkdir()
    assert run_study(study.STUDY, ["--out", str(tmp_path / "empty"), "--table-only"]) == 2  # no rollout tables
    (tmp_path / "file").write_text("")
    assert run_study(study.STUDY, ["--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("Error: ") for line in err)


def test_table_text_cites_nothing_outside_the_repository(study, fake_run):
    md = study.write_results(fake_run)
    assert "DESIGN.md" not in md and "issue" not in md


def test_settings_record_the_plan_under_the_keys_the_tables_read(tmp_path):
    """RUN/settings.json (read back by the tables of every run since) keeps its keys in their order: the plan's own
    and shared keys, ``max_steps`` each model's step budget (whole epochs of its measured cost)."""
    s = coupled_oscillator.STUDY.parse(["--out", str(tmp_path / "co"), "--quick", "--models", "st,vpt"])
    assert list(s.settings) == ["out", "seeds", "train_seconds", "jobs", "n_steps", "heldout", "train_n_traj", "quick",
                                "skip_existing", "overwrite", "models", "configs", "init_scale", "export_pretrained",
                                "budget", "wall_ceiling", "patience", "max_steps"]
    assert s.settings["max_steps"] == {"vpt": 90, "st": 100}  # 30 CPU s: 9 epochs of 3.32 s, 10 of 2.75 s
    assert (s.settings["seeds"], s.settings["models"], s.settings["n_steps"], s.settings["budget"]) == (
        [0], ["vpt", "st"], 2500, "plateau")


def test_both_studies_plan_on_the_one_runner(tmp_path):
    """The rigid-body and coupled-oscillator studies share one task runner, Task and StudyError."""
    from vpintegrator.studies import rigid_body, runner

    assert coupled_oscillator.StudyError is rigid_body.StudyError is runner.StudyError
    settings = coupled_oscillator.STUDY.parse(["--out", str(tmp_path / "co"), "--seeds", "0,1", "--models", "st,vpt",
                                                 "--init-scale", "0.3"])
    plans = [coupled_oscillator.plan(settings), rigid_body.plan(rigid_body.STUDY.parse(["--out", str(tmp_path / "rb")]))]
    for plan in plans:
        assert type(plan) is runner.Runner and plan.tasks
        steps = ("vpintegrator.studies.attention", "vpintegrator.studies.rigid_body_results.cost")  # the studies' own steps
        assert all(type(t) is runner.Task and (t.cmd[0] in runner.TOOLS or (t.cmd[:2] == ["python", "-m"] and t.cmd[2] in steps))
                   for t in plan.tasks.values())
    co = plans[0].tasks
    assert list(co) == ["gen_train", "gen_default", "gen_heldout", "train_vpt_s0", "train_st_s0", "train_vpt_s1",
                        "train_st_s1", "rollout_default", "plot_default", "rollout_heldout", "plot_heldout",
                        "rollout_work_precision", "plot_work_precision", "attention_vpt_s0", "attention_st_s0",
                        "attention_vpt_s1", "attention_st_s1"]
    wp = [str(c) for c in co["rollout_work_precision"].cmd]
    assert "--work-precision" in wp and wp[wp.index("--traj") + 1] == ",".join(map(str, range(20)))
    assert [x for x in wp if x.startswith("vpt_s")] and not [x for x in wp if x.startswith("vpt_s1")]  # first seed only
    assert set(co["rollout_heldout"].deps) == {"gen_heldout", "train_vpt_s0", "train_st_s0", "train_vpt_s1",
                                               "train_st_s1"}
    train = [str(c) for c in co["train_st_s1"].cmd]
    assert "init_scale=0.3" in train and train[train.index("--seed") + 1] == "1"
    assert not (tmp_path / "co").exists() and not (tmp_path / "rb").exists()  # planning writes nothing


@pytest.mark.parametrize("args", [[], ["--out", "x", "--seeds", "-1"]])
def test_command_line_errors_have_no_traceback(args):
    proc = subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    run = tmp_path / "run"
    args = ["--out", str(run), "--seeds", "0,1", "--train-seconds", "2", "--n-steps", "30", "--heldout", "2",
            "--train-n-traj", "12", "--jobs", "2"]
    proc = subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((run / "results.json").read_text())
    for name in ("default", "heldout"):
        methods = [r["method"] for r in data["tables"][name]]
        assert methods == ["stormer_verlet", "stormer_verlet_y6", "rk4", "vpt", "st", "symplectic_transformer",
                           "g_sympnet"]
        vpt = data["tables"][name][3]
        assert vpt["seeds"] == [0, 1] and vpt["n_params"] == 282
        assert vpt["max_abs_cum_log_det_J"] < 1e-6  # volume preserving up to rounding (non-overlapping windows)
    assert (run / "figures" / "default" / "invariants.png").exists()
    assert (run / "train" / "vpt_s1" / "best.pt").exists()
    # the protocol's parts: per-IC statistics, the work-precision run and figure, every window model's attention
    stats = {r["method"]: r for r in data["heldout_statistics"]}
    assert stats["g_sympnet"]["seeds"] == [0, 1] and stats["stormer_verlet_y6"]["error"]["n"] == 2
    assert (run / "rollout" / "work_precision_work_precision.csv").exists()
    assert (run / "figures" / "work_precision" / "work_precision.png").exists()
    assert sorted(p.stem for p in (run / "attention").glob("*.json")) == [
        "st_s0", "st_s1", "symplectic_transformer_s0", "symplectic_transformer_s1", "vpt_s0", "vpt_s1"]
    text = (run / "results.md").read_text()
    assert "### Over the held-out initial conditions" in text and "### Attention" in text and "Work–precision" in text
    # --skip-existing redoes nothing and gives the same table
    before = (run / "results.md").read_text()
    proc = subprocess.run([*RUN, *args, "--skip-existing"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "vp-train" not in proc.stdout.split("# Coupled")[0]
    assert "train_vpt_s1: done before, skipped" in proc.stdout
    assert (run / "results.md").read_text().split("## Commands")[0] == before.split("## Commands")[0]
