"""The set-up of a training run from its config (``prepare``): the data (read through the one shard
reader, its system checked), the model of every member (paper defaults for keys left out, ``dim`` from the
data, the initial-weight scale), the resolved config and the window sets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from .config import TrainConfig
from .validation import RolloutValidator


def load_data(config: TrainConfig):
    """``(data_paths, Trajectories)``: the config's files read as one data set; data whose system the rest
    of the package would refuse (unknown system) is refused here too."""
    from ..data.windows import load_trajectories

    data_paths = [str(Path(p).expanduser().resolve()) for p in config.data]
    data = load_trajectories(data_paths)
    if data.meta.get("system") is not None or data.meta.get("system_class") is not None:
        from ..systems import system_from_meta

        system_from_meta(data.meta, where=", ".join(data_paths))
    return data_paths, data


def build_model(config: TrainConfig, dim: int, where: str, dt: float | None = None):
    """The configured model (registered defaults for keys left out, ``dim`` from the data) and its name.

    A model whose constructor takes ``dt`` (the learned vector fields, ``vpintegrator.models.vector_field``:
    their window map integrates over the data's step) gets the data's ``dt`` when its ``[model]`` table
    gives none.

    The ``[model]`` name is a registry name or ``"package.module:ClassName"`` (a user's class; the model's
    config, and so ``config.toml`` and every checkpoint, records it as ``model_class``)."""
    from .. import models

    from ..config import did_you_mean
    from ..plugins import is_class_path

    model_cfg = dict(config.model)
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
    if int(model.dim) != dim:
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


def new_model(config: TrainConfig, seed: int, dim: int, where: str, device, dtype, dt: float | None = None):
    """``(model, name)``: the model ``fit(seed=seed)`` initialises (global RNGs seeded with ``seed``), on
    ``device`` in ``dtype``, its weights times ``init_scale`` (not orthogonality-constrained ones); ``dt``
    the data's step (see ``build_model``)."""
    ckpt_io.seed_everything(seed)
    model, name = build_model(config, dim, where, dt)
    model = model.to(device=device, dtype=dtype)
    if config.init_from is not None:
        _load_initial_weights(model, name, config.init_from)
        if config.fine_tunes and config.finetune_lr is None:
            import logging

            logging.getLogger(__name__).warning(
                "init_from %s: fine-tuning at lr = %g (lr_min; not lr = %g: a fresh optimiser at the from-scratch "
                "rate undoes the pretrained weights); set finetune_lr to choose the rate", config.init_from,
                config.learning_rates()[0], config.lr)
    elif config.init_scale != 1.0:
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "parametrizations." not in pname:
                    p.mul_(config.init_scale)
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


def resolve_config(config: TrainConfig, data_paths: list[str], model, name: str, **extra: Any) -> TrainConfig:
    """What ``config.toml`` records: the data paths, the model's full hyper-parameters, the decay horizon."""
    resolved_model = {"name": name, **dict(getattr(model, "config", {}) or {})}
    resolved_model["name"] = name
    resolved = config.replace(data=data_paths, model=resolved_model, **extra)
    if resolved.decay_epochs is None and resolved.epochs is not None:
        resolved.decay_epochs = float(resolved.epochs)
    resolved.model = resolved_model
    return resolved


def window_sets(config: TrainConfig, data, data_paths: list[str], seq_len: int, pred_window: int, device):
    """``(train_set, val_set or None, rollout_validator or None, data_info)``: windows over the
    trajectory split (``config.split_seed``, never ``config.seed``; the test trajectories get no window), the validation rollout when
    ``monitor = "val_rollout"``, and the data summary for ``summary.json`` (with ``split``, see
    ``split_record``). The windows' targets span ``config.unroll`` model windows."""
    from ..data.windows import WindowDataset, split_train_val_test, states_tensor

    y = states_tensor(data, config.dtype, device)  # (n_traj, n_states, dim), shared by both window sets
    split_by = None
    if config.split_by == "initial_conditions":
        train_idx, val_idx, test_idx = split_train_val_test(data.n_traj, config.val_fraction, config.test_fraction,
                                                            config.split_seed)
    else:  # hold out parameters of a parametric data set
        import numpy as np

        from ..rollout.splits import parameter_split

        record = parameter_split(data, config.split_by.removeprefix("parameters_"), config.test_fraction,
                                 config.val_fraction, config.split_seed)
        train_idx, val_idx, test_idx = (np.asarray(record["split"][k], dtype=np.int64) for k in ("train", "val", "test"))
        split_by = record["split_by"]
    target = pred_window * config.unroll
    train_set = WindowDataset(y, seq_len, target, config.stride, train_idx)
    val_set = WindowDataset(y, seq_len, target, config.stride, val_idx) if len(val_idx) else None
    validator = None
    if config.monitor == "val_rollout":
        from .. import resources

        # the reference (continued beyond the data), its copy in the model's dtype, and per member the
        # predicted states and their errors: (n_val, val_rollout_steps + 1, dim) float64 each
        members = len(config.ensemble_seeds())
        states = float(len(val_idx)) * (config.val_rollout_steps + 1) * data.dim
        resources.check_memory(
            8.0 * states * (3 + 2 * members),
            f"validation rollouts of val_rollout_steps = {config.val_rollout_steps} steps from {len(val_idx)} "
            f"trajectories", "give a smaller val_rollout_steps (or a smaller val_fraction)", key="val_rollout_steps")
        validator = RolloutValidator(data.select(traj=val_idx), config.val_rollout_steps, seq_len, pred_window,
                                     config.val_rollout_error, config.val_rollout_drift_weight)
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
        **split_record(data, train_idx, val_idx, test_idx),
        "split_seed": int(config.split_seed),
        **({"split_by": split_by} if split_by is not None else {}),
        **system_record(data),
    }
    return train_set, val_set, validator, info


