"""Lazy re-exports (PEP 562) for package ``__init__`` modules: names resolve on first use, so that light
entry points (``vp-gen``, ``import vpintegrator``) never import torch."""

from __future__ import annotations

import importlib
import types
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
        # the public names and the public subpackages imported so far; not the module's own helpers
        # (``TYPE_CHECKING``, ``annotations``, ``lazy_exports``)
        subpackages = {k for k, v in namespace.items() if not k.startswith("_") and isinstance(v, types.ModuleType)
                       and v.__name__ == f"{package}.{k}"}
        return sorted(set(names) | set(namespace.get("__all__", ())) | subpackages)

    return __getattr__, __dir__


# --------------------------------------------------------------------------- the one list

#: the lazy packages whose re-export block is written from their ``_LAZY`` (``python scripts/write_exports.py``)
GENERATED = ("vpintegrator", "vpintegrator.training")


def exports_block(source: str) -> tuple[int, int, str]:
    """The re-export block of a lazy package's ``__init__`` source, written from its ``_LAZY`` dict (the one
    list a package's public names are written in): ``(first line, last line, text)`` (1-based, inclusive)
    of what replaces the ``if TYPE_CHECKING:`` block through the ``__all__`` assignment.

    The block: ``from .module import name as name`` under ``if TYPE_CHECKING:`` for every ``_LAZY`` name
    (sorted by module, then name: what type checkers and IDEs see, since none runs ``__getattr__``; the
    ``as`` form re-exports in a ``py.typed`` package), then ``__all__`` as a literal list (the only form type
    checkers read): the names the module imports eagerly (``from .x import name`` at its top, ``._lazy``
    aside), then the ``_LAZY`` names in their order.
    """
    import ast

    tree = ast.parse(source)
    lazy: dict[str, str] | None = None
    eager: list[str] = []
    start = end = None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_LAZY" and node.value is not None:
            lazy = ast.literal_eval(node.value)
        elif isinstance(node, ast.ImportFrom) and node.level and node.module is not None:
            if node.module.split(".")[-1] != "_lazy":  # lazy_exports itself is no export
                eager += [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING" and start is None:
            start = node.lineno
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            end = node.end_lineno
    if lazy is None or start is None or end is None:
        raise ValueError("a lazy package __init__ needs _LAZY, an 'if TYPE_CHECKING:' block and __all__")
    imports = sorted((module, name) for name, module in lazy.items())
    dots = {m: len(m) - len(m.lstrip(".")) for m, _ in imports}
    lines = ["if TYPE_CHECKING:  # pragma: no cover"]
    lines += [f"    from {'.' * dots[m]}{m.lstrip('.')} import {n} as {n}" for m, n in imports]
    lines += ["", "__all__ = ["] + [f'    "{n}",' for n in [*eager, *lazy]] + ["]"]
    return start, end, "\n".join(lines) + "\n"


def write_exports(path: str) -> bool:
    """Rewrite the re-export block of the ``__init__`` at ``path`` from its ``_LAZY``; True if it changed."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    start, end, block = exports_block(source)
    lines = source.splitlines(keepends=True)
    new = "".join(lines[: start - 1]) + block + "".join(lines[end:])
    if new == source:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True

