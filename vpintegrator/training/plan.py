"""The plan of a training run: ``build_plan`` turns the config (a
[`TrainConfig`][vpintegrator.training.TrainConfig], a dict, a TOML file, a resumed run's ``config.toml``,
or the settings beside [`fit`][vpintegrator.training.fit]'s objects) into a frozen, typed
``TrainPlan`` once, every check and default resolved there; nothing
below it reads a config. ``prepare`` then turns the plan into what the loop trains: the data (read through
the one shard reader, its system checked), the model of every member (paper defaults for keys left out,
``dim`` from the data, the initial-weight scale), the record ``config.toml`` keeps and the window sets."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from .config import RESUMABLE_KEYS, TrainConfig, merge_overrides
from .validation import RolloutValidator

#: what ``config.toml`` records as the data of a run trained from objects (``vpintegrator.training.inputs``)
IN_MEMORY = "<in memory>"


@dataclass(frozen=True)
class DataPlan:
    """The data ``files`` (``(IN_MEMORY,)`` for objects), the trajectory split, the windows' stride and
    ``unroll`` (targets of that many model windows) and the ``observe`` spec (None: the whole state;
    ``vpintegrator.data.observation``)."""

    files: tuple[str, ...]
    split_by: str
    val_fraction: float
    test_fraction: float
    split_seed: int
    stride: int
    unroll: int
    observe: str | None = None
    step: float | None = None  # train at this step: every (step / dt)-th state of the data (``subsample``)
    normalise: str = "auto"  # the conjugation the model trains and rolls out in (``normalised``)


@dataclass(frozen=True)
class ModelPlan:
    """The ``[model]`` table (``hparams``, ``name`` included) and the initial weights' source or scale."""

    hparams: Mapping[str, Any]
    init_from: str | None
    init_scale: float


@dataclass(frozen=True)
class LMPlan:
    """Levenberg–Marquardt: the ``lm_*`` keys (``lam``: the initial damping ``lm_lambda``)."""

    windows: int
    resample_every: int
    iters_per_epoch: int
    lam: float
    check_windows: int


@dataclass(frozen=True)
class OptimPlan:
    """The optimiser ``name`` and ``kwargs``, the schedule between ``rates`` (``TrainConfig.learning_rates``:
    with ``init_from`` the fine-tuning rates; ``lr`` the config's, for messages) over ``decay_epochs``
    (resolved: default ``epochs``), the batch size, the fast-step mode."""

    name: str
    kwargs: Mapping[str, Any]
    lr: float
    rates: tuple[float, float]
    fine_tunes: bool
    default_finetune_lr: bool
    scheduler: str
    schedule_per: str
    decay_epochs: float | None
    batch_size: int
    fast_step: str
    lm: LMPlan
    loss: str = "relative"  # or "relative_squared" (the ``loss`` key)


@dataclass(frozen=True)
class StopPlan:
    """When training stops (epochs, wall and CPU budgets, patience) and what it watches (``monitor``, the
    validation rollout's steps, error and drift weight)."""

    epochs: int | None
    time_limit: float | None
    cpu_time_limit: float | None
    patience: int
    min_delta: float
    monitor: str
    rollout_steps: int
    rollout_error: str
    rollout_drift_weight: float
    #: the plateau rule's relative improvement (``min_rel_delta``) and the step budget (``max_steps``)
    min_rel_delta: float = 0.0
    max_steps: int | None = None
    judge_start: bool = False  # the initial weights judged as epoch 0

    def rule(self) -> dict[str, Any]:
        """The run's stop rule as ``summary.json`` records it (``stop_rule``): every key that can stop it,
        None where unset (``patience`` 0: no plateau rule)."""
        return {"epochs": self.epochs, "time_limit": self.time_limit, "cpu_time_limit": self.cpu_time_limit,
                "max_steps": self.max_steps, "patience": self.patience, "min_delta": self.min_delta,
                "min_rel_delta": self.min_rel_delta, "monitor": self.monitor}


@dataclass(frozen=True)
class OutputPlan:
    """The run directory ``out`` (absolute; None: nothing written), the run it continues (``resume``), the
    checkpoint periods and the ``logger``."""

    out: str | None
    resume: Path | None
    checkpoint_every: int
    checkpoint_seconds: float
    logger: str


@dataclass(frozen=True)
class TrainPlan:
    """A training run, resolved: its parts, the members' ``seeds`` (``ensemble``: trained as one), the global
    ``seed``, ``device`` and ``dtype``. ``values`` are the config's keys as plain data, what ``config.toml``
    records (``resolved_record``); nothing reads settings from them."""

    data: DataPlan
    model: ModelPlan
    optim: OptimPlan
    stop: StopPlan
    output: OutputPlan
    seeds: tuple[int, ...]
    seed: int
    ensemble: bool
    device: torch.device
    dtype: str
    values: Mapping[str, Any]

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype == "float64" else torch.float32


