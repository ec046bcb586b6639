"""The context study's pieces (vpintegrator.studies.context, issue 34): the held-out pairs come from the
region the split held out, the rows are the methods' own rollouts, the summary's statistics and tables."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.errors import VPIntegratorError
from vpintegrator.studies.context import evaluate_methods, heldout_pairs, summarize_rows, tables

pytestmark = pytest.mark.usefixtures("one_thread")

BOX = {"columns": ["inertia[0]", "inertia[1]", "inertia[2]"], "low": [0.5, 0.5, 0.5], "high": [3.0, 3.0, 3.0]}


def _u(systems):
    inertia = np.array([s.inertia for s in systems])
    return (inertia - 0.5) / 2.5


def test_interpolation_pairs_lie_in_the_held_out_cube():
    split = {**BOX, "mode": "interpolation", "center": [0.3, 0.6, 0.5], "radius": 0.2}
    systems, y0 = heldout_pairs(split, 200, 1)
    u = _u(systems)
    assert np.abs(u - [0.3, 0.6, 0.5]).max() <= 0.2 + 1e-12
    assert np.abs(u - [0.3, 0.6, 0.5]).max(1).min() < 0.05  # spread over the cube, not one point
    np.testing.assert_allclose(np.linalg.norm(y0, axis=1), 1.0, rtol=1e-14)
    again, y0b = heldout_pairs(split, 200, 1)
    np.testing.assert_array_equal(_u(again), u)
    np.testing.assert_array_equal(y0b, y0)
    other, _ = heldout_pairs(split, 200, 2)
    assert not np.array_equal(_u(other), u)


def test_extrapolation_pairs_lie_at_the_ends_of_the_box():
    split = {**BOX, "mode": "extrapolation", "center": [0.5, 0.5, 0.5], "radius": 0.4}
    systems, _ = heldout_pairs(split, 150, 0)
    u = _u(systems)
    assert len(systems) == 150
    assert (np.abs(u - 0.5).max(1) >= 0.4).all() and (u >= 0).all() and (u <= 1).all()


def test_pairs_need_the_inertia_columns():
    with pytest.raises(VPIntegratorError, match="three inertias"):
        heldout_pairs({**BOX, "columns": ["mass"], "mode": "interpolation", "center": [0.5], "radius": 0.1}, 5)


def test_rows_are_the_methods_rollouts_and_the_summary_their_medians():
    from vpintegrator.rollout import IdentifiedStep, IntegratorStep
    from vpintegrator.rollout.family import FamilyStep
    from vpintegrator.systems import RigidBody
    from vpintegrator.systems.family import SystemFamily

    split = {**BOX, "mode": "interpolation", "center": [0.5, 0.5, 0.5], "radius": 0.3}
    systems, y0 = heldout_pairs(split, 6, 0)
    methods = {"oracle rk4": lambda: FamilyStep(SystemFamily(systems), lambda s: IntegratorStep(s, "rk4", 0.2)),
               "fd+rk4": lambda: IdentifiedStep(RigidBody(), "fd", "rk4", 0.2, context_len=3)}
    rows = evaluate_methods(methods, systems, y0, 3, 0.0, horizons=(0.2, 2.0, 4.0))
    assert [r["method"] for r in rows] == ["oracle rk4", "fd+rk4"]
    oracle, fd = rows
    assert set(oracle["errors"]) == {"2", "4"}  # t = 0.2 lies inside the 3-state prefix
    assert max(oracle["errors"]["4"]) < 1e-5 < np.median(fd["errors"]["4"]) < 1e-2  # RK4 with true θ vs fitted θ
    assert oracle["failed"] == fd["failed"] == 0 and oracle["casimir_per_state"] < 1e-5
    seeded = [{"split": "interpolation", "context_len": 3, "noise": 0.0, "seed": s, **r}
              for s in (0, 1, 2) for r in rows]
    summary = summarize_rows(seeded)
    s = next(x for x in summary if x["method"] == "fd+rk4" and x["t"] == 4.0)
    assert s["median"] == pytest.approx(float(np.percentile(fd["errors"]["4"], 50, method="nearest")))
    assert s["seeds"] == [0, 1, 2] and s["failed"] == 0
    text = tables(summary)
    assert "| fd+rk4 |" in text and "| oracle rk4 |" in text and "context_len 3" in text
