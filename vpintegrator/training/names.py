"""The names a training config chooses from: optimisers, learning-rate schedules, fast-step modes.

Written in ``vpintegrator.training.config`` beside the keys that take them (torch-free, so that
``vp-train --help`` lists them without importing torch); importable here too.
"""

from __future__ import annotations

from .config import FAST_STEPS, OPTIMIZERS, SCHEDULERS, list_optimizers, list_schedulers

__all__ = ["OPTIMIZERS", "SCHEDULERS", "FAST_STEPS", "list_optimizers", "list_schedulers"]
