"""What :func:`~vpintegrator.training.fit` returns and reports: :class:`FitResult`, :class:`EpochInfo`
(what a callback sees) and :class:`TrainingInterrupted`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["EpochInfo", "FitResult", "TrainingInterrupted"]


@dataclass(frozen=True)
class EpochInfo:
    """What a ``callback`` sees after each epoch."""

    epoch: int
    step: int
    train_loss: float
    val_loss: float
    lr: float
    seconds: float


@dataclass
class FitResult:
    """The outcome of :func:`fit`.

    ``model`` holds the last weights (``best.pt`` in ``run_dir`` the best); ``stopped`` is one of
    ``epochs``, ``time_limit``, ``early_stopping``, ``callback``, ``interrupted``.
    """

    run_dir: Path | None
    model: torch.nn.Module
    epochs: int
    steps: int
    train_loss: float
    val_loss: float
    best_loss: float
    best_epoch: int
    wall_time: float
    n_params: int
    device: str
    dtype: str
    stopped: str
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def best_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "best.pt"

    @property
    def last_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "last.pt"


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C / SIGTERM during :func:`fit`: ``last.pt`` was saved; ``.result`` holds the state so far."""

    def __init__(self, message: str, result: FitResult) -> None:
        super().__init__(message)
        self.result = result
