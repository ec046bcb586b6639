"""Training a neural integrator on trajectory windows: :func:`fit` and its :class:`TrainConfig`.

The reference protocol (DESIGN §6, GeometricMachineLearning.jl / the paper): every (trajectory, start)
window once per epoch, shuffled; loss ``‖prediction − target‖_F / ‖target‖_F`` over the whole batch; Adam
with betas (0.9, 0.99) and eps 1e-8; learning rate decaying exponentially from ``lr`` to ``lr_min``
applied per optimiser step; batch 16384; float32; seed 1234.

A run writes one directory:

``config.toml``
    the resolved configuration (absolute data paths, the model's full config, every default);
``last.pt``, ``best.pt``
    :func:`vpintegrator.models.save_model` checkpoints (loadable by ``load_model`` and by
    ``torch.load(weights_only=True)``). ``last.pt`` also holds the training state (optimiser,
    scheduler, RNG states as tensors/lists, data order, epoch, early-stopping counters), so
    ``fit(config, resume=run_dir)`` continues exactly as if never interrupted; ``best.pt`` holds the
    weights with the lowest validation loss (training loss without a validation set);
``log.csv``
    ``epoch,train_loss,val_loss,lr,seconds`` per epoch; ``train_loss`` is the mean batch loss of the
    epoch, ``val_loss`` the loss over the whole validation set after it, ``lr`` the learning rate at
    its end, ``seconds`` the wall time since the run started (summed over resumes);
``summary.json``
    final and best losses, epochs, steps, wall time, parameter count, device, dtype, why it stopped.

Ctrl-C or SIGTERM finish the current optimiser step, save ``last.pt`` (mid-epoch, resumable exactly)
and raise :class:`TrainingInterrupted` (a ``KeyboardInterrupt``); a second signal aborts at once.

``optimizer = "lm"``: Levenberg–Marquardt on the residual vector, a second-order method for these
small models (≈ 100–200 parameters) that reaches the paper VPT's training loss 5e-4 in about a CPU
minute where Adam needs hours (docs/training_efficiency.md). Each iteration uses a random subsample of
``lm_windows`` training windows (drawn from the run's seeded generator, redrawn every
``lm_resample_every`` iterations), its Jacobian by ``torch.func`` and a damped Gauss–Newton step solved
in float64 (use ``dtype = "float64"``: in float32 the residuals and Jacobian limit the attainable
loss). An LM "epoch" is ``lm_iters_per_epoch`` iterations; after it the *full* training loss (over
every training window, not a mean of batch losses) and the validation loss are computed and logged,
and ``lr`` in ``log.csv`` / ``summary.json`` is the damping λ (no learning-rate schedule applies).
λ, the iteration count, the subsample and the generator state are saved in ``last.pt``, so resuming
is exact. LM runs in one process: under ``torchrun`` it is an error.

Under ``torchrun`` (``WORLD_SIZE > 1``) the model is wrapped in DistributedDataParallel and every rank
takes a contiguous slice of each global batch (``batch_size`` is the global batch). The loss is a ratio
of norms over the whole batch, so the ranks all-reduce its numerator and denominator before the
backward pass: each rank back-propagates ``W · N_r / (2 √(N D))`` (``N = Σ N_r``, ``D = Σ D_r``), whose
DDP average is exactly the gradient of ``√(N / D)``. Results equal single-process training with the
same global batch up to floating-point summation order. Only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import datetime
import json
import math
import os
import random
import signal
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from . import _ddp
from ._io import atomic_path
from ._version import __version__
from .errors import VPIntegratorError

__all__ = [
    "TrainConfig",
    "FitResult",
    "EpochInfo",
    "TrainingInterrupted",
    "fit",
    "relative_loss",
    "make_optimizer",
    "make_scheduler",
    "list_optimizers",
    "list_schedulers",
    "resolve_device",
]

LOG_COLUMNS = ("epoch", "train_loss", "val_loss", "lr", "seconds")
ROLLOUT_COLUMN = "val_rollout"  # log.csv's extra column when monitor = "val_rollout"
MONITORS = ("val_loss", "val_rollout")
DTYPES = ("float32", "float64")
SCHEDULE_PER = ("step", "epoch")

# Keys that may change when a run is resumed; anything else would make it a different run.
RESUMABLE_KEYS = ("epochs", "time_limit", "device", "patience", "min_delta", "checkpoint_every", "out")


# ---------------------------------------------------------------------------------------------------
# configuration


@dataclass
class TrainConfig:
    """Everything that defines a training run (the ``vp-train`` TOML, flat, plus a ``[model]`` table).

    Parameters
    ----------
    data : list of str
        HDF5 trajectory files (several shards are concatenated along n_traj). Relative paths are
        resolved against the working directory.
    model : dict
        ``{"name": ..., **kwargs}`` for :func:`vpintegrator.models.build_model`. ``dim`` defaults to the
        data's. The windows use the model's ``seq_len`` and ``pred_window``.
    out : str, optional
        Run directory (default ``runs/<model>-<YYYYmmdd-HHMMSS>``). Must not hold a run already.
    epochs : int, optional
        Total epochs (an epoch visits every training window once). At least one of ``epochs`` and
        ``time_limit`` is needed.
    time_limit : float, optional
        Wall-time budget in seconds for this invocation. Checked after each epoch: training stops before
        an epoch that would, judging by the last one, end past the budget (at least one epoch runs).
    batch_size : int
        Global batch (windows per optimiser step, summed over DDP ranks).
    lr, lr_min : float
        Initial and final learning rate of the schedule.
    optimizer : str
        One of :func:`list_optimizers`. ``optimizer_kwargs`` go to the torch optimiser on top of our
        defaults (adam/adamw: betas (0.9, 0.99), eps 1e-8).
    scheduler : str
        ``exponential`` (lr → lr_min geometrically, then held), ``cosine`` (to lr_min, then held) or
        ``constant``.
    schedule_per : "step" or "epoch"
        When the schedule advances: after every optimiser step (the reference) or every epoch.
    decay_epochs : float, optional
        Epochs over which lr reaches lr_min (default ``epochs``). GML's scripts computed the decay from
        the epoch count but applied it per step; ``decay_epochs = epochs / steps_per_epoch``
        reproduces that.
    stride : int
        Distance between window starts.
    val_fraction : float
        Share of trajectories held out for validation (split by trajectory, seeded); 0 for none.
    patience : int
        Early stopping: stop after this many epochs without the validation loss improving by more
        than ``min_delta``; 0 disables it.
    seed : int
        Seeds the model initialisation, the split and the data order.
    device : str
        ``auto`` (cuda if available), ``cpu``, ``cuda`` or ``cuda:N``.
    dtype : "float32" or "float64"
    checkpoint_every : int
        Write ``last.pt``/``best.pt``/``summary.json`` every this many epochs (and always at the end).
    lm_windows, lm_resample_every, lm_iters_per_epoch, lm_lambda
        ``optimizer = "lm"`` only (Levenberg–Marquardt, see :func:`fit`): windows per random subsample
        (default 1024), redraw it every this many iterations (10), LM iterations per "epoch" (10), initial
        damping λ (1e-3). With ``lm`` an epoch is ``lm_iters_per_epoch`` iterations, not a pass over
        the data; ``batch_size`` then only sets the chunk size of the loss evaluations, and ``lr``,
        ``lr_min``, the scheduler and ``optimizer_kwargs`` are not used.
    lm_check_windows : int
        ``lm`` only: with each subsample, draw this many other windows; a step is accepted only if it
        lowers the subsample's loss *and* does not raise the loss of these (guards against steps that
        fit the subsample and wreck the rest; 0 turns the check off).
    init_scale : float
        Factor applied to the freshly initialised weights (orthogonality-constrained ones excepted);
        values below 1 start the network closer to a map without nonlinear effects.
    monitor : "val_loss" or "val_rollout"
        What ``best.pt`` tracks. ``val_rollout``: the mean relative error of a free rollout of the
        validation trajectories (non-overlapping windows from their first ``seq_len`` states) over
        ``val_rollout_steps`` steps, the reference continued beyond the data with the data's own
        generator; errors are capped at 10 (a blown-up rollout scores 10). Logged in log.csv's extra
        ``val_rollout`` column. The training loss alone does not rank rollouts (docs/results.md).
    val_rollout_steps : int
        Length of that rollout in steps (500: t = 100 at the paper's h = 0.2).
    """

    data: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    out: str | None = None
    epochs: int | None = 100
    time_limit: float | None = None
    batch_size: int = 16384
    lr: float = 1e-2
    lr_min: float = 1e-6
    optimizer: str = "adam"
    optimizer_kwargs: dict[str, Any] = field(default_factory=dict)
    scheduler: str = "exponential"
    schedule_per: str = "step"
    decay_epochs: float | None = None
    stride: int = 1
    val_fraction: float = 0.1
    patience: int = 0
    min_delta: float = 0.0
    seed: int = 1234
    device: str = "auto"
    dtype: str = "float32"
    checkpoint_every: int = 1
    lm_windows: int = 1024
    lm_resample_every: int = 10
    lm_iters_per_epoch: int = 10
    lm_lambda: float = 1e-3
    lm_check_windows: int = 0
    init_scale: float = 1.0
    monitor: str = "val_loss"
    val_rollout_steps: int = 500

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "TrainConfig":
        """Build from a (TOML) mapping; unknown keys are an error that lists the valid ones."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise VPIntegratorError(
                f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(cls.keys())}"
            )
        values = dict(values)
        if isinstance(values.get("data"), (str, os.PathLike)):
            values["data"] = [values["data"]]
        if isinstance(values.get("model"), str):
            values["model"] = {"name": values["model"]}
        config = cls(**values)
        config.validate(source)
        return config

    @classmethod
    def from_toml(cls, path: str | os.PathLike, **overrides: Any) -> "TrainConfig":
        """Read a TOML file; ``overrides`` that are not ``None`` win over the file's values.

        An override ``model="vpt"`` (a string) replaces only the model name of the file's ``[model]``.
        """
        path = Path(path)
        with open(path, "rb") as f:
            values = tomllib.load(f)
        return cls.from_dict(_merge(values, overrides), source=str(path))

    def replace(self, **overrides: Any) -> "TrainConfig":
        """A validated copy with ``overrides`` that are not ``None`` applied."""
        config = TrainConfig(**_merge(self.to_dict(), overrides))
        config.validate()
        return config

    # -- validation --------------------------------------------------------------------------------

    def validate(self, source: str = "config") -> None:
        """Check types and ranges (names of optimisers etc. included); raise a one-line error."""

        def bad(key: str, expected: str, got: Any) -> VPIntegratorError:
            return VPIntegratorError(f"{source}: '{key}' must be {expected}; got {got!r}")

        def is_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

        if isinstance(self.data, (str, os.PathLike)):
            self.data = [self.data]
        if not isinstance(self.data, (list, tuple)) or not self.data:
            raise VPIntegratorError(
                f"{source}: 'data' must list at least one HDF5 file; got {self.data!r} (set data = [...] "
                "in the TOML or pass --data PATH)"
            )
        if not all(isinstance(p, (str, os.PathLike)) for p in self.data):
            raise bad("data", "a list of file paths", self.data)
        self.data = [str(p) for p in self.data]
        if not isinstance(self.model, dict) or not isinstance(self.model.get("name"), str):
            raise VPIntegratorError(
                f"{source}: the [model] table needs a 'name' (one of the registered models, e.g. vpt, "
                f"vpff, st); got {self.model!r} (pass --model NAME or add [model] name = ...)"
            )
        if self.out is not None and not isinstance(self.out, (str, os.PathLike)):
            raise bad("out", "a directory path", self.out)
        if self.epochs is not None and (not is_int(self.epochs) or self.epochs < 1):
            raise bad("epochs", "a positive integer", self.epochs)
        if self.time_limit is not None and (not is_num(self.time_limit) or self.time_limit <= 0):
            raise bad("time_limit", "a positive number of seconds", self.time_limit)
        if self.epochs is None and self.time_limit is None:
            raise VPIntegratorError(f"{source}: give 'epochs' or 'time_limit' (or both); neither was set")
        if not is_int(self.batch_size) or self.batch_size < 1:
            raise bad("batch_size", "a positive integer", self.batch_size)
        if not is_num(self.lr) or not self.lr > 0:
            raise bad("lr", "a positive number", self.lr)
        if not is_num(self.lr_min) or not 0 <= self.lr_min <= self.lr:
            raise bad("lr_min", f"a number in [0, lr={self.lr}]", self.lr_min)
        if self.optimizer not in list_optimizers():
            raise VPIntegratorError(
                f"{source}: unknown optimizer {self.optimizer!r}; valid: {', '.join(list_optimizers())}"
            )
        if not isinstance(self.optimizer_kwargs, dict):
            raise bad("optimizer_kwargs", "a table", self.optimizer_kwargs)
        if self.scheduler not in _SCHEDULERS:
            raise VPIntegratorError(
                f"{source}: unknown scheduler {self.scheduler!r}; valid: {', '.join(list_schedulers())}"
            )
        if self.schedule_per not in SCHEDULE_PER:
            raise bad("schedule_per", " or ".join(map(repr, SCHEDULE_PER)), self.schedule_per)
        if self.decay_epochs is not None and (not is_num(self.decay_epochs) or self.decay_epochs <= 0):
            raise bad("decay_epochs", "a positive number", self.decay_epochs)
        if self.scheduler != "constant" and self.decay_epochs is None and self.epochs is None and self.optimizer != "lm":
            raise VPIntegratorError(
                f"{source}: scheduler {self.scheduler!r} with only a time_limit needs 'decay_epochs' "
                "(the epochs over which lr reaches lr_min)"
            )
        if self.scheduler == "exponential" and self.lr_min <= 0:
            raise bad("lr_min", "positive for the exponential scheduler", self.lr_min)
        if not is_int(self.stride) or self.stride < 1:
            raise bad("stride", "a positive integer", self.stride)
        if not is_num(self.val_fraction) or not 0 <= self.val_fraction < 1:
            raise bad("val_fraction", "a number in [0, 1)", self.val_fraction)
        if not is_int(self.patience) or self.patience < 0:
            raise bad("patience", "a non-negative integer (0 disables early stopping)", self.patience)
        if not is_num(self.min_delta) or self.min_delta < 0:
            raise bad("min_delta", "a non-negative number", self.min_delta)
        if not is_int(self.seed):
            raise bad("seed", "an integer", self.seed)
        if not isinstance(self.device, str):
            raise bad("device", "auto, cpu, cuda or cuda:N", self.device)
        _check_device_name(self.device, source)
        if self.dtype not in DTYPES:
            raise bad("dtype", " or ".join(DTYPES), self.dtype)
        if not is_int(self.checkpoint_every) or self.checkpoint_every < 1:
            raise bad("checkpoint_every", "a positive integer", self.checkpoint_every)
        for key in ("lm_windows", "lm_resample_every", "lm_iters_per_epoch"):
            if not is_int(getattr(self, key)) or getattr(self, key) < 1:
                raise bad(key, "a positive integer", getattr(self, key))
        if not is_num(self.init_scale) or not 0 < self.init_scale < math.inf:
            raise bad("init_scale", "a positive number (factor on the initial weights)", self.init_scale)
        if self.monitor not in MONITORS:
            raise bad("monitor", " or ".join(map(repr, MONITORS)), self.monitor)
        if self.monitor == "val_rollout" and not (is_num(self.val_fraction) and self.val_fraction > 0):
            raise VPIntegratorError(
                f"{source}: monitor = 'val_rollout' rolls out the validation trajectories; set val_fraction > 0 "
                f"(got {self.val_fraction!r}) or monitor = 'val_loss'"
            )
        if not is_int(self.val_rollout_steps) or self.val_rollout_steps < 1:
            raise bad("val_rollout_steps", "a positive integer (steps of the validation rollout)", self.val_rollout_steps)
        if not is_int(self.lm_check_windows) or self.lm_check_windows < 0:
            raise bad("lm_check_windows", "a non-negative integer (0: no check set)", self.lm_check_windows)
        if not is_num(self.lm_lambda) or not 0 < self.lm_lambda < math.inf:
            raise bad("lm_lambda", "a positive number (the initial Levenberg–Marquardt damping)", self.lm_lambda)

    # -- output ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dataclasses.asdict(self))

    def to_toml(self) -> str:
        """The config as TOML (``None`` values are left out: they mean "default")."""
        return _dump_toml(self.to_dict())


