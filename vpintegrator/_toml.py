"""The TOML reader: the standard library's ``tomllib`` (Python >= 3.11), else ``tomli`` (same API).

Every module reads TOML through this one: ``from ._toml import tomllib``.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject: tomli>=1.1; python_version < "3.11")
    import tomli as tomllib

__all__ = ["tomllib"]
