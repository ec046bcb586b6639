"""Children die with their parents: every process the package starts (a study's vp-train, the context study's
training, worker pools) is tied to its parent (``vpintegrator._signals.child_options``, ``die_with_parent``),
so a ``kill -9`` of the parent leaves no orphan; a lock left by a writer that died is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

_SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"

PARENTS = {
    "child_options": """
        import subprocess, sys
        from vpintegrator._signals import child_options
        subprocess.Popen([sys.executable, "-c", SLEEPER, PIDFILE], **child_options()).wait()
    """,
    "run_child": """
        import sys
        from vpintegrator._signals import run_child
        run_child([sys.executable, "-c", SLEEPER, PIDFILE])
    """,
    "study runner": """
        import sys
        from vpintegrator.studies.runner import Runner, Task
        r = Runner(RUN)
        r.add(Task("sleep", ["python", "-c", SLEEPER, PIDFILE], outputs=[]))
        r.execute()
    """,
    "worker pool": """
        import os, time
        from vpintegrator.jobs.executors import in_processes
        def task(path):
            open(path, "w").write(str(os.getpid()))
            time.sleep(120)
        in_processes(task, [(PIDFILE,)], 1)
    """,
}


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie not yet reaped by init has stopped running


@pytest.mark.parametrize("how", list(PARENTS))
def test_kill_9_of_the_parent_ends_its_child(tmp_path, how):
    pidfile = tmp_path / "child.pid"
    code = (f"SLEEPER = {_SLEEPER!r}\nPIDFILE = {str(pidfile)!r}\nRUN = {str(tmp_path / 'run')!r}\n"
            + textwrap.dedent(PARENTS[how]))
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert parent.poll() is None, f"the parent ended first (exit {parent.returncode})"
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        child = int(pidfile.read_text())
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), f"child {child} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pidfile.exists() and pidfile.read_text().strip() and not _gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_stop_children_ends_the_childs_own_children(tmp_path):
    """SIGTERM reaches the child's process group: a grandchild (a tool the child started) stops too."""
    from vpintegrator._signals import child_options, stop_children

    pidfile = tmp_path / "grandchild.pid"
    code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {_SLEEPER!r}, {str(pidfile)!r}]).wait()"
    proc = subprocess.Popen([sys.executable, "-c", code], **child_options())
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    stop_children([proc], timeout=20)
    deadline = time.monotonic() + 20
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.returncode is not None and _gone(grandchild)


def test_a_lock_whose_writer_died_is_taken_over_and_removed(tmp_path):
    """A lock file left by a writer that no longer runs (killed, or a disk-full failure) is taken over; after
    the new writer the lock file is gone."""
    from vpintegrator._outputs import lock_path, output_lock

    out = tmp_path / "best.pt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock_path(out).write_text(f"{int(dead.stdout)}\nvp-train\n")
    with output_lock(out, key=None):
        assert lock_path(out).read_text().startswith(f"{os.getpid()}\n")
    assert not lock_path(out).exists()


def test_a_lock_is_removed_when_writing_its_owner_fails(tmp_path, monkeypatch):
    """A full disk while the lock records its owner: the lock still works and is removed at the end."""
    import errno

    from vpintegrator import _outputs

    def full(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_outputs.os, "pwrite", full)
    out = tmp_path / "best.pt"
    with _outputs.output_lock(out, key=None):
        assert _outputs.lock_path(out).exists()
    assert not _outputs.lock_path(out).exists()


