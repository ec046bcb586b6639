"""The summary table every study's results open with (issue 88, item 2): one line per case, the most accurate row of
each kind (with the equations, data only, the VPT family, full order) with its error and its cost, and its speed-up
against the same case's full-order row (full-order cost / the row's cost), before the per-case tables."""

from __future__ import annotations

import math

import pytest

from vpintegrator.studies.memory import draw
from vpintegrator.studies.memory.tables import summarize_rows, summary_table


def _row(system, approach, T, kind, e100, cost, seed=None, N=None):
    return {"system": system, "arena": system.split("_N")[0], "N": N, "observe": "q", "approach": approach,
            "label": f"{approach}_T{T}", "T": T, "kind": kind, "seed": seed, "noise": 0.0, "cost": cost,
            "fit_cpu": 1.0, "err_t10": {"median": e100, "lo": e100, "hi": e100, "n": 5},
            "err_t100": {"median": e100, "lo": e100, "hi": e100, "n": 5}}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_memory_summary_picks_the_best_of_each_kind_and_divides_the_full_order_cost():
    bath, co = "kac_zwanzig_N100", "coupled_oscillator"
    rows = [_row(bath, "gle", 1, "known", 0.02, 4e-6, N=100),
            _row(bath, "estimate+gle", 4, "known", 0.01, 2e-5, N=100),  # the more accurate, the dearer
            _row(bath, "bath+stormer_verlet", 1, "full_order", 0.03, 1e-6, N=100),
            _row(bath, "bath+bath_splitting_y6", 1, "full_order", 1e-5, 8e-6, N=100),  # the best full order
            _row(bath, "narx", 4, "fitted", 0.05, 2e-6, N=100),
            _row(bath, "delay_mlp", 4, "model", 0.04, 1.6e-4, seed=0, N=100),
            _row(bath, "vpt_mix", 1, "model", 0.5, 6.4e-3, seed=0, N=100),
            _row(bath, "vpt_mix", 4, "model", math.inf, 2e-3, seed=0, N=100),  # never the best: not finite
            _row(co, "estimate+exact_flow", 3, "known", 1e-12, 2e-5),
            _row(co, "arx", 1, "fitted", math.inf, 1e-6)]  # the oscillator: no full order, no finite data-only row
    lines = summary_table(summarize_rows(rows))
    table = [line for line in lines if line.startswith("| ")]
    head = _cells(table[0])
    assert head == ["case", "with the equations", "error", "cost", "speed-up", "data only", "error", "cost",
                    "speed-up", "VPT family", "error", "cost", "speed-up", "full order", "error", "cost"]
    by_case = {_cells(line)[0]: dict(zip(range(len(head)), _cells(line))) for line in table[1:]}
    b = by_case[f"{bath}, noise 0"]
    assert [b[1], b[2], b[3], b[4]] == ["estimate+gle at T = 4", "0.01", "2.00e-05", "0.4"]  # 8e-6 / 2e-5
    assert [b[5], b[6], b[7], b[8]] == ["delay_mlp at T = 4", "0.04", "1.60e-04", "0.05"]  # 8e-6 / 1.6e-4
    assert [b[9], b[10], b[11], b[12]] == ["vpt_mix at T = 1", "0.5", "0.0064", "0.00125"]
    assert [b[13], b[14], b[15]] == ["bath+bath_splitting_y6", "1.00e-05", "8.00e-06"]
    c = by_case["coupled_oscillator, noise 0"]
    assert [c[1], c[4]] == ["estimate+exact_flow at T = 3", "—"]  # no full-order row: no speed-up
    assert all(c[i] == "—" for i in (5, 6, 7, 8, 9, 13, 14, 15))


def test_the_memory_results_open_with_the_summary_before_the_verdict_and_the_case_tables():
    rows = [_row("kac_zwanzig_N100", "gle", 1, "known", 0.02, 4e-6, N=100),
            _row("kac_zwanzig_N100", "bath+stormer_verlet", 1, "full_order", 0.03, 1e-6, N=100)]
    text = draw({"commands": ["vp-study memory --out x"], "budget": "hand-made", "rows": rows})
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Summary", "## Verdict"] and len(headings) == 3
    assert "| kac_zwanzig_N100, noise 0 | gle | 0.02 | 4.00e-06 | 0.25 |" in text


@pytest.mark.parametrize("name", ["quick", "default", "chain_default"])
def test_the_shipped_memory_summaries_fit_a_docs_line(name):
    """One line per case of the shipped file, each under the docs' 300 characters."""
    from vpintegrator._shipped import results_files
    from vpintegrator.studies.memory.tables import read_doc

    doc = read_doc(results_files()[f"memory/{name}"])
    lines = [line for line in summary_table(summarize_rows(doc["rows"])) if line.startswith("| ")]
    cases = {(r["system"], float(r["noise"])) for r in doc["rows"]}
    assert len(lines) == 1 + len(cases) and max(map(len, lines)) < 300