def build_plan(config: TrainConfig | dict[str, Any] | str | os.PathLike[str] | None = None, *,
               resume: str | os.PathLike[str] | None = None, overwrite: bool = False, objects: bool = False,
               module: torch.nn.Module | None = None, **overrides: Any) -> TrainPlan:
    """The ``TrainPlan`` of ``fit(config, resume=..., **overrides)``
    (see [`fit`][vpintegrator.training.fit]); ``objects``: the run trains on objects (its data
    ``IN_MEMORY``; ``module`` the user's model, else ``overrides["model"]`` names one). Every check of the
    config, the run directory and the resume is here (one-line ``VPIntegratorError``)."""
    from .._shipped import config_path

    if not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True or False; got {overwrite!r}", key="overwrite")
    config_file = None
    if isinstance(config, (str, os.PathLike)):
        config = config_file = config_path(config)  # a file, or a shipped config by name
    run_dir = None
    cfg: TrainConfig | None
    if objects and resume is None:
        cfg = _objects_config(config, module, overrides)
    else:  # (objects resumed: the run's config.toml; the objects given again are its data)
        if config is None or isinstance(config, TrainConfig):
            cfg = config
        else:
            if isinstance(config, dict):
                cfg = TrainConfig.from_dict(merge_overrides(config, overrides))
            else:
                cfg = TrainConfig.from_toml(config, **overrides)
            overrides = {}
        if resume is not None:
            if overwrite:
                raise VPIntegratorError(f"resume {resume} with overwrite: a resumed run continues its directory; give "
                                        "one of them", key="resume")
            run_dir = Path(resume)
            from .results import is_ensemble_member

            if is_ensemble_member(run_dir):
                raise VPIntegratorError(
                    f"resume {run_dir}: a member of an ensemble is resumed with its ensemble; give resume = "
                    f"{run_dir.parent} (every member continues from the ensemble's last checkpoint)", key="resume")
            if overrides.get("ensemble") is not None or overrides.get("seeds") is not None:
                raise VPIntegratorError(
                    f"resume {run_dir}: ensemble or seeds with resume; a resumed run keeps its members (an ensemble "
                    "resumes with all of its own): give resume alone", key="resume")
            cfg = resumed(run_dir, None if cfg is None else cfg.to_dict(), overrides)
            if IN_MEMORY in cfg.data and not objects:
                raise VPIntegratorError(
                    f"resume {run_dir}: the run was trained from objects (data {IN_MEMORY}), not files; give them "
                    "again: fit(model=..., train=..., resume=...)", key="resume")
        else:
            if cfg is None:
                raise VPIntegratorError("fit: give a config (TrainConfig, dict or TOML path) or resume=RUN_DIR")
            cfg = cfg.replace(**overrides) if overrides else cfg
            out = Path(cfg.out) if cfg.out is not None else ckpt_io.default_out(cfg.model["name"])
            cfg = cfg.replace(out=str(out.resolve()))
            from .._io import check_not_input

            check_not_input(cfg.out, [*cfg.data, config_file], key="out")
    from ..device import resolve_device

    decay = cfg.decay_epochs if cfg.decay_epochs is not None or cfg.epochs is None else float(cfg.epochs)
    return TrainPlan(
        data=DataPlan(tuple(str(p) for p in cfg.data), cfg.split_by, float(cfg.val_fraction),
                      float(cfg.test_fraction), int(cfg.split_seed), int(cfg.stride), int(cfg.unroll),
                      cfg.observe, None if cfg.step is None else float(cfg.step), cfg.normalise),
        model=ModelPlan(dict(cfg.model), cfg.init_from, float(cfg.init_scale)),
        optim=OptimPlan(cfg.optimizer, dict(cfg.optimizer_kwargs), float(cfg.lr), cfg.learning_rates(),
                        cfg.fine_tunes, cfg.fine_tunes and cfg.finetune_lr is None, cfg.scheduler,
                        cfg.schedule_per, decay, int(cfg.batch_size), cfg.fast_step,
                        LMPlan(int(cfg.lm_windows), int(cfg.lm_resample_every), int(cfg.lm_iters_per_epoch),
                               float(cfg.lm_lambda), int(cfg.lm_check_windows)), cfg.loss),
        stop=StopPlan(cfg.epochs, cfg.time_limit, cfg.cpu_time_limit, int(cfg.patience), float(cfg.min_delta),
                      cfg.monitor, int(cfg.val_rollout_steps), cfg.val_rollout_error,
                      float(cfg.val_rollout_drift_weight), float(cfg.min_rel_delta),
                      None if cfg.max_steps is None else int(cfg.max_steps), bool(cfg.judge_start)),
        output=OutputPlan(cfg.out, run_dir, int(cfg.checkpoint_every), float(cfg.checkpoint_seconds),
                          cfg.logger or "none"),
        seeds=tuple(cfg.ensemble_seeds()), seed=int(cfg.seed), ensemble=cfg.is_ensemble,
        device=resolve_device(cfg.device), dtype=cfg.dtype, values=cfg.to_dict())


def _objects_config(given: TrainConfig | dict[str, Any] | str | os.PathLike[str] | None, module: torch.nn.Module | None,
                    overrides: dict[str, Any]) -> TrainConfig:
    """The settings of a run on objects: ``given``'s keys (its data files are not read), ``overrides`` on
    top, the data ``IN_MEMORY``; a ``module``'s name as the model's."""
    if isinstance(given, (str, os.PathLike)):
        values = TrainConfig.from_toml(given).to_dict()
    elif isinstance(given, TrainConfig):
        values = given.to_dict()
    elif isinstance(given, dict) or given is None:
        values = dict(given or {})
    else:
        raise VPIntegratorError(f"fit: config must be a TrainConfig, a dict or a TOML path; got {type(given).__name__}")
    if module is not None:
        described = getattr(module, "config", None)
        name = described.get("name") if isinstance(described, dict) else None
        values["model"] = {"name": name or type(module).__name__}
    if overrides.get("data"):
        raise VPIntegratorError("fit: give data either as files (data) or as train/val objects, not both",
                                key="data")
    values.pop("data", None)  # the objects are the data (a config's files, e.g. a shipped recipe's, are not read)
    values = merge_overrides(values, overrides)
    values["data"] = [IN_MEMORY]
    cfg = TrainConfig.from_dict(values)
    cfg.validate()
    if cfg.out is not None:  # a user's own module too: its best.pt/last.pt load with load_model(..., into=module)
        cfg = cfg.replace(out=str(Path(cfg.out).resolve()))
    return cfg


