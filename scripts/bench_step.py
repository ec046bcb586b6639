"""ms per training step of the paper VPT (Adam, float32, CPU): this tree against a baseline tree, same run.

    git worktree add /tmp/base HEAD          # the baseline (any tree with the vpintegrator package)
    python scripts/bench_step.py [--base /tmp/base] [--batch-sizes 256 16384] [--threads 1 2] [--rounds 3]
                                 [--fast-step off|compile]
    git worktree remove /tmp/base

Each measurement is a fresh subprocess (``PYTHONPATH`` = the tree) that builds the real ``Trainer`` (as
``scripts/count_ops.py`` does: the paper's VPT, Adam, exponential schedule per step, synthetic data with
enough windows), warms up, and times ``Trainer._step`` plus the loop's per-step loss accumulation. The two
trees alternate over rounds (the order flips every round) and each reports its fastest round's median
ms/step (on a shared machine the least disturbed); the ratio is baseline / this tree (> 1: faster now).
``--fast-step compile`` times this tree's compiled step (:mod:`vpintegrator.training.fast_step`; compiled
during the warm-up, not timed) against the baseline's default step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def worker(batch: int, threads: int, seconds: float, fast_step: str) -> None:
    import tempfile

    import torch

    sys.path.insert(0, str(HERE))
    import count_ops
    import vpintegrator

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = count_ops.make_trainer("vpt", batch, "float32", tmp,
                                         fast_step=None if fast_step == "default" else fast_step)
        steps = trainer.steps  # the single-model step strategy (old and new trees alike: --base)
        idx = steps.sampler.epoch_order()[:batch]
        steps._last_global_batch = idx
        acc = torch.zeros((), dtype=torch.float64)
        for _ in range(3):
            steps._step(idx)
        t0 = time.perf_counter()
        steps._step(idx)
        one = time.perf_counter() - t0
        n_per = max(1, min(200, int(0.3 / max(one, 1e-6))))  # ~0.3 s chunks
        times = []
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end or len(times) < 3:
            t0 = time.perf_counter()
            for _ in range(n_per):
                reported, _, _ = steps._step(idx)
                acc += reported.double()
            times.append((time.perf_counter() - t0) / n_per * 1e3)
        float(acc)
    print(json.dumps({"ms": statistics.median(times), "file": vpintegrator.__file__}))


def measure(tree: Path, batch: int, threads: int, seconds: float, fast_step: str = "default") -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, __file__, "--worker", str(batch), str(threads), str(seconds), fast_step],
                         env=env, capture_output=True, text=True, check=True, cwd=str(tree))
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    return rec["ms"], rec["file"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="/tmp/base", help="baseline tree (e.g. a git worktree of HEAD)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 16384])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    parser.add_argument("--fast-step", default="default", choices=["default", "off", "compile"],
                        help="this tree's step path (the baseline runs its default)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(int(args.worker[0]), int(args.worker[1]), float(args.worker[2]), args.worker[3])
        return 0
    trees = {"base": Path(args.base).resolve(), "this": ROOT}
    print(f"paper VPT training step (Adam, float32, cpu); base = {trees['base']}, this = {trees['this']} "
          f"(fast_step {args.fast_step})")
    print(f"{'batch':>6s} {'threads':>7s} {'base ms':>9s} {'this ms':>9s} {'speed-up':>8s}")
    for batch in args.batch_sizes:
        for threads in args.threads:
            best = {"base": float("inf"), "this": float("inf")}
            for r in range(args.rounds):
                for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
                    ms, file = measure(trees[name], batch, threads, args.seconds,
                                       args.fast_step if name == "this" else "default")
                    if not str(Path(file).resolve()).startswith(str(trees[name])):
                        raise SystemExit(f"{name}: imported {file}, not from {trees[name]}")
                    best[name] = min(best[name], ms)
            print(f"{batch:6d} {threads:7d} {best['base']:9.3f} {best['this']:9.3f} "
                  f"{best['base'] / best['this']:7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
