"""The training configuration: :class:`TrainConfig`, on the one config layer (:mod:`vpintegrator.config`).

The ``vp-train`` TOML is flat (the keys are the fields of :class:`TrainConfig`) plus a ``[model]`` table.
Errors are one line and carry the offending key (``VPIntegratorError.key``), which a CLI renders as its
flag.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..arrays import DTYPES
from .. import config as config_layer
from ..device import check_device_name
from ..errors import VPIntegratorError
from .fast_step import FAST_STEPS
from .optim import _SCHEDULERS, list_optimizers, list_schedulers

__all__ = ["TrainConfig", "merge_overrides", "DTYPES", "MONITORS", "SCHEDULE_PER", "RESUMABLE_KEYS"]

MONITORS = ("val_loss", "val_rollout")
SCHEDULE_PER = ("step", "epoch")

# Keys that may change when a run is resumed; anything else would make it a different run.
RESUMABLE_KEYS = (
    "epochs", "time_limit", "device", "fast_step", "patience", "min_delta", "checkpoint_every", "checkpoint_seconds",
    "out",
)


@dataclass
class TrainConfig:
    """Everything that defines a training run (the ``vp-train`` TOML, flat, plus a ``[model]`` table).

    Parameters
    ----------
    data : list of str
        HDF5 trajectory files (several shards are concatenated along n_traj). Relative paths are
        resolved against the working directory.
    model : dict
        ``{"name": ..., **kwargs}`` for :func:`vpintegrator.models.build_model`. Keys left out take the
        paper's values for that architecture (:func:`vpintegrator.models.default_model_config`), ``dim``
        the data's. The windows use the model's ``seq_len`` and ``pred_window``.
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
    fast_step : "auto", "off", "graph" or "compile"
        How a torch optimiser's step runs (:mod:`vpintegrator.training.fast_step`): ``graph`` records the
        whole step (batch gather, forward, loss, backward, optimiser) in a CUDA graph and replays it (CUDA,
        one process, adam/adamw/rmsprop); ``compile`` runs the loss through ``torch.compile`` first (and
        captures it where a graph can run); ``off`` is the eager step; ``auto`` (default) is ``graph``
        where it can run, else ``off``. The losses equal the eager path's to float rounding.
    checkpoint_every : int
        Write ``last.pt``/``best.pt``/``summary.json`` every this many epochs (and always at the end).
    checkpoint_seconds : float
        Also write ``last.pt`` (mid-epoch if need be; resumable exactly) once this many seconds of wall
        time have passed since the last write, whichever of the two comes first: a ``kill -9`` loses at
        most ``checkpoint_every`` epochs or ``checkpoint_seconds`` seconds of training (default 30).
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
    ensemble : int, optional
        Train this many independently initialised members at once in one process
        (:mod:`vpintegrator.training.ensemble`): member ``k`` has seed ``seed + k`` (or ``seeds[k]``) for
        its initialisation and its data order; the train/validation split is ``seed``'s for every member.
        ``out`` then holds ``member_<k>_seed_<s>/`` run directories, ``ensemble.csv``/``.md`` and the
        member selected by the validation score (``selected.json``, ``best/``). Torch optimisers with
        elementwise updates only (not ``lm`` or ``lbfgs``); not resumable.
    seeds : list of int, optional
        The members' seeds (an ensemble of ``len(seeds)``; with ``ensemble`` too, the lengths must agree).
    unroll : int
        Windows of free rollout per training target (:mod:`vpintegrator.training.unroll`): with k > 1 the
        model is iterated k times on its own predictions from each input window and the loss (training
        and validation) compares the k·pred_window predicted states with the data's. 1 (default): one
        window from the true states. Costs k forward passes per window; not with ``ensemble``.
    init_from : str, optional
        Start from the weights of this model (a ``.pt`` file, a run directory or ``pretrained:<name>``)
        instead of a fresh initialisation (``init_scale`` is then not applied): fine-tuning, e.g. a second
        phase with ``unroll > 1`` after a one-window phase. Its architecture must equal the configured
        model's (every hyper-parameter); the optimiser starts afresh. Not with ``ensemble``.
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
    fast_step: str = "auto"
    checkpoint_every: int = 1
    checkpoint_seconds: float = 30.0
    lm_windows: int = 1024
    lm_resample_every: int = 10
    lm_iters_per_epoch: int = 10
    lm_lambda: float = 1e-3
    lm_check_windows: int = 0
    init_scale: float = 1.0
    monitor: str = "val_loss"
    val_rollout_steps: int = 500
    ensemble: int | None = None
    seeds: list[int] | None = None
    unroll: int = 1
    init_from: str | None = None

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "TrainConfig":
        """Build from a (TOML) mapping; unknown keys are an error that lists the valid ones."""
        config_layer.check_keys(values, cls.keys(), source)
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
        """Read a TOML file (a path or a shipped config's name, ``list_configs()``); ``overrides`` that are
        not ``None`` win over the file's values.

        An override ``model="vpt"`` (a string) replaces only the model name of the file's ``[model]``
        (another architecture drops the file's hyper-parameters); a dict override merges into it.
        """
        from .._shipped import config_path

        path = config_path(path)  # a file, or a shipped name (vpintegrator.training.list_configs())
        values = config_layer.read_toml(path)
        if not values:
            raise VPIntegratorError(
                f"config file {Path(path)}: empty (no keys); expected a vp-train TOML with data = [...] and a "
                "[model] table (see configs/)"
            )
        return cls.from_dict(merge_overrides(values, overrides), source=str(Path(path)))

    def replace(self, **overrides: Any) -> "TrainConfig":
        """A validated copy with ``overrides`` that are not ``None`` applied."""
        config = TrainConfig(**merge_overrides(self.to_dict(), overrides))
        config.validate()
        return config

    # -- validation --------------------------------------------------------------------------------

    def validate(self, source: str = "config") -> None:
        """Check types and ranges (names of optimisers etc. included); raise a one-line error."""

        def bad(key: str, expected: str, got: Any) -> VPIntegratorError:
            return VPIntegratorError(f"{source}: {key} must be {expected}; got {got!r}", key=key)

        def is_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:  # a finite real number (NaN and Inf are never a setting)
            return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                    and math.isfinite(float(v)))

        if isinstance(self.data, (str, os.PathLike)):
            self.data = [self.data]
        if not isinstance(self.data, (list, tuple)) or not self.data:
            raise VPIntegratorError(
                f"{source}: data must list at least one HDF5 file; got {self.data!r} (set data = [...] "
                "in the TOML or give the data files)", key="data"
            )
        if not all(isinstance(p, (str, os.PathLike)) for p in self.data):
            raise bad("data", "a list of file paths", self.data)
        self.data = [str(p) for p in self.data]
        if not isinstance(self.model, dict) or not isinstance(self.model.get("name"), str):
            raise VPIntegratorError(
                f"{source}: model needs a name (one of the registered models, e.g. vpt, vpff, st); got "
                f"{self.model!r} (set model, or add [model] name = ... to the TOML)", key="model"
            )
        if self.out is not None and not isinstance(self.out, (str, os.PathLike)):
            raise bad("out", "a directory path", self.out)
        if self.epochs is not None and (not is_int(self.epochs) or self.epochs < 1):
            raise bad("epochs", "a positive integer", self.epochs)
        if self.time_limit is not None and (not is_num(self.time_limit) or self.time_limit <= 0):
            raise bad("time_limit", "a finite number of seconds > 0", self.time_limit)
        if self.epochs is None and self.time_limit is None:
            raise VPIntegratorError(f"{source}: give epochs or time_limit (or both); neither was set", key="epochs")
        if not is_int(self.batch_size) or self.batch_size < 1:
            raise bad("batch_size", "a positive integer", self.batch_size)
        if not is_num(self.lr) or not self.lr > 0:
            raise bad("lr", "a finite number > 0", self.lr)
        if not is_num(self.lr_min) or not 0 <= self.lr_min <= self.lr:
            raise bad("lr_min", f"a finite number in [0, lr={self.lr}]", self.lr_min)
        if self.optimizer not in list_optimizers():
            raise VPIntegratorError(
                f"{source}: optimizer: unknown optimizer {self.optimizer!r}{_did_you_mean(self.optimizer, list_optimizers())}"
                f"; valid: {', '.join(list_optimizers())}",
                key="optimizer",
            )
        if not isinstance(self.optimizer_kwargs, dict):
            raise bad("optimizer_kwargs", "a table", self.optimizer_kwargs)
        if self.scheduler not in _SCHEDULERS:
            raise VPIntegratorError(
                f"{source}: scheduler: unknown scheduler {self.scheduler!r}{_did_you_mean(self.scheduler, list_schedulers())}"
                f"; valid: {', '.join(list_schedulers())}",
                key="scheduler",
            )
        if self.schedule_per not in SCHEDULE_PER:
            raise bad("schedule_per", " or ".join(map(repr, SCHEDULE_PER)), self.schedule_per)
        if self.decay_epochs is not None and (not is_num(self.decay_epochs) or self.decay_epochs <= 0):
            raise bad("decay_epochs", "a finite number > 0", self.decay_epochs)
        if self.scheduler != "constant" and self.decay_epochs is None and self.epochs is None and self.optimizer != "lm":
            raise VPIntegratorError(
                f"{source}: decay_epochs (the epochs over which lr reaches lr_min) is needed by scheduler "
                f"{self.scheduler!r} with only a time_limit", key="decay_epochs"
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
            raise bad("min_delta", "a finite number >= 0", self.min_delta)
        if not is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise bad("seed", "a non-negative integer (below 2**63)", self.seed)
        if not isinstance(self.device, str):
            raise bad("device", "auto, cpu, cuda or cuda:N", self.device)
        check_device_name(self.device)
        if self.dtype not in DTYPES:
            raise bad("dtype", " or ".join(DTYPES), self.dtype)
        if self.fast_step not in FAST_STEPS:
            raise bad("fast_step", ", ".join(FAST_STEPS), self.fast_step)
        if not is_int(self.checkpoint_every) or self.checkpoint_every < 1:
            raise bad("checkpoint_every", "a positive integer", self.checkpoint_every)
        if not is_num(self.checkpoint_seconds) or self.checkpoint_seconds <= 0:
            raise bad("checkpoint_seconds", "a finite number > 0 (seconds between writes of last.pt)",
                      self.checkpoint_seconds)
        for key in ("lm_windows", "lm_resample_every", "lm_iters_per_epoch"):
            if not is_int(getattr(self, key)) or getattr(self, key) < 1:
                raise bad(key, "a positive integer", getattr(self, key))
        if not is_num(self.init_scale) or not 0 < self.init_scale < math.inf:
            raise bad("init_scale", "a finite number > 0 (factor on the initial weights)", self.init_scale)
        if self.monitor not in MONITORS:
            raise bad("monitor", " or ".join(map(repr, MONITORS)), self.monitor)
        if self.monitor == "val_rollout" and not (is_num(self.val_fraction) and self.val_fraction > 0):
            raise VPIntegratorError(
                f"{source}: monitor = 'val_rollout' rolls out the validation trajectories; set val_fraction > 0 "
                f"(got {self.val_fraction!r}) or monitor = 'val_loss'", key="val_fraction"
            )
        if not is_int(self.val_rollout_steps) or self.val_rollout_steps < 1:
            raise bad("val_rollout_steps", "a positive integer (steps of the validation rollout)", self.val_rollout_steps)
        if not is_int(self.lm_check_windows) or self.lm_check_windows < 0:
            raise bad("lm_check_windows", "a non-negative integer (0: no check set)", self.lm_check_windows)
        if not is_num(self.lm_lambda) or not 0 < self.lm_lambda < math.inf:
            raise bad("lm_lambda", "a finite number > 0 (the initial Levenberg–Marquardt damping)", self.lm_lambda)
        if not is_int(self.unroll) or self.unroll < 1:
            raise bad("unroll", "a positive integer (windows of free rollout per training target; 1: none)",
                      self.unroll)
        if self.init_from is not None and (not isinstance(self.init_from, (str, os.PathLike)) or not str(self.init_from)):
            raise bad("init_from", "a model file, run directory or pretrained:<name>", self.init_from)
        if self.init_from is not None:
            self.init_from = str(self.init_from)
        self._validate_ensemble(source, bad, is_int)

    def _validate_ensemble(self, source: str, bad, is_int) -> None:
        if self.ensemble is not None and (not is_int(self.ensemble) or self.ensemble < 1):
            raise bad("ensemble", "a positive integer (the number of members)", self.ensemble)
        if self.seeds is not None:
            if isinstance(self.seeds, tuple):
                self.seeds = list(self.seeds)
            if (not isinstance(self.seeds, list) or not self.seeds
                    or not all(is_int(s) and 0 <= s < 2**63 for s in self.seeds)):
                raise bad("seeds", "a non-empty list of non-negative integers (below 2**63)", self.seeds)
            self.seeds = [int(s) for s in self.seeds]
            if len(set(self.seeds)) != len(self.seeds):
                raise bad("seeds", "distinct integers (two equal seeds train the same member twice)", self.seeds)
            if self.ensemble is not None and self.ensemble != len(self.seeds):
                raise VPIntegratorError(
                    f"{source}: ensemble = {self.ensemble} but seeds lists {len(self.seeds)} seeds; give one of "
                    "them, or make them agree", key="ensemble"
                )
        if not self.is_ensemble:
            return
        if self.init_from is not None:
            raise VPIntegratorError(
                f"{source}: init_from cannot start an ensemble (every member would start from the same "
                "weights); remove init_from or train the seeds one by one", key="init_from"
            )
        if self.unroll != 1:
            raise VPIntegratorError(
                f"{source}: unroll = {self.unroll} cannot train an ensemble (the ensemble trains one-window "
                "targets); set unroll = 1 or train the seeds one by one", key="unroll"
            )
        if self.fast_step == "compile":
            raise VPIntegratorError(
                f"{source}: fast_step = 'compile' is for single runs (an ensemble's step is vmapped); set "
                "fast_step = 'graph', 'auto' or 'off'", key="fast_step"
            )
        if self.optimizer == "lm":
            raise VPIntegratorError(
                f"{source}: optimizer 'lm' (Levenberg–Marquardt) cannot train an ensemble (its step is not "
                "elementwise per member); use adam, adamw, sgd or rmsprop, or train the seeds one by one",
                key="optimizer",
            )
        if self.optimizer == "lbfgs":
            raise VPIntegratorError(
                f"{source}: optimizer 'lbfgs' cannot train an ensemble (its line search couples the members); "
                "use adam, adamw, sgd or rmsprop, or train the seeds one by one", key="optimizer",
            )

    @property
    def is_ensemble(self) -> bool:
        """Whether this config trains an ensemble (``ensemble`` or ``seeds`` set)."""
        return self.ensemble is not None or self.seeds is not None

    def ensemble_seeds(self) -> list[int]:
        """The members' seeds: ``seeds``, else ``seed, seed + 1, ...`` (``ensemble`` of them), else ``[seed]``."""
        if self.seeds is not None:
            return list(self.seeds)
        return [int(self.seed) + k for k in range(int(self.ensemble or 1))]

    # -- output ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dataclasses.asdict(self))

    def to_toml(self) -> str:
        """The config as TOML (``None`` values are left out: they mean "default")."""
        return config_layer.dump_toml(self.to_dict())


def _did_you_mean(name: Any, valid) -> str:
    """``"; did you mean 'x'?"`` for the closest valid name, or ``""``."""
    import difflib

    close = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def merge_overrides(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the ``overrides`` that are not ``None`` on top.

    ``model``: a string is the model name, a table merges into ``values``' model table; when the name
    changes, the old table's hyper-parameters (they belonged to another architecture) are dropped. An
    empty ``data`` list is "not given".
    """
    merged = copy.deepcopy(dict(values))
    for key, value in overrides.items():
        if value is None or (key == "data" and isinstance(value, (list, tuple)) and not value):
            continue
        if key == "model":
            new = {"name": value} if isinstance(value, str) else dict(value) if isinstance(value, Mapping) else value
            old = merged.get("model")
            if not isinstance(new, dict) or not isinstance(old, Mapping):
                merged["model"] = copy.deepcopy(new)
                continue
            old = dict(old) if new.get("name") in (None, old.get("name")) else {}
            merged["model"] = config_layer.merge(old, new)
        else:  # other tables (optimizer_kwargs) are replaced whole, as in the TOML
            merged[key] = copy.deepcopy(value)
    return merged
