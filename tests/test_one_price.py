"""One price per row across every page (issue 86 item 1): ``vp-rollout``'s table (``run_rollouts``, what
``vp-study compare`` runs) and the bath arena's work-precision script price a row as the studies do, by
``vpintegrator.rollout.engine.price_seconds`` (``PRICE_OF``: the engine's seconds of the step map's start and its
steps). Each test replaces the rule by a stub that returns a known price: a table priced by any other reading (the
steps alone, the whole call) does not show it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpintegrator.data import generate, load_spec
from vpintegrator.rollout import RolloutConfig, engine, read_rollout, run_rollouts

PRICE = 0.75  # CPU s: above COST_REPEAT_BELOW, so each row is run once


def test_the_rollout_table_prices_a_row_by_the_one_rule(tmp_path, monkeypatch):
    """The table's ``seconds_per_step`` (and the rollout file's) is ``price_seconds`` of the row's warm run over its
    steps, for every host-engine row; the file says which rule (``cost_of``)."""
    data = tmp_path / "data.h5"
    generate(load_spec("rigid_body", n_traj=3, t_end=2.0), data, workers=1)  # dt 0.1: 20 steps
    seen: list[dict] = []

    def stub(meta):
        seen.append(meta)
        return PRICE

    monkeypatch.setattr(engine, "price_seconds", stub)
    out = tmp_path / "r.h5"
    report = run_rollouts(RolloutConfig(data=str(data), out=str(out), integrators=["rk4", "implicit_midpoint"],
                                        traj=[0, 1], workers=1))
    assert seen and all({"seconds", "setup_seconds"} <= set(meta) for meta in seen)
    assert {r["method"] for r in report.rows} >= {"rk4", "implicit_midpoint"}
    for r in report.rows:
        assert r["seconds_per_step"] == pytest.approx(PRICE / 20, rel=1e-12), r
    methods = read_rollout(out).methods
    for label in ("rk4", "implicit_midpoint"):
        meta = methods[label].meta
        assert meta["seconds_per_step"] == pytest.approx(PRICE / 20, rel=1e-12)
        assert meta["cost_runs"] == 1 and meta["cost_of"] == engine.PRICE_OF


def test_the_bath_script_prices_a_row_by_the_one_rule(tmp_path, monkeypatch, repo_script):
    """``scripts/bath_work_precision.py``'s cost per unit time is ``price_seconds`` of one batch-1 rollout of the
    row's step map to T, over T (the memory page's price of the same row), not the meter's reading of the call."""
    module = repo_script("bath_work_precision")
    monkeypatch.setattr(engine, "price_seconds", lambda meta: PRICE)
    out = tmp_path / "wp.json"
    module.main(["--sizes", "20", "--n-cond", "1", "--t-end", "5", "--repeats", "1", "--systems", "kac_zwanzig",
                 "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert {"verlet 0.1", "split 0.1", "gle 0.1", "gle-direct 0.1"} <= {r["row"] for r in rows}
    for r in rows:
        assert r["cpu_per_unit_time"] == pytest.approx(PRICE / 5, rel=1e-12), r
        assert r["cost_of"] == engine.PRICE_OF and np.isfinite(r["error_T"])
