"""What the one training loop (``vpintegrator.training.loop.Trainer``) asks of a step strategy: a typed plug-in.

The loop owns the iteration: epochs and the batches of each, step counting, per-step divergence checks,
mid-epoch checkpoints and stop requests. A strategy answers narrow questions about its model(s) and
never calls the loop: ``vpintegrator.training.single.SingleSteps`` (one model: eager, LBFGS, the graph
step, DDP, Levenberg–Marquardt) and ``vpintegrator.training.ensemble.EnsembleSteps`` (N members stepped
together by ``vmap``; its LM in ``vpintegrator.training.ensemble_lm``). mypy checks both against
``vpintegrator.training.strategy.StepStrategy``.

One epoch, as the loop runs it (``n`` members, ``S = steps_per_epoch``)::

    acc, losses = s.begin_epoch()               # (n,) float64 loss sums, (S, n) per-step losses
    for b in range(s.batch_in_epoch, S):
        reported, agreed = s.step(b, stop, save)  # (n,) or () losses; DDP: the ranks' agreed flags
        ...                                       # the loop counts, checks, checkpoints (s.pause), stops
    train = s.end_epoch(acc, losses)            # per member: the epoch's training loss
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from .fast_step import FastStep
    from .record import Member

__all__ = ["Clock", "StepStrategy"]


@dataclass(frozen=True)
class Clock:
    """Where a run (or one member of it) stands: epochs and optimiser steps done, wall and CPU seconds of
    every invocation. The loop hands it to a strategy's checkpoint questions; a resume's ``load`` answers one."""

    epoch: int
    step: int
    wall: float
    cpu: float


class StepStrategy(Protocol):
    """How the optimiser steps of one run are taken (a single model, or an ensemble's stacked members)."""

    #: optimiser steps per epoch (LM: iterations)
    steps_per_epoch: int
    #: steps of the current epoch already taken (set by the loop; a resume loads it)
    batch_in_epoch: int
    #: one model's loss decides for the whole run: a non-finite one stops it at once (a single model);
    #: False: each member diverges alone, judged by the loop after the epoch
    together: bool
    #: the loss of every step is read on the host (LM): the loop checks it after each step
    host_losses: bool
    #: the file in the run directory a resume continues from (``last.pt``; an ensemble's ``ensemble_last.pt``)
    resume_file: str
    fast_mode: str
    fast: FastStep | None
    models: list[torch.nn.Module]

    def start(self) -> None:
        """After a resume's state is loaded: build the fast step where it runs."""

    def begin_epoch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw the epoch's data order (again, from its saved start, when resumed mid-epoch): the members'
        running loss sums (n,) and per-step losses (steps_per_epoch, n), float64, with the rows already taken."""

    def step(self, b: int, stop: bool, save: bool) -> tuple[torch.Tensor, tuple[bool, bool] | None]:
        """Batch ``b``'s optimiser step: the members' losses (n,) (or one, 0-d) and, under DDP, the stop and
        save requests agreed by every rank (None: one process; the loop's own requests stand)."""

    def pause(self, acc: torch.Tensor, losses: torch.Tensor) -> None:
        """A checkpoint mid-epoch follows: keep the running sums and the steps' losses so far for it."""

    def end_epoch(self, acc: torch.Tensor, losses: torch.Tensor) -> list[float]:
        """The epoch's steps are done: per member its training loss (the mean batch loss; LM: the full one).
        ``losses`` holds a row per step the epoch took: all ``steps_per_epoch`` of them, or fewer when the
        budget ran out mid-epoch (the loop's ``_train_epoch``)."""

    def val_losses(self, dataset=None) -> list[float]: ...

    def val_rollouts(self) -> list[float]: ...

    def finite_weights(self) -> list[bool]: ...

    def lrs(self) -> list[float]: ...

    def train_mode(self) -> None: ...

    def member_state(self, k: int) -> dict[str, torch.Tensor]: ...

    def member_model(self, k: int) -> torch.nn.Module: ...

    def member_record(self, m: Member) -> dict[str, Any]: ...

    def last_extra(self, m: Member, at: Clock) -> dict[str, Any]:
        """What member ``m``'s ``last.pt`` holds beside its weights, at ``at`` (the member's epoch and step)."""

    def summary_extra(self, m: Member) -> dict[str, Any]: ...

    def stuck(self) -> list[bool]:
        """Per member: whether its Levenberg–Marquardt is stuck (it then stops: ``lm_stuck``)."""

    def freeze(self, k: int, state: dict[str, torch.Tensor] | None) -> None:
        """Member ``k`` stopped: its weights from now on are ``state`` (its current ones for None)."""

    def save_state(self, out: Path, members: list[Member], at: Clock) -> None:
        """After every save of the members' files: the run's own training state in ``out``, where it has one
        beside the members' ``last.pt`` (an ensemble's ``ensemble_last.pt``)."""

    def load(self, path: Path, members: list[Member]) -> Clock:
        """Continue from the training state at ``path`` (weights, optimiser, RNGs, position, the members'
        bookkeeping): where the run stood then (``wall``, ``cpu``: the seconds of the earlier invocations)."""
