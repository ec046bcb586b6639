"""The studies' options, declared once on ``Config`` s, their parser and the list of studies.

Every study takes the same nine flags (``--out``, ``--seeds``, ``--jobs``, ``--budget``,
``--wall-ceiling``, ``--skip-existing``, ``--overwrite``, ``--table-only``, ``--export-pretrained``):
they are the keys of ``StudyOptions``, each declared with ``vpintegrator.config.key`` (type, bounds,
help). A study's own flags (``--quick``, ``--models``, ``--train-seconds``, ...) are the keys of its
subclass of ``StudyOptions`` (``RigidBodyOptions``, ... beside the study), each documented once in the
subclass's docstring: its first sentence is the flag's help.

``add_options`` makes a class's keys argparse flags (``--key-name``), with ``--plan TOML`` (a file of the
study's keys, e.g. ``models = "vpt,st"``) and ``--set KEY=VALUE``; ``parse`` parses a command line: the
defaults, then the plan file, then ``--set`` and the flags given on top (a key given by ``--set`` and by its
own flag is refused), every key checked once by ``Config``, the checked values written into the namespace
(``--seeds`` as a list of integers). A bad key or value is a one-line ``StudyError`` naming the flag.
``checked`` checks a namespace parsed without ``parse``.

``STUDIES`` names the studies ``python -m vpintegrator study NAME`` (``vp-study NAME``) runs: name ->
(module under ``vpintegrator.studies`` with ``main(argv) -> int``, one line). Adding a study is one entry.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..config import Config, check_keys, declared, did_you_mean, key, parse_set, read_toml
from ..errors import VPIntegratorError
from .runner import WALL_CEILING, StudyError, parse_seeds

__all__ = ["STUDIES", "StudyOptions", "add_options", "checked", "comma_list", "model_list", "number_list", "parse",
           "seed_list"]

#: study name -> (module under vpintegrator.studies with ``main(argv) -> int``, what it does)
STUDIES: dict[str, tuple[str, str]] = {
    "rigid_body": ("rigid_body", "the paper's rigid-body study: VPFF, VPT and ST against classical methods"),
    "rigid_body_structure": ("rigid_body_structure", "structure-preserving models on the rigid body (Lie-Poisson, "
                                                     "SympNets, VP): errors, drifts, long runs"),
    "rigid_body_quality": ("rigid_body_quality", "the rigid-body VPT trained in phases (unrolled fine-tuning)"),
    "coupled_oscillator": ("coupled_oscillator", "VPT against the standard transformer, Stormer-Verlet and RK4 on "
                                                 "the coupled oscillator"),
    "context": ("context", "context-conditioned Lie-Poisson nets on the rigid-body family against identification "
                           "+ classical methods"),
    "unknown_form": ("unknown_form", "when the equations are unknown: flow maps, learned vector fields, SINDy, the "
                                     "wrong model class and the oracle at equal CPU cost"),
}


def seed_list(value: Any) -> list[int] | None:
    """A seeds key's value (a comma list ``"0,1"`` or a TOML array) as distinct non-negative integers; else a
    one-line error naming ``seeds``."""
    if value is None or isinstance(value, list):
        return value if value is None else parse_seeds(",".join(str(v) for v in value))
    try:
        return parse_seeds(str(value))
    except StudyError as err:
        raise VPIntegratorError(str(err), key="seeds") from None


@dataclass
class StudyOptions(Config):
    """The flags every study takes (see the module docstring); a study's own flags are the keys of its
    subclass."""

    _source_in_messages = False

    out: str | None = key(None, optional=True, type=str, metavar="RUN", help="Run directory.")
    seeds: list[int] | None = key(None, optional=True, check=seed_list, metavar="LIST",
                                  help="Comma list of training seeds.")
    jobs: int = key(2, type=int, low=1, expected=">= 1 (subprocesses at a time)",
                    help="Subprocesses at a time, one thread each (OMP_NUM_THREADS=1).")
    budget: str = key("cpu", choices=("cpu", "wall"),
                      help="What a training budget counts: the training process's CPU seconds (default; the same "
                           "training on a loaded machine) or wall seconds.")
    wall_ceiling: float = key(WALL_CEILING, type=float, low=1.0, expected="a number >= 1 (times the budget)",
                              metavar="FACTOR",
                              help="With --budget cpu: stop a training run after this many times its budget in wall "
                                   "seconds all the same.")
    skip_existing: bool = key(False, type=bool, help="Resume: keep the steps already finished in RUN (unfinished "
                                                     "trainings are resumed).")
    overwrite: bool = key(False, type=bool, help="Run every step again over an earlier study in RUN (its own outputs "
                                                 "only).")
    table_only: bool = key(False, type=bool, help="Only rebuild results.md/json from an existing RUN.")
    export_pretrained: str | None = key(None, optional=True, type=str, metavar="DIR",
                                        help="After the study (or with --table-only), copy the best seed's best.pt "
                                             "(lowest validation score) to DIR, with DIR/provenance.json.")


def comma_list(value: Any, name: str) -> str:
    """A comma-list key's value: a string (``"vpt,st"``) as given, a TOML array of strings joined with
    commas; else a one-line error naming the key."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if not isinstance(value, str):
        raise VPIntegratorError(f"{name} must be a comma list (or an array of strings); got {value!r}", key=name)
    return value


