"""The time grid of a compiled call's output, ``t0 + k h`` for the kept steps k, written by one compiled loop
into the array that is returned (no array of step counts read, no temporary)."""

from __future__ import annotations

from ._jit import jit

__all__ = ["fill_time_grid"]


@jit
def fill_time_grid(t0, h, every, out):  # pragma: no cover - compiled (its NumPy twin: stepping.time_grid)
    """``out[j] = (j every) h``, then ``+ t0`` unless ``t0`` is zero: ``stepping.time_grid(t0, h, n)[::every]``
    bit for bit (each product rounded, then each sum: no fastmath, so no fused multiply-add). Returns ``out``."""
    for j in range(out.shape[0]):
        out[j] = (j * every) * h
    if t0 != 0.0:
        for j in range(out.shape[0]):
            out[j] += t0
    return out
