"""Issue 22 item 4: progress off a terminal (throttled plain lines; a fake clock, no timing asserts) and the
library's messages through stdlib logging, shown by the CLIs."""

from __future__ import annotations

import io
import logging

import click
import pytest
from click.testing import CliRunner

from vpintegrator._progress import DEFAULT_INTERVAL, INTERVAL_ENV, ProgressLines, progress, progress_interval


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


# -- throttled lines ---------------------------------------------------------------------------------------


def test_lines_are_throttled_to_one_per_interval_with_the_first_and_the_last():
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("gen", 10, unit="trajectories", interval=30, stream=out, clock=clock)
    clock.now += 2
    assert lines.update(1) is True  # the first update: a line at once
    for k in range(2, 6):  # within the interval: nothing
        clock.now += 5
        assert lines.update(k) is False
    clock.now += 20  # 32 s after the first line
    assert lines.update(6) is True
    clock.now += 1
    assert lines.update(10) is True  # all done: always said
    lines.close()  # already said: no repeat
    got = _lines(out)
    assert len(got) == 3
    assert got[0].startswith("gen: 1/10 (10%), 2 s per trajectory, 18 s left, 2 s elapsed")
    assert got[1].startswith("gen: 6/10 (60%)") and got[2].startswith("gen: 10/10 (100%)")
    assert "left" not in got[2]


def test_close_writes_the_last_state_once_and_slow_rates_read_as_seconds_per_unit():
    clock, out = Clock(), io.StringIO()
    with ProgressLines("training", None, unit="epochs", interval=60, stream=out, clock=clock) as lines:
        clock.now += 4
        lines.update(1, "epoch 1 loss 1.0e-01")
        clock.now += 4
        lines.update(2, "epoch 2 loss 5.0e-02")  # throttled; close() says it
    got = _lines(out)
    assert got == ["training: 1 epochs, 4 s per epoch, 4 s elapsed, epoch 1 loss 1.0e-01",
                   "training: 2 epochs, 4 s per epoch, 8 s elapsed, epoch 2 loss 5.0e-02"]


def test_interval_zero_writes_every_update_and_advance_counts_on():
    out = io.StringIO()
    lines = ProgressLines("rollout vpt", 300, unit="steps", interval=0, stream=out, clock=Clock())
    for _ in range(3):
        lines.advance(100)
    assert [line.split(",")[0] for line in _lines(out)] == ["rollout vpt: 100/300 (33%)", "rollout vpt: 200/300 (67%)",
                                                            "rollout vpt: 300/300 (100%)"]


@pytest.mark.parametrize(("env", "expected"), [
    (None, DEFAULT_INTERVAL), ("5", 5.0), ("0", 0.0), ("-1", DEFAULT_INTERVAL), ("often", DEFAULT_INTERVAL),
    ("nan", DEFAULT_INTERVAL), ("", DEFAULT_INTERVAL),
])
def test_progress_interval_from_the_environment(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv(INTERVAL_ENV, raising=False)
    else:
        monkeypatch.setenv(INTERVAL_ENV, env)
    assert progress_interval() == expected
    assert progress_interval(2) == 2.0  # an explicit value wins


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress("x", 3, stream=io.StringIO()), ProgressLines)
    bar = progress("x", 3, stream=Tty())
    assert not isinstance(bar, ProgressLines)
    bar.update(3)
    bar.close()


def test_training_lines_name_the_epoch_and_loss():
    from types import SimpleNamespace

    from vpintegrator.training.loop import progress_lines

    clock, out = Clock(), io.StringIO()
    with progress_lines(3, 600.0, interval=30, stream=out, clock=clock) as update:
        for epoch in (1, 2, 3):  # an EpochInfo's fields as the line reads them
            clock.now += 1
            update(SimpleNamespace(epoch=epoch, train_loss=0.5 / epoch, val_loss=float("nan"), lr=1e-3), float(epoch))
    got = _lines(out)
    assert len(got) == 2  # the first epoch and the last (all done)
    assert got[0].startswith("training: 1/3 (33%), 1 epochs/s") and "epoch 1 train_loss 5.000e-01 lr 1.0e-03" in got[0]
    assert got[1].startswith("training: 3/3 (100%)") and got[1].endswith("epoch 3 train_loss 1.667e-01 lr 1.0e-03, "
                                                                        "time limit 600 s")


def test_fit_with_progress_off_a_terminal_writes_lines(tiny_data, tmp_path, capsys, monkeypatch):
    from vpintegrator.training import fit

    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1}, epochs=3, batch_size=16,
             dtype="float64", device="cpu", out=str(tmp_path / "r")), progress=True)
    got = [line for line in capsys.readouterr().err.splitlines() if line.startswith("training: ")]
    assert len(got) >= 2 and got[0].startswith("training: 1/3 (33%)") and got[-1].startswith("training: 3/3 (100%)")
    assert all("loss" in line for line in got)


