"""What a study knows at plan time is refused at plan time (issue 69), in one line, before anything is written:
repeated entries of any list key (names and numbers alike: ``distinct``, the one rule), a window longer than the
trajectories the study would generate. The table-driven one-line checks: tests/bad_inputs/cases_study.py."""

from __future__ import annotations

import pytest

from vpintegrator.studies.driver import load, main
from vpintegrator.studies.runner import StudyError


@pytest.mark.parametrize("study, args, words", [
    ("partial_observation", ["--systems", "rigid_body,rigid_body"], "--systems: 'rigid_body' is given twice"),
    ("partial_observation", ["--approaches", "st,vpt,st"], "--approaches: 'st' is given twice"),
    ("partial_observation", ["--windows", "1,4,1"], "--windows: 1 is given twice"),
    ("reduction", ["--systems", "fpu_beta,toda,fpu_beta"], "--systems: 'fpu_beta' is given twice"),
    ("reduction", ["--sizes", "40,40"], "--sizes: 40 is given twice"),
    ("reduction", ["--quick", "--systems", "toda", "--sizes", "10,40", "--floor-dims", "4", "--reduced-dims", "4,40"],
     "--reduced-dims: a reduced dimension 2n = 40 exceeds the full dimension 2N = 20 of the lattice of --sizes 10"),
    ("partial_observation", ["--quick", "--systems", "rigid_body", "--approaches", "delay_mlp,vpt", "--windows",
                             "60,2"], "--windows: T = 60 for vpt needs 120 states per training window"),
])
def test_refused_at_plan_time_in_one_line_with_nothing_written(study, args, words, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(StudyError, match=words.replace("(", r"\(")):  # the plan refuses: nothing has run
        load(study).parse(["--out", str(out), *args])
    assert main(study, ["--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert not out.exists()


def test_a_delay_window_that_fits_is_planned():
    """The rule is the model's own span (T and what it predicts): a delay model of T = 50 predicts one state."""
    from vpintegrator.studies import partial_observation as po

    plan = po.STUDY.parse(["--out", "x", "--quick", "--approaches", "delay_mlp", "--windows", "50"])
    assert plan.windows == (50,) and plan.approaches == ("delay_mlp",)
