"""The rows a comparison run takes in its ``integrators`` key besides the classical integrators and
``exact_flow``: one registry of row kinds, ``ROW_KINDS``, which ``run_rollouts`` asks for every name.

| row | kind | what |
|---|---|---|
| ``fd+METHOD``, ``shooting+METHOD`` | identification | each row's parameters from its first ``context_len`` states, then METHOD with them ([`IdentifiedStep`][vpintegrator.rollout.identify.IdentifiedStep]) |
| ``sindy+METHOD`` | fitted | sparse regression on the training trajectories, integrated by METHOD ([`SindyStep`][vpintegrator.rollout.sindy.SindyStep]; the ``sindy`` extra) |
| ``parrot`` | fitted | context parroting: the nearest training window's continuation, copied ([`ParrotStep`][vpintegrator.rollout.parrot.ParrotStep]) |

A **fitted** row learns from the data file's training trajectories (``FitSplit``):
the split of the first model of the run whose recorded split applies to the data file (the same trajectories
the models learnt from), else ``vp-train``'s default split of the file (``DEFAULT_SPLIT``: val_fraction 0.1,
test_fraction 0.1, seed 1234). Its rows are labelled by that split (``train``/``val``/``test``, ``new`` for
held-out conditions), and a run that names no trajectory rolls out its test split, as for a trained model
(``vpintegrator.rollout.splits``). A row kind's ``build`` receives a ``RowRequest``
(no configuration) and returns the row's step map; nothing is computed before the row runs (a fit runs in
its step map's ``start``). The modules of the kinds are imported only when a row of theirs is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError
from .config import IDENTIFY_METHODS
from .engine import StepMap

__all__ = ["RowKind", "RowRequest", "FitSplit", "ROW_KINDS", "DEFAULT_SPLIT", "parse_row", "fitted_rows",
           "fit_split"]

#: vp-train's default trajectory split (``TrainConfig``'s val_fraction, test_fraction, seed): the split of the
#: fitted rows of a run without a model whose split applies
DEFAULT_SPLIT = (0.1, 0.1, 1234)


@dataclass(frozen=True)
class FitSplit:
    """The trajectories a fitted row learns from: indices into the data file (sorted) and where they come from.

    Attributes
    ----------
    train, val, test : ndarray of int64
    source : str
        E.g. ``"the split of model 'vpt'"``.
    """

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    source: str

    def as_record(self) -> dict[str, list[int]]:
        """``{"train", "val", "test"}`` lists, the form of a model's ``training_split``."""
        return {k: [int(i) for i in getattr(self, k)] for k in ("train", "val", "test")}


@dataclass(frozen=True)
class RowRequest:
    """What a row kind's ``build`` is given: the row's name and integrator, the run's system (a
    ``SystemFamily`` for per-trajectory parameters), the data's step, the context the identification rows
    read, the data file and the fitted rows' split (None for the other rows)."""

    label: str
    integrator: str | None
    system: Any
    dt: float
    context_len: int = 3
    context_noise: float = 0.0
    data: Path | None = None
    split: FitSplit | None = None


@dataclass(frozen=True)
class RowKind:
    """A kind of row: its name (``sindy`` in ``sindy+rk4``), whether it takes ``+METHOD``, whether it is
    fitted to the data file's training trajectories, and the function that builds its step map."""

    name: str
    takes_integrator: bool
    fitted: bool
    build: Callable[[RowRequest], StepMap]
    summary: str


