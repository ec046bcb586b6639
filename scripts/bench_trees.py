"""Before/after in one run: the same workloads timed on a baseline tree and on this tree, alternately.

    python scripts/bench_trees.py --base /path/to/worktree-of-the-old-commit [--rounds 3] [--only NAME,...]

Each workload is a small Python program run in a fresh process with ``PYTHONPATH`` set to one tree, so the
two trees never share a process (nor numba's or torch's in-process caches); the programs use only API that
both trees have. The time reported is what the program measures around its work (imports, data set-up and
compilation excluded), the minimum over ``--rounds`` alternating rounds, and the ratio is this tree over
the base (> 1: this tree is slower). The machine is shared and noisy: read ratios within ~5 % as equal.

Workloads (what the one-core refactoring touched):
- ``rollout_batched``: the host engine, ``run_rollouts`` of the paper's 1238 initial conditions x 200 steps
  with RK4 and a float32 VPT (block loop, failure rule, metrics, HDF5 file);
- ``rollout_batch1``: one trajectory, 20 000 steps of the float64 VPT (numba runner) and of implicit midpoint
  (compiled stepper) through ``rollout``;
- ``rollout_trace``: one trajectory, 2 000 steps of the VPT with the torch runner (numba off);
- ``train``: ``fit`` of the paper VPT with Adam, 3 epochs on 300 trajectories, batch 1024, float32
  (the epoch loop, the bookkeeping, log.csv, checkpoints);
- ``train_lm``: ``fit`` with Levenberg–Marquardt, 2 epochs of 5 iterations on 1024-window subsamples;
- ``ensemble``: a 4-seed ensemble, Adam, 2 epochs;
- ``generate``: ``generate`` of the paper's rigid-body spec with implicit midpoint, inline and with two worker
  processes (spec check, the job runtime's shards and index, the HDF5 writer).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

SETUP = """
import os, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch
torch.set_num_threads(1)
import vpintegrator as vp
work = Path(sys.argv[1])
data = work / "data.h5"
if not data.exists():
    vp.generate(vp.load_spec("rigid_body_paper", method="implicit_midpoint"), out=data)
"""

WORKLOADS = {
    "rollout_batched": """
from vpintegrator.rollout import RolloutConfig, run_rollouts
from vpintegrator.models import build_model, save_model
torch.manual_seed(0)
model = build_model("vpt", dim=3, seq_len=3, n_blocks=2, L=2)
ckpt = work / "vpt.pt"
if not ckpt.exists():
    save_model(model, ckpt)
out = work / f"roll_{os.getpid()}.h5"
cfg = RolloutConfig(data=str(data), models={"vpt": str(ckpt)}, integrators=["rk4"], t_end=40.0, out=str(out))
tic = time.perf_counter()
run_rollouts(cfg)
print(time.perf_counter() - tic)
""",
    "rollout_batch1": """
from vpintegrator.rollout import IntegratorStep, ModelStep, initial_window, rollout
from vpintegrator.models import build_model
torch.manual_seed(0)
model = build_model("vpt", dim=3, seq_len=3, n_blocks=2, L=2).double()
y0 = np.array([[np.cos(1.1), 0.0, np.sin(1.1)]])
w = initial_window("rigid_body", y0, 0.2, 3)
rollout(ModelStep(model, device="cpu"), w, 0.2, 30)  # compile/load the kernels
rollout(IntegratorStep("rigid_body", "implicit_midpoint", 0.2), y0, 0.2, 30)
tic = time.perf_counter()
rollout(ModelStep(model, device="cpu"), w, 0.2, 20_000)
rollout(IntegratorStep("rigid_body", "implicit_midpoint", 0.2), y0, 0.2, 20_000)
print(time.perf_counter() - tic)
""",
    "rollout_trace": """
from vpintegrator.rollout import ModelStep, initial_window, rollout
from vpintegrator.models import build_model
torch.manual_seed(0)
model = build_model("vpt", dim=3, seq_len=3, n_blocks=2, L=2)
y0 = np.array([[np.cos(1.1), 0.0, np.sin(1.1)]])
w = initial_window("rigid_body", y0, 0.2, 3)
rollout(ModelStep(model, device="cpu", scalar_max_batch=0), w, 0.2, 30)
tic = time.perf_counter()
rollout(ModelStep(model, device="cpu", scalar_max_batch=0), w, 0.2, 2_000)
print(time.perf_counter() - tic)
""",
    "train": """
cfg = dict(data=[str(data)], model={"name": "vpt", "n_blocks": 2, "L": 2}, epochs=3, batch_size=1024,
           optimizer="adam", lr=1e-2, device="cpu", dtype="float32", seed=1, out=str(work / f"t_{os.getpid()}"))
tic = time.perf_counter()
vp.fit(cfg)
print(time.perf_counter() - tic)
""",
    "train_lm": """
cfg = dict(data=[str(data)], model={"name": "vpt", "n_blocks": 2, "L": 2}, epochs=2, optimizer="lm",
           lm_windows=1024, lm_iters_per_epoch=5, device="cpu", dtype="float64", seed=1,
           out=str(work / f"lm_{os.getpid()}"))
tic = time.perf_counter()
vp.fit(cfg)
print(time.perf_counter() - tic)
""",
    "ensemble": """
cfg = dict(data=[str(data)], model={"name": "vpt", "n_blocks": 2, "L": 2}, epochs=2, batch_size=1024,
           optimizer="adam", lr=1e-2, device="cpu", dtype="float32", seed=1, ensemble=4,
           out=str(work / f"e_{os.getpid()}"))
tic = time.perf_counter()
vp.fit(cfg)
print(time.perf_counter() - tic)
""",
    "generate": """
spec = vp.load_spec("rigid_body_paper", method="implicit_midpoint")
tic = time.perf_counter()
vp.generate(spec, out=work / f"g_{os.getpid()}.h5")
vp.generate(spec, out=work / f"gw_{os.getpid()}.h5", workers=2)
print(time.perf_counter() - tic)
""",
}


def run(tree: Path, name: str, work: Path) -> float:
    code = textwrap.dedent(SETUP) + textwrap.dedent(WORKLOADS[name])
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code, str(work)], env=env, capture_output=True, text=True,
                          cwd=str(work))
    if proc.returncode != 0:
        raise SystemExit(f"{name} on {tree} failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the baseline tree (a git worktree of the old commit)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (minimum taken)")
    parser.add_argument("--only", default="", help="comma list of workloads (default: all)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    trees = {"base": Path(args.base).resolve(), "this": HERE}
    best: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for r in range(args.rounds):
                for label in (("base", "this") if r % 2 == 0 else ("this", "base")):
                    work = Path(tmp) / label
                    work.mkdir(exist_ok=True)
                    t = run(trees[label], name, work)
                    best[name, label] = min(best.get((name, label), float("inf")), t)
            b, t = best[name, "base"], best[name, "this"]
            print(f"{name:16s} base {b:8.3f} s   this {t:8.3f} s   this/base {t / b:5.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
