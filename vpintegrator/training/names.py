"""The names a training config chooses from: optimisers, learning-rate schedules, fast-step modes.

Torch-free, so that ``vp-train --help`` lists them (and shell completion offers them) without importing
torch; [`make_optimizer`][vpintegrator.training.make_optimizer], [`make_scheduler`][vpintegrator.training.make_scheduler]
and ``vpintegrator.training.fast_step`` build what they name.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPTIMIZERS", "SCHEDULERS", "FAST_STEPS", "list_optimizers", "list_schedulers"]

_ADAM_DEFAULTS = {"betas": (0.9, 0.99), "eps": 1e-8}
#: torch optimisers by name: the ``torch.optim`` class and our defaults (under the config's ``optimizer_kwargs``)
OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adam": ("Adam", _ADAM_DEFAULTS),
    "adamw": ("AdamW", _ADAM_DEFAULTS),
    "sgd": ("SGD", {}),
    "rmsprop": ("RMSprop", {}),
    "lbfgs": ("LBFGS", {}),
}
#: the learning-rate schedules (their shapes are in ``vpintegrator.training.optim``)
SCHEDULERS = ("exponential", "cosine", "constant")
#: the values of the ``fast_step`` config key
FAST_STEPS = ("auto", "off", "graph", "compile")


def list_optimizers() -> list[str]:
    """Names accepted by ``TrainConfig.optimizer``: the torch ones of [`make_optimizer`][vpintegrator.training.make_optimizer] and ``lm``
    ([`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] on window subsamples, driven by ``fit``)."""
    return sorted([*OPTIMIZERS, "lm"])


def list_schedulers() -> list[str]:
    """Names accepted by [`make_scheduler`][vpintegrator.training.make_scheduler]."""
    return sorted(SCHEDULERS)