def resumed(run_dir: Path, given: dict[str, Any] | None, overrides: dict[str, Any]) -> TrainConfig:
    """The settings of the run in ``run_dir`` (its ``config.toml``) with the allowed changes
    (``RESUMABLE_KEYS``) applied.

    ``given`` (a config's keys), if given, must agree with the run's on every other key. A run whose
    ``config.toml`` has no ``test_fraction`` (made before the test split existed) keeps its two-way split:
    ``test_fraction = 0``; one without ``split_seed`` (made when the split was ``seed``'s) keeps its split:
    ``split_seed = seed``.
    """
    from .. import config as config_layer

    path = run_dir / "config.toml"
    if not run_dir.is_dir() or not path.is_file():
        raise VPIntegratorError(
            f"resume {run_dir}: not a run directory (no config.toml); give a directory written by vp-train",
            key="resume",
        )
    saved = TrainConfig.from_toml(path)  # its relative paths resolved against run_dir
    keys = set(config_layer.read_toml(path))
    legacy = "test_fraction" not in keys
    if legacy:  # a run made before the test split: it resumes with its own split (whatever config says)
        saved = saved.replace(test_fraction=0.0)
    seeded_split = "split_seed" not in keys
    if seeded_split:  # a run made when seed drew the split: it resumes with its own split
        saved = saved.replace(split_seed=saved.seed)
    if "normalise" not in keys:  # a run made before normalisation trained on the raw states: it goes on so
        saved = saved.replace(normalise="off")
    missing = [p for p in saved.data if not str(p).startswith("<") and not Path(p).exists()]  # "<in memory>": fit's check
    if missing:
        raise VPIntegratorError(
            f"resume {run_dir}: data file {missing[0]} not found (config.toml gives the data relative to the run "
            "directory); move or copy the run directory together with its data, or correct data in "
            f"{path}", key="resume",
        )
    if given is not None:
        theirs, ours = saved.to_dict(), given
        for key in TrainConfig.keys():
            if (key in RESUMABLE_KEYS or key == "decay_epochs" or (key == "test_fraction" and legacy)
                    or (key == "split_seed" and seeded_split)):
                continue
            if key == "data":
                same = [str(Path(p).resolve()) for p in ours[key]] == theirs[key]
            elif key == "model":
                same = all(theirs["model"].get(k) == v for k, v in ours["model"].items())
            else:
                same = ours[key] == theirs[key]
            if not same:
                raise VPIntegratorError(
                    f"resume {run_dir}: {key} differs from the run's ({theirs[key]!r} there, {ours[key]!r} "
                    f"here); only {', '.join(RESUMABLE_KEYS)} may change, or start a new run",
                    key="resume",
                )
        overrides = {k: given[k] for k in RESUMABLE_KEYS if k != "out"} | overrides
    bad = sorted(k for k, v in overrides.items() if v is not None and k not in RESUMABLE_KEYS)
    if bad:
        raise VPIntegratorError(
            f"resume {run_dir}: cannot change {', '.join(bad)} of a run; only {', '.join(RESUMABLE_KEYS)} "
            "may change (start a new run in another out directory for the others)",
            key="resume",
        )
    return saved.replace(**{**overrides, "out": str(run_dir)})


# -- what the loop trains (the plan's data, models and windows) ---------------------------------------


def load_data(files: tuple[str, ...] | list[str]):
    """``(data_paths, Trajectories)``: the data ``files`` read as one data set; data whose system the rest
    of the package would refuse (unknown system) is refused here too."""
    from ..data.windows import load_trajectories

    data_paths = [str(Path(p).expanduser().resolve()) for p in files]
    data = load_trajectories(data_paths)
    if data.meta.get("system") is not None or data.meta.get("system_class") is not None:
        from ..systems import system_from_meta

        system_from_meta(data.meta, where=", ".join(data_paths))
    return data_paths, data


def check_data_scale(y: Any, dtype: str, where: str, key: str = "data") -> None:
    """Refuse states so large that training in ``dtype`` can only end in NaN: the loss squares them, and past
    ``sqrt(finfo(dtype).max) / 1e4`` (float64 ~1.3e150, float32 ~1.8e15) the squares (and the products in the
    network) overflow whatever the learning rate; one line naming ``key`` and ``where`` says to rescale the data."""
    a = np.asarray(y)
    if a.size == 0:
        return
    scale = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 0.0
    limit = math.sqrt(float(np.finfo(np.float64 if dtype == "float64" else np.float32).max)) / 1e4
    if scale > limit:
        raise VPIntegratorError(
            f"{key}: {where}: the states reach {scale:.3g} in magnitude; in {dtype} the loss squares them past "
            f"{limit:.2g} and overflows, so training would end in NaN whatever the learning rate: rescale the data "
            f"(divide the states by a typical magnitude, e.g. {10 ** math.floor(math.log10(scale)):.0e}) and train "
            "on that", key=key)


