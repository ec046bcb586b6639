"""The study runtime's shared parts the partial-observation and reduction studies are composed of: rows merged by key
(``stats.merge_keyed``, each study's ``merge_rows``) against a plain loop written here, a study's results file
(``schema.ResultsFile``: the rows read and checked, the earlier file, the tables and figures at the end) and
``runner.in_pool`` (results in the tasks' order, in one process and on the pool)."""

from __future__ import annotations

import json

import pytest

from vpintegrator._shipped import results_files
from vpintegrator.studies.runner import StudyError, in_pool
from vpintegrator.studies.stats import merge_keyed


def _merged(old, new, key):
    """The rule, plainly: every old row in its place, replaced by the last new row of its key; then the new rows of
    keys no old row has, each key once (its last row) where it first came."""
    out = []
    for r in old:
        same = [n for n in new if key(n) == key(r)]
        out.append(same[-1] if same else r)
    old_keys, seen = [key(r) for r in old], []
    for n in new:
        if key(n) not in old_keys and key(n) not in seen:
            seen.append(key(n))
            out.append([m for m in new if key(m) == key(n)][-1])
    return out


def test_merge_keyed_is_the_plain_rule():
    def key(r):
        return r["k"]

    old = [{"k": k, "v": "old"} for k in (3, 1, 2)]
    new = [{"k": 2, "v": "a"}, {"k": 5, "v": "b"}, {"k": 2, "v": "c"}, {"k": 4, "v": "d"}, {"k": 5, "v": "e"}]
    assert merge_keyed(old, new, key) == _merged(old, new, key)
    assert [r["v"] for r in merge_keyed(old, new, key)] == ["old", "old", "c", "e", "d"]
    assert merge_keyed(old, [], key) == old and merge_keyed([], new, key) == _merged([], new, key)


@pytest.mark.parametrize("study, name, key", [
    ("partial_observation", "partial_observation/quick", lambda r: (r["system"], r.get("seed"), r["label"])),
    ("reduction", "reduction/quick", lambda r: (r["system"], int(r["N"]), r["label"], r.get("seed"))),
])
def test_each_study_merges_a_rerun_into_its_rows_by_its_key(study, name, key):
    """A re-run's rows replace the rows of the same key (the study's own: system, seed, label; for the reduction
    study also N) and keep every other; a row of a new key is added."""
    import importlib

    mod = importlib.import_module(f"vpintegrator.studies.{study}")
    rows = mod.RESULTS.read_rows(results_files(archived=True)[name])
    new = [{**rows[0], "note": "rerun"}, {**rows[-1], "label": "a new row"}]
    got = mod.merge_rows(rows, new)
    assert got == _merged(rows, new, key)
    assert len(got) == len(rows) + 1 and got[0]["note"] == "rerun" and got[-1]["label"] == "a new row"


def test_a_results_file_reads_checks_merges_and_draws(tmp_path, capsys):
    from vpintegrator.studies import reduction

    res = reduction.RESULTS
    shipped = res.read_rows(results_files()["reduction/quick"])
    with pytest.raises(StudyError) as err:  # no file: one line naming it and what to give
        res.read_rows(tmp_path / "reduction.json")
    assert str(err.value).count("\n") == 0 and "reduction.json not found" in str(err.value)
    assert res.earlier(tmp_path / "reduction.json") == {}
    foreign = tmp_path / "foreign" / "reduction.json"
    foreign.parent.mkdir()
    foreign.write_text(json.dumps({"rows": [{"system": "toda"}]}))  # a row without its keys: refused, not merged
    with pytest.raises(StudyError) as err:
        res.earlier(foreign)
    assert "\n" not in str(err.value) and str(foreign) in str(err.value)
    drawn = []
    mine = type(res)(res.name, res.schema, res.summarize, res.tables,
                     lambda rows, summary, out: drawn.append((rows, summary, out)), res.figure_prefix)
    out = tmp_path / "run"
    out.mkdir()
    assert mine.finish(out, shipped) == 0
    summary = reduction.summarize_rows(shipped)
    text = reduction.tables(summary)
    assert (out / "reduction.md").read_text() == text and capsys.readouterr().out.strip() == text.strip()
    assert drawn == [(shipped, summary, out)]  # the figures get the rows and the one summary the tables were drawn from


def test_in_pool_gives_the_results_in_the_tasks_order():
    tasks = [(range(3_000_000),), (range(10),), (range(100),)]  # the first is the slowest
    want = [sum(*t) for t in tasks]
    assert list(in_pool(sum, tasks, 1)) == want
    assert list(in_pool(sum, tasks, 2)) == want
    with pytest.raises(ValueError):  # a task's error comes back as it is
        list(in_pool(int, [("1",), ("x",)], 2))
