"""The reduction study's break-even charged in full (issue 86 item 6): the data generated once plus every fit of a
row's family on the lattice (its own and the tuning runs), computed by hand on a tiny case, beside today's charge
(the row's own offline CPU); a results file without the data's CPU apart draws the full charge as '—' with a note."""

from __future__ import annotations

import pytest

from vpintegrator.studies import reduction as rd


def _entry(label, row, err, cost, offline=None, data=None):
    out = {"system": "toda", "N": 200, "label": label, "row": row, "seed": None, "cost": cost, "offline_cpu": offline,
           **{f"err_t{t:g}": {"median": err, "lo": err, "hi": err, "n": 10} for t in rd.HORIZONS}}
    return out if data is None else {**out, "data_cpu": data}


def _rows(data=2.0):
    """A full-order row (1e-6 s per unit time, error 1e-3) and one family of three rows: the plain Galerkin at two
    steps (one fit: data 2 s + SVD 1 s) and its hyper-reduced twin (data 2 s + SVD and sampling 1.5 s)."""
    return [_entry("verlet", "full_order", 1e-3, 1e-6),
            _entry("PSD-Galerkin, 2n = 8, stormer_verlet h = 1", "psd_galerkin", 2e-3, 5e-7, 3.0, data),
            _entry("PSD-Galerkin, 2n = 8, stormer_verlet h = 0.5", "psd_galerkin", 2e-3, 8e-7, 3.0, data),
            _entry("PSD-Galerkin hyper-reduced (3 of 8 bonds), 2n = 8, stormer_verlet h = 1", "psd_galerkin", 2e-3,
                   4e-7, 3.5, data)]


def test_the_full_charge_counts_the_data_once_and_every_fit_of_the_family_once():
    summary = {e["label"]: e for e in rd.summarize_rows(_rows())}
    plain = summary["PSD-Galerkin, 2n = 8, stormer_verlet h = 1"]
    # today's: the row's own offline 3 s over (1e-6 - 5e-7) s per unit time for T = 120
    assert plain["break_even"] == pytest.approx(3.0 / (5e-7 * 120.0))
    # in full: the data once (2 s) + the plain fit (1 s, both steps one fit) + the hyper-reduced fit (1.5 s)
    assert plain["full_charge"] == pytest.approx(4.5)
    assert plain["break_even_full"] == pytest.approx(4.5 / (5e-7 * 120.0))
    hyper = summary["PSD-Galerkin hyper-reduced (3 of 8 bonds), 2n = 8, stormer_verlet h = 1"]
    assert hyper["full_charge"] == pytest.approx(4.5)
    assert hyper["break_even_full"] == pytest.approx(4.5 / (6e-7 * 120.0))
    assert summary["verlet"]["full_charge"] is None and summary["verlet"]["break_even_full"] is None
    line = next(x for x in rd.tables(list(summary.values())).splitlines() if x.startswith("| PSD-Galerkin, 2n = 8, "
                                                                                         "stormer_verlet h = 1 |"))
    assert line.endswith(f"| 3 | {3.0 / 6e-5:.3g} | 4.5 | {4.5 / 6e-5:.3g} | — |"), line


def test_a_file_without_the_data_cpu_draws_the_full_charge_as_a_dash_with_a_note():
    summary = rd.summarize_rows(_rows(data=None))
    assert all(e["full_charge"] is None for e in summary)
    text = rd.tables(summary)
    line = next(x for x in text.splitlines() if x.startswith("| PSD-Galerkin, 2n = 8, stormer_verlet h = 1 |"))
    assert line.endswith(f"| 3 | {3.0 / 6e-5:.3g} | — | — | — |"), line
    assert "does not record the data generation's CPU apart" in text
    assert "does not record" not in rd.tables(rd.summarize_rows(_rows()))
