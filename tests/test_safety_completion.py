"""A run is finished only when it says so: ``complete.json`` (``vpintegrator.rundir``) is written last by a
training that ended by its own rule, removed when a training starts in the directory, and whatever skips
finished work (the context study's runs, the studies' export) reads it, never the presence of ``best.pt``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.rundir import COMPLETE, is_complete, read_complete, read_own_json, write_complete


def _train(tiny_data, out, *extra):
    from vpintegrator.cli.train import main

    return CliRunner().invoke(main, ["--data", tiny_data, "--model", "vpff", "--epochs", "2", "--batch-size", "64",
                                     "--out", str(out), "--quiet", *map(str, extra)])


def test_a_training_that_ends_writes_its_record_last_and_a_restart_removes_it(tiny_data, tmp_path):
    run = tmp_path / "run"
    res = _train(tiny_data, run)
    assert res.exit_code == 0, res.output
    record = read_complete(run)
    assert record == {"finished": True, "stopped": "epochs", "epochs": 2}
    newest = max((p for p in run.iterdir() if p.name != COMPLETE), key=lambda p: p.stat().st_mtime_ns)
    assert (run / COMPLETE).stat().st_mtime_ns >= newest.stat().st_mtime_ns  # written last
    # --overwrite replaces it with the new run's (the old record is removed first: run_dir_removals)
    res = _train(tiny_data, run, "--overwrite", "--epochs", 1)
    assert res.exit_code == 0, res.output
    assert read_complete(run)["epochs"] == 1


def test_a_half_finished_run_is_not_finished(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"PK\x03\x04 a checkpoint of epoch 2 of 6")
    (run / "summary.json").write_text(json.dumps({"best_loss": 0.1, "stopped": "running"}))
    assert not is_complete(run)
    write_complete(run, "epochs", 6)
    assert is_complete(run)


@pytest.mark.parametrize("text, words", [("", "empty"), ("{\"finished\": tr", "damaged"),
                                         ("[1, 2]", "not a completion record"), ("{}", "not a completion record")])
def test_a_damaged_record_is_one_line_saying_to_delete_it(tmp_path, text, words):
    (tmp_path / COMPLETE).write_text(text)
    with pytest.raises(VPIntegratorError, match=words) as err:
        is_complete(tmp_path)
    assert "delete it" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, words", [(None, "not found"), ("", "empty"), ("{\"rows\": [", "damaged"),
                                         ("\x00\x01\xff", "cannot read|damaged")])
def test_read_own_json_names_the_file_and_the_fix(tmp_path, text, words):
    path = tmp_path / "x.json"
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    with pytest.raises(VPIntegratorError, match=words) as err:
        read_own_json(path, "a study's results", "delete it and run the study again")
    assert str(path) in str(err.value) and "delete it and run the study again" in str(err.value)


def test_the_context_study_trains_again_a_run_without_a_record(tmp_path, monkeypatch):
    """A run directory with best.pt but no completion record (Ctrl-C or kill -9 mid-training) is trained again;
    a finished one is kept."""
    from vpintegrator.studies import context

    calls = []
    monkeypatch.setattr(context.evaluation, "run_child", lambda cmd, **kw: calls.append(cmd))
    run = tmp_path / "runs" / "lpnet_ctx_k3_interpolation_seed2"
    run.mkdir(parents=True)
    (run / "best.pt").write_bytes(b"PK\x03\x04 half")
    assert context.train_run(tmp_path / "d.h5", tmp_path, "lpnet_ctx", 2, 30, 3, "interpolation") == run
    assert len(calls) == 1 and "--overwrite" in calls[0]
    write_complete(run, "epochs", 30)
    context.train_run(tmp_path / "d.h5", tmp_path, "lpnet_ctx", 2, 30, 3, "interpolation")
    assert len(calls) == 1  # finished: kept


@pytest.mark.parametrize("text", ["", "{", "[]", '{"rows": [1]}', '{"commands": []}'])
def test_figures_only_on_a_damaged_study_json_is_one_line(tmp_path, capsys, text):
    from vpintegrator.studies.context import STUDY
    from vpintegrator.studies.driver import main as drive

    def main(argv):
        return drive(STUDY, argv)

    (tmp_path / "context_study.json").write_text(text)
    assert main(["--out", str(tmp_path), "--figures-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "context_study.json" in err and "delete it" in err


def test_a_study_step_without_its_stamp_runs_again_and_a_damaged_stamp_is_one_line(tmp_path, capsys):
    """The study runner's completion record is the step's stamp, written after the step succeeded: outputs
    without a stamp (a step killed after writing them) are made again; a damaged stamp is one line."""
    from vpintegrator.studies.runner import Runner, Task

    run = tmp_path / "run"
    out = tmp_path / "out.txt"
    out.write_text("half")  # what a killed step left
    cmd = ["python", "-c", f"open({str(out)!r}, 'w').write('whole')"]
    r = Runner(run, skip_existing=True)
    r.add(Task("write", cmd, outputs=[out]))
    assert r.execute() and out.read_text() == "whole"
    again = Runner(run, skip_existing=True)
    again.add(Task("write", cmd, outputs=[out]))
    out.write_text("kept")
    assert again.execute() and out.read_text() == "kept"  # finished: skipped
    again.stamp("write").write_text("{")
    third = Runner(run, skip_existing=True)
    third.add(Task("write", cmd, outputs=[out]))
    with pytest.raises(VPIntegratorError, match=r"write.json: damaged, .*delete it"):
        third.execute()
