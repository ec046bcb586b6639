"""The one config layer under the training, rollout and generation configs: TOML + overrides + checks.

Each config is a dataclass whose fields are its keys. The same keys are TOML keys, ``--set KEY=VALUE``
entries and (spelled with dashes) CLI flags. This module reads TOML files with one-line errors (a
missing file, a file that is not TOML, bad syntax), parses ``--set`` entries, merges overrides on top of
file values (``None`` means "not given"), checks keys against the valid ones, and writes TOML back
(a minimal writer: no new dependency). Errors carry the key (:class:`~vpintegrator.errors.VPIntegratorError`
``key``) so that each CLI can name it as its own flag.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ._toml import tomllib
from .errors import VPIntegratorError

__all__ = ["read_toml", "parse_set", "merge", "check_keys", "dump_toml", "toml_value"]


def read_toml(path: str | os.PathLike, *, table: str | None = None, what: str = "config") -> dict[str, Any]:
    """The TOML file at ``path`` as a dict (the sub-table ``table`` if the file has one).

    Raises a one-line :class:`VPIntegratorError` naming the file when it is missing, a directory, not
    UTF-8 text (e.g. an HDF5 file given as a spec) or not valid TOML.
    """
    p = Path(path)
    if not p.exists():
        raise VPIntegratorError(f"{what} file {p}: no such file")
    if p.is_dir():
        raise VPIntegratorError(f"{what} file {p}: is a directory; give a .toml file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise VPIntegratorError(f"{what} file {p}: not a TOML text file (binary content); give a .toml file") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise VPIntegratorError(f"{what} file {p}: malformed TOML: {' '.join(str(err).split())}") from None
    if table is not None and isinstance(values.get(table), dict):
        values = values[table]
    return values


def _parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (number, bool, string, array, inline table), else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_set(items: Iterable[str] | None) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> ``{KEY: value}``; ``a.b=VALUE`` sets ``{"a": {"b": value}}``.

    Values are TOML literals (``lr=1e-3``, ``skew_sym=false``, ``betas=[0.9, 0.99]``) or bare strings.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise VPIntegratorError(f"set: {item!r} is not KEY=VALUE (e.g. lr=1e-3)", key="set")
        value = _parse_value(text.strip())
        head, dot, tail = key.partition(".")
        if dot:
            table = out.setdefault(head, {})
            if not isinstance(table, dict):
                raise VPIntegratorError(f"set: {key!r} sets a key inside {head!r}, which is set to a value", key="set")
            table[tail] = value
        else:
            out[key] = value
    return out


def merge(base: Mapping[str, Any], *overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` with each override on top; ``None`` values are "not given" and skipped; nested dicts merge."""
    out = dict(base)
    for layer in overrides:
        for key, value in (layer or {}).items():
            if value is None:
                continue
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def check_keys(values: Mapping[str, Any], valid: Sequence[str], source: str = "config") -> None:
    """Refuse unknown keys: a one-line error naming ``source`` and the key, listing the valid keys."""
    unknown = [k for k in values if k not in valid]
    if unknown:
        raise VPIntegratorError(
            f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(valid)}", key=str(unknown[0])
        )


def toml_value(value: Any) -> str:
    """One value as TOML (bool, int, float incl. nan/inf, str/path, list, inline table)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return json.dumps(str(value), ensure_ascii=False)  # JSON string escapes are valid TOML
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + items + "}"
    raise VPIntegratorError(f"cannot write {type(value).__name__} value {value!r} to TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def dump_toml(values: Mapping[str, Any]) -> str:
    """Scalars and lists at the top, one level of tables; ``None`` values are left out."""
    lines, tables = [], []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {toml_value(value)}")
    for key, table in tables:
        lines.append("")
        lines.append(f"[{_toml_key(key)}]")
        lines.extend(f"{_toml_key(k)} = {toml_value(v)}" for k, v in table.items() if v is not None)
    return "\n".join(lines) + "\n"
