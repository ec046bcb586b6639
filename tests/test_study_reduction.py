"""The reduction study (vpintegrator/studies/reduction/): the typed plan and its bad input in one line, the
break-even rule against a hand computation, the tables regenerated from the shipped JSON (as docs/lattices.md
shows them), and a tiny end-to-end run whose numbers are checked against direct computations (slow)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from vpintegrator.studies import reduction as rd
from vpintegrator.studies.runner import StudyError
from vpintegrator.studies.stats import read_json, unplain

ROOT = Path(__file__).resolve().parents[1]
#: the tests that read the shipped results in docs/ (repository files, not in the wheel)
needs_checkout = pytest.mark.skipif(not (ROOT / "docs" / "data" / "reduction").is_dir(),
                                    reason="repository files (not in the wheel)")


def _main(argv):
    from vpintegrator.studies.driver import main

    return main(rd.STUDY, argv)


def test_plan_is_typed_and_quick_defaults_apply(tmp_path):
    plan = rd.STUDY.parse(["--out", str(tmp_path), "--quick"])
    assert isinstance(plan, rd.ReductionPlan)
    assert plan.sizes == (200,) and plan.seeds == (0,) and plan.reduced_dims == (32,)
    assert plan.stride_steps == 20 and plan.output_every == plan.stride
    plan = rd.STUDY.parse(["--out", str(tmp_path), "--sizes", "800", "--seeds", "3,4", "--stride", "1.2"])
    assert plan.sizes == (800,) and plan.seeds == (3, 4) and plan.stride_steps == 12
    assert plan.ladder == rd.LADDERS["default"]


@pytest.mark.parametrize("args, message", [
    (["--sizes", "2"], "--sizes must be a comma list of lattice sizes N >= 3"),
    (["--stride", "0.25"], "--stride 0.25 is not a multiple of the data's step --data-dt 0.1"),
    (["--stride", "0.7"], "must divide T = 120"),
    (["--output-every", "3"], "--output-every 3 must be a multiple of --stride 2"),
    (["--reduced-dims", "31"], "--reduced-dims: a reduced dimension 2n is even; got 31"),
    (["--systems", "kdv"], "--systems must be a comma list out of toda, fpu_beta"),
])
def test_bad_input_is_one_line(args, message, tmp_path, capsys):
    assert _main(["--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_reduced_dim_above_the_lattice_is_refused_at_plan_time(tmp_path, capsys):
    """2n above the lattice's 2N (N = 4: 8) can never be fitted: one line naming the flag and the size, before any
    lattice is integrated (issue 69: it was refused mid-run, after the full-order rows; a rank below n that only
    the snapshots show is still refused then, by fit_psd)."""
    out = tmp_path / "run"
    assert _main(["--out", str(out), "--systems", "toda", "--sizes", "4", "--floor-dims", "12", "--ladder", "quick",
                  "--repeats", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--floor-dims: a reduced dimension 2n = 12 exceeds the full dimension 2N = 8" in err and "\n" not in err
    assert not out.exists()


def _entry(label, row, err, cost, offline=None):
    return {"system": "toda", "N": 200, "label": label, "row": row, "seed": None, "cost": cost,
            "offline_cpu": offline, **{f"err_t{t:g}": {"median": err, "lo": err, "hi": err, "n": 10}
                                       for t in rd.HORIZONS}}


def test_break_even_against_the_cheapest_full_order_row_as_accurate():
    rows = [_entry("verlet fine", "full_order", 1e-4, 4e-6), _entry("verlet coarse", "full_order", 1e-3, 1e-6),
            _entry("galerkin", "psd_galerkin", 2e-3, 5e-7, offline=6.0),  # beats coarse: 6 / ((1e-6 - 5e-7) 120)
            _entry("galerkin slow", "psd_galerkin", 2e-3, 2e-6, offline=6.0),  # the coarse row is cheaper: never
            _entry("learned", "psd_flow_map", 5e-5, 1e-6, offline=60.0)]  # no full-order row as accurate: never
    summary = {e["label"]: e for e in rd.summarize_rows(rows)}
    assert summary["galerkin"]["break_even"] == pytest.approx(6.0 / ((1e-6 - 5e-7) * 120.0))
    assert math.isinf(summary["galerkin slow"]["break_even"]) and math.isinf(summary["learned"]["break_even"])
    assert summary["verlet fine"]["break_even"] is None
    text = rd.tables(list(summary.values()))
    verdict, later = [line for line in text.splitlines() if line.startswith("At t = ")]
    assert later.startswith("At t = 960: **not beaten")
    assert verdict == "At t = 120: **not beaten by any full-order row at both error and cost**:"
    rows = text.split(verdict + "\n\n")[1].split("\n\n")[0].splitlines()  # the verdict's short bullets
    assert rows[0] == ("- galerkin (0.002 at 5.00e-07 s, 2 x the error and 0.5 x the cost of the cheapest "
                       "full-order row)")
    assert rows[1].startswith("- learned (5.00e-05") and not any("galerkin slow" in r for r in rows)


def test_seeds_give_a_median_and_a_bootstrap_interval():
    rows = [{**_entry("learned", "psd_flow_map", v, 1e-6, offline=1.0), "seed": s}
            for s, v in enumerate((1e-2, 2e-2, 4e-2))]
    (e,) = rd.summarize_rows(rows)
    assert e["seeds"] == [0, 1, 2] and e["t120"]["median"] == pytest.approx(2e-2)
    lo, hi = e["t120"]["ci"]
    assert 1e-2 <= lo <= 2e-2 <= hi <= 4e-2


def test_verdict_when_the_full_order_method_wins():
    rows = [_entry("verlet", "full_order", 1e-3, 1e-6), _entry("galerkin", "psd_galerkin", 2e-3, 3e-6, offline=1.0)]
    assert "At t = 120: **the full-order method wins**" in rd.tables(rd.summarize_rows(rows))


def test_balanced_floors_are_drawn_beside_the_plain_ones():
    rows = [_entry("verlet", "full_order", 1e-3, 1e-6), _entry("PSD floor, 2n = 4", "psd_floor", 0.6, None),
            _entry("PSD floor, 2n = 8", "psd_floor", 0.3, None),
            _entry("balanced PSD floor, 2n = 4", "psd_floor_balanced", 0.5, None),
            _entry("balanced PSD floor, 2n = 8", "psd_floor_balanced", 0.4, None),
            _entry("PSD-Galerkin, 2n = 8, stormer_verlet h = 1", "psd_galerkin", 0.31, 3e-6, offline=1.0),
            _entry("balanced PSD-Galerkin, 2n = 8, stormer_verlet h = 1", "psd_galerkin_balanced", 0.41, 3e-6,
                   offline=1.0)]
    text = rd.tables(rd.summarize_rows(rows))
    case = text.split("## Summary", 1)[1].split("\n## ", 1)[1]  # the lattice's own table, after the summary
    labels = [line.split(" | ")[0][2:] for line in case.splitlines() if line.startswith("| ") and "|---" not in line]
    assert labels[1:] == ["verlet", "PSD floor, 2n = 8", "PSD floor, 2n = 4", "balanced PSD floor, 2n = 8",
                          "balanced PSD floor, 2n = 4", "PSD-Galerkin, 2n = 8, stormer_verlet h = 1",
                          "balanced PSD-Galerkin, 2n = 8, stormer_verlet h = 1"]
    verdict = next(line for line in text.splitlines() if line.startswith("At t = 120"))
    assert verdict.startswith("At t = 120: **the full-order method wins**")
    bullets = text.split(verdict + "\n\n")[1].split("\n\n")[0].splitlines()
    assert bullets[-2:] == ["- the lowest PSD floor is 0.3 (2n = 8)", "- the lowest balanced PSD floor is 0.4 (2n = 8)"]


@needs_checkout
@pytest.mark.parametrize("name", ["quick", "quick_meter", "medium", "toda_n3200", "fpu_beta_n3200", "toda_n200",
                                  "default"])
def test_docs_tables_regenerate_from_the_shipped_json(name):
    """Every line of the tables drawn from docs/data/reduction/NAME.json is in docs/lattices.md, the verdicts'
    bullets included."""
    data = read_json(ROOT / "docs" / "data" / "reduction" / f"{name}.json")
    text = rd.tables(rd.summarize_rows(unplain(data["rows"])))
    page = (ROOT / "docs" / "lattices.md").read_text()
    missing = [line for line in text.splitlines() if line.startswith(("|", "At t = ", "- ")) and line not in page]
    assert not missing, missing[:3]


@needs_checkout
def test_table_only_redraws_from_a_results_file(tmp_path, capsys):
    src = ROOT / "docs" / "data" / "reduction" / "quick.json"
    out = tmp_path / "tables"
    assert _main(["--out", str(out), "--table-only", "--results", str(src), "-q"]) == 0
    assert "## toda, N = 200" in (out / "results.md").read_text()  # redraw_from: every study's --results layout
    assert (out / "results.json").read_bytes() == src.read_bytes()
    assert (out / "reduction_toda_N200.png").is_file()
    assert _main(["--out", str(out), "--table-only", "--results", "reduction/quick", "-q"]) == 0  # by its name
    assert _main(["--out", str(tmp_path / "none"), "--table-only"]) == 2
    assert "--table-only" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_run_end_to_end_against_direct_computations(tmp_path):
    """N = 24, every row family: the full-order error equals integrate's against the DOP853 reference, the floor
    equals an independent SVD's, and a flow-map row comes from any encoder with encode/decode/fit_seconds."""
    from vpintegrator.arrays import relative_error
    from vpintegrator.data import integrate

    plan = rd.STUDY.parse(["--out", str(tmp_path), "--systems", "toda", "--sizes", "24", "--floor-dims", "4",
                           "--reduced-dims", "4", "--train-seconds", "1", "--ladder", "quick", "--repeats", "1",
                           "--seeds", "0"])
    case = rd.make_case("toda", 24, plan.data_dt)
    assert case.heldout.shape == (10, 3, 48)
    full = rd.full_order_rows(plan, case)
    y = integrate(case.system, case.y0, 0.3, 400, method="stormer_verlet").y[:, -1]
    verlet = next(r for r in full if r["label"] == "stormer_verlet, h = 0.3")
    want = np.percentile(relative_error(y, case.heldout[:, 1]), 50)
    assert verlet["err_t120"]["median"] == pytest.approx(want, rel=1e-9)
    assert verlet["cost"] > 0

    (floor,) = rd.psd_floor_rows(plan, case)
    n = 24
    snaps = case.train.y.reshape(-1, 2 * n)
    u = np.linalg.svd(np.concatenate([snaps[:, :n], snaps[:, n:]], axis=0).T)[0][:, :2]
    a = np.block([[u, np.zeros_like(u)], [np.zeros_like(u), u]])
    proj = case.heldout[:, 1] @ a @ a.T
    want = np.percentile(np.linalg.norm(proj - case.heldout[:, 1], axis=1) / np.linalg.norm(case.heldout[:, 1],
                                                                                               axis=1), 50)
    assert floor["err_t120"]["median"] == pytest.approx(want, rel=1e-8)

    (balanced,) = rd.psd_floor_balanced_rows(plan, case)  # the SVD of [Q / |Q|_F, P / |P|_F]
    q, p = snaps[:, :n].T, snaps[:, n:].T
    u = np.linalg.svd(np.concatenate([q / np.linalg.norm(q), p / np.linalg.norm(p)], axis=1))[0][:, :2]
    a = np.block([[u, np.zeros_like(u)], [np.zeros_like(u), u]])
    proj = case.heldout[:, 1] @ a @ a.T
    want = np.percentile(np.linalg.norm(proj - case.heldout[:, 1], axis=1) / np.linalg.norm(case.heldout[:, 1],
                                                                                               axis=1), 50)
    assert balanced["row"] == "psd_floor_balanced" and balanced["label"] == "balanced PSD floor, 2n = 4"
    assert balanced["err_t120"]["median"] == pytest.approx(want, rel=1e-8)

    galerkin = rd.psd_galerkin_rows(plan, case)
    assert {r["bonds"] is None for r in galerkin} == {True, False}
    assert all(r["offline_cpu"] >= case.data_cpu for r in galerkin)

    calls = []

    def encoder(states, reduced_dim, seed=0):  # the autoencoder's interface, here the PSD itself
        calls.append((states.shape, reduced_dim, seed))
        return rd.fit_psd_encoder(states, reduced_dim)

    (learned,) = rd.flow_map_rows(plan, case, "mine", encoder)
    assert calls == [((11, 1201, 48), 4, 0)]
    assert learned["row"] == "mine_flow_map" and learned["label"].startswith("mine + flow map, 2n = 4")
    assert learned["cost"] > 0 and learned["offline_cpu"] > learned["train_cpu"] > 0


