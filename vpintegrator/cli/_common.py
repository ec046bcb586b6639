"""Shared plumbing for the click commands."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable, Mapping

import click

from .._logging import StderrHandler
from .._signals import interrupts_raise
from .._toml import tomllib
from .._io import DEVICE_ERRNOS
from ..errors import VPIntegratorError


def cli_errors(fn: Callable) -> Callable:
    """Decorate a click command callback: user errors become one-line messages, no traceback.

    ``VPIntegratorError``, missing files, permission problems and malformed TOML exit with status 1 and
    ``Error: <message>``; Ctrl-C or SIGTERM exit with status 130 after the library has cleaned up.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        try:
            with interrupts_raise():  # the handlers as they were once the command returns
                return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except VPIntegratorError as err:
            raise click.ClickException(_one_line(err.render(_flag_namer()))) from None
        except tomllib.TOMLDecodeError as err:
            raise click.ClickException(f"malformed TOML: {_one_line(err)}") from None
        except FileNotFoundError as err:
            name = err.filename or _one_line(err)
            if _is_link_loop(err.filename):  # an input read before any output check (the rollout plan's order)
                raise click.ClickException(f"{name}: a loop of symbolic links (a link that leads back to itself); "
                                           "point it at a real file or give another path") from None
            raise click.ClickException(f"file not found: {name}") from None
        except (PermissionError, IsADirectoryError) as err:
            raise click.ClickException(f"cannot access {err.filename}: {err.strerror}") from None
        except OSError as err:
            if err.errno not in DEVICE_ERRNOS:  # a full disk, an I/O error, a read-only file system: one line
                raise
            raise click.ClickException(f"cannot write {err.filename or 'the output'}: {err.strerror}; free space "
                                       "or write elsewhere (files written completely before are intact)") from None
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing partial was left at the output path.", err=True)
            sys.exit(130)

    return wrapper


#: ``ctx.meta`` entry: the keys this command got by ``--set`` (named as keys, not flags, in messages)
SET_KEYS = "vpintegrator.set_keys"


def _is_link_loop(path: Any) -> bool:
    """Whether ``path`` is a symbolic link that leads back to itself (what a 'not found' may really be)."""
    import errno
    import os

    if not isinstance(path, (str, os.PathLike)) or not os.path.islink(path):
        return False
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _one_line(err: BaseException | str) -> str:
    return " ".join(str(err).split())


def _flag_namer() -> Callable[[str], str]:
    """key -> this command's flag for it (``t_end`` -> ``--t-end``), or the key itself when it has none or
    when it was given by ``--set KEY=...`` (the message names it as the user wrote it)."""
    ctx = click.get_current_context(silent=True)
    flags: dict[str, str] = {}
    if ctx is not None:
        for param in ctx.command.params:
            if isinstance(param, click.Option) and param.name:
                flags[param.name.rstrip("_")] = max(param.opts, key=len)  # set_ (a keyword) is the key set
        for key in ctx.meta.get(SET_KEYS, ()):
            flags.pop(key, None)

    def name(key: str) -> str:
        return flags.get(key, f"{key}")

    return name


def shown_path(path: Any) -> str:
    """``path`` as a command prints it: relative to the working directory when it lies under it
    (``runs/a``, not ``/home/me/project/runs/a``), else as it is."""
    import os
    from pathlib import Path

    if path is None:
        return "None"
    try:
        p, cwd = Path(path).resolve(), Path.cwd().resolve()
    except (OSError, RuntimeError, ValueError):
        return str(path)
    if p == cwd:
        return "."
    return p.relative_to(cwd).as_posix() if cwd in p.parents else os.fspath(path)


# ---------------------------------------------------------------------------------------------------
# the options every command spells the same way


def version_option(fn: Callable) -> Callable:
    """``--version``: print ``<command> (vpintegrator) <version>`` and exit."""
    from .._version import __version__

    return click.version_option(__version__, "--version", message="%(prog)s (vpintegrator) %(version)s")(fn)


