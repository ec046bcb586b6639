"""CLI options derived from a config class's declared keys (``vpintegrator.config.key``), and the one
``--set KEY=VALUE`` handler of every command.

A command built with ``@click.command(cls=ConfigCommand, config=load)`` gets one option per declared key
that has a flag: ``--key-with-dashes`` (or the declared ``flag`` and ``short`` spellings), typed from the
key (integer, number, path, on/off for a bool), its choices listed in ``--help`` and known to shell
completion, its default shown (or the declared ``show_default`` text) and its declared help. ``load``
returns the config class and runs only when the options are needed (so that ``--version`` of a command
whose config imports torch stays fast). The callback receives ``flags``: key -> value of exactly the
options given on the command line (a default shown in ``--help`` never overrides a config file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ._common import SET_KEYS, Listed, Names, given


def _option(name: str, info: Any, default: Any) -> click.Option:
    flag = info.flag or name.replace("_", "-")
    decls = [f"--{flag}", *info.short]
    kwargs: dict[str, Any] = {"help": info.help, "hidden": info.hidden, "metavar": info.metavar}
    if info.type is bool:
        decls = [f"--{flag}/--no-{flag}", *info.short]
        kwargs["metavar"] = None
    elif info.choices is not None:
        kwargs["type"] = Names(info.choice_list)
        kwargs["cls"] = Listed
    elif info.path is not None:
        kwargs["type"] = click.Path(path_type=Path, file_okay=info.path != "dir", dir_okay=info.path != "file")
    elif info.type in (int, float):
        kwargs["type"] = click.INT if info.type is int else click.FLOAT
    if info.show_default is True and default is not None:
        kwargs.update(default=default, show_default=True)
    elif isinstance(info.show_default, str):
        kwargs["show_default"] = info.show_default
    if name == "init_from":  # a model: pretrained:NAME names complete in the shell
        from ._common import complete_model

        kwargs["shell_complete"] = complete_model
    cls = kwargs.pop("cls", click.Option)
    return cls([*decls, name], **{k: v for k, v in kwargs.items() if v is not None})


def config_options(config: type, skip: Iterable[str] = ()) -> list[click.Option]:
    """One option per declared key of ``config`` that has a flag (``flag=""`` declares none)."""
    import dataclasses

    from ..config import declared

    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    return [_option(name, info, None if defaults[name] is dataclasses.MISSING else defaults[name])
            for name, info in declared(config).items() if info.flag != "" and name not in skip]


class ConfigCommand(click.Command):
    """A command whose config keys are options (see the module docstring).

    ``config``: a zero-argument callable returning the config class; ``skip``: keys that have a
    hand-written option instead; ``before``: the parameter the derived options go before (``--set``).
    """

    def __init__(self, *args: Any, config: Callable[[], type], skip: Iterable[str] = (), before: str = "set_",
                 **kwargs: Any) -> None:
        self._load = config
        self._skip = tuple(skip)
        self._before = before
        self._derived: list[click.Option] | None = None
        super().__init__(*args, **kwargs)

    #: arguments that end the command before any config key is read: the config class is not loaded for
    #: them (``vp-train --version`` does not import torch)
    ALONE = frozenset({"--version", "--list", "--list-methods"})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        self._alone = bool(args) and set(args) <= self.ALONE and self._derived is None
        try:
            return super().parse_args(ctx, args)
        finally:
            self._alone = False

    @property
    def params(self) -> list[click.Parameter]:  # type: ignore[override]
        if getattr(self, "_alone", False):
            return self._params
        if self._derived is None:
            self._derived = config_options(self._load(), self._skip)
            at = next((i for i, p in enumerate(self._params) if p.name == self._before), len(self._params))
            self._params[at:at] = self._derived
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value

    def invoke(self, ctx: click.Context) -> Any:
        flags = {}
        for param in self._derived or ():
            value = ctx.params.pop(param.name, None)
            if given(ctx, param.name):
                flags[param.name] = str(value) if isinstance(value, Path) else value
        ctx.params["flags"] = flags
        return super().invoke(ctx)


class _LazyHelp(click.Option):
    """An option whose help text is made when it is first shown (from a config's declarations, which
    ``--version`` need not import)."""

    def __init__(self, *args: Any, help: str | Callable[[], str] = "", **kwargs: Any) -> None:
        self._make_help = help
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def help(self) -> str | None:
        if callable(self._make_help):
            self._make_help = self._make_help()
        return self._make_help

    @help.setter
    def help(self, value: str | None) -> None:
        if value is not None:
            self._make_help = value


def set_option(help: str | Callable[[], str]) -> Callable:
    """``--set KEY=VALUE`` (repeatable); the callback gets ``set_``, read with ``read_set``. ``help`` may be
    a zero-argument callable (the text made when ``--help`` shows it)."""
    return click.option("--set", "set_", multiple=True, metavar="KEY=VALUE", cls=_LazyHelp, help=help)


def read_set(items: Iterable[str], valid: Iterable[str], flags: Mapping[str, Any] | None = None, *,
             names: Mapping[str, str] | None = None, translate: Callable[[dict], dict] | None = None,
             hint: str = "") -> dict[str, Any]:
    """The one ``--set`` handler: ``KEY=VALUE`` entries (TOML values; ``a.b=V`` sets key ``b`` of table
    ``a``) as a dict, every key checked against ``valid`` (a close match and the list otherwise), passed
    through ``translate`` (a command's own spellings), and refused when the key also came by its own flag.

    ``flags``: key (``a.b`` for a table's key) -> the flag's value, ``None`` when not given; ``names``:
    key -> flag where the flag is not the key with dashes; ``hint`` ends the unknown-key message.
    """
    from ..config import parse_set, unknown_key
    from ..errors import VPIntegratorError

    values = parse_set(items)
    valid = list(valid)
    for key in values:
        if key not in valid:
            raise VPIntegratorError(unknown_key(key, valid, "set", hint), key="set")
    if translate is not None:
        values = translate(values)
    refuse_twice(values, flags or {}, names or {})
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # later messages name these keys as keys, as the user wrote them
        ctx.meta[SET_KEYS] = set(values)
    return values


def refuse_twice(values: Mapping[str, Any], flags: Mapping[str, Any], names: Mapping[str, str]) -> None:
    """A key given by ``--set`` and by its own flag: one refusal for every command."""
    from ._common import _flag_namer

    name = _flag_namer()
    for key, value in values.items():
        keys = [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]  # a table: its keys
        for k in keys:
            if flags.get(k) is not None:
                flag = names.get(k) or name(k)
                raise click.ClickException(f"--set {k}=...: {k} is also given by its own flag {flag}; give it once")
