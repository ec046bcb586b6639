"""``vp-rollout [CONFIG]``: roll out trained models and classical integrators far past the training horizon.

Reads an optional TOML (keys of [`vpintegrator.rollout.RolloutConfig`][vpintegrator.rollout.config.RolloutConfig], top level or in a
``[rollout]`` table), applies ``--set KEY=VALUE`` entries and the flags on top (flags win), calls
[`vpintegrator.rollout.run_rollouts`][vpintegrator.rollout.run.run_rollouts], prints the metrics table and where the HDF5 file and the table
(CSV, Markdown) went. The command-line spellings are parsed here: ``--model LABEL=PATH``, comma lists
of integrators and of trajectory indices.
"""

from __future__ import annotations

from pathlib import Path

import click

from ._common import (Listed, Names, cli_errors, complete_model, dask_scheduler_options, echo_json, given,
                      run_options, traj_list)
from ._options import ConfigCommand, read_set, set_option

#: exit status of ``--fail-on-blowup`` when a method failed
EXIT_BLOWUP = 3


class _BlowupExit(click.ClickException):
    exit_code = EXIT_BLOWUP


def _names(items, key: str = "integrators") -> list[str] | None:
    """Repeated comma lists -> one list of names, each once (the one rule of list options)."""
    from ..config import distinct

    names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
    return distinct(names, key) or None


def _model_spec(text: str):
    """``LABEL=PATH`` -> (label, path); a plain path or ``pretrained:NAME`` stays as it is."""
    head, sep, tail = text.partition("=")
    if sep and head and "/" not in head and not head.startswith(("pretrained:", "gml:")):
        return (head, tail)
    return text


def _list_methods(ctx, _param, value) -> None:
    """``--list`` (alias ``--list-methods``): print everything a run can name (the classical methods and their
    properties, the other rows, the model forms: ``describe_methods`` and ``describe_rows``) and the shipped
    pretrained models, exit 0."""
    if not value or ctx.resilient_parsing:
        return
    from ..integrators import describe_methods
    from ..rollout.methods import describe_rows
    from ._common import pretrained_lines

    click.echo("Classical integrators (--integrators):")
    click.echo(describe_methods())
    click.echo("")
    click.echo(describe_rows())
    click.echo("")
    click.echo("Pretrained models (--model pretrained:NAME; everything about one: vpintegrator.pretrained_info(NAME)):")
    for line in pretrained_lines():
        click.echo(line)
    ctx.exit(0)


def _integrators() -> list[str]:
    from ..integrators import list_integrators

    return [*list_integrators(), "exact_flow"]


#: --fast-step's names: vp-train's, the RolloutConfig key fast_step
_FAST_STEP = ("auto", "off", "graph", "compile")


def _config_class():
    from ..rollout.config import RolloutConfig

    return RolloutConfig


@click.command("vp-rollout", cls=ConfigCommand, config=_config_class, before="models",
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--list", "--list-methods", is_flag=True, is_eager=True, expose_value=False, callback=_list_methods,
    help="Print everything a run can name: every classical integrator with its order and properties (symplectic, "
    "volume, ...), exact_flow, the rows fd+/shooting+/sindy+METHOD and parrot, the oracle row, the --model forms "
    "and the pretrained models (pretrained:NAME), each with what it needs, and exit.",
)
# here: one option per RolloutConfig key that has a flag (its declaration in vpintegrator/rollout/config.py)
@click.option(
    "--model", "models", multiple=True, metavar="[LABEL=]RUN", shell_complete=complete_model,
    help="Run directory, checkpoint (.pt) or pretrained:NAME; repeatable. Label default: the run's name.",
)
@click.option(
    "--integrators", cls=Listed, type=Names(_integrators), multiple=True, metavar="LIST",
    help="Comma list of classical integrators (e.g. implicit_midpoint,rk4,gauss_legendre4,splitting) or exact_flow, "
    "and the rows fd+METHOD, shooting+METHOD (identification), sindy+METHOD (sparse regression, the sindy extra), "
    "parrot (context parroting), estimate+METHOD (observed runs: the full state estimated, then METHOD); "
    "repeatable.",
)
@click.option(
    "--traj", metavar="LIST",
    show_default="the models' test split, else all",
    help="Trajectories to roll out: row indices of the DATA file (0-based, its /y first axis), comma list (e.g. 0,3).",
)
@click.option("--fast-step", type=click.Choice(tuple(_FAST_STEP)), default="auto", show_default=True,
              help="auto/graph: CUDA-graph model steps on the device engine, eager torch elsewhere; compile: "
              "torch.compile the model (seconds to build: long rollouts of big batches); off: eager (small "
              "float64 batches run compiled numba whatever it is).")