def quiet_option(fn: Callable) -> Callable:
    """``--quiet``/``-q`` and ``--verbose``/``-v``. The callback gets ``quiet`` and no ``verbose``; the
    library's log messages are set up for the command (``setup_logging``)."""

    fn = click.option("--verbose", "-v", is_flag=True,
                      help="Also print the library's debug messages on stderr.")(fn)
    fn = click.option("--quiet", "-q", is_flag=True,
                      help="No progress output on stderr (errors and warnings are still printed).")(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, quiet: bool, verbose: bool, **kwargs: Any):
        logger = logging.getLogger("vpintegrator")
        level = logger.level
        handler = setup_logging(quiet=quiet, verbose=verbose)
        try:
            return fn(*args, quiet=quiet, **kwargs)
        finally:  # a command run in-process (tests, notebooks) leaves the logger as it found it
            logger.removeHandler(handler)
            logger.setLevel(level)

    return wrapper


class _Formatter(logging.Formatter):
    """``message`` for information, ``Warning: message`` / ``Error: message`` above, ``debug: name: message``."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"Error: {text}"
        if record.levelno >= logging.WARNING:
            return f"Warning: {text}"
        if record.levelno < logging.INFO:
            if record.exc_info:  # with --verbose: the full traceback of an error in a user's class (plugins.user_code)
                text = f"{text}\n{self.formatException(record.exc_info)}"
            return f"debug: {record.name}: {text}"
        return text


def setup_logging(quiet: bool = False, verbose: bool = False) -> logging.Handler:
    """Show the library's log messages (logger ``vpintegrator``) on stderr for a command: warnings and errors
    always, information unless ``quiet``, debug messages with ``verbose``. Replaces the handler an earlier
    command of this process installed; returns the new one."""
    logger = logging.getLogger("vpintegrator")
    for old in [h for h in logger.handlers if getattr(h, "_vpintegrator_cli", False)]:
        logger.removeHandler(old)
    handler = StderrHandler()
    handler._vpintegrator_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(_Formatter())
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler.setLevel(level)
    logger.setLevel(level)
    logger.addHandler(handler)
    return handler


def json_option(fn: Callable) -> Callable:
    """``--json``: the summary as one JSON object on stdout, and nothing else there."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print a machine-readable summary (one JSON object) on stdout instead of text.")(fn)


def print_config_option(fn: Callable) -> Callable:
    """``--print-config``: print the resolved configuration as TOML and exit without running."""
    return click.option("--print-config", is_flag=True,
                        help="Print the resolved configuration (TOML: file, --set and flags applied) and exit "
                        "without running.")(fn)


def run_options(fn: Callable) -> Callable:
    """``--print-config``, ``--json``, ``--quiet``/``--verbose`` and ``--version``, in that order: the options of
    every command that runs from a configuration (vp-gen, vp-train, vp-rollout, vp-plot)."""
    return print_config_option(json_option(quiet_option(version_option(fn))))


def echo_json(summary: Any) -> None:
    """``summary`` as one line of JSON on stdout (paths as strings, NaN as null)."""
    import json
    import math
    import os

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if hasattr(value, "tolist") and callable(value.tolist):  # NumPy scalars and arrays
            value = value.tolist()
            if isinstance(value, list):
                return clean(value)
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    click.echo(json.dumps(clean(summary), allow_nan=False))


class Names(click.ParamType):
    """A name from a list known at run time (integrators, models, ...): ``--help`` and shell completion
    show the list; the library checks the value, so a wrong one gets its one-line error (with the valid
    names and a close match) like every other bad input. ``load`` runs only when the list is shown."""

    name = "name"

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = [str(n) for n in self._load()]
        return self._names

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        return [CompletionItem(n) for n in self.names() if n.startswith(incomplete)]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


def traj_list(text: str | None, example: str, allow_all: bool = False) -> list[int] | None:
    """``--traj``: ``"0,3,7"`` -> [0, 3, 7], each index once; None (every trajectory) for None and, with
    ``allow_all``, for ``"all"``. ``example`` is the comma list the error message shows."""
    if text is None or (allow_all and text.strip() == "all"):
        return None
    from ..config import distinct

    try:
        return distinct([int(v) for v in text.split(",") if v.strip()], "traj")
    except ValueError as err:
        if isinstance(err, VPIntegratorError):
            raise
        raise VPIntegratorError(f"traj must be a comma list of integers, e.g. {example}; got {text!r}", key="traj") from None


