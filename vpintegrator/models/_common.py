"""Helpers shared by the model classes: parameter counts and the recorded constructor config."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

def count_parameters(model: nn.Module) -> int:
    """Number of learnable scalars (``requires_grad`` parameters) of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _first_parameter(model: nn.Module) -> torch.Tensor | None:
    return next(model.parameters(), None)


def _record_config(model: nn.Module, name: str, frame_locals: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments (defaults filled in) plus ``name``: what ``build_model`` needs."""
    params = inspect.signature(type(model).__init__).parameters
    config: dict[str, Any] = {"name": name}
    for key in params:
        if key != "self":
            config[key] = frame_locals[key]
    return config

