"""``vp-train [CONFIG]``: train a neural integrator on HDF5 trajectories, write a run directory.

Reads the TOML (keys of [`vpintegrator.training.TrainConfig`][vpintegrator.training.TrainConfig], model hyper-parameters in a
``[model]`` table), applies the flags and ``--set KEY=VALUE`` entries (they win), calls
[`vpintegrator.training.fit`][vpintegrator.training.fit], and prints where the run went. Without a TOML, ``--data`` and
``--model`` suffice: the model gets the paper's hyper-parameters for its architecture, ``dim`` the data's. ``--resume RUN_DIR`` continues a run exactly (``--epochs`` is then the total).
Under ``torchrun`` it trains with DistributedDataParallel (``torchrun --nproc_per_node=N -m
vpintegrator.cli.train ...``). Ctrl-C or SIGTERM save ``last.pt`` and exit with status 130.
"""

from __future__ import annotations

from typing import Any

import math
import os
import sys
from pathlib import Path

import click

from ._common import Listed, Names, cli_errors, echo_json, run_options, shown_path
from ._options import ConfigCommand, read_set, set_option


def _split_data(values: tuple[str, ...]) -> list[str] | None:
    from ..config import distinct

    paths = [p.strip() for v in values for p in v.split(",") if p.strip()]
    return distinct(paths, "data") or None


def _models() -> list[str]:
    """The shipped model names, shown in --help and known to shell completion (the library checks the
    value). Read without importing torch (the registry does): the ``model_name`` of every class of
    ``vpintegrator/models/`` registered with ``register_model`` (as a decorator or a call), from the source;
    tests/test_cli_conventions.py keeps them equal to ``list_models()``."""
    import ast

    names: dict[str, str] = {}  # class name -> its model_name
    registered: set[str] = set()

    def is_register(node: ast.expr) -> bool:
        node = node.func if isinstance(node, ast.Call) else node
        return (isinstance(node, ast.Name) and node.id == "register_model") or (
            isinstance(node, ast.Attribute) and node.attr == "register_model")

    for path in sorted((Path(__file__).resolve().parent.parent / "models").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                            and any(isinstance(t, ast.Name) and t.id == "model_name" for t in stmt.targets)):
                        names[node.name] = str(stmt.value.value)
                if any(is_register(d) for d in node.decorator_list):
                    registered.add(node.name)
            elif isinstance(node, ast.Call) and is_register(node) and node.args and isinstance(node.args[0], ast.Name):
                registered.add(node.args[0].id)  # register_model(Cls, defaults)
    return sorted(names[c] for c in registered if c in names)


def _config_class():
    from ..training import TrainConfig

    return TrainConfig


def _list_configs(ctx, _param, value) -> None:
    """``--list``: the shipped configs with their first comment line, then the pretrained models that
    ``--init-from pretrained:NAME`` starts from."""
    if not value or ctx.resilient_parsing:
        return
    from .._shipped import config_files, config_description
    from ._common import pretrained_lines

    files = config_files()
    width = max((len(n) for n in files), default=0)
    for name, path in files.items():
        click.echo(f"{name:<{width}}  {config_description(path)}")
    click.echo("")
    click.echo("Pretrained models (--init-from pretrained:NAME; everything about one: vpintegrator.pretrained_info(NAME)):")
    for line in pretrained_lines():
        click.echo(line)
    ctx.exit(0)


def _complete_config(ctx, param, incomplete):
    """Shell completion of CONFIG: the shipped config names, or a file."""
    from ._common import complete_config

    return complete_config(ctx, param, incomplete)


