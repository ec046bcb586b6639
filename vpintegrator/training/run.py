"""The training entry point [`fit`][vpintegrator.training.fit]: config (or resume) in, a run directory and a [`FitResult`][vpintegrator.training.FitResult] out."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable

import torch

from .._outputs import holds_run, output_lock, replace_run_dir
from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from . import ddp
from .config import TrainConfig
from .loop import Trainer
from .plan import Prepared, TrainPlan, build_plan
from .results import EpochInfo, FitResult

__all__ = ["fit"]


def fit(
    config: TrainConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    *,
    resume: str | os.PathLike[str] | None = None,
    callback: Callable[[EpochInfo], bool | None] | None = None,
    progress: bool = False,
    overwrite: bool | None = None,
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
        defaults to None: nothing is written (give ``out`` for a run directory, a module's too); the run
        resumes given the same objects again (``resume``; they are not checked against the first run's).
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
    overwrite : bool or None
        True: replace the run at ``out`` (a new run only): once the new run's set-up succeeded, vp-train's own
        files in it are removed (by name and kind) and anything else is kept; a file of yours where the
        new run writes is refused. False: an ``out`` holding a run is refused (``vp-train``'s default).
        None (the default, for notebooks): the run at ``out`` is replaced only when the same call wrote it,
        so that re-running a cell works: it finished and its ``config.toml`` is the one this call writes
        (``vpintegrator.training.checkpoint.check_same_call``); an unfinished run or one of another
        configuration is refused with one line saying what to do.
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

    if overwrite is not None and not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True, False or None; got {overwrite!r}", key="overwrite")
    objects = sink_objects(overrides.get("logger"))
    if objects:  # the user's sink objects: beside the config's named logger, for this call
        overrides.pop("logger")
        with user_sinks(objects):
            return fit(config, resume=resume, callback=callback, progress=progress, overwrite=overwrite,
                       model=model, train=train, val=val, **overrides)
    module = model if isinstance(model, torch.nn.Module) else None
    if module is not None or train is not None or val is not None:  # objects (vpintegrator.training.inputs)
        if train is None:
            raise VPIntegratorError("fit: give train (Trajectories or (x, target) windows) with model or val objects",
                                    key="train")
        if module is None and model is not None and resume is None:  # (resumed: the run's own)
            overrides["model"] = model
        plan = build_plan(config, resume=resume, overwrite=overwrite is True, objects=True, module=module, **overrides)
        from .inputs import prepare_objects

        return _train(plan, callback, progress, overwrite,
                      lambda device: prepare_objects(plan, module, train, val, device))
    if model is not None:
        overrides["model"] = model  # a name or a table: the config key
    return _train(build_plan(config, resume=resume, overwrite=overwrite is True, **overrides), callback, progress,
                  overwrite)


def _train(plan: TrainPlan, callback, progress: bool, overwrite: bool | None,
           inputs: Callable[[torch.device], Prepared] | None = None) -> FitResult:
    """Run ``plan`` (a new run, or the run it resumes): lock the run directory, set up, run; ``inputs``
    prepares what the loop trains from objects (else the plan's files are read)."""
    import logging

    device, run_dir, out = plan.device, plan.output.resume, plan.output.out
    logging.getLogger(__name__).debug(
        "fit: model %s, data %s, out %s, device %s, dtype %s, optimizer %s, lr %g, epochs %s, time_limit %s%s",
        plan.model.hparams.get("name"), ", ".join(plan.data.files), out, device, plan.dtype,
        plan.optim.name, plan.optim.lr, plan.stop.epochs, plan.stop.time_limit,
        f", resumed from {run_dir}" if run_dir is not None else "")
    if plan.ensemble:  # the members trained together in this process (the one loop with a member axis of N)
        world = os.environ.get("WORLD_SIZE", "1") or "1"
        if world.isdigit() and int(world) > 1:
            raise VPIntegratorError(
                f"an ensemble trains in one process; got WORLD_SIZE = {world} under torchrun: run it without "
                "torchrun (the members share one device)", key="ensemble"
            )
        dist = ddp.DistInfo()
    else:
        dist = ddp.setup(device.type)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    try:
        if dist.enabled and plan.optim.name == "lm":
            raise VPIntegratorError(
                f"optimizer 'lm' (Levenberg–Marquardt) runs in one process only; got WORLD_SIZE = "
                f"{dist.world_size} under torchrun: train in one process or pick a torch optimizer",
                key="optimizer",
            )
        lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        target = run_dir if run_dir is not None else out
        if dist.is_main and target is not None:  # one writer per run directory
            lock = output_lock(target, key="resume" if run_dir is not None else "out")
        with lock:
            new = Path(out) if run_dir is None and dist.is_main and out is not None else None
            again = overwrite is None and new is not None and new.is_dir() and holds_run(new)  # a cell run again?
            replace = new is not None and ckpt_io.check_new_run_dir(new, overwrite is True or again)
            trainer = Trainer(plan, dist, device, callback, progress, None if inputs is None else inputs(device))
            if again and new is not None:
                ckpt_io.check_same_call(new, trainer.record_values)
            if replace and new is not None:  # the new run's set-up succeeded: now the old run goes
                replace_run_dir(new)
            return trainer.run()
    finally:
        ddp.teardown(dist)
