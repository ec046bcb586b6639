"""The studies' options, declared once on ``Config`` s, their parser and the list of studies.

Every study takes the same twelve flags, the keys of ``StudyOptions`` (``vpintegrator.studies.plan``, with
``StudyPlan``, the plan they resolve into). A study's own flags (``--quick``, ``--models``, ``--train-seconds``,
...) are the keys of its subclass of ``StudyOptions`` (``RigidBodyOptions``, ... beside the study), each
documented once in the subclass's docstring: its first sentence is the flag's help.

A study is a plan the one runner runs (``vpintegrator.studies.driver.main``): its module defines
``STUDY = Study(options=..., run=..., plan=..., doc=__doc__, ...)``. ``Study.command`` makes the keys click
options (``--key-name``), with ``--plan TOML`` (a file of the study's keys, e.g. ``models = "vpt,st"``),
``--set KEY=VALUE`` and the conventions of the other commands (``--print-config``, ``--json``, ``-q``/``-v``,
``-h``/``--help``); ``parse`` parses a command line: the defaults, then the plan file, then ``--set`` and the
flags given on top (a key given by ``--set`` and by its own flag is refused), every key checked once by
``Config`` (``--seeds`` as a list of integers). A bad key or value is a one-line ``StudyError`` naming the flag.

Plans, not configs: the checked options reach one function of the study only, its plan builder
(``Study.plan``, ``build_plan(options, argv) -> SomePlan`` beside the study), which resolves them once (the
``--quick`` defaults, the checks that need the file system) into a frozen, typed plan; ``run`` and everything
below it take the plan. ``StudyPlan`` holds the keys every study of trainings shares (a study's plan is a
subclass of it with its own fields); a study with no keys of its own runs on ``StudyPlan.build``.

``STUDIES`` names the studies ``python -m vpintegrator study NAME`` (``vp-study NAME``) runs: name ->
(module under ``vpintegrator.studies`` that defines ``STUDY``, one line); ``compare:PRESET``: the comparison engine
with its preset (``vpintegrator/studies/presets/PRESET.toml``). Adding a study is one entry.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import click

from ..config import Config, check_keys, declared, dump_toml, parse_set, read_toml
from ..errors import VPIntegratorError
from .errors import StudyError
from .members import MEMBER_STUDIES
from .plan import (BUDGETS, PLATEAU_HELP, StudyOptions, StudyPlan, check_device, comma_list,  # noqa: F401  (re-exported)
                   model_list, name_list, number_list, seed_list)

__all__ = ["STUDIES", "SHIPPED_RESULTS", "BUDGETS", "PLATEAU_HELP", "HelpShown", "Invocation", "Study", "StudyOptions",
           "StudyPlan", "comma_list", "config_toml", "model_list", "name_list", "number_list", "parse", "parse_command", "seed_list"]

#: study name -> (module under vpintegrator.studies that defines ``STUDY``, or compare:PRESET; what it does)
STUDIES: dict[str, tuple[str, str]] = {
    "rigid_body": ("rigid_body", "the paper's rigid-body study: VPFF, VPT and ST against classical methods"),
    "rigid_body_structure": ("rigid_body_structure", "structure-preserving models on the rigid body (Lie-Poisson, "
                                                     "SympNets, VP): errors, drifts, long runs"),
    "rigid_body_quality": ("rigid_body_quality", "the rigid-body VPT trained in phases (unrolled fine-tuning)"),
    "coupled_oscillator": ("compare:coupled_oscillator", "VPT against the standard transformer, Stormer-Verlet and "
                                                         "RK4 on the coupled oscillator (a preset of compare)"),
    "context": ("context", "context-conditioned Lie-Poisson nets on the rigid-body family against identification "
                           "+ classical methods"),
    "unknown_form": ("unknown_form", "when the equations are unknown: flow maps, learned vector fields, SINDy, the "
                                     "wrong model class and the oracle at equal CPU cost"),
    "partial_observation": ("partial_observation", "when the state is incomplete: multi-step models on observed "
                                                   "windows against the window without attention, the ablations, "
                                                   "state estimation + the true equations and parroting"),
    "memory": ("memory", "the memory ladder on an observed oscillator and a particle in a hidden bath: who wins"),
    "compare": ("compare", "anyone's problem judged: classical rows with the equations, learned rows of its "
                           "structure, the identity map, over seeds, one verdict line"),
    "reduction": ("reduction", "Hamiltonian lattices (Toda, FPU-beta) at N up to 3200: full-order steppers against "
                               "PSD, PSD-Galerkin (hyper-reduced) and PSD + flow map, held-out mu, break-even"),
}

#: study name -> the results files shipped with the package that its tables redraw from, by name
#: (``vp-study NAME --table-only --results FILE --out DIR``; ``vpintegrator._shipped.results_path``: a name is
#: the file's path below ``docs/data/`` without ``.json``). The rigid-body quality study ships none. Runs a
#: re-make superseded live in ``docs/data/archive/`` (``vpintegrator._shipped.ARCHIVE``), outside the wheel.
SHIPPED_RESULTS: dict[str, tuple[str, ...]] = {
    "rigid_body": ("rigid_body_study_plateau",),
    "rigid_body_structure": ("rigid_body_structure_study_plateau",),
    "coupled_oscillator": ("coupled_oscillator_quick",),
    "context": ("context_oscillator",),
    "unknown_form": ("unknown_form_plateau",),
    "partial_observation": tuple(f"partial_observation/{size}" for size in (
        "default_steps", "quick_steps", "toda_default_steps", "recurrent_quick", "recurrent_steps30")),
    "memory": ("memory/default", "memory/chain_default", "memory/quick", "memory/bath_quick", "memory/bath_window", "memory/bath_window16"),
    "reduction": tuple(f"reduction/{size}" for size in (
        "default", "quick", "quick_meter", "medium", "toda_n200", "toda_n3200", "fpu_beta_n3200")),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(f: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return None if f.default_factory is dataclasses.MISSING else f.default_factory()


@dataclass(frozen=True)
class Study:
    """One study as ``vpintegrator.studies.driver.main`` runs it: its keys, how they are resolved and what
    runs.

    A study module defines ``STUDY = Study(...)`` (and an entry in ``STUDIES``); the runner parses its
    command line once (``parse_command``), with every study's conventions (``--plan``, ``--set``,
    ``--print-config``, ``--json``, ``-q``/``-v``, ``--help``), builds the study's plan once (``plan``) and
    calls ``run`` with it.

    Parameters
    ----------
    options : type
        The study's ``Config`` (a subclass of ``StudyOptions`` for a study of trainings): one flag per key.
    run : callable
        ``run(plan) -> int``: the study, from the plan ``plan`` built (exit status 0 when done; bad input or a
        failed step raises ``StudyError``).
    plan : callable
        ``plan(options, argv) -> plan``: the study's plan builder, the one function that takes its checked
        options (an instance of ``options``) and the command line as given; it resolves them once (``--quick``
        defaults, checks that need the file system) into a frozen, typed plan. Default: ``StudyPlan.build``.
    doc : str
        The help's description (the module docstring: its first paragraph is shown).
    required : tuple of str
        Keys with no default (their flag or the ``--plan`` file gives them).
    defaults, helps : mapping
        A key's default and help text for this study in place of the declared ones.
    prog : str
        The command name in messages and ``--help`` (``vp-study NAME`` when the runner runs it by name).
    error_prefix, interrupted : str
        What a ``StudyError`` line starts with on stderr, and the line printed on Ctrl-C.
    """

    options: type
    run: Callable[[Any], int]
    plan: Callable[[Any, tuple[str, ...]], Any] = StudyPlan.build
    doc: str = ""
    required: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    helps: Mapping[str, str] = dataclasses.field(default_factory=dict)
    prog: str = ""
    error_prefix: str = "Error: "
    interrupted: str = "Interrupted; rerun with --skip-existing to continue."

    def keys(self) -> list[str]:
        """The keys that have a flag, in declaration order."""
        return [n for n, k in declared(self.options).items() if k.flag != ""]

    def command(self, prog: str | None = None) -> click.Command:
        """The study's command line as a click command (its ``--help``); ``parse`` parses with it."""
        fields = {f.name: f for f in dataclasses.fields(self.options)}
        params: list[click.Parameter] = []
        for name, k in declared(self.options).items():
            if k.flag == "":
                continue
            default = None if name in self.required else self.defaults.get(name, _default(fields[name]))
            text = self.helps.get(name, k.help)
            flag = "--" + k.flag if k.flag else _flag(name)
            if k.type is bool:
                decls = [flag] if default is False else [f"{flag}/--no-{flag[2:]}"]
                params.append(click.Option([*decls, name], is_flag=True, default=default, help=text))
                continue
            shown = "" if default in (None, []) or "default" in text else f" (default {_shown(default)})"
            kwargs: dict[str, Any] = {"help": text + shown, "metavar": k.metavar, "default": default}
            if k.choices is not None:
                kwargs["type"] = click.Choice(k.choice_list())
                kwargs.pop("metavar")
            elif k.type in (int, float):
                kwargs["type"] = click.INT if k.type is int else click.FLOAT
            if fields[name].default_factory is list:  # a repeatable flag
                kwargs.update(multiple=True, default=())
            params.append(click.Option([flag, name], **{a: v for a, v in kwargs.items() if v is not None}))
        params += [
            click.Option(["--plan"], metavar="TOML", help="A TOML file of the keys above (a key is its flag's name "
                         "with underscores: --n-heldout is n_heldout); --set and the flags given go on top."),
            click.Option(["--set", "set_"], multiple=True, metavar="KEY=VALUE",
                         help="Set one key of the above to a TOML value (KEY as in --plan); repeatable."),
            click.Option(["--print-config"], is_flag=True, help="Print the resolved keys (TOML: --plan, --set and "
                         "flags applied; a --plan file for the same study) and exit without running."),
            click.Option(["--json", "as_json"], is_flag=True, help="Print a machine-readable summary (one JSON "
                         "object) on stdout; the study's own text goes to stderr."),
            click.Option(["--quiet", "-q"], is_flag=True, help="No progress lines on stderr (errors and warnings "
                         "are still printed)."),
            click.Option(["--verbose", "-v"], is_flag=True, help="Also log each step's command line and the "
                         "library's debug messages on stderr."),
        ]
        description = " ".join(self.doc.split("\n\n")[0].split())
        return click.Command(prog or self.prog or "vp-study", params=params, help=description,
                             context_settings={"help_option_names": ["-h", "--help"], "terminal_width": 110,
                                               "max_content_width": 110})

    def parse(self, argv: Sequence[str] | None = None, prog: str | None = None) -> Any:
        """``argv`` parsed (``parse_command``) and built into the study's plan (``plan``): what ``run`` takes."""
        options, invocation = parse_command(self, argv, prog)
        return self.plan(options, invocation.argv)


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