@set_option(
    "Any RolloutConfig key, VALUE in TOML syntax (e.g. --set blowup=1e6); repeatable. A key that has its "
    "own flag is given once, by the flag or by --set."
)
@click.option(
    "--fail-on-blowup", is_flag=True,
    help=f"Exit with status {EXIT_BLOWUP} (after writing everything) when any method failed (blow-up or non-finite).",
)
@click.option(
    "--work-precision", is_flag=True,
    help="Also write OUT's stem + _work_precision.csv/.md: each integrator (default: a set of low- and high-order "
    "methods) over steps 2h, h, h/2, h/4, h/8 and DOP853 over tolerances, error at t_end against the exact flow, "
    "invariant drift and batch-1 CPU cost; the models as points (draw it with vp-plot FILE.csv).",
)
@click.option(
    "--amortise", "amortise", type=float, default=None, metavar="N",
    help="With --work-precision: also give each model's cost with its training CPU time (its run directory's "
    "summary.json cpu_time) spread over N rollouts of length t_end. Break-even N is written in any case.",
)
@click.option(
    "--decode-every", "decode_every", type=click.IntRange(min=1), default=None, metavar="K",
    help="Models on a reduction (observe psd:K or file:PATH): decode every K-th predicted state (and the last) to "
    "the full state and write OUT's stem + _decoded.csv/.md, the full-state errors against the data file.",
)
@run_options
@click.option("--overwrite", is_flag=True,
              help="Replace an existing rollout file at --out and its table (never a file of another kind).")
# --- issue 23: shards and a Dask cluster (plain click options, as vp-gen's; --workers is a RolloutConfig key) ---
@click.option("--shard", metavar="I/N", default=None,
              help="Roll out only the I-th of N blocks of the selected trajectories into <out stem>.shard-I-of-N.h5; "
              "the last shard to finish writes the index file at --out (and the whole run's table), which reads as "
              "the whole rollout.")
