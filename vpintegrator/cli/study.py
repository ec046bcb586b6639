"""``vp-study NAME [OPTIONS]`` / ``python -m vpintegrator study NAME [OPTIONS]``: run one of the package's
studies (``vpintegrator.studies.options.STUDIES``); ``vp-study`` alone lists them.

The options after NAME go to the study as they are (``vp-study rigid_body --quick --out runs/q`` is
``scripts/reproduce_rigid_body.py --quick --out runs/q``); ``vp-study NAME --help`` shows them. The shared
flags (``--out``, ``--seeds``, ``--jobs``, ``--budget``, ``--wall-ceiling``, ``--skip-existing``,
``--overwrite``, ``--table-only``, ``--export-pretrained``) are ``StudyOptions``' keys, a study's own flags
the keys of its subclass; ``--plan TOML`` reads a study's keys from a file and ``--set KEY=VALUE`` sets one
(``vpintegrator.studies.options.parse``). Exit status: the study's (0 done, 2 bad input or a failed step,
130 interrupted).
"""

from __future__ import annotations

import importlib

import click

from ..config import did_you_mean
from ..studies.options import STUDIES
from ._common import version_option


def _listing() -> str:
    width = max(map(len, STUDIES))
    return "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in STUDIES.items())


@click.command("vp-study", context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True,
                                             "allow_interspersed_args": False})
@click.argument("name", required=False, metavar="NAME")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[OPTIONS]...")
@version_option
@click.pass_context
def main(ctx: click.Context, name: str | None, args: tuple[str, ...]) -> None:
    """Run the study NAME with its OPTIONS (`vp-study NAME --help` lists them); without NAME, list the
    studies."""
    if name is None:
        click.echo("studies (vp-study NAME --help for a study's options):\n" + _listing())
        return
    if name not in STUDIES:
        click.echo(f"Error: unknown study {name!r}{did_you_mean(name, STUDIES)}; valid: {', '.join(STUDIES)}",
                   err=True)
        ctx.exit(2)
    module = importlib.import_module(f"vpintegrator.studies.{STUDIES[name][0]}")
    ctx.exit(module.main(list(args)))


if __name__ == "__main__":
    main()