#: the keys of ``system_record``: what a checkpoint and ``summary.json`` say the model was trained on
SYSTEM_KEYS = ("dt", "system", "system_params", "parametric")


def _plain(value: Any) -> Any:
    """A metadata value as plain JSON/torch-loadable data (NumPy scalars and arrays as numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def system_record(data) -> dict[str, Any]:
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
    system = meta.get("system")
    return {"dt": dt, "system": None if system is None else str(system), "system_params": params,
            "parametric": bool(parametric)}


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
    """What the loop trains: the members' models (one for a single run), the model's name, the resolved
    config (``config.toml``), the window sets, the rollout validator and the data summary."""

    models: list
    name: str
    resolved: TrainConfig
    train_set: Any
    val_set: Any
    validator: Any
    data_info: dict[str, Any]


def check_training_memory(config: TrainConfig, dim: int, n_members: int = 1, max_windows: int | None = None) -> None:
    """Refuse (one line naming the ``model.KEY`` and the estimate, before any model is built) a config whose
    models would not fit in memory while training: per member the weights, gradients, optimiser state
    (two moments), the best weights and a checkpoint's copy, plus the stacked copy of an ensemble; with
    ``optimizer = "lm"`` also each member's Jacobian (``lm_windows`` windows, at most ``max_windows``) and
    its normal matrix (parameters squared). The model's size is ``vpintegrator.models.model_size``'s."""
    from .. import models, resources

    model_cfg = dict(config.model)
    name = model_cfg.pop("name")
    if name not in models.list_models():
        return  # build_model's one line
    model_cfg = {**models.default_model_config(name), **model_cfg}
    model_cfg.setdefault("dim", dim)
    size = models.model_size(name, **model_cfg)
    if size is None:
        return
    itemsize = 8 if config.dtype == "float64" else 4
    copies = 6.0 + (1.0 if n_members > 1 else 0.0)
    need = n_members * size.nbytes(itemsize, copies)
    if config.optimizer == "lm":
        outputs = int(model_cfg.get("seq_len", 1)) * int(model_cfg["dim"]) * int(config.unroll)
        windows = config.lm_windows + config.lm_check_windows
        windows = windows if max_windows is None else min(windows, max_windows)
        need += n_members * 8.0 * size.numel * (size.numel + windows * outputs)
    keys = ", ".join(f"model.{k} = {v}" for k, v in size.large.items())
    members = f", {n_members} members" if n_members > 1 else ""
    resources.check_memory(
        need, f"training model {name!r} with {keys} ({size.numel:.3g} parameters{members}, {config.dtype}, "
        f"optimizer {config.optimizer})", f"give a smaller {' or '.join('model.' + k for k in size.large)}",
        key="model")


def prepare(config: TrainConfig, device, dtype, seeds: list[int], ensemble: bool) -> Prepared:
    """Read the data and build the model of each seed in ``seeds`` as ``fit(seed=s)`` would (an ensemble then
    reseeds the global RNGs with ``config.seed``), then the resolved config and the window sets."""
    data_paths, data = load_data(config)
    check_training_memory(config, data.dim, len(seeds), data.n_traj * data.n_states)
    models = []
    for s in seeds:  # the initialisation fit(seed=s) draws
        model, name = new_model(config, s, data.dim, data_paths[0], device, dtype, _data_dt(data))
        models.append(model)
    if ensemble:
        ckpt_io.seed_everything(config.seed)
    seq_len, pred_window = check_model(models[0], name, data.dim, dtype, device)
    check_windows_fit(name, seq_len, pred_window * config.unroll, data.n_states, data_paths[0])
    extra = {"seeds": list(seeds), "ensemble": len(seeds)} if ensemble else {}
    resolved = resolve_config(config, data_paths, models[0], name, **extra)
    train_set, val_set, validator, info = window_sets(config, data, data_paths, seq_len, pred_window, device)
    return Prepared(models, name, resolved, train_set, val_set, validator, info)