@click.command("vp-train", cls=ConfigCommand, config=_config_class,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config", required=False, metavar="[CONFIG]", shell_complete=_complete_config)
@click.option("--list", "list_", is_flag=True, is_eager=True, expose_value=False, callback=_list_configs,
              help="List the shipped configs (usable as CONFIG by name) and exit.")
@click.option(
    "--data", multiple=True, metavar="PATH",
    help="HDF5 trajectory file; repeat the flag or give a comma list for several shards.",
)
@click.option("--model", cls=Listed, type=Names(_models),
              help="Model name, or package.module:ClassName of your own model class; replaces the [model] name.")
@click.option("--seq-len", type=int, show_default="the paper's",
              help="Model window length (sets [model] seq_len).")
# here: one option per TrainConfig key (its declaration in vpintegrator/training/config.py)
@set_option(
    "Any config key (TrainConfig field; model.KEY for a [model] key), VALUE in TOML syntax, e.g. "
    "--set lm_check_windows=4096 --set model.L=2; repeatable. A key that has its own flag is given once, "
    "by the flag or by --set."
)
@click.option(
    "--resume", type=click.Path(path_type=Path), metavar="RUN_DIR",
    help="Continue the run in RUN_DIR from its last.pt.",
)
@run_options
@click.option("--overwrite", is_flag=True,
              help="Replace the run at --out: its vp-train files go, any other file in it is kept.")
@cli_errors
def main(config, data, model, seq_len, flags, set_, resume, print_config, as_json, quiet, overwrite):
    """Train a neural integrator from CONFIG and/or flags; write a run directory.

    CONFIG is a TOML file or the name of a shipped config (vp-train --list). Flags and --set entries win
    over CONFIG; the defaults shown apply where neither CONFIG nor a flag gives a key.

    The run directory holds config.toml (resolved), best.pt and last.pt (load with
    vpintegrator.load_model or torch.load(weights_only=True)), log.csv
    (epoch,train_loss,val_loss,lr,seconds,cpu_seconds) and summary.json. Ctrl-C or SIGTERM save last.pt
    and exit with status 130; --resume RUN_DIR then continues exactly. Several processes or GPUs:
    torchrun --nproc_per_node=N -m vpintegrator.cli.train CONFIG (--batch-size is global).
    --optimizer lm (Levenberg-Marquardt, e.g. the config rigid_body_vpt_lm) reaches low losses
    far faster on these small models; an epoch is then --lm-iters-per-epoch iterations followed by
    the full training and validation losses, and the lr column holds the damping lambda.
    An --out that holds a run is refused unless --overwrite; the run directory is locked while training,
    so a second vp-train (or --resume) of it is refused.
    """
    from .._shipped import config_path
    from ..errors import VPIntegratorError
    from ..training import TrainConfig, TrainingInterrupted, fit
    from ..training.config import merge_overrides
    from ..training.ddp import exit_rank
    from .._io import check_not_input

    given = config  # as the user named it (a shipped name or a path), for messages
    if config is not None:
        config = config_path(config)  # a file, or a shipped config by name
    out = flags.get("out")
    if out is not None:
        check_not_input(out, [config, *(_split_data(data) or [])], key="out")

    overrides = dict(data=_split_data(data), model=model, **flags)
    model_table = {"name": model} if model is not None else {}
    values = read_set(set_, TrainConfig.keys(), {**overrides, "model.name": model, "model.seq_len": seq_len},
                      names={"model.name": "--model", "model.seq_len": "--seq-len"},
                      hint="model.KEY for a [model] key")
    for key, value in values.items():
        if key == "model" and isinstance(value, dict):
            model_table.update(value)
            continue
        overrides[key] = value
    if seq_len is not None:
        model_table["seq_len"] = seq_len
    if set(model_table) - {"name"}:
        if resume is not None:
            raise VPIntegratorError(f"--seq-len or --set model.KEY with --resume {resume}: a resumed run keeps its model")
        overrides["model"] = model_table
    if resume is not None and (overrides.get("ensemble") is not None or overrides.get("seeds") is not None):
        raise VPIntegratorError(f"--ensemble with --resume {resume}: a resumed run keeps its members (an ensemble "
                                "resumes with all of its own); give --resume alone")
    progress = not quiet
    if resume is not None:
        if config is not None:
            raise VPIntegratorError(
                f"give either CONFIG ({config}) or --resume {resume}, not both: a resumed run keeps its own "
                "config.toml"
            )
        if out is not None and Path(out).resolve() != Path(resume).resolve():
            raise VPIntegratorError(f"--out {out} with --resume {resume}: a resumed run stays in its directory")
        run = dict(resume=resume, progress=progress, overwrite=overwrite,
                   **{k: v for k, v in overrides.items() if v is not None})
        run.pop("out", None)
        if print_config:
            given = {k: v for k, v in run.items() if k not in ("resume", "progress", "overwrite")}
            _print_config(TrainConfig.from_toml(Path(resume) / "config.toml", **given))
            return
        call = lambda: fit(**run)  # noqa: E731
    else:
        if config is not None:
            resolved = TrainConfig.from_toml(config, **overrides)
        elif overrides["data"] is None or overrides["model"] is None:
            raise VPIntegratorError("without CONFIG.toml give at least --data PATH and --model NAME")
        else:
            resolved = TrainConfig.from_dict(merge_overrides({}, overrides), source="flags")
        if print_config:
            _print_config(resolved)
            return
        _check_data_exists(resolved.data, None if overrides["data"] is not None else given)
        call = lambda: fit(resolved, progress=progress, overwrite=overwrite)  # noqa: E731
    try:
        result = call()
    except TrainingInterrupted as err:
        if "ensemble" in str(err):
            click.echo(f"Interrupted: {err}", err=True)
            sys.exit(130)
        run_dir = err.result.run_dir
        hint = f"; continue with: vp-train --resume {shown_path(run_dir)}" if run_dir is not None else ""
        click.echo(f"Interrupted: {err}{hint}", err=True)
        sys.exit(130)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 reports
        exit_rank()
    if as_json:
        echo_json(_json_summary(result))
    elif result.members:
        _report_ensemble(result)
    else:
        monitor = getattr(result, "monitor", "val_loss")
        best = ("" if result.best_epoch == 0 else
                f", best {monitor} {result.best_loss:.3e} at epoch {result.best_epoch}")
        still = ", still improving" if result.still_improving else ""  # the plateau rule stopped a falling trend
        ident = (f", identity map {result.identity_loss:.3e}" if result.best_epoch and result.identity_loss > 0
                 else "")  # the do-nothing baseline on the same score (NaN: none)
        click.echo(
            f"Trained {result.epochs} epochs ({result.steps} steps, {result.wall_time:.1f} s, stopped: "
            f"{result.stopped}{still}) on {result.device}, {result.dtype}: train_loss {result.train_loss:.3e}{best}"
            f"{ident}"
        )
        if result.identity_line():
            click.echo(result.identity_line())
        click.echo(f"Run written to {shown_path(result.run_dir)}")
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        exit_rank()


def _check_data_exists(paths: list[str], config: str | None) -> None:
    """A data file that is not there: one line with the path as given (relative stays relative) and the
    ``vp-gen`` command that writes it (``vp-gen SPEC`` writes ``datasets/SPEC.h5`` for a shipped spec)."""
    from .._shipped import SPECS, shipped_dirs

    for path in paths:
        if os.path.exists(path):
            continue
        specs = {p.stem for d in shipped_dirs(*SPECS) for p in d.glob("*.toml")}
        stem = Path(path).stem
        if Path(path).as_posix() == f"datasets/{stem}.h5" and stem in specs:
            how = f"write it first with: vp-gen {stem}"
        else:
            how = "write it first with vp-gen SPEC --out PATH (vp-gen --list names the specs) or give an existing file"
        where = "--data" if config is None else f"config {config}: data"
        raise click.ClickException(f"{where}: {path} not found; {how}")


def _print_config(config) -> None:
    """``--print-config``: the config with the model's paper defaults filled in (``dim`` comes from the data
    when the run starts)."""
    from ..models import default_model_config

    model = dict(config.model)
    if model.get("name"):
        model = {"name": model["name"], **default_model_config(model["name"]), **model}
    click.echo(config.replace(model=model).to_toml(), nl=False)


def _json_summary(result) -> dict[str, Any]:
    """``--json``: what the run did and where it went."""
    common = {"run_dir": result.run_dir, "epochs": result.epochs, "stopped": result.stopped,
              "still_improving": result.still_improving,
              "wall_time": result.wall_time, "device": str(result.device), "dtype": result.dtype}
    if result.members:
        return {**common, "kind": "ensemble", "members": list(result.table),
                "selected": None if result.selected is None else result.selected}
    return {**common, "kind": "run", "steps": result.steps, "train_loss": result.train_loss,
            "best_loss": result.best_loss if result.best_epoch else None, "best_epoch": result.best_epoch,
            "monitor": getattr(result, "monitor", None), "identity_loss": (
                result.identity_loss if math.isfinite(result.identity_loss) else None),
            "worse_than_identity": result.worse_than_identity}


def _report_ensemble(result) -> None:
    """What ``vp-train --ensemble`` prints: one line per member and the selection."""
    click.echo(f"Trained an ensemble of {len(result.members)} for {result.epochs} epochs ({result.wall_time:.1f} s, "
               f"stopped: {result.stopped}) on {result.device}, {result.dtype}; {result.monitor} per member:")
    for row in result.table:
        score = "-" if row["best_score"] is None else f"{row['best_score']:.3e}"
        loss = "-" if row["train_loss"] is None else f"{row['train_loss']:.3e}"
        mark = "  <- selected" if row["selected"] else ""
        if result.members[row["member"]].worse_than_identity:
            mark += "  (worse than the identity map)"
        click.echo(f"  member {row['member']} (seed {row['seed']}): best {score} at epoch {row['best_epoch']}, "
                   f"train loss {loss}, {row['stopped']}{mark}")
    if result.selected is None:
        click.echo("No member selected (no validation data or every member diverged)", err=True)
    click.echo(f"Ensemble written to {shown_path(result.run_dir)} (ensemble.md, selected.json"
               f"{', best/' if result.selected is not None else ''})")


if __name__ == "__main__":
    main()
