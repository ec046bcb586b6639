"""What [`fit`][vpintegrator.training.fit] returns and reports: [`FitResult`][vpintegrator.training.FitResult], [`EpochInfo`][vpintegrator.training.EpochInfo]
(what a callback sees) and [`TrainingInterrupted`][vpintegrator.training.TrainingInterrupted]."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["EpochInfo", "FitResult", "TrainingInterrupted"]


@dataclass(frozen=True)
class EpochInfo:
    """What a ``callback`` sees after each epoch (of one member; an ensemble's callback gets a list).

    ``val_rollout`` is the validation-rollout score (``monitor = "val_rollout"``; NaN otherwise), ``model``
    the trained module with this epoch's weights (read it, do not keep training it), ``member`` the
    member's index in an ensemble (0 for a single run).
    """

    epoch: int
    step: int
    train_loss: float
    val_loss: float
    lr: float
    seconds: float
    val_rollout: float = math.nan
    model: Any = field(default=None, repr=False, compare=False)
    member: int = 0


@dataclass
class FitResult:
    """The outcome of [`fit`][vpintegrator.training.fit].

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
    #: what ``best_loss`` measures: the config's ``monitor`` (``val_loss``, ``val_rollout``), or
    #: ``train_loss`` without validation data
    monitor: str = "val_loss"

    @property
    def best_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "best.pt"

    @property
    def last_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "last.pt"

    def __repr__(self) -> str:  # one line: the model's name and size, not its module tree or the history
        name = getattr(self.model, "config", {}).get("name", type(self.model).__name__)
        return (f"FitResult(run_dir={str(self.run_dir) if self.run_dir is not None else None!r}, model={name!r}, "
                f"n_params={self.n_params}, epochs={self.epochs}, best_epoch={self.best_epoch}, "
                f"best_loss={self.best_loss:.4g}, stopped={self.stopped!r})")


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C / SIGTERM during [`fit`][vpintegrator.training.fit]: ``last.pt`` was saved; ``.result`` holds the state so far."""

    def __init__(self, message: str, result: FitResult) -> None:
        super().__init__(message)
        self.result = result


TABLE_COLUMNS = ("member", "seed", "best_epoch", "best_score", "train_loss", "val_loss", "stopped", "selected")


def member_dir_name(k: int, seed: int) -> str:
    """``member_<k>_seed_<s>``."""
    return f"member_{k}_seed_{seed}"


def is_ensemble_dir(path: Path) -> bool:
    """Whether ``path`` is an ensemble's output directory or one of its member directories."""
    path = Path(path)
    if (path / "ensemble.csv").exists() or (path / "selected.json").exists():
        return True
    if (path / "config.toml").is_file() and any(p.name.startswith("member_") and "_seed_" in p.name and p.is_dir()
                                                for p in path.iterdir()):
        return True  # killed before its table: the members' directories are there
    return path.name.startswith("member_") and (path.parent / "ensemble.csv").exists() or (
        path.name.startswith("member_") and "_seed_" in path.name and (path / "summary.json").exists()
        and '"ensemble"' in (path / "summary.json").read_text(encoding="utf-8", errors="replace")
    )


def is_ensemble_member(path: Path) -> bool:
    """Whether ``path`` is one of an ensemble's member directories (its own ``summary.json`` says so, or it
    is a ``member_<k>_seed_<s>`` folder of a directory holding an ensemble)."""
    path = Path(path)
    if not (path.name.startswith("member_") and "_seed_" in path.name):
        return False
    parent = path.parent
    if (parent / "ensemble.csv").exists() or (parent / "ensemble_last.pt").exists():
        return True
    summary = path / "summary.json"
    return summary.is_file() and '"ensemble"' in summary.read_text(encoding="utf-8", errors="replace")


@dataclass
class EnsembleResult:
    """The outcome of an ensemble [`fit`][vpintegrator.training.fit].

    ``members[k]`` is member ``k``'s [`FitResult`][vpintegrator.training.FitResult] (its ``run_dir`` the member directory, ``model``
    its last weights); ``selected`` the index of the member with the best validation score (None without
    validation data or when every member diverged).
    """

    run_dir: Path | None
    seeds: list[int]
    members: list[FitResult]
    selected: int | None
    monitor: str
    stopped: str
    wall_time: float
    device: str
    dtype: str
    table: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> FitResult | None:
        return None if self.selected is None else self.members[self.selected]

    # FitResult-like conveniences (the selected member's, else the first's)
    def _ref(self) -> FitResult:
        return self.best or self.members[0]

    @property
    def epochs(self) -> int:
        return self._ref().epochs

    @property
    def steps(self) -> int:
        return self._ref().steps
