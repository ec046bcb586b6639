"""Fitted models beside the trained networks: the rows that learn from a data file's training split by a fit
(least squares, sparse regression, a nearest-neighbour context) instead of gradient steps, one interface for
them, and the registry the rollout engine picks them from by name.

A fitted model is a [`StepMap`][vpintegrator.stepping.StepMap] (the engine runs it as it runs a network's
``ModelStep``) that also has

- ``FittedModel.fit_on(train, val, **options)``: built on the training trajectories (n_train, K, dim) and the held-out
  validation ones, and fitted (a row built by the engine fits once, in its ``start``: ``fit_now``);
- ``describe()``: what the rollout file records (the fit's choice, its score, ``fit_seconds``);
- ``save(path)`` / ``load_fitted(path)``: one ``.npz`` file, ``{"format": "vpintegrator-fitted", "version": 1,
  "kind": NAME, "config": JSON}`` plus the fit's arrays, read with ``allow_pickle=False``; a loaded model steps
  as the saved one did and never refits.

The registry: a subclass that sets ``row`` (its name) registers itself where it is defined (``takes_integrator``
for ``NAME+METHOD``; ``summary`` and ``needs`` for ``vp-rollout --list``); ``fitted_class(name)`` (an unknown name
is one line listing the valid ones) and ``list_fitted()``. A file records its class's module, imported on load
when the kind is not registered yet (``vpintegrator.rollout.sindy``: the SINDy rows integrate their fields by the
classical methods, above this layer). ``vpintegrator.rollout.methods`` builds every fitted row from it with
``for_row`` (one builder, no per-kind branch). The networks have the same interface, one layer up (training):
``vpintegrator.training.trained`` (``TrainedModel``; ``list_kinds``, ``kind_class``, ``load_kind`` over both).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError
from ..stepping import StepMap

__all__ = ["FITTED_FORMAT", "FittedModel", "RowData", "fitted_class", "list_fitted", "load_fitted", "nan_none",
           "none_nan"]

FITTED_FORMAT = "vpintegrator-fitted"
FITTED_FORMAT_VERSION = 1

#: name -> class, in registration order (a subclass registers when its module is imported)
_FITTED: dict[str, type["FittedModel"]] = {}


@dataclass(frozen=True)
class RowData:
    """What the engine hands ``for_row``: the training and validation trajectories (readers run when the row
    starts), and the run's ``context_len``, state dimension, step, ``+METHOD``, the ``fit_source`` line and the
    state components' names."""

    train: Callable[[], np.ndarray]
    val: Callable[[], np.ndarray]
    context_len: int
    dim: int
    dt: float
    integrator: str | None
    source: str
    component_names: tuple[str, ...] = ()


#: a fitted row has skill when its validation score is below this fraction of the identity map's on the same windows
SKILL_FRACTION = 0.5


def skill_of(score: float | None, identity: float) -> bool | None:
    """Whether a fitted row's chosen validation ``score`` (None: no model) shows skill: below ``SKILL_FRACTION``
    times the ``identity`` map's score on the same validation windows; None when there was no validation (NaN
    ``identity``)."""
    if not math.isfinite(identity):
        return None
    return score is not None and math.isfinite(score) and score < SKILL_FRACTION * identity