def build_model(hparams: Mapping[str, Any], dim: int, where: str, dt: float | None = None):
    """The model of the ``[model]`` table ``hparams`` (registered defaults for keys left out, ``dim`` from the data) and its name.

    A model whose constructor takes ``dt`` (the learned vector fields, ``vpintegrator.models.vector_field``:
    their window map integrates over the data's step) gets the data's ``dt`` when its ``[model]`` table
    gives none.

    The ``[model]`` name is a registry name or ``"package.module:ClassName"`` (a user's class; the model's
    config, and so ``config.toml`` and every checkpoint, records it as ``model_class``)."""
    from .. import models

    from ..config import did_you_mean
    from ..plugins import is_class_path

    model_cfg = dict(hparams)
    name = model_cfg.pop("name")
    source = model_cfg.get("model_class", name)  # a run's config.toml records a user's class there
    if not is_class_path(source) and source not in models.list_models():
        raise VPIntegratorError(
            f"model name: unknown model {name!r}{did_you_mean(name, models.list_models())}; valid: "
            f"{', '.join(models.list_models())} (or your own model class as 'package.module:ClassName')",
            key="model",
        )
    model_cfg = {**models.default_model_config(source), **model_cfg}
    model_cfg.setdefault("dim", dim)
    _fill_dt(model_cfg, source, dt, where)
    model = models.build_model(name, **model_cfg)
    if int(getattr(model, "dim")) != dim:  # a module attribute (torch types it Tensor | Module)
        raise VPIntegratorError(
            f"model dim = {model.dim} but the data ({where}) has dim = {dim}; set the model's dim to {dim} "
            "or use matching data", key="model"
        )
    described = getattr(model, "config", None)  # a class by import path: its registry name, if it has one
    return model, str(described.get("name", name)) if isinstance(described, dict) else name


def _fill_dt(model_cfg: dict[str, Any], source: str, dt: float | None, where: str) -> None:
    """``model_cfg["dt"]`` from the data for a class whose constructor takes ``dt`` (a vector-field model)."""
    import inspect

    from .. import models

    if model_cfg.get("dt") is not None or "dt" not in inspect.signature(models.model_class(source).__init__).parameters:
        return
    if dt is not None:  # windows without a step: the class default (0.1), or the [model] key dt
        model_cfg["dt"] = float(dt)


def new_model(plan: ModelPlan, optim: OptimPlan, seed: int, dim: int, where: str, device, dtype, dt: float | None = None):
    """``(model, name)``: the model ``fit(seed=seed)`` initialises (global RNGs seeded with ``seed``), on
    ``device`` in ``dtype``, its weights times ``init_scale`` (not orthogonality-constrained ones); ``dt``
    the data's step (see ``build_model``)."""
    ckpt_io.seed_everything(seed)
    model, name = build_model(plan.hparams, dim, where, dt)
    model = model.to(device=device, dtype=dtype)
    if plan.init_from is not None:
        _load_initial_weights(model, name, plan.init_from)
        if optim.default_finetune_lr:
            import logging

            logging.getLogger(__name__).warning(
                "init_from %s: fine-tuning at lr = %g (lr_min; not lr = %g: a fresh optimiser at the from-scratch "
                "rate undoes the pretrained weights); set finetune_lr to choose the rate", plan.init_from,
                optim.rates[0], optim.lr)
    elif plan.init_scale != 1.0:
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "parametrizations." not in pname:
                    p.mul_(plan.init_scale)
    return model, name


def _load_initial_weights(model, name: str, source: str) -> None:
    """``init_from``: copy the weights of the model file ``source`` into ``model`` (same architecture)."""
    from ..models import load_checkpoint

    payload = load_checkpoint(source)
    theirs = _complete_config(dict(payload["config"]))
    ours = {"name": name, **model.config}
    diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if diff:
        k = diff[0]
        raise VPIntegratorError(
            f"init_from {source}: its model has {k} = {theirs.get(k)!r} but the configured model has "
            f"{k} = {ours.get(k)!r}; configure the same architecture (its config: {theirs})", key="init_from"
        )
    model.load_state_dict(payload["state_dict"])  # copies into the model's own dtype and device


