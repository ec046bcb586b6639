"""Physical systems: one module per system, parameters with defaults beside the equations.

``get_system(name, **params)`` builds one by registry name (or ``"package.module:ClassName"`` for a
user-defined system); ``list_systems()`` names them; ``register_system(cls)`` adds one.
"""

from __future__ import annotations

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
from .rigid_body_exp import RigidBodyExp
from .registry import (
    get_system,
    list_systems,
    register_system,
    system_class,
    system_from_meta,
    system_meta,
)
from .volterra import Volterra

for _cls in (RigidBody, CoupledOscillator, Volterra, ABCFlow, RigidBodyExp):
    register_system(_cls)
del _cls

__all__ = [
    "System",
    "RigidBody",
    "RigidBodyExp",
    "CoupledOscillator",
    "Volterra",
    "ABCFlow",
    "get_system",
    "list_systems",
    "register_system",
    "system_meta",
    "system_from_meta",
    "sample_initial_conditions",
    "list_samplers",
    "paper_sphere_points",
    "paper_trajectory_index",
    "PAPER_SPHERE_SIZE",
    "PAPER_TRAJECTORY_INDEX",
]
