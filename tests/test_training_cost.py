"""Training cost on the work–precision axis (issue 32, item 4): training CPU seconds recorded by fit, the cost
with training amortised over N rollouts, the break-even N* against the cheapest classical method at the
model's error, old tables without those columns, the figure and the CLIs."""

from __future__ import annotations

import csv
import json
import math

import pytest

from vpintegrator.data.work_precision import (
    COST_COLUMNS, WP_COLUMNS, WP_COLUMNS_V1, WP_COLUMNS_V2, WorkPrecisionRow, amortised_cost, break_even, read_work_precision, with_training_cost,
)
from vpintegrator.errors import VPIntegratorError
from vpintegrator.plotting import plot_work_precision
from vpintegrator.rollout import training_seconds, write_work_precision
from vpintegrator.studies.work_precision import at_equal_cost

pytestmark = pytest.mark.usefixtures("one_thread")

TAU = 2.0  # the table's horizon t_end


def _row(method, kind, h, error, cost, train=math.nan):
    return WorkPrecisionRow(method, kind, h, math.nan, 10, TAU, 3, error, error, error, 1e-3, cost, "numba", train)


def _table(model_error=6.25e-5, model_cost=5e-7, train=30.0):
    """rk4: error 1e-3 → 6.25e-5 → 3.90625e-6 at cost 1e-6 → 2e-6 → 4e-6; gl4 four times as costly."""
    rk4 = [_row("rk4", "integrator", h, e, c) for h, e, c in ((0.2, 1e-3, 1e-6), (0.1, 6.25e-5, 2e-6),
                                                               (0.05, 3.90625e-6, 4e-6))]
    gl4 = [_row("gauss_legendre4", "integrator", h, e, 4 * c) for h, e, c in ((0.2, 1e-3, 1e-6), (0.1, 6.25e-5, 2e-6),
                                                                               (0.05, 3.90625e-6, 4e-6))]
    return [*rk4, *gl4, _row("net", "model", 0.1, model_error, model_cost, train)]


def test_break_even_at_a_rung_and_between_rungs():
    rows = _table()
    n, method = break_even(rows[-1], rows)
    # T_train / (τ (c_cl(e_m) − c_m)) = 30 / (2 (2e-6 − 5e-7))
    assert method == "rk4" and n == pytest.approx(30 / (2 * 1.5e-6), rel=1e-12)
    # between the rungs (1e-3, 1e-6) and (6.25e-5, 2e-6): log–log midpoint in error -> sqrt(2) 1e-6
    rows = _table(model_error=math.sqrt(1e-3 * 6.25e-5))
    n, method = break_even(rows[-1], rows)
    assert method == "rk4" and n == pytest.approx(30 / (2 * (math.sqrt(2) * 1e-6 - 5e-7)), rel=1e-12)
    # the same interpolation as the equal-cost table, in the other direction: rk4's error at c_cl(e_m) is e_m
    write_work_precision_rows = with_training_cost(rows)
    (m,) = [r for r in write_work_precision_rows if r.kind == "model"]
    assert m.break_even_rollouts == pytest.approx(n, rel=1e-15) and m.break_even_method == "rk4"


def test_never_when_a_classical_method_is_cheaper_and_as_accurate():
    rows = _table(model_cost=3e-6)  # rk4 reaches 6.25e-5 at 2e-6 < 3e-6
    assert break_even(rows[-1], rows) == (math.inf, "rk4")
    rows = _table(model_error=5e-3, model_cost=5e-7)  # worse than every rung: rk4's cheapest rung (1e-6) decides
    assert break_even(rows[-1], rows) == (pytest.approx(30 / (2 * 5e-7), rel=1e-12), "rk4")
    rows = _table(model_error=5e-3, model_cost=2e-6)
    assert break_even(rows[-1], rows) == (math.inf, "rk4")
    # "never" needs no training time
    rows = _table(model_cost=3e-6, train=math.nan)
    assert break_even(rows[-1], rows) == (math.inf, "rk4")


def test_missing_training_time_and_an_unreachable_error():
    rows = _table(train=math.nan)
    n, method = break_even(rows[-1], rows)
    assert math.isnan(n) and method == "rk4"
    assert math.isnan(amortised_cost(rows[-1], 100))
    rows = _table(model_error=1e-9)  # no ladder gets down to it
    n, method = break_even(rows[-1], rows)
    assert math.isnan(n) and method == ""


