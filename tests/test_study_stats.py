"""Statistics of the studies: intervals over conditions, bootstrap over seeds, drift growth (issue 20, item 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vpintegrator.studies.stats import (bootstrap_ci, drift_growth, fmt_g, interval_cell, median_interval, merge_keyed,
                                        over_seeds, quantile_cell, read_json, relative_errors, seed_quantiles, write_json)


def test_median_interval_counts_blowups_as_the_worst():
    vals = list(range(1, 11))  # 1..10
    # the package's one definition (vpintegrator.quantiles): linear between order statistics, as numpy's default
    assert median_interval(vals) == {"median": 5.5, "lo": pytest.approx(1.9), "hi": pytest.approx(9.1), "n": 10}
    got = median_interval([0.1] * 8 + [math.inf, math.nan])
    assert got["median"] == 0.1 and got["hi"] == math.inf and got["n"] == 10
    assert median_interval([None])["median"] is None


def test_bootstrap_ci_brackets_the_median_and_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    few = rng.normal(1.0, 0.1, 5)
    many = rng.normal(1.0, 0.1, 200)
    lo5, hi5 = bootstrap_ci(few)
    lo200, hi200 = bootstrap_ci(many)
    assert lo5 <= np.median(few) <= hi5 and lo200 <= np.median(many) <= hi200
    assert hi200 - lo200 < hi5 - lo5
    assert abs((lo200 + hi200) / 2 - 1.0) < 0.05
    assert all(math.isnan(x) for x in bootstrap_ci([1.0]))  # not defined for one seed
    assert all(math.isnan(x) for x in bootstrap_ci([1.0, math.inf]))
    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_drift_growth_tells_bounded_from_secular():
    t = np.linspace(1.0, 1000.0, 500)
    bounded = 1e-4 * (1.5 + np.sin(t))
    linear = 1e-6 * t
    quadratic = 1e-9 * t**2
    assert drift_growth(t, bounded)["kind"] == "bounded"
    lin = drift_growth(t, linear)
    assert lin["kind"] == "secular" and lin["exponent"] == pytest.approx(1.0, abs=1e-9)
    assert drift_growth(t, quadratic)["exponent"] == pytest.approx(2.0, abs=1e-9)
    assert drift_growth(t, np.full_like(t, np.inf))["kind"] is None
    with pytest.raises(ValueError, match="one length"):
        drift_growth(t, t[:3])


def test_write_json_records_the_versions_of_a_studys_results(tmp_path):
    """Every study's results file says the libraries (pysindy, numpy, ... and the BLAS kernels) its rows were computed
    with (issue 86: the delay-SINDy row moves with them); other JSON (settings, stamps) is written as given."""
    from vpintegrator.provenance import provenance_record

    for key in ("rows", "problems"):
        write_json(tmp_path / "results.json", {"commands": ["vp-study x"], key: [{"a": 1.5}]})
        doc = read_json(tmp_path / "results.json")
        assert doc[key] == [{"a": 1.5}] and doc["commands"] == ["vp-study x"]
        assert doc["provenance"]["versions"] == provenance_record()["versions"]
        assert {"pysindy", "numpy", "scipy", "numba", "torch", "blas"} <= set(doc["provenance"]["versions"])
    write_json(tmp_path / "settings.json", {"seed": 0})
    assert read_json(tmp_path / "settings.json") == {"seed": 0}
    write_json(tmp_path / "given.json", {"rows": [], "provenance": {"mine": True}})  # a record already there is kept
    assert read_json(tmp_path / "given.json")["provenance"] == {"mine": True}


def test_the_shared_over_seeds_cells_and_merges_of_the_studies():
    e = over_seeds([0.1, None, 0.3])
    assert e["per_seed"] == [0.1, None, 0.3] and e["median"] == pytest.approx(0.2)
    assert e["ci"][0] is not None and 0.1 <= e["ci"][0] <= e["ci"][1] <= 0.3
    one = over_seeds([None, 0.5])
    assert one["median"] == 0.5 and one["ci"] == [None, None] and interval_cell(one) == "0.5"
    assert over_seeds([None])["median"] is None and interval_cell(over_seeds([None])) == "—"
    q = seed_quantiles([[1e-4, 2e-4, math.inf], [3e-4, 3e-4, 3e-4]])
    assert q["median"] == pytest.approx(2.5e-4) and quantile_cell(q).endswith("(0.00012–inf)")
    assert [fmt_g(x) for x in (None, math.nan, "inf", 0.000123, 12345.0)] == ["—", "—", "inf", "0.00012", "1.2e+04"]
    y, ref = np.ones((2, 3, 2)), np.ones((2, 3, 2))
    y[0, 1], y[1, 2] = [1.0, 2.0], np.nan
    assert relative_errors(y, ref, [1, 2]) == {1: [pytest.approx(1 / math.sqrt(2)), 0.0], 2: [0.0, math.inf]}
    old, new = [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}], [{"k": 1, "v": "c"}]
    assert merge_keyed(old, new, lambda r: r["k"]) == [{"k": 1, "v": "c"}, {"k": 2, "v": "b"}]
    assert merge_keyed(old, new, lambda r: r["k"], at_end=True) == [{"k": 2, "v": "b"}, {"k": 1, "v": "c"}]