def _merge(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(values)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "model" and isinstance(value, str):
            model = dict(merged.get("model") or {})
            if model.get("name") not in (None, value):
                # Another architecture: the file's hyper-parameters belonged to the old one.
                model = {}
            model["name"] = value
            merged["model"] = model
        elif key == "data" and isinstance(value, (list, tuple)) and not value:
            continue
        else:
            merged[key] = value
    return merged


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return json.dumps(str(value), ensure_ascii=False)  # JSON string escapes are valid TOML
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + items + "}"
    raise VPIntegratorError(f"cannot write {type(value).__name__} value {value!r} to TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def _dump_toml(values: dict[str, Any]) -> str:
    """Minimal TOML writer: scalars and lists at the top, one level of tables (no new dependency)."""
    lines, tables = [], []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, table in tables:
        lines.append("")
        lines.append(f"[{_toml_key(key)}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if v is not None)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# devices


def _check_device_name(device: str, source: str = "device") -> None:
    name = device.split(":")[0]
    ok = device in ("auto", "cpu", "cuda") or (name == "cuda" and device[5:].isdigit())
    if not ok:
        raise VPIntegratorError(
            f"{source}: unknown device {device!r}; valid: auto, cpu, cuda, cuda:N"
        )


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> cuda if available else cpu; ``cuda`` without CUDA is an error that says so."""
    _check_device_name(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise VPIntegratorError(
                f"device {device!r} requested but CUDA is not available (torch {torch.__version__}); "
                "use --device cpu or auto"
            )
        index = int(device[5:]) if ":" in device else None
        if index is not None and index >= torch.cuda.device_count():
            raise VPIntegratorError(
                f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
    return torch.device(device)


# ---------------------------------------------------------------------------------------------------
# loss, optimisers, schedulers


def relative_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The reference loss ``‖pred − target‖_F / ‖target‖_F`` over the whole batch.

    Parameters
    ----------
    pred, target : Tensor, shape (batch, pred_window, dim)
    """
    return torch.sqrt((pred - target).square().sum() / target.square().sum())


_ADAM_DEFAULTS = {"betas": (0.9, 0.99), "eps": 1e-8}
_OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adam": ("Adam", _ADAM_DEFAULTS),
    "adamw": ("AdamW", _ADAM_DEFAULTS),
    "sgd": ("SGD", {}),
    "rmsprop": ("RMSprop", {}),
    "lbfgs": ("LBFGS", {}),
}


def list_optimizers() -> list[str]:
    """Names accepted by :class:`TrainConfig` ``optimizer``: the torch ones of :func:`make_optimizer`
    and ``lm`` (Levenberg–Marquardt, run by :func:`fit` itself)."""
    return sorted([*_OPTIMIZERS, "lm"])


def make_optimizer(name: str, params, lr: float, **kwargs: Any) -> torch.optim.Optimizer:
    """A torch optimiser by name; ``kwargs`` go over our defaults (Adam: betas (0.9, 0.99), eps 1e-8)."""
    if name == "lm":
        raise VPIntegratorError(
            "optimizer 'lm' (Levenberg–Marquardt) is not a torch optimiser: use fit(..., optimizer='lm'); "
            f"make_optimizer takes {', '.join(sorted(_OPTIMIZERS))}"
        )
    if name not in _OPTIMIZERS:
        raise VPIntegratorError(f"unknown optimizer {name!r}; valid: {', '.join(list_optimizers())}")
    cls_name, defaults = _OPTIMIZERS[name]
    options = {**defaults, **kwargs}
    if "betas" in options:
        options["betas"] = tuple(options["betas"])
    cls = getattr(torch.optim, cls_name)
    try:
        return cls(params, lr=lr, **options)
    except (TypeError, ValueError) as err:
        raise VPIntegratorError(
            f"optimizer_kwargs for {name!r} (torch.optim.{cls_name}): {' '.join(str(err).split())}"
        ) from None


def _exponential(ratio: float, horizon: float) -> Callable[[int], float]:
    log_ratio = math.log(ratio)

    def factor(k: int) -> float:  # closed form: no drift from repeated multiplication
        return math.exp(log_ratio * min(k / horizon, 1.0))

    return factor


def _cosine(ratio: float, horizon: float) -> Callable[[int], float]:
    def factor(k: int) -> float:
        return ratio + (1.0 - ratio) * 0.5 * (1.0 + math.cos(math.pi * min(k / horizon, 1.0)))

    return factor


def _constant(ratio: float, horizon: float) -> Callable[[int], float]:
    def factor(k: int) -> float:
        return 1.0

    return factor


_SCHEDULERS = {"exponential": _exponential, "cosine": _cosine, "constant": _constant}


def list_schedulers() -> list[str]:
    """Names accepted by :func:`make_scheduler`."""
    return sorted(_SCHEDULERS)


def make_scheduler(
    name: str, optimizer: torch.optim.Optimizer, lr_min_ratio: float, horizon: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` taking lr to ``lr_min_ratio · lr`` over ``horizon`` scheduler steps, then holding.

    ``exponential``: lr · ratio^(k/horizon); ``cosine``: lr_min + (lr − lr_min)(1 + cos(π k/horizon))/2;
    ``constant``: lr. Closed forms of step ``k``, so a resumed run reproduces them bit for bit.
    """
    if name not in _SCHEDULERS:
        raise VPIntegratorError(f"unknown scheduler {name!r}; valid: {', '.join(list_schedulers())}")
    factor = _SCHEDULERS[name](lr_min_ratio, max(float(horizon), 1.0))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ---------------------------------------------------------------------------------------------------
# Levenberg–Marquardt


def window_residuals(model: torch.nn.Module) -> tuple[Callable, Callable]:
    """The model's window residuals as functions of a flat parameter vector (for Gauss–Newton methods).

    Returns ``(residual, jacobian)``: ``residual(theta, x, target)`` with x (n, seq_len, dim) and target
    (n, pred_window, dim) gives ``model_theta(x) − target`` flattened to (n, pred_window·dim);
    ``jacobian(theta, x, target)`` gives its Jacobian per window, (n, pred_window·dim, n_params)
    (``vmap`` of ``jacrev``). ``theta`` is ``parameters_to_vector(model.parameters())``-ordered;
    buffers are taken from the model as they are.
    """
    from torch.func import functional_call, jacrev, vmap

    named = list(model.named_parameters())
    buffers = dict(model.named_buffers())

    def unflatten(theta: torch.Tensor) -> dict[str, torch.Tensor]:
        out, i = {}, 0
        for k, p in named:
            out[k] = theta[i : i + p.numel()].view(p.shape)
            i += p.numel()
        out.update(buffers)
        return out

    def residual(theta, x, target):  # (n, P*dim)
        return (functional_call(model, unflatten(theta), (x,)) - target).flatten(1)

    def residual1(theta, x1, t1):  # one window: (P*dim,)
        return residual(theta, x1[None], t1[None])[0]

    return residual, vmap(jacrev(residual1), in_dims=(None, 0, 0))


class _LevenbergMarquardt:
    """Levenberg–Marquardt on the residual vector of a random subsample of training windows.

    Each :meth:`step` draws ``n_windows`` windows from ``generator`` (only every ``resample_every``-th
    iteration; in between it reuses them), forms the residual ``r = (pred − target) / ‖target‖_F``
    (flattened, so ``‖r‖`` is the subsample's reference loss) and its Jacobian ``J`` (``torch.func``:
    ``vmap(jacrev)`` per window over ``functional_call``), solves ``(JᵀJ + λ diag(JᵀJ)) δ = −Jᵀr``
    in float64 and accepts ``θ + δ`` if the subsample loss decreases (λ ← λ/3), else λ ← 2λ and it
    retries (``max_tries`` solves in all). λ, the iteration count, the subsample and the generator
    state are the state (:meth:`state_dict`), so a resumed run continues exactly.
    """

    UP, DOWN, LAM_MIN, LAM_MAX = 2.0, 3.0, 1e-12, 1e12

    def __init__(self, model, dataset, generator: torch.Generator, n_windows: int, resample_every: int,
                 lam: float, check_windows: int = 0, max_tries: int = 10, chunk: int = 2048) -> None:
        self.model, self.dataset, self.generator = model, dataset, generator
        self.n_windows, self.resample_every, self.max_tries, self.chunk = n_windows, resample_every, max_tries, chunk
        self.check_windows = int(check_windows)
        self.lam = float(lam)
        self.iteration = 0
        self.index: torch.Tensor | None = None  # (n_windows,) the current subsample
        self.check: torch.Tensor | None = None  # (check_windows,) windows a step must not make worse
        self.params = [p for p in model.parameters()]
        self._residual, self._jac1 = window_residuals(model)

    def _jacobian(self, theta, x, target) -> torch.Tensor:  # (n*P*dim, n_params)
        parts = [self._jac1(theta, x[i : i + self.chunk], target[i : i + self.chunk])
                 for i in range(0, len(x), self.chunk)]
        return torch.cat(parts, 0).flatten(0, 1)

    def step(self) -> tuple[float, bool]:
        """One LM iteration; returns (subsample loss before it, whether the step was accepted)."""
        if self.index is None or self.iteration % self.resample_every == 0:
            n = len(self.dataset)
            perm = torch.randperm(n, generator=self.generator)
            self.index = perm[: min(self.n_windows, n)]
            if self.check_windows > 0:  # disjoint from the subsample where the data allow it
                rest = perm[self.index.numel():]
                self.check = (rest if rest.numel() else perm)[: self.check_windows]
        x, target = self.dataset.batch(self.index)
        scale = 1.0 / torch.sqrt(target.square().sum())
        check_cost = self._check_cost(theta=None)
        theta = torch.nn.utils.parameters_to_vector(self.params).detach()
        with _label("vp/lm_jacobian"):
            J = (self._jacobian(theta, x, target) * scale).double()
        with torch.no_grad():
            r = (self._residual(theta, x, target) * scale).flatten().double()
            cost = float(r.square().sum())
            H = J.T @ J  # (n_params, n_params), float64 whatever the model dtype
            g = J.T @ r
            D = torch.diag(torch.diagonal(H).clamp_min(1e-12))
            accepted = False
            for _ in range(self.max_tries):
                try:
                    delta = torch.linalg.solve(H + self.lam * D, -g)
                except RuntimeError:  # singular: damp harder
                    self.lam = min(self.lam * self.UP, self.LAM_MAX)
                    continue
                new = theta + delta.to(theta.dtype)
                new_cost = float((self._residual(new, x, target) * scale).double().square().sum())
                if math.isfinite(new_cost) and new_cost < cost and self._check_cost(new) <= check_cost:
                    torch.nn.utils.vector_to_parameters(new, self.params)
                    self.lam = max(self.lam / self.DOWN, self.LAM_MIN)
                    accepted = True
                    break
                self.lam = min(self.lam * self.UP, self.LAM_MAX)
        self.iteration += 1
        return math.sqrt(cost), accepted

    def _check_cost(self, theta: torch.Tensor | None) -> float:
        """Squared relative loss of the check windows at ``theta`` (None: the current weights); 0 if none."""
        if self.check is None:
            return 0.0
        if theta is None:
            theta = torch.nn.utils.parameters_to_vector(self.params).detach()
        with torch.no_grad():
            x, target = self.dataset.batch(self.check)
            r = self._residual(theta, x, target).double()
            value = float(r.square().sum() / target.double().square().sum())
        return value if math.isfinite(value) else math.inf

    def state_dict(self) -> dict[str, Any]:
        empty = torch.zeros(0, dtype=torch.long)
        index = self.index if self.index is not None else empty
        check = self.check if self.check is not None else empty
        return {"lambda": self.lam, "iteration": self.iteration, "index": index.cpu().clone(),
                "check": check.cpu().clone(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam, self.iteration = float(state["lambda"]), int(state["iteration"])
        self.index = state["index"] if state["index"].numel() else None
        check = state.get("check")
        self.check = check if check is not None and check.numel() else None
        self.generator.set_state(state["generator"])


# ---------------------------------------------------------------------------------------------------
# results


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


# ---------------------------------------------------------------------------------------------------
# RNG state in weights_only-loadable form (tensors, ints, lists)


def _rng_state(device: torch.device) -> dict[str, Any]:
    np_state = np.random.get_state()
    py_state = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": [int(py_state[0]), [int(v) for v in py_state[1]], py_state[2]],
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            int(np_state["pos"]),
            int(np_state["has_gauss"]),
            float(np_state["cached_gaussian"]),
        )
    )
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), NumPy's and Python's global RNGs (the model init draws from torch's)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


# ---------------------------------------------------------------------------------------------------
# signals


class _StopRequest:
    """SIGINT/SIGTERM set a flag checked between optimiser steps; a second signal aborts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt(f"signal {signum} received twice")
        self.requested = True

    def __enter__(self) -> "_StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------------------------------
# run directory


def _default_out(model_name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{model_name}-{stamp}"


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _read_log(path: Path, max_epoch: int) -> list[dict[str, float]]:
    """Rows of ``log.csv`` up to ``max_epoch`` (rows written after the last checkpoint are dropped)."""
    if not path.exists():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                parsed = {k: float(row[k]) for k in LOG_COLUMNS}
                if ROLLOUT_COLUMN in row:
                    parsed[ROLLOUT_COLUMN] = float(row[ROLLOUT_COLUMN])
            except (TypeError, ValueError, KeyError):
                break  # a torn last line
            if parsed["epoch"] > max_epoch:
                break
            parsed["epoch"] = int(parsed["epoch"])
            rows.append(parsed)
    return rows


def _log_columns(config: "TrainConfig") -> tuple[str, ...]:
    return LOG_COLUMNS + ((ROLLOUT_COLUMN,) if config.monitor == "val_rollout" else ())


def _format_row(row: dict[str, float], columns: tuple[str, ...] = LOG_COLUMNS) -> str:
    return ",".join([str(int(row["epoch"]))] + [repr(float(row.get(k, math.nan))) for k in columns[1:]])


class _RolloutValidator:
    """``monitor = "val_rollout"``: how well a model rolls out the validation trajectories.

    From each trajectory's first ``seq_len`` states the model is iterated on non-overlapping windows
    over ``n_steps`` steps; the reference is the data, continued beyond its horizon with the data's own
    generator (as ``vp-rollout`` does). The score is the relative error ‖ŷ − y‖/‖y‖ averaged over the
    trajectories and the predicted steps, each error capped at ``CAP`` (a blown-up rollout scores CAP).

    Parameters
    ----------
    y : Tensor, shape (n_traj, n_file_steps, dim)
        The validation trajectories as stored.
    meta : dict
        The data file's metadata (system, parameters, dt, method, tolerances).
    """

    CAP = 10.0

    def __init__(self, y: torch.Tensor, meta: dict[str, Any], n_steps: int, seq_len: int, pred_window: int) -> None:
        ref = y.detach().to("cpu", torch.float64).numpy()
        n_file = ref.shape[1]
        if n_steps + 1 > n_file:
            from .rollout import _reference_generator, _system_from_meta, rollout

            system = _system_from_meta(meta, "training data")
            dt = float(meta["dt"])
            cont = rollout(_reference_generator(meta, system, dt), ref[:, -1], n_steps - (n_file - 1), dt)
            ref = np.concatenate([ref, cont.y[:, 1:]], axis=1)
        self.ref = torch.as_tensor(ref[:, : n_steps + 1])
        self.seq_len, self.pred_window = int(seq_len), int(pred_window)

    def __call__(self, model: torch.nn.Module) -> float:
        param = next(iter(model.parameters()))
        ref = self.ref.to(device=param.device, dtype=param.dtype)
        T, P, total = self.seq_len, self.pred_window, ref.shape[1]
        was_training = model.training
        model.eval()
        with torch.no_grad():
            x, parts, have = ref[:, :T], [], T
            while have < total:
                out = model(x)
                parts.append(out)
                x = out if P >= T else torch.cat([x[:, P:], out], 1)
                have += P
            pred = torch.cat(parts, 1)[:, : total - T].double()
        model.train(was_training)
        target = ref[:, T:].double()
        err = torch.linalg.vector_norm(pred - target, dim=-1) / torch.linalg.vector_norm(target, dim=-1)
        err = torch.nan_to_num(err, nan=self.CAP, posinf=self.CAP).clamp(max=self.CAP)
        return float(err.mean())


# ---------------------------------------------------------------------------------------------------
# the trainer


def _label(name: str):
    """A ``torch.profiler`` region (near-free when no profiler runs): names the phases in profiles."""
    return torch.profiler.record_function(name)


def _model_api():
    from . import models

    return models


class _Trainer:
    """One training run (one process of it under DDP). Built by :func:`fit`."""

    def __init__(
        self,
        config: TrainConfig,
        dist: _ddp.DistInfo,
        device: torch.device,
        resume: Path | None,
        callback: Callable[[EpochInfo], bool | None] | None,
        progress: bool,
    ) -> None:
        from .data.windows import WindowBatchSampler, WindowDataset, load_trajectory_tensor, split_trajectories

        models = _model_api()
        self.config = config
        self.callback = callback
        self.progress = progress
        self.resume_dir = resume

        self.dist = dist
        self.device = device
        self.dtype = torch.float64 if config.dtype == "float64" else torch.float32

        # data (CPU first: the model's dim may come from it)
        data_paths = [str(Path(p).expanduser().resolve()) for p in config.data]
        data = load_trajectory_tensor(data_paths, dtype=config.dtype)
        model_cfg = dict(config.model)
        name = model_cfg.pop("name")
        model_cfg.setdefault("dim", data.dim)

        _seed_everything(config.seed)
        if name not in models.list_models():
            raise VPIntegratorError(
                f"[model] name: unknown model {name!r}; valid: {', '.join(models.list_models())}"
            )
        model = models.build_model(name, **model_cfg)
        if int(model.dim) != data.dim:
            raise VPIntegratorError(
                f"[model] dim = {model.dim} but the data ({data_paths[0]}) has dim = {data.dim}; set the "
                f"model's dim to {data.dim} or use matching data"
            )
        self.model = model.to(device=device, dtype=self.dtype)
        if config.init_scale != 1.0:  # shrink the initial weights (not orthogonality-constrained ones)
            with torch.no_grad():
                for pname, p in self.model.named_parameters():
                    if "parametrizations." not in pname:
                        p.mul_(config.init_scale)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        seq_len, pred_window = int(model.seq_len), int(model.pred_window)
        span = seq_len + pred_window
        if span > data.n_steps:
            raise VPIntegratorError(
                f"model {name!r}: seq_len + pred_window = {seq_len} + {pred_window} = {span} exceeds the "
                f"n_steps = {data.n_steps} of the data ({data_paths[0]}); use longer trajectories or "
                "shorter windows"
            )

        # resolved config: what config.toml records
        resolved_model = {"name": name, **dict(getattr(model, "config", {}) or {})}
        resolved_model["name"] = name
        self.resolved = config.replace(data=data_paths, model=resolved_model)
        if self.resolved.decay_epochs is None and self.resolved.epochs is not None:
            self.resolved.decay_epochs = float(self.resolved.epochs)
        self.resolved.model = resolved_model

        y = data.y.to(device)
        train_idx, val_idx = split_trajectories(data.n_traj, config.val_fraction, config.seed)
        self.train_set = WindowDataset(y, seq_len, pred_window, config.stride, train_idx)
        self.val_set = WindowDataset(y, seq_len, pred_window, config.stride, val_idx) if len(val_idx) else None
        self.rollout_validator: _RolloutValidator | None = None
        if config.monitor == "val_rollout":
            self.rollout_validator = _RolloutValidator(
                data.y[val_idx], data.meta, config.val_rollout_steps, seq_len, pred_window
            )
        self.log_columns = _log_columns(config)
        self.data_info = {
            "sources": data_paths,
            "system": data.meta.get("system"),
            "n_traj": data.n_traj,
            "n_train_traj": int(len(train_idx)),
            "n_val_traj": int(len(val_idx)),
            "n_steps": data.n_steps,
            "dim": data.dim,
            "train_windows": len(self.train_set),
            "val_windows": 0 if self.val_set is None else len(self.val_set),
        }

        # data order: a generator of its own (same seed on every rank: same global permutation)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.sampler = WindowBatchSampler(
            len(self.train_set), config.batch_size, True, self.generator, self.dist.rank, self.dist.world_size
        )
        self.steps_per_epoch = len(self.sampler)

        self.lm: _LevenbergMarquardt | None = None
        if config.optimizer == "lm":
            # an "epoch" of LM is lm_iters_per_epoch iterations; no torch optimiser, no lr schedule
            self.lm = _LevenbergMarquardt(self.model, self.train_set, self.generator, config.lm_windows,
                                          config.lm_resample_every, config.lm_lambda, config.lm_check_windows)
            self.steps_per_epoch = int(config.lm_iters_per_epoch)
            self.optimizer = self.scheduler = None
        else:
            self.optimizer = make_optimizer(
                config.optimizer, self.model.parameters(), config.lr, **config.optimizer_kwargs
            )
            decay_epochs = self.resolved.decay_epochs if self.resolved.decay_epochs is not None else 1.0
            horizon = decay_epochs * (self.steps_per_epoch if config.schedule_per == "step" else 1)
            ratio = config.lr_min / config.lr
            self.scheduler = make_scheduler(config.scheduler, self.optimizer, ratio, horizon)

        self.net = self.model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids)

        # training state
        self.epoch = 0
        self.step = 0
        self.batch_in_epoch = 0
        self.epoch_start_state = self.generator.get_state()
        self.loss_sum = 0.0
        self.loss_count = 0
        self.best_loss = math.inf
        self.best_epoch = 0
        self.bad_epochs = 0
        self.wall_before = 0.0  # seconds spent by earlier invocations of this run
        self.history: list[dict[str, float]] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_dirty = False
        self.last_train = math.nan
        self.last_val = math.nan
        if resume is not None:
            self._load(resume / "last.pt")

    # -- checkpoints -------------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path | None:
        return Path(self.resolved.out) if self.resolved.out is not None else None

    def _training_state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "batch_in_epoch": self.batch_in_epoch,
            "optimizer": self.lm.state_dict() if self.lm is not None else self.optimizer.state_dict(),
            "scheduler": {} if self.lm is not None else self.scheduler.state_dict(),
            "rng": {**_rng_state(self.device), "data_epoch_start": self.epoch_start_state.clone()},
            "train_state": {
                "loss_sum": float(self.loss_sum),
                "loss_count": int(self.loss_count),
                "best_loss": float(self.best_loss),
                "best_epoch": int(self.best_epoch),
                "bad_epochs": int(self.bad_epochs),
                "wall_time": float(self._wall()),
                "train_loss": float(self.last_train),
                "val_loss": float(self.last_val),
            },
        }

    def _load(self, path: Path) -> None:
        if not path.exists():
            raise VPIntegratorError(
                f"--resume {path.parent}: no last.pt there; expected a run directory written by vp-train"
            )
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        missing = [k for k in ("state_dict", "optimizer", "scheduler", "rng", "epoch", "train_state") if k not in ckpt]
        if missing:
            raise VPIntegratorError(
                f"{path}: missing checkpoint key(s) {', '.join(missing)}; not a vp-train last.pt"
            )
        self.model.load_state_dict(ckpt["state_dict"])
        if self.lm is None:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.scheduler.load_state_dict(ckpt["scheduler"])
        _set_rng_state(ckpt["rng"], self.device)
        self.epoch_start_state = ckpt["rng"]["data_epoch_start"]
        self.generator.set_state(self.epoch_start_state)
        if self.lm is not None:  # after the generator: LM saves its state as of the last iteration
            if "lambda" not in ckpt["optimizer"]:
                raise VPIntegratorError(f"{path}: no Levenberg–Marquardt state in it; not an optimizer = 'lm' run")
            self.lm.load_state_dict(ckpt["optimizer"])
        self.epoch, self.step = int(ckpt["epoch"]), int(ckpt["step"])
        self.batch_in_epoch = int(ckpt["batch_in_epoch"])
        st = ckpt["train_state"]
        self.loss_sum, self.loss_count = float(st["loss_sum"]), int(st["loss_count"])
        self.best_loss, self.best_epoch = float(st["best_loss"]), int(st["best_epoch"])
        self.bad_epochs, self.wall_before = int(st["bad_epochs"]), float(st["wall_time"])
        self.last_train, self.last_val = float(st["train_loss"]), float(st["val_loss"])
        if self.run_dir is not None:
            self.history = _read_log(self.run_dir / "log.csv", self.epoch)

    def _save(self, final: bool = False) -> None:
        if not self.dist.is_main or self.run_dir is None:
            return
        models = _model_api()
        run = self.run_dir
        if self.best_dirty and self.best_state is not None:
            best_model = copy.deepcopy(self.model)
            best_model.load_state_dict(self.best_state)
            models.save_model(
                best_model, run / "best.pt",
                extra={"epoch": self.best_epoch, "best_loss": float(self.best_loss), "kind": "best"},
            )
            self.best_dirty = False
        models.save_model(self.model, run / "last.pt", extra={**self._training_state(), "kind": "last"})
        self._write_summary()

    def _write_summary(self, stopped: str = "running") -> None:
        if not self.dist.is_main or self.run_dir is None:
            return
        summary = {
            "model": self.resolved.model.get("name"),
            "n_params": int(self.n_params),
            "epochs": int(self.epoch),
            "steps": int(self.step),
            "steps_per_epoch": int(self.steps_per_epoch),
            "train_loss": _json_float(self.last_train),
            "val_loss": _json_float(self.last_val),
            "best_loss": _json_float(self.best_loss),
            "best_epoch": int(self.best_epoch),
            "monitor": self.config.monitor if self.val_set is not None else "train_loss",
            "lr": self._lr(),
            "wall_time": round(self._wall(), 3),
            "stopped": stopped,
            "device": str(self.device),
            "dtype": self.resolved.dtype,
            "world_size": self.dist.world_size,
            "data": self.data_info,
            "vpintegrator_version": __version__,
            "torch_version": torch.__version__,
        }
        _write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")

    def _lr(self) -> float:
        """The learning rate now; for ``lm`` the damping λ (what log.csv's ``lr`` column holds)."""
        return self.lm.lam if self.lm is not None else float(self.optimizer.param_groups[0]["lr"])

    def _wall(self) -> float:
        return self.wall_before + (time.perf_counter() - self.t_start)

    # -- one optimiser step -----------------------------------------------------------------------

    def _batch_loss(self, idx: torch.Tensor, stop_flag: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward pass: (loss to back-propagate, the batch's reference loss, ranks asking to stop)."""
        empty = idx.numel() == 0
        if empty:  # a rank with nothing in a small last batch still joins DDP's gradient all-reduce
            idx = self._last_global_batch[:1]
        with _label("vp/gather"):
            x, target = self.train_set.batch(idx)
        with _label("vp/forward"):
            pred = self.net(x)
        num = (pred - target).square().sum()
        den = target.square().sum()
        if empty:
            num, den = num * 0.0, den * 0.0
        if not self.dist.enabled:
            loss = torch.sqrt(num / den)
            return loss, loss.detach(), torch.zeros(())
        stats = torch.stack([num.detach(), den.detach(), torch.tensor(stop_flag, dtype=num.dtype, device=num.device)])
        _ddp.all_reduce(stats, self.dist)
        n, d = stats[0], stats[1]
        local = num * (self.dist.world_size / (2.0 * torch.sqrt(n * d)))
        return local, torch.sqrt(n / d), stats[2]

    def _step(self, idx: torch.Tensor) -> tuple[torch.Tensor, bool]:
        flag = 1.0 if self.stop.requested else 0.0
        if isinstance(self.optimizer, torch.optim.LBFGS):
            holder: dict[str, torch.Tensor] = {}

            def closure() -> torch.Tensor:
                self.optimizer.zero_grad(set_to_none=True)
                loss, reported, stop = self._batch_loss(idx, flag)
                with _label("vp/backward"):
                    loss.backward()
                holder.setdefault("reported", reported)
                holder.setdefault("stop", stop)
                return reported

            self.optimizer.step(closure)
            reported, stop = holder["reported"], holder["stop"]
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss, reported, stop = self._batch_loss(idx, flag)
            with _label("vp/backward"):
                loss.backward()
            with _label("vp/optimizer"):
                self.optimizer.step()
        if self.config.schedule_per == "step":
            self.scheduler.step()
        self.step += 1
        stop_now = self.stop.requested if not self.dist.enabled else bool(stop.item() > 0)
        return reported, stop_now

    @torch.no_grad()
    def _validate(self, dataset=None) -> float:
        """The reference loss over the whole validation set (or ``dataset``)."""
        dataset = self.val_set if dataset is None else dataset
        if dataset is None:
            return math.nan
        self.model.eval()
        n = torch.zeros((), dtype=torch.float64, device=self.device)
        d = torch.zeros((), dtype=torch.float64, device=self.device)
        order = torch.arange(len(dataset), device=self.device)
        bs = self.config.batch_size
        for b in range(-(-len(dataset) // bs)):
            idx = order[b * bs : (b + 1) * bs]
            if self.dist.enabled:
                idx = torch.tensor_split(idx, self.dist.world_size)[self.dist.rank]
                if idx.numel() == 0:
                    continue
            x, target = dataset.batch(idx)
            pred = self.model(x)
            n += (pred - target).square().sum().double()
            d += target.square().sum().double()
        self.model.train()
        stats = _ddp.all_reduce(torch.stack([n, d]), self.dist)
        return float(torch.sqrt(stats[0] / stats[1]))

    # -- the loop ----------------------------------------------------------------------------------

    def _epochs_left(self) -> int | None:
        return None if self.config.epochs is None else max(self.config.epochs - self.epoch, 0)

    def run(self) -> FitResult:
        self.t_start = time.perf_counter()
        run = self.run_dir
        if self.dist.is_main and run is not None:
            run.mkdir(parents=True, exist_ok=True)
            _write_text(run / "config.toml", self.resolved.to_toml())
            # the log: keep rows up to the checkpoint (a crash may have left later ones), then append
            text = ",".join(self.log_columns) + "\n" + "".join(_format_row(r, self.log_columns) + "\n" for r in self.history)
            _write_text(run / "log.csv", text)
        self.log_file = open(run / "log.csv", "a", encoding="utf-8") if (self.dist.is_main and run) else None
        stopped = "epochs"
        try:
            with _StopRequest() as self.stop, self._progress_bar() as bar:
                stopped = self._loop(bar)
        finally:
            if self.log_file is not None:
                self.log_file.close()
        self._write_summary(stopped)
        result = self._result(stopped)
        if stopped == "interrupted":
            where = f"; saved {run / 'last.pt'}, continue with: vp-train --resume {run}" if run else ""
            raise TrainingInterrupted(
                f"training interrupted at epoch {self.epoch} (+{self.batch_in_epoch} batches){where}", result
            )
        return result

    def _torch_epoch(self) -> float | None:
        """One epoch of a torch optimiser: its mean batch loss, or None if interrupted mid-epoch."""
        if self.batch_in_epoch == 0:
            self.epoch_start_state = self.generator.get_state()
            self.loss_sum, self.loss_count = 0.0, 0
        else:  # resuming mid-epoch: replay this epoch's permutation from its starting state
            self.generator.set_state(self.epoch_start_state)
        order = self.sampler.epoch_order().to(self.device)
        loss_acc = torch.zeros((), dtype=torch.float64, device=self.device)
        done_here = 0
        for b in range(self.batch_in_epoch, self.steps_per_epoch):
            bs = self.sampler.batch_size
            self._last_global_batch = order[b * bs : (b + 1) * bs]
            idx = self.sampler.shard(order, b)
            reported, stop_now = self._step(idx)
            loss_acc += reported.double()
            done_here += 1
            self.batch_in_epoch = b + 1
            if stop_now and self.batch_in_epoch < self.steps_per_epoch:
                self.loss_sum += float(loss_acc)
                self.loss_count += done_here
                self._save()
                return None
        self.loss_sum += float(loss_acc)
        self.loss_count += done_here
        # end of epoch
        if self.config.schedule_per == "epoch":
            self.scheduler.step()
        self.epoch += 1
        self.batch_in_epoch = 0
        return self.loss_sum / max(self.loss_count, 1)

    def _loop(self, bar) -> str:
        cfg = self.config
        time_limit = cfg.time_limit
        last_epoch_seconds = 0.0
        invocation_start = time.perf_counter()
        self.model.train()
        while self._epochs_left() is None or self._epochs_left() > 0:
            t_epoch = time.perf_counter()
            if self.lm is not None:
                if self.batch_in_epoch == 0:
                    self.epoch_start_state = self.generator.get_state()
                for b in range(self.batch_in_epoch, self.steps_per_epoch):
                    self.lm.step()
                    self.step += 1
                    self.batch_in_epoch = b + 1
                    if self.stop.requested and self.batch_in_epoch < self.steps_per_epoch:
                        self._save()
                        return "interrupted"
                self.epoch += 1
                self.batch_in_epoch = 0
                with _label("vp/train_loss"):
                    train_loss = self._validate(self.train_set)  # LM: the full training loss
            else:
                train_loss = self._torch_epoch()
                if train_loss is None:
                    return "interrupted"
            with _label("vp/validate"):
                val_loss = self._validate()
            self.last_train, self.last_val = train_loss, val_loss
            monitor = val_loss if self.val_set is not None else train_loss
            val_rollout = math.nan
            if self.rollout_validator is not None:
                with _label("vp/validate_rollout"):
                    val_rollout = monitor = self.rollout_validator(self.model)
            improved = math.isfinite(monitor) and (
                not math.isfinite(self.best_loss) or monitor < self.best_loss - cfg.min_delta
            )
            if improved or self.best_epoch == 0:
                self.best_loss, self.best_epoch, self.bad_epochs = monitor, self.epoch, 0
                self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
                self.best_dirty = True
            else:
                self.bad_epochs += 1
            lr = self._lr()
            row = {"epoch": self.epoch, "train_loss": train_loss, "val_loss": val_loss, "lr": lr,
                   "seconds": self._wall()}
            if self.rollout_validator is not None:
                row[ROLLOUT_COLUMN] = val_rollout
            self.history.append(row)
            if self.log_file is not None:
                self.log_file.write(_format_row(row, self.log_columns) + "\n")
                self.log_file.flush()
            self.epoch_start_state = self.generator.get_state()
            info = EpochInfo(self.epoch, self.step, train_loss, val_loss, lr, row["seconds"])
            if bar is not None:
                bar(info, time.perf_counter() - invocation_start)
            # stop conditions, agreed on by every rank
            last_epoch_seconds = time.perf_counter() - t_epoch
            elapsed = time.perf_counter() - invocation_start
            flags = torch.tensor(
                [
                    float(self.stop.requested),
                    float(time_limit is not None and elapsed + last_epoch_seconds > time_limit),
                    float(bool(self.callback(info)) if self.callback is not None else False),
                ],
                dtype=torch.float64,
                device=self.device,
            )
            _ddp.all_reduce(flags, self.dist, op="max")
            early = cfg.patience > 0 and self.bad_epochs >= cfg.patience
            finished = self._epochs_left() == 0
            reason = None
            if flags[0] > 0:
                reason = "interrupted" if not finished else "epochs"
            elif finished:
                reason = "epochs"
            elif early:
                reason = "early_stopping"
            elif flags[2] > 0:
                reason = "callback"
            elif flags[1] > 0:
                reason = "time_limit"
            if reason is not None or self.epoch % cfg.checkpoint_every == 0:
                with _label("vp/checkpoint"):
                    self._save()
            if reason is not None:
                return reason
        self._save()
        return "epochs"

    @contextlib.contextmanager
    def _progress_bar(self) -> Iterator[Any]:
        if not (self.progress and self.dist.is_main):
            yield None
            return
        import click

        left = self._epochs_left()
        limit = self.config.time_limit
        # over epochs when their number is known, else over the seconds of the time budget
        by_time = left is None

        def show(info: EpochInfo | None) -> str | None:
            if info is None:
                return None
            val = "" if math.isnan(info.val_loss) else f" val {info.val_loss:.3e}"
            return f"epoch {info.epoch} loss {info.train_loss:.3e}{val} lr {info.lr:.1e}"

        with click.progressbar(
            length=max(int(math.ceil(limit)), 1) if by_time else max(left, 1),
            label="training", item_show_func=show, file=sys.stderr, show_pos=not by_time,
        ) as bar:

            def update(info: EpochInfo, elapsed: float) -> None:
                n = min(int(elapsed), bar.length) - bar.pos if by_time else 1
                bar.update(max(n, 0), info)

            yield update

    def _result(self, stopped: str) -> FitResult:
        return FitResult(
            run_dir=self.run_dir,
            model=self.model,
            epochs=self.epoch,
            steps=self.step,
            train_loss=float(self.last_train),
            val_loss=float(self.last_val),
            best_loss=float(self.best_loss),
            best_epoch=int(self.best_epoch),
            wall_time=self._wall(),
            n_params=int(self.n_params),
            device=str(self.device),
            dtype=self.resolved.dtype,
            stopped=stopped,
            history=list(self.history),
        )


def _json_float(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _check_new_run_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise VPIntegratorError(f"--out {out}: exists and is not a directory; choose another --out")
    if (out / "last.pt").exists() or (out / "config.toml").exists():
        raise VPIntegratorError(
            f"--out {out}: already holds a run; continue it with --resume {out} or choose another --out"
        )


def _resume_config(run_dir: Path, config: TrainConfig | None, overrides: dict[str, Any]) -> TrainConfig:
    path = run_dir / "config.toml"
    if not run_dir.is_dir() or not path.exists():
        raise VPIntegratorError(
            f"--resume {run_dir}: not a run directory (no config.toml); give a directory written by vp-train"
        )
    saved = TrainConfig.from_toml(path)
    if config is not None:
        theirs, ours = saved.to_dict(), config.to_dict()
        for key in TrainConfig.keys():
            if key in RESUMABLE_KEYS or key == "decay_epochs":
                continue
            if key == "data":
                same = [str(Path(p).resolve()) for p in ours[key]] == theirs[key]
            elif key == "model":
                same = all(theirs["model"].get(k) == v for k, v in ours["model"].items())
            else:
                same = ours[key] == theirs[key]
            if not same:
                raise VPIntegratorError(
                    f"--resume {run_dir}: '{key}' differs from the run's ({theirs[key]!r} there, "
                    f"{ours[key]!r} here); only {', '.join(RESUMABLE_KEYS)} may change, or start a new run"
                )
        overrides = {k: getattr(config, k) for k in RESUMABLE_KEYS if k != "out"} | overrides
    bad = sorted(k for k, v in overrides.items() if v is not None and k not in RESUMABLE_KEYS)
    if bad:
        raise VPIntegratorError(
            f"--resume {run_dir}: cannot change {', '.join(bad)} of a run; only "
            f"{', '.join(RESUMABLE_KEYS)} may change (start a new run with --out for the others)"
        )
    return saved.replace(**{**overrides, "out": str(run_dir)})


def fit(
    config: TrainConfig | dict[str, Any] | str | os.PathLike | None = None,
    *,
    resume: str | os.PathLike | None = None,
    callback: Callable[[EpochInfo], bool | None] | None = None,
    progress: bool = False,
    **overrides: Any,
) -> FitResult:
    """Train a model on trajectory windows and write its run directory.

    Parameters
    ----------
    config : TrainConfig, dict, or path of a TOML file; optional with ``resume``
    resume : path, optional
        A run directory to continue from its ``last.pt`` (its ``config.toml`` is the config; only
        ``epochs`` (the total), ``time_limit``, ``device``, ``patience``, ``min_delta`` and
        ``checkpoint_every`` may change). The continuation is exactly the uninterrupted run.
    callback : callable, optional
        ``callback(EpochInfo)`` after every epoch (on every rank); returning True stops training.
    progress : bool
        Show a click progress bar with the losses on stderr (rank 0).
    **overrides
        Config keys that win over ``config`` (``None`` values are ignored).

    Returns
    -------
    FitResult

    Raises
    ------
    VPIntegratorError
        A bad config, data or run directory (one line naming the key or file).
    TrainingInterrupted
        On Ctrl-C / SIGTERM, after ``last.pt`` was saved.

    Notes
    -----
    With ``optimizer = "lm"`` an epoch is ``lm_iters_per_epoch`` Levenberg–Marquardt iterations on
    random subsamples of ``lm_windows`` windows (module docstring); ``train_loss`` is then the full
    training loss after the epoch and ``lr`` the damping λ. Single process only.
    """
    if config is not None and not isinstance(config, TrainConfig):
        if isinstance(config, dict):
            config = TrainConfig.from_dict(_merge(config, overrides))
        else:
            config = TrainConfig.from_toml(config, **overrides)
        overrides = {}
    run_dir = None
    if resume is not None:
        run_dir = Path(resume)
        config = _resume_config(run_dir, config, overrides)
    else:
        if config is None:
            raise VPIntegratorError("fit: give a config (TrainConfig, dict or TOML path) or resume=RUN_DIR")
        config = config.replace(**overrides) if overrides else config
        config.validate()
        out = Path(config.out) if config.out is not None else _default_out(config.model["name"])
        config = config.replace(out=str(out.resolve()))
    device = resolve_device(config.device)
    dist = _ddp.setup(device.type)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    try:
        if dist.enabled and config.optimizer == "lm":
            raise VPIntegratorError(
                f"optimizer 'lm' (Levenberg–Marquardt) runs in one process only; got WORLD_SIZE = "
                f"{dist.world_size} under torchrun: run vp-train without torchrun or pick a torch optimizer"
            )
        if run_dir is None and dist.is_main:
            _check_new_run_dir(Path(config.out))
        return _Trainer(config, dist, device, run_dir, callback, progress).run()
    finally:
        _ddp.teardown(dist)
