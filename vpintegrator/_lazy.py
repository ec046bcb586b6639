"""Lazy re-exports (PEP 562) for package ``__init__`` modules: names resolve on first use, so that light
entry points (``vp-gen``, ``import vpintegrator``) never import torch."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str], namespace: dict[str, Any]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``names`` map to (relative) module paths.

    A resolved name is cached in ``namespace`` (the package's globals).
    """

    def __getattr__(name: str) -> Any:
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(names) | {k for k in namespace if not k.startswith("_")})

    return __getattr__, __dir__
