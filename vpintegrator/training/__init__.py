"""Training a neural integrator on trajectory windows: :func:`fit` and its :class:`TrainConfig`.

The reference protocol (DESIGN §6, GeometricMachineLearning.jl / the paper): every (trajectory, start)
window once per epoch, shuffled; loss ``‖prediction − target‖_F / ‖target‖_F`` over the whole batch; Adam
with betas (0.9, 0.99) and eps 1e-8; learning rate decaying exponentially from ``lr`` to ``lr_min``
applied per optimiser step; batch 16384; float32; seed 1234. ``optimizer = "lm"``: Levenberg–Marquardt
on random subsamples of windows, far faster for these small models (docs/training_efficiency.md).

Modules, each one concern:

``config``      :class:`TrainConfig` (the ``vp-train`` TOML; errors name the key)
``optim``       the loss, torch optimisers by name, schedules, :class:`LevenbergMarquardt`
``checkpoint``  RNG state, run-directory files (config.toml, log.csv, summary.json, last.pt), resume
``validation``  the validation loss and the rollout score of ``monitor = "val_rollout"``
``progress``    the progress bar
``results``     :class:`FitResult`, :class:`EpochInfo`, :class:`TrainingInterrupted`
``loop``        the trainer and :func:`fit`
``ddp``         DistributedDataParallel plumbing for ``torchrun``
``ensemble``    seed ensembles trained at once in one process (``ensemble = N`` / ``seeds``; vmap)
"""

from .config import TrainConfig
from .run import fit
from .optim import (
    LevenbergMarquardt,
    list_optimizers,
    list_schedulers,
    make_optimizer,
    make_scheduler,
    relative_loss,
)
from .results import EpochInfo, FitResult, TrainingInterrupted
from .ensemble import EnsembleResult
from .._shipped import list_configs

__all__ = [
    "fit",
    "TrainConfig",
    "FitResult",
    "EnsembleResult",
    "EpochInfo",
    "TrainingInterrupted",
    "relative_loss",
    "make_optimizer",
    "make_scheduler",
    "list_optimizers",
    "list_schedulers",
    "list_configs",
    "LevenbergMarquardt",
]
