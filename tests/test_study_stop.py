"""Stopping means stopping (issue 88): SIGTERM to a study, or to its whole process group, stops the tasks running
on its pool (a training that takes the signal itself stops as ``interrupted``), starts no further one, and the
study exits 130 with one line giving the command that resumes it (``vpintegrator.studies.driver.resume_line``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM are POSIX's")

#: a study of six tasks on the package's pool; each records its start and how it ended. With CATCH a task takes
#: SIGTERM/SIGINT itself through ``handling`` and returns (as a training does: it stops as ``interrupted``)
PROBE = """
    import contextlib, os, signal, sys, time
    from pathlib import Path
    from vpintegrator._signals import handling
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.options import Study
    from vpintegrator.studies.plan import StudyOptions
    from vpintegrator.studies.pool import in_pool

    CATCH = os.environ.get("PROBE_CATCH") == "1"

    def task(out, i):
        Path(out, f"start_{i}").write_text(str(os.getpid()))
        got = []
        with handling((signal.SIGTERM, signal.SIGINT), lambda s, f: got.append(s)) if CATCH else contextlib.nullcontext():
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                time.sleep(0.02)
            linger = time.monotonic() + 3  # still taking signals: the study's own notice is to come too
            while got and time.monotonic() < linger:
                time.sleep(0.02)
        Path(out, f"end_{i}").write_text(f"stopped by {len(got)} signal(s)" if got else "ran to its end")
        return i

    def run(plan):
        for _ in in_pool(task, [(plan.out, i) for i in range(6)], plan.jobs):
            pass
        return 0

    STUDY = Study(StudyOptions, run, prog="vp-study probe",
                  interrupted="probe study: interrupted; run the same command again")

    if __name__ == "__main__":
        sys.exit(main(STUDY))
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _started(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in out.glob("start_*") if p.read_text()}


@pytest.mark.parametrize("jobs, catch, to", [(1, True, "group"), (2, True, "group"), (2, True, "study"),
                                             (2, False, "group"), (2, False, "study")],
                         ids=["inline-training", "pool-training-group", "pool-training-study", "pool-task-group",
                              "pool-task-study"])
def test_sigterm_mid_study_starts_no_further_task_and_says_how_to_resume(tmp_path, jobs, catch, to):
    (tmp_path / "probe_study.py").write_text(textwrap.dedent(PROBE))
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PROBE_CATCH": "1" if catch else "0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    study = subprocess.Popen([sys.executable, str(tmp_path / "probe_study.py"), "--out", str(out), "--jobs", str(jobs),
                              "--overwrite"], env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_started(out)) < jobs:  # every worker runs a task
            assert study.poll() is None, f"the study ended first: {study.stderr.read()}"
            assert time.monotonic() < deadline, "the tasks never started"
            time.sleep(0.05)
        before = _started(out)
        if to == "group":
            os.killpg(study.pid, signal.SIGTERM)
        else:
            study.send_signal(signal.SIGTERM)
        _, err = study.communicate(timeout=60)
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
            study.wait()
    assert _started(out) == before  # no task started after the signal
    assert study.returncode == 130, err
    assert err.strip().splitlines()[-1] == ("probe study: interrupted; run the same command again; resume with: "
                                            f"vp-study probe --out {out} --jobs {jobs}")
    ends = {p.name: p.read_text() for p in out.glob("end_*")}
    if catch:  # each running training took one stop (the group's signal and the study's notice are one) and ended
        assert ends == {f"end_{name[6:]}": "stopped by 1 signal(s)" for name in before}
    else:  # a plain task is interrupted where it is
        assert ends == {}
    deadline = time.monotonic() + 20
    pids = {int(pid) for pid in before.values()} - {study.pid}
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids)


def test_the_resume_line_drops_overwrite_and_adds_skip_existing_where_the_study_asks_for_it():
    from vpintegrator.studies.driver import resume_line

    assert resume_line("Interrupted; rerun with --skip-existing to continue.", "vp-study rigid_body",
                       ["--out", "a b", "--overwrite"]) == ("Interrupted; rerun with --skip-existing to continue; resume "
                                                            "with: vp-study rigid_body --out 'a b' --skip-existing")
    assert resume_line("x: interrupted", "vp-study memory", ["--quick", "--skip-existing"]) == (
        "x: interrupted; resume with: vp-study memory --quick --skip-existing")


def test_a_rerun_removes_the_locks_a_killed_run_left_in_one_line_and_keeps_a_live_writers(tmp_path, capsys):
    """``kill -9`` of a study leaves its trainings' ``runs/.../*.lock``; the next run into the same ``--out`` removes
    those whose writer is gone, in one warning line, and leaves a lock a running writer holds and a file that is
    not a lock of the package (issue 88)."""
    from vpintegrator._outputs import lock_path
    from vpintegrator.studies.driver import main
    from vpintegrator.studies.options import Study
    from vpintegrator.studies.plan import StudyOptions

    out = tmp_path / "out"
    (out / "runs" / "case").mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = [out / "runs" / "case" / f"vpt_T{t}_seed0.lock" for t in (2, 4)]
    for lock in stale:
        lock.write_text(f"{int(dead.stdout)}\nvp-study\n")
    other = out / "runs" / "notes.lock"
    other.write_text("not a lock\n")
    live = out / "runs" / "case" / "vpt_T8_seed0"
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom vpintegrator._outputs import output_lock\n"
                               f"with output_lock({str(live)!r}):\n    print('held', flush=True)\n    sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        ran = []
        study = Study(StudyOptions, lambda plan: ran.append(plan) or 0, prog="vp-study probe")
        assert main(study, ["--out", str(out), "--overwrite"]) == 0 and len(ran) == 1
        assert not any(lock.exists() for lock in stale)
        assert lock_path(live).exists() and other.read_text() == "not a lock\n"
        warned = [line for line in capsys.readouterr().err.splitlines() if "lock" in line]
        assert warned == [f"Warning: removed 2 stale lock file(s) under {out} left by process {int(dead.stdout)} "
                          "(vp-study), no longer running (a run killed outright): runs/case/vpt_T2_seed0.lock, "
                          "runs/case/vpt_T4_seed0.lock"]
    finally:
        holder.communicate("")


#: the package's pool as every command uses it (``in_processes``: vp-rollout's and vp-gen's worker processes, forked)
COMMAND_POOL = """
    import os, sys, time
    from pathlib import Path
    from vpintegrator._signals import interrupts_raise
    from vpintegrator.jobs.executors import in_processes

    def task(out, i):
        Path(out, f"start_{i}").write_text(str(os.getpid()))
        time.sleep(60)
        return i

    try:
        with interrupts_raise():
            in_processes(task, [(sys.argv[1], i) for i in range(6)], 2)
    except KeyboardInterrupt:
        sys.exit(130)
"""


@pytest.mark.parametrize("to", ["group", "command"])
def test_sigterm_to_a_command_stops_its_worker_pool_and_starts_nothing_after(tmp_path, to):
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(COMMAND_POOL), str(out)], start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(_started(out)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        before = _started(out)
        os.killpg(proc.pid, signal.SIGTERM) if to == "group" else proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)  # the tasks sleep 60 s: only a stop ends them sooner
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert _started(out) == before
