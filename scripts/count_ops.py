"""Count the aten ops one training step dispatches, per phase (CPU, no GPU needed).

    python scripts/count_ops.py [--model vpt|vpff|st|all] [--batch-size 256] [--dtype float32] [--ops]
                                [--fast-step off|graph]

Builds the real :class:`vpintegrator.training.loop.Trainer` (the paper's hyper-parameters for the model,
Adam, exponential schedule per step) on a small synthetic rigid-body-like data set, runs one warm-up step
(Adam's lazy state), then counts with a ``TorchDispatchMode`` every aten op of one more step of
``Trainer._step`` plus the epoch loop's per-step bookkeeping. Phases follow the loop's ``label`` regions:
gather, forward (the model and the loss), backward, optimizer, schedule (the LR scheduler and the step
counter) and loop (the per-step loss accumulation of ``_torch_epoch``). ``--ops`` lists the ops per phase.

Ops are counted at the dispatch level a kernel launch happens on (a ``TorchDispatchMode`` sees the ops
after autograd and decomposition of CompositeImplicit ops): a proxy for per-step overhead on CPU and
kernel launches on a GPU.

``--fast-step graph`` counts what the host still dispatches per step when the step is replayed from a CUDA
graph (:mod:`vpintegrator.training.fast_step`): the graph step is built (uncaptured, on the CPU), its replay
stubbed out, and the ops around it counted (the batch's index copy, the schedule, the loop's bookkeeping);
the replay itself is one launch, shown as the ``optimizer`` column's graph line.

The counting itself is :mod:`vpintegrator.training.op_count` (also used by the tests).
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch

from vpintegrator.training.op_count import PHASES, count_step, make_trainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vpt", choices=["vpt", "vpff", "st", "all"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--ops", action="store_true", help="list the ops of each phase")
    parser.add_argument("--fast-step", default="off", choices=["off", "graph"],
                        help="graph: the ops the host dispatches around a CUDA-graph replay of the step")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    models = ["vpt", "vpff", "st"] if args.model == "all" else [args.model]
    where = "eager step" if args.fast_step == "off" else "host ops around one CUDA-graph replay (+1 launch)"
    print(f"aten ops per training step (Adam, batch {args.batch_size}, {args.dtype}, cpu, torch {torch.__version__}; "
          f"{where})")
    print(f"{'model':6s} " + " ".join(f"{p:>9s}" for p in PHASES) + f" {'total':>7s}")
    for name in models:
        with tempfile.TemporaryDirectory() as tmp:
            counter = count_step(make_trainer(name, args.batch_size, args.dtype, tmp, fast_step=args.fast_step))
        counts = counter.counts()
        print(f"{name:6s} " + " ".join(f"{counts.get(p, 0):9d}" for p in PHASES) + f" {sum(counts.values()):7d}")
        if args.ops:
            for p in PHASES:
                if counter.ops.get(p):
                    print(f"  {p}: " + ", ".join(f"{op} x{n}" for op, n in counter.ops[p].most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
