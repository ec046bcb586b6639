"""vpintegrator: structure-preserving neural integrators.

The public API is re-exported flat from here. Names are imported lazily (PEP 562) so that light entry
points such as ``vp-gen`` never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .errors import VPIntegratorError
from .trajectory import Trajectories

# public name -> module that defines it (relative to this package)
_LAZY: dict[str, str] = {}

__all__ = ["__version__", "VPIntegratorError", "Trajectories", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'vpintegrator' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
