"""How far float64 training runs that differ only by round-off drift apart, epoch by epoch (issue 89).

    python scripts/compile_drift.py [--n-traj 64] [--epochs 4] [--batch-size 256] [--no-compile]

The paper VPT (Adam, the paper's schedule, validation 10 %, seed 1234, float64, CPU) on the first ``--n-traj``
trajectories of the paper data set, as ``scripts/gpu_parity.py`` trains it, three times against the eager run:

* ``reversed``: the eager step with every batch's windows in reverse order: the same windows, so the same
  loss and gradients but for the order of their sums (a reassociated sum at every step, as a compiler's is);
* ``compile``: ``fast_step = "compile"`` (inductor reassociates and fuses the sums);
* ``eager``: the eager run again (0: the runs are deterministic, the differences above are the perturbation's).

Printed per epoch, as each run ends: the relative difference of the training loss and the largest relative
difference of the weights (per tensor, relative to its largest weight) from the eager run at that epoch.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

PAPER_MODEL = {"name": "vpt", "dim": 3, "seq_len": 3, "n_blocks": 2, "n_linear": 1, "L": 3}


def _gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) / (float(b[k].abs().max()) or 1.0) for k in b)


def train(data: str, out: str, args, fast_step: str = "off", reverse: bool = False):
    """(training loss per epoch, weights per epoch, optimiser steps) of one run."""
    from vpintegrator.data.windows import WindowBatchSampler
    from vpintegrator.training import fit

    weights: list[dict[str, torch.Tensor]] = []
    shard = WindowBatchSampler.shard
    if reverse:
        WindowBatchSampler.shard = lambda self, order, b: shard(self, order, b).flip(0)
    try:
        result = fit(dict(data=[data], model=PAPER_MODEL, epochs=args.epochs, batch_size=args.batch_size,
                          val_fraction=0.1, dtype="float64", device="cpu", seed=1234, out=out, fast_step=fast_step),
                     callback=lambda info: weights.append({k: v.detach().clone()
                                                           for k, v in info.model.state_dict().items()}))
    finally:
        WindowBatchSampler.shard = shard
    return [h["train_loss"] for h in result.history], weights, result.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-traj", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled run (its build takes minutes)")
    args = parser.parse_args()
    from vpintegrator.data import generate
    from vpintegrator.data.trajectory_files import write_trajectories

    with tempfile.TemporaryDirectory() as tmp:
        traj = generate("rigid_body_paper")
        data = str(write_trajectories(Path(tmp) / "data.h5", traj.select(traj=np.arange(args.n_traj))))
        ref_loss, ref_w, steps = train(data, f"{tmp}/eager", args)
        print(f"paper VPT, Adam, float64, cpu, torch {torch.__version__}, {args.n_traj} trajectories, batch "
              f"{args.batch_size}, {args.epochs} epochs ({steps} steps); relative difference from the eager run "
              "after each epoch: training loss / weights", flush=True)
        runs = [("reversed", "off", True)] + ([] if args.no_compile else [("compile", "compile", False)])
        for name, fast, reverse in runs + [("eager", "off", False)]:
            loss, w, _ = train(data, f"{tmp}/{name}", args, fast, reverse)
            cells = [f"{abs(a - b) / abs(b):.1e} / {_gap(x, y):.1e}" for a, b, x, y in zip(loss, ref_loss, w, ref_w)]
            print(f"  {name:<9} " + "   ".join(f"epoch {e + 1}: {c}" for e, c in enumerate(cells)), flush=True)


if __name__ == "__main__":
    main()