def test_the_reduction_summary_takes_each_family_and_the_most_accurate_full_order_row():
    from vpintegrator.studies.reduction.tables import summary_table as reduction_summary

    def entry(row, label, err, cost):
        return {"system": "toda", "N": 200, "row": row, "label": label, "cost": cost, "t120": {"median": err}}

    summary = [entry("full_order", "stormer_verlet, h = 0.2", 1e-4, 1e-6),
               entry("full_order", "stormer_verlet_y6, h = 0.15", 1e-9, 4e-5),  # the reference: the most accurate
               entry("psd_floor", "PSD floor, 2n = 32", 1e-3, None),  # no model: in no column
               entry("psd_galerkin", "PSD-Galerkin, 2n = 32", 2e-3, 2e-5),
               entry("psd_galerkin_balanced", "balanced PSD-Galerkin, 2n = 32", 3e-3, 1e-6),
               entry("psd_flow_map", "PSD + flow map, 2n = 32", 5e-3, 8e-6),
               entry("psd_sindy", "PSD-SINDy poly1, 2n = 8", None, 1e-7)]  # no error: never the best
    lines = [line for line in reduction_summary(summary) if line.startswith("| ")]
    assert _cells(lines[0]) == ["case", "with the equations", "error", "cost", "speed-up", "data only", "error", "cost",
                                "speed-up", "full order", "error", "cost"]
    assert _cells(lines[1]) == ["toda, N = 200", "PSD-Galerkin, 2n = 32", "0.002", "2.00e-05", "2",
                                "PSD + flow map, 2n = 32", "0.005", "8.00e-06", "5",
                                "stormer_verlet_y6, h = 0.15", "1.00e-09", "4.00e-05"]


def test_the_unknown_form_summary_sets_the_best_data_row_against_the_oracle():
    from vpintegrator.studies.unknown_form.tables import summary_table as unknown_summary

    def entry(method, approach, err10, cost, err5=1.0):
        return {"system": "rigid_body", "noise": 0.0, "method": method, "approach": approach, "cost": cost,
                "horizons": {"5": {"median": err5}, "10": {"median": err10}}}

    summary = [entry("oracle gauss_legendre4", "oracle", 1e-6, 2e-6),
               entry("lpnet", "lpnet", 3e-6, 1e-5, err5=1e-9),  # the best at t = 10, not at t = 5
               entry("sindy+gauss_legendre4", "sindy", 2e-6, math.nan),  # no cost measured: still the most accurate
               entry("node@rk4", "node", math.inf, 1e-7)]
    lines = [line for line in unknown_summary(summary) if line.startswith("| ")]
    assert _cells(lines[0]) == ["case", "data only", "error", "cost", "speed-up", "full order", "error", "cost"]
    assert _cells(lines[1]) == ["rigid_body, noise σ = 0", "sindy+gauss_legendre4", "2.00e-06", "—", "—",
                                "oracle gauss_legendre4", "1.00e-06", "2.00e-06"]
    summary[2]["cost"] = 4e-6
    assert _cells([line for line in unknown_summary(summary) if line.startswith("| ")][1])[3:5] == ["4.00e-06", "0.5"]


def test_the_partial_observation_summary_leaves_out_ablations_and_the_full_state_model():
    from vpintegrator.studies.partial_observation.tables import summary_table as po_summary

    def entry(approach, T, kind, err, cost=None):
        return {"system": "coupled_oscillator", "approach": approach, "T": T, "kind": kind, "cost": cost,
                "t10": {"median": err}}

    summary = [entry("estimate+gauss_legendre4", 3, "known", 2e-5),
               entry("fullstate", 1, "full_state", 1e-6, 1e-4),  # sees the full state: not data-only here
               entry("vpt+noattn", 4, "ablation", 1e-7, 1e-4),  # an ablation: in no column
               entry("delay_mlp2", 4, "model", 3e-4, 2e-4), entry("parrot", 3, "fitted", 0.3),
               entry("vpt", 4, "model", 8.0, 1e-3), entry("vpt_mix", 2, "model", 0.1, 7e-3)]
    lines = [line for line in po_summary(summary) if line.startswith("| ")]
    assert _cells(lines[0]) == ["case", "with the equations", "error", "cost", "data only", "error", "cost",
                                "VPT family", "error", "cost"]  # no full-order row: no speed-up
    assert _cells(lines[1]) == ["coupled_oscillator, observed in q", "estimate+gauss_legendre4 at T = 3", "2.00e-05",
                                "—", "delay_mlp2 at T = 4", "3.00e-04", "2.00e-04", "vpt_mix at T = 2", "0.1", "0.007"]


