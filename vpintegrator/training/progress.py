"""The click progress bar of :func:`~vpintegrator.training.fit` (``progress=True``), on stderr."""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Iterator

__all__ = ["progress_bar", "progress_fraction"]

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


@contextlib.contextmanager
def progress_bar(show: bool, epochs_left: int | None, time_limit: float | None) -> Iterator[Any]:
    """Yield ``update(info, elapsed)`` (to call after each epoch) or None when ``show`` is false.

    With only epochs the bar counts them (``show_pos``); with a time limit it follows
    :func:`progress_fraction`, so its ETA honours the limit.
    """
    if not show:
        yield None
        return
    import click

    by_epochs = time_limit is None

    def describe(info) -> str | None:
        if info is None:
            return None
        val = "" if math.isnan(info.val_loss) else f" val {info.val_loss:.3e}"
        return f"epoch {info.epoch} loss {info.train_loss:.3e}{val} lr {info.lr:.1e}"

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
