"""The studies' shared options, declared once on a ``Config``, and the list of studies.

Every study takes the same nine flags (``--out``, ``--seeds``, ``--jobs``, ``--budget``,
``--wall-ceiling``, ``--skip-existing``, ``--overwrite``, ``--table-only``, ``--export-pretrained``):
they are the keys of ``StudyOptions``, each declared with ``vpintegrator.config.key`` (type, bounds,
help), and ``add_options`` makes them argparse flags. ``checked`` builds a ``StudyOptions`` from the
parsed flags (every key checked once, by ``Config``), writes the normalised values back (``--seeds`` as a
list of integers) and reports a bad value as a one-line ``StudyError`` naming the flag. A study adds its
own flags beside these on the same parser.

``STUDIES`` names the studies ``python -m vpintegrator study NAME`` (``vp-study NAME``) runs: name ->
(module under ``vpintegrator.studies`` with ``main(argv) -> int``, one line). Adding a study is one entry.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

from ..config import Config, declared, key
from ..errors import VPIntegratorError
from .runner import WALL_CEILING, StudyError, parse_seeds

__all__ = ["STUDIES", "StudyOptions", "add_options", "checked"]

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
}


def _seeds(value: Any) -> list[int] | None:
    if value is None or isinstance(value, list):
        return value if value is None else parse_seeds(",".join(str(v) for v in value))
    try:
        return parse_seeds(str(value))
    except StudyError as err:
        raise VPIntegratorError(str(err), key="seeds") from None


@dataclass
class StudyOptions(Config):
    """The flags every study takes (see the module docstring); a study's own flags stay on its parser."""

    _source_in_messages = False

    out: str | None = key(None, optional=True, type=str, metavar="RUN", help="Run directory.")
    seeds: list[int] | None = key(None, optional=True, check=_seeds, metavar="LIST",
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


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_options(parser: argparse.ArgumentParser, cls: Any = StudyOptions, *,
                defaults: Mapping[str, Any] | None = None, helps: Mapping[str, str] | None = None,
                required: tuple[str, ...] = ()) -> None:
    """The keys of ``cls`` as flags of ``parser`` (``--key-name``); ``defaults`` and ``helps`` replace a key's
    default and help text for one study; ``required`` keys have no default."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, k in declared(cls).items():
        if k.flag == "":
            continue
        f = fields[name]
        default = (defaults or {}).get(name, None if f.default is dataclasses.MISSING else f.default)
        text = (helps or {}).get(name, k.help)
        if k.type is bool:
            parser.add_argument(k.flag or _flag(name), action="store_true", help=text)
            continue
        shown = "" if default is None or name in required or "default" in text else f" (default {default})"
        kwargs: dict[str, Any] = {"help": (text + shown).replace("%", "%%"), "metavar": k.metavar}
        if k.choices is not None:
            kwargs["choices"] = k.choice_list()
            kwargs.pop("metavar")
        elif k.type in (int, float):
            kwargs["type"] = k.type
        if name in required:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
        parser.add_argument(k.flag or _flag(name), **kwargs)


def checked(a: argparse.Namespace, cls: type[Config] = StudyOptions) -> Config:
    """The ``cls`` keys of the parsed flags ``a``, checked once (a bad value: a one-line ``StudyError`` naming
    its flag); the checked values (``--seeds`` as a list) are written back into ``a``."""
    values = {name: getattr(a, name) for name in declared(cls) if hasattr(a, name)}
    try:
        options = cls.from_dict(values, source="flags")
    except VPIntegratorError as err:
        text = str(err)
        if err.key and text.startswith(f"{err.key} "):
            text = _flag(err.key) + text[len(err.key):]
        elif err.key and text.startswith(f"--{err.key} "):  # parse_seeds' own "--seeds must ..."
            text = _flag(err.key) + text[len(err.key) + 2:]
        raise StudyError(text) from None
    for name in values:
        setattr(a, name, getattr(options, name))
    return options
