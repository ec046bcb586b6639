"""One run's record: the best epoch, patience, the history, ``log.csv`` (the one log writer) and ``best.pt``
(``RunRecord``), and ``Member``, one model of the epoch loop's member axis.

One run's per-epoch bookkeeping is the same for a single run and for each member of a seed ensemble: the
one epoch loop (``vpintegrator.training.loop.Trainer``) keeps one ``Member`` per model on its member axis
(one for a single run, N for a seed ensemble), so the rule that picks the best epoch, the log's format and
the best checkpoint are written once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch

from ..clock import process_cpu
from ..protocols import SinkProtocol
from ..rundir import format_row
from .checkpoint import run_provenance, write_text

__all__ = ["RunRecord", "Member", "plateau_trend"]

#: how many standard errors below zero the fitted slope must lie for a trend to fall "clearly" (plateau_trend)
TREND_SE = 2.0


def plateau_trend(scores: list[float], min_rel_delta: float = 0.0, min_delta: float = 0.0
                  ) -> tuple[float | None, bool | None]:
    """The trend of a run's monitored score where the plateau rule stopped it: ``(slope, still_improving)``.

    ``scores`` are the scores of the last ``patience`` epochs, the ones the rule found no progress in (each
    above its reference ``ref · (1 − min_rel_delta) − min_delta``, ``ref`` the score of the epoch before
    them). ``slope`` is the least-squares slope of log(score) per epoch over them; the run was
    ``still_improving`` when that trend still falls clearly: the slope lies more than ``TREND_SE`` (2)
    standard errors below zero, and the fitted line falls over the window by what the rule counts as
    progress (its end below its start ``· (1 − min_rel_delta) − min_delta``). The rule stops such a run all
    the same -- a noisy score can miss a lucky reference for ``patience`` epochs while its trend falls -- and
    the flag says its plateau was not one. (None, None) for fewer than 3 finite positive scores (patience
    below 3: no trend to judge).
    """
    y = [math.log(v) for v in scores if math.isfinite(v) and v > 0]
    n = len(y)
    if n < 3 or n != len(scores):
        return None, None
    t_mean, y_mean = (n - 1) / 2.0, sum(y) / n
    sxx = sum((t - t_mean) ** 2 for t in range(n))
    slope = sum((t - t_mean) * (v - y_mean) for t, v in enumerate(y)) / sxx
    residual = sum((v - y_mean - slope * (t - t_mean)) ** 2 for t, v in enumerate(y))
    stderr = math.sqrt(residual / (n - 2) / sxx)
    start, end = math.exp(y_mean - slope * t_mean), math.exp(y_mean + slope * t_mean)  # the fitted line's ends
    falls = slope + TREND_SE * stderr < 0 and end < start * (1.0 - min_rel_delta) - min_delta
    return slope, bool(falls)


class RunRecord:
    """The bookkeeping of one run.

    Parameters
    ----------
    run_dir : Path or None
        Where ``log.csv`` and ``best.pt`` go (None: nothing is written, e.g. a DDP rank other than 0).
    log_columns : tuple of str
        The columns of ``log.csv`` (``vpintegrator.training.checkpoint.log_columns``).
    min_delta : float
        An epoch improves on the best one when its score is lower by more than this.
    min_rel_delta : float
        The plateau rule's relative improvement: patience (``bad_epochs``) starts again only at an epoch whose
        score is below ``ref · (1 − min_rel_delta) − min_delta``, ``ref`` the score of the last epoch that
        started it again (the best epoch, ``best.pt``, is still any epoch better by ``min_delta``).
    """

    #: set by __init__ (declared for type checkers)
    run_dir: Path | None
    log_columns: tuple[str, ...]
    min_delta: float
    best_loss: float
    best_epoch: int
    bad_epochs: int
    best_dirty: bool
    last_train: float
    last_val: float

    def __init__(self, run_dir: Path | None, log_columns: tuple[str, ...], min_delta: float,
                 min_rel_delta: float = 0.0) -> None:
        self.run_dir, self.log_columns, self.min_delta = run_dir, tuple(log_columns), float(min_delta)
        self.min_rel_delta = float(min_rel_delta)
        self.best_loss, self.best_epoch, self.bad_epochs = math.inf, 0, 0
        self.plateau_ref = math.inf  # the score the plateau rule measures improvement from
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_dirty = False  # best_state not yet written to best.pt
        self.last_train = self.last_val = math.nan
        self.history: list[dict[str, float]] = []
        self.finite_summary: dict[str, Any] | None = None  # summary.json as of the last finite epoch
        self.sinks: list[SinkProtocol] = []  # more writers of each logged row (logger = "tensorboard" | "mlflow")
        self.sink_cpu = 0.0  # process CPU seconds spent in the sinks' calls: not the training's cost
        self.checkpoint_extra: dict[str, Any] = {}  # more keys of best.pt (the run's split)

    def judge(self, epoch: int, score: float, state: Callable[[], dict[str, torch.Tensor]]) -> bool:
        """Record epoch ``epoch``'s monitored ``score``: the best so far (the first epoch always counts)
        keeps ``state()`` (a copy of the weights) and resets patience; otherwise one more bad epoch.
        Returns whether it became the best."""
        improved = math.isfinite(score) and (not math.isfinite(self.best_loss) or score < self.best_loss - self.min_delta)
        ref = getattr(self, "plateau_ref", self.best_loss)  # a record resumed from before the key existed
        progressed = math.isfinite(score) and (
            not math.isfinite(ref) or score < ref * (1.0 - getattr(self, "min_rel_delta", 0.0)) - self.min_delta)
        first = self.best_epoch == 0 and not math.isfinite(ref)  # nothing judged yet (judge_start: epoch 0 was)
        self.bad_epochs = 0 if progressed or first else self.bad_epochs + 1
        if progressed or first:
            self.plateau_ref = score
        if improved or first:
            self.best_loss, self.best_epoch = score, epoch
            self.best_state = state()
            self.best_dirty = True
            return True
        return False

    def start_log(self) -> None:
        """(Re)write ``log.csv``: the header and the rows of ``history`` (on resume the rows up to the
        checkpoint: a crash may have left later ones), atomically."""
        if self.run_dir is not None:
            rows = "".join(format_row(r, self.log_columns) + "\n" for r in self.history)
            write_text(self.run_dir / "log.csv", ",".join(self.log_columns) + "\n" + rows)

    def log(self, row: dict[str, float]) -> None:
        """Append one epoch's ``row`` to the history and to ``log.csv``."""
        self.history.append(row)
        if self.run_dir is not None:
            with open(self.run_dir / "log.csv", "a", encoding="utf-8") as f:
                f.write(format_row(row, self.log_columns) + "\n")
        if self.sinks:
            tic = process_cpu()
            for sink in self.sinks:
                sink.log(row)
            self.sink_cpu += process_cpu() - tic

    def close(self) -> None:
        """Close the sinks (flush their files, end their tracking runs)."""
        for sink in self.sinks:
            sink.close()
        self.sinks = []

    def save_best(self, model: torch.nn.Module, provenance: dict[str, Any] | None = None) -> None:
        """Write ``best.pt`` (``model``'s architecture with the best weights) if the best changed since;
        ``provenance``: its record when the caller made it for the save (else ``run_provenance``)."""
        if self.run_dir is None or not self.best_dirty or self.best_state is None:
            return
        from ..models import save_model

        # the best epoch's weights (best_state, a copy taken when it was judged) with the live model's
        # architecture, no copy of the module (the deep copy per save was 37 % of a 2-epoch run's profile)
        save_model(model, self.run_dir / "best.pt", overwrite=True, any_module=True, state_dict=self.best_state,
                   extra={"epoch": self.best_epoch, "best_loss": float(self.best_loss), "kind": "best",
                          **self.checkpoint_extra,
                          "provenance": run_provenance(self.run_dir) if provenance is None else provenance})
        self.best_dirty = False


class Member(RunRecord):
    """One model of the loop's member axis: a run's bookkeeping plus the member's index ``k``, ``seed``,
    reported directory ``path`` (``run_dir`` is where files go: None on a DDP rank other than 0 or without
    an output directory), and whether it still trains (``active``; ``stopped`` says why not, ``epoch`` and
    ``step`` then where it stopped, ``diverged`` the divergence record; at the plateau rule's stop
    ``still_improving`` and ``plateau_slope``, ``plateau_trend``'s verdict, else None)."""

    #: set by __init__ (declared for type checkers)
    k: int
    seed: int
    path: Path | None

    def __init__(self, k: int, seed: int, path: Path | None, write: bool, log_columns: tuple[str, ...],
                 min_delta: float, min_rel_delta: float = 0.0) -> None:
        super().__init__(path if write else None, log_columns, min_delta, min_rel_delta)
        self.k, self.seed, self.path = k, seed, path
        self.active = True
        self.stopped = "running"
        self.epoch = self.step = 0
        self.diverged: dict[str, Any] | None = None
        self.still_improving: bool | None = None
        self.plateau_slope: float | None = None