@needs_checkout
def test_skip_existing_runs_only_the_families_not_in_the_json(tmp_path, capsys):
    """--skip-existing on the shipped quick JSON runs only the row families of the lattice that are not there (a
    family added since, such as psd_floor_balanced, when the JSON predates it: then its rows are added and every
    old record is kept as it was); when every family is there it generates no data, trains nothing and redraws
    the tables from what is there."""
    import re
    import shutil

    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(ROOT / "docs" / "data" / "reduction" / "quick.json", out / "reduction.json")
    before = (out / "reduction.json").read_text()
    old = read_json(out / "reduction.json")["rows"]
    have = {r["row"] for r in old if r["system"] == "toda" and int(r["N"]) == 200}
    missing = set(rd.families(rd.STUDY.parse(["--out", str(out), "--quick"]), 200)) - have
    assert missing <= {"psd_floor_balanced", "psd_galerkin_balanced", "psd_sindy"}  # only cheap families in this test
    argv = ["--out", str(out), "--quick", "--skip-existing", "--systems", "toda"]
    assert _main(argv + ["--repeats", "1"] if missing else argv) == 0
    captured = "".join(capsys.readouterr())
    assert set(re.findall(r"toda N = 200: (\w+) done", captured)) == missing
    if not missing:
        assert "toda N = 200: in" in captured and "data (" not in captured
        assert (out / "reduction.json").read_text() == before
    rows = read_json(out / "reduction.json")["rows"]
    assert [r for r in rows if r["row"] in have or r["system"] != "toda"] == old
    assert {r["row"] for r in rows if r["system"] == "toda"} == have | missing
    assert "## toda, N = 200" in (out / "reduction.md").read_text()


