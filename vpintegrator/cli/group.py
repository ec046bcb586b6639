"""``python -m vpintegrator COMMAND ...``: the commands under one name (``gen``, ``train``, ``rollout``,
``plot``, ``study`` are ``vp-gen``, ``vp-train``, ``vp-rollout``, ``vp-plot``, ``vp-study``); each is imported when it is run."""

from __future__ import annotations

import importlib

import click

from .._version import __version__

#: subcommand -> (console script, module under vpintegrator.cli)
COMMANDS = {
    "gen": ("vp-gen", "gen"),
    "train": ("vp-train", "train"),
    "rollout": ("vp-rollout", "rollout"),
    "plot": ("vp-plot", "plot"),
    "study": ("vp-study", "study"),
}


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"{__package__}.{COMMANDS[name][1]}").main


@click.group(cls=_Commands, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", message="vpintegrator %(version)s")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Volume-preserving neural integrators: generate data (gen), train (train), roll out next to
    classical integrators (rollout), draw figures (plot) and run the package's studies (study).

    COMMAND is the console script without its prefix: python -m vpintegrator gen SPEC is vp-gen SPEC.
    `python -m vpintegrator COMMAND --help` shows a command's options.
    """
    if ctx.invoked_subcommand is None:  # no command: list them (exit status 0)
        click.echo(ctx.get_help())