_STUDY_POOL = """
    import numpy as np
    from vpintegrator.data import integrate
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.studies import partial_observation as po

    y0 = np.random.default_rng(0).normal(size=(8, 4)) * 0.5
    data = write_trajectories(RUN + "/co.h5", integrate("coupled_oscillator", y0, 0.2, 40, method="rk4"))
    plan = po.STUDY.parse(["--out", RUN, "--quick", "--jobs", "2", "--systems", "coupled_oscillator",
                           "--approaches", "vpt,delay_mlp", "--budget-seconds", "600"])
    for _ in po.train_runs(plan, {"coupled_oscillator": data}):
        pass
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc), running."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow  # ~20 s: two spawned workers import torch and start training before the kill
def test_kill_9_of_a_study_leaves_none_of_its_training_workers(tmp_path):
    """``vp-study partial_observation --jobs 2`` trains on the package's one pool (``jobs.executors.worker_pool``)
    with the death signal: a ``kill -9`` of the study while both workers train leaves none running (issue 69:
    they trained on for minutes)."""
    run = tmp_path / "run"
    run.mkdir()
    code = f"RUN = {str(run)!r}\n" + textwrap.dedent(_STUDY_POOL)
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(list((run / "runs").glob("*/*"))) < 2:  # both workers have started a training run
            assert parent.poll() is None, f"the study ended first (exit {parent.returncode})"
            assert time.monotonic() < deadline, "the workers never started training"
            time.sleep(0.1)
        workers = _children(parent.pid)
        assert len(workers) >= 2, workers  # the two workers (and multiprocessing's resource tracker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(w) for w in workers), f"workers {[w for w in workers if not _gone(w)]} outlived the study"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for w in workers:
            if not _gone(w):
                os.kill(w, signal.SIGKILL)


def test_the_studies_have_no_process_pool_of_their_own():
    """One job runtime: a study's worker processes come from ``vpintegrator.jobs.executors.worker_pool`` (the
    death signal every other child has; the "worker pool" case above), never from a pool of its own."""
    studies = Path(__file__).resolve().parents[1] / "vpintegrator" / "studies"
    own = [str(p.relative_to(studies)) for p in sorted(studies.rglob("*.py"))
           if "ProcessPoolExecutor" in p.read_text() or "import multiprocessing" in p.read_text()]
    assert not own, f"studies with a process pool of their own (use jobs.executors.worker_pool): {own}"


@pytest.mark.slow  # three runs of a tiny study (a few CPU minutes)
def test_a_study_killed_mid_run_and_run_again_writes_the_rows_of_an_uninterrupted_run(tmp_path, same_rows):
    """kill -9 of ``vp-study partial_observation --jobs 2`` once a training has finished and others run; the same
    command again finishes the study, and its rows equal an uninterrupted run's field by field, clocks aside
    (scripts/same_rows_under_load.py's differ; issue 69)."""
    import json

    rows = same_rows
    args = list(rows.TINY)  # one system and seed, two approaches at two windows: four trainings
    args[args.index("--jobs") + 1] = "2"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def command(out):
        return [sys.executable, "-m", "vpintegrator", "study", "partial_observation", "--out", str(out), "-q", *args]

    whole = tmp_path / "whole"
    subprocess.run(command(whole), check=True, env=env, stdout=subprocess.DEVNULL)
    cut = tmp_path / "cut"
    study = subprocess.Popen(command(cut), env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not list((cut / "runs").glob("*/*/complete.json")):
            assert study.poll() is None, "the study ended before a training finished"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        workers = _children(study.pid)
        study.send_signal(signal.SIGKILL)
        assert len(list((cut / "runs").glob("*/*/complete.json"))) < 4  # killed with trainings left to do
        study.wait()
    finally:
        if study.poll() is None:
            study.kill()
            study.wait()
    deadline = time.monotonic() + 20
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(w) for w in workers)
    subprocess.run(command(cut), check=True, env=env, stdout=subprocess.DEVNULL)
    a, b = (json.loads((d / "partial_observation.json").read_text()) for d in (whole, cut))
    assert len(a["rows"]) == len(b["rows"]) > 0
    found = list(rows.differences(rows._rows(whole / "partial_observation.json"),
                                  rows._rows(cut / "partial_observation.json")))
    assert not found, found[:10]