def _complete_config(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved model config with the class defaults for the keys it lacks (a file written before a key
    existed, e.g. the shipped ``rigid_body_vpt``'s without ``symmetric``): the config its model is built
    with (as [`load_model`][vpintegrator.models.load_model] builds it); ``saved`` as it is when it builds nothing."""
    from .. import models

    cfg = dict(saved)
    name = cfg.pop("name", None)
    try:
        built = models.build_model(name, **cfg)
    except (VPIntegratorError, TypeError, ValueError):
        return saved
    return {"name": name, **dict(getattr(built, "config", {}) or {})}


def _data_dt(data) -> float | None:
    """The data's uniform step, or None."""
    try:
        dt = getattr(data, "dt", None)
        return None if dt is None else float(dt)
    except (TypeError, ValueError, VPIntegratorError):
        return None


def check_model(model: torch.nn.Module, name: str, dim: int, dtype, device) -> tuple[int, int]:
    """``(seq_len, pred_window)`` of a model about to be trained, after the checks a user's class may fail, each
    one line (``key`` model): integer ``seq_len`` (and ``pred_window`` if it declares one), at least one
    parameter, and one forward pass of a zero window (1, seq_len, dim) that gives (1, pred_window, dim) (an
    exception there: ``vpintegrator.plugins.user_code``)."""
    from ..plugins import user_code

    cls = type(model).__name__
    seq_len = getattr(model, "seq_len", None)
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
        raise VPIntegratorError(f"model {name} ({cls}) needs an integer attribute seq_len >= 1 (the input window "
                                f"length); got {seq_len!r}", key="model")
    if sum(p.numel() for p in model.parameters()) == 0:
        raise VPIntegratorError(f"model {name} ({cls}) has no parameters: nothing to train; give it parameters "
                                "(torch.nn.Parameter attributes or layers)", key="model")
    declared = getattr(model, "pred_window", None)
    if declared is not None and (isinstance(declared, bool) or not isinstance(declared, (int, np.integer))
                                 or declared < 1):
        raise VPIntegratorError(f"model {name} ({cls}) has pred_window = {declared!r}; it must be an integer >= 1 "
                                "(the states one call predicts)", key="model")
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), user_code(model, f"map a (1, {seq_len}, {dim}) window (a forward pass)"):
            out = model(torch.zeros(1, int(seq_len), dim, dtype=dtype, device=device))
    finally:
        model.train(was)
    want = f"(1, {declared if declared is not None else 'pred_window'}, {dim})"
    if not isinstance(out, torch.Tensor) or out.ndim != 3 or out.shape[0] != 1 or out.shape[2] != dim or (
            declared is not None and out.shape[1] != declared) or out.shape[1] < 1:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise VPIntegratorError(f"model {name} ({cls}) maps a (1, {seq_len}, {dim}) window to {shape}; expected "
                                f"{want}: a model maps (batch, seq_len, dim) to (batch, pred_window, dim)", key="model")
    return int(seq_len), int(out.shape[1])


def check_windows_fit(name: str, seq_len: int, pred_window: int, n_states: int, where: str) -> None:
    span = seq_len + pred_window
    if span > n_states:
        raise VPIntegratorError(
            f"model {name!r}: seq_len + pred_window = {seq_len} + {pred_window} = {span} exceeds the "
            f"n_states = {n_states} of the data ({where}); use longer trajectories or shorter windows",
            key="model",
        )


def resolved_record(plan: TrainPlan, data_paths: list[str], model, name: str, **extra: Any) -> dict[str, Any]:
    """What ``config.toml`` records: the plan's ``values`` with the data paths, the model's full
    hyper-parameters and the decay horizon (``extra``: an ensemble's ``seeds`` and ``ensemble``)."""
    resolved_model = {"name": name, **dict(getattr(model, "config", {}) or {})}
    resolved_model["name"] = name
    record = {**dict(plan.values), "data": list(data_paths), "model": resolved_model, **extra}
    record["decay_epochs"] = plan.optim.decay_epochs
    return record


def trajectory_split(cut: DataPlan, data) -> tuple[Any, Any, Any, str | None]:
    """``(train_idx, val_idx, test_idx, split_by or None)``: the trajectory split of ``data`` by ``cut``'s
    rule (``split_seed``, never the run's ``seed``): a permutation by initial condition, or held-out
    parameters of a parametric data set (``split_by`` then the record's)."""
    from ..data.windows import split_train_val_test

    if cut.split_by == "initial_conditions":
        return (*split_train_val_test(data.n_traj, cut.val_fraction, cut.test_fraction, cut.split_seed), None)
    from ..rollout.splits import parameter_split  # hold out parameters of a parametric data set

    record = parameter_split(data, cut.split_by.removeprefix("parameters_"), cut.test_fraction, cut.val_fraction,
                             cut.split_seed)
    train_idx, val_idx, test_idx = (np.asarray(record["split"][k], dtype=np.int64) for k in ("train", "val", "test"))
    return train_idx, val_idx, test_idx, record["split_by"]


def subsample(data, step: float, where: str):
    """``data`` at the step ``step``: every (step / dt)-th state; one line (key ``step``) when ``step`` is not a
    multiple of the data's step dt."""
    from ..data.trajectories import Trajectories

    dt = float(data.dt)
    ratio = step / dt
    k = int(round(ratio))
    if k < 1 or abs(ratio - k) > 1e-9 * max(1.0, ratio):
        raise VPIntegratorError(f"step = {step:g} is not a multiple of the step {dt:g} of {where}; give a multiple "
                                f"(e.g. {max(k, 1) * dt:g})", key="step")
    if k == 1:
        return data
    if data.n_states < 2 * k:
        raise VPIntegratorError(f"step = {step:g}: {where} has {data.n_states} states at dt = {dt:g}, fewer than two "
                                f"at step {step:g}; give a smaller step or longer trajectories", key="step")
    sub = data.select(steps=slice(None, None, k))
    meta = {**data.meta, "dt": float(k * dt), "n_states": sub.n_states, "n_steps": sub.n_states - 1}
    failed = None if sub.failed_step is None else np.where(sub.failed_step >= 0, -(-sub.failed_step // k), -1)
    return Trajectories(y=sub.y, t=sub.t, meta=meta, failed_step=failed, params=sub.params,
                        param_names=sub.param_names)


def observed_data(cut: DataPlan, data, where: str):
    """``(data, full, observation)``: what training sees under ``cut.observe``
    (``vpintegrator.data.observation``): the observed channels of ``data`` (``full`` the data as read), or
    ``data`` itself when it holds observed channels only (its recorded observation must be ``cut.observe``'s,
    when given), or ``data`` with ``full`` and ``observation`` None (the whole state). A kind that
    ``fits_on_training_split`` (``basis:K``, ``psd:K``) is fitted on the training split's states."""
    from ..data.observation import kind_of, observation_of, observe_trajectories, resolve_observation
    from ..data.trajectories import state_names
    from ..reduction import observation as _reductions  # noqa: F401  (registers psd:K, psd_balanced:K, file:PATH)

    if cut.step is not None:
        data = subsample(data, cut.step, where)
    held = observation_of(data.meta)
    if held is not None:  # a file of observed channels: used as it is
        if cut.observe is not None and not held.spelled_by(cut.observe):  # the same channels, however spelled
            raise VPIntegratorError(f"observe {cut.observe!r}: {where} holds the observed channels of observation "
                                    f"{held.describe()} only; give observe = {held.spec!r} (or leave it out), or data "
                                    "with the full state", key="observe")
        return data, None, held
    if cut.observe is None:
        return data, None, None
    system = data.meta.get("system")
    train_states = None
    if kind_of(cut.observe).fits_on_training_split:  # basis:K, psd:K: fitted on the training split
        train_states = np.asarray(data.y)[trajectory_split(cut, data)[0]]
    named: Any = system  # the system as the data file made it (its size: the names of a lattice's components)
    if system is not None:
        from ..systems.registry import system_from_meta

        try:
            named = system_from_meta(data.meta)
        except VPIntegratorError:
            pass
    observation = resolve_observation(cut.observe, data.dim, state_names(named, data.dim),
                                      None if system is None else str(system), train_states)
    assert observation is not None  # (cut.observe is a spec, not "the whole state")
    return observe_trajectories(data, observation), data, observation


def normalised(plan: TrainPlan, model, name: str, train_states, period=None):
    """``(normalisation or None, record)``: the conjugation ``plan.data.normalise`` gives ``model``
    (``vpintegrator.models.normalise.resolve_normalisation``) on the training split's ``train_states``; with
    ``init_from``, the one its model steps in (a model fine-tuned in other coordinates would start from weights
    that mean something else). ``record`` goes to ``summary.json`` and every checkpoint (``normalisation``);
    one log line says what was applied, or why not."""
    import logging

    from ..models.normalise import Normalisation, resolve_normalisation

    mode, stop = plan.data.normalise, plan.stop
    if plan.model.init_from is not None:
        from ..models import load_checkpoint

        parent = load_checkpoint(plan.model.init_from).get("normalisation")
        if isinstance(parent, dict) and parent.get("applied"):
            if mode == "off":
                raise VPIntegratorError(f"normalise = 'off': init_from {plan.model.init_from} steps in normalised "
                                        f"coordinates ({Normalisation.from_record(parent).describe()}); leave "
                                        "normalise at 'auto' to fine-tune in them", key="normalise")
            norm, record = Normalisation.from_record(parent), {**parent, "mode": mode,
                                                                "reason": f"from init_from {plan.model.init_from}"}
        elif mode not in ("auto", "off"):
            raise VPIntegratorError(f"normalise = {mode!r}: init_from {plan.model.init_from} was trained on the raw "
                                    "states; fine-tune with normalise = 'auto' or 'off' (or train afresh)",
                                    key="normalise")
        else:
            norm, record = None, {"mode": mode, "applied": False,
                                  "reason": f"init_from {plan.model.init_from} was trained on the raw states"}
    else:
        norm, record = resolve_normalisation(mode, model, train_states, f"model {name}", period)
    if norm is not None and stop.monitor == "val_rollout" and stop.rollout_drift_weight > 0:
        why = "val_rollout_drift_weight > 0 scores the system's invariants, which need the raw states"
        if mode != "auto":
            raise VPIntegratorError(f"normalise = {mode!r}: {why}; set val_rollout_drift_weight = 0 or normalise = "
                                    "'off'", key="normalise")
        norm, record = None, {"mode": mode, "applied": False, "reason": why}
    text = f"normalise {mode}: " + (f"applied {norm.describe()} ({record['reason']})" if norm is not None
                                    else f"not applied: {record['reason']}")
    quiet = norm is None and record["reason"] in ("the training states are unit-scale", "normalise = 'off'")
    logging.getLogger(__name__).log(logging.DEBUG if quiet else logging.INFO, text)
    return norm, record


def window_sets(plan: TrainPlan, data, data_paths: list[str], seq_len: int, pred_window: int, device, *, full=None,
                observation=None, model=None, name: str = "model"):
    """``(train_set, val_set or None, rollout_validator or None, data_info)``: windows over the
    trajectory split (``plan.data.split_seed``, never ``plan.seed``; the test trajectories get no window), the validation rollout when
    ``monitor = "val_rollout"``, and the data summary for ``summary.json`` (with ``split``, see
    ``split_record``). The windows' targets span ``plan.data.unroll`` model windows. On observed data
    (``observed_data``), ``full`` is the data as read and ``observation`` what training sees of it. With
    ``model`` (the first member; ``name`` its name), the windows and the validation rollout are in the
    coordinates ``normalised`` chooses for it (``data_info["normalisation"]`` says which)."""
    from ..data.windows import WindowDataset, states_tensor

    cut, stop = plan.data, plan.stop
    train_idx, val_idx, test_idx, split_by = trajectory_split(cut, data)
    norm, norm_record = None, None
    if model is not None:
        from ..data.trajectories import state_periods

        train_states = np.asarray(data.y)[train_idx] if cut.normalise != "off" else None
        period = None if observation is not None else state_periods(data.system, data.dim, data.meta)
        norm, norm_record = normalised(plan, model, name, train_states, period)
    shift = norm.window_shift if norm is not None and norm.wraps else None
    if norm is not None and shift is not None and cut.unroll > 1:
        raise VPIntegratorError(f"unroll = {cut.unroll} with periodic components wrapped ({norm.describe()}): the "
                                "unrolled calls are not wrapped; set unroll = 1 (or normalise = 'off')", key="unroll")
    if norm is None:
        y = states_tensor(data, plan.dtype, device)  # (n_traj, n_states, dim), shared by both window sets
    else:  # mapped in float64, then cast: the windows hold the normalised states
        y = torch.as_tensor(norm.to_model(np.asarray(data.y, dtype=np.float64)), dtype=plan.torch_dtype,
                            device=device)
    target = pred_window * cut.unroll
    train_set = WindowDataset(y, seq_len, target, cut.stride, train_idx, shift=shift)
    val_set = WindowDataset(y, seq_len, target, cut.stride, val_idx, shift=shift) if len(val_idx) else None
    validator = None
    if stop.monitor == "val_rollout":
        from .. import resources

        # the reference (continued beyond the data), its copy in the model's dtype, and per member the
        # predicted states and their errors: (n_val, val_rollout_steps + 1, dim) float64 each
        members = len(plan.seeds)
        states = float(len(val_idx)) * (stop.rollout_steps + 1) * data.dim
        resources.check_memory(
            8.0 * states * (3 + 2 * members),
            f"validation rollouts of val_rollout_steps = {stop.rollout_steps} steps from {len(val_idx)} "
            f"trajectories", "give a smaller val_rollout_steps (or a smaller val_fraction)", key="val_rollout_steps")
        # on observed data, the reference is continued in the full state (where the file has it), then observed;
        # a normalised model is scored in its coordinates (the reference mapped in after the observation)
        observe = None if full is None or observation is None else observation.apply
        if norm is not None:
            observe = norm.to_model if observe is None else (lambda y, first=observe: norm.to_model(first(y)))
        validator = RolloutValidator((data if full is None else full).select(traj=val_idx), stop.rollout_steps,
                                     seq_len, pred_window, stop.rollout_error, stop.rollout_drift_weight,
                                     observe=observe, call=None if norm is None else norm.call)
    info = {
        "sources": data_paths,
        "system": data.meta.get("system"),
        "n_traj": data.n_traj,
        "n_train_traj": int(len(train_idx)),
        "n_val_traj": int(len(val_idx)),
        "n_test_traj": int(len(test_idx)),
        "n_states": data.n_states,
        "n_steps": data.n_steps,
        "dim": data.dim,
        "train_windows": len(train_set),
        "val_windows": 0 if val_set is None else len(val_set),
        **split_record(data if full is None else full, train_idx, val_idx, test_idx),  # (the file's states)
        "split_seed": int(cut.split_seed),
        **({"split_by": split_by} if split_by is not None else {}),
        **system_record(data, observation),
        **({} if norm_record is None else {"normalisation": norm_record}),
    }
    return train_set, val_set, validator, info


#: the keys of ``system_record`` and the coordinates (``normalised``): what a checkpoint and ``summary.json`` say the
#: model was trained on (``model.trained_on``)
SYSTEM_KEYS = ("dt", "system", "system_params", "parametric", "observation", "normalisation")


def _plain(value: Any) -> Any:
    """A metadata value as plain JSON/torch-loadable data (NumPy scalars and arrays as numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def system_record(data, observation=None) -> dict[str, Any]:
    """What the model is trained on, for every checkpoint and ``summary.json``: ``{"dt": float or None,
    "system": name or None, "system_params": {name: value} (the data's ``param_<name>`` attributes; empty
    for a parametric data set, whose parameters vary per trajectory), "parametric": bool}``. ``vp-rollout``
    refuses a model whose step or system differs from its data's (``vpintegrator.rollout.methods.check_trained_on``)."""
    from ..systems.registry import system_params_from_meta

    meta = getattr(data, "meta", None) or {}
    parametric = getattr(data, "params", None) is not None
    dt = getattr(data, "dt", None)
    try:
        dt = None if dt is None else float(dt)
    except (TypeError, ValueError):
        dt = None
    params = {} if parametric else {str(k): _plain(v) for k, v in system_params_from_meta(meta).items()}
    system = meta.get("system") or meta.get("observed_system") or None  # observed data: the system observed
    return {"dt": dt, "system": None if system is None else str(system), "system_params": params,
            "parametric": bool(parametric), "observation": None if observation is None else observation.record()}


def split_record(data, train_idx, val_idx, test_idx) -> dict[str, Any]:
    """The run's trajectory split as recorded in ``summary.json`` and in every checkpoint: ``{"split":
    {"train": [...], "val": [...], "test": [...]}, "split_data": {"n_traj", "first_states_sha256"}}``.
    ``split`` holds sorted trajectory indices into the training data (its files concatenated in the order
    given); ``split_data`` identifies the trajectories the indices refer to
    (``vpintegrator.data.trajectories.first_states_digest`` of their initial states): ``vp-rollout`` applies
    the split only to data with the same initial conditions in the same order."""
    import numpy as np

    from ..data.trajectories import first_states_digest

    return {
        "split": {"train": [int(i) for i in train_idx], "val": [int(i) for i in val_idx],
                  "test": [int(i) for i in test_idx]},
        "split_data": {"n_traj": int(data.n_traj),
                       "first_states_sha256": first_states_digest(np.asarray(data.y[:, 0]))},
    }


@dataclass
class Prepared:
    """What the loop trains: the members' models (one for a single run), the model's name, the record
    ``config.toml`` keeps (``resolved_record``), the window sets, the rollout validator and the data summary."""

    models: list
    name: str
    record: dict[str, Any]
    train_set: Any
    val_set: Any
    validator: Any
    data_info: dict[str, Any]


def check_training_memory(plan: TrainPlan, dim: int, n_members: int = 1, max_windows: int | None = None) -> None:
    """Refuse (one line naming the ``model.KEY`` and the estimate, before any model is built) a plan whose
    models would not fit in memory while training: per member the weights, gradients, optimiser state
    (two moments), the best weights and a checkpoint's copy, plus the stacked copy of an ensemble; with
    ``optimizer = "lm"`` also each member's Jacobian (``lm_windows`` windows, at most ``max_windows``) and
    its normal matrix (parameters squared). The model's size is ``vpintegrator.models.model_size``'s."""
    from .. import models, resources

    model_cfg = dict(plan.model.hparams)
    name = model_cfg.pop("name")
    if name not in models.list_models():
        return  # build_model's one line
    model_cfg = {**models.default_model_config(name), **model_cfg}
    model_cfg.setdefault("dim", dim)
    size = models.model_size(name, **model_cfg)
    if size is None:
        return
    itemsize = 8 if plan.dtype == "float64" else 4
    copies = 6.0 + (1.0 if n_members > 1 else 0.0)
    need = n_members * size.nbytes(itemsize, copies)
    if plan.optim.name == "lm":
        outputs = int(model_cfg.get("seq_len", 1)) * int(model_cfg["dim"]) * int(plan.data.unroll)
        windows = plan.optim.lm.windows + plan.optim.lm.check_windows
        windows = windows if max_windows is None else min(windows, max_windows)
        need += n_members * 8.0 * size.numel * (size.numel + windows * outputs)
    keys = ", ".join(f"model.{k} = {v}" for k, v in size.large.items())
    members = f", {n_members} members" if n_members > 1 else ""
    resources.check_memory(
        need, f"training model {name!r} with {keys} ({size.numel:.3g} parameters{members}, {plan.dtype}, "
        f"optimizer {plan.optim.name})", f"give a smaller {' or '.join('model.' + k for k in size.large)}",
        key="model")


def prepare(plan: TrainPlan, device: torch.device) -> Prepared:
    """Read the data and build the model of each of the plan's seeds as ``fit(seed=s)`` would (an ensemble
    then reseeds the global RNGs with ``plan.seed``), then the record of ``config.toml`` and the window sets."""
    data_paths, data = load_data(plan.data.files)
    check_data_scale(data.y, plan.dtype, ", ".join(data_paths))
    data, full, observation = observed_data(plan.data, data, data_paths[0])
    seeds, dtype = plan.seeds, plan.torch_dtype
    dim, n_traj, n_states, dt = data.dim, data.n_traj, data.n_states, _data_dt(data)  # the data's sizes, read once
    check_training_memory(plan, dim, len(seeds), n_traj * n_states)
    models = []
    for s in seeds:  # the initialisation fit(seed=s) draws
        model, name = new_model(plan.model, plan.optim, s, dim, data_paths[0], device, dtype, dt)
        models.append(model)
    if plan.ensemble:
        ckpt_io.seed_everything(plan.seed)
    seq_len, pred_window = check_model(models[0], name, dim, dtype, device)
    check_windows_fit(name, seq_len, pred_window * plan.data.unroll, n_states, data_paths[0])
    extra = {"seeds": list(seeds), "ensemble": len(seeds)} if plan.ensemble else {}
    record = resolved_record(plan, data_paths, models[0], name, **extra)
    train_set, val_set, validator, info = window_sets(plan, data, data_paths, seq_len, pred_window, device, full=full,
                                                      observation=observation, model=models[0], name=name)
    if plan.model.init_from is not None:  # the split travels with the weights: the ancestors' trajectories
        info["ancestors"] = ancestry(plan.model.init_from)
    return Prepared(models, name, record, train_set, val_set, validator, info)


def ancestry(source: str) -> list[dict[str, Any]]:
    """What the model file ``source`` (``init_from``: a file, a run directory, ``pretrained:NAME``) and the
    models it was itself fine-tuned from trained on, nearest first: per ancestor ``{"source", "split",
    "split_data"}`` (its recorded trajectory split and what identifies those trajectories, None where it
    recorded none; ``split_by`` too where it held out parameters). A run that starts from ``source`` records
    the list as ``ancestors`` (``summary.json`` and every checkpoint), so that ``vp-rollout`` labels a
    trajectory that an ancestor trained or validated on ``ancestor_seen``, never ``test``
    (``vpintegrator.rollout.splits``)."""
    from ..models import load_checkpoint

    payload = load_checkpoint(source)
    own: dict[str, Any] = {"source": str(source)}
    for k in ("split", "split_data", "split_by"):
        value = payload.get(k)
        if isinstance(value, dict):
            own[k] = value
        elif k != "split_by":
            own[k] = None
    earlier = payload.get("ancestors")
    return [own, *([a for a in earlier if isinstance(a, dict)] if isinstance(earlier, list) else [])]
