"""The result files the study tables of docs/results.md come from, shipped in docs/data/ so that every number
of those tables can be checked without re-running hours of training:

- ``rigid_body_study.json``: ``scripts/reproduce_rigid_body.py``'s ``results.json`` (section 2);
- ``archive/coupled_oscillator_study.json``: ``scripts/reproduce_coupled_oscillator.py``'s before the study became a
  preset, and ``coupled_oscillator_quick.json`` the preset's ``--quick`` re-make (section 4);
- ``rigid_body_structure_study.json``: ``scripts/reproduce_rigid_body_structure.py``'s (section 1).

Each test draws the tables from the shipped file with the study's own formatting code and finds every line
of them on the page, so a number edited on the page, or a file shipped from another run, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"
PAGE = ROOT / "docs" / "results.md"

# the repository's docs/, not in the wheel: CI's wheel step runs a copy of tests/ outside the clone
pytestmark = pytest.mark.skipif(not PAGE.is_file(), reason="repository files (not in the wheel)")


def _section(text: str, start: str, end: str) -> str:
    a = text.index(start)
    return text[a:text.index(end, a)]


def _missing(lines: list[str], page: str) -> list[str]:
    return [line for line in lines if line not in page]


def test_the_rigid_body_tables_are_drawn_from_the_shipped_results():
    from vpintegrator.studies.rigid_body_results import format_results, read_results

    res = read_results(DATA / "archive" / "rigid_body_study.json")
    assert res["meta"]["seeds"] == [0, 1, 2, 3, 4]
    assert res["meta"]["models"] == ["vpff", "vpt", "vpt_arb", "st"]
    page = _section(PAGE.read_text(encoding="utf-8"), "## 2. Rigid body", "## 3. ")
    drawn = [line for line in format_results(res).splitlines() if line.startswith(("| ", "- "))]
    assert len(drawn) > 40
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_plateau_rule_rigid_body_tables_are_drawn_from_their_shipped_results():
    """The study re-made with the default budget (plateau or step cap): its own subsection of section 2."""
    from vpintegrator.studies.rigid_body_results import format_results, read_results

    res = read_results(DATA / "rigid_body_study_plateau.json")
    assert res["meta"]["seeds"] == [0, 1, 2, 3, 4]
    assert res["meta"]["models"] == ["vpff", "vpt", "vpt_arb", "st", "vpt_exact"]
    page = _section(PAGE.read_text(encoding="utf-8"), "### Re-made with the plateau rule", "## 3. ")
    drawn = [line for line in format_results(res).splitlines() if line.startswith(("| ", "- "))]
    assert len(drawn) > 40
    assert "How the 25 trainings stopped (each run's summary.json): 25 at plateau (patience)." in page
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_coupled_oscillator_tables_are_drawn_from_the_shipped_results():
    from vpintegrator.studies.coupled_oscillator import EVAL_SETS, _statistics_section, format_table, read_results

    doc = read_results(DATA / "archive" / "coupled_oscillator_study.json")  # the study's run, before the preset
    assert doc["settings"]["seeds"] == [0, 1, 2, 3, 4]
    page = _section(PAGE.read_text(encoding="utf-8"), "## 4. Coupled oscillator", "## 5. ")
    drawn = [line for name in EVAL_SETS for line in format_table(doc["tables"][name]).splitlines()]
    drawn += [line for line in _statistics_section(doc["heldout_statistics"], float(doc["settings"]["t_end"]))
              if line.startswith("| ")]
    assert len(drawn) > 20
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_coupled_oscillator_preset_tables_are_drawn_from_its_shipped_results():
    """The preset's --quick re-make (vp-study coupled_oscillator --quick): its compare.json's tables on the page."""
    from vpintegrator.studies.compare import RESULTS, _markdown
    from vpintegrator.studies.schema import check_results
    from vpintegrator.studies.stats import read_json, unplain

    path = DATA / "coupled_oscillator_quick.json"
    doc = check_results(read_json(path), path, RESULTS)
    assert doc["seeds"] == [0, 1] and doc["n_steps"] == 10000 and doc["max_steps"] == 60
    page = _section(PAGE.read_text(encoding="utf-8"), "### Re-made by the preset", "## 5. ")
    drawn = [line for line in _markdown(unplain(doc["problems"])).splitlines() if line.startswith(("| ", "coupled"))]
    assert len(drawn) > 25
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_structure_tables_are_drawn_from_the_shipped_results():
    from vpintegrator.studies.rigid_body_structure import MODELS, format_results, read_results

    res = read_results(DATA / "archive" / "rigid_body_structure_study.json")
    assert res["settings"]["seeds"] == [0, 1, 2, 3, 4] and res["settings"]["models"] == list(MODELS)
    assert res["settings"]["budget"] == "cpu"  # CPU seconds: a loaded machine does not cut a training short
    page = _section(PAGE.read_text(encoding="utf-8"), "## 1. Rigid body", "## 2. ")
    drawn = [line for line in format_results(res).splitlines() if line.startswith(("| ", "- "))]
    assert len(drawn) > 40 and any(line.startswith("| lpnet | 4 |") for line in drawn)
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_plateau_rule_structure_tables_are_drawn_from_their_shipped_results():
    """The structure study re-made with the default budget (plateau or step cap): its own subsection of section 1."""
    from vpintegrator.studies.rigid_body_structure import MODELS, format_results, read_results

    res = read_results(DATA / "rigid_body_structure_study_plateau.json")
    assert res["settings"]["seeds"] == [0, 1, 2, 3, 4] and res["settings"]["models"] == list(MODELS)
    assert res["settings"]["budget"] == "plateau" and res["settings"]["patience"] == 10
    page = _section(PAGE.read_text(encoding="utf-8"), "### Re-made with the plateau rule (2026-11-28)", "## 2. ")
    drawn = [line for line in format_results(res).splitlines() if line.startswith(("| ", "- "))]
    assert len(drawn) > 40 and any(line.startswith("| lpnet | 4 |") for line in drawn)
    missing = _missing(drawn, page)
    assert not missing, missing[:3]


def test_the_shipped_results_hold_no_path_of_the_machine_they_ran_on():
    for name in ("archive/rigid_body_study.json", "rigid_body_study_plateau.json", "archive/coupled_oscillator_study.json",
                 "archive/rigid_body_structure_study.json", "rigid_body_structure_study_plateau.json"):
        text = (DATA / name).read_text(encoding="utf-8")
        assert "../.." not in text, name
        for prefix in ("/work/", "/tmp/", "/home/", "/root/", "/Users/", "C:\\\\"):
            assert prefix not in text, (name, prefix)
