"""Training a neural integrator on trajectory windows: [`fit`][vpintegrator.training.fit] and its [`TrainConfig`][vpintegrator.training.TrainConfig].

The reference protocol (the paper's, as GeometricMachineLearning.jl trains): every (trajectory, start)
window once per epoch, shuffled; loss ``‖prediction − target‖_F / ‖target‖_F`` over the whole batch; Adam
with betas (0.9, 0.99) and eps 1e-8; learning rate decaying exponentially from ``lr`` to ``lr_min``
applied per optimiser step; batch 16384; float32; seed 1234. ``optimizer = "lm"``: Levenberg–Marquardt
on random subsamples of windows, far faster for these small models (docs/training_efficiency.md).

Modules, each one concern:

``config``      [`TrainConfig`][vpintegrator.training.TrainConfig] (the ``vp-train`` TOML; errors name the key) and the optimisers, schedules
                and fast-step modes it chooses from (torch-free)
``optim``       the loss, torch optimisers by name, schedules, [`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] (over a member axis)
``checkpoint``  RNG state, run-directory files (config.toml, log.csv, summary.json, last.pt, best.pt), one
                member's record (best epoch, patience, history, the one log writer) and the tracking sinks of
                ``logger`` (TensorBoard, MLflow, the user's objects)
``validation``  the validation loss and the rollout score of ``monitor = "val_rollout"``
``results``     [`FitResult`][vpintegrator.training.FitResult] (an ensemble's with members), [`EpochInfo`][vpintegrator.training.EpochInfo], [`TrainingInterrupted`][vpintegrator.training.TrainingInterrupted]
``run``         [`fit`][vpintegrator.training.fit]: build the plan, run it
``plan``        the frozen, typed ``TrainPlan`` built once from a config, a resume or objects (every check and
                default resolved there); from it the data, the models and the window sets
``inputs``      the same from objects: a model, Trajectories or window tensors
``loop``        the one epoch loop over a member axis (a single run: 1, an ensemble: N), what stops it (divergence,
                SIGINT/SIGTERM) and its progress bar
``single``      the step strategy of one model (torch optimisers, LBFGS, graph step, DDP, LM; resume; the
                unrolled targets of ``unroll = k``)
``ensemble``    the step strategy of a seed ensemble (``ensemble = N`` / ``seeds``; vmap) and its files
``ensemble_lm`` Levenberg–Marquardt for an ensemble's members (their own subsamples and λ; batched)
``ddp``         DistributedDataParallel plumbing for ``torchrun``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# public name -> module that defines it: imported on first use, so that ``vp-train --help`` (which needs
# TrainConfig's declared keys) imports no torch
_LAZY: dict[str, str] = {
    "fit": ".run",
    "TrainConfig": ".config",
    "FitResult": ".results",
    "EpochInfo": ".results",
    "TrainingInterrupted": ".results",
    "relative_loss": ".optim",
    "make_optimizer": ".optim",
    "make_scheduler": ".optim",
    "list_optimizers": ".config",
    "list_schedulers": ".config",
    "list_configs": ".._shipped",
    "LevenbergMarquardt": ".optim",
    "fit_symplectic_autoencoder": ".autoencoder",
}

# what type checkers, IDEs and the docs' reader see (none runs __getattr__); tests/test_api.py keeps it equal to _LAZY
if TYPE_CHECKING:  # pragma: no cover
    from .._shipped import list_configs as list_configs
    from .autoencoder import fit_symplectic_autoencoder as fit_symplectic_autoencoder
    from .config import TrainConfig as TrainConfig
    from .config import list_optimizers as list_optimizers
    from .config import list_schedulers as list_schedulers
    from .optim import LevenbergMarquardt as LevenbergMarquardt
    from .optim import make_optimizer as make_optimizer
    from .optim import make_scheduler as make_scheduler
    from .optim import relative_loss as relative_loss
    from .results import EpochInfo as EpochInfo
    from .results import FitResult as FitResult
    from .results import TrainingInterrupted as TrainingInterrupted
    from .run import fit as fit

__all__ = [
    "fit",
    "TrainConfig",
    "FitResult",
    "EpochInfo",
    "TrainingInterrupted",
    "relative_loss",
    "make_optimizer",
    "make_scheduler",
    "list_optimizers",
    "list_schedulers",
    "list_configs",
    "LevenbergMarquardt",
    "fit_symplectic_autoencoder",
]

if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
