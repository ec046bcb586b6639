#!/usr/bin/env python
"""Rollout benchmark (issues 5 and 13): the batch-1 cost table of every method, batched throughput, memory.

(a) one trajectory (the paper's trajectory 1) to t = 50 000 at h = 0.2 (250 000 steps), batch 1, for EVERY
    registered classical integrator that runs on the rigid body (``vpintegrator.integrators.list_integrators()``)
    and the three shipped models: seconds of the steps only (extrapolated, and labelled so, when --steps is
    smaller), the JIT compile time (cold numba cache: a fresh temporary ``NUMBA_CACHE_DIR``) and the process
    start-up (interpreter, imports, model load) reported apart, the whole process with a warm cache, the ratio
    to the paper's Julia figure where it has one (implicit midpoint 2.51 s, VPFF 6.44 s, VPT 0.71 s, ST
    0.20 s) and the ratio to implicit midpoint. Each method runs in fresh processes (one thread): once with
    an empty compile cache, once with the cache that run left;
(a') the model runners at batch 1 (numba kernel, TorchScript trace, eager) and implicit midpoint compiled
    vs NumPy, per call on a shorter horizon;
(b) batched throughput in state-steps/s for the paper's 1238 trajectories (NumPy integrators, traced models);
(c) peak memory (RSS and tracemalloc) of a full ``run_rollouts`` streaming to HDF5 at 10^4 and 10^5 steps,
    each in a fresh process, against the in-memory size of what it wrote (flat is the target).

Models are the shipped pretrained ones (``pretrained:rigid_body_*``, float64, trained weights) unless runs are
given (--vpt, --vpff, --st) or --random (random init: its states blow up and the engine restarts those rows,
``failed`` column, which costs the same per step).

    python scripts/bench_rollout.py [--steps 250000] [--batch-steps 500] [--skip a,a2,b,c] [--vpt RUN ...] [--random]
    python scripts/bench_rollout.py --skip a2,b,c                  # the batch-1 cost table only
    python scripts/bench_rollout.py --steps 20000 --skip a2,b,c    # quicker: t = 50 000 extrapolated
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

_T_START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from vpintegrator.data import generate, load_spec  # noqa: E402
from vpintegrator.models import build_model, list_pretrained, load_model  # noqa: E402
from vpintegrator.rollout import (  # noqa: E402
    SCALAR_MAX_BATCH,
    IntegratorStep,
    ModelStep,
    RolloutConfig,
    initial_window,
    rollout,
    run_rollouts,
)
from vpintegrator.systems import paper_sphere_points, paper_trajectory_index  # noqa: E402

DT = 0.2
PAPER_STEPS = 250_000  # t = 50 000
JULIA = {"implicit_midpoint": 2.51, "vpff": 6.44, "vpt": 0.71, "st": 0.20}  # s for 250 000 steps (paper, CPU)
TARGETS = {"implicit_midpoint": 1.25, "vpt": 0.35, "st": 0.10, "vpff": 3.2,  # issue 13: half the Julia time
           "gauss_legendre4": 1.5, "rk4": 1.5, "splitting": 1.5}
PAPER_CONFIGS = {
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpff": dict(dim=3, n_blocks=6),
    "st": dict(dim=3, seq_len=3, n_blocks=2, L=3, n_heads=1),
}
MODEL_NAMES = ("vpff", "vpt", "st")


def model_source(args, name) -> str:
    """What to load for model ``name``: a run, the shipped model, or "random"."""
    path = getattr(args, name)
    if path is None and not args.random and f"rigid_body_{name}" in set(list_pretrained()):
        path = f"pretrained:rigid_body_{name}"
    return path or "random"


def load(source: str, name: str) -> tuple[torch.nn.Module, str]:
    if source != "random":
        return load_model(source), f"trained ({source})"
    torch.manual_seed(1234)
    return build_model(name, **PAPER_CONFIGS[name]).double(), "random init, paper config, float64"


def models(args) -> dict[str, tuple[torch.nn.Module, str]]:
    """The shipped pretrained models (trained weights) unless runs are given, or random init with --random."""
    return {name: load(model_source(args, name), name) for name in PAPER_CONFIGS}


def rigid_body_methods() -> list[str]:
    """Every registered classical integrator that runs on the rigid body."""
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.integrators import get_integrator, list_integrators
    from vpintegrator.systems import get_system

    out = []
    for m in list_integrators():
        try:
            get_integrator(m).supports(get_system("rigid_body"))
        except VPIntegratorError:
            continue
        out.append(m)
    return out


RUNNERS = {  # ModelStep options per runner
    "numba": dict(jit=True),
    "jit.trace+freeze": dict(jit=True, scalar_max_batch=0),
    "eager": dict(jit=False, scalar_max_batch=0),
}


def step_map(name, model=None, runner="numba", device="cpu"):
    if model is None:
        return IntegratorStep("rigid_body", name, DT, compiled_max_batch=0 if runner == "numpy" else SCALAR_MAX_BATCH)
    return ModelStep(model, device=device, **RUNNERS[runner])


def timed_rollout(sm, y0, n_steps):
    window = initial_window("rigid_body", y0, DT, sm.seq_len, method="implicit_midpoint")
    res = rollout(sm, window, DT, n_steps)
    return res.meta["seconds"], res.n_failed, res.meta


def n_calls(sm, n_steps: int) -> int:
    """Calls of the step map in a rollout of n_steps (the first seq_len states are given)."""
    return -(-(n_steps + 1 - sm.seq_len) // sm.advance)


def batch1_child(method: str, n_steps: int, source: str) -> None:
    """One batch-1 rollout in this (fresh) process; print its timings as JSON (part (a))."""
    torch.set_num_threads(1)
    ready = time.perf_counter()
    model = load(source, method)[0] if method in PAPER_CONFIGS else None
    sm = step_map(method, model)
    y0 = paper_sphere_points()[[paper_trajectory_index(1)]]
    sec, failed, meta = timed_rollout(sm, y0, n_steps)
    print(json.dumps({"seconds": sec, "setup": meta["setup_seconds"], "runner": meta.get("runner", "numpy"),
                      "failed": int(failed), "calls": n_calls(sm, n_steps), "imports": ready - _T_START,
                      "wall_in_process": time.perf_counter() - _T_START}))


def run_child(method: str, n_steps: int, source: str, cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    tic = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--batch1-child", method, str(n_steps), source],
                         check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["wall"] = time.perf_counter() - tic
    r["startup"] = r["wall"] - r["setup"] - r["seconds"]  # interpreter, imports, model load, first window
    return r


def part_a(args):
    n = args.steps
    extrapolated = n != PAPER_STEPS
    scale = PAPER_STEPS / n
    methods = rigid_body_methods() + list(MODEL_NAMES)
    print(f"\n(a) one trajectory (paper trajectory 1), {n} steps of h = {DT} (t = {n * DT:g}), batch 1, CPU, one "
          "thread, each method in fresh processes with the engine's default runner")
    if extrapolated:
        print(f"    seconds to t = 50 000 ({PAPER_STEPS} steps) are EXTRAPOLATED linearly from the {n} measured steps")
    print("    steps s: the rollout's steps only (warm process); compile s: set-up with an empty numba cache (the JIT "
          "compile of that method's kernels; the first window's implicit midpoint compiles within start-up); load s: set-up with the cache warm;\n    start-up s: interpreter, imports, model load, first "
          "window; process s: the whole process with a warm cache (at the measured steps)")
    rows = []
    for name in methods:
        source = model_source(args, name) if name in PAPER_CONFIGS else "-"
        with tempfile.TemporaryDirectory() as cache:  # an empty compile cache per method: its own JIT time
            cold = run_child(name, n, source, cache)
            warm = min((run_child(name, n, source, cache) for _ in range(args.rounds)), key=lambda r: r["seconds"])
        rows.append((name, cold, warm, source))
        print(f"    ... {name}: {warm['seconds'] * scale:.3f} s", file=sys.stderr, flush=True)
    im = next(r[2]["seconds"] for r in rows if r[0] == "implicit_midpoint") * scale
    label = "s to t=50000" + (" (extrap.)" if extrapolated else "")
    w = max(14, len(label) + 2)
    print(f"{'method':<26}{label:>{w}}{'us/step':>9}{'target s':>10}{'compile s':>11}{'load s':>8}{'start-up s':>12}"
          f"{'process s':>11}{'ratio to IM':>13}{'Julia s':>9}{'ours/Julia':>12}  runner")
    for name, cold, warm, source in rows:
        s50 = warm["seconds"] * scale
        julia = JULIA.get(name)
        target = TARGETS.get(name)
        fail = f", {warm['failed']} failed/restarted" if warm["failed"] else ""
        origin = f"; {source}" if name in PAPER_CONFIGS else ""
        print(f"{name:<26}{s50:>{w}.3f}{1e6 * warm['seconds'] / n:>9.2f}"
              f"{'' if target is None else f'{target:.2f}':>10}{cold['setup']:>11.2f}{warm['setup']:>8.3f}"
              f"{warm['startup']:>12.2f}{warm['wall']:>11.2f}{s50 / im:>13.3f}"
              f"{'' if julia is None else f'{julia:.2f}':>9}{'' if julia is None else f'{s50 / julia:.3f}':>12}"
              f"  {warm['runner']}{origin}{fail}")


def part_a2(args, mods):
    y0 = paper_sphere_points()[[paper_trajectory_index(1)]]  # (1, 3)
    n_short = min(args.steps, args.runner_steps)
    rounds = args.rounds
    print(f"\n(a') the runners at batch 1: minimum over {rounds} alternating rounds of {n_short} steps (numpy: "
          f"{args.numpy_steps}) in this process; the engine's default is the first that applies (numba: float64, "
          f"<= {SCALAR_MAX_BATCH} trajectories, CPU)")
    cases = [("implicit_midpoint", None, r) for r in ("numba", "numpy")]
    cases += [(m, mods[m][0], r) for m in MODEL_NAMES for r in RUNNERS]
    best = {}
    for _ in range(rounds):
        for name, model, runner in cases:
            steps = args.numpy_steps if runner == "numpy" else n_short
            sm = step_map(name, model, runner)
            sec, _, meta = timed_rollout(sm, y0, steps)
            if meta.get("runner") != runner:
                raise SystemExit(f"{name}: asked for runner {runner!r}, got {meta.get('runner')!r}")
            best[(name, runner)] = min(best.get((name, runner), float("inf")), sec / n_calls(sm, steps))
    print(f"{'method':<18}{'runner':<18}{'us/call':>10}{'s to t=50000 (extrap.)':>24}{'x slower than numba':>21}")
    for name, _, runner in cases:
        per = best[(name, runner)]
        calls_per_step = 1.0 / (1 if name in ("implicit_midpoint", "vpff") else 3)
        print(f"{name:<18}{runner:<18}{1e6 * per:>10.2f}{PAPER_STEPS * calls_per_step * per:>24.2f}"
              f"{per / best[(name, 'numba')]:>21.1f}")


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
    parser.add_argument("--numpy-steps", type=int, default=1_000, help="(a') steps per round of the NumPy path")
    parser.add_argument("--rounds", type=int, default=2,
                        help="(a) warm processes per method, (a') alternating rounds (the minimum is kept)")
    parser.add_argument("--batch-steps", type=int, default=500, help="(b) steps of the 1238-trajectory batch")
    parser.add_argument("--memory-steps", type=lambda s: [int(v) for v in s.split(",")], default=[10_000, 100_000])
    parser.add_argument("--memory-traj", type=int, default=16, help="(c) trajectories streamed")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: a,a2,b,c")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (batch-1 rollouts are serial)")
    for name in PAPER_CONFIGS:
        parser.add_argument(f"--{name}", metavar="RUN",
                            help=f"trained {name} run directory or checkpoint (default: pretrained:rigid_body_{name})")
    parser.add_argument("--random", action="store_true", help="randomly initialised float64 paper models instead")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--batch1-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch1_child:
        method, n, source = args.batch1_child
        batch1_child(method, int(n), source)
        return
    if args.memory_child:
        n, workdir, n_traj = args.memory_child
        memory_child(int(n), workdir, int(n_traj))
        return
    torch.set_num_threads(args.threads)
    skip = set(args.skip.split(","))
    print(f"vpintegrator rollout benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}, numpy {np.__version__}")
    if "a" not in skip:
        part_a(args)
    mods = models(args)
    if "a2" not in skip:
        part_a2(args, mods)
    if "b" not in skip:
        part_b(args, mods)
    if "c" not in skip:
        part_c(args)


if __name__ == "__main__":
    main()
