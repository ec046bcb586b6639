"""The training entry point [`fit`][vpintegrator.training.fit]: config (or resume) in, a run directory and a [`FitResult`][vpintegrator.training.FitResult] out."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable

import torch

from .._outputs import output_lock, replace_run_dir
from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from . import ddp
from .config import TrainConfig, merge_overrides
from .loop import Trainer
from .results import EpochInfo, FitResult

__all__ = ["fit"]


def fit(
    config: TrainConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    *,
    resume: str | os.PathLike[str] | None = None,
    callback: Callable[[EpochInfo], bool | None] | None = None,
    progress: bool = False,
    overwrite: bool = False,
    model: str | dict[str, Any] | torch.nn.Module | None = None,
    train: Any = None,
    val: Any = None,
    **overrides: Any,
) -> FitResult:
    """Train a model on trajectory windows and write its run directory.

    Two ways in: a config (a TOML file, a dict, a [`TrainConfig`][vpintegrator.training.TrainConfig]) naming data files, or objects,
    for a notebook without files::

        fit(model="vpt", train=trajectories, epochs=50)                  # split by val_fraction, no files
        fit(model=my_module, train=(x, y), val=(x_val, y_val), epochs=50, out="runs/mine")

    Parameters
    ----------
    config : TrainConfig, dict, path of a TOML file or a shipped config's name (``list_configs()``); optional with ``resume`` or ``train``
    model : str, dict or nn.Module, optional
        A registry name or model table: the config key ``model`` (a name replaces the config's model,
        a table merges into it). An ``nn.Module`` (with integer attributes ``dim`` and ``seq_len``) is
        trained in place, with the config's other settings (``vpintegrator.training.inputs``).
    train, val : Trajectories or (x, target), optional
        Training and validation data as objects instead of the config's ``data`` files: trajectories
        (windows cut as from a file; ``train`` alone is split by ``val_fraction``) or window tensors x
        (n_windows, seq_len, dim) and target (n_windows, pred_window · unroll, dim); they replace the
        config's ``data`` files (so a shipped config is a recipe for objects too). With objects ``out``
        defaults to None: nothing is written (give ``out`` for a run directory; a module that is not a
        registry model then cannot be saved and is refused); such a run cannot be resumed from its
        directory (its data are not files).
    resume : path, optional
        A run directory to continue from its ``last.pt`` (its ``config.toml`` is the config; only
        ``epochs`` (the total), ``time_limit``, ``device``, ``patience``, ``min_delta`` and
        ``checkpoint_every`` may change). The continuation is exactly the uninterrupted run.
    callback : callable, optional
        ``callback(EpochInfo)`` after every epoch (on every rank); returning True stops training.
        ``info.model`` is the model with this epoch's weights, ``info.val_rollout`` the validation-rollout
        score (``monitor = "val_rollout"``; NaN otherwise).
    progress : bool
        Show a click progress bar with the losses on stderr (rank 0).
    overwrite : bool
        Replace the run at ``out`` (a new run only): once the new run's set-up succeeded, vp-train's own
        files in it are removed (by name and kind) and anything else is kept; a file of yours where the
        new run writes is refused. Without it an ``out`` holding a run is refused.
        The run directory (``out`` or ``resume``) is locked against other writers for the whole run
        (``vpintegrator._outputs.output_lock``): a second ``fit`` of it, or a resume of a run
        another process is training, is refused.
    **overrides
        Config keys that win over ``config`` (``None`` values are ignored). ``ensemble=N`` (or
        ``seeds=[...]``) trains a seed ensemble in this process (``vpintegrator.training.ensemble``).
        ``logger`` may also be a tracking sink object of yours (or a list of them): anything with
        ``log(row)`` and optionally ``close()`` gets every row of ``log.csv``
        (``vpintegrator.training.sinks``; [`SinkProtocol`][vpintegrator.protocols.SinkProtocol]).

    Returns
    -------
    FitResult
        An ensemble's has ``members`` (the members' FitResults; ``best`` the member selected by the
        validation score); its ``callback`` gets a list of the active members' EpochInfo each epoch.

    Raises
    ------
    VPIntegratorError
        A bad config, data or run directory (one line naming the key or file).
    TrainingInterrupted
        On Ctrl-C / SIGTERM, after ``last.pt`` was saved.

    Notes
    -----
    With ``optimizer = "lm"`` an epoch is ``lm_iters_per_epoch`` Levenberg–Marquardt iterations on
    random subsamples of ``lm_windows`` windows (``vpintegrator.training.optim.LMSubsample``);
    ``train_loss`` is then the full training loss after the epoch and ``lr`` the damping λ. Single
    process only.
    """
    from .sinks import sink_objects, user_sinks

    objects = sink_objects(overrides.get("logger"))
    if objects:  # the user's sink objects: beside the config's named logger, for this call
        overrides.pop("logger")
        with user_sinks(objects):
            return fit(config, resume=resume, callback=callback, progress=progress, overwrite=overwrite,
                       model=model, train=train, val=val, **overrides)
    if isinstance(model, torch.nn.Module) or train is not None or val is not None:
        if resume is not None:
            raise VPIntegratorError("fit: resume continues a run from its directory's config and data files; give "
                                    "resume alone, without model, train or val objects", key="resume")
        return _fit_objects(config, model, train, val, callback, progress, overwrite, overrides)
    if model is not None:
        overrides["model"] = model  # a name or a table: the config key
    config_file = None
    if isinstance(config, (str, os.PathLike)):
        from .._shipped import config_path

        config = config_file = config_path(config)  # a file, or a shipped config by name
    cfg: TrainConfig | None
    if config is None or isinstance(config, TrainConfig):
        cfg = config
    else:
        if isinstance(config, dict):
            cfg = TrainConfig.from_dict(merge_overrides(config, overrides))
        else:
            cfg = TrainConfig.from_toml(config, **overrides)
        overrides = {}
    run_dir = None
    if not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True or False; got {overwrite!r}", key="overwrite")
    if resume is not None:
        if overwrite:
            raise VPIntegratorError(f"resume {resume} with overwrite: a resumed run continues its directory; give "
                                    "one of them", key="resume")
        run_dir = Path(resume)
        from .ensemble import is_ensemble_member

        if is_ensemble_member(run_dir):
            raise VPIntegratorError(
                f"resume {run_dir}: a member of an ensemble is resumed with its ensemble; give resume = "
                f"{run_dir.parent} (every member continues from the ensemble's last checkpoint)", key="resume")
        if overrides.get("ensemble") is not None or overrides.get("seeds") is not None:
            raise VPIntegratorError(
                f"resume {run_dir}: ensemble or seeds with resume; a resumed run keeps its members (an ensemble "
                "resumes with all of its own): give resume alone", key="resume")
        cfg = ckpt_io.resume_config(run_dir, cfg, overrides)
        from .inputs import IN_MEMORY

        if IN_MEMORY in cfg.data:
            raise VPIntegratorError(
                f"resume {run_dir}: the run was trained from objects (data {IN_MEMORY}), not files; train it again "
                "with fit(model=..., train=...)", key="resume")
    else:
        if cfg is None:
            raise VPIntegratorError("fit: give a config (TrainConfig, dict or TOML path) or resume=RUN_DIR")
        cfg = cfg.replace(**overrides) if overrides else cfg
        out = Path(cfg.out) if cfg.out is not None else ckpt_io.default_out(cfg.model["name"])
        cfg = cfg.replace(out=str(out.resolve()))
        from .._io import check_not_input

        check_not_input(cfg.out, [*cfg.data, config_file], key="out")
    return _train(cfg, run_dir, callback, progress, overwrite)


def _fit_objects(config, model, train, val, callback, progress: bool, overwrite: bool, overrides: dict[str, Any]):
    """[`fit`][vpintegrator.training.fit] with a model object and/or data objects (``vpintegrator.training.inputs``)."""
    from .inputs import IN_MEMORY, prepare_objects

    if not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True or False; got {overwrite!r}", key="overwrite")
    if isinstance(config, (str, os.PathLike)):
        from .._shipped import config_path

        values = TrainConfig.from_toml(config_path(config)).to_dict()
    elif isinstance(config, TrainConfig):
        values = config.to_dict()
    elif isinstance(config, dict) or config is None:
        values = dict(config or {})
    else:
        raise VPIntegratorError(f"fit: config must be a TrainConfig, a dict or a TOML path; got {type(config).__name__}")
    if train is None:
        raise VPIntegratorError("fit: give train (Trajectories or (x, target) windows) with model or val objects",
                                key="train")
    module = model if isinstance(model, torch.nn.Module) else None
    if module is not None:
        described = getattr(module, "config", None)
        name = described.get("name") if isinstance(described, dict) else None
        values["model"] = {"name": name or type(module).__name__}
    elif model is not None:
        overrides = {**overrides, "model": model}
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
    from ..device import resolve_device

    device = resolve_device(cfg.device)
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    seeds = cfg.ensemble_seeds()

    def inputs():
        return prepare_objects(cfg, module if module is not None else None, train, val, device, dtype, seeds,
                               cfg.is_ensemble)

    return _train(cfg, None, callback, progress, overwrite, inputs, device)


def _train(config: TrainConfig, run_dir: Path | None, callback, progress: bool, overwrite: bool, inputs=None,
           device=None):
    """Train ``config`` (a new run, or the run in ``run_dir``): lock the run directory, set up, run."""
    from ..device import resolve_device

    device = resolve_device(config.device) if device is None else device
    import logging

    logging.getLogger(__name__).debug(
        "fit: model %s, data %s, out %s, device %s, dtype %s, optimizer %s, lr %g, epochs %s, time_limit %s%s",
        config.model.get("name"), ", ".join(map(str, config.data)), config.out, device, config.dtype,
        config.optimizer, config.lr, config.epochs, config.time_limit,
        f", resumed from {run_dir}" if run_dir is not None else "")
    if config.is_ensemble:
        return _fit_ensemble(config, device, callback, progress, overwrite, inputs, run_dir)
    dist = ddp.setup(device.type)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    try:
        if dist.enabled and config.optimizer == "lm":
            raise VPIntegratorError(
                f"optimizer 'lm' (Levenberg–Marquardt) runs in one process only; got WORLD_SIZE = "
                f"{dist.world_size} under torchrun: train in one process or pick a torch optimizer",
                key="optimizer",
            )
        lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        target = run_dir if run_dir is not None else config.out
        if dist.is_main and target is not None:  # one writer per run directory
            lock = output_lock(target, key="resume" if run_dir is not None else "out")
        with lock:
            out = Path(config.out) if run_dir is None and dist.is_main and config.out is not None else None
            replace = out is not None and ckpt_io.check_new_run_dir(out, overwrite)
            trainer = Trainer(config, dist, device, run_dir, callback, progress, _inputs(config, device, inputs))
            if replace and out is not None:  # the new run's set-up succeeded: now the old run goes
                replace_run_dir(out)
            return trainer.run()
    finally:
        ddp.teardown(dist)


def _inputs(config: TrainConfig, device, inputs):
    return None if inputs is None else inputs()


def _fit_ensemble(config: TrainConfig, device: torch.device, callback, progress: bool, overwrite: bool = False,
                  inputs=None, run_dir: Path | None = None):
    """``ensemble``/``seeds``: the members trained together in this process (the one loop with a member axis
    of N, stepped by ``vpintegrator.training.ensemble.EnsembleSteps``); ``run_dir``: resume that ensemble."""
    world = os.environ.get("WORLD_SIZE", "1") or "1"
    if world.isdigit() and int(world) > 1:
        raise VPIntegratorError(
            f"an ensemble trains in one process; got WORLD_SIZE = {world} under torchrun: run it without torchrun "
            "(the members share one device)", key="ensemble"
        )
    if config.out is None:
        return Trainer(config, ddp.DistInfo(), device, None, callback, progress, _inputs(config, device, inputs)).run()
    if run_dir is not None:
        with output_lock(run_dir, key="resume"):
            return Trainer(config, ddp.DistInfo(), device, run_dir, callback, progress).run()
    with output_lock(config.out, key="out"):
        replace = ckpt_io.check_new_run_dir(Path(config.out), overwrite)
        trainer = Trainer(config, ddp.DistInfo(), device, None, callback, progress, _inputs(config, device, inputs))
        if replace:
            replace_run_dir(Path(config.out))
        return trainer.run()
