"""The progress of [`fit`][vpintegrator.training.fit] (``progress=True``) on stderr: a click progress bar on
a terminal; elsewhere (a notebook, a batch-job log) a plain line at the first epoch, then at most one per
interval (``$VPINTEGRATOR_PROGRESS_INTERVAL`` seconds, default 15) and one at the end
(``vpintegrator._progress.ProgressLines``)::

    training: 40/200 (20%), 2.1 epochs/s, 1 min 16 s left, 19 s elapsed, epoch 40 train_loss 1.234e-05 val_loss 1.3e-05 lr 1.0e-03

The time left is the smaller of what the epochs left take at the current rate and what the time limit
leaves.
"""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Iterator

__all__ = ["describe", "progress_bar", "progress_fraction", "progress_lines"]

_UNITS = 1000  # bar length when it follows a fraction of the run


def progress_fraction(epochs_done: int, epochs_total: int | None, elapsed: float, time_limit: float | None) -> float:
    """How far the run is, in [0, 1]: the larger of the epochs done and the time budget spent.

    Whichever ends the run first decides, so the bar's ETA never exceeds the time limit and is not
    stretched to it when the epochs end first.
    """
    parts = []
    if epochs_total:
        parts.append(epochs_done / epochs_total)
    if time_limit:
        parts.append(elapsed / time_limit)
    return min(max(parts, default=0.0), 1.0)


def describe(info) -> str | None:
    """One epoch's [`EpochInfo`][vpintegrator.training.EpochInfo] in a few words."""
    if info is None:
        return None
    val = "" if math.isnan(info.val_loss) else f" val_loss {info.val_loss:.3e}"
    rollout = "" if math.isnan(getattr(info, "val_rollout", math.nan)) else f" val_rollout {info.val_rollout:.3e}"
    return f"epoch {info.epoch} train_loss {info.train_loss:.3e}{val}{rollout} lr {info.lr:.1e}"


@contextlib.contextmanager
def progress_lines(epochs_left: int | None, time_limit: float | None, **kwargs: Any) -> Iterator[Any]:
    """``progress_bar`` off a terminal: throttled plain lines (``kwargs`` go to
    ``vpintegrator._progress.ProgressLines``: ``interval``, ``stream``, ``clock``)."""
    from .._progress import ProgressLines

    limit = f", time limit {time_limit:g} s" if time_limit else ""
    with ProgressLines("training", epochs_left or None, unit="epochs", time_limit=time_limit, **kwargs) as lines:

        def update(info, elapsed: float) -> None:
            lines.update(lines.done + 1, (describe(info) or "") + limit)

        yield update


@contextlib.contextmanager
def progress_bar(show: bool, epochs_left: int | None, time_limit: float | None) -> Iterator[Any]:
    """Yield ``update(info, elapsed)`` (to call after each epoch) or None when ``show`` is false.

    On a terminal a click bar: with only epochs it counts them (``show_pos``); with a time limit it
    follows ``progress_fraction``, so its ETA honours the limit. Elsewhere ``progress_lines``.
    """
    if not show:
        yield None
        return
    from .._progress import on_terminal

    if not on_terminal():
        with progress_lines(epochs_left, time_limit) as update:
            yield update
        return
    import click

    by_epochs = time_limit is None

    length = max(epochs_left or 0, 1) if by_epochs else _UNITS
    with click.progressbar(length=length, label="training", item_show_func=describe, file=sys.stderr,
                           show_pos=by_epochs) as bar:
        done = {"epochs": 0}

        def update(info, elapsed: float) -> None:
            done["epochs"] += 1
            if by_epochs:
                bar.update(1, info)
                return
            target = int(_UNITS * progress_fraction(done["epochs"], epochs_left, elapsed, time_limit))
            bar.update(max(min(target, bar.length) - bar.pos, 0), info)

        yield update
