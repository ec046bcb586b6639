"""The training entry point :func:`fit`: config (or resume) in, a run directory and a :class:`FitResult` out."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from .._outputs import output_lock, replace_run_dir
from ..errors import VPIntegratorError
from . import checkpoint as ckpt_io
from . import ddp
from .config import TrainConfig, merge_overrides
from .loop import Trainer
from .results import EpochInfo, FitResult

if TYPE_CHECKING:
    from .ensemble import EnsembleResult

__all__ = ["fit"]


def fit(
    config: TrainConfig | dict[str, Any] | str | os.PathLike | None = None,
    *,
    resume: str | os.PathLike | None = None,
    callback: Callable[[EpochInfo], bool | None] | None = None,
    progress: bool = False,
    overwrite: bool = False,
    **overrides: Any,
) -> FitResult | "EnsembleResult":
    """Train a model on trajectory windows and write its run directory.

    Parameters
    ----------
    config : TrainConfig, dict, path of a TOML file or a shipped config's name (``list_configs()``); optional with ``resume``
    resume : path, optional
        A run directory to continue from its ``last.pt`` (its ``config.toml`` is the config; only
        ``epochs`` (the total), ``time_limit``, ``device``, ``patience``, ``min_delta`` and
        ``checkpoint_every`` may change). The continuation is exactly the uninterrupted run.
    callback : callable, optional
        ``callback(EpochInfo)`` after every epoch (on every rank); returning True stops training.
    progress : bool
        Show a click progress bar with the losses on stderr (rank 0).
    overwrite : bool
        Replace the run directory at ``out`` (a new run only): it must hold nothing but run files, and is
        emptied once the new run's set-up succeeded. Without it an ``out`` holding a run is refused.
        The run directory (``out`` or ``resume``) is locked against other writers for the whole run
        (:func:`vpintegrator._outputs.output_lock`): a second ``fit`` of it, or a resume of a run
        another process is training, is refused.
    **overrides
        Config keys that win over ``config`` (``None`` values are ignored). ``ensemble=N`` (or
        ``seeds=[...]``) trains a seed ensemble in this process (:mod:`vpintegrator.training.ensemble`).

    Returns
    -------
    FitResult, or EnsembleResult for an ensemble (its ``members`` the members' FitResults, ``best`` the
    member selected by the validation score; ``callback`` then gets a list of the active members'
    EpochInfo each epoch)

    Raises
    ------
    VPIntegratorError
        A bad config, data or run directory (one line naming the key or file).
    TrainingInterrupted
        On Ctrl-C / SIGTERM, after ``last.pt`` was saved.

    Notes
    -----
    With ``optimizer = "lm"`` an epoch is ``lm_iters_per_epoch`` Levenberg–Marquardt iterations on
    random subsamples of ``lm_windows`` windows (:class:`~vpintegrator.training.optim.LMSubsample`);
    ``train_loss`` is then the full training loss after the epoch and ``lr`` the damping λ. Single
    process only.
    """
    config_file = None
    if isinstance(config, (str, os.PathLike)):
        from .._shipped import config_path

        config = config_file = config_path(config)  # a file, or a shipped config by name
    if config is not None and not isinstance(config, TrainConfig):
        if isinstance(config, dict):
            config = TrainConfig.from_dict(merge_overrides(config, overrides))
        else:
            config = TrainConfig.from_toml(config, **overrides)
        overrides = {}
    run_dir = None
    if not isinstance(overwrite, bool):
        raise VPIntegratorError(f"overwrite must be True or False; got {overwrite!r}", key="overwrite")
    if resume is not None:
        if overwrite:
            raise VPIntegratorError(f"resume {resume} with overwrite: a resumed run continues its directory; give "
                                    "one of them", key="resume")
        run_dir = Path(resume)
        from .ensemble import is_ensemble_dir

        asked = overrides.get("ensemble") is not None or overrides.get("seeds") is not None or (
            isinstance(config, TrainConfig) and config.is_ensemble)
        if asked or is_ensemble_dir(run_dir):
            raise VPIntegratorError(
                f"resume {run_dir}: an ensemble (or a member of one) cannot be resumed; train the ensemble again "
                "with the epochs you want", key="resume"
            )
        config = ckpt_io.resume_config(run_dir, config, overrides)
    else:
        if config is None:
            raise VPIntegratorError("fit: give a config (TrainConfig, dict or TOML path) or resume=RUN_DIR")
        config = config.replace(**overrides) if overrides else config
        config.validate()
        out = Path(config.out) if config.out is not None else ckpt_io.default_out(config.model["name"])
        config = config.replace(out=str(out.resolve()))
        from .._io import check_not_input

        check_not_input(config.out, [*config.data, config_file], key="out")
    from ..device import resolve_device

    device = resolve_device(config.device)
    if config.is_ensemble:
        with output_lock(config.out, key="out"):
            return _fit_ensemble(config, device, callback, progress, overwrite)
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
        lock = contextlib.nullcontext()
        if dist.is_main:  # one writer per run directory; under torchrun rank 0 writes it
            lock = output_lock(run_dir, key="resume") if run_dir is not None else output_lock(config.out, key="out")
        with lock:
            replace = run_dir is None and dist.is_main and ckpt_io.check_new_run_dir(Path(config.out), overwrite)
            trainer = Trainer(config, dist, device, run_dir, callback, progress)
            if replace:  # the new run's set-up succeeded: now the old run goes
                replace_run_dir(Path(config.out))
            return trainer.run()
    finally:
        ddp.teardown(dist)


def _fit_ensemble(config: TrainConfig, device: torch.device, callback, progress: bool, overwrite: bool = False):
    """``ensemble``/``seeds``: the members trained together in this process (:class:`EnsembleTrainer`)."""
    from .ensemble import EnsembleTrainer

    world = os.environ.get("WORLD_SIZE", "1") or "1"
    if world.isdigit() and int(world) > 1:
        raise VPIntegratorError(
            f"an ensemble trains in one process; got WORLD_SIZE = {world} under torchrun: run it without torchrun "
            "(the members share one device)", key="ensemble"
        )
    replace = ckpt_io.check_new_run_dir(Path(config.out), overwrite)
    trainer = EnsembleTrainer(config, device, callback, progress)
    if replace:
        replace_run_dir(Path(config.out))
    return trainer.run()