def test_amortised_cost_and_bad_n():
    rows = with_training_cost(_table(), amortise_over=1000)
    m = rows[-1]
    assert m.amortise_over == 1000 and m.amortised_seconds_per_time == pytest.approx(5e-7 + 30 / (1000 * TAU), rel=1e-15)
    assert all(math.isnan(r.amortised_seconds_per_time) for r in rows[:-1])
    for bad in (0, -1, math.inf, "10", True):
        with pytest.raises(VPIntegratorError, match="amortise_over: expected a positive number"):
            with_training_cost(_table(), amortise_over=bad)


def test_csv_round_trip_and_an_old_table(tmp_path):
    rows = with_training_cost(_table(), amortise_over=50)
    write_work_precision(tmp_path / "new", rows)
    assert (tmp_path / "new.csv").read_text().splitlines()[0] == ",".join(WP_COLUMNS)
    back = read_work_precision(tmp_path / "new.csv")
    for a, b in zip(back, rows):
        for x, y in zip(a.__dict__.values(), b.__dict__.values()):
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (a, b)
    # a table written before training cost was recorded: the old columns only, under their old names (before
    # the cost columns said their clock)
    with open(tmp_path / "new.csv", newline="") as fh:
        table = [{old: row[COST_COLUMNS.get(old, old)] for old in WP_COLUMNS_V2} for row in csv.DictReader(fh)]
    with open(tmp_path / "v2.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, WP_COLUMNS_V2)
        w.writeheader()
        w.writerows(table)
    assert [r.__dict__.keys() for r in read_work_precision(tmp_path / "v2.csv")] == [r.__dict__.keys() for r in back]
    assert [r.seconds_per_time for r in read_work_precision(tmp_path / "v2.csv")] == [r.seconds_per_time for r in back]
    with open(tmp_path / "old.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, WP_COLUMNS_V1, extrasaction="ignore")
        w.writeheader()
        w.writerows(table)
    old = read_work_precision(tmp_path / "old.csv")
    assert [r.error_median for r in old] == [r.error_median for r in rows]
    assert all(math.isnan(r.train_seconds) and math.isnan(r.break_even_rollouts) and r.break_even_method == ""
               for r in old)
    same = ("model", "model_error", "model_cost", "model_h", "method", "error", "how")
    assert [{k: p[k] for k in same} for p in at_equal_cost(tmp_path / "old.csv")] == \
           [{k: p[k] for k in same} for p in at_equal_cost(tmp_path / "new.csv")]
    n, method = break_even(old[-1], old)  # not recorded: no N*, but the method that would set it
    assert math.isnan(n) and method == "rk4"
    fig = plot_work_precision(tmp_path / "old.csv", amortise_over=10)  # nothing to amortise: bare points only
    assert not any("training" in line.get_label() for line in fig.axes[0].get_lines())


def test_equal_cost_table_unchanged_by_the_shared_interpolation(tmp_path):
    rows = _table(model_cost=math.sqrt(2e-6 * 4e-6))  # between rk4's rungs 2 and 3
    write_work_precision(tmp_path / "wp", rows)
    pairs = {p["method"]: p for p in at_equal_cost(tmp_path / "wp.csv")}
    assert pairs["rk4"]["how"] == "interpolated"
    assert pairs["rk4"]["error"] == pytest.approx(math.sqrt(6.25e-5 * 3.90625e-6), rel=1e-12)
    assert pairs["gauss_legendre4"]["how"] == "cheapest" and pairs["gauss_legendre4"]["error"] == 1e-3


def test_figure_draws_the_amortised_points():
    rows = with_training_cost(_table())
    fig = plot_work_precision(rows, amortise_over=1e6)
    err_ax = fig.axes[0]
    (line,) = [line for line in err_ax.get_lines() if "training" in line.get_label()]
    assert line.get_label() == f"net + training / 1e+06 rollouts, N* = {30 / (2 * 1.5e-6):.3g} vs rk4"
    assert line.get_xdata()[0] == pytest.approx(5e-7 + 30 / (1e6 * TAU), rel=1e-15)
    assert line.get_ydata()[0] == 6.25e-5
    assert len(err_ax.texts) == 1  # the arrow from the bare cost
    # the N the table was written with is the default
    fig = plot_work_precision(with_training_cost(_table(), amortise_over=1e6))
    assert any("training / 1e+06" in line.get_label() for line in fig.axes[0].get_lines())
    fig = plot_work_precision(rows)  # no N: bare costs only
    assert not any("training" in line.get_label() for line in fig.axes[0].get_lines())


def test_fit_records_cpu_time_and_a_tiny_model_on_the_cli(tiny_data, tmp_path):
    """fit writes summary.json's cpu_time; vp-rollout --work-precision --amortise carries it into the model row
    (with N* and the amortised cost) and vp-plot --amortise draws it."""
    from click.testing import CliRunner

    from vpintegrator.cli import plot, rollout
    from vpintegrator.training import fit

    run = tmp_path / "run"
    fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, epochs=2, batch_size=32,
             dtype="float64", device="cpu", seed=5, out=str(run)))
    cpu = json.loads((run / "summary.json").read_text())["cpu_time"]
    assert isinstance(cpu, float) and cpu > 0
    assert training_seconds(run) == cpu == training_seconds(run / "best.pt")
    assert math.isnan(training_seconds("pretrained:rigid_body_vpt")) and math.isnan(training_seconds(tmp_path))

    runner = CliRunner()
    out = tmp_path / "r.h5"
    args = ["--data", tiny_data, "--model", str(run), "--integrators", "rk4,implicit_midpoint", "--traj", "0,1",
            "--t-end", "1.6", "--work-precision", "--amortise", "500", "--out", str(out)]
    res = runner.invoke(rollout.main, args)
    assert res.exit_code == 0, res.output
    rows = read_work_precision(tmp_path / "r_work_precision.csv")
    (m,) = [r for r in rows if r.kind == "model"]
    assert f"work-precision: run: trained in {cpu:.3g} CPU s" in res.output
    assert m.train_seconds == cpu and m.amortise_over == 500
    assert m.amortised_seconds_per_time == pytest.approx(m.seconds_per_time + cpu / (500 * m.t_end), rel=1e-12)
    n, method = break_even(m, rows)
    assert method in {"rk4", "implicit_midpoint", "dop853", ""}
    assert (m.break_even_method, m.break_even_rollouts) == (method, pytest.approx(n, rel=1e-12, nan_ok=True))
    res = runner.invoke(plot.main, [str(tmp_path / "r_work_precision.csv"), "--amortise", "1e4",
                                    "--out", str(tmp_path / "fig"), "--set", 'formats=["png"]'])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fig" / "work_precision.png").is_file()
    for cli, bad, match in ((plot.main, [str(tmp_path / "r_work_precision.csv"), "--amortise", "0"], "amortise_over"),
                            (rollout.main, ["--data", tiny_data, "--amortise", "5", "--out", str(tmp_path / "x.h5")],
                             "--amortise N goes with --work-precision")):
        res = runner.invoke(cli, bad)
        assert res.exit_code == 1 and match in res.output and "Traceback" not in res.output, res.output


