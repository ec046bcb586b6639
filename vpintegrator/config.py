"""The one config layer under the training, rollout and generation configs: declared keys, TOML,
overrides, checks.

Each config is a dataclass whose fields are its keys, declared with ``key``: the type, default,
bounds or choices, help text, CLI flag and whether a resumed run may change it. The same keys are TOML
keys, ``--set KEY=VALUE`` entries and (spelled with dashes) CLI flags; everything else is derived from
the declaration: the checks (``Config``, run once when a config is built and, for the keys that
change, by ``Config.replace``), TOML reading and writing, ``--set`` parsing and the CLI options with
their help (``vpintegrator.cli._options``). This module also reads TOML files with one-line errors (a
missing file, a file that is not TOML, bad syntax), merges overrides on top of file values (``None``
means "not given"), checks keys against the valid ones (with a close match), and writes TOML back
(``tomli_w``; ``None`` values left out). Errors carry the key ([`VPIntegratorError`][vpintegrator.errors.VPIntegratorError]
``key``) so that each CLI can name it as its own flag.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import math
import os
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Sequence, TypeVar

from ._toml import tomllib
from .errors import VPIntegratorError

__all__ = ["Config", "Key", "key", "declared", "read_toml", "distinct", "parse_set", "parse_value", "merge", "check_keys", "did_you_mean",
           "unknown_key", "dump_toml"]


def read_toml(path: str | os.PathLike[str], *, table: str | None = None, what: str = "config") -> dict[str, Any]:
    """The TOML file at ``path`` as a dict (the sub-table ``table`` if the file has one).

    Raises a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming the file when it is missing, a directory, not
    UTF-8 text (e.g. an HDF5 file given as a spec) or not valid TOML.
    """
    p = Path(path)
    if not p.exists():
        raise VPIntegratorError(f"{what} file {p}: no such file")
    if p.is_dir():
        raise VPIntegratorError(f"{what} file {p}: is a directory; give a .toml file")
    if not p.is_file():  # a FIFO would wait forever for a writer
        raise VPIntegratorError(f"{what} file {p}: is not a regular file (a FIFO, socket or device); give a .toml file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise VPIntegratorError(f"{what} file {p}: not a TOML text file (binary content); give a .toml file") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise VPIntegratorError(f"{what} file {p}: malformed TOML: {' '.join(str(err).split())}") from None
    except RecursionError:
        raise VPIntegratorError(f"{what} file {p}: TOML nested too deep to read (arrays or tables inside each other "
                                "hundreds of levels); a config is a few flat tables") from None
    if table is not None and isinstance(values.get(table), dict):
        values = values[table]
    return values


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (number, bool, string, array, inline table), else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return text


def distinct(items: Iterable[Any], name: str, *, label: str | None = None) -> list[Any]:
    """The one rule of every list option and list key (``--systems``, ``--seeds``, ``--models``, ``--integrators``,
    ``--traj``, ``--data``, ...): a value given twice is refused, one line naming the key (``name``; ``label``
    the flag where the message spells it, e.g. a study's ``--seeds``), never planned twice or merged silently.
    Values are compared as given (``0`` and ``0.0`` are one noise level). Returns the items as a list."""
    out = list(items)
    for i, item in enumerate(out):
        if item in out[:i]:
            raise VPIntegratorError(f"{label or name}: {item!r} is given twice; give each once", key=name)
    return out


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
        if any(c in str(item) for c in "\n\r\x00"):  # a second line would be a second key (or be dropped)
            raise VPIntegratorError(f"set: {item!r} holds a line break (or NUL); give one KEY=VALUE per set",
                                    key="set")
        value = parse_value(text.strip())
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


def closest(name: Any, valid: Iterable[str]) -> str | None:
    """The valid name closest to ``name`` (a likely typo), or ``None``."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.5)
    return close[0] if close else None


def did_you_mean(name: Any, valid: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest valid name, or ``""``."""
    close = closest(name, valid)
    return f" (did you mean {close!r}?)" if close else ""


def unknown_key(name: Any, valid: Sequence[str], where: str, hint: str = "") -> str:
    """The one message for an unknown key: ``where: unknown key 'x'; valid keys: ...; did you mean 'y'?``."""
    close = closest(name, valid)
    return (f"{where}: unknown key {name!r}; valid keys: {', '.join(valid)}{'; ' + hint if hint else ''}"
            f"{f'; did you mean {close!r}?' if close else ''}")


def check_keys(values: Mapping[str, Any], valid: Sequence[str], source: str = "config") -> None:
    """Refuse unknown keys: a one-line error naming ``source`` and the key, the valid keys and a close
    match."""
    unknown = [k for k in values if k not in valid]
    if unknown:
        raise VPIntegratorError(unknown_key(unknown[0], valid, source), key=str(unknown[0]))


def _toml_plain(value: Any, where: str) -> Any:
    """``value`` as what ``tomli_w`` writes: NumPy scalars and arrays as Python numbers and lists, paths as
    strings, tuples as lists; ``None`` entries of a table are left out (TOML has no null: "not set"). The one
    place where our values meet the writer's types; ``where`` (the key) names a value it cannot write."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _toml_plain(v, f"{where}.{k}" if where else str(k)) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_toml_plain(v, where) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    raise VPIntegratorError(f"{where}: cannot write {type(value).__name__} value {value!r} to TOML (a list holds "
                            "None?); give numbers, strings, booleans, lists or tables", key=where or None)


def dump_toml(values: Mapping[str, Any]) -> str:
    """``values`` as TOML text (written by ``tomli_w``): scalars and lists at the top, then tables; ``None``
    values are left out (not set), so ``read_toml`` gives back the same values without them."""
    import tomli_w

    return tomli_w.dumps(_toml_plain(dict(values), ""))


# ---------------------------------------------------------------------------------------------------
# declared keys: one field declaration per key; checks, TOML, --set and CLI flags derive from it

_MISSING = dataclasses.MISSING
_META = "vpintegrator.key"


@dataclasses.dataclass(frozen=True)
class Key:
    """What one config key is (a field's metadata; build it with ``key``).

    ``type``: ``int``, ``float``, ``bool``, ``str``, ``dict`` (a table) or ``None`` (anything; ``check``
    decides). ``low``/``high`` bound numbers (``open_low``/``open_high``: strictly); ``choices`` is a tuple
    or a zero-argument callable (a registry, read when needed); ``optional``: ``None`` is allowed (not
    set); ``what`` names a registry's entries (``"optimizer"``: "unknown optimizer 'x' (did you mean ...)").
    ``expected`` is what the message says after "must be"; ``check(value) -> value`` replaces the declared
    check (it raises a one-line error naming the key). ``help``, ``flag`` (``None``: the key with dashes;
    ``""``: no flag of its own), ``short`` (extra spellings), ``metavar``, ``path`` (``"file"``, ``"dir"``
    or ``"any"``: the flag takes a path), ``show_default`` (``True``: the default; a text: shown instead),
    ``hidden`` and ``resumable`` (a resumed run may change it) describe the CLI and the run.
    """

    type: Any = None
    optional: bool = False
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: Any = None
    what: str = ""
    expected: str | None = None
    check: Any = None
    help: str = ""
    flag: str | None = None
    short: tuple[str, ...] = ()
    metavar: str | None = None
    path: str | None = None
    show_default: Any = True
    hidden: bool = False
    resumable: bool = False

    def choice_list(self) -> list[str]:
        return list(self.choices() if callable(self.choices) else self.choices or ())

    def describe(self) -> str:
        """The words after "must be"."""
        if self.expected:
            return self.expected
        if self.choices is not None:
            return " or ".join(map(repr, self.choice_list()))
        if self.type is bool:
            return "true or false"
        if self.type in (int, float):
            if self.type is int and self.low in (0, 1) and self.high is None:
                return "a positive integer" if self.low == 1 else "a non-negative integer"
            words = "an integer" if self.type is int else "a finite number"
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.open_low else '>='} {self.low:g}")
            if self.high is not None:
                bounds.append(f"{'<' if self.open_high else '<='} {self.high:g}")
            return f"{words} {' and '.join(bounds)}".strip()
        if self.type is dict:
            return "a table"
        if self.type is str:
            return "a string"
        return "a valid value"

    def validate(self, name: str, value: Any, label: str | None = None) -> Any:
        """``value`` checked (and normalised) for the key ``name``; a one-line error naming it (as ``label``
        if given, e.g. a file and its section) otherwise."""
        label = name if label is None else label
        if value is None and self.optional:
            return None
        if self.check is not None:
            return self.check(value)
        if self.what and not self._ok(value):
            valid = self.choice_list()
            raise VPIntegratorError(
                f"{label}: unknown {self.what} {value!r}{did_you_mean(value, valid)}; valid: {', '.join(valid)}",
                key=name,
            )
        if not self._ok(value):
            raise VPIntegratorError(f"{label} must be {self.describe()}; got {value!r}", key=name)
        if self.type is int:
            return int(value)
        if self.type is float:
            return value if isinstance(value, int) and not isinstance(value, bool) else float(value)
        if self.type is bool:
            return bool(value)
        return value

    def _ok(self, value: Any) -> bool:
        import numpy as np

        if self.choices is not None:
            return isinstance(value, str) and value in self.choice_list()
        if self.type is bool:
            return isinstance(value, (bool, np.bool_))
        if self.type in (int, float):
            if isinstance(value, (bool, np.bool_)):
                return False
            if self.type is int and not isinstance(value, (int, np.integer)):
                return False
            if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(float(value)):
                return False
            v = value if isinstance(value, (int, np.integer)) else float(value)  # exact for big ints
            if self.low is not None and (v <= self.low if self.open_low else v < self.low):
                return False
            return not (self.high is not None and (v >= self.high if self.open_high else v > self.high))
        if self.type is not None:
            return isinstance(value, self.type)
        return True


