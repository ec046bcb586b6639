"""Work–precision rows, their CSV and the diagram (issue 20, item 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vpintegrator.data import Trajectories
from vpintegrator.data.work_precision import WP_COLUMNS, read_work_precision
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import load_model
from vpintegrator.plotting import plot_work_precision
from vpintegrator.rollout import work_precision, write_work_precision
from vpintegrator.systems import get_system, sample_initial_conditions

LADDER = (1.0, 0.5, 0.25, 0.125)


@pytest.fixture(scope="module")
def rows():
    y0 = sample_initial_conditions("rigid_body", "sphere", 3, rng=5)
    vpt = load_model("pretrained:rigid_body_vpt").double()
    return work_precision("rigid_body", y0, 0.2, 2.4, methods=["rk4", "implicit_midpoint", "gauss_legendre4"],
                          ladder=LADDER, dop853_rtols=(1e-5, 1e-8), models={"VPT": vpt}, repeats=1)


def _exact_by_radau(y0, t):
    """The coupled oscillator's flow at t by SciPy's Radau (an implicit method, not the package's DOP853)."""
    from scipy.integrate import solve_ivp

    sys = get_system("coupled_oscillator")
    out = []
    for y in y0:
        sol = solve_ivp(lambda _t, z: sys.vector_field(z[None])[0], (0.0, t), y, method="Radau", rtol=1e-13,
                        atol=1e-13)
        out.append(sol.y[:, -1])
    return np.array(out)


def test_orders_show_on_the_ladder(rows):
    by = {}
    for r in rows:
        by.setdefault(r.method, []).append(r)
    for method, order in (("rk4", 4), ("implicit_midpoint", 2), ("gauss_legendre4", 4)):
        errs = [r.error_median for r in sorted(by[method], key=lambda r: -r.h)]
        rates = [math.log2(a / b) for a, b in zip(errs, errs[1:])]
        assert all(abs(rate - order) < 0.5 for rate in rates), (method, rates)
        assert [r.n_steps for r in sorted(by[method], key=lambda r: -r.h)] == [12, 24, 48, 96]
    # quadratic invariants (energy and Casimir of the rigid body): implicit midpoint and Gauss keep them
    assert all(r.drift_max < 1e-12 for r in by["implicit_midpoint"] + by["gauss_legendre4"])
    assert all(r.drift_max > 1e-12 for r in by["rk4"][:2])
    assert [r.rtol for r in by["dop853"]] == [1e-5, 1e-8] and by["dop853"][1].error_median < by["dop853"][0].error_median
    (vpt,) = by["VPT"]
    assert vpt.kind == "model" and vpt.h == 0.2 and vpt.n_steps == 12 and 1e-6 < vpt.error_median < 0.1
    assert all(r.seconds_per_time > 0 and r.n_traj == 3 and r.t_end == 2.4 for r in rows)


def test_error_is_against_the_exact_flow():
    """RK4's error against a flow computed independently (Radau) agrees with the row's (DOP853 reference)."""
    y0 = np.array([[0.3, -0.2, 0.5, 0.1], [1.0, 0.0, 0.0, -1.0]])
    (r,) = work_precision("coupled_oscillator", y0, 0.4, 4.0, methods=["rk4"], ladder=(1, 1, 1, 1),
                          dop853_rtols=None, repeats=1)[:1]
    from vpintegrator import integrate

    y = integrate("coupled_oscillator", y0, 0.4, 10, method="rk4").y[:, -1]
    exact = _exact_by_radau(y0, 4.0)
    err = np.linalg.norm(y - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert r.error_median == pytest.approx(float(np.median(err)), rel=1e-6)  # the one definition: numpy's median
    assert r.error_max == pytest.approx(float(err.max()), rel=1e-6)


def test_csv_round_trip_and_diagram(rows, tmp_path):
    write_work_precision(tmp_path / "wp", rows)
    back = read_work_precision(tmp_path / "wp.csv")
    assert len(back) == len(rows)
    for a, b in zip(back, rows):  # every field back bit for bit (NaN where NaN)
        for x, y in zip(a.__dict__.values(), b.__dict__.values()):
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (a, b)
    assert (tmp_path / "wp.csv").read_text().splitlines()[0] == ",".join(WP_COLUMNS)
    with pytest.raises(VPIntegratorError, match="exists"):
        write_work_precision(tmp_path / "wp", rows)
    fig = plot_work_precision(tmp_path / "wp.csv")
    err_ax, drift_ax = fig.axes[:2]
    assert err_ax.get_xscale() == "log" and err_ax.get_yscale() == "log"
    labels = {line.get_label() for line in err_ax.get_lines()}
    assert {"RK4", "implicit midpoint", "Gauss–Legendre 4", "DOP853", "VPT"} <= labels
    rk4 = next(line for line in err_ax.get_lines() if line.get_label() == "RK4")
    assert len(rk4.get_xdata()) == 4


def test_the_table_module_writes_reads_and_reads_at_equal_cost(rows, tmp_path):
    """One home for the table: the data layer's module writes it, reads it back equal, and reads the classical
    methods at the models' cost from rows or from the file alike; the old import paths are the same objects."""
    import vpintegrator.data.work_precision as table
    import vpintegrator.rollout as rollout
    from vpintegrator.studies.work_precision import at_equal_cost

    assert rollout.write_work_precision is table.write_work_precision and at_equal_cost is table.at_equal_cost
    assert rollout.training_seconds is table.training_seconds and rollout.WorkPrecisionRow is table.WorkPrecisionRow
    csv_path, md_path = table.write_work_precision(tmp_path / "wp", rows)
    assert [repr(r) for r in table.read_work_precision(csv_path)] == [repr(r) for r in rows]
    md = md_path.read_text()
    assert "| method | kind |" in md and "interleaved repeats" in md.split("| method")[0]  # how the cost was taken
    pairs = table.at_equal_cost(rows)
    assert repr(pairs) == repr(table.at_equal_cost(csv_path)) and {p["method"] for p in pairs} == {
        "rk4", "implicit_midpoint", "gauss_legendre4", "dop853"}
    assert all(p["model"] == "VPT" and p["how"] in ("interpolated", "cheapest", "dearest") for p in pairs)
    with pytest.raises(VPIntegratorError, match="rows: expected WorkPrecisionRow"):
        table.work_precision_rows([1, 2])


def test_bad_input(tmp_path):
    y0 = np.array([[1.0, 0.0, 0.0]])
    with pytest.raises(VPIntegratorError, match="ladder: expected at least 4"):
        work_precision("rigid_body", y0, 0.2, 2.0, ladder=(1, 0.5))
    with pytest.raises(VPIntegratorError, match="not a whole number of steps"):
        work_precision("rigid_body", y0, 0.2, 2.1, methods=["rk4"], ladder=LADDER, dop853_rtols=None)
    with pytest.raises(VPIntegratorError, match=r"y0: expected shape \(n_traj, 3\)"):
        work_precision("rigid_body", np.zeros((2, 4)), 0.2, 2.0)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(VPIntegratorError, match="not a work-precision table"):
        read_work_precision(tmp_path / "other.csv")
    with pytest.raises(VPIntegratorError, match="rows: expected WorkPrecisionRow"):
        plot_work_precision([Trajectories(y=np.zeros((1, 2, 3)), t=np.arange(2.0))])


def test_cli_rollout_work_precision_and_plot(tmp_path):
    """vp-rollout --work-precision writes the table beside the rollout file; vp-plot draws it; both refuse to
    overwrite (the work-precision tables before any rollout runs)."""
    from click.testing import CliRunner

    from vpintegrator.cli import gen, plot, rollout

    runner = CliRunner()
    data, out = tmp_path / "d.h5", tmp_path / "r.h5"
    assert runner.invoke(gen.main, ["rigid_body", "--n-traj", "3", "--t-end", "1.6", "--out", str(data), "-q"]).exit_code == 0
    args = ["--data", str(data), "--integrators", "rk4,implicit_midpoint", "--work-precision", "--out", str(out), "-q"]
    res = runner.invoke(rollout.main, args)
    assert res.exit_code == 0, res.output
    table = tmp_path / "r_work_precision.csv"
    rows = read_work_precision(table)
    assert {r.method for r in rows} == {"rk4", "implicit_midpoint", "dop853"}
    assert sorted({r.h for r in rows if r.method == "rk4"}) == [0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2]  # 2h .. h/16, h = 0.1
    assert "Work-precision table" in res.output
    (tmp_path / "r.h5").unlink()
    (tmp_path / "r.csv").unlink()
    (tmp_path / "r.md").unlink()
    before = table.read_bytes()
    res = runner.invoke(rollout.main, args)
    assert res.exit_code == 1 and "r_work_precision.csv" in res.output and "--overwrite" in res.output
    assert not out.exists() and table.read_bytes() == before  # refused before the rollouts ran
    res = runner.invoke(plot.main, [str(table), "--out", str(tmp_path / "fig")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fig" / "work_precision.png").is_file() and (tmp_path / "fig" / "work_precision.pdf").is_file()
    res = runner.invoke(plot.main, [str(table), "--kind", "error"])
    assert res.exit_code == 1 and "cannot be combined" in res.output


def test_an_observed_window_model_is_scored_on_its_channels(tmp_path):
    """A model trained on observed q: the table reads the observation from its checkpoint, hands it the observed
    first window and scores every row on q (the classical rows' full final state observed), against the observed
    exact flow computed here."""
    from vpintegrator.data import integrate, solve_flow, write_trajectories
    from vpintegrator.rollout import RolloutConfig, run_work_precision
    from vpintegrator.training import fit

    rng = np.random.default_rng(3)
    y0 = rng.uniform([-1, -1, -2, -2], [1, 1, 2, 2], size=(12, 4))
    data = write_trajectories(tmp_path / "co.h5", integrate("coupled_oscillator", y0, 0.2, 20,
                                                             method="gauss_legendre4"))
    fit({"data": [str(data)], "model": {"name": "delay_mlp", "seq_len": 3, "width": 8}, "observe": "q",
         "optimizer": "adam", "epochs": 2, "batch_size": 64, "dtype": "float64", "seed": 0,
         "out": str(tmp_path / "run")})
    config = RolloutConfig(data=str(data), models=[("mlp", str(tmp_path / "run"))], integrators=["rk4"], n_traj=4,
                           t_end=2.0, out=str(tmp_path / "wp.h5"))
    _, _, rows = run_work_precision(config, repeats=1)
    first = integrate("coupled_oscillator", y0[:4], 0.2, 0, method="gauss_legendre4").y[:, 0]
    exact = np.asarray(solve_flow("coupled_oscillator", first, np.array([0.0, 2.0]), rtol=1e-13, atol=1e-13))[:, -1, :2]
    rk4 = next(r for r in rows if r.method == "rk4" and r.h == pytest.approx(0.2))
    q = integrate("coupled_oscillator", first, 0.2, 10, method="rk4").y[:, -1, :2]
    err = np.linalg.norm(q - exact, axis=1) / np.linalg.norm(exact, axis=1)
    assert rk4.error_median == pytest.approx(float(np.median(err)), rel=1e-6)
    model = next(r for r in rows if r.kind == "model")
    assert model.method == "mlp" and np.isfinite(model.error_median) and math.isnan(model.drift_max)


def test_a_work_precision_row_is_priced_by_the_studies_rule(monkeypatch):
    """The table's rows cost what every study's rows cost (``price_seconds``): the engine's seconds of the step
    map's start and its steps, per unit time; neither part left out."""
    import dataclasses

    from vpintegrator.rollout import engine
    from vpintegrator.rollout.precision import _Batch1

    class _Out:
        meta = {"seconds": 0.75, "setup_seconds": 0.25}

    class _Step:
        def describe(self):
            return {"runner": "stub"}

    monkeypatch.setattr(engine, "rollout", lambda *args, **kwargs: _Out())
    batch1 = _Batch1()
    batch1.rollout(0, _Step, np.zeros((1, 1, 2)), 0.1, 20)
    row = dataclasses.replace(_row_stub(), t_end=2.0)
    (priced,) = batch1.price([row], repeats=2)
    assert priced.seconds_per_time == pytest.approx(0.5) and priced.runner == "stub"
    assert engine.price_seconds(_Out.meta) == 1.0


def _row_stub():
    from vpintegrator.data.work_precision import WorkPrecisionRow

    return WorkPrecisionRow("m", "integrator", 0.1, math.nan, 20, 2.0, 1, 0.0, 0.0, 0.0, 0.0, math.nan, "?")