def _trajectories(data: Path | None, idx: np.ndarray, max_states: int | None = None,
                  max_traj: int | None = None, n_steps: int | None = None) -> Callable[[], np.ndarray]:
    """A reader of the trajectories ``idx`` of ``data`` (n, T, dim), run when the row starts: the first of them
    only, at most ``max_traj`` and ``max_states`` states in all, each to at most step ``n_steps``."""
    def read() -> np.ndarray:
        from ..data import read_metadata, read_trajectories

        if data is None or idx.size == 0:
            raise VPIntegratorError("a fitted row needs training trajectories of a data file", key="data")
        n_states = int(read_metadata(data)["n_states"])
        T = n_states if n_steps is None else min(n_states, n_steps + 1)
        keep = idx.size if max_states is None else max(1, int(max_states) // T)
        keep = keep if max_traj is None else min(keep, int(max_traj))
        return read_trajectories(data, traj=idx[:keep], steps=None if T == n_states else np.arange(T)).y

    return read


def _need_split(req: RowRequest) -> "FitSplit":
    if req.split is None or req.split.train.size == 0:
        raise VPIntegratorError(f"{req.label}: no training trajectory to fit on", key="integrators")
    return req.split


def _identified(how: str) -> Callable[[RowRequest], StepMap]:
    def build(req: RowRequest) -> StepMap:
        from .identify import IdentifiedStep

        return IdentifiedStep(req.system, how, str(req.integrator), req.dt, context_len=req.context_len,
                              noise=req.context_noise)

    return build


def _sindy(req: RowRequest) -> StepMap:
    from .sindy import SindyStep

    split = _need_split(req)
    train, val = split.train, split.val
    if val.size == 0:  # a split without validation trajectories: the last tenth of train validates
        n_val = max(1, train.size // 10)
        if train.size < 2:
            raise VPIntegratorError(f"{req.label}: one training trajectory and no validation one; give data with "
                                    "more trajectories", key="integrators")
        train, val = train[:-n_val], train[-n_val:]
    from .sindy import MAX_FIT_STATES, MAX_VAL_TRAJ, VAL_STEPS

    return SindyStep(_trajectories(req.data, train, MAX_FIT_STATES),
                     _trajectories(req.data, val, max_traj=MAX_VAL_TRAJ, n_steps=VAL_STEPS), str(req.integrator), req.dt,
                     dim=int(req.system.dim), source=f"{split.source}: {train.size} training, {val.size} validation "
                     "trajectories")


def _parrot(req: RowRequest) -> StepMap:
    from .parrot import MAX_PARROT_STATES, ParrotStep

    split = _need_split(req)
    return ParrotStep(_trajectories(req.data, split.train, MAX_PARROT_STATES), context_len=req.context_len,
                      dim=int(req.system.dim),
                      source=f"{split.source}: {split.train.size} training trajectories")


#: name -> row kind: every name ``run_rollouts`` accepts in ``integrators`` besides the classical integrators
ROW_KINDS: dict[str, RowKind] = {
    **{how: RowKind(how, True, False, _identified(how), "identification from the first context_len states, then "
                    "METHOD with the fitted parameters") for how in IDENTIFY_METHODS},
    "sindy": RowKind("sindy", True, True, _sindy, "SINDy on the training trajectories (library and threshold by "
                     "validation rollout), integrated by METHOD"),
    "parrot": RowKind("parrot", False, True, _parrot, "context parroting: the nearest training window of "
                      "context_len states, its continuation copied"),
}


def parse_row(name: str) -> tuple[RowKind, str | None] | None:
    """``"sindy+rk4"`` -> (the ``sindy`` kind, ``"rk4"``); ``"parrot"`` -> (its kind, None); None when ``name``
    is no registered row (a classical integrator, or unknown). A kind that takes ``+METHOD`` given without it is
    a one-line error; the method itself is checked by the kind's step map."""
    head, plus, method = name.partition("+")
    kind = ROW_KINDS.get(head)
    if kind is None:
        return None
    if kind.takes_integrator and not (plus and method):
        raise VPIntegratorError(f"integrators: {name!r} needs a classical method: {head}+METHOD (e.g. {head}+rk4)",
                                key="integrators")
    if not kind.takes_integrator and plus:
        raise VPIntegratorError(f"integrators: {head!r} takes no method; give {head}", key="integrators")
    return kind, (method or None)


def fitted_rows(names) -> list[str]:
    """The names among ``names`` that are fitted rows (``sindy+METHOD``, ``parrot``)."""
    out = []
    for name in names:
        row = parse_row(str(name))
        if row is not None and row[0].fitted:
            out.append(str(name))
    return out


def fit_split(model_splits, n_traj: int) -> FitSplit:
    """The fitted rows' split: that of the first model whose recorded split applies (``model_splits``:
    ``vpintegrator.rollout.splits.ModelSplit`` per model of the run), else ``DEFAULT_SPLIT`` of the file's
    ``n_traj`` trajectories."""
    for ms in model_splits:
        if ms.split is not None:
            train, val, test = (np.array(sorted(int(i) for i in ms.split[k]), dtype=np.int64)
                                for k in ("train", "val", "test"))
            return FitSplit(train, val, test, source=f"the split of model {ms.label!r}")
    from ..data.windows import split_train_val_test

    val_fraction, test_fraction, seed = DEFAULT_SPLIT
    if n_traj < 3:
        raise VPIntegratorError(f"fitted rows (sindy+METHOD, parrot) hold out validation and test trajectories: the "
                                f"data file has {n_traj}; give one with at least 3", key="integrators")
    train, val, test = split_train_val_test(n_traj, val_fraction, test_fraction, seed)
    return FitSplit(train, val, test, source=f"vp-train's default split (val_fraction {val_fraction}, test_fraction "
                    f"{test_fraction}, seed {seed})")
