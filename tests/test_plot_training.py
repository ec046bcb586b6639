"""Training curves: plot_training on hand-written logs, and vp-plot --kind training on a real tiny run."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.plot import main as plot_main
from vpintegrator.errors import VPIntegratorError
from vpintegrator.plotting import plot_training, training_figure
from vpintegrator.plotting.style import RUN_PALETTE

matplotlib.use("Agg")


def _run(path, n=6, rollout=False, best=None, optimizer="adam", torn=False):
    path.mkdir(parents=True)
    cols = "epoch,train_loss,val_loss,lr,seconds" + (",val_rollout" if rollout else "")
    lines = [cols]
    for e in range(1, n + 1):
        row = [str(e), repr(10.0 ** (-e / 2)), repr(2 * 10.0 ** (-e / 2)), repr(1e-2 * 0.5**e), repr(0.5 * e)]
        lines.append(",".join(row + ([repr(2.0 / e)] if rollout else [])))
    text = "\n".join(lines) + "\n" + ("7,0.1,0." if torn else "")
    (path / "log.csv").write_text(text)
    if best is not None:
        monitor = "val_rollout" if rollout else "val_loss"
        (path / "summary.json").write_text(json.dumps({"best_epoch": best, "monitor": monitor}))
    (path / "config.toml").write_text(f'optimizer = "{optimizer}"\n')
    return path


def _lines(ax):
    return [line for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]


def test_two_runs_by_epoch_and_seconds(tmp_path):
    a = _run(tmp_path / "adam_run", best=4)
    b = _run(tmp_path / "roll_run", rollout=True, best=3, torn=True)
    fig = training_figure([a, b])
    axes = np.array(fig.axes).reshape(2, 3)  # rows: epoch, seconds; columns: loss, val_rollout, lr
    assert [ax.get_xlabel() for ax in axes[:, 0]] == ["epoch", "wall time (s)"]
    assert "validation rollout" in axes[0, 1].get_title() and axes[0, 0].get_title() == "loss" and axes[0, 2].get_title() == "learning rate"
    # one colour per run, labelled by the directory name; the torn last line is dropped
    loss = {line.get_label(): line for line in _lines(axes[0, 0])}
    assert set(loss) == {"adam_run", "roll_run"}
    assert matplotlib.colors.to_hex(loss["adam_run"].get_color()) == RUN_PALETTE[0]
    assert matplotlib.colors.to_hex(loss["roll_run"].get_color()) == RUN_PALETTE[1]
    assert len(loss["roll_run"].get_xdata()) == 6
    # val_rollout only for the run that logged it; against seconds the x data are the seconds
    assert [line.get_label() for line in _lines(axes[1, 1])] == ["roll_run"]
    assert list(_lines(axes[1, 1])[0].get_xdata()) == [0.5 * e for e in range(1, 7)]
    # log axes where the curves span a decade or more (losses, learning rate), else linear
    assert [ax.get_yscale() for ax in axes[0]] == ["log", "linear", "log"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["adam_run", "roll_run", "training", "validation", "best epoch"]


def test_writes_pdf_and_png_without_rollout_column(tmp_path):
    run = _run(tmp_path / "lm", optimizer="lm")
    paths = plot_training(run, tmp_path / "figs", dpi=50)
    assert [p.name for p in paths] == ["training.pdf", "training.png"]
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in (tmp_path / "figs").iterdir() if p.name.startswith(".")]  # no temporary left
    fig = training_figure([run])
    assert len(fig.axes) == 4 and "damping" in fig.axes[1].get_title()


def test_same_names_are_told_apart(tmp_path):
    a = _run(tmp_path / "s0" / "run")
    b = _run(tmp_path / "s1" / "run")
    labels = {line.get_label() for line in _lines(training_figure([a, b]).axes[0])}
    assert labels == {"s0/run", "s1/run"}


def test_errors(tmp_path):
    with pytest.raises(VPIntegratorError, match="no such directory"):
        training_figure([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(VPIntegratorError, match="no log.csv"):
        training_figure([tmp_path / "empty"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "log.csv").write_text("epoch,loss\n1,0.5\n")
    with pytest.raises(VPIntegratorError, match="missing column 'train_loss'"):
        training_figure([tmp_path / "bad"])
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "log.csv").write_text("epoch,train_loss,val_loss,lr,seconds\n")
    with pytest.raises(VPIntegratorError, match="no epoch logged"):
        training_figure([tmp_path / "none"])
    with pytest.raises(VPIntegratorError, match="dpi must be"):
        plot_training(_run(tmp_path / "ok"), tmp_path / "f", dpi=0)


def test_cli_on_hand_written_runs(tmp_path):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", rollout=True)
    res = CliRunner().invoke(plot_main, ["--kind", "training", str(a), str(b), "--dpi", "40"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "training_figures" / "training.png").exists()
    # a run directory alone means training curves; written into RUN_DIR/figures
    res = CliRunner().invoke(plot_main, [str(a), "--dpi", "40", "--set", 'formats=["png"]'])
    assert res.exit_code == 0, res.output
    assert [p.name for p in (a / "figures").iterdir()] == ["training.png"]
    res = CliRunner().invoke(plot_main, ["--kind", "training", str(a), "--traj", "3"])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "--traj selects rollout trajectories" in res.output


@pytest.mark.usefixtures("one_thread")
def test_cli_on_a_real_tiny_run(tmp_path):
    """vp-train a tiny VPT (3 epochs, validation rollout monitored), then vp-plot --kind training."""
    from vpintegrator.cli.train import main as train_main
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.data import integrate
    from vpintegrator.systems import get_system

    rng = np.random.default_rng(1)
    y0 = rng.normal(size=(6, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    data = write_trajectories(tmp_path / "d.h5", integrate(get_system("rigid_body"), y0, 0.2, 15, method="rk4"))
    config = tmp_path / "tiny.toml"
    config.write_text(
        f'data = ["{data}"]\nepochs = 3\nbatch_size = 16\ndtype = "float64"\nval_fraction = 0.34\n'
        'monitor = "val_rollout"\nval_rollout_steps = 5\n\n[model]\nname = "vpt"\nseq_len = 2\nL = 1\n'
    )
    run = tmp_path / "tiny_run"
    res = CliRunner().invoke(train_main, [str(config), "--out", str(run), "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = tmp_path / "figs"
    res = CliRunner().invoke(plot_main, ["--kind", "training", str(run), "--out", str(out), "--dpi", "40"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["training.pdf", "training.png"]
    fig = training_figure([run])
    assert len(fig.axes) == 6  # loss, validation rollout, learning rate; by epoch and by seconds
    assert {line.get_label() for line in fig.axes[0].get_lines()} >= {"tiny_run"}


def test_axes_style_and_markers(tmp_path):
    from matplotlib.figure import Figure

    from vpintegrator.plotting.style import RUN_MARKERS

    a = _run(tmp_path / "adam_run", best=4)
    b = _run(tmp_path / "roll_run", rollout=True, best=3)
    fig = Figure(layout="constrained")
    grid = fig.subplots(2, 3)
    assert training_figure([a, b], axes=grid) is fig
    loss = {line.get_label(): line for line in _lines(grid[0, 0])}
    assert [loss["adam_run"].get_marker(), loss["roll_run"].get_marker()] == list(RUN_MARKERS[:2])  # not colour only
    assert grid[1, 2].get_lines() and not fig.legends and grid[0, 0].get_legend() is not None
    with pytest.raises(VPIntegratorError, match=r"axes: this figure draws 6 panels; give 6 matplotlib Axes \(one per panel\), got 4 Axes$"):
        training_figure([a, b], axes=Figure().subplots(2, 2))
    assert training_figure([a], x_axes=["epoch"], axes=Figure().subplots(1, 2)).axes[0].get_lines()
    assert training_figure([a, b], style="single").get_figwidth() == pytest.approx(3.5)
    written = plot_training([a], tmp_path / "figs", formats=["png"], dpi=100, style="double")
    from PIL import Image

    assert Image.open(written[0]).size[0] == 720


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, "epoch,train_loss,val_loss,lr,seconds\n1,1,2,3,4\n".encode("utf-16")])
def test_a_binary_log_is_one_line(tmp_path, content):
    """Issue 36: a binary log.csv raised UnicodeDecodeError (a traceback) in vp-plot and on resume."""
    from vpintegrator.rundir import read_log

    (tmp_path / "log.csv").write_bytes(content)
    with pytest.raises(VPIntegratorError, match=r"log.csv: not a vp-train log \(not CSV text: \w+\)"):
        read_log(tmp_path / "log.csv")