def key(default: Any = _MISSING, *, default_factory: Any = _MISSING, **info: Any) -> Any:
    """A config field: ``default`` (or ``default_factory``) and its ``Key`` (``type``, bounds, choices,
    ``help``, ``flag``, ...). One declaration per key is all a config class needs."""
    kwargs: dict[str, Any] = {"metadata": {_META: Key(**info)}}
    if default_factory is not _MISSING:
        kwargs["default_factory"] = default_factory
    elif default is not _MISSING:
        kwargs["default"] = default
    return dataclasses.field(**kwargs)


_DECLARED: dict[type, dict[str, Key]] = {}


def declared(cls: type) -> dict[str, Key]:
    """key -> ``Key`` of a config class, in declaration order (a field without one gets ``Key()``).

    A key documented in the class docstring's ``Parameters`` section and declared without ``help`` gets
    the first sentence of that entry as its help (``--help``): each key is documented once."""
    found = _DECLARED.get(cls)
    if found is None:
        docs = documented(cls)
        found = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            info = f.metadata.get(_META, Key())
            if not info.help and info.flag != "" and docs.get(f.name):
                info = dataclasses.replace(info, help=first_sentence(docs[f.name]))
            found[f.name] = info
        _DECLARED[cls] = found
    return found


def documented(cls: type) -> dict[str, str]:
    """key -> its text in the numpy-style ``Parameters`` section of ``cls``'s own docstring (an entry
    ``a, b : type`` documents both keys)."""
    import inspect

    lines = inspect.cleandoc(cls.__dict__.get("__doc__") or "").splitlines()
    out: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for name in names:
            out[name] = " ".join(" ".join(text).split())

    inside = False
    for i, line in enumerate(lines):
        heading = i + 1 < len(lines) and lines[i + 1].strip() and set(lines[i + 1].strip()) == {"-"}
        if heading and not line.startswith(" "):
            flush()
            names, text, inside = [], [], line.strip() == "Parameters"
            continue
        if not inside or (line.strip() and set(line.strip()) == {"-"}):
            continue
        if line.strip() and not line.startswith(" "):  # "name : type" or "a, b : type"
            flush()
            names, text = [n.strip() for n in line.split(" : ")[0].split(",") if n.strip()], []
        else:
            text.append(line.strip())
    flush()
    return out


