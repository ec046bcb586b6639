"""The one exception type users see.

Every check on user input (arguments, files, TOML keys) raises :class:`VPIntegratorError` with a one-line
message that names the argument, file or key, says what was expected and what came, and how to fix it.
The CLIs turn it into a one-line ``Error: ...`` and a non-zero exit, never a traceback.
"""

from __future__ import annotations


class VPIntegratorError(ValueError):
    """A user-facing error with a one-line, actionable message."""