def given(ctx: click.Context, name: str) -> bool:
    """Whether the parameter ``name`` came from the command line (not its default)."""
    return ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)


def given_only(ctx: click.Context, values: Mapping[str, Any], params: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``values`` with ``None`` for every one whose parameter was not given on the command line (so that a
    config file's value wins over a flag's shown default). ``params``: key -> parameter name where they
    differ."""
    params = params or {}
    return {k: (v if given(ctx, params.get(k, k)) else None) for k, v in values.items()}


class Listed(click.Option):
    """An option whose ``--help`` line ends with its choices (a ``Names`` type's, read when shown)."""

    def get_help_record(self, ctx: click.Context):
        record = super().get_help_record(ctx)
        if record is None or not isinstance(self.type, Names):
            return record
        return record[0], f"{record[1]}  [choices: {', '.join(self.type.names())}]"


def dask_scheduler_options(fn: Callable) -> Callable:
    """``--dask-scheduler ADDRESS`` (default ``$DASK_SCHEDULER_ADDRESS``; not ``--scheduler``, which is
    vp-train's learning-rate schedule) and ``--shards N``. The callback gets the address as ``scheduler`` and
    the number of blocks as ``n_shards``."""
    fn = click.option("--shards", "n_shards", type=int, default=None,
                      help="With --dask-scheduler: the number of blocks (default: one per worker of the cluster).")(fn)
    fn = click.option("--dask-scheduler", "dask_scheduler", metavar="ADDRESS", envvar="DASK_SCHEDULER_ADDRESS",
                      default=None,
                      help="Run the blocks on this dask.distributed scheduler (default: $DASK_SCHEDULER_ADDRESS), one "
                      "shard per block (--shards of them, or one per scheduler worker), and write the index at "
                      "--out.")(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, dask_scheduler: str | None, **kwargs: Any):
        return fn(*args, scheduler=dask_scheduler, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------------------------------
# shell completion (click's: ``eval "$(_VP_GEN_COMPLETE=bash_source vp-gen)"``, see docs/setup.md)


def _names_and_files(names: list[str], incomplete: str) -> list:
    from click.shell_completion import CompletionItem

    items = [CompletionItem(n) for n in names if n.startswith(incomplete)]
    return items + [CompletionItem(incomplete, type="file")]  # the shell completes a path as well


def complete_spec(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """vp-gen's SPEC: the shipped spec names, or a TOML file."""
    from ..data.spec import list_specs

    return _names_and_files(list_specs(), incomplete)


def complete_config(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """vp-train's CONFIG: the shipped config names, or a TOML file."""
    from .._shipped import list_configs

    return _names_and_files(list_configs(), incomplete)


def pretrained_lines() -> list[str]:
    """One line per shipped pretrained model: its name, architecture, parameters and what it was trained on
    (step and system, from its metadata; no torch), for ``vp-rollout --list`` and ``vp-train --list``."""
    from .._shipped import pretrained_names, pretrained_records

    names, records = pretrained_names(), pretrained_records()
    if not names:
        return ["  (none shipped with this install)"]
    width = max(len(n) for n in names)
    lines = []
    for name in names:
        entry = records.get(name, {})
        model, trained = entry.get("model") or {}, entry.get("trained_on") or {}
        what = [str(model.get("name", "?")), f"dim {model.get('dim', '?')}", f"seq_len {model.get('seq_len', 1)}"]
        if entry.get("n_params") is not None:
            what.append(f"{entry['n_params']} parameters")
        if trained.get("dt") is not None:
            family = " (parameters per trajectory)" if trained.get("parametric") else ""
            what.append(f"trained at dt = {float(trained['dt']):g} on {trained.get('system')}{family}")
        lines.append(f"  {name:<{width}}  {', '.join(what)}")
    return lines


def complete_model(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """A model (vp-rollout --model, vp-train --init-from): ``pretrained:NAME``, or a file or run directory.
    After ``LABEL=`` the names are offered with the label in front."""
    from ..models.files import list_pretrained

    label, sep, rest = incomplete.partition("=")
    if not sep or "/" in label or label.startswith("pretrained:"):
        label, sep, rest = "", "", incomplete
    names = [f"{label}{sep}pretrained:{n}" for n in list_pretrained()]
    return _names_and_files(names, incomplete)
