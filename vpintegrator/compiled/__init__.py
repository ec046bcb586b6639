"""Compiled (numba) single-trajectory classical integrators; optional, with a NumPy fallback.

Everything here is optional: ``import vpintegrator.compiled`` never fails, ``available`` says whether
numba imported, and ``compiled_stepper`` returns ``None`` whenever it cannot help (no numba, a
user's system whose field does not compile, a method without a kernel) so that callers fall back to the NumPy path
([`vpintegrator.data.integrate`][vpintegrator.data.integration.integrate]). See ``vpintegrator.compiled.integrators`` for the API::

    from vpintegrator.compiled import compiled_stepper
    stepper = compiled_stepper("rigid_body", "implicit_midpoint", dt=0.2)   # or None
    states = stepper.run(y0, 250_000)                                      # (250_001, 3), raises like integrate

Kernels are compiled on first use and cached on disk (``cache=True``), so later processes only load them.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["available", "compiled_stepper", "CompiledStepper"]


def available() -> bool:
    """Whether numba imported (the compiled paths can run). Tests set ``vpintegrator.compiled._jit.HAVE_NUMBA``
    to False to test the fallback. (The module is imported once: a batch-1 ``vp.integrate`` asks each call, where
    an import statement cost ~0.5 us.)"""
    return bool(_jit_module().HAVE_NUMBA)


@functools.cache
def _jit_module() -> Any:
    from . import _jit

    return _jit


def __getattr__(name: str) -> Any:  # lazy: importing the package imports neither numba nor the kernels
    if name in ("compiled_stepper", "CompiledStepper"):
        from . import integrators

        return getattr(integrators, name)
    raise AttributeError(f"module 'vpintegrator.compiled' has no attribute {name!r}")
