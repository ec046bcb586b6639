"""Training curves of ``vp-train`` run directories: losses, validation-rollout score and learning rate,
against epoch and against wall time.

Reads each run directory's files directly (no torch, no training code): ``log.csv`` (columns ``epoch,
train_loss, val_loss, lr, seconds`` and ``val_rollout`` when the run monitored rollouts),
``summary.json`` (the best epoch and what it was chosen by) and ``config.toml`` (the optimiser: for
Levenberg–Marquardt the ``lr`` column is the damping λ).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from .._toml import tomllib
from ..errors import VPIntegratorError
from ..rundir import ROLLOUT_COLUMN, read_log, read_summary
from .display import FigureFiles
from .style import (
    call_tag,
    FORMATS,
    MARKS_PER_LINE,
    RUN_MARKERS,
    RUN_PALETTE,
    WIDTH,
    check_dpi,
    check_formats,
    legend,
    save_figure,
    set_title,
    styled,
    target_axes,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: one run directory or several (``vp-train --out`` directories)
RunDirs = Union[str, Path, Sequence[Union[str, Path]]]


@dataclass(eq=False)
class RunLog:
    """One run directory's training log.

    ``columns``: column name -> ndarray (one value per epoch; NaN where not computed); ``best_epoch`` and
    ``monitor`` from ``summary.json`` (None when it is missing); ``optimizer`` from ``config.toml``.
    """

    path: Path
    label: str
    columns: dict[str, Any] = field(default_factory=dict)
    best_epoch: int | None = None
    monitor: str | None = None
    optimizer: str | None = None

    def has(self, column: str) -> bool:
        values = self.columns.get(column)
        return values is not None and bool(np.isfinite(values).any())

    def __repr__(self) -> str:  # one line, not the columns
        n = len(next(iter(self.columns.values()))) if self.columns else 0
        return (f"RunLog(path={str(self.path)!r}, label={self.label!r}, epochs={n}, columns={list(self.columns)}, "
                f"best_epoch={self.best_epoch})")


def read_run_log(run_dir: str | Path, label: str | None = None) -> RunLog:
    """Read ``log.csv`` (and ``summary.json`` / ``config.toml`` when present) of a ``vp-train`` run directory.

    A torn last line (a run killed while writing) is dropped; a missing directory, a directory without
    ``log.csv``, a log without the standard columns or without a single epoch is a one-line error.
    """
    run = Path(run_dir)
    if not run.exists():
        raise VPIntegratorError(f"run directory {run}: no such directory; give a run directory written by vp-train")
    if not run.is_dir():
        raise VPIntegratorError(f"{run}: not a directory; give a vp-train run directory (it holds log.csv)")
    log = run / "log.csv"
    if not log.is_file():
        raise VPIntegratorError(f"run directory {run}: no log.csv; give a vp-train run directory")
    records = read_log(log)
    if not records:
        raise VPIntegratorError(f"{log}: no epoch logged yet; nothing to plot")
    names = list(records[0])
    rows = [[float(r[c]) for c in names] for r in records]
    table = np.asarray(rows, dtype=np.float64)
    out = RunLog(path=run, label=label or run.resolve().name, columns={c: table[:, i] for i, c in enumerate(names)})
    summary = read_summary(run) or {}
    best = summary.get("best_epoch")
    out.best_epoch = int(best) if isinstance(best, (int, float)) and best > 0 else None
    out.monitor = summary.get("monitor")
    try:
        config = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
        out.optimizer = config.get("optimizer")
    except (OSError, ValueError):
        pass
    return out


def _labels(run_dirs: Sequence[Path]) -> list[str]:
    """Run directory names; where two runs share a name, the parent directory is added."""
    names = [p.resolve().name for p in run_dirs]
    out = []
    for p, name in zip(run_dirs, names):
        out.append(f"{p.resolve().parent.name}/{name}" if names.count(name) > 1 else name)
    if len(set(out)) < len(out):  # still ambiguous: number them
        out = [f"{lab} ({i + 1})" for i, lab in enumerate(out)]
    return out


def _runs(run_dirs) -> list[RunLog]:
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise VPIntegratorError("no run directory given; give at least one vp-train run directory")
    return [read_run_log(p, label) for p, label in zip(paths, _labels(paths))]


def _scale(ax) -> None:
    """Log y axis where the curves span a decade or more, else linear (a log axis over a narrow range
    labels only minor ticks)."""
    values = [np.asarray(line.get_ydata(), dtype=np.float64) for line in ax.get_lines()]
    values = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.empty(0)
    if values.size and values.min() > 0 and values.max() / values.min() >= 10:
        ax.set_yscale("log")


def _positive(values: np.ndarray) -> np.ndarray:
    return np.where(values > 0, values, np.nan)


@styled
def training_figure(run_dirs: RunDirs, x_axes: Sequence[str] = ("epoch", "seconds"), axes: Any = None,
                    style: Any = None, title: bool | str = True) -> Figure:
    """The training-curve figure of one or more run directories (one colour and marker per run, named by
    directory).

    Rows: one per x axis (epoch, seconds); columns: loss (train solid, validation dashed), validation
    rollout score (only when some run logged ``val_rollout``), learning rate (LM: damping λ). The
    epoch ``summary.json`` chose as best is ringed on the monitored curve. ``axes``: the
    Axes to draw into, rows × columns of them (a 2-D array or a flat list in row order); ``style``: a
    journal preset or a ``.mplstyle`` file ([`figure_style`][vpintegrator.plotting.figure_style]); ``title``:
    False for no figure title, or a text of your own.
    """
    runs = _runs(run_dirs)
    for x in x_axes:
        if x not in ("epoch", "seconds"):
            raise VPIntegratorError(f"x_axes: unknown axis {x!r}; valid: epoch, seconds", key="x_axes")
    panels = ["loss"] + ([ROLLOUT_COLUMN] if any(r.has(ROLLOUT_COLUMN) for r in runs) else []) + ["lr"]
    n_rows, n_cols = len(x_axes), len(panels)
    if axes is None:
        from .style import figure

        fig, own = figure(WIDTH, 1.9 * n_rows + 0.6), True
        axes = fig.subplots(n_rows, n_cols, squeeze=False)
    else:
        fig, flat, own = target_axes(axes, n_rows * n_cols, WIDTH, 1.9 * n_rows + 0.6, name="axes")
        axes = np.asarray(flat, dtype=object).reshape(n_rows, n_cols)
    colors = {r.label: RUN_PALETTE[i % len(RUN_PALETTE)] for i, r in enumerate(runs)}
    markers = {r.label: RUN_MARKERS[i % len(RUN_MARKERS)] for i, r in enumerate(runs)}

    def run_kw(r, n):  # colour and sparse markers per run, staggered between runs
        step = max(1, n // MARKS_PER_LINE)
        k = [x.label for x in runs].index(r.label)
        return {"color": colors[r.label], "marker": markers[r.label], "markevery": ((k * step) // len(runs), step)}

    any_val = any(r.has("val_loss") for r in runs)
    lm = [r.optimizer == "lm" for r in runs]
    for row, xname in zip(axes, x_axes):
        for ax, panel in zip(row, panels):
            for r in runs:
                x = r.columns[xname]
                c = colors[r.label]
                kw = run_kw(r, len(x))
                if panel == "loss":
                    ax.plot(x, _positive(r.columns["train_loss"]), label=r.label, **kw)
                    if r.has("val_loss"):
                        ax.plot(x, _positive(r.columns["val_loss"]), linestyle="--", **kw)
                elif r.has(panel):
                    ax.plot(x, _positive(r.columns[panel]), label=r.label, **kw)
                if r.best_epoch is not None and panel in ("loss", ROLLOUT_COLUMN):
                    monitored = {"val_rollout": ROLLOUT_COLUMN, "val_loss": "val_loss"}.get(r.monitor or "", "train_loss")
                    if (panel == ROLLOUT_COLUMN) == (monitored == ROLLOUT_COLUMN) and r.has(monitored):
                        k = np.flatnonzero(r.columns["epoch"] == r.best_epoch)
                        if k.size:
                            ax.plot(x[k[0]], r.columns[monitored][k[0]], "o", color=c, markersize=7, markerfacecolor="none",
                                    markeredgewidth=1.0, gid="best-epoch")
            _scale(ax)
            ax.set_xlabel("epoch" if xname == "epoch" else "wall time (s)")
        row[0].set_ylabel("loss")
        if ROLLOUT_COLUMN in panels:
            row[panels.index(ROLLOUT_COLUMN)].set_ylabel("validation rollout error")
        row[-1].set_ylabel("damping λ" if all(lm) else ("learning rate / LM damping λ" if any(lm) else "learning rate"))
    titles = {"loss": "loss" if any_val else "training loss",
              ROLLOUT_COLUMN: "validation rollout score",
              "lr": "damping λ (Levenberg–Marquardt)" if all(lm) else "learning rate"}
    for ax, panel in zip(axes[0], panels):
        ax.set_title(titles[panel])
    from matplotlib.lines import Line2D

    extra = []
    if any_val:
        extra.append((Line2D([], [], color="0.3"), "training"))
        extra.append((Line2D([], [], color="0.3", linestyle="--"), "validation"))
    if any(r.best_epoch is not None for r in runs):
        extra.append((Line2D([], [], marker="o", color="0.3", linestyle="none", markersize=7, markerfacecolor="none"),
                      "best epoch"))
    legend(fig, axes.ravel(), ncols=5, extra=extra, own=own)
    n = len(runs)
    if own:
        set_title(fig, f"training curves of {n} runs" if n > 1 else f"training curves: {runs[0].label}")
    return fig


def plot_training(run_dirs: RunDirs, out: str | Path, dpi: int = 200, formats: Sequence[str] = FORMATS,
                  name: str = "training", style: Any = None, overwrite: bool | None = None,
                  title: bool | str = True) -> FigureFiles:
    """Write the training curves of ``run_dirs`` (one or more ``vp-train`` run directories) into the
    directory ``out`` as ``<name>.pdf`` and ``<name>.png`` (atomically); return the paths as
    [`FigureFiles`][vpintegrator.plotting.FigureFiles] (a notebook shows the figure). ``overwrite=None``
    (the default) replaces the files an earlier call with the same run directories wrote (re-running a
    notebook cell works) and refuses any other existing file; ``True`` replaces any figure drawn by
    matplotlib, ``False`` refuses every existing file. ``out`` is locked against other writers meanwhile.

    See [`training_figure`][vpintegrator.plotting.training_figure] for what is drawn and ``style``.
    """
    from .style import check_out_dir

    dpi = check_dpi(dpi)
    formats = check_formats(formats)
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    run_dirs = list(run_dirs)
    inputs = [p for r in run_dirs for p in (Path(r), Path(r) / "log.csv", Path(r) / "summary.json",
                                            Path(r) / "config.toml")]
    from .._outputs import output_lock
    from .style import figure_style

    tag = call_tag("plot_training", run_dirs)
    check_out_dir(out, [name], formats, inputs, overwrite, tag)
    figure_style(style)  # a bad style is an error before any log is read
    with output_lock(out):
        check_out_dir(out, [name], formats, inputs, overwrite, tag)  # again under the lock
        fig = training_figure(run_dirs, style=style, title=title)
        return FigureFiles(save_figure(fig, Path(out) / name, formats=formats, dpi=dpi, overwrite=overwrite,
                                       tag=tag))


def default_out(run_dirs: Sequence[Path]) -> Path:
    """Where ``vp-plot --kind training`` writes without ``--out``: ``RUN_DIR/figures`` for one run,
    ``training_figures`` beside the first run for several."""
    first = Path(run_dirs[0])
    return first / "figures" if len(run_dirs) == 1 else first.resolve().parent / "training_figures"


