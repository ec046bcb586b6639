"""``vp-gen SPEC``: generate a trajectory data set from a spec and write it to HDF5.

Reads the spec (a name from ``vp-gen --list`` or a TOML path), applies the flags (flags win), calls
[`vpintegrator.data.generate`][vpintegrator.data.generation.generate], and prints where the output went with a one-line summary. Imports
no torch, so it starts fast; run as a program it ends without the interpreter's teardown (``_GenCommand``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ._common import cli_errors, complete_spec, dask_scheduler_options, echo_json, run_options
from ._options import ConfigCommand, read_set, set_option


class _Progress:
    """A ``generate`` progress callback on stderr: a click bar on a terminal, else throttled plain lines
    (``vpintegrator._progress.progress``)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None
        self.done = 0

    def __call__(self, n_done: int, n_total: int) -> None:
        if self.bar is None:
            from .._progress import progress

            self.bar = progress(self.label, n_total, unit="trajectories")
        self.bar.update(n_done)
        self.done = n_done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _list_specs() -> None:
    from ..data.spec import list_specs, load_spec

    names = list_specs()
    width = max((len(n) for n in names), default=0)
    for name in names:
        try:
            description = load_spec(name).description
        except Exception as err:  # a broken spec should not hide the others
            description = f"(invalid: {' '.join(str(err).split())})"
        click.echo(f"{name:<{width}}  {description}")


def _list_dysts() -> None:
    """``vp-gen --list dysts``: dysts' autonomous flows with the structure measured on samples
    (``vpintegrator.systems.dysts.dysts_structure``), dysts' own flag beside it; then the flows not adapted, and why."""
    from ..systems.dysts import dysts_structure

    rows = dysts_structure()
    kept = [r for r in rows if not r.refusal]
    width = max((len(r.name) for r in rows), default=0)
    click.echo(f"{'system':<{width}}  dim  max|div|/max|J|  volume-preserving  canonical Hamiltonian  "
               "dysts says hamiltonian  dysts' _jac")
    yes_no = {True: "yes", False: "no", None: "?"}
    for r in kept:
        ham = "-" if r.dim % 2 else (f"yes {r.hamiltonian}" if r.hamiltonian else "no")
        click.echo(f"{r.name:<{width}}  {r.dim:>3}  {r.divergence:>15.1e}  {yes_no[r.volume_preserving]:<17}  "
                   f"{ham:<21}  {yes_no[r.dysts_hamiltonian]:<22}  {r.dysts_jacobian}")
    angles = [f"{r.name} ({', '.join(str(i) for i in r.angles)})" for r in kept if r.angles]
    if angles:  # measured: f(y + 2π e_i) = f(y) at the samples (the errors wrap them)
        click.echo(f"components measured 2π-periodic (angles; their errors are wrapped): {'; '.join(angles)}")
    click.echo(f"{len(kept)} autonomous flows; not adapted ({len(rows) - len(kept)}):")
    for r in rows:
        if r.refusal:
            click.echo(f"  {r.name}: {r.refusal}")


def _summary(path: Path) -> str:
    """The line printed after the path: ``_json_summary`` in words."""
    s = _json_summary(path)
    drift = ", ".join(f"{n} {v:.2e}" for n, v in s["max_rel_drift"].items()) or "none (no invariants)"
    return (f"y {(s['n_traj'], s['n_states'], s['dim'])} float64, {s['system']}, {s['method']}, dt {s['dt']:g}, "
            f"t in [0, {s['t_end']:g}]; max relative invariant drift: {drift}")


def _config_class():
    from ..data.spec import GenerationSpec

    return GenerationSpec


