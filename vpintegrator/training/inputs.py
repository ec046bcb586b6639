"""[`fit`][vpintegrator.training.fit] from objects: a model (a registry name, a model table or any
``nn.Module``) and training/validation data given as [`Trajectories`][vpintegrator.data.trajectories.Trajectories]
or as window tensors, with no TOML file and no data file.

``train`` / ``val``:

- a [`Trajectories`][vpintegrator.data.trajectories.Trajectories] (``y`` shaped (n_traj, n_states, dim)): windows cut as from a data file (every
  start with ``stride``; targets of ``pred_window · unroll`` states). With ``train`` alone the trajectories
  are split by ``val_fraction`` and ``split_seed`` as a data file is; with ``val`` too, ``train`` is all training
  and ``val`` all validation data, and ``monitor = "val_rollout"`` rolls out ``val``.
- a pair ``(x, target)`` of tensors or arrays, x shaped (n_windows, seq_len, dim) and target
  (n_windows, pred_window · unroll, dim): the windows themselves (no split; ``val`` in the same form or
  None; ``monitor = "val_rollout"`` needs trajectories).

``model``: a registry name or table (built with the paper's defaults and ``dim`` from the data, one per
seed, so ensembles work) or an ``nn.Module`` trained in place (moved to the device and dtype). A module
needs integer attributes ``dim`` and ``seq_len``; ``pred_window`` is read from it or found by one forward
pass of a zero window. Run files are written with ``out``, for a user's module too: its ``best.pt``/``last.pt``
record the class (``config["module"]``) and load with ``load_model(file, into=module)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data.trajectories import Trajectories
from ..errors import VPIntegratorError
from .plan import (IN_MEMORY, Prepared, TrainPlan, check_model, check_windows_fit, observed_data, resolved_record,
                   system_record, window_sets)
from .validation import RolloutValidator

__all__ = ["TensorWindows", "prepare_objects", "IN_MEMORY"]


class TensorWindows:
    """Given windows: ``batch(idx)`` gathers ``(x[idx], target[idx])`` (the interface of
    ``vpintegrator.data.windows.WindowDataset``)."""

    #: set by __init__ (declared for type checkers)
    x: torch.Tensor
    target: torch.Tensor

    def __init__(self, x: torch.Tensor, target: torch.Tensor) -> None:
        self.x, self.target = x, target
        self.y = x  # the device of the data (what the validation reads)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.target[idx]


def _windows(value: Any, what: str, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise VPIntegratorError(
            f"fit: {what} must be a Trajectories or a pair (x, target) of window tensors; got "
            f"{type(value).__name__}", key=what)
    out = []
    for name, v in zip(("x", "target"), value):
        if not isinstance(v, (torch.Tensor, np.ndarray)) or v.ndim != 3:
            shape = tuple(v.shape) if hasattr(v, "shape") else type(v).__name__
            raise VPIntegratorError(f"fit: {what}'s {name} must be a 3-d tensor (n_windows, length, dim); got {shape}",
                                    key=what)
        out.append(torch.as_tensor(v).to(device=device, dtype=dtype))
    x, target = out
    if x.shape[0] != target.shape[0] or x.shape[0] == 0:
        raise VPIntegratorError(f"fit: {what} has {x.shape[0]} input and {target.shape[0]} target windows; give the "
                                "same number (at least one) of each", key=what)
    return x, target


def _dim(value: Any) -> int:
    return int(value.dim) if isinstance(value, Trajectories) else int(value[0].shape[-1])


def _user_model(model: torch.nn.Module, dim: int, dtype, device) -> tuple[torch.nn.Module, str]:
    name = type(model).__name__
    for attr in ("dim", "seq_len"):
        value = getattr(model, attr, None)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise VPIntegratorError(
                f"fit: model {name} needs an integer attribute {attr} (the state dimension and the input window "
                f"length); got {value!r}", key="model")
    if int(getattr(model, "dim")) != dim:
        raise VPIntegratorError(f"fit: model {name} has dim = {getattr(model, 'dim')} but the data has dim = {dim}; give data "
                                "of the model's dimension", key="model")
    return model.to(device=device, dtype=dtype), name


def prepare_objects(plan: TrainPlan, model: Any, train: Any, val: Any, device: torch.device) -> Prepared:
    """What the loop trains, from the objects (module docstring); ``plan`` holds every other setting."""
    from ..data.windows import WindowDataset, states_tensor
    from .checkpoint import seed_everything
    from .plan import _data_dt, new_model

    dtype, seeds, ensemble, cut, stop = plan.torch_dtype, plan.seeds, plan.ensemble, plan.data, plan.stop

    from .plan import check_data_scale

    for what, value in (("train", train), ("val", val)):
        if value is not None and not isinstance(value, Trajectories):
            _windows(value, what, dtype, "cpu")  # the type and shape checks
            if cut.observe is not None:
                raise VPIntegratorError(f"fit: observe {cut.observe!r} with {what} given as windows; give Trajectories "
                                        "(their observed channels are cut into windows) or windows of the observed "
                                        "channels without observe", key="observe")
        if value is not None:
            arrays = [value.y] if isinstance(value, Trajectories) else list(value)
            for a in arrays:
                check_data_scale(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a, plan.dtype,
                                 f"the given {what} data", key=what)
    full = full_val = observation = None
    if isinstance(train, Trajectories):  # what training sees of them (vpintegrator.data.observation)
        train, full, observation = observed_data(cut, train, "train")
    if isinstance(val, Trajectories):
        val, full_val, val_observation = observed_data(cut, val, "val")
        if (observation is None) != (val_observation is None) or (
                observation is not None and val_observation is not None and not observation.same_as(val_observation)):
            raise VPIntegratorError("fit: train and val hold different observations; give both full states (with "
                                    "observe) or both the same observed channels", key="val")
    if train is None:
        raise VPIntegratorError("fit: val without train; give train (Trajectories or (x, target) windows)", key="train")
    dim = _dim(train)
    if val is not None and _dim(val) != dim:
        raise VPIntegratorError(f"fit: train has dim = {dim} but val has dim = {_dim(val)}; give data of one system",
                                key="val")
    if isinstance(model, torch.nn.Module):
        if ensemble:
            raise VPIntegratorError("fit: an ensemble initialises one model per seed; give the model by name (or a "
                                    "model table), not a module", key="model")
        models = [_user_model(model, dim, dtype, device)[0]]
        described = getattr(model, "config", None)
        name = str((described.get("name") if isinstance(described, dict) else None) or type(model).__name__)
    else:
        models = []
        for s in seeds:  # the initialisation fit(seed=s) draws
            m, name = new_model(plan.model, plan.optim, s, dim, "the given data", device, dtype, _data_dt(train))
            models.append(m)
        if ensemble:
            seed_everything(plan.seed)
    seq_len, pred_window = check_model(models[0], name, dim, dtype, device)
    target_len = pred_window * cut.unroll
    extra = {"seeds": list(seeds), "ensemble": len(seeds)} if ensemble else {}
    record = resolved_record(plan, [IN_MEMORY], models[0], name, **extra)

    if isinstance(train, Trajectories) and val is None:
        check_windows_fit(name, seq_len, target_len, train.n_states, "train")
        train_set, val_set, validator, info = window_sets(plan, train, [], seq_len, pred_window, device, full=full,
                                                          observation=observation, model=models[0], name=name)
        return Prepared(models, name, record, train_set, val_set, validator, info)

    def windows(value, what):
        if isinstance(value, Trajectories):
            check_windows_fit(name, seq_len, target_len, value.n_states, what)
            y = states_tensor(value, plan.dtype, device)
            return WindowDataset(y, seq_len, target_len, cut.stride, np.arange(value.n_traj))
        x, target = _windows(value, what, dtype, device)
        if x.shape[1] != seq_len or target.shape[1] != target_len:
            raise VPIntegratorError(
                f"fit: {what} windows are {tuple(x.shape)} -> {tuple(target.shape)}, but the model takes "
                f"(n, {seq_len}, {dim}) -> (n, {target_len}, {dim}) (seq_len = {seq_len}, pred_window = "
                f"{pred_window}, unroll = {cut.unroll}); cut windows of those lengths", key=what)
        return TensorWindows(x, target)

    if cut.normalise not in ("auto", "off"):  # (auto: the raw states, as given)
        raise VPIntegratorError(f"normalise = {cut.normalise!r}: fitted on a training split of Trajectories; give "
                                "train alone as Trajectories (split by val_fraction), or normalise the windows "
                                "yourself and set normalise = 'off'", key="normalise")
    train_set = windows(train, "train")
    val_set = windows(val, "val") if val is not None else None
    validator = None
    if stop.monitor == "val_rollout":
        if not isinstance(val, Trajectories):
            raise VPIntegratorError("fit: monitor = 'val_rollout' rolls out validation trajectories; give val as "
                                    "Trajectories (or monitor = 'val_loss')", key="monitor")
        validator = RolloutValidator(val if full_val is None else full_val, stop.rollout_steps, seq_len, pred_window,
                                     stop.rollout_error, stop.rollout_drift_weight,
                                     observe=None if full_val is None or observation is None else observation.apply)
    info = {"sources": [], "system": train.meta.get("system") if isinstance(train, Trajectories) else None,
            "dim": dim, "train_windows": len(train_set), "val_windows": 0 if val_set is None else len(val_set),
            **(system_record(train, observation) if isinstance(train, Trajectories) else {})}
    return Prepared(models, name, record, train_set, val_set, validator, info)
