"""kill -9 of vp-train: last.pt loads, log.csv agrees with it, resume finishes, no temporary file is left."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.data import integrate
from vpintegrator.training.checkpoint import read_last


def _epochs(log) -> list[int]:
    with open(log, newline="") as f:
        return [int(r["epoch"]) for r in csv.DictReader(f)]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_kill_9_then_resume(tmp_path):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(16, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = write_trajectories(tmp_path / "data.h5", integrate("rigid_body", y0, 0.2, 40, method="rk4"))
    config = tmp_path / "config.toml"
    config.write_text(
        f'data = ["{data}"]\nepochs = 400\nbatch_size = 16\ndtype = "float64"\ndevice = "cpu"\nlr = 1e-3\n'
        "lr_min = 1e-4\ncheckpoint_seconds = 30\n[model]\nname = \"vpt\"\nseq_len = 2\nL = 1\n"
    )
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vpintegrator.cli.train", str(config), "--out", str(run), "--quiet"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (run / "log.csv").exists() and len(_epochs(run / "log.csv")) >= 3:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail("vp-train did not get through 3 epochs in 60 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "vp-train finished before it was killed; give it more epochs"

    last = read_last(run / "last.pt")  # loads: a checkpoint is never half-written
    done = int(last["epoch"])
    assert done >= 2
    rows = _epochs(run / "log.csv")
    # the log row of an epoch is written just before its checkpoint: at most one row beyond last.pt
    assert rows == list(range(1, len(rows) + 1)) and done <= len(rows) <= done + 1
    orphan = run / f".last.pt.{_dead_pid()}.abcd.pt.tmp"  # what a kill during a write leaves
    orphan.write_bytes(b"partial")

    total = done + 2
    result = subprocess.run(
        [sys.executable, "-m", "vpintegrator.cli.train", "--resume", str(run), "--epochs", str(total), "--quiet"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert int(read_last(run / "last.pt")["epoch"]) == total
    assert _epochs(run / "log.csv") == list(range(1, total + 1))
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    assert torch.load(run / "best.pt", weights_only=True)["epoch"] >= 1


def _tiny_data(path):
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(16, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return write_trajectories(path, integrate("rigid_body", y0, 0.2, 40, method="rk4"))


def _kill_after_epochs(cmd, pattern, count, n, env, cwd):
    """Run ``cmd`` in ``cwd`` until ``count`` files match ``pattern`` (log.csv files) with ``n`` rows each, then
    kill -9 it."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            logs = list(cwd.glob(pattern))
            if len(logs) == count and all(len(_epochs(p)) >= n for p in logs):
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail(f"vp-train did not get through {n} epochs in 90 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "vp-train finished before it was killed; give it more epochs"


def test_kill_9_of_an_ensemble_then_resume_from_another_directory(tmp_path):
    """After kill -9 of `vp-train --ensemble 3` (before its ensemble.csv), the directory still holds a run: a
    new run into it is refused as "already holds a run" (not "holds no run"), and --resume from another working
    directory takes the dead writer's lock over and continues every member from its last checkpoint (issue 36:
    it said "data file ../data.h5 not found" and a member "cannot be resumed")."""
    work = tmp_path / "work"
    work.mkdir()
    _tiny_data(work / "data.h5")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vpintegrator.cli.train", "--data", "data.h5", "--model", "vpt", "--seq-len", "2",
           "--set", "model.L=1", "--set", "model.n_blocks=1", "--batch-size", "16", "--dtype", "float64",
           "--device", "cpu", "--ensemble", "3", "--out", "ens", "--quiet"]
    _kill_after_epochs([*cmd, "--epochs", "400"], "ens/member_*/log.csv", 3, 2, env, work)
    ens = work / "ens"
    assert not (ens / "ensemble.csv").exists() and len(list(ens.glob("member_*"))) == 3
    assert (work / "ens.lock").exists()  # the dead writer's
    again = subprocess.run([*cmd, "--epochs", "2"], env=env, cwd=work, capture_output=True, text=True, timeout=120)
    lines = again.stderr.splitlines()  # the dead writer's lock taken over (a warning), then the one error line
    assert again.returncode == 1 and lines[-1].startswith("Error:") and "already holds a run" in lines[-1], lines
    assert len(lines) == 2 and lines[0].startswith("Warning: took over") and "Traceback" not in again.stderr
    done = int(torch.load(ens / "ensemble_last.pt", weights_only=True)["epoch"])
    assert done >= 1  # the log's rows are written just before their checkpoint
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run([sys.executable, "-m", "vpintegrator.cli.train", "--resume", "../work/ens", "--epochs",
                          str(done + 2), "--quiet"], env=env, cwd=elsewhere, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "cannot be resumed" not in res.stderr
    for m in ens.glob("member_*"):
        assert _epochs(m / "log.csv") == list(range(1, done + 3))
        assert torch.load(m / "last.pt", weights_only=True)["epoch"] == done + 2
    assert (ens / "ensemble.csv").is_file()
    assert not list(work.glob("*.lock")) and not list(ens.rglob("*.tmp")) and not list(elsewhere.iterdir())


# -- kill -9 at random moments, then resume: the final files equal an uninterrupted run's --------------------

def _bigger_data(path):
    rng = np.random.default_rng(1)
    y0 = rng.normal(size=(48, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return write_trajectories(path, integrate("rigid_body", y0, 0.2, 40, method="rk4"))


def _train_cmd(ensemble: bool, epochs: int) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.train", "--data", "data.h5", "--model", "vpt", "--seq-len", "2",
            "--set", "model.L=1", "--set", "model.n_blocks=1", "--batch-size", "32", "--dtype", "float64",
            "--device", "cpu", "--epochs", str(epochs), "--quiet", "--set", "lr_min=1e-4",
            *(["--ensemble", "3"] if ensemble else [])]


def _kill_at(proc, logs, rows: int, delay: float) -> bool:
    """kill -9 ``proc`` ``delay`` s after every file of ``logs()`` holds ``rows`` rows (or after it starts
    when ``rows`` is 0); False when it finished first."""
    deadline = time.monotonic() + 120
    while rows and time.monotonic() < deadline and proc.poll() is None:
        files = logs()
        if files and all(f.exists() and len(_epochs(f)) >= rows for f in files):
            break
        time.sleep(0.01)
    time.sleep(delay)
    if proc.poll() is not None:
        return False
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return True


def _weights_and_logs(run, ensemble: bool) -> dict:
    """What must equal between two runs: every checkpoint's weights and epoch, every log's rows but the
    seconds, the ensemble's table."""
    dirs = sorted(run.glob("member_*")) if ensemble else [run]
    out = {}
    for d in dirs:
        for name in ("last.pt", "best.pt"):
            ckpt = torch.load(d / name, weights_only=True)
            out[(d.name, name, "epoch")] = ckpt["epoch"]
            for key, t in ckpt["state_dict"].items():
                out[(d.name, name, key)] = t.numpy().tobytes()
        with open(d / "log.csv", newline="") as f:
            out[(d.name, "log")] = [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in csv.DictReader(f)]
    if ensemble:
        out["table"] = (run / "ensemble.csv").read_text()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("ensemble", [False, True], ids=["single", "ensemble"])
@pytest.mark.parametrize("moment", [0, 1, 2])
def test_kill_9_at_random_moments_of_a_run_and_of_its_resume(tmp_path, ensemble, moment):
    """kill -9 at a random moment (start-up, mid-epoch, during a checkpoint's write; the moment drawn from a
    seeded RNG, the timing the machine's), then kill -9 of a resume started in the same working directory,
    then a resume from another working directory: it succeeds, no temporary or lock file remains, every checkpoint loads, and the final weights,
    logs and table equal an uninterrupted run's bit for bit (what vp-train promises: one process, the same
    code on the same data; the resumed state is the checkpointed state exactly)."""
    rng = np.random.default_rng(100 * moment + ensemble)
    epochs = 30
    ref_dir, work, elsewhere = tmp_path / "ref", tmp_path / "work", tmp_path / "elsewhere"
    for d in (ref_dir, work, elsewhere):
        d.mkdir()
    _bigger_data(ref_dir / "data.h5")
    _bigger_data(work / "data.h5")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ref = subprocess.run([*_train_cmd(ensemble, epochs), "--out", "run"], env=env, cwd=ref_dir, capture_output=True,
                         text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    run = work / "run"

    def logs():
        return sorted(run.glob("member_*/log.csv")) if ensemble else [run / "log.csv"]

    proc = subprocess.Popen([*_train_cmd(ensemble, epochs), "--out", "run"], env=env, cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = int(rng.integers(1, 8))
    assert _kill_at(proc, lambda: logs() if (not ensemble or len(logs()) == 3) else [], rows,
                    float(rng.uniform(0, 0.08))), "vp-train finished before it was killed; give it more epochs"
    resume = [*_train_cmd(ensemble, epochs)[:3], "--resume", "../work/run", "--epochs", str(epochs), "--quiet"]
    state = run / ("ensemble_last.pt" if ensemble else "last.pt")
    for ckpt in run.rglob("*.pt"):  # every checkpoint there is complete (a partial one is a hidden .tmp)
        torch.load(ckpt, weights_only=True)
    if state.exists():  # else killed before its first checkpoint: a rerun with --overwrite is what is left
        here = [*resume[:4], "run", *resume[5:]]  # the killed resume runs in the run's own working directory
        proc = subprocess.Popen(here, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _kill_at(proc, lambda: [], 0, float(rng.uniform(2.0, 6.0)))  # somewhere in start-up or training
        res = subprocess.run(resume, env=env, cwd=elsewhere, capture_output=True, text=True, timeout=300)
    else:
        res = subprocess.run([*_train_cmd(ensemble, epochs), "--out", "run", "--overwrite"], env=env, cwd=work,
                             capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert all(line.startswith("Warning: took over") for line in res.stderr.splitlines() if line.strip()), res.stderr
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.lock")) and not list(elsewhere.iterdir())
    assert _weights_and_logs(run, ensemble) == _weights_and_logs(ref_dir / "run", ensemble)