def first_sentence(text: str) -> str:
    """The first sentence of a docstring entry, as plain text (``code`` and [`x`][target] links as x)."""
    import re

    plain = re.sub(r"\[`([^`]+)`\]\[[^\]]+\]", r"\1", text).replace("``", "")
    plain = re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?!\w)", r"\1", plain)  # *emphasis*, not a * b
    match = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)\.(\s|$)", plain)
    return plain[: match.start() + 1] if match else plain


#: a Config subclass (the type ``from_dict`` and ``replace`` return)
_C = TypeVar("_C", bound="Config")


class Config:
    """The base of the config dataclasses: a key is one ``key`` field.

    Checked once: every key when a config is built (``Cls(...)``, ``from_dict``, ``from_toml``),
    then the rules between keys (``_check_together``); ``replace`` checks only the keys it
    changes, then the rules between keys; assigning one key checks that key. Messages start with
    ``source: `` (the file, ``flags`` or ``config``) where the class says so (``_source_in_messages``).
    """

    _source_in_messages: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._run_checks(list(declared(type(self))), _source_var.get())

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_ready") and name in declared(type(self)):
            value = self._checked(name, value, "config")
        object.__setattr__(self, name, value)

    # -- checks ------------------------------------------------------------------------------------

    def _checked(self, name: str, value: Any, source: str) -> Any:
        try:
            return declared(type(self))[name].validate(name, value)
        except VPIntegratorError as err:
            raise self._sourced(err, source) from None

    def _sourced(self, err: VPIntegratorError, source: str) -> VPIntegratorError:
        if not self._source_in_messages:
            return err
        return VPIntegratorError(f"{source}: {err}", key=err.key)

    def _run_checks(self, names: Iterable[str], source: str) -> None:
        object.__setattr__(self, "_ready", False)
        for name in names:
            object.__setattr__(self, name, self._checked(name, getattr(self, name), source))
        try:
            self._check_together()
        except VPIntegratorError as err:
            raise self._sourced(err, source) from None
        object.__setattr__(self, "_ready", True)

    def _check_together(self) -> None:
        """Rules between keys (a subclass's); raise a one-line error naming the key to change."""

    def validate(self, source: str = "config") -> None:
        """Check the rules between keys (every key was checked when it was set: at construction, by
        ``replace`` or by assignment); a config not yet checked gets every check."""
        if not self.__dict__.get("_ready"):
            self._run_checks(list(declared(type(self))), source)
            return
        try:
            self._check_together()
        except VPIntegratorError as err:
            raise self._sourced(err, source) from None

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def keys(cls) -> list[str]:
        return list(declared(cls))

    @classmethod
    def from_dict(cls: type[_C], values: Mapping[str, Any], source: str = "config") -> _C:
        """Build from a (TOML) mapping; an unknown key is an error with a close match and the valid keys."""
        check_keys(values, cls.keys(), source)
        token = _source_var.set(source)
        try:
            return cls(**values)
        finally:
            _source_var.reset(token)

    def _merge(self, values: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with the ``overrides`` that are not ``None`` on top (a subclass may merge tables)."""
        return {**values, **{k: v for k, v in overrides.items() if v is not None}}

    def replace(self: _C, **overrides: Any) -> _C:
        """A copy with ``overrides`` that are not ``None`` applied; only the changed keys are checked (and
        the rules between keys)."""
        check_keys(overrides, self.keys(), "config")
        merged = self._merge(self.to_dict(), overrides)
        new = copy.deepcopy(self)
        changed = []
        for name, value in merged.items():
            if name not in self.__dict__ or not _same(value, getattr(self, name)):
                object.__setattr__(new, name, copy.deepcopy(value))
                changed.append(name)
        new._run_checks(changed, "config")
        return new

    # -- output ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {name: copy.deepcopy(getattr(self, name)) for name in self.keys()}

    def to_toml(self) -> str:
        """The config as TOML (``None`` values are left out: they mean "default")."""
        return dump_toml(self.to_dict())


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # e.g. arrays
        return False


_source_var: contextvars.ContextVar[str] = contextvars.ContextVar("vpintegrator_config_source", default="config")
