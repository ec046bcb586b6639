"""The recurrent rung of the memory ladder against the window MLP, at one step budget: ``gru`` and ``lru``
against ``delay_mlp`` on the coupled oscillator observed in its positions q (the setting of
``configs/coupled_oscillator_observed_q.toml``: 100 box trajectories, h = 0.2, t ≤ 20, Levenberg–Marquardt in
float64, ``max_steps`` optimiser steps, the best epoch on the validation rollout, one seed).

Every model is trained by ``vp-train`` on the same file with the same budget and recipe (only ``[model]``
differs), and rolled out by ``vp-rollout`` twice: on ``--heldout`` new initial conditions against the exact flow
(the error at t = 20, mean and median over the conditions, read back from the rollout file), and on one
(batch 1) for the thread-CPU seconds per step the rollout file records (warm, the cost meter's rule). Prints one
table with the training CPU seconds (``summary.json``) and the parameter counts.

Labels: ``gru``, ``lru``, ``delay_mlp`` (width 32, depth 2, as the config), and the same with the second
difference (``increment = "second"``): ``gru2``, ``lru2``, ``delay_mlp2``.

    OMP_NUM_THREADS=1 python scripts/recurrent_probe.py --out runs/recurrent_probe     # about a minute
    OMP_NUM_THREADS=1 python scripts/recurrent_probe.py --out runs/recurrent_probe2 --models gru2,lru2,delay_mlp2
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]  # the checkout (its configs); the package is the installed one

#: label -> the [model] table (the recipe's other keys come from the shipped config)
MODELS = {
    "gru": {"name": "gru"},
    "lru": {"name": "lru"},
    "delay_mlp": {"name": "delay_mlp", "width": 32, "depth": 2},
    "gru2": {"name": "gru", "increment": "second"},
    "lru2": {"name": "lru", "increment": "second"},
    "delay_mlp2": {"name": "delay_mlp", "width": 32, "depth": 2, "increment": "second"},
}


def _invoke(main, args: list[str]) -> None:
    from click.testing import CliRunner

    res = CliRunner().invoke(main, [str(a) for a in args])
    if res.exit_code != 0:
        raise SystemExit(f"{main.name} {' '.join(map(str, args))}: {res.output}{res.exception or ''}")


def _toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def config_text(data: Path, out: Path, model: dict, seq_len: int, max_steps: int, seed: int) -> str:
    """The shipped observed-q config with this data file, output, model table, window, budget and seed."""
    text = (REPO / "configs" / "coupled_oscillator_observed_q.toml").read_text(encoding="utf-8")
    head = text.split("[model]", 1)[0]
    head = re.sub(r'^data = .*$', f"data = [{json.dumps(str(data))}]", head, flags=re.M)
    head = re.sub(r'^out = .*$', f"out = {json.dumps(str(out))}", head, flags=re.M)
    head = re.sub(r'^max_steps = \d+', f"max_steps = {max_steps}", head, flags=re.M)
    head = re.sub(r'^seed = \d+', f"seed = {seed}", head, flags=re.M)
    table = {**model, "seq_len": seq_len}
    return head + "[model]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="gru,lru,delay_mlp", help="comma list out of " + ", ".join(MODELS))
    parser.add_argument("--seq-len", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-traj", type=int, default=100)
    parser.add_argument("--heldout", type=int, default=20)
    args = parser.parse_args(argv)
    labels = [m for m in args.models.split(",") if m]
    unknown = [m for m in labels if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; valid: {', '.join(MODELS)}")

    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main
    from vpintegrator.data import read_rollout

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = out / "co_dt02.h5"
    if not data.exists():
        _invoke(gen_main, ["coupled_oscillator_box", "--dt", "0.2", "--t-end", "20", "--n-traj", args.n_traj,
                           "--out", data, "--quiet"])
    runs = {}
    for label in labels:
        run = out / "runs" / label
        cfg = out / f"{label}.toml"
        cfg.write_text(config_text(data, run, MODELS[label], args.seq_len, args.max_steps, args.seed))
        if not (run / "summary.json").exists():
            _invoke(train_main, [cfg, "--quiet"])
        runs[label] = run
    model_args = [a for label in labels for a in ("--model", f"{label}={runs[label]}")]
    scored, batch1 = out / "heldout.h5", out / "batch1.h5"
    _invoke(rollout_main, ["--data", data, *model_args, "--heldout", args.heldout, "--out", scored, "--overwrite"])
    _invoke(rollout_main, ["--data", data, *model_args, "--heldout", 1, "--out", batch1, "--overwrite"])
    ro, one = read_rollout(scored), read_rollout(batch1)
    print(f"coupled_oscillator observed in q, T = {args.seq_len}, {args.max_steps} LM steps, seed {args.seed}; "
          f"error at t = {ro.t[-1]:g} over {args.heldout} held-out conditions against the exact flow")
    print(f"{'model':<11} {'params':>6} {'mean err':>9} {'median':>9} {'s/step b1':>10} {'train CPU s':>11} stopped")
    for label in labels:
        err = ro.metrics[label].rel_error[:, -1]
        summary = json.loads((runs[label] / "summary.json").read_text())
        sps = float(one.methods[label].meta["seconds_per_step"])
        print(f"{label:<11} {summary.get('n_params', 0):>6} {np.mean(err):>9.3e} {np.median(err):>9.3e} "
              f"{sps:>10.3e} {summary.get('cpu_time', float('nan')):>11.1f} {summary.get('stopped', '')}")


if __name__ == "__main__":
    main()
