"""The one exception type users see.

Every check on user input (arguments, files, TOML keys) raises :class:`VPIntegratorError` with a one-line
message that names the argument, file or key, says what was expected and what came, and how to fix it.
The CLIs turn it into a one-line ``Error: ...`` and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import math


class VPIntegratorError(ValueError):
    """A user-facing error with a one-line, actionable message."""


def finite_float(value: object, label: str, positive: bool = False) -> float:
    """``value`` as a finite float (and > 0 if ``positive``), else a one-line :class:`VPIntegratorError`.

    ``label`` names what is checked, e.g. ``"dt"`` or ``"RigidBody parameter 'inertia'"``; booleans are
    refused (``True`` is not a time step).
    """
    want = "a finite number > 0" if positive else "a finite number"
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise VPIntegratorError(f"{label} must be {want}; got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or (positive and v <= 0):
        raise VPIntegratorError(f"{label} must be {want}; got {value!r}")
    return v