def test_the_context_summary_has_no_cost_columns_and_no_model_handed_the_true_parameters():
    from vpintegrator.studies.context.tables import summary_table as context_summary

    def entry(method, err, t=10.0):
        return {"system": "coupled_oscillator", "split": "interpolation", "context_len": 5, "noise": 0.01,
                "method": method, "t": t, "median": err}

    summary = [entry("shooting+gauss_legendre4", 0.37), entry("fd+gauss_legendre4", 0.5),
               entry("g_sympnet_ctx", 0.09), entry("g_sympnet_ctx oracle context", 0.08),  # handed the parameters
               entry("parrot", 1.3), entry("parrot", 1e-9, t=1.0),  # another horizon: not read
               entry("oracle gauss_legendre4", 0.012)]
    lines = [line for line in context_summary(summary) if line.startswith("| ")]
    assert _cells(lines[0]) == ["case", "with the equations", "error", "data only", "error", "full order", "error"]
    assert _cells(lines[1]) == ["coupled_oscillator: interpolation, context_len 5, noise σ = 0.01",
                                "shooting+gauss_legendre4", "0.37", "g_sympnet_ctx", "0.09",
                                "oracle gauss_legendre4", "0.012"]


def test_the_rigid_body_summary_sets_the_models_against_the_best_integrator_on_held_out_conditions():
    from vpintegrator.studies.rigid_body_results.tables import summary_section

    def row(err, cost):
        return {"heldout": {"error": {"median": err}}, "heldout_n": [100],
                "cpu_meter": {"mean": cost, "std": None, "n": 1, "values": [cost]}}

    res = {"meta": {"models": ["vpff", "vpt", "st"], "integrators": ["rk4", "gauss_legendre4"]},
           "rows": {"vpff": row(0.03, 1.0), "vpt": row(0.04, 0.5), "st": row(0.9, 2.0), "rk4": row(5e-5, 0.2),
                    "gauss_legendre4": row(7e-6, 0.6)}}
    lines = summary_section(res)
    assert lines[:2] == ["## Summary", ""] and "cost: CPU s to t = 50000, steps only;" in lines[2]
    rows = [_cells(line) for line in lines if line.startswith("| ")]
    assert rows[1] == ["rigid body, 100 held-out ICs", "vpff", "0.03", "1", "0.6", "vpt", "0.04", "0.5", "1.2",
                       "gauss_legendre4", "7.00e-06", "0.6"]
    assert summary_section({**res, "rows": {m: {} for m in res["rows"]}}) == []  # no held-out rollouts yet


def test_the_coupled_oscillator_summary_reads_the_held_out_statistics():
    from vpintegrator.studies.coupled_oscillator import summary_section

    def stat(method, kind, err):
        return {"method": method, "kind": kind, "n_ics": 100, "error": {"median": err}}

    stats = [stat("stormer_verlet", "integrator", 1.35), stat("stormer_verlet_y6", "integrator", 0.097),
             stat("vpt", "model", 1.58), stat("g_sympnet", "model", 0.056), stat("st", "model", math.inf)]
    rows = [_cells(line) for line in summary_section(stats, 4000.0) if line.startswith("| ")]
    assert rows == [["case", "data only", "error", "VPT family", "error", "full order", "error"],
                    ["coupled oscillator, 100 held-out ICs", "G-SympNet", "0.056",
                     "VPT (volume-preserving transformer)", "1.58", "Yoshida 6 (Störmer–Verlet)", "0.097"]]
    assert "at t = 4000 " in summary_section(stats, 4000.0)[2] and summary_section([], 4000.0) == []


def test_the_structure_summary_takes_each_model_at_the_median_over_its_seeds():
    from vpintegrator.studies.rigid_body_structure.results import summary_section

    rows = [{"model": m, "seed": s, "median": e} for m, errs in
            (("lpnet", (3e-6, 1e-9, 4e-6)), ("vpt", (0.02, 0.01, 0.03)), ("vpt_sym", (0.05, None, 0.04)))
            for s, e in enumerate(errs)]  # lpnet's best seed (1e-9) is not its median (3e-6)
    res = {"settings": {"n_heldout": 100}, "rows": rows,
           "classical": {"gauss_legendre4": {"median": 7e-6}, "implicit_midpoint": {"median": 0.024},
                         "vpt_shipped": {"median": 0.037}}}
    table = [_cells(line) for line in summary_section(res) if line.startswith("| ")]
    assert table == [["case", "data only", "error", "VPT family", "error", "full order", "error"],
                     ["rigid body, 100 held-out ICs", "lpnet", "3.00e-06", "vpt", "0.02", "gauss_legendre4",
                      "7.00e-06"]]