def test_vp_gen_progress_off_a_terminal(tmp_path, monkeypatch):
    from vpintegrator.cli.gen import main

    monkeypatch.setenv(INTERVAL_ENV, "0")
    res = CliRunner().invoke(main, ["rigid_body", "--n-traj", "3", "--t-end", "0.2", "--out", str(tmp_path / "d.h5")])
    assert res.exit_code == 0, res.output
    got = [line for line in res.stderr.splitlines() if line.startswith("rigid_body (dop853): ")]
    assert got[0].startswith("rigid_body (dop853): 0/3 (0%)") and got[-1].startswith("rigid_body (dop853): 3/3 (100%)")
    quiet = CliRunner().invoke(main, ["rigid_body", "--n-traj", "3", "--t-end", "0.2", "--out",
                                      str(tmp_path / "e.h5"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""


# -- logging ---------------------------------------------------------------------------------------------


def _command():
    from vpintegrator.cli._common import cli_errors, quiet_option

    @click.command()
    @quiet_option
    @cli_errors
    def cmd(quiet):
        log = logging.getLogger("vpintegrator.some.module")
        log.debug("details")
        log.info("doing it")
        log.warning("careful")
        click.echo("result")

    return cmd


@pytest.mark.parametrize(("flags", "expected"), [
    ([], ["doing it", "Warning: careful"]),
    (["--quiet"], ["Warning: careful"]),
    (["-v"], ["debug: vpintegrator.some.module: details", "doing it", "Warning: careful"]),
])
def test_cli_shows_library_messages_by_level(flags, expected):
    res = CliRunner().invoke(_command(), flags)
    assert res.exit_code == 0, res.output
    assert res.stdout == "result\n" and res.stderr.splitlines() == expected


def test_the_cli_handler_is_removed_after_the_command():
    logger = logging.getLogger("vpintegrator")
    before, level = list(logger.handlers), logger.level
    CliRunner().invoke(_command(), ["-v"])
    assert logger.handlers == before and logger.level == level


def test_every_cli_has_quiet_and_verbose():
    from vpintegrator.cli import gen, plot, rollout, train

    for cli in (gen.main, plot.main, rollout.main, train.main):
        res = CliRunner().invoke(cli, ["--help"])
        assert "--quiet" in res.output and "--verbose" in res.output, cli.name


def test_library_warnings_go_to_the_vpintegrator_logger(tmp_path, caplog):
    """The library writes nothing itself: a lock taken over is a logged warning (a handler prints it)."""
    import subprocess
    import sys

    import numpy as np

    from vpintegrator._outputs import lock_path
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.data.trajectories import Trajectories

    pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                             text=True, check=True).stdout)
    out = tmp_path / "x.h5"
    lock_path(out).write_text(f"{pid}\nvp-gen\n")
    with caplog.at_level(logging.WARNING, logger="vpintegrator"):
        write_trajectories(out, Trajectories(y=np.zeros((1, 2, 3)), t=np.array([0.0, 1.0]), meta={}))
    assert [r.name for r in caplog.records] == ["vpintegrator._outputs"]


def test_first_false_stays_silent_for_short_work_and_reports_long_work():
    clock, said = Clock(), []
    short = ProgressLines("rk4", 100, unit="steps", interval=30, write=said.append, first=False, clock=clock)
    for k in (50, 100):
        clock.now += 1
        short.update(k)
    short.close()
    assert said == []
    long = ProgressLines("vpt", 100, unit="steps", interval=30, write=said.append, first=False, clock=clock)
    for k in (20, 40, 60, 80, 100):
        clock.now += 10
        long.update(k)
    long.close()
    assert [s.split(",")[0] for s in said] == ["vpt: 60/100 (60%)", "vpt: 100/100 (100%)"]


def test_vp_rollout_reports_progress_within_a_method(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.cli.rollout import main

    monkeypatch.setenv(INTERVAL_ENV, "0")  # a line per block
    res = CliRunner().invoke(main, ["--data", tiny_data, "--integrators", "rk4", "--t-end", "2", "--n-traj", "2",
                                    "--chunk-steps", "4", "--out", str(tmp_path / "ro.h5")])
    assert res.exit_code == 0, res.output
    got = [line.split(",")[0] for line in res.stderr.splitlines() if line.startswith("rk4: ") and "/11 (" in line]
    assert got[0] == "rk4: 4/11 (36%)" and got[-1] == "rk4: 11/11 (100%)", res.stderr
    quiet = CliRunner().invoke(main, ["--data", tiny_data, "--integrators", "rk4", "--t-end", "2", "--n-traj", "2",
                                      "--chunk-steps", "4", "--out", str(tmp_path / "q.h5"), "--quiet"])
    assert quiet.exit_code == 0 and "rk4: " not in quiet.stderr


def test_library_use_shows_warnings_but_not_information_by_default():
    """No handler of our own on import: Python's default shows WARNING and above on stderr, nothing below."""
    import subprocess
    import sys

    code = ("import logging, vpintegrator, vpintegrator.cli._common; "
            "assert logging.getLogger('vpintegrator').handlers == []; "
            "log = logging.getLogger('vpintegrator.data.generation'); log.info('hidden'); log.debug('hidden'); "
            "log.warning('shown')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "shown\n" and res.stdout == ""
