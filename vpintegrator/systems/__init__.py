"""Physical systems: one module per system, parameters with defaults beside the equations.

``get_system(name, **params)`` builds one by registry name (or ``"package.module:ClassName"`` for a
user-defined system); ``list_systems()`` names them; ``register_system(cls)`` adds one.

A shipped system registers itself beside its class (``@register_system`` above the dataclass in
``systems/<name>.py``), and this package imports every module of its folder, so a new system's module is
the one file of the package that names it (with its ``kernel_id``, the branch of the compiled dispatchers
in ``vpintegrator.compiled.systems``; ``docs/architecture.md``, "A system's maths is written once").
"""

from __future__ import annotations

import importlib
import pkgutil

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
    shipped_systems,
    system_class,
    system_from_meta,
    system_meta,
)
from .volterra import Volterra


for _module in pkgutil.iter_modules(__path__):  # each system module registers its class beside it
    importlib.import_module(f"{__name__}.{_module.name}")
del _module

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
    "shipped_systems",
    "system_meta",
    "system_from_meta",
    "sample_initial_conditions",
    "list_samplers",
    "paper_sphere_points",
    "paper_trajectory_index",
    "PAPER_SPHERE_SIZE",
    "PAPER_TRAJECTORY_INDEX",
]
