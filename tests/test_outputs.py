"""The overwrite rule and one writer per output (vpintegrator/_outputs.py), through the library, the CLIs
and real second processes. The bad-input table (tests/bad_inputs/cases_outputs.py) holds the refusals;
here: what each kind is, that --overwrite replaces the command's own kind (also through a link), that a
live writer's lock refuses a second writer (another process holding it), that a dead writer's lock is
taken over, and the studies' rule."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator._outputs import (
    OutputError,
    check_output,
    identify,
    lock_path,
    output_lock,
)
from vpintegrator.data import read_trajectories, write_trajectories
from vpintegrator.data import integrate

pytestmark = pytest.mark.usefixtures("one_thread")


def _sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _traj(n: int = 3):
    y0 = np.random.default_rng(n).normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return integrate("rigid_body", y0, 0.2, 20, method="rk4")


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else _sha(p)) for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """One file of every kind, written by the package itself."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vpintegrator.metrics import write_table
    from vpintegrator.models import build_model, save_model
    from vpintegrator.plotting.style import save_figure
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    d = tmp_path_factory.mktemp("kinds")
    write_trajectories(d / "data.h5", _traj())
    run_rollouts(RolloutConfig(data=str(d / "data.h5"), integrators=["rk4"], n_traj=2, out=str(d / "roll.h5")))
    save_model(build_model("vpt", dim=3, seq_len=2, n_blocks=1, L=1), d / "m.pt")
    write_table([{"method": "x", "err": 1.0}], d / "table")
    fig = plt.figure()
    save_figure(fig, d / "fig", formats=["pdf", "png", "svg"])
    plt.close(fig)
    run = d / "run"
    run.mkdir()
    for name in ("config.toml", "log.csv", "summary.json"):
        (run / name).write_text("x\n")
    (d / "plain_dir").mkdir()
    (d / "user.py").write_text("print('hi')\n")
    (d / "user.png").write_bytes(b"\x89PNG\r\n\x1a\nnot drawn by matplotlib")
    (d / "user.csv").write_text("a,b\n1,2\n")
    (d / "blob.bin").write_bytes(b"\x00\x01")
    return d


@pytest.mark.parametrize("name, kind", [
    ("data.h5", "trajectories"), ("roll.h5", "rollout"), ("roll.csv", "table"), ("roll.md", "table"),
    ("table.csv", "table"), ("m.pt", "checkpoint"), ("fig.pdf", "figure"), ("fig.png", "figure"),
    ("fig.svg", "figure"), ("run", "run"), ("plain_dir", "directory"), ("user.py", "source"),
    ("user.png", "file"), ("user.csv", "file"), ("blob.bin", "file"), ("missing.h5", None),
])
def test_identify_names_what_the_package_wrote(made, name, kind):
    assert identify(made / name) == kind


def test_check_output_refuses_existing_and_foreign_and_resolves_links(made, tmp_path):
    assert check_output(tmp_path / "new.h5", "trajectories") == (tmp_path / "new.h5").resolve()
    with pytest.raises(OutputError, match=r"data.h5 already exists \(a vp-gen trajectory file\).*use overwrite"):
        check_output(made / "data.h5", "trajectories")
    assert check_output(made / "data.h5", "trajectories", overwrite=True) == (made / "data.h5").resolve()
    with pytest.raises(OutputError, match=r"is a vp-rollout file, not a vp-gen trajectory file: it is never replaced"):
        check_output(made / "roll.h5", "trajectories", overwrite=True)
    link = tmp_path / "link.h5"
    link.symlink_to(made / "data.h5")
    assert check_output(link, "trajectories", overwrite=True) == (made / "data.h5").resolve()
    with pytest.raises(OutputError, match=r"link.h5 \(a link to .*data.h5\) exists and is a vp-gen trajectory file, "
                                          r"not a vp-rollout file"):
        check_output(link, "rollout", overwrite=True)
    loop = tmp_path / "loop.h5"
    loop.symlink_to(loop)
    with pytest.raises(OutputError, match="cannot resolve the path"):
        check_output(loop, "trajectories")


def test_a_cli_names_its_flags_in_the_message(made):
    err = pytest.raises(OutputError, check_output, made / "roll.h5", "rollout").value
    text = err.render(lambda key: {"out": "--out", "overwrite": "--overwrite"}[key])
    assert text.startswith("--out ") and text.endswith("or use --overwrite to replace it")


# --------------------------------------------------------------------------- one writer per output


def _hold(path: str, held, release) -> None:  # in a second process
    with output_lock(path):
        held.set()
        release.wait(60)


