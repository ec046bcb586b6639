"""``vp-rollout``: roll out trained models and classical integrators far past the training horizon.

Reads an optional TOML (keys of :class:`vpintegrator.rollout.RolloutConfig`, top level or in a
``[rollout]`` table), applies ``--set KEY=VALUE`` entries and the flags on top (flags win), calls
:func:`vpintegrator.rollout.run_rollouts`, prints the metrics table and where the HDF5 file and the table
(CSV, Markdown) went. The command-line spellings are parsed here: ``--model LABEL=PATH``, comma lists
of integrators and of trajectory indices.
"""

from __future__ import annotations

from pathlib import Path

import click

from ._common import cli_errors

#: exit status of ``--fail-on-blowup`` when a method failed
EXIT_BLOWUP = 3


class _BlowupExit(click.ClickException):
    exit_code = EXIT_BLOWUP


def _int_list(text: str | None) -> list[int] | None:
    """``"0,3,7"`` -> [0, 3, 7]."""
    from ..errors import VPIntegratorError

    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise VPIntegratorError(f"traj must be a comma list of integers, e.g. 0,3,7; got {text!r}", key="traj") from None


def _names(items) -> list[str] | None:
    """Repeated comma lists -> one list of names."""
    names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
    return names or None


def _model_spec(text: str):
    """``LABEL=PATH`` -> (label, path); a plain path or ``pretrained:NAME`` stays as it is."""
    head, sep, tail = text.partition("=")
    if sep and head and "/" not in head and not head.startswith(("pretrained:", "gml:")):
        return (head, tail)
    return text


def _settings(settings, flags: dict) -> dict:
    """``--set`` entries (TOML values); a key also given by its own flag is an error."""
    from ..config import parse_set
    from ..errors import VPIntegratorError

    values = parse_set(settings)
    for key in values:
        if flags.get(key) is not None:
            raise VPIntegratorError(f"set {key}=...: {key} is also given by its own flag; give it once", key="set")
    return values


def _list_methods(ctx, _param, value) -> None:
    """``--list-methods``: print the classical methods and their properties, exit 0."""
    if not value or ctx.resilient_parsing:
        return
    from ..integrators import describe_methods

    click.echo(describe_methods())
    ctx.exit(0)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--list-methods", is_flag=True, is_eager=True, expose_value=False, callback=_list_methods,
    help="Print every classical integrator with its order and properties (symplectic, volume, ...) and exit.",
)
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="TOML with RolloutConfig keys.")
@click.option("--data", metavar="FILE", help="vp-gen HDF5: reference trajectories and initial conditions.")
@click.option(
    "--model", "models", multiple=True, metavar="[LABEL=]RUN",
    help="Run directory, checkpoint (.pt) or pretrained:NAME; repeatable. Label default: the run's name.",
)
@click.option(
    "--integrators", multiple=True, metavar="LIST",
    help="Comma list of classical integrators (e.g. implicit_midpoint,rk4,gauss_legendre4,splitting) or exact_flow.",
)
@click.option("--t-end", type=float, help="Horizon; beyond the data the reference continues with its generator.")
@click.option(
    "--traj", metavar="LIST",
    help="Trajectories to roll out: row indices of the DATA file (0-based, its /y first axis), comma list (e.g. 0,3).",
)
@click.option("--n-traj", type=int, help="Use the first N trajectories of the data file.")
@click.option("--init", metavar="NAME", help="First window of models: reference (default), a classical integrator, exact_flow.")
@click.option("--overlap/--no-overlap", default=None, help="Overlapping model windows (advance by one state).")
@click.option("--device", metavar="DEVICE", help="auto (default), cpu, cuda or cuda:N.")
@click.option(
    "--engine", metavar="ENGINE",
    help="Where model rollouts keep states and metrics: device (on the model's device, one copy per block), "
         "host (NumPy) or auto (default: device for models on CUDA).",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Output HDF5 (default rollout.h5).")
@click.option("--chunk-steps", type=int, help="Steps per chunk streamed to the file (default 1024).")
@click.option("--blowup", type=float, help="Failure when |z| > BLOWUP x |z0| (default 1000).")
@click.option("--volume/--no-volume", default=None, help="Compute log|det J| of every step/window map (default on).")
@click.option("--jit/--no-jit", default=None,
              help="TorchScript-trace models, CUDA-graph model steps on the device engine (default on).")
@click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE",
    help="Any RolloutConfig key, VALUE in TOML syntax (e.g. --set blowup=1e6); repeatable.",
)
@click.option("--quiet", is_flag=True, help="No progress lines (failed methods are still reported on stderr).")
@click.option(
    "--fail-on-blowup", is_flag=True,
    help=f"Exit with status {EXIT_BLOWUP} (after writing everything) when any method failed (blow-up or non-finite).",
)
@click.option("--overwrite", is_flag=True,
              help="Replace an existing rollout file at --out and its table (never a file of another kind).")
@cli_errors
def main(config, data, models, integrators, t_end, traj, n_traj, init, overlap, device, engine, out, chunk_steps,
         blowup, volume, jit, settings, quiet, fail_on_blowup, overwrite):
    """Roll out models and classical integrators from a data set's initial conditions.

    Writes OUT (HDF5: reference, every method's trajectories, per-step relative error, invariants,
    log|det J|, failure steps) and the metrics table beside it (same stem, .csv and .md).

    An existing OUT (or its table) is refused unless --overwrite, which replaces only a rollout file and its
    table; a second writer of the same OUT is refused while this one runs.

    A method whose trajectories blew up or went non-finite is reported on stderr, one line per method
    (also with --quiet). Exit status: 0 on success, 1 on an error (nothing is written), 3 with
    --fail-on-blowup when a method failed (everything is written), 130 when interrupted.
    """
    from ..metrics import format_text
    from ..rollout import load_rollout_config, run_rollouts

    flags = dict(
        data=data,
        models=[_model_spec(m) for m in models] or None,
        integrators=_names(integrators),
        t_end=t_end,
        traj=_int_list(traj),
        n_traj=n_traj,
        init=init,
        overlap=overlap,
        device=device,
        engine=engine,
        out=str(out) if out is not None else None,
        chunk_steps=chunk_steps,
        blowup=blowup,
        volume=volume,
        jit=jit,
    )
    cfg = load_rollout_config(config, **{**_settings(settings, flags), **{k: v for k, v in flags.items() if v is not None}})
    failed_lines: list[str] = []

    def log(line: str) -> None:
        if not quiet:
            click.echo(line, err=True)

    report = run_rollouts(cfg, log=log, inputs=[config] if config is not None else (), overwrite=overwrite)
    click.echo(format_text(report.rows), nl=False)
    click.echo(f"Rollout written to {report.out}")
    click.echo(f"Metrics table: {report.csv} and {report.markdown}")
    for failure in report.failures.values():
        line = f"Warning: {failure.line()}"
        failed_lines.append(line)
        if quiet:  # without --quiet the progress log already said it
            click.echo(line, err=True)
    if failed_lines and fail_on_blowup:
        labels = ", ".join(report.failures)
        raise _BlowupExit(
            f"{len(report.failures)} method(s) failed (blow-up or non-finite): {labels}; everything was written "
            f"to {report.out}; exit status {EXIT_BLOWUP} (--fail-on-blowup)"
        )


if __name__ == "__main__":
    main()
