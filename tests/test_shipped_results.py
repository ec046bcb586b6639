"""The studies' results files ship with the package (issues 57, 69): the wheel carries ``docs/data/**/*.json``
as ``vpintegrator/_results`` (pyproject's force-include; not the GPU logs beside them), every study with a
shipped file redraws its tables from it by name, ``vp-study NAME --table-only --results FILE --out DIR``, from the installed package alone
(no clone, no run directory), and the tables are the ones the study draws from that file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vpintegrator import _shipped
from vpintegrator.errors import VPIntegratorError
from vpintegrator.studies.driver import main as run_study
from vpintegrator.studies.options import SHIPPED_RESULTS, STUDIES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The package as a wheel installs it: ``site/vpintegrator/_results`` holds the results files and there is
    no repository beside it (no ``docs/data``)."""
    package = tmp_path / "site" / "vpintegrator"
    (package / "_results").mkdir(parents=True)
    for name, path in _shipped.results_files().items():
        (package / "_results" / f"{name}.json").parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, package / "_results" / f"{name}.json")
    monkeypatch.setattr(_shipped, "PACKAGE", package)
    monkeypatch.chdir(tmp_path)
    return package / "_results"


def test_the_wheel_ships_the_results_files():
    if not (ROOT / "pyproject.toml").is_file():
        pytest.skip("repository file (not in the wheel)")
    from vpintegrator._toml import tomllib

    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    forced = build["force-include"]
    # every results file ships as _results/NAME.json (by its own entry or its folder's) and nothing else of
    # docs/data does: the GPU run's logs (docs/data/gpu_*) stay in the repository
    packaged = {}
    for source, target in forced.items():
        if source.startswith("docs/data"):
            files = [ROOT / source] if source.endswith(".json") else sorted((ROOT / source).rglob("*"))
            packaged.update({p: target + p.as_posix()[len((ROOT / source).as_posix()):] for p in files if p.is_file()})
    assert {p.suffix for p in packaged} == {".json"}
    assert packaged == {p: f"vpintegrator/_results/{n}.json"
                                                   for n, p in _shipped.results_files().items()}
    assert _shipped.RESULTS == ("docs/data", "_results")
    shipped = {n for names in SHIPPED_RESULTS.values() for n in names}
    assert shipped == set(_shipped.results_files())  # every shipped file has its study, every named one ships
    assert set(SHIPPED_RESULTS) <= set(STUDIES)


@pytest.mark.parametrize("study, name", [(s, n) for s in sorted(SHIPPED_RESULTS) for n in SHIPPED_RESULTS[s]])
def test_each_study_redraws_its_shipped_results_from_the_installed_package(study, name, installed, tmp_path, capsys):
    out = tmp_path / "redraw"
    assert run_study(study, ["--table-only", "--results", name, "--out", str(out), "-q"]) == 0
    assert not (tmp_path / "site" / "docs").exists()
    md = out / ("context_study.md" if study == "context" else "results.md")
    text = md.read_text(encoding="utf-8")
    assert text.count("\n| ") > 5, text[:300]  # a table with rows (the smallest shipped file has 8)
    if study != "context":  # the file itself beside its tables
        assert (out / "results.json").read_bytes() == (installed / f"{name}.json").read_bytes()
    assert _expected(study, installed / f"{name}.json") == text


def _expected(study: str, path: Path) -> str:
    """The study's own drawing of the results file (what its run writes from the same numbers)."""
    if study == "rigid_body":
        from vpintegrator.studies.rigid_body_results import format_results, read_results

        return format_results(read_results(path))
    if study == "rigid_body_structure":
        from vpintegrator.studies.rigid_body_structure import format_results, read_results

        return format_results(read_results(path))
    if study == "coupled_oscillator":  # a preset of the comparison engine: its compare.json's tables
        from vpintegrator.studies.compare import RESULTS, _markdown
        from vpintegrator.studies.schema import check_results
        from vpintegrator.studies.stats import read_json, unplain

        return _markdown(unplain(check_results(read_json(path), path, RESULTS)["problems"]))
    if study == "context":
        from vpintegrator.studies.context import read_study_json, summarize_rows, tables

        return tables(summarize_rows(read_study_json(path)["rows"]))
    if study == "partial_observation":
        from vpintegrator.studies.partial_observation import read_rows, summarize_rows, tables

        return tables(summarize_rows(read_rows(path)))
    if study == "memory":
        from vpintegrator.studies.memory import draw
        from vpintegrator.studies.memory.tables import read_doc

        return draw(read_doc(path))
    if study == "reduction":
        from vpintegrator.studies.reduction import summarize_rows as summarize, tables as draw
        from vpintegrator.studies.stats import read_json, unplain

        return draw(summarize(unplain(read_json(path)["rows"])))
    from vpintegrator.studies.stats import read_json
    from vpintegrator.studies.unknown_form import tables, summarize_rows

    return tables(summarize_rows(read_json(path)["rows"], 1e5))


