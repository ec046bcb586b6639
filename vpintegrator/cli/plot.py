"""``vp-plot ROLLOUT.h5``: paper figures (PDF and PNG) from a ``vp-rollout`` file.

Calls :func:`vpintegrator.plotting.plot_all` on :func:`vpintegrator.rollout.read_rollout` and prints the
files written. Uses matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path

import click

from ._common import cli_errors

_KINDS = ("trajectories3d", "invariants", "error", "volume", "phase", "all")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("rollout", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--kind", "kinds", multiple=True, type=click.Choice(_KINDS),
    help="Figure kind; repeatable, or 'all' (default).",
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Directory (default: <ROLLOUT stem>_figures).")
@click.option(
    "--traj", default="0", show_default=True, metavar="I|all",
    help="Trajectory position in the rollout file, or 'all' for the median and 10-90 % band over all.",
)
@click.option("--max-points", type=int, default=20000, show_default=True, help="Subsample long rollouts to this many times.")
@click.option("--dpi", type=int, default=200, show_default=True, help="PNG resolution.")
@cli_errors
def main(rollout, kinds, out, traj, max_points, dpi):
    """Draw figures of ROLLOUT (written by vp-rollout) as PDF and PNG into a directory."""
    import matplotlib

    matplotlib.use("Agg")
    from ..errors import VPIntegratorError
    from ..plotting import KINDS, plot_all
    from ..rollout import read_rollout

    chosen = list(KINDS) if not kinds or "all" in kinds else list(dict.fromkeys(kinds))
    if traj == "all":
        which = None
    else:
        try:
            which = int(traj)
        except ValueError:
            raise VPIntegratorError(f"--traj must be an integer position or 'all'; got {traj!r}") from None
    result = read_rollout(rollout, max_points=max_points)
    out = out if out is not None else rollout.with_name(f"{rollout.stem}_figures")
    paths = plot_all(result, out, kinds=chosen, traj=which, dpi=dpi)
    skipped = [k for k in chosen if not any(p.stem == k for p in paths)]
    for p in paths:
        click.echo(str(p))
    if skipped:
        click.echo(f"Skipped (not applicable to this rollout): {', '.join(skipped)}", err=True)
    click.echo(f"Figures written to {out}")


if __name__ == "__main__":
    main()
