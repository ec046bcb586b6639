"""The progress of [`fit`][vpintegrator.training.fit] (``progress=True``) on stderr: a click progress bar on
a terminal; elsewhere (a notebook, a batch-job log) a plain line at the first epoch, then at most one per
interval (``$VPINTEGRATOR_PROGRESS_INTERVAL`` seconds, default 15) and one at the end
(``vpintegrator._progress.ProgressLines``)::

    training: 40/200 (20%), 2.1 epochs/s, 1 min 16 s left, 19 s elapsed, epoch 40 train_loss 1.234e-05 val_loss 1.3e-05 lr 1.0e-03

The time left is the smaller of what the epochs left take at the current rate and what the time limit
leaves. Written in ``vpintegrator.training.loop`` (the loop draws it); importable here too.
"""

from __future__ import annotations

from .loop import describe, progress_bar, progress_fraction, progress_lines

__all__ = ["describe", "progress_bar", "progress_fraction", "progress_lines"]