@pytest.fixture
def holder():
    """``start(path)`` runs a second process that holds the lock of ``path`` until the test ends."""
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    procs = []

    def start(path: Path):
        held, release = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_hold, args=(str(path), held, release))
        proc.start()
        assert held.wait(60), "the second process never took the lock"
        procs.append((proc, release))
        return proc

    yield start
    for proc, release in procs:
        if proc.is_alive():  # (setting the event of a process killed while it waited would wait for it forever)
            release.set()
        proc.join(30)


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path, holder):
    out = tmp_path / "x.h5"
    proc = holder(out)
    assert lock_path(out).read_text().split()[0] == str(proc.pid)
    with pytest.raises(OutputError, match=rf"x.h5 is being written by process {proc.pid}\b.*holds .*x.h5.lock; "
                                          "wait for it to finish, or give another path"):
        with output_lock(out):
            pass
    with pytest.raises(OutputError, match=rf"process {proc.pid}"):  # the library writers take the same lock
        write_trajectories(out, _traj())
    assert not out.exists()


def test_a_link_to_a_locked_output_is_the_same_output(tmp_path, holder):
    out = tmp_path / "x.h5"
    proc = holder(out)
    link = tmp_path / "other_name.h5"
    link.symlink_to(out)
    with pytest.raises(OutputError, match=rf"is being written by process {proc.pid}"):
        write_trajectories(link, _traj())


