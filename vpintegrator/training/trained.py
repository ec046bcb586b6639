"""The trained networks behind the fitted models' interface (``vpintegrator.models.fitted``), and the one place
that lists, builds and loads every model kind, fitted or trained.

``TrainedModel`` is a ``FittedModel`` (``fit_on`` on a training split,
the step-map contract, ``describe``, ``save``) whose fit is a training by [`fit`][vpintegrator.training.fit] on a
step budget; ``kind_class(NAME)`` of a registered network NAME is it, bound to NAME. It lives here, not beside the
fitted kinds in ``models``, because it trains (``training``) and steps as the engine steps a network
(``vpintegrator.rollout.methods.model_step``), both above ``models``.

- ``list_kinds()``: the fitted kinds (``list_fitted``) then the networks (``list_models``);
- ``kind_class(name)``: a fitted kind's class (``fitted_class``) or ``TrainedModel`` bound to the network;
- ``load_kind(path)``: a fitted model's ``.npz`` (``load_fitted``) or a network's model file (``.pt``, a run
  directory, ``pretrained:NAME``; ``load_model``) as a ``TrainedModel``.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..clock import process_cpu
from ..data import Trajectories
from ..errors import VPIntegratorError
from ..models import load_model, save_model
from ..models.fitted import FittedModel, RowData, fitted_class, list_fitted, load_fitted
from ..models.registry import list_models, model_class
from ..rollout.methods import model_step  # (importing it registers the SINDy kinds: vpintegrator.rollout.sindy)
from ..stepping import StepMap
from .run import fit

__all__ = ["TrainedModel", "list_kinds", "kind_class", "load_kind"]


class TrainedModel(FittedModel):
    """A registered network behind the fitted models' interface: ``fit_on(train, val, context_len=T, dt=H,
    model={...}, **keys)`` trains it by [`fit`][vpintegrator.training.fit] on the trajectories as objects (nothing
    written), ``MAX_STEPS`` optimiser steps unless ``keys`` (``fit``'s) give a stop key; ``context_len`` is its
    ``seq_len`` (a context model's ``context_len``; None: its own), ``dt`` the trajectories' step, ``model`` its other
    hyper-parameters. It steps as the engine steps a network (``vpintegrator.rollout.methods.model_step``); ``save``
    writes its model file (``save_model``, the training's record as ``fit_record``), read by ``load_kind``."""

    kind = "model"
    #: optimiser steps of a training given no stop key
    MAX_STEPS = 200

    def __init__(self, train: Any, val: Any = None, *, context_len: int | None = None, dt: float = 1.0,
                 dim: int = 0, source: str = "", model: dict[str, Any] | None = None, **keys: Any) -> None:
        self._data, self.source, self.dt, self.dim, self.name = (train, val), source, float(dt), int(dim), self.row
        window = "context_len" if "context_len" in inspect.signature(model_class(self.row)).parameters else "seq_len"
        self._hparams = {**(model or {}), **({} if context_len is None else {window: int(context_len)})}
        stop = any(k in keys for k in ("max_steps", "epochs", "time_limit", "cpu_time_limit"))
        self._keys = keys if stop else {**keys, "max_steps": self.MAX_STEPS}
        self.seq_len, self.pred_window = int(context_len or 1), 1  # the network's own once trained
        self.module: Any = None
        self._step: StepMap | None = None

    @classmethod
    def for_row(cls, data: RowData) -> "TrainedModel":
        return cls(data.train, data.val, context_len=data.context_len, dt=data.dt, dim=data.dim, source=data.source)

    def _adopt(self, module: Any, record: dict[str, Any]) -> "TrainedModel":
        self.module, self.record, self._step = module, record, None
        self.dim, self.seq_len, self.pred_window = int(module.dim), int(module.seq_len), int(module.pred_window)
        self.dt = float(getattr(module, "trained_on", {}).get("dt", self.dt))
        return self

    def fit_now(self) -> Any:
        """Train (once); the network."""
        if self.module is None:
            data = [None if y is None else np.asarray(y() if callable(y) else y, dtype=np.float64) for y in self._data]
            tic = process_cpu()
            split: dict[str, Any] = {what: None if y is None else Trajectories(y=y, t=self.dt * np.arange(y.shape[1]))
                                     for what, y in zip(("train", "val"), data)}
            got = fit(model={"name": self.row, **self._hparams}, **self._keys, **split)
            self._adopt(got.model, {"fit_seconds": process_cpu() - tic, "fit_clock": "process_cpu",
                                    "train_steps": int(got.steps), "train_loss": float(got.train_loss),
                                    "val_loss": float(got.val_loss), "stopped": str(got.stopped),
                                    **({"fit_source": self.source} if self.source else {})})
        return self.module

    def _map(self) -> StepMap:
        if self._step is None:
            self._step = model_step(self.fit_now())
        return self._step

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self._map().start(window0, limit)

    def generate(self, n: int) -> np.ndarray:
        return self._map().generate(n)

    def reset(self, rows: np.ndarray) -> None:
        self._map().reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        return self._map().log_abs_det_jacobian(windows)

    @property
    def cpu_clock(self) -> str:
        return self._map().cpu_clock

    def describe(self) -> dict[str, Any]:
        return {**self._map().describe(), **self.record}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Train if not yet trained and write the model file to ``path`` (replacing one there); the path written."""
        module = self.fit_now()
        return save_model(module, path, {**getattr(module, "trained_on", {}), "fit_record": self.record},
                          overwrite=True)


@functools.cache
def _trained_class(name: str) -> type[TrainedModel]:
    """``TrainedModel`` bound to the network ``name`` (one class per name: a loaded model's is the same)."""
    return type(f"TrainedModel[{name}]", (TrainedModel,), {"row": name, "__module__": __name__})


def list_kinds() -> list[str]:
    """Every model kind's name: the fitted kinds' (``list_fitted``), then the registered networks' (``list_models``)."""
    return list_fitted() + list_models()


def kind_class(name: str) -> type[FittedModel]:
    """The class of the model kind ``name``: a fitted kind's (``sindy`` or ``sindy+rk4``: ``fitted_class``), or
    ``TrainedModel`` bound to the registered network ``name``; unknown: one line listing the valid ones."""
    head = str(name).partition("+")[0]
    if head in list_models():
        return _trained_class(head)
    if head not in list_fitted():
        raise VPIntegratorError(f"unknown model kind {name!r}; valid: {', '.join(list_kinds())}", key="name")
    return fitted_class(name)


def load_kind(path: str | os.PathLike[str]) -> FittedModel:
    """The model ``save`` wrote to ``path``: a network's model file (``.pt``, a run directory, ``pretrained:NAME``:
    ``load_model``) as a ``TrainedModel``, else a fitted model's file (``load_fitted``)."""
    p = Path(path)
    if not (p.suffix == ".pt" or p.is_dir() or str(path).startswith("pretrained:")):
        return load_fitted(p)
    module: Any = load_model(path)
    return _trained_class(str(module.config["name"]))(None)._adopt(module, dict(getattr(module, "fit_record", {})))
