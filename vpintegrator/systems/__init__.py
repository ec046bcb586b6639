"""Physical systems: one module per system, parameters with defaults beside the equations.

``get_system(name, **params)`` builds one by registry name; ``list_systems()`` names them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import VPIntegratorError
from .abc_flow import ABCFlow
from .base import System
from .coupled_oscillator import CoupledOscillator
from .initial_conditions import (
    PAPER_SPHERE_SIZE,
    PAPER_TRAJECTORY_INDEX,
    list_samplers,
    paper_sphere_points,
    paper_trajectory_index,
    sample_initial_conditions,
)
from .rigid_body import RigidBody
from .volterra import Volterra

_REGISTRY: dict[str, type[System]] = {
    cls.name: cls for cls in (RigidBody, CoupledOscillator, Volterra, ABCFlow)
}


def list_systems() -> list[str]:
    """Registry names of the shipped systems."""
    return sorted(_REGISTRY)


def get_system(name: str | System, **params: Any) -> System:
    """A system by registry name, with parameters overriding its defaults.

    Parameters
    ----------
    name : str
        One of :func:`list_systems` (a :class:`System` instance is returned as is when no params).
    **params
        Parameters of that system (e.g. ``inertia=(1, 2, 2/3)`` for ``rigid_body``).
    """
    if isinstance(name, System):
        return dataclasses.replace(name, **params) if params else name
    if not isinstance(name, str) or name not in _REGISTRY:
        raise VPIntegratorError(f"unknown system {name!r}; valid systems: {', '.join(list_systems())}")
    cls = _REGISTRY[name]
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise VPIntegratorError(
            f"system {name!r} has no parameter(s) {', '.join(unknown)}; valid parameters: "
            f"{', '.join(valid) or '(none)'}"
        )
    return cls(**params)


__all__ = [
    "System",
    "RigidBody",
    "CoupledOscillator",
    "Volterra",
    "ABCFlow",
    "get_system",
    "list_systems",
    "sample_initial_conditions",
    "list_samplers",
    "paper_sphere_points",
    "paper_trajectory_index",
    "PAPER_SPHERE_SIZE",
    "PAPER_TRAJECTORY_INDEX",
]
