"""``vp-study NAME [OPTIONS]`` / ``python -m vpintegrator study NAME [OPTIONS]``: run one of the package's
studies (``vpintegrator.studies.options.STUDIES``); ``vp-study --list`` (or ``vp-study`` alone) lists them.

The options after NAME are the study's (``vp-study rigid_body --quick --out runs/q``); ``vp-study NAME
--help`` shows them. ``--list`` also names the results files shipped with the package, from which a study's
tables redraw without its runs (``vp-study NAME --table-only --results FILE --out DIR``). Every study is
parsed and run by one driver, ``vpintegrator.studies.driver.main``: the shared keys of ``StudyOptions``
(``--out``, ``--seeds``, ``--jobs``, ``--budget``, ``--wall-ceiling``, ``--skip-existing``, ``--overwrite``,
``--table-only``, ``--results``, ``--export-pretrained``), a study's own keys, ``--plan TOML``, ``--set KEY=VALUE`` and the
conventions of the other commands: ``--print-config`` (the resolved keys as TOML, a ``--plan`` file),
``--json`` (one JSON object on stdout), ``-q`` (no progress lines) and ``-v`` (each step's command line).
Exit status: the study's (0 done, 2 bad input or a failed step, 130 interrupted).
"""

from __future__ import annotations

import click

from ..studies.options import SHIPPED_RESULTS, STUDIES
from ._common import echo_json, json_option, version_option


def _listing() -> str:
    from .._shipped import results_files

    width = max(map(len, STUDIES))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in STUDIES.items()]
    files = results_files()
    lines += ["", "shipped results (vp-study NAME --table-only --results FILE --out DIR draws their tables):"]
    lines += [f"  {name:<{width}}  {', '.join(f for f in SHIPPED_RESULTS.get(name, ()) if f in files) or '(none)'}"
              for name in STUDIES]
    return "\n".join(lines)


@click.command("vp-study", context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True,
                                             "allow_interspersed_args": False})
@click.argument("name", required=False, metavar="NAME")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[OPTIONS]...")
@click.option("--list", "list_", is_flag=True, help="List the studies (NAME and what it runs) and exit.")
@json_option
@version_option
@click.pass_context
def main(ctx: click.Context, name: str | None, args: tuple[str, ...], list_: bool, as_json: bool) -> None:
    """Run the study NAME with its OPTIONS (`vp-study NAME --help` lists them); with --list or without NAME,
    list the studies."""
    if list_ or name is None:
        if as_json:
            echo_json({"studies": [{"name": n, "module": f"vpintegrator.studies.{m}", "description": what,
                                    "shipped_results": list(SHIPPED_RESULTS.get(n, ()))}
                                   for n, (m, what) in STUDIES.items()]})
        else:
            click.echo("studies (vp-study NAME --help for a study's options):\n" + _listing())
        return
    from ..studies.driver import main as run

    ctx.exit(run(name, [*args, *(["--json"] if as_json else [])]))


if __name__ == "__main__":
    main()