def test_a_name_that_ships_nothing_is_one_line_naming_what_ships(installed, tmp_path, capsys):
    assert run_study("rigid_body", ["--table-only", "--results", "rigid_body_quality", "--out", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("--results: 'rigid_body_quality' is neither a file nor a shipped results "
                                            "name; shipped: " + ", ".join(_shipped.results_files()))
    assert "partial_observation/default_steps" in err and "reduction/default" in err
    with pytest.raises(VPIntegratorError, match=r"it ships with the package: give the name 'rigid_body_study_plateau'"):
        _shipped.results_path("docs/data/rigid_body_study_plateau.json")
    assert _shipped.results_path("rigid_body_study_plateau.json") == installed / "rigid_body_study_plateau.json"
    with pytest.raises(VPIntegratorError, match=r"give the name 'partial_observation/default_steps'"):
        _shipped.results_path("docs/data/partial_observation/default_steps.json")
    assert (_shipped.results_path("partial_observation/default_steps")
            == installed / "partial_observation" / "default_steps.json")


ARCHIVED = ["unknown_form", "rigid_body_study", "rigid_body_structure_study", "coupled_oscillator_study",
            "partial_observation/default",
            "partial_observation/quick", "partial_observation/mid", "partial_observation/toda",
            "partial_observation/toda_default", "partial_observation/mid_steps", "partial_observation/plateau",
            "partial_observation/toda_plateau", "partial_observation/toda_steps"]


def test_superseded_runs_are_archived_out_of_the_wheel_and_read_by_path(tmp_path, monkeypatch, capsys):
    """The runs a re-make superseded live in docs/data/archive/ (issue 87): one current file per study ships,
    the archived ones are neither listed nor packaged, a clone reads them by path, and their old name is one
    line that gives the path."""
    if not (ROOT / _shipped.ARCHIVE).is_dir():
        pytest.skip("repository files (not in the wheel)")
    archived = _shipped.results_files(archived=True)
    assert sorted(set(archived) - set(_shipped.results_files())) == sorted(ARCHIVED)
    assert not [n for n in archived if n.startswith("archive/")]  # listed under the names they shipped as only
    assert {len(SHIPPED_RESULTS[s]) for s in ("rigid_body", "rigid_body_structure", "unknown_form")} == {1}
    for name in ARCHIVED:
        with pytest.raises(VPIntegratorError, match=rf"'{name}' is archived, not shipped: give the path "
                                                    rf"docs/data/archive/{name}.json in a clone"):
            _shipped.results_path(name)
    monkeypatch.chdir(ROOT)
    assert _shipped.results_path("docs/data/archive/unknown_form.json") == Path("docs/data/archive/unknown_form.json")
    out = tmp_path / "redraw"
    assert run_study("rigid_body", ["--table-only", "--results", "docs/data/archive/rigid_body_study.json",
                                    "--out", str(out), "-q"]) == 0
    assert _expected("rigid_body", archived["rigid_body_study"]) == (out / "results.md").read_text(encoding="utf-8")


def test_a_redraw_never_writes_into_a_run_directory(installed, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    (run / "results.md").write_text("the run's own")
    assert run_study("rigid_body", ["--table-only", "--results", "rigid_body_study_plateau", "--out", str(run)]) == 2
    assert "holds other files" in capsys.readouterr().err
    assert (run / "results.md").read_text() == "the run's own"
    assert run_study("rigid_body", ["--results", "rigid_body_study_plateau", "--out", str(run)]) == 2
    assert "--results is read by --table-only only" in capsys.readouterr().err
