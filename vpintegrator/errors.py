"""The one exception type users see.

Every check on user input (arguments, files, TOML keys) raises [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] with a one-line
message that names the argument, file or key, says what was expected and what came, and how to fix it.
The CLIs turn it into a one-line ``Error: ...`` and a non-zero exit, never a traceback.

Library messages name configuration keys as keys (``t_end``); an error about one key carries it in
``key``, and a CLI renders that key as its own flag (``--t-end``). Library messages never spell CLI flags.
"""

from __future__ import annotations

import math
from typing import Callable


class VPIntegratorError(ValueError):
    """A user-facing error with a one-line, actionable message.

    Parameters
    ----------
    message : str
    key : str, optional
        The configuration key the error is about (a field of a config object, e.g. ``"t_end"``); it
        appears in the message as the word ``key``, which a CLI replaces by its flag.
    """

    def __init__(self, message: str = "", *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def render(self, name_of_key: Callable[[str], str]) -> str:
        """The message with the first whole-word mention of ``key`` replaced by ``name_of_key(key)``."""
        text = str(self)
        if not self.key:
            return text
        import re

        key = self.key
        return re.sub(rf"(?<![\w-]){re.escape(key)}(?![\w-])", lambda m: name_of_key(key), text, count=1)


def finite_float(value: object, label: str, positive: bool = False, *, key: str | None = None,
                 nonnegative: bool = False) -> float:
    """``value`` as a finite float (and > 0 if ``positive``, >= 0 if ``nonnegative``), else a one-line
    [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError].

    ``label`` names what is checked, e.g. ``"dt"`` or ``"RigidBody parameter 'inertia'"``; booleans are
    refused (``True`` is not a time step). ``key`` is passed on to the error.
    """
    want = "a finite number > 0" if positive else "a finite number >= 0" if nonnegative else "a finite number"
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise VPIntegratorError(f"{label} must be {want}; got {value!r}", key=key) from None
    if isinstance(value, bool) or not math.isfinite(v) or (positive and v <= 0) or (nonnegative and v < 0):
        raise VPIntegratorError(f"{label} must be {want}; got {value!r}", key=key)
    return v
