#!/usr/bin/env python
"""Rollout benchmark (issue 5, item 7).

(a) one trajectory (the paper's trajectory 1) to t = 50 000 at h = 0.2 (250 000 steps) for VPT, VPFF, ST and
    implicit midpoint in the same run: measured seconds, µs per call and per step, seconds to t = 50 000
    (extrapolated, and labelled so, when --steps is smaller), ratios to implicit midpoint, beside the paper's
    Julia numbers (implicit midpoint 2.51 s, VPFF 6.44 s, VPT 0.71 s, ST 0.20 s); (a') the model runners
    (generated Python scalar code, TorchScript trace, eager) per call on a shorter horizon;
(b) batched throughput in state-steps/s for the paper's 1238 trajectories;
(c) peak memory (RSS and tracemalloc) of a full ``run_rollouts`` streaming to HDF5 at 10^4 and 10^5 steps,
    each in a fresh process, against the in-memory size of what it wrote (flat is the target).

Models are the shipped pretrained ones (``pretrained:rigid_body_*``, float64, trained weights) unless runs are
given (--vpt, --vpff, --st) or --random (random init: its states blow up and the engine restarts those rows,
``failed`` column, which costs the same per step).

    python scripts/bench_rollout.py [--steps 250000] [--batch-steps 500] [--skip a,b,c] [--vpt RUN ...] [--random]
    python scripts/bench_rollout.py --steps 20000 --skip b,c      # quick: batch 1 only, t = 50 000 extrapolated
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vpintegrator.data import generate, load_spec
from vpintegrator.models import build_model, list_pretrained, load_model
from vpintegrator.rollout import (
    SCALAR_MAX_BATCH,
    IntegratorStep,
    ModelStep,
    RolloutConfig,
    initial_window,
    rollout,
    run_rollouts,
)
from vpintegrator.systems import paper_sphere_points, paper_trajectory_index

DT = 0.2
PAPER_STEPS = 250_000  # t = 50 000
JULIA = {"implicit_midpoint": 2.51, "vpff": 6.44, "vpt": 0.71, "st": 0.20}  # s for 250 000 steps (paper, CPU)
PAPER_CONFIGS = {
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpff": dict(dim=3, n_blocks=6),
    "st": dict(dim=3, seq_len=3, n_blocks=2, L=3, n_heads=1),
}


def models(args) -> dict[str, tuple[torch.nn.Module, str]]:
    """The shipped pretrained models (trained weights) unless runs are given, or random init with --random."""
    out = {}
    shipped = set(list_pretrained())
    for name, cfg in PAPER_CONFIGS.items():
        path = getattr(args, name)
        if path is None and not args.random and f"rigid_body_{name}" in shipped:
            path = f"pretrained:rigid_body_{name}"
        if path:
            out[name] = (load_model(path), f"trained ({path})")
        else:
            torch.manual_seed(1234)
            out[name] = (build_model(name, **cfg).double(), "random init, paper config, float64")
    return out


RUNNERS = {  # ModelStep options per runner
    "python scalar": dict(jit=True),
    "jit.trace+freeze": dict(jit=True, scalar_max_batch=0),
    "eager": dict(jit=False, scalar_max_batch=0),
}


def step_map(name, model=None, runner="python scalar", device="cpu"):
    if model is None:
        return IntegratorStep("rigid_body", name, DT)
    return ModelStep(model, device=device, **RUNNERS[runner])


def timed_rollout(sm, y0, n_steps):
    window = initial_window("rigid_body", y0, DT, sm.seq_len, method="implicit_midpoint")
    res = rollout(sm, window, DT, n_steps)
    return res.meta["seconds"], res.n_failed, res.meta


def n_calls(sm, n_steps: int) -> int:
    """Calls of the step map in a rollout of n_steps (the first seq_len states are given)."""
    return -(-(n_steps + 1 - sm.seq_len) // sm.advance)


def part_a(args, mods):
    y0 = paper_sphere_points()[[paper_trajectory_index(1)]]  # (1, 3)
    n = args.steps
    extrapolated = n != PAPER_STEPS
    label = "s to t=50000" + (" (extrap.)" if extrapolated else "")
    print(f"\n(a) one trajectory (paper trajectory 1), {n} steps of h = {DT} (t = {n * DT:g}), batch 1, CPU, "
          f"{torch.get_num_threads()} torch threads; each model with the engine's default runner")
    if extrapolated:
        print(f"    seconds to t = 50 000 ({PAPER_STEPS} steps) are EXTRAPOLATED linearly from the {n} measured steps")
    rows = []
    for name in ("implicit_midpoint", "vpff", "vpt", "st"):
        model, origin = mods.get(name, (None, "numpy, vpintegrator.integrators"))
        sm = step_map(name, model)
        sec, failed, meta = timed_rollout(sm, y0, n)
        rows.append((name, sec, n_calls(sm, n), failed, meta.get("runner", "numpy"), origin))
    ref = rows[0][1]
    print(f"{'method':<18}{'measured s':>11}{'us/call':>9}{'us/step':>9}{label:>{max(14, len(label) + 2)}}"
          f"{'ratio to IM':>13}{'Julia s':>9}{'Julia ratio':>12}  runner; model")
    for name, sec, calls, failed, runner, origin in rows:
        jr = JULIA[name] / JULIA["implicit_midpoint"]
        fail = f", {failed} failed/restarted" if failed else ""
        print(f"{name:<18}{sec:>11.2f}{1e6 * sec / calls:>9.1f}{1e6 * sec / n:>9.1f}"
              f"{sec * PAPER_STEPS / n:>{max(14, len(label) + 2)}.2f}{sec / ref:>13.3f}{JULIA[name]:>9.2f}{jr:>12.3f}"
              f"  {runner}; {origin}{fail}")

    n_short = min(n, args.runner_steps)
    rounds = args.rounds
    print(f"\n(a') the model runners at batch 1: minimum over {rounds} alternating rounds of {n_short} steps "
          "(shared machine); the engine's default is the first that applies (python scalar: float64 models, "
          f"<= {SCALAR_MAX_BATCH} trajectories, CPU)")
    cases = [("implicit_midpoint", None, "python scalar")] + [(m, mods[m][0], r) for m in ("vpff", "vpt", "st") for r in RUNNERS]
    best = {}
    for _ in range(rounds):
        for name, model, runner in cases:
            sm = step_map(name, model, runner)
            sec, _, meta = timed_rollout(sm, y0, n_short)
            key = (name, runner)
            if meta.get("runner", runner) != runner and model is not None:
                raise SystemExit(f"{name}: asked for runner {runner!r}, got {meta.get('runner')!r}")
            best[key] = min(best.get(key, float("inf")), sec / n_calls(sm, n_short))
    im = best[("implicit_midpoint", "python scalar")]
    head = "".join(f"{r + ' us/call':>26}" for r in RUNNERS)
    print(f"{'method':<18}{head}{'scalar speed-up vs trace':>26}{'s to t=50000 (extrap.)':>24}{'ratio to IM':>13}")
    print(f"{'implicit_midpoint':<18}{'':>26}{'':>26}{'':>26}{'':>26}{PAPER_STEPS * im:>24.2f}{1.0:>13.3f}")
    for name in ("vpff", "vpt", "st"):
        per = [best[(name, r)] for r in RUNNERS]
        calls_per_step = 1.0 / (3 if name != "vpff" else 1)
        s50k = PAPER_STEPS * calls_per_step * per[0]
        print(f"{name:<18}" + "".join(f"{1e6 * v:>26.1f}" for v in per) + f"{per[1] / per[0]:>26.1f}"
              f"{s50k:>24.2f}{s50k / (PAPER_STEPS * im):>13.3f}")


def part_b(args, mods):
    y0 = paper_sphere_points()  # (1238, 3)
    n = args.batch_steps
    print(f"\n(b) batched: the paper's {len(y0)} trajectories x {n} steps, CPU")
    print(f"{'method':<18}{'seconds':>10}{'state-steps/s':>16}")
    for name in ("implicit_midpoint", "rk4", "splitting", "vpff", "vpt", "st"):
        model = mods[name][0] if name in mods else None
        sec, failed, _ = timed_rollout(step_map(name, model), y0, n)
        print(f"{name:<18}{sec:>10.2f}{len(y0) * n / sec:>16.3g}" + (f"  ({failed} failed/restarted)" if failed else ""))


def memory_child(n_steps: int, workdir: str, n_traj: int) -> None:
    """One streamed ``run_rollouts`` in this process; print peak RSS and tracemalloc peak as JSON."""
    import tracemalloc

    data = Path(workdir) / "data.h5"
    torch.manual_seed(1234)
    vpt = build_model("vpt", **PAPER_CONFIGS["vpt"])

    def once(steps, out):
        run_rollouts(RolloutConfig(
            data=data, out=Path(workdir) / out, models=[("vpt", vpt)], integrators=["rk4"], t_end=steps * DT,
            device="cpu",
        ))

    once(2000, "warmup.h5")  # imports, the trace, the Jacobian machinery: one-off allocations
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    tic = time.perf_counter()
    once(n_steps, f"ro{n_steps}.h5")
    seconds = time.perf_counter() - tic
    _, peak = tracemalloc.get_traced_memory()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rss_before_kib": rss0, "rss_peak_kib": rss, "tracemalloc_peak": peak, "seconds": seconds}))


def part_c(args):
    n_traj = args.memory_traj
    print(f"\n(c) peak memory of run_rollouts streaming to HDF5: {n_traj} trajectories, VPT + rk4, every per-step "
          "metric and the volume on; each run in a fresh process")
    print("    (RSS before: after a 2000-step warm-up run in the same process; tracemalloc: Python and NumPy "
          "allocations during the measured run)")
    print(f"{'steps':>8}{'RSS before MiB':>16}{'RSS peak MiB':>14}{'growth MiB':>12}{'tracemalloc MiB':>17}"
          f"{'written MiB':>13}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        generate(load_spec("rigid_body", n_traj=n_traj, dt=DT, t_end=20.0), out=Path(tmp) / "data.h5")
        for n in args.memory_steps:
            out = subprocess.run(
                [sys.executable, __file__, "--memory-child", str(n), tmp, str(n_traj)],
                check=True, capture_output=True, text=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            written = sum(p.stat().st_size for p in Path(tmp).glob(f"ro{n}.h5"))
            mib = 1024.0
            print(f"{n:>8}{r['rss_before_kib'] / mib:>16.1f}{r['rss_peak_kib'] / mib:>14.1f}"
                  f"{(r['rss_peak_kib'] - r['rss_before_kib']) / mib:>12.1f}{r['tracemalloc_peak'] / 2**20:>17.1f}"
                  f"{written / 2**20:>13.1f}{r['seconds']:>9.1f}")
            for p in Path(tmp).glob(f"ro{n}*"):
                p.unlink()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=PAPER_STEPS,
                        help="(a) steps of the single trajectory (fewer: t = 50 000 extrapolated, labelled)")
    parser.add_argument("--runner-steps", type=int, default=6_000, help="(a') steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="(a') alternating rounds (the minimum is kept)")
    parser.add_argument("--batch-steps", type=int, default=500, help="(b) steps of the 1238-trajectory batch")
    parser.add_argument("--memory-steps", type=lambda s: [int(v) for v in s.split(",")], default=[10_000, 100_000])
    parser.add_argument("--memory-traj", type=int, default=16, help="(c) trajectories streamed")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: a,b,c")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (batch-1 rollouts are serial)")
    for name in PAPER_CONFIGS:
        parser.add_argument(f"--{name}", metavar="RUN",
                            help=f"trained {name} run directory or checkpoint (default: pretrained:rigid_body_{name})")
    parser.add_argument("--random", action="store_true", help="randomly initialised float64 paper models instead")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        n, workdir, n_traj = args.memory_child
        memory_child(int(n), workdir, int(n_traj))
        return
    torch.set_num_threads(args.threads)
    skip = set(args.skip.split(","))
    print(f"vpintegrator rollout benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}, numpy {np.__version__}")
    mods = models(args)
    if "a" not in skip:
        part_a(args, mods)
    if "b" not in skip:
        part_b(args, mods)
    if "c" not in skip:
        part_c(args)


if __name__ == "__main__":
    main()