@dask_scheduler_options
# --- end of issue 23 options --------------------------------------------------------------------------------
@cli_errors
def main(config, models, integrators, traj, fast_step, flags, set_, fail_on_blowup, work_precision,
         amortise, decode_every, print_config, as_json, quiet, overwrite, shard, scheduler, n_shards):
    """Roll out models and classical integrators from a data set's initial conditions.

    CONFIG (optional) is a TOML file with RolloutConfig keys (top level or a [rollout] table); flags and
    --set entries win over it; the defaults shown apply where neither gives a key.

    Writes OUT (HDF5: reference, every method's trajectories, per-step relative error, invariants,
    log|det J|, failure steps) and the metrics table beside it (same stem, .csv, .md and .tex for LaTeX).

    An existing OUT (or its table) is refused unless --overwrite, which replaces only a rollout file and its
    table; a second writer of the same OUT is refused while this one runs.

    A method whose trajectories blew up or went non-finite is reported on stderr, one line per method
    (also with --quiet). Exit status: 0 on success, 1 on an error (nothing is written), 3 with
    --fail-on-blowup when a method failed (everything is written), 130 when interrupted.
    """
    from ..errors import VPIntegratorError
    from ..metrics import format_text
    from ..rollout import RolloutConfig, load_rollout_config, run_rollouts

    ctx = click.get_current_context()
    flags = dict(
        models=[_model_spec(m) for m in models] or None,
        integrators=_names(integrators),
        traj=traj_list(traj, "0,3,7"),
        fast_step=fast_step if given(ctx, "fast_step") else None,
        **flags,
    )
    from ..rollout.config import RENAMED_KEYS, renamed_keys

    values = read_set(set_, [*RolloutConfig.keys(), *RENAMED_KEYS], flags, names={"fast_step": "--fast-step"},
                      translate=lambda v: renamed_keys(v, "--set"))
    cfg = load_rollout_config(config, **{**values, **{k: v for k, v in flags.items() if v is not None}})
    if print_config:
        click.echo(cfg.to_toml(), nl=False)
        return
    if amortise is not None and not work_precision:
        raise VPIntegratorError("--amortise N goes with --work-precision (it amortises training on its cost axis)",
                                key="amortise")
    if work_precision:  # its tables are refused before the rollouts run, not after
        from ..data.work_precision import check_rollouts, check_work_precision_outputs

        if amortise is not None:
            check_rollouts(amortise)

        check_work_precision_outputs(cfg.out, overwrite)
    if decode_every is not None:  # its tables are refused before the rollouts run, not after
        from .._outputs import check_output
        from ..rollout.decoded import decoded_stem

        if shard is not None or scheduler:
            raise click.UsageError("--decode-every goes with a whole run, not with --shard or --dask-scheduler")
        for suffix in (".csv", ".md"):
            check_output(decoded_stem(cfg.out).with_suffix(suffix), "table", overwrite)
    _check_blocks(shard, scheduler, n_shards, work_precision)
    # the library's lines come through logging (shown unless --quiet, with --verbose its debug too)
    check_plan = None
    if decode_every is not None:  # a run on no reduction is refused once planned, before it runs
        from ..rollout.decoded import check_decodable as check_plan
    report = run_rollouts(cfg, inputs=[config] if config is not None else (), overwrite=overwrite, shard=shard,
                          scheduler=scheduler or None, n_shards=n_shards, check_plan=check_plan)
    wp = None
    if work_precision:
        from ..rollout import run_work_precision

        wp = run_work_precision(cfg, overwrite=overwrite, amortise_over=amortise)
    decoded = None
    if decode_every is not None:
        from ..rollout.decoded import write_decoded

        decoded = write_decoded(report.out, cfg.data, decode_every, overwrite=overwrite)
    if as_json:
        echo_json({"out": report.out, "csv": report.csv, "markdown": report.markdown, "latex": report.latex,
                   "rows": report.rows,
                   "reference": report.reference, "warnings": report.warnings,
                   "failures": {label: f.line() for label, f in report.failures.items()},
                   **({"work_precision": {"csv": wp[0], "markdown": wp[1]}} if wp else {}),
                   **({"decoded": {"rows": decoded[0], "csv": decoded[1], "markdown": decoded[2]}} if decoded else {})})
    else:
        click.echo(f"Errors against the {report.reference}.")
        click.echo(format_text(report.rows), nl=False)
        click.echo(_legend(report.rows))
        for line in report.notes:  # an offset that dominates |y|; each learned row worse than the identity map
            click.echo(line)
        click.echo(f"Rollout written to {report.out}")
        click.echo(f"Metrics table: {report.csv}, {report.markdown} and {report.latex}")
        if wp:
            click.echo(f"Work-precision table: {wp[0]} and {wp[1]}")
        if decoded:
            click.echo(f"Full-state errors, decoded every {decode_every} states against {cfg.data}:")
            click.echo(format_text(decoded[0]), nl=False)
            click.echo(f"Decoded table: {decoded[1]} and {decoded[2]}")
    if quiet:  # without --quiet the progress log already said it
        for line in report.warnings:
            click.echo(line, err=True)
        for failure in report.failures.values():
            click.echo(f"Warning: {failure.line()}", err=True)
    if report.failures and fail_on_blowup:
        labels = ", ".join(report.failures)
        raise _BlowupExit(
            f"{len(report.failures)} method(s) failed (blow-up or non-finite): {labels}; everything was written "
            f"to {report.out}; exit status {EXIT_BLOWUP} (--fail-on-blowup)"
        )


def _legend(rows) -> str:
    """What the printed metrics table's numbers are (its columns are those of the CSV, which
    ``vpintegrator.metrics.summary_row`` documents): the statistic of each column, and why a ``split`` is
    ``unknown`` when one is."""
    lines = ["final_rel_error and valid_time: the mean over the row's n_traj trajectories (inf when one failed; "
             "the work-precision table's errors are medians); drifts and log det J: the worst trajectory."]
    if rows and "mean_nrmse" in rows[0]:
        lines.append("mean_nrmse: the NRMSE against each component's spread over the training data, averaged over the "
                     "predicted steps; vpt: the first time it exceeds --vpt-threshold; vs_identity: mean_nrmse over "
                     "that of the identity map (holding the last given state), >= 1 is no better than doing nothing"
                     + ("; vpt_lyapunov: vpt in Lyapunov times." if "vpt_lyapunov" in rows[0] else "."))
    if any(r.get("split") == "unknown" for r in rows):
        lines.append("split unknown: no model of this run records a training split of this file (integrators "
                     "alone, or models trained on other data), so these trajectories are neither training nor "
                     "held-out data; --heldout N adds N new conditions (split new).")
    return "\n".join(lines)


def _check_blocks(shard, scheduler, n_shards, work_precision) -> None:
    """The flags of a run cut into blocks that go together (usage errors naming the flags)."""
    if (shard is not None or scheduler) and work_precision:
        raise click.UsageError("--work-precision goes with a whole run, not with --shard or --dask-scheduler")
    if scheduler and shard is not None:
        raise click.UsageError("--shard and --dask-scheduler exclude each other: the scheduler runs every shard")
    if n_shards is not None and not scheduler:
        raise click.UsageError("--shards goes with --dask-scheduler; for one block give --shard I/N")


if __name__ == "__main__":
    main()
