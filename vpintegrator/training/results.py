"""What [`fit`][vpintegrator.training.fit] returns and reports: [`FitResult`][vpintegrator.training.FitResult], [`EpochInfo`][vpintegrator.training.EpochInfo]
(what a callback sees) and [`TrainingInterrupted`][vpintegrator.training.TrainingInterrupted]."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import VPIntegratorError

__all__ = ["EpochInfo", "FitResult", "TrainingInterrupted", "identity_record"]


def identity_record(best: float, identity: float) -> dict[str, Any]:
    """``summary.json``'s identity baseline: ``identity_loss`` (the do-nothing map's score, as ``best_loss``
    measures it), ``vs_identity`` (best over it) and ``worse_than_identity`` (``vs_identity >= 1``; None where
    either is not finite or the identity map is exact, e.g. targets equal to inputs: no baseline)."""
    usable = math.isfinite(identity) and identity > 0
    ratio = best / identity if usable and math.isfinite(best) else math.nan
    return {"identity_loss": identity if math.isfinite(identity) else None,
            "vs_identity": ratio if math.isfinite(ratio) else None,
            "worse_than_identity": bool(ratio >= 1.0) if math.isfinite(ratio) else None}


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
    """The outcome of [`fit`][vpintegrator.training.fit]: one run's, or an ensemble's with its ``members``.

    ``model`` holds the last weights (``best.pt`` in ``run_dir`` the best); ``stopped`` is one of
    ``epochs``, ``time_limit``, ``early_stopping`` (patience: the plateau rule), ``steps`` (``max_steps``),
    ``lm_stuck`` (Levenberg–Marquardt's damping at its cap again after its restarts: no step could be taken),
    ``callback``, ``interrupted``, ``diverged`` (an ensemble member); ``stop_clock`` says which budget stopped a ``time_limit`` run (``"cpu"``:
    ``cpu_time_limit``, ``"wall"``: ``time_limit``; None for every other reason), as ``summary.json`` does.

    An ensemble (``fit(..., ensemble=N)`` or ``seeds``) gives one ``FitResult`` too: ``members[k]`` is
    member ``k``'s own ``FitResult`` (its ``run_dir`` the member directory, ``model`` its last weights),
    ``seeds`` the members' seeds, ``selected`` the index of the member with the best validation score
    (None without validation data or when every member diverged), ``table`` one row per member (the
    columns of ``ensemble.csv``). Its ``run_dir``, ``stopped``, ``wall_time``, ``device``, ``dtype`` and
    ``monitor`` are the ensemble's; ``model``, ``epochs``, ``steps``, the losses, ``best_epoch``,
    ``n_params`` and ``history`` are those of its reference member (the selected one, else member 0).

    A single run has no members: ``members``, ``seeds`` and ``table`` are empty and ``selected`` is None.
    ``runs`` lists every trained model's result either way (``members``, or ``[self]`` for a single run),
    and ``best`` the selected one (a single run: itself).
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
    #: an ensemble's members, one ``FitResult`` each (empty for a single run)
    members: list[FitResult] = field(default_factory=list, repr=False)
    #: an ensemble's member seeds (empty for a single run)
    seeds: list[int] = field(default_factory=list)
    #: the index of an ensemble's selected member (None: a single run, no validation data, or every member diverged)
    selected: int | None = None
    #: an ensemble's table, one dict per member with the columns of ``ensemble.csv`` (empty for a single run)
    table: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: which budget stopped a ``time_limit`` run: "cpu" or "wall" (None: another reason)
    stop_clock: str | None = None
    #: an ``early_stopping`` run: whether its score's trend still fell clearly when the plateau rule stopped it
    #: (``vpintegrator.training.record.plateau_trend``; None: another reason, or no trend to judge)
    still_improving: bool | None = None
    #: the best epoch's weights (None where this invocation did not judge it: a resumed run's is in best.pt)
    best_state: dict[str, torch.Tensor] | None = field(default=None, repr=False, compare=False)
    #: the identity (do-nothing) map's score on the data ``best_loss`` is measured on, by the same score (NaN: none)
    identity_loss: float = math.nan

    @classmethod
    def of_ensemble(cls, run_dir: Path | None, seeds: list[int], members: list[FitResult], selected: int | None,
                    monitor: str, stopped: str, wall_time: float, device: str, dtype: str,
                    table: list[dict[str, Any]] | None = None) -> FitResult:
        """An ensemble's result from its ``members``' results (a non-empty list, one per seed); the
        per-run fields are copied from the reference member (``members[selected]``, else ``members[0]``)."""
        if not members:
            raise VPIntegratorError("FitResult.of_ensemble: members is empty; an ensemble has at least one member",
                                    key="members")
        ref = members[selected if selected is not None else 0]
        return cls(
            run_dir=run_dir, model=ref.model, epochs=ref.epochs, steps=ref.steps, train_loss=ref.train_loss,
            val_loss=ref.val_loss, best_loss=ref.best_loss, best_epoch=ref.best_epoch, wall_time=wall_time,
            n_params=ref.n_params, device=device, dtype=dtype, stopped=stopped, history=ref.history,
            monitor=monitor, members=list(members), seeds=list(seeds), selected=selected,
            table=list(table or []), stop_clock=ref.stop_clock if stopped == "time_limit" else None,
            identity_loss=ref.identity_loss,
        )

    @property
    def worse_than_identity(self) -> bool | None:
        """Whether ``best_loss`` is no better than the identity map's (``identity_record``; None: no baseline)."""
        return identity_record(self.best_loss, self.identity_loss)["worse_than_identity"]

    def identity_line(self) -> str | None:
        """The one line that says a model is worse than the identity map (None when it is not, or no baseline)."""
        if not self.worse_than_identity:
            return None
        norm = (getattr(self.model, "trained_on", None) or {}).get("normalisation") or {}
        hint = (f"the coordinates were normalised ({norm.get('rule')}) and each window wrapped in the periodic "
                "components: train longer, or try another model kind" if "period" in norm else
                f"the coordinates were normalised ({norm.get('rule')}): train longer, or check dt and whether "
                "a component is an angle (declare it periodic)" if "shift" in norm else
                "train longer, or check dt and the coordinates (an offset or a scale that normalise = 'auto' or 'on' "
                "removes)")
        return (f"Worse than the identity map: best {self.monitor} {self.best_loss:.3e} is "
                f"{self.best_loss / self.identity_loss:.3g}x the {self.identity_loss:.3e} of predicting no change "
                f"(each window's last state): the model has not learnt the step; {hint}")

    @property
    def is_ensemble(self) -> bool:
        """Whether this is an ensemble's result (it has members)."""
        return bool(self.members)

    @property
    def runs(self) -> list[FitResult]:
        """Every trained model's result: the ``members``, or ``[self]`` for a single run."""
        return list(self.members) if self.members else [self]

    @property
    def best(self) -> FitResult | None:
        """An ensemble's selected member (None when none was selected); a single run's result itself."""
        if not self.members:
            return self
        return None if self.selected is None else self.members[self.selected]

    @property
    def best_path(self) -> Path | None:
        """``run_dir/best.pt``; an ensemble's: its reference member's."""
        if self.members:
            return self._ref().best_path
        return None if self.run_dir is None else self.run_dir / "best.pt"

    @property
    def last_path(self) -> Path | None:
        """``run_dir/last.pt``; an ensemble's: its reference member's."""
        if self.members:
            return self._ref().last_path
        return None if self.run_dir is None else self.run_dir / "last.pt"

    def _ref(self) -> FitResult:
        """The reference run: an ensemble's selected member, else its first; a single run itself."""
        return self.best or self.members[0]

    def __repr__(self) -> str:  # one line: the model's name and size, not its module tree or the history
        name = getattr(self.model, "config", {}).get("name", type(self.model).__name__)
        ens = f"members={len(self.members)}, selected={self.selected}, " if self.members else ""
        return (f"{type(self).__name__}(run_dir={str(self.run_dir) if self.run_dir is not None else None!r}, "
                f"model={name!r}, {ens}n_params={self.n_params}, epochs={self.epochs}, best_epoch={self.best_epoch}, "
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