def model_list(text: str, flag: str, valid: Sequence[str], *, in_valid_order: bool = False,
               paths: bool = False) -> list[str]:
    """The model names of a comma-list flag (``"vpt,st"``): at least one, each in ``valid`` (or, with
    ``paths``, a ``module:Class`` import path); in ``valid``'s order with ``in_valid_order`` (a name given
    twice then counts once), else as given and each once. Bad input: a one-line ``StudyError`` naming
    ``flag``, with a did-you-mean for a near miss."""
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise StudyError(f"{flag} is empty; give a comma list")
    for n in names:
        if n not in valid and not (paths and ":" in n):
            raise StudyError(f"{flag}: unknown model {n!r}{did_you_mean(n, valid)}; valid: {', '.join(valid)}"
                             + (" (or module:Class)" if paths else ""))
    if in_valid_order:
        return [v for v in valid if v in names]
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:
        raise StudyError(f"{flag}: {twice[0]!r} is given twice; name each model once")
    return names


def number_list(kind: type, name: str, low: float, what: str) -> Any:
    """The check of a key whose value is a comma list of ``kind`` (``int`` or ``float``) values ``>= low``:
    ``"0,0.01"``, a TOML array or one number in, a list of ``kind`` out; else a one-line error naming
    ``name`` that says ``what`` the values are."""

    def check(value: Any) -> list:
        if isinstance(value, str):
            items: list = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            items = [value]
        out: list = []
        for v in items:
            try:
                if isinstance(v, bool) or (kind is int and isinstance(v, float)):
                    raise ValueError
                x = kind(v)
            except (TypeError, ValueError):
                x = None
            if x is None or not math.isfinite(x) or x < low:
                raise VPIntegratorError(f"{name} must be a comma list of {what}; got {value!r}", key=name)
            out.append(x)
        if not out:
            raise VPIntegratorError(f"{name} must be a comma list of {what} (at least one); got {value!r}", key=name)
        return out

    return check


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: parser -> (its options class, its required keys), recorded by ``add_options`` for ``parse``
_PARSERS: weakref.WeakKeyDictionary[argparse.ArgumentParser, tuple[type[Config], tuple[str, ...]]] = \
    weakref.WeakKeyDictionary()


