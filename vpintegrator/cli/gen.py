"""``vp-gen SPEC``: generate a trajectory data set from a spec and write it to HDF5.

Reads the spec (a name from ``vp-gen --list`` or a TOML path), applies the flags (flags win), calls
:func:`vpintegrator.data.generate`, and prints where the output went with a one-line summary. Imports
no torch, so it starts fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._common import (
    Listed,
    Names,
    cli_errors,
    echo_json,
    json_option,
    print_config_option,
    quiet_option,
    refuse_set_conflicts,
    version_option,
)


class _Progress:
    """A ``generate`` progress callback drawing a click progress bar on stderr (hidden when not a tty)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None
        self.done = 0

    def __call__(self, n_done: int, n_total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=n_total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(n_done - self.done)
        self.done = n_done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
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


def _summary(path: Path) -> str:
    from ..data.hdf5 import read_metadata

    meta = read_metadata(path)
    names = [n for n in meta.get("invariant_names", []) if f"max_rel_drift_{n}" in meta]
    drift = ", ".join(f"{n} {meta[f'max_rel_drift_{n}']:.2e}" for n in names) or "none (no invariants)"
    return (
        f"y {(meta['n_traj'], meta['n_states'], meta['dim'])} float64, {meta['system']}, {meta['method']}, "
        f"dt {meta['dt']:g}, t in [0, {meta['t_end']:g}]; max relative invariant drift: {drift}"
    )


def _methods() -> list[str]:
    from ..integrators import list_integrators

    return ["dop853", *list_integrators()]


_FROM_SPEC = "from the spec"


@click.command("vp-gen", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec", required=False)
@click.option("--list", "list_", is_flag=True, help="List the shipped specs and exit.")
@click.option("--n-traj", type=int, show_default=_FROM_SPEC, help="Number of trajectories (overrides the spec).")
@click.option("--dt", type=float, show_default=_FROM_SPEC, help="Sampling step: t = k * dt.")
@click.option("--t-end", type=float, show_default=_FROM_SPEC, help="Final time (t0 = 0).")
@click.option("--method", cls=Listed, type=Names(_methods), show_default=_FROM_SPEC,
              help="'dop853' (SciPy) or a classical integrator, e.g. implicit_midpoint.")
@click.option("--rtol", type=float, show_default=_FROM_SPEC, help="DOP853 relative tolerance (per trajectory).")
@click.option("--atol", type=float, show_default=_FROM_SPEC, help="DOP853 absolute tolerance (per trajectory).")
@click.option("--seed", type=int, show_default=_FROM_SPEC, help="Seed for the initial-condition sampler.")
@click.option("--chunk-size", type=int, show_default=_FROM_SPEC, help="Trajectories integrated and written at a time.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path), show_default="from the spec, datasets/<spec>.h5",
    help="Output HDF5 file.",
)
@click.option(
    "--set", "set_", multiple=True, metavar="KEY=VALUE",
    help="Set any spec key (repeatable): dt=0.1, system.inertia=[1,2,3], initial_conditions.radius=2, ... "
    "A key that has its own flag is given once, by the flag or by --set.",
)
@print_config_option
@json_option
@quiet_option
@version_option
@click.option("--overwrite", is_flag=True, help="Replace an existing trajectory file at --out (nothing else).")
@cli_errors
def main(spec, list_, n_traj, dt, t_end, method, rtol, atol, seed, chunk_size, out, set_, print_config, as_json,
         quiet, overwrite) -> None:
    """Generate the trajectory data set SPEC (a spec name or a TOML file) and write it to HDF5.

    Flags override the spec. The file appears only when complete: an interrupted run leaves no partial
    file, and an earlier file at --out stays intact. An existing --out is refused unless --overwrite (which
    replaces only a trajectory file); a second writer of the same --out is refused while this one runs.
    """
    if list_:
        _list_specs()
        return
    if spec is None:
        raise click.UsageError("missing SPEC (a spec name or a .toml file); `vp-gen --list` lists the specs")
    from ..config import merge, parse_set
    from ..data.generation import generate
    from ..data.spec import load_spec, spec_overrides_from_set

    flags = dict(n_traj=n_traj, dt=dt, t_end=t_end, method=method, rtol=rtol, atol=atol, seed=seed,
                 chunk_size=chunk_size, out=out)
    settings = spec_overrides_from_set(parse_set(set_))
    refuse_set_conflicts(settings, flags)
    cfg = load_spec(spec, **merge(settings, flags))
    if print_config:
        click.echo(cfg.to_toml(), nl=False)
        return
    bar = None if quiet else _Progress(f"{cfg.name} ({cfg.method})")
    try:
        path = generate(cfg, out=cfg.out, progress=bar, overwrite=overwrite)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        echo_json(_json_summary(path))
        return
    click.echo(f"wrote {path}")
    click.echo(_summary(path))


def _json_summary(path: Path) -> dict:
    """``--json``: the file and what is in it."""
    from ..data.hdf5 import read_metadata

    meta = read_metadata(path)
    names = [n for n in meta.get("invariant_names", []) if f"max_rel_drift_{n}" in meta]
    return {
        "out": str(path), "system": meta["system"], "method": meta["method"], "n_traj": meta["n_traj"],
        "n_states": meta["n_states"], "dim": meta["dim"], "dt": meta["dt"], "t_end": meta["t_end"],
        "max_rel_drift": {n: meta[f"max_rel_drift_{n}"] for n in names},
    }


if __name__ == "__main__":
    main()
