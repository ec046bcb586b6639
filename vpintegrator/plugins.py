"""User classes by import path: ``"package.module:ClassName"`` to a class and back.

Systems ([`vpintegrator.systems.system_class`][vpintegrator.systems.system_class]) and models
([`vpintegrator.models.model_class`][vpintegrator.models.model_class]) defined outside the package are named
this way wherever a registry name is accepted, and files record the path so that a fresh process imports
the class again. This module only imports; each registry decides what a valid class is.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from typing import Any, Iterator, TypeVar

from .errors import VPIntegratorError

__all__ = ["class_path", "importable_path", "import_class", "is_class_path", "user_code", "UserCodeError",
           "TRACEBACK_ENV"]

#: set this environment variable to 1 for the full traceback of an error raised by a user's code
TRACEBACK_ENV = "VP_TRACEBACK"


class UserCodeError(VPIntegratorError):
    """An exception raised by a user's class (a system, a model, a packer), as one line naming the class and
    what it was asked to do; the original exception is its ``__cause__``."""


def _owner_name(owner: Any) -> str:
    if isinstance(owner, str):
        return owner
    cls = owner if isinstance(owner, type) else type(owner)
    return cls.__qualname__ if cls.__module__.startswith("vpintegrator.") else class_path(cls)


@contextlib.contextmanager
def user_code(owner: Any, what: str) -> Iterator[None]:
    """Run the block, a call into ``owner``'s code (a class, an instance, or a name), at the boundary: an
    exception it raises (other than a [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError], an
    interrupt or ``MemoryError``) becomes one line, a ``UserCodeError``, naming the class, what it was asked to
    do (``what``: "build it with dim=3", "map a (1, 3, 3) window") and the exception. The full traceback: the
    CLIs' ``-v`` (logged at debug level), or ``VP_TRACEBACK=1`` in the environment (the exception is then
    raised as it is)."""
    try:
        yield
    except (VPIntegratorError, MemoryError):
        raise
    except Exception as err:
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        name = _owner_name(owner)
        logging.getLogger("vpintegrator").debug("%s raised when asked to %s", name, what, exc_info=err)
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise UserCodeError(f"{name} raised {reason} when asked to {what}; fix the class (-v or {TRACEBACK_ENV}=1 "
                            "shows the full traceback)") from err

T = TypeVar("T")


def class_path(cls: type) -> str:
    """``"package.module:ClassName"`` of a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def importable_path(cls: type) -> str | None:
    """The class path a fresh process can import, or None: a class of this package (its registry name
    suffices), of ``__main__`` (a script or notebook) or defined inside a function."""
    path = class_path(cls)
    if path.startswith(("vpintegrator.", "__main__:")) or "<" in path:
        return None
    return path


def is_class_path(name: Any) -> bool:
    """Whether ``name`` is written as an import path (``"module:Class"``), not a registry name."""
    return isinstance(name, str) and ":" in name


def import_class(path: str, what: str, base: type[T], kind: str) -> type[T]:
    """The class at ``path`` (``"package.module:ClassName"``), checked to subclass ``base``.

    ``what`` names the thing in errors (``"system"``, ``"model"``); ``kind`` says what the class must be
    (``"a vpintegrator System subclass"``). Every failure is a one-line
    [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming the path and how to fix it.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise VPIntegratorError(f"{what} {path!r}: give a registry name or 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise VPIntegratorError(
            f"{what} {path!r}: cannot import module {module_name!r} ({err}); make it importable "
            "(install it, or put its folder on PYTHONPATH)"
        ) from None
    except Exception as err:  # the module itself fails: a syntax error, an exception at import time
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        raise VPIntegratorError(
            f"{what} {path!r}: cannot import module {module_name!r} ({reason}); fix the module"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise VPIntegratorError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}; check the "
                                    "class name after ':' (and that the module imported is the one you mean)")
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise VPIntegratorError(f"{what} {path!r}: {attr} is not {kind}; name such a class after ':'")
    return obj