def test_the_lock_is_free_again_and_gone_when_the_writer_ends(tmp_path, holder):
    out = tmp_path / "x.h5"
    ctx_proc = holder(out)
    os.kill(ctx_proc.pid, signal.SIGKILL)  # a writer killed outright: the kernel releases its flock
    ctx_proc.join(30)
    write_trajectories(out, _traj())  # takes over the lock file the dead writer left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_a_stale_lock_of_a_dead_process_is_taken_over_and_said_so(tmp_path, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    out = tmp_path / "x.h5"
    lock_path(out).write_text(f"{pid}\nvp-gen\n")
    with caplog.at_level("WARNING", logger="vpintegrator"):  # a library warning (vp-gen prints "Warning: ...")
        write_trajectories(out, _traj())
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert len(said) == 1 and said[0][:2] == ("vpintegrator._outputs", "WARNING"), said
    assert re.fullmatch(rf"took over .*x\.h5\.lock, left by process {pid} \(vp-gen\), which no longer runs", said[0][2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]


def test_the_lock_is_reentrant_in_one_process_and_leaves_no_folders(tmp_path):
    out = tmp_path / "a" / "b" / "x.h5"
    with output_lock(out) as lock:
        with output_lock(out):
            assert lock.read_text().split()[0] == str(os.getpid())
        assert lock.exists()
    assert not lock.exists()
    assert list(tmp_path.iterdir()) == []  # the folders made for the lock went with it


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_lock_file_that_is_a_link_is_refused_and_nothing_is_written_through_it(tmp_path, target_exists):
    """Issue 36: a link in the lock's place was written through (the user's notes.txt changed) and deleted."""
    notes = tmp_path / "notes.txt"
    if target_exists:
        notes.write_text("my notes\n")
    out = tmp_path / "x.h5"
    lock_path(out).symlink_to(notes)
    with pytest.raises(OutputError, match=r"lock file .*x\.h5\.lock is a symbolic link .*locks never follow links"):
        write_trajectories(out, _traj())
    assert lock_path(out).is_symlink() and os.readlink(lock_path(out)) == str(notes)  # the link stays
    assert (notes.read_text() == "my notes\n") if target_exists else not notes.exists()
    assert not out.exists()
    # the CLI: one line, exit 1
    from vpintegrator.cli import gen

    res = CliRunner().invoke(gen.main, ["rigid_body", "--n-traj", "2", "--t-end", "0.4", "--out", str(out)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "symbolic link" in res.output, res.output
    assert lock_path(out).is_symlink() and not out.exists()


@pytest.mark.parametrize("content, what", [(b"my own file\n", "holds something else than a lock"),
                                           (b"123\nvp-gen\nmore lines of someone's\n", "holds something else than a lock"),
                                           ("dir", "is not a regular file"), ("fifo", "is not a regular file")])
def test_a_lock_file_of_foreign_content_is_neither_used_nor_removed(tmp_path, content, what):
    out = tmp_path / "x.h5"
    lock = lock_path(out)
    if content == "dir":
        lock.mkdir()
    elif content == "fifo":
        os.mkfifo(lock)
    else:
        lock.write_bytes(content)
    with pytest.raises(OutputError, match=rf"x\.h5\.lock {what} \(not a lock file of vpintegrator\)"):
        write_trajectories(out, _traj())
    if content == "dir":
        assert lock.is_dir()
    elif content == "fifo":
        assert lock.is_fifo()
    else:
        assert lock.read_bytes() == content
    assert not out.exists()


def test_the_lock_removes_only_the_file_it_locked(tmp_path):
    out = tmp_path / "x.h5"
    with output_lock(out) as lock:
        lock.unlink()
        lock.write_text("a file someone put there\n")  # (not a lock: the exit must leave it)
    assert lock.read_text() == "a file someone put there\n"


def test_a_study_into_a_locked_run_is_refused(tmp_path, holder):
    from vpintegrator.studies.runner import StudyError, study_lock

    run = tmp_path / "RUN"
    proc = holder(run)
    with pytest.raises(StudyError, match=rf"^--out .*RUN is being written by process {proc.pid}"):
        with study_lock(run):
            pass


# --------------------------------------------------------------------------- the CLIs


def _train_cmd(data: Path, out: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.train", "--data", str(data), "--model", "vpt", "--seq-len", "2",
            "--set", "model.n_blocks=1", "--set", "model.L=1", "--epochs", str(10**6), "--device", "cpu",
            "--out", str(out), "--quiet", *extra]


def _wait_for_lock(path: Path, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    lock = lock_path(path)
    while not (lock.exists() and lock.read_text().split()[:1] == [str(proc.pid)]):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first writer never took its lock"
        time.sleep(0.05)


def _one_error_line(result) -> str:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_two_vp_train_to_one_out_and_a_resume_of_a_live_run_are_refused(tmp_path):
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    data = write_trajectories(tmp_path / "data.h5", _traj(8))
    data_sha = _sha(data)
    out = tmp_path / "same"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_train_cmd(data, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lock(out, first)
        args = ["--data", str(data), "--model", "vpt", "--epochs", "3", "--quiet", "--out", str(out)]
        for extra in ([], ["--overwrite"]):
            line = _one_error_line(CliRunner().invoke(train_main, [*args, *extra]))
            assert re.search(rf"^Error: --out .*same is being written by process {first.pid} \(vp-train\)", line), line
        deadline = time.monotonic() + 90
        while not (out / "last.pt").exists():  # a checkpoint: a run that --resume would continue
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        line = _one_error_line(CliRunner().invoke(train_main, ["--resume", str(out), "--epochs", "5", "--quiet"]))
        assert re.search(rf"^Error: --resume .*same is being written by process {first.pid} \(vp-train\)", line), line
        # vp-rollout into the file vp-train is reading: not a rollout file, never replaced
        line = _one_error_line(CliRunner().invoke(rollout_main, [
            "--data", str(data), "--integrators", "rk4", "--n-traj", "2", "--quiet", "--out", str(data), "--overwrite"]))
        assert "is the input file" in line
        other = write_trajectories(tmp_path / "other.h5", _traj(4))
        line = _one_error_line(CliRunner().invoke(rollout_main, [
            "--data", str(other), "--integrators", "rk4", "--n-traj", "2", "--quiet", "--out", str(data), "--overwrite"]))
        assert "exists and is a vp-gen trajectory file, not a vp-rollout file" in line
        assert _sha(data) == data_sha
    finally:
        first.send_signal(signal.SIGTERM)  # saves last.pt and exits 130
        _, err = first.communicate(timeout=120)
    assert first.returncode in (130, -signal.SIGINT), err  # -SIGINT: see test_cli_gen.py (a shell reports 130)
    assert not lock_path(out).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5", "other.h5", "same"]


def test_two_vp_rollout_to_one_out_are_refused(tmp_path):
    from crash_helpers import orphans, start_writing

    data = write_trajectories(tmp_path / "data.h5", _traj(2))
    out = tmp_path / "roll.h5"
    cmd = [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators", "rk4", "--n-traj",
           "2", "--no-volume", "--quiet", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = start_writing([*cmd, "--t-end", "2e5"], out, env)
    try:
        live = orphans(out)
        res = subprocess.run([*cmd, "--t-end", "2", "--overwrite"], env=env, capture_output=True, text=True, timeout=120,
                             check=False)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert re.fullmatch(rf"Error: --out .*roll.h5 is being written by process {first.pid} \(vp-rollout\).*\n",
                            res.stderr), res.stderr
        assert orphans(out) == live and not out.exists()
    finally:
        first.kill()
        first.wait()


def test_overwrite_replaces_the_commands_own_outputs_and_nothing_else(tmp_path):
    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.plot import main as plot_main
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main
    from vpintegrator.data.rollouts import read_rollout

    runner = CliRunner()
    data = tmp_path / "data.h5"
    assert runner.invoke(gen_main, ["rigid_body", "--n-traj", "3", "--t-end", "2", "--out", str(data)]).exit_code == 0
    res = runner.invoke(gen_main, ["rigid_body", "--n-traj", "4", "--t-end", "2", "--out", str(data), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert read_trajectories(data).n_traj == 4

    # a rollout through a link: the file it points to is replaced, the link stays a link
    real = tmp_path / "rollouts" / "real.h5"
    roll = ["--data", str(data), "--integrators", "rk4", "--quiet"]
    assert runner.invoke(rollout_main, [*roll, "--n-traj", "2", "--out", str(real)]).exit_code == 0
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    res = runner.invoke(rollout_main, [*roll, "--n-traj", "3", "--out", str(link), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and read_rollout(real).meta["n_traj"] == 3

    # a run directory: vp-train's files (and vp-plot's figures) replaced, once the new run's set-up succeeded
    run = tmp_path / "run"
    train = ["--data", str(data), "--model", "vpt", "--seq-len", "2", "--set", "model.n_blocks=1", "--set",
             "model.L=1", "--device", "cpu", "--quiet", "--out", str(run)]
    assert runner.invoke(train_main, [*train, "--epochs", "3"]).exit_code == 0
    assert runner.invoke(plot_main, [str(run), "--kind", "training"]).exit_code == 0
    assert (run / "figures" / "training.png").exists()
    before = _tree(tmp_path / "rollouts")
    res = runner.invoke(train_main, [*train, "--epochs", "1", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert len((run / "log.csv").read_text().splitlines()) == 2  # header + the new run's one epoch
    assert not (run / "figures").exists() and not list(tmp_path.glob("*.lock"))
    # issue 36: the user's files in it (a figure of theirs, drawn by matplotlib too, notes) are kept
    assert runner.invoke(plot_main, [str(run), "--kind", "training"]).exit_code == 0
    (run / "figures" / "training.png").rename(run / "figures" / "paper_fig3.png")
    (run / "notes.txt").write_text("mine\n")
    (run / "drafts").mkdir()
    (run / "drafts" / "log.csv").write_text("not a run's\n")
    kept = {p: _sha(p) for p in (run / "figures" / "paper_fig3.png", run / "notes.txt", run / "drafts" / "log.csv")}
    res = runner.invoke(train_main, [*train, "--epochs", "2", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert {p: _sha(p) for p in kept} == kept and len((run / "log.csv").read_text().splitlines()) == 3
    assert sorted(p.name for p in (run / "figures").iterdir()) == ["paper_fig3.png"]  # training.pdf went
    # a file of the user's where the new run writes: one line, nothing removed
    (run / "summary.json").unlink()
    (run / "summary.json").mkdir()
    snapshot = _tree(run)
    res = runner.invoke(train_main, [*train, "--epochs", "1", "--overwrite"])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "summary.json is a directory, not what vp-train writes there; it is never removed" in res.output
    assert _tree(run) == snapshot
    (run / "summary.json").rmdir()
    res = runner.invoke(train_main, [*train, "--epochs", "1", "--overwrite", "--data", "nonexistent.h5"])
    assert res.exit_code == 1 and (run / "log.csv").exists()  # a failed set-up leaves the old run
    assert _tree(tmp_path / "rollouts") == before

    # figures: the ones vp-plot drew are replaced, the user's file beside them is untouched
    figs = tmp_path / "figs"
    assert runner.invoke(plot_main, [str(real), "--kind", "error", "--out", str(figs)]).exit_code == 0
    (figs / "notes.txt").write_text("mine\n")
    png = _sha(figs / "error.png")
    res = runner.invoke(plot_main, [str(real), "--kind", "error", "--out", str(figs), "--overwrite", "--dpi", "50"])
    assert res.exit_code == 0, res.output
    assert _sha(figs / "error.png") != png and (figs / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in figs.iterdir()) == ["error.pdf", "error.png", "notes.txt"]


# --------------------------------------------------------------------------- the studies


def test_study_out_rule(tmp_path):
    from vpintegrator.studies.runner import StudyError, check_study_out

    check_study_out(tmp_path / "new")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "photo.jpg").write_bytes(b"x")
    with pytest.raises(StudyError, match=r"exists and is not empty; add --skip-existing .*--overwrite"):
        check_study_out(mine)
    with pytest.raises(StudyError, match=r"not a study's run directory .* never replaced, also with --overwrite"):
        check_study_out(mine, overwrite=True)
    (mine / "study.log").write_text("")
    check_study_out(mine, overwrite=True)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_study_passes_overwrite_to_the_commands_it_runs(tmp_path, overwrite):
    from vpintegrator.studies.runner import Runner, Task

    out = write_trajectories(tmp_path / "d.h5", _traj(2))
    before = _sha(out)
    r = Runner(tmp_path / "RUN", overwrite=overwrite)
    r.add(Task("gen", ["vp-gen", "rigid_body", "--n-traj", "2", "--t-end", "0.5", "--out", out, "--quiet"],
               [out]))
    assert r.execute() is overwrite
    assert ("--overwrite" in r.commands[0]) is overwrite
    assert (_sha(out) != before) is overwrite
