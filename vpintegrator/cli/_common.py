"""Shared plumbing for the click commands."""

from __future__ import annotations

import functools
import sys
import tomllib
from typing import Any, Callable

import click

from .._signals import interrupts_raise
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
            raise click.ClickException(f"file not found: {name}") from None
        except (PermissionError, IsADirectoryError) as err:
            raise click.ClickException(f"cannot access {err.filename}: {err.strerror}") from None
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing partial was left at the output path.", err=True)
            sys.exit(130)

    return wrapper


def _one_line(err: BaseException | str) -> str:
    return " ".join(str(err).split())


def _flag_namer() -> Callable[[str], str]:
    """key -> this command's flag for it (``t_end`` -> ``--t-end``), or ``key 't_end'`` when it has none."""
    ctx = click.get_current_context(silent=True)
    flags: dict[str, str] = {}
    if ctx is not None:
        for param in ctx.command.params:
            if isinstance(param, click.Option) and param.name:
                flags[param.name.rstrip("_")] = max(param.opts, key=len)  # set_ (a keyword) is the key set

    def name(key: str) -> str:
        return flags.get(key, f"{key}")

    return name