class _GenCommand(ConfigCommand):
    """vp-gen as a process ends with ``os._exit`` once everything a normal exit does for it is done.

    The interpreter's teardown after numba's kernels are loaded (every module and LLVM object finalised)
    costs ~0.12-0.16 CPU s, a quarter of a 1-trajectory run (docs/benchmarks.md); the file is complete and
    renamed into place before, and nothing the run started is left running. Only when it is the program
    (``vp-gen`` or ``python -m vpintegrator.cli.gen``: ``args`` None, ``sys.argv[0]`` that program,
    standalone) and exits with a status; called from Python (``CliRunner``, ``main([...])``, a ``main()``
    inside another program) it returns or raises as any command, and after a Dask run (whose client may still
    hold connections) the interpreter exits as usual."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        program = bool(sys.argv) and Path(sys.argv[0]).name in ("vp-gen", "gen.py")
        if args is not None or not standalone_mode or not program:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            return super().main(None, prog_name, complete_var, True, **extra)
        except SystemExit as stop:
            code = 0 if stop.code is None else stop.code
            if not isinstance(code, int) or "distributed" in sys.modules:
                raise
        _exit_now(code)


def _exit_now(code: int) -> NoReturn:
    """``os._exit(code)`` after the ``atexit`` callbacks (logging's shutdown, a temporary numba cache's
    removal) and with stdout and stderr flushed; a flush that fails turns status 0 into 120, as Python's own
    exit does."""
    import atexit

    atexit._run_exitfuncs()  # what a normal exit runs first; the module teardown after it is what is skipped
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code)


@click.command("vp-gen", cls=_GenCommand, config=_config_class,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec", required=False, shell_complete=complete_spec)
@click.option("--list", "list_", is_flag=True,
              help="List the shipped specs and exit (--list dysts: dysts' flows, their structure measured on samples).")
# here: one option per GenerationSpec key that overrides a spec (its declaration in vpintegrator/data/spec.py)
@set_option(
    "Set any spec key (repeatable): dt=0.1, system.inertia=[1,2,3], initial_conditions.radius=2, ... "
    "A key that has its own flag is given once, by the flag or by --set."
)
@run_options
@click.option("--overwrite", is_flag=True, help="Replace an existing trajectory file at --out (nothing else).")
# --- issue 23: every core, shards, a Dask cluster (plain click options; kept together) -------------------
@click.option("--workers", type=int, default=None, show_default="every core",
              help="Chunks integrated at once, on as many threads (1: one core). The output does not depend on it.")
@click.option("--shard", metavar="I/N", default=None,
              help="Compute only the I-th of N blocks of the initial conditions into <out stem>.shard-I-of-N.h5; "
              "the last shard to finish writes the index file at --out, which reads as the whole data set.")
@dask_scheduler_options
# --- end of issue 23 options ------------------------------------------------------------------------------
@cli_errors
def main(spec, list_, flags, set_, print_config, as_json, quiet, overwrite, workers, shard, scheduler, n_shards) -> None:
    """Generate the trajectory data set SPEC (a spec name, a TOML file, or dysts:NAME) and write it to HDF5.

    Flags override the spec. The file appears only when complete: an interrupted run leaves no partial
    file, and an earlier file at --out stays intact. An existing --out is refused unless --overwrite (which
    replaces only a trajectory file); a second writer of the same --out is refused while this one runs.
    """
    if list_:
        if spec == "dysts":
            _list_dysts()
        else:
            _list_specs()
        return
    if spec is None:
        raise click.UsageError("missing SPEC (a spec name or a .toml file); `vp-gen --list` lists the specs")
    from ..config import merge
    from ..data.spec import SET_KEYS, load_spec, spec_overrides_from_set

    settings = read_set(set_, SET_KEYS, flags, translate=spec_overrides_from_set,
                        hint="system.<parameter>, initial_conditions.<argument>, or a spec's section.key")
    cfg = load_spec(spec, **merge(settings, flags))
    if print_config:
        click.echo(cfg.to_toml(), nl=False)
        return
    from ..data.generation import generate  # here: --print-config does without numba and the kernels

    if scheduler:
        if shard is not None:
            raise click.UsageError("--shard and --dask-scheduler exclude each other: the scheduler runs every shard")
        generate(cfg, cfg.out, scheduler=scheduler, n_shards=n_shards, workers=workers, overwrite=overwrite)
        path, what = Path(cfg.out), " (index of the shards beside it)"
    else:
        if n_shards is not None:
            raise click.UsageError("--shards goes with --dask-scheduler; for one block give --shard I/N")
        bar, what = None if quiet else _Progress(f"{cfg.name} ({cfg.method})"), ""
        try:
            path = generate(cfg, out=cfg.out, progress=bar, overwrite=overwrite, workers=workers, shard=shard)
        finally:
            if bar is not None:
                bar.close()
    if as_json:
        echo_json(_json_summary(path))
        return
    click.echo(f"wrote {path}{what}")
    click.echo(_summary(path))


def _json_summary(path: Path) -> dict[str, Any]:
    """``--json``: the file and what is in it."""
    from ..data.trajectory_files import read_metadata

    meta = read_metadata(path)
    names = [n for n in meta.get("invariant_names", []) if f"max_rel_drift_{n}" in meta]
    return {
        "out": str(path), "system": meta["system"], "method": meta["method"], "n_traj": meta["n_traj"],
        "n_states": meta["n_states"], "dim": meta["dim"], "dt": meta["dt"], "t_end": meta["t_end"],
        "max_rel_drift": {n: meta[f"max_rel_drift_{n}"] for n in names},
    }


if __name__ == "__main__":
    main()