def _default(f: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return None if f.default_factory is dataclasses.MISSING else f.default_factory()


def add_options(parser: argparse.ArgumentParser, cls: Any = StudyOptions, *,
                defaults: Mapping[str, Any] | None = None, helps: Mapping[str, str] | None = None,
                required: tuple[str, ...] = ()) -> None:
    """The keys of ``cls`` as flags of ``parser`` (``--key-name``), and ``--plan``/``--set``; ``defaults`` and
    ``helps`` replace a key's default and help text for one study; ``required`` keys have no default (their
    flag or the plan file gives them: ``parse`` checks)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, k in declared(cls).items():
        if k.flag == "":
            continue
        f = fields[name]
        default = None if name in required else (defaults or {}).get(name, _default(f))
        text = (helps or {}).get(name, k.help).replace("%", "%%")
        if k.type is bool and default is False:
            parser.add_argument(k.flag or _flag(name), action="store_true", help=text)
            continue
        if k.type is bool:  # on by default, or "not given" (None): --x and --no-x
            parser.add_argument(k.flag or _flag(name), action=argparse.BooleanOptionalAction, default=default,
                                help=text)
            continue
        shown = "" if default in (None, []) or "default" in text else f" (default {default})"
        kwargs: dict[str, Any] = {"help": text + shown, "metavar": k.metavar, "default": default}
        if k.choices is not None:
            kwargs["choices"] = k.choice_list()
            kwargs.pop("metavar")
        elif k.type in (int, float):
            kwargs["type"] = k.type
        if f.default_factory is list:  # a repeatable flag
            kwargs["action"] = "append"
        parser.add_argument(k.flag or _flag(name), **kwargs)
    parser.add_argument("--plan", metavar="TOML",
                        help="A TOML file of the keys above (a key is its flag's name with underscores: "
                             "--n-heldout is n_heldout); --set and the flags given go on top.")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="Set one key of the above to a TOML value (KEY as in --plan); repeatable.")
    _PARSERS[parser] = (cls, tuple(required))


def _study_error(err: VPIntegratorError) -> StudyError:
    """``err`` as a ``StudyError`` whose message names the flag (``--jobs must be ...``)."""
    text = str(err)
    if err.key and text.startswith(f"{err.key} "):
        text = _flag(err.key) + text[len(err.key):]
    elif err.key and text.startswith(f"--{err.key} "):  # parse_seeds' own "--seeds must ..."
        text = _flag(err.key) + text[len(err.key) + 2:]
    return StudyError(text)


def _build(cls: type[Config], values: Mapping[str, Any]) -> Config:
    try:
        return cls.from_dict(values, source="flags")
    except VPIntegratorError as err:
        raise _study_error(err) from None


def _write_back(a: argparse.Namespace, options: Config, names: Sequence[str]) -> None:
    keys = declared(type(options))
    for name in names:
        value = getattr(options, name)
        if keys[name].type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # 60 in a TOML file is 60.0, as --train-seconds 60 is
        setattr(a, name, value)


def checked(a: argparse.Namespace, cls: type[Config] = StudyOptions) -> Config:
    """The ``cls`` keys of the parsed flags ``a``, checked once (a bad value: a one-line ``StudyError`` naming
    its flag); the checked values (``--seeds`` as a list) are written back into ``a``."""
    values = {name: getattr(a, name) for name in declared(cls) if hasattr(a, name)}
    options = _build(cls, values)
    _write_back(a, options, list(values))
    return options


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` with a parser of ``add_options``: defaults, then ``--plan``'s keys, then ``--set`` and
    the flags given, every key checked once; the namespace holds the checked values (see the module
    docstring). Bad input: a one-line ``StudyError`` naming the flag or key."""
    cls, required = _PARSERS[parser]
    names = [n for n, k in declared(cls).items() if k.flag != ""]
    defaults = {n: parser.get_default(n) for n in names}
    parser.set_defaults(**{n: None for n in names})  # None: not given on the command line
    try:
        a = parser.parse_args(argv)
    finally:
        parser.set_defaults(**defaults)
    given = {n: getattr(a, n) for n in names if getattr(a, n) is not None}
    try:
        sets = parse_set(a.set)
        check_keys(sets, names, "--set")
        plan = read_toml(a.plan, what="--plan") if a.plan else {}
        check_keys(plan, names, f"--plan {a.plan}")
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    for name in sets:
        if name in given:
            raise StudyError(f"--set {name}=...: {name} is also given by its own flag {_flag(name)}; give it once")
    values = dict(defaults)
    for layer in (plan, sets, given):
        values.update({k: v for k, v in layer.items() if v is not None})
    for name in required:
        if values.get(name) is None:
            raise StudyError(f"{_flag(name)} is required (the flag, or {name} in the --plan file)")
    _write_back(a, _build(cls, values), names)
    return a