class FittedModel(StepMap):
    """The contract of a fitted row (module docstring). A subclass sets ``row`` (and so registers) and the class
    attributes below, and defines ``fit_now``, ``for_row``, ``_state`` and ``_restore``."""

    kind = "fitted"
    #: the row's name (``arx``, ``sindy`` in ``sindy+rk4``, ...)
    row: str = ""
    #: whether the row is ``NAME+METHOD`` (a classical method integrates the fitted field)
    takes_integrator: bool = False
    #: one line for ``vp-rollout --list`` and what the row needs beyond training trajectories
    summary: str = ""
    needs: str = "-"
    #: states a training sample needs beyond the window of ``context_len`` (None: the row reads no window)
    reach: int | None = None
    #: whether the row selects on validation trajectories (False: it reads the training ones only)
    validates: bool = True
    #: the optional module the kind needs (None: none): ``available`` says whether it is installed
    requires: str | None = None
    #: at most this many training states, this many validation trajectories to step ``val_steps(T)``
    max_fit_states: int | None = None
    max_val_traj: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("row")
        if name and cls.kind == "fitted":  # (a network's class, vpintegrator.training.trained, is not registered)
            if name in _FITTED and _FITTED[name].__qualname__ != cls.__qualname__:
                raise VPIntegratorError(f"fitted model {cls.__name__}: row {name!r} is taken by "
                                        f"{_FITTED[name].__name__}; give another name")
            _FITTED[name] = cls

    @classmethod
    def available(cls) -> bool:
        """Whether the module the kind ``requires`` is installed (a run or study leaves the kind out when not)."""
        import importlib.util

        return cls.requires is None or importlib.util.find_spec(cls.requires) is not None

    @classmethod
    def val_steps(cls, context_len: int) -> int | None:
        """Each validation trajectory is read to this step (None: to its end)."""
        return None

    @classmethod
    def for_row(cls, data: RowData) -> "FittedModel":
        """The row the engine runs, not yet fitted (it fits in ``start``)."""
        raise NotImplementedError

    @classmethod
    def fit_on(cls, train: Any, val: Any = None, **options: Any) -> "FittedModel":
        """A model of this kind built on ``train`` (n_train, K, dim) and ``val`` (held out; a kind that does not
        ``validate`` takes none), fitted now."""
        if not cls.validates and val is not None:
            raise VPIntegratorError(f"{cls.row}: selects nothing, so takes no validation trajectories; give val=None",
                                    key="val")
        make: Any = cls  # a subclass takes its data and options; the base takes none
        model = make(train, **options) if not cls.validates else make(train, val, **options)
        model.fit_now()
        return model

    @property
    def skill(self) -> bool | None:
        """Whether the fit has skill (``skill_of``) for a kind that scores the identity map on its validation
        (``identity_score``); None before the fit and for the other kinds."""
        if not getattr(self, "_fitted", False) or not hasattr(self, "identity_score"):
            return None
        fit = getattr(self, "fit", None)
        return skill_of(None if fit is None else fit.score, self.identity_score)

    def fit_now(self) -> Any:
        """Fit (once) and return the fit (None: no candidate with skill)."""
        raise NotImplementedError

    # -- files
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted state: JSON-able settings and the fit's arrays (after ``fit_now``)."""
        raise NotImplementedError

    @classmethod
    def _restore(cls, settings: dict[str, Any], arrays: dict[str, np.ndarray]) -> "FittedModel":
        """The model ``_state`` describes, fitted (no data read, no refit)."""
        raise NotImplementedError

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Fit if not yet fitted and write the model to ``path`` (``.npz``, atomically); the path written."""
        from .._io import atomic_path

        self.fit_now()
        config, arrays = self._state()
        target = Path(path)
        with atomic_path(target, suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, format=np.array(FITTED_FORMAT), version=np.array(FITTED_FORMAT_VERSION),
                         kind=np.array(self.row), module=np.array(type(self).__module__),
                         config=np.array(json.dumps(config)),
                         **{f"a_{k}": v for k, v in arrays.items()})  # type: ignore[arg-type]
        return target


def list_fitted() -> list[str]:
    """The registered fitted rows' names."""
    return list(_FITTED)


def fitted_class(name: str) -> type[FittedModel]:
    """The class of the fitted row ``name`` (``sindy`` or ``sindy+rk4``); unknown: one line listing the valid ones."""
    head = str(name).partition("+")[0]
    if head not in _FITTED:
        raise VPIntegratorError(f"unknown fitted model {name!r}; valid: {', '.join(_FITTED)}", key="integrators")
    return _FITTED[head]


def load_fitted(path: str | os.PathLike[str]) -> FittedModel:
    """The fitted model ``FittedModel.save`` wrote to ``path``; a file of another format is one line."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            files = dict(z)
    except (OSError, ValueError) as err:
        raise VPIntegratorError(f"{p}: not a fitted-model file ({' '.join(str(err).split())[:120]}); give a file "
                                "FittedModel.save wrote", key="path") from None
    if str(files.get("format", "")) != FITTED_FORMAT:
        raise VPIntegratorError(f"{p}: not a fitted-model file (format {str(files.get('format'))!r}, expected "
                                f"{FITTED_FORMAT!r}); give a file FittedModel.save wrote", key="path")
    kind, module = str(files["kind"]), str(files.get("module", ""))
    if kind not in _FITTED and module.startswith("vpintegrator."):
        import importlib

        importlib.import_module(module)
    cls = fitted_class(kind)
    arrays = {k[2:]: v for k, v in files.items() if k.startswith("a_")}
    return cls._restore(json.loads(str(files["config"])), arrays)


def nan_none(value: float) -> float | None:
    """``value``, or None when it is not finite (JSON has no NaN)."""
    return float(value) if math.isfinite(value) else None


def none_nan(value: float | None) -> float:
    """The inverse of ``nan_none``."""
    return math.nan if value is None else float(value)
