"""``vp-plot ROLLOUT.h5`` / ``vp-plot --kind training RUN_DIR ...``: figures (PDF and PNG).

A rollout file (``vp-rollout`` output) gives the rollout figures ([`vpintegrator.plotting.plot_all`][vpintegrator.plotting.plot_all]);
``vp-train`` run directories give training curves ([`vpintegrator.plotting.plot_training`][vpintegrator.plotting.plot_training]). Prints
the files written. Uses matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from typing import Any, Sequence

from pathlib import Path

import click

from ._common import cli_errors, echo_json, given_only, run_options, traj_list
from ._options import ConfigCommand, read_set, set_option

_ROLLOUT_KINDS = ("trajectories3d", "invariants", "error", "volume", "phase")
_KINDS = (*_ROLLOUT_KINDS, "all", "training", "work_precision")


def _config_class():
    from ..plotting.options import PlotOptions

    return PlotOptions


def _set_help() -> str:
    from ..plotting.options import set_help

    return set_help()


#: what each figure kind shows (``vp-plot --list``)
_DESCRIPTIONS = {
    "trajectories3d": "state-space curves of every method (dim >= 3), optionally on the invariant sphere",
    "invariants": "relative drift of each invariant against time",
    "error": "relative error against the reference, against time",
    "volume": "log|det J| of the step or window maps against time",
    "phase": "phase portraits (pairs of state components)",
    "all": "every rollout kind that applies (the default for a rollout file)",
    "training": "losses, validation-rollout score and learning rate of vp-train run directories",
    "work_precision": "error and invariant drift against CPU cost, log-log (a vp-rollout --work-precision CSV)",
}


def _list_kinds(ctx, _param, value) -> None:
    """``--list``: the figure kinds, one line each."""
    if not value or ctx.resilient_parsing:
        return
    width = max(len(k) for k in _KINDS)
    for kind in _KINDS:
        click.echo(f"{kind:<{width}}  {_DESCRIPTIONS[kind]}")
    ctx.exit(0)


@click.command("vp-plot", cls=ConfigCommand, config=_config_class,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="ROLLOUT.h5 | RUN_DIR...")
@click.option("--list", "list_", is_flag=True, is_eager=True, expose_value=False, callback=_list_kinds,
              help="List the figure kinds and exit.")
@click.option(
    "--kind", "kind", multiple=True, type=click.Choice(_KINDS), show_default="all for a rollout file, training "
    "when every PATH is a run directory",
    help="Figure kind; repeatable: rollout kinds or 'all'; 'training' for training curves of run directories.",
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path),
    show_default="<ROLLOUT stem>_figures; RUN_DIR/figures for one run, training_figures beside the first of several",
    help="Directory.",
)
@click.option(
    "--traj", metavar="LIST", show_default="all",
    help="Trajectory indices in the data file, comma list (as vp-rollout --traj) or 'all': every "
    "trajectory of the rollout, one curve each for up to 5, else the median and the "
    "10-90 % band; state-space kinds draw 5 evenly spread ones of many.",
)
@click.option("--amortise", type=float, default=None, metavar="N",
              help="Kind work_precision: also draw each model's cost with its training CPU time spread over N "
              "rollouts of length t_end (an arrow to a hollow marker; default: the N the table was written with).")
@click.option("--no-title", "no_title", is_flag=True, default=None,
              help="No figure titles (panel names stay); --set title=\"...\" gives your own.")
@click.option("--label", "label", multiple=True, metavar="NAME=TEXT",
              help="What the legend calls a method, e.g. --label vpt=\"VPT (ours)\" --label gauss_legendre4=GL4 "
              "(default: readable names: Gauss–Legendre 4); repeatable.")
@set_option(_set_help)
@run_options
@click.option("--overwrite", is_flag=True, help="Replace figure files this command drew before (nothing else).")
@cli_errors
def main(paths, kind, out, traj, amortise, no_title, label, set_, print_config, as_json, quiet, overwrite, flags):
    """Draw figures of ROLLOUT.h5 (written by vp-rollout), or training curves of RUN_DIRs (written by
    vp-train), as PDF and PNG into a directory. A figure file that exists is refused unless --overwrite,
    which replaces only figures drawn by matplotlib; other files in the directory are never touched."""
    import matplotlib

    matplotlib.use("Agg")
    from ..config import distinct
    from ..errors import VPIntegratorError

    from ..plotting.options import PlotOptions, check_options

    kinds = tuple(distinct(kind, "kind"))  # a kind given twice: the one rule of list options

    ctx = click.get_current_context()
    given_flags = {**given_only(ctx, dict(traj=traj)), "max_points": flags.get("max_points"), "dpi": flags.get("dpi")}
    given_flags.update(title=False if no_title else None, method_names=_labels(label) or None)
    options = read_set(set_, PlotOptions.keys(), given_flags, names={"title": "--no-title", "method_names": "--label"})
    if no_title:
        options["title"] = False
    if label:
        options["method_names"] = _labels(label)
    which = options.pop("traj", None) if traj is None else traj_list(traj, "100,719", allow_all=True)
    which = None if which == "all" else which
    defaults = PlotOptions()
    max_points = options.pop("max_points", flags.get("max_points", defaults.max_points))
    dpi = options.pop("dpi", flags.get("dpi", defaults.dpi))
    check_options(dict(dpi=dpi, max_points=max_points))  # one-line errors before anything is read or drawn

    if "work_precision" in kinds or (len(paths) == 1 and paths[0].suffix == ".csv"):
        _work_precision(paths, kinds, out, which, options, dpi, print_config, as_json, overwrite, amortise)
        return
    if amortise is not None:
        raise VPIntegratorError("--amortise N goes with a work-precision table (--kind work_precision)",
                                key="amortise")
    training = "training" in kinds or (not kinds and all(p.is_dir() and (p / "log.csv").is_file() for p in paths))
    if training:
        _training(paths, kinds, out, which, options, dpi, print_config, as_json, quiet, overwrite)
        return
    if len(paths) != 1 and (any(p.is_dir() for p in paths) or not _shards(paths)):
        raise VPIntegratorError(
            f"give one rollout file, the shard files of one (vp-rollout --shard), or run directories with --kind "
            f"training; got {len(paths)} paths"
        )
    rollout = paths[0]  # several: the shards of one rollout, read as one (issue 23)
    if rollout.is_dir():
        raise VPIntegratorError(f"{rollout} is a directory without log.csv; give a vp-rollout file or a vp-train run directory")
    from ..plotting import KINDS, plot_all

    chosen = list(KINDS) if not kinds or "all" in kinds else list(dict.fromkeys(kinds))
    out = out if out is not None else rollout.with_name(f"{rollout.stem}_figures")
    from .._io import check_not_input

    check_not_input(out, list(paths), key="out")  # plot_all also refuses any figure path that is the input
    if print_config:
        _print_config(dict(paths=[str(p) for p in paths], kinds=chosen, out=str(out), traj=which, max_points=max_points,
                           dpi=dpi, **options))
        return
    written = plot_all(rollout if len(paths) == 1 else list(paths), out, kinds=chosen, traj=which, dpi=dpi, max_points=max_points,
                       overwrite=overwrite, **options)
    _report(out, written, as_json, [k for k in chosen if not any(p.stem == k for p in written)], quiet)


def _labels(items) -> dict[str, str]:
    """``--label NAME=TEXT`` entries as ``{NAME: TEXT}``."""
    from ..errors import VPIntegratorError

    from ..config import distinct

    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise VPIntegratorError(f"label {item!r} is not NAME=TEXT (e.g. --label vpt=\"VPT (ours)\")", key="label")
        out[name.strip()] = text.strip()
    distinct([item.partition("=")[0].strip() for item in items], "label")  # one text per method
    return out


def _shards(paths) -> bool:
    """Whether several paths are shards of a rollout (vp-rollout --shard)."""
    from ..data.shards import is_shard_set

    return is_shard_set(list(paths))


def _report(out, written, as_json: bool, skipped: Sequence[str] = (), quiet: bool = False) -> None:
    """What vp-plot prints once figures are written; ``skipped``: the kinds asked for that do not apply to the
    rollout."""
    if as_json:
        echo_json({"out": out, "figures": written, "skipped": list(skipped)})
        return
    for p in written:
        click.echo(str(p))
    if skipped and not quiet:
        click.echo(f"Skipped (not applicable to this rollout): {', '.join(skipped)}", err=True)
    click.echo(f"Figures written to {out}")


def _print_config(values: dict[str, Any]) -> None:
    from ..config import dump_toml

    click.echo(dump_toml(values), nl=False)


def _training(paths, kinds, out, which, options, dpi, print_config=False, as_json=False, quiet=False,
              overwrite=False) -> None:
    from ..errors import VPIntegratorError
    from ..plotting.training import default_out, plot_training

    other = [k for k in kinds if k != "training"]
    if other:
        raise VPIntegratorError(
            f"kind training draws run directories; it cannot be combined with {other[0]!r}", key="kind"
        )
    if which is not None:
        raise VPIntegratorError("traj selects rollout trajectories; training curves have none", key="traj")
    unused = [k for k in options if k not in ("formats", "style", "title")]
    if unused:
        raise VPIntegratorError(f"set {unused[0]}: a rollout option; training curves take only formats, style and "
                                "title", key="set")
    out = out if out is not None else default_out(paths)
    if print_config:
        _print_config(dict(paths=[str(p) for p in paths], kinds=["training"], out=str(out), dpi=dpi, **options))
        return
    written = plot_training(paths, out, dpi=dpi, overwrite=overwrite, **options)
    _report(out, written, as_json)


def _work_precision(paths, kinds, out, which, options, dpi, print_config=False, as_json=False,
                    overwrite=False, amortise=None) -> None:
    from ..errors import VPIntegratorError
    from ..plotting import plot_work_precision
    from ..plotting.style import FORMATS, check_formats, check_out_dir, save_figure

    other = [k for k in kinds if k != "work_precision"]
    if other:
        raise VPIntegratorError(f"kind work_precision draws a work-precision CSV; it cannot be combined with "
                                f"{other[0]!r}", key="kind")
    if len(paths) != 1 or paths[0].suffix != ".csv":
        raise VPIntegratorError("kind work_precision: give one work-precision table (the .csv that vp-rollout "
                                "--work-precision wrote)", key="kind")
    if which is not None:
        raise VPIntegratorError("traj selects rollout trajectories; a work-precision table has none", key="traj")
    unused = [k for k in options if k not in ("formats", "style", "method_names")]
    if unused:
        raise VPIntegratorError(f"set {unused[0]}: a rollout option; the work-precision figure takes only formats, "
                                "style and method_names", key="set")
    table = paths[0]
    if amortise is not None:
        from ..data.work_precision import check_rollouts

        check_rollouts(amortise)
    formats = check_formats(options.get("formats", FORMATS))
    out = out if out is not None else table.with_name(f"{table.stem}_figures")
    if print_config:
        extra = {} if amortise is None else {"amortise": amortise}
        _print_config(dict(paths=[str(table)], kinds=["work_precision"], out=str(out), dpi=dpi, **options, **extra))
        return
    check_out_dir(out, ["work_precision"], formats, inputs=[table], overwrite=overwrite)
    fig = plot_work_precision(table, style=options.get("style"), amortise_over=amortise,
                              method_names=options.get("method_names"))
    written = save_figure(fig, Path(out) / "work_precision", formats, dpi, overwrite=overwrite)
    _report(out, written, as_json)


if __name__ == "__main__":
    main()
