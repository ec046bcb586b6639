"""The one study driver: ``main(study, argv)`` parses a study's command line once and runs it.

Every way of running a study goes through ``main``: ``vp-study NAME ARGS`` (``vpintegrator.cli.study``),
``scripts/reproduce_NAME.py ARGS`` and ``python -m vpintegrator.studies.NAME ARGS``. A study is a
``vpintegrator.studies.options.Study`` (its module's ``STUDY``); ``main`` parses with
``vpintegrator.studies.options.parse_command`` (the keys, ``--plan``, ``--set``), answers ``--help`` and
``--print-config`` without running, builds the study's plan once (``Study.plan``: the checked options go
there and nowhere else) and runs the study on it, shows the runner's progress lines on stderr through ``logging``
(``study_logging``: ``-q`` none, ``-v`` each step's command line too), and with ``--json`` prints one JSON
object on stdout. Errors are one line (``guarded``); an interrupt is one line with the command that resumes
(``resume_line``); the lock files a run killed outright left under ``--out`` are removed first, said in one line
(``plan.clear_stale_locks``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .._logging import StderrHandler
from .._signals import interrupts_raise
from ..errors import VPIntegratorError
from .errors import StudyError
from .members import seeds_as_members
from .options import HelpShown, config_toml, parse_command
from .plan import clear_stale_locks

__all__ = ["load", "main", "study_logging", "guarded"]


class _StderrHandler(StderrHandler):
    """The study's lines: ``message``, ``Warning: ``/``Error: `` above, ``debug: name: message`` below."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{'Error' if record.levelno >= logging.ERROR else 'Warning'}: {text}"
        return text if record.levelno >= logging.INFO else f"debug: {record.name}: {text}"


@contextlib.contextmanager
def study_logging(quiet: bool = False, verbose: bool = False) -> Iterator[None]:
    """The package's log messages (logger ``vpintegrator``: the runner's progress lines among them) on stderr
    for the block: warnings always, progress unless ``quiet``, each step's command line and debug messages
    with ``verbose``; the logger is left as it was found afterwards."""
    logger = logging.getLogger("vpintegrator")
    level = logger.level
    handler = _StderrHandler()
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    logger.setLevel(handler.level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def load(name: str) -> Any:
    """The ``Study`` of the study ``name`` (an entry of ``vpintegrator.studies.options.STUDIES``: a preset's is the
    comparison engine's with ``--preset`` defaulting to it); an unknown name is a one-line ``StudyError`` listing the
    valid ones."""
    import importlib

    from ..config import did_you_mean
    from .options import STUDIES

    if name not in STUDIES:
        raise StudyError(f"unknown study {name!r}{did_you_mean(name, STUDIES)}; valid: {', '.join(STUDIES)}")
    module, _, preset = STUDIES[name][0].partition(":")
    found = importlib.import_module(f"vpintegrator.studies.{module}")
    # a study that is a preset of the comparison engine: vp-study compare --preset NAME
    return found.preset_study(preset, name) if preset else found.STUDY


def guarded(body: Callable[[], int], error_prefix: str, interrupted: str) -> int:
    """Run a study's ``body``: a ``StudyError`` becomes ``<error_prefix><message>`` on stderr and
    exit status 2, Ctrl-C or SIGTERM ``interrupted`` and 130 (SIGTERM raises ``KeyboardInterrupt`` in the
    block: ``vpintegrator._signals.interrupts_raise``, the CLIs' policy)."""
    try:
        with interrupts_raise():
            return body()
    except StudyError as err:
        print(f"{error_prefix}{err}", file=sys.stderr)
        return 2
    except VPIntegratorError as err:  # the library's one line (a damaged file of the study's own, ...)
        print(f"{error_prefix}{err.render(lambda key: '--' + key.replace('_', '-'))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130


def resume_line(interrupted: str, command: str | None, args: list[str]) -> str:
    """The study's ``interrupted`` line with the exact command that resumes the run: the same one without
    ``--overwrite`` (a resume keeps the finished steps), with ``--skip-existing`` where the line asks for it."""
    import shlex

    if not command:
        return interrupted
    again = [a for a in args if a != "--overwrite"]
    if "--skip-existing" in interrupted and "--skip-existing" not in again:
        again.append("--skip-existing")
    return f"{interrupted.rstrip('.')}; resume with: {' '.join([command, *map(shlex.quote, again)])}"


def _summary(name: str, out_key: str | None, status: int) -> dict[str, Any]:
    out = Path(out_key) if out_key else None
    files: list[str] = []
    if out is not None and out.is_dir():
        files = sorted(str(p) for p in out.iterdir() if p.is_file() and p.suffix in (".md", ".json", ".csv"))
    elif out is not None and out.is_file():
        files = [str(out)]
    return {"study": name, "exit_status": status, "out": None if out is None else str(out), "files": files}


def main(study: Any, argv: Iterable[str] | None = None, prog: str | None = None) -> int:
    """Run one study from its command line: the one driver of every study (``vp-study NAME ARGS``,
    ``scripts/reproduce_*.py``, ``python -m vpintegrator.studies.<step>``).

    ``study`` is a ``Study`` or the name of one (``STUDIES``); ``argv`` its arguments (default
    ``sys.argv[1:]``); ``prog`` the command name in its help and messages. Parses once
    (``options.parse_command``: ``--plan``, ``--set``, the flags), answers ``--help`` and ``--print-config``
    without running, builds the study's plan once (``Study.plan``) and runs the study on it, with its progress on stderr (``-q`` none, ``-v`` each step's command line too) and, with
    ``--json``, prints one JSON object on stdout (study, exit status, out, the result files) while the
    study's own text goes to stderr. Returns the exit status: 0 done, 2 bad input or a failed step (one
    line on stderr), 130 interrupted (Ctrl-C, SIGTERM to the study or its process group: the running trainings
    stop, none starts after, and one line gives the command that resumes: ``resume_line``).
    """
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    name = study if isinstance(study, str) else (study.prog or "study")
    try:
        plan = load(study) if isinstance(study, str) else study
    except StudyError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    command = prog or (f"vp-study {study}" if isinstance(study, str) else plan.prog) or None

    def body() -> int:
        try:
            options, invocation = parse_command(plan, args, command)
        except HelpShown as shown:
            return shown.code
        if invocation.print_config:
            sys.stdout.write(config_toml(plan, options))
            return 0
        out = getattr(options, "out", None)
        text = contextlib.redirect_stdout(sys.stderr) if invocation.as_json else contextlib.nullcontext()
        device = getattr(options, "seeds_as_members", None)  # to the runners the study makes
        members = seeds_as_members(device) if device is not None else contextlib.nullcontext()
        with study_logging(invocation.quiet, invocation.verbose), text, members:
            built = plan.plan(options, invocation.argv)
            if out and not getattr(built, "dry_run", False):  # the locks a run killed outright left, one line
                clear_stale_locks(Path(out))
            try:
                status = plan.run(built)
            except VPIntegratorError as err:  # a one_line study's library error: its message as is
                if not getattr(plan.run, "one_line", False):
                    raise
                raise StudyError(str(err)) from None
        if invocation.as_json:
            sys.stdout.write(json.dumps(_summary(name, out, status)) + "\n")
        return status

    return guarded(body, plan.error_prefix, resume_line(plan.interrupted, command, args))
