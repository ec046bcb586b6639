"""Every study's results file has a row schema, checked in one place (``vpintegrator.studies.schema``): the
shipped files fit their study's, and a file that does not fit is one line naming the file, the row and the key
(the bad files themselves: tests/bad_inputs/cases_study.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vpintegrator._shipped import results_files
from vpintegrator.studies import context, coupled_oscillator, partial_observation, reduction, rigid_body_structure
from vpintegrator.studies import rigid_body_results as rigid_body
from vpintegrator.studies.compare import RESULTS as COMPARE
from vpintegrator.studies.runner import StudyError
from vpintegrator.studies.schema import Each, Obj, ResultsSchema, check_results
from vpintegrator.studies.unknown_form.tables import SCHEMA as UNKNOWN_FORM
from vpintegrator.studies.memory.tables import SCHEMA as MEMORY

# the shipped files as this install has them: docs/data/ (and the archived ones) in a checkout,
# vpintegrator/_results/ in a wheel
FILES = results_files(archived=True)
BY_NAME = {"unknown_form": UNKNOWN_FORM, "unknown_form_plateau": UNKNOWN_FORM, "rigid_body_study": rigid_body.SCHEMA,
           "rigid_body_study_plateau": rigid_body.SCHEMA,
           "rigid_body_structure_study": rigid_body_structure.SCHEMA,
           "rigid_body_structure_study_plateau": rigid_body_structure.SCHEMA,
           "coupled_oscillator_study": coupled_oscillator.SCHEMA, "coupled_oscillator_quick": COMPARE,
           "context_oscillator": context.SCHEMA}
BY_FOLDER = {"partial_observation": partial_observation.SCHEMA, "reduction": reduction.SCHEMA, "memory": MEMORY}
SHIPPED = [(BY_FOLDER[name.split("/")[0]] if "/" in name else BY_NAME[name], path)
           for name, path in FILES.items() if "/" in name and name.split("/")[0] in BY_FOLDER or name in BY_NAME]


def test_every_shipped_results_file_is_checked():
    """No shipped results file escapes the schema check (a new one needs its schema named above)."""
    assert {str(p) for _, p in SHIPPED} == {str(p) for p in FILES.values()}
    archived = {"unknown_form", "rigid_body_study", "rigid_body_structure_study",  # docs/data/archive/: not in a wheel
                "coupled_oscillator_study"}
    assert set(BY_NAME) - set(FILES) <= (set() if archived <= set(FILES) else archived)


@pytest.mark.parametrize("schema, path", SHIPPED, ids=[f"{s.study}-{p.stem}" for s, p in SHIPPED])
def test_shipped_results_fit_their_schema(schema, path):
    check_results(json.loads(path.read_text()), path, schema)


SCHEMA = ResultsSchema("toy", {"rows": Each(Obj(required={"label": "str", "n": "int"},
                                                optional={"curve": Each("number?"), "x": Obj(required={"m": "number"})}))})


@pytest.mark.parametrize("doc, message", [
    ({"rows": [{"label": "a", "n": 1, "curve": [1.0, None, "inf"], "x": {"m": 2}}]}, None),
    ({"rows": [{"label": "a", "n": "1"}]}, "f.json: row 0 (a): 'n' is \"1\", expected an integer; "),
    ({"rows": [{"label": "a"}]}, "f.json: row 0 (a) has no key 'n'; "),
    ({"rows": [{"label": "a", "n": 1, "curve": [1.0, "x"]}]}, "'curve' is [1.0, \"x\"], expected a number (or null)"),
    ({"rows": [{"label": "a", "n": 1, "x": {}}]}, "f.json: row 0 (a) has no key 'x.m'"),
    ({"rows": [{"label": "a", "n": True}]}, "'n' is true, expected an integer"),
    ({"rows": "abc"}, "f.json: not a toy study's results: no list 'rows'"),
    ({"study": "other"}, "no list 'rows' (its top-level keys: study)"),
])
def test_check_results_names_file_row_and_key_in_one_line(doc, message):
    if message is None:
        assert check_results(doc, "f.json", SCHEMA) is doc
        return
    with pytest.raises(StudyError) as err:
        check_results(doc, "f.json", SCHEMA)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert "run the study again into this --out" in str(err.value)


def test_rigid_body_quality_results_are_checked(tmp_path):
    """The one study that ships no results file: its own results.json is read through its schema too."""
    from vpintegrator.studies.rigid_body_quality import format_results, read_results

    row = {"phase": "p1", "seed": 0, "train_loss": 1e-4, "val_score": None, "wall_time": 3.0, "best_epoch": 2,
           "im": {"error": [0.1, 0.2], "band": [1e-3, "inf"]}, "im_met": False}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"settings": {}, "rows": [row]}))
    res = read_results(good)
    assert "p1" in format_results(res["rows"], res["settings"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"settings": {}, "rows": [{**row, "im": {"error": ["small"]}}]}))
    with pytest.raises(StudyError, match=r"bad.json: row 0 \(p1\): 'im' is .*expected a number \(or null\)"):
        read_results(bad)


@pytest.mark.parametrize("study, args", [
    ("partial_observation", ["--quick", "--systems", "coupled_oscillator", "--approaches", "delay_mlp", "--seeds", "0"]),
    ("reduction", ["--quick", "--systems", "toda", "--sizes", "40"]),
    ("memory", ["--quick", "--systems", "coupled_oscillator", "--approaches", "delay_mlp", "--seeds", "0"]),
])
def test_a_run_into_an_out_with_a_foreign_results_file_stops_before_anything_runs(study, args, tmp_path, capsys):
    """The rows a run merges its new ones into are checked first: a results file there that is not this study's is
    one line, left as it was, and nothing is generated or trained."""
    from vpintegrator.studies.driver import main

    out = tmp_path / "out"
    out.mkdir()
    foreign = out / f"{study}.json"
    foreign.write_text(json.dumps({"rows": [{"system": "x", "label": "y"}]}))
    before = foreign.read_bytes()
    assert main(study, ["--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{study}.json: row 0 (y) has no key" in err[0], err
    assert foreign.read_bytes() == before and sorted(p.name for p in out.iterdir()) == [foreign.name]