class HelpShown(Exception):
    """``--help`` was given: the help was printed (``code`` is the exit status)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Invocation:
    """How a study was asked to run, beside its keys: the command line as given and the driver's own flags."""

    argv: tuple[str, ...] = ()
    print_config: bool = False
    as_json: bool = False
    quiet: bool = False
    verbose: bool = False


def parse(study: Study, argv: Sequence[str] | None = None, prog: str | None = None) -> Config:
    """The checked options (an instance of ``study.options``) of a study's command line: ``parse_command``'s
    first half."""
    return parse_command(study, argv, prog)[0]


def parse_command(study: Study, argv: Sequence[str] | None = None,
                  prog: str | None = None) -> tuple[Config, Invocation]:
    """Parse a study's command line: the defaults, then ``--plan``'s keys, then ``--set`` and the flags given (a
    key given by ``--set`` and by its own flag is refused), every key checked once by its ``Config`` (an
    instance of ``study.options``: ``--seeds`` as a list of integers, a float key's integer as a float), and the
    ``Invocation`` (the arguments as given, ``--print-config``, ``--json``, ``-q``, ``-v``). Bad input: a one-line
    ``StudyError`` naming the flag or key; ``--help`` prints the help and raises ``HelpShown``."""
    from click.core import ParameterSource

    cmd = study.command(prog)
    try:
        ctx = cmd.make_context(cmd.name, list(sys.argv[1:] if argv is None else argv))
    except click.exceptions.Exit as exc:  # --help
        raise HelpShown(exc.exit_code) from None
    except click.UsageError as err:
        raise StudyError(f"{' '.join(err.format_message().split())} (see --help)") from None
    names = study.keys()
    params = ctx.params
    given = {n: (list(params[n]) if isinstance(params[n], tuple) else params[n]) for n in names
             if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE and params[n] not in (None, ())}
    defaults = {n: (list(params[n]) if isinstance(params[n], tuple) else params[n]) for n in names}
    try:
        sets = parse_set(params["set_"])
        check_keys(sets, names, "--set")
        plan = read_toml(params["plan"], what="--plan") if params["plan"] else {}
        check_keys(plan, names, f"--plan {params['plan']}")
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None
    for name in sets:
        if name in given:
            raise StudyError(f"--set {name}=...: {name} is also given by its own flag {_flag(name)}; give it once")
    values = dict(defaults)
    for layer in (plan, sets, given):
        values.update({k: v for k, v in layer.items() if v is not None})
    for name in study.required:
        if values.get(name) is None and not params["print_config"]:
            raise StudyError(f"{_flag(name)} is required (the flag, or {name} in the --plan file)")
    options = _build(study.options, values)
    if getattr(options, "results", None) is not None and not (getattr(options, "table_only", False)
                                                              or getattr(options, "figures_only", False)):
        raise StudyError("--results is read by --table-only only; add --table-only to draw the tables from it")
    budget = getattr(options, "budget", "plateau")
    if getattr(options, "max_steps", None) is not None and budget != "plateau":
        raise StudyError(f"--max-steps counts optimiser steps under --budget plateau only; --budget {budget} "
                         f"stops each training by its {budget} seconds: add --budget plateau, or drop --max-steps")
    members = getattr(options, "seeds_as_members", None)
    if members is not None:
        check_device(members)
        if study.run.__module__.split(".")[2:3] not in ([m] for m in MEMBER_STUDIES):
            raise StudyError("--seeds-as-members: this study does not train its seeds as the runner's vp-train "
                             f"runs (only {', '.join(MEMBER_STUDIES)} do); leave it out")
    invocation = Invocation(tuple(sys.argv[1:] if argv is None else argv), bool(params["print_config"]),
                            bool(params["as_json"]), bool(params["quiet"]), bool(params["verbose"]))
    return options, invocation


def config_toml(study: Study, options: Config) -> str:
    """The checked ``options`` of a study as TOML: a ``--plan`` file that gives the same study (keys not set
    are left out)."""
    return dump_toml({n: getattr(options, n) for n in study.keys()})


def _study_error(err: VPIntegratorError) -> StudyError:
    """``err`` as a ``StudyError`` whose message names the flag (``--jobs must be ...``)."""
    text = str(err)
    if err.key and text.startswith((f"{err.key} ", f"{err.key}:")):  # "seeds must ...", "systems: 'x' is given twice"
        text = _flag(err.key) + text[len(err.key):]
    elif err.key and text.startswith(f"--{err.key} "):  # parse_seeds' own "--seeds must ..."
        text = _flag(err.key) + text[len(err.key) + 2:]
    return StudyError(text)


def _build(cls: type[Config], values: Mapping[str, Any]) -> Config:
    try:
        options = cls.from_dict(values, source="flags")
    except VPIntegratorError as err:
        raise _study_error(err) from None
    for name, k in declared(cls).items():
        value = getattr(options, name)
        if k.type is float and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(options, name, float(value))  # 60 in a TOML file is 60.0, as --train-seconds 60 is
    return options