def test_cpu_time_adds_up_over_a_resume(tiny_data, tmp_path):
    from vpintegrator.training import fit

    run = tmp_path / "run"
    cfg = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, epochs=1, batch_size=32,
               dtype="float64", device="cpu", seed=5, out=str(run))
    fit(cfg)
    first = json.loads((run / "summary.json").read_text())["cpu_time"]
    fit(resume=run, epochs=2)
    second = json.loads((run / "summary.json").read_text())
    assert second["epochs"] == 2 and second["cpu_time"] > first


def test_equal_cost_section_shows_break_even_only_where_recorded(tmp_path):
    from vpintegrator.studies.work_precision import equal_cost_section

    write_work_precision(tmp_path / "trained", with_training_cost(_table()))
    text = "\n".join(equal_cost_section(tmp_path / "trained.csv"))
    assert "break-even rollouts" in text and f"{30 / (2 * 1.5e-6):.3g} (rk4)" in text
    write_work_precision(tmp_path / "never", with_training_cost(_table(model_cost=3e-6)))
    assert "never (rk4)" in "\n".join(equal_cost_section(tmp_path / "never.csv"))
    write_work_precision(tmp_path / "bare", _table(train=math.nan))  # rows without training cost: the old table
    assert "break-even" not in "\n".join(equal_cost_section(tmp_path / "bare.csv"))


def test_work_precision_refuses_bad_training_inputs_before_running():
    import numpy as np

    from vpintegrator.rollout import work_precision

    y0 = np.array([[1.0, 0.0, 0.0]])
    with pytest.raises(VPIntegratorError, match="amortise_over"):
        work_precision("rigid_body", y0, 0.2, 2.0, amortise_over=0)
    with pytest.raises(VPIntegratorError, match=r"train_seconds\['net'\]"):
        work_precision("rigid_body", y0, 0.2, 2.0, train_seconds={"net": -1.0})