def test_the_autoencoder_rows_run_at_their_sizes_only(tmp_path):
    plan = rd.STUDY.parse(["--out", str(tmp_path), "--sizes", "200,800", "--set", "autoencoder_sizes=[200]"])
    assert "autoencoder_flow_map" in rd.families(plan, 200)
    assert set(rd.families(plan, 800)) == set(rd.ROWS) - {"autoencoder_flow_map"}


@pytest.mark.skipif(importlib.util.find_spec("pysindy") is None, reason="pysindy (the sindy extra) is not installed")
def test_psd_sindy_rows_are_sindy_on_the_psd_coordinates(tmp_path, monkeypatch):
    """The fitted row of the reduction study: SINDy on the PSD coordinates of the training split, integrated and
    decoded; its error equals the one computed here from the chosen field (integrate, decode, relative error
    against the held-out reference), its cost is priced, and its offline CPU holds the fit."""
    from vpintegrator.arrays import relative_error
    from vpintegrator.data import integrate

    from vpintegrator.studies.reduction import rows as rd_rows  # the module whose psd_sindy_rows reads them

    monkeypatch.setattr(rd_rows, "SINDY_DIMS", (4,))
    monkeypatch.setattr(rd_rows, "SINDY_STEPS", (2,))
    picked = []
    import vpintegrator.rollout.sindy as sindy  # the row imports select_sindy from here when it runs

    orig = sindy.select_sindy

    def spy(*a, **k):
        res = orig(*a, **k)
        picked.append(res[0])
        return res

    monkeypatch.setattr(sindy, "select_sindy", spy)
    plan = rd.STUDY.parse(["--out", str(tmp_path), "--systems", "toda", "--sizes", "12", "--floor-dims", "4",
                           "--reduced-dims", "4", "--train-seconds", "1", "--ladder", "quick", "--repeats", "1",
                           "--seeds", "0"])
    case = rd.make_case("toda", 12, plan.data_dt)
    (row,) = rd.psd_sindy_rows(plan, case)
    fit = picked[0]
    assert fit is not None and row["library"] == fit.library and row["n_terms"] == fit.n_terms
    basis, _ = case.psd_basis(4)
    h = 2 * plan.data_dt
    from vpintegrator.errors import VPIntegratorError

    try:  # the chosen field may blow up before T (pysindy's versions choose differently): then the row says inf
        z = integrate(fit.field, basis.encode(case.y0), h, int(round(rd.T / h)), method="rk4").y[:, -1]
    except VPIntegratorError:
        assert row["err_t120"]["median"] == math.inf and row["cost"] is None
    else:
        want = float(np.median(relative_error(basis.decode(z), case.heldout[:, 1])))
        assert row["err_t120"]["median"] == pytest.approx(want, rel=1e-9) and row["cost"] > 0
    assert row["row"] == "psd_sindy" and row["offline_cpu"] > case.data_cpu
    from vpintegrator.studies.reduction.tables import _family

    assert _family(row["label"]) == f"PSD-SINDy {fit.library}, 2n = 4"
