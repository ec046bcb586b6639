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
(a') the model runners at batch 1 (numba kernel, eager) and implicit midpoint compiled
    vs NumPy, per call on a shorter horizon;
(a'') the same for the symplectic models (LA-SympNet, the shipped G-SympNet and symplectic transformer) on the
    coupled oscillator and the symmetric VPT on the rigid body: µs per call and CPU s per unit simulated time
    of each runner, measured in the same run;
(b) batched throughput in state-steps/s for the paper's 1238 trajectories (NumPy integrators, models in torch);
(c) peak memory (RSS and tracemalloc) of a full ``run_rollouts`` streaming to HDF5 at 10^4 and 10^5 steps,
    each in a fresh process, against the in-memory size of what it wrote (flat is the target);
(d) rollouts at scale on --device (cpu or cuda; issue 5 item 5): the paper VPT in float32 (the shipped
    ``pretrained:rigid_body_vpt`` cast to float32, or --vpt RUN, or --random) from 10^4, 10^5 (and up to
    --max-ics, default 10^5 on the CPU, 10^6 on CUDA) initial conditions, in state-steps/s (trajectories x
    steps / seconds): (i) model steps only, the fast path (CUDA graph on CUDA, torch.compile on the CPU)
    against eager; (ii) steps with every metric on the device (the device engine, ``device_stream_rollout``:
    error, invariants, failures; then also the volume) against the host engine with the same metrics;
    (iii) the whole ``run_rollouts`` writing the HDF5 file, device engine against host engine, and the I/O
    bound: the same datasets written (and the data file read) by plain h5py, in bytes/s.

Models are the shipped pretrained ones (``pretrained:rigid_body_*``, float64, trained weights) unless runs are
given (--vpt, --vpff, --st) or --random (random init: its states blow up and the engine restarts those rows,
``failed`` column, which costs the same per step).

    python scripts/bench_rollout.py [--steps 250000] [--batch-steps 500] [--skip a,a2,b,c] [--vpt RUN ...] [--random]
    python scripts/bench_rollout.py --skip a2,b,c                  # the batch-1 cost table only
    python scripts/bench_rollout.py --skip a,a2,b,c,d              # (a'') the symplectic models' runners only
    python scripts/bench_rollout.py --steps 20000 --skip a2,b,c    # quicker: t = 50 000 extrapolated
    python scripts/bench_rollout.py --device cuda --skip a,a2,b,c  # (d) only: 10^4 .. 10^6 ICs on the GPU
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
    DeviceStepper,
    IntegratorStep,
    ModelStep,
    RolloutConfig,
    device_stream_rollout,
    initial_window,
    rollout,
    run_rollouts,
    stream_rollout,
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


RUNNERS = {  # ModelStep options per runner (torch.compile against these: scripts/bench_model_runners.py)
    "numba": dict(jit=True),
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


SYMPLECTIC_MODELS = {  # (a''): name -> the shipped model, or GML's defaults (random init) where none is shipped
    "la_sympnet": None,
    "g_sympnet": "pretrained:coupled_oscillator_g_sympnet",
    "symplectic_transformer": "pretrained:coupled_oscillator_symplectic_transformer",
}


def _a3_models() -> list[tuple[str, torch.nn.Module, str, str, int | None]]:
    """(label, model, what, system, step cap) of part (a''): the symplectic models on the coupled oscillator, and
    the symmetric VPT (paper config, random init x0.1: nothing trained is shipped; its rollout leaves the
    sphere and overflows within 6000 steps, so its rounds are capped at 600 steps) on the rigid body."""
    from vpintegrator.models import default_model_config

    out = []
    for name, source in SYMPLECTIC_MODELS.items():
        if source is not None and source.split(":", 1)[1] in set(list_pretrained()):
            out.append((name, load_model(source), f"trained ({source})", "coupled_oscillator", None))
            continue
        torch.manual_seed(1234)
        model = build_model(name, dim=4).double()
        with torch.no_grad():  # GML's initialisation overflows within 6000 steps here (NaN, restarts); x0.1 does not
            for p in model.parameters():
                p.mul_(0.1)
        out.append((name, model, "random init x0.1, GML defaults, dim 4, float64", "coupled_oscillator", None))
    torch.manual_seed(1234)
    vpt = build_model("vpt", dim=3, **{**default_model_config("vpt"), "symmetric": True}).double()
    with torch.no_grad():
        for p in vpt.parameters():
            p.mul_(0.1)
    out.append(("vpt symmetric", vpt, "random init x0.1, paper config, symmetric=True, float64", "rigid_body", 600))
    return out


def part_a3(args):
    """The symplectic models' (and the symmetric VPT's) runners at batch 1, in this process."""
    from vpintegrator.systems import get_system

    rounds = args.rounds
    n_fast, n_slow = args.runner_steps, args.eager_steps
    print(f"\n(a'') the symplectic models' runners at batch 1 (coupled oscillator from its default condition, h = 0.4) "
          f"and the symmetric VPT's (rigid body, trajectory 1, h = {DT}): minimum over {rounds} alternating rounds of "
          f"{n_fast} steps (eager: {n_slow}; capped where a row says so) in this process")
    mods = _a3_models()
    best: dict[tuple[str, str], float] = {}
    h_of: dict[str, float] = {}
    for _ in range(rounds):
        for name, model, _, system_name, cap in mods:
            system = get_system(system_name)
            h = DT if system_name == "rigid_body" else system.default_dt
            h_of[name] = h
            y0 = (paper_sphere_points()[[paper_trajectory_index(1)]] if system_name == "rigid_body"
                  else np.array([system.default_y0]))
            for runner in RUNNERS:
                sm = step_map(name, model, runner)
                steps = n_fast if runner == "numba" else n_slow
                steps = steps if cap is None else min(steps, cap)
                window = initial_window(system_name, y0, h, sm.seq_len)
                res = rollout(sm, window, h, steps)
                if res.n_failed:
                    raise SystemExit(f"{name} ({runner}): the rollout failed (restarts would be timed)")
                if res.meta.get("runner") != runner:
                    raise SystemExit(f"{name}: asked for runner {runner!r}, got {res.meta.get('runner')!r}")
                per = res.meta["seconds"] / n_calls(sm, steps)
                best[(name, runner)] = min(best.get((name, runner), float("inf")), per)
    print(f"{'model':<24}{'runner':<18}{'us/call':>10}{'CPU s per unit time':>21}{'x slower than numba':>21}  model")
    for name, model, what, _, cap in mods:
        for runner in RUNNERS:
            per = best[(name, runner)]
            per_unit_time = per / (model.seq_len * h_of[name])  # a call advances seq_len steps of h
            cap_note = f"; {cap} steps per round" if cap is not None else ""
            print(f"{name:<24}{runner:<18}{1e6 * per:>10.2f}{per_unit_time:>21.3g}"
                  f"{per / best[(name, 'numba')]:>21.1f}  {what}{cap_note}")


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

    once(2000, "warmup.h5")  # imports, the kernels, the Jacobian machinery: one-off allocations
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


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _rate(n_traj: int, steps: int, seconds: float) -> str:
    return f"{n_traj * steps / seconds:.3g}"


def _d_model(args) -> tuple[torch.nn.Module, str]:
    source = model_source(args, "vpt")
    model, what = load(source, "vpt")
    return model.float(), what.replace("float64", "float32") + ", cast to float32"


def _d_case(n_traj: int, steps: int):
    """n_traj initial conditions on the unit sphere and their first windows (RK4: cheap at 10^6)."""
    from vpintegrator.data import integrate

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(n_traj, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return y0, integrate("rigid_body", y0, DT, 2, method="rk4").y


def part_d1(args, model, ics):
    """(i) model steps only: DeviceStepper.call, fast path against eager."""
    steps = args.d_steps
    print(f"\n    (i) model steps only ({steps} steps = {-(-steps // 3)} calls of 3 states, states stay on the device; "
          "fast: CUDA graph on CUDA, torch.compile on the CPU)")
    print(f"{'ICs':>10}{'fast runner':>18}{'fast s':>9}{'state-steps/s':>15}{'eager s':>9}{'state-steps/s':>15}"
          f"{'fast/eager':>12}")
    for n in ics:
        window = _d_case(n, steps)[1]
        seconds, runners = {}, {}
        fast = "compile" if args.device == "cpu" else "auto"
        done = 3 * -(-steps // 3)
        for jit in (fast, "off"):
            stepper = DeviceStepper(ModelStep(model, args.device), window, jit=jit)
            stepper.call()  # first-call overheads are set-up, not steps
            _sync(args.device)
            tic = time.perf_counter()
            for _ in range(-(-steps // 3)):
                stepper.call()
            _sync(args.device)
            seconds[jit], runners[jit] = time.perf_counter() - tic, stepper.runner
            del stepper
            if jit == fast:  # the row's fast half as soon as it is measured (a run killed later keeps it)
                print(f"{n:>10}{runners[fast]:>18}{seconds[fast]:>9.3f}{_rate(n, done, seconds[fast]):>15}", end="",
                      flush=True)
        print(f"{seconds['off']:>9.3f}{_rate(n, done, seconds['off']):>15}{seconds['off'] / seconds[fast]:>12.2f}",
              flush=True)


def part_d2(args, model, ics):
    """(ii) steps + metrics: the device engine against the host engine, same metric streams."""
    from vpintegrator.metrics import TrajectoryMetricsStream, VolumeStream, block_metrics
    from vpintegrator.systems import get_system

    steps, chunk = args.d_metric_steps, args.d_chunk_steps
    system = get_system("rigid_body")
    print(f"\n    (ii) {steps} steps in blocks of {chunk} with every metric (the reference: the initial "
          "condition held, any array does for timing); device: device_stream_rollout (metrics on the device, "
          "one copy per block to the host); host: stream_rollout + the same metric streams in NumPy; "
          "set-up (trace, graph capture) excluded")
    print(f"{'ICs':>10}{'volume':>8}{'device s':>10}{'state-steps/s':>15}{'to host MB':>12}{'host s':>9}"
          f"{'state-steps/s':>15}{'device/host':>13}")
    warm = ModelStep(model, args.device)  # first Jacobians through torch.func cost extra: not the rollout's
    for windows in (_d_case(64, 3)[1], torch.as_tensor(_d_case(64, 3)[1], device=warm.device)):
        warm.log_abs_det_jacobian(windows)
    for n in ics:
        y0, window = _d_case(n, steps)
        ref = np.broadcast_to(y0[:, None], (n, steps + 1, 3))
        t = DT * np.arange(steps + 1)
        for with_volume in (False, True):
            def streams(step_map):
                vol = VolumeStream(step_map.log_abs_det_jacobian, n, 3, 3, steps) if with_volume else None
                return TrajectoryMetricsStream(system, n, t_center=0.5 * t[-1]), vol

            step = ModelStep(model, args.device)
            metrics, vol = streams(step)
            moved = [0]

            def sink(k0, block):
                moved[0] += sum(v.nbytes for v in block.values() if isinstance(v, np.ndarray))

            _sync(args.device)
            tic = time.perf_counter()
            res = device_stream_rollout(step, window, DT, steps, sink, reference=ref, metrics=metrics, volume=vol,
                                        chunk_steps=chunk)
            _sync(args.device)
            dev_s = time.perf_counter() - tic - res.setup_seconds
            print(f"{n:>10}{'yes' if with_volume else 'no':>8}{dev_s:>10.3f}{_rate(n, steps, dev_s):>15}"
                  f"{moved[0] / 2**20:>12.1f}", end="", flush=True)  # the device half as soon as it is measured
            step = ModelStep(model, args.device)
            metrics, vol = streams(step)

            def host_sink(k0, chunk_y):
                k1 = k0 + chunk_y.shape[1]
                block_metrics(metrics, vol, t[k0:k1], chunk_y, ref[:, k0:k1])

            tic = time.perf_counter()
            res = stream_rollout(step, window, DT, steps, host_sink, chunk_steps=chunk)
            host_s = time.perf_counter() - tic - res.setup_seconds
            print(f"{host_s:>9.3f}{_rate(n, steps, host_s):>15}{host_s / dev_s:>13.2f}", flush=True)


def _plain_io(out: Path, data: Path, workdir: Path, chunk: int) -> tuple[int, float, float]:
    """Bytes of ``out``'s datasets, the seconds plain h5py takes to read the data file's states, and to write
    those datasets (same shapes, chunks and chunk cache, in blocks of ``chunk`` steps as the engines)."""
    import h5py

    with h5py.File(out, "r") as f:
        layout = []
        f.visititems(lambda name, obj: layout.append((name, obj.shape, obj.chunks, obj.dtype))
                     if isinstance(obj, h5py.Dataset) else None)
        cache = f.id.get_access_plist().get_cache()[2]
    nbytes = sum(int(np.prod(shape)) * dtype.itemsize for _, shape, _, dtype in layout)
    tic = time.perf_counter()
    with h5py.File(data, "r") as f:
        f["y"][()]
    read_s = time.perf_counter() - tic
    target = workdir / "plain.h5"
    tic = time.perf_counter()
    with h5py.File(target, "w", rdcc_nbytes=cache, rdcc_w0=1.0) as f:
        series = [(f.create_dataset(name, shape=shape, chunks=chunks, dtype=dtype), shape) for name, shape, chunks, dtype in layout]
        block = {}
        for ds, shape in series:
            if len(shape) < 2:
                ds[...] = np.zeros(shape, dtype=ds.dtype)
                continue
            for k0 in range(0, shape[1], chunk):
                part = (shape[0], min(chunk, shape[1] - k0), *shape[2:])
                if part not in block:
                    block[part] = np.full(part, 0.5)
                ds[:, k0 : k0 + part[1]] = block[part]
    write_s = time.perf_counter() - tic
    target.unlink()
    return nbytes, read_s, write_s


def part_d3(args, model, ics, workdir: Path):
    """(iii) the whole run_rollouts, device engine against host engine, and the I/O bound."""
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.data import integrate

    steps, chunk = args.d_process_steps, args.d_chunk_steps
    print(f"\n    (iii) run_rollouts of the VPT, {steps} steps in blocks of {chunk}, writing the HDF5 file (reference, "
          "states, error, invariants; volume: also log|det J|) and its table; I/O: plain h5py reading the data file's "
          "states (read s) and writing the same datasets (write s; write MB/s = bytes written / write s); I/O bound = "
          "read s + write s; device s / I/O s = 1 is 'at the speed of its file I/O'")
    print(f"{'ICs':>10}{'volume':>8}{'device s':>10}{'state-steps/s':>15}{'host s':>9}{'state-steps/s':>15}"
          f"{'device/host':>13}{'file MB':>9}{'read s':>8}{'write s':>9}{'write MB/s':>12}"
          f"{'I/O-bound state-steps/s':>25}{'device s / I/O s':>18}")
    warm = workdir / "warm.h5"  # one-off costs (imports, first traces, torch.func) before the measured runs
    write_trajectories(warm, integrate("rigid_body", _d_case(64, 0)[0], DT, 6, method="rk4"), compression=None)
    for engine in ("device", "host"):
        run_rollouts(RolloutConfig(data=warm, out=workdir / "warm_out.h5", models=[("vpt", model)],
                                   device=args.device, engine=engine), overwrite=True)
    for n in ics:
        y0 = _d_case(n, 0)[0]
        data = workdir / f"data{n}.h5"
        write_trajectories(data, integrate("rigid_body", y0, DT, steps, method="rk4"), compression=None)
        for volume in (False, True):
            seconds = {}
            for engine in ("device", "host"):
                out = workdir / f"{engine}{n}.h5"
                tic = time.perf_counter()
                run_rollouts(RolloutConfig(data=data, out=out, models=[("vpt", model)], device=args.device,
                                           engine=engine, chunk_steps=chunk, volume=volume),
                             overwrite=True)  # the same scratch file for both volume settings
                seconds[engine] = time.perf_counter() - tic
            (workdir / f"host{n}.h5").unlink(missing_ok=True)  # disk: at 10^6 ICs a file is ~10 GB
            nbytes, read_s, write_s = _plain_io(workdir / f"device{n}.h5", data, workdir, chunk)
            d, h, io_s = seconds["device"], seconds["host"], read_s + write_s
            print(f"{n:>10}{'yes' if volume else 'no':>8}{d:>10.2f}{_rate(n, steps, d):>15}{h:>9.2f}"
                  f"{_rate(n, steps, h):>15}{h / d:>13.2f}{nbytes / 2**20:>9.0f}{read_s:>8.3f}{write_s:>9.3f}"
                  f"{nbytes / 2**20 / write_s:>12.0f}{_rate(n, steps, io_s):>25}{d / io_s:>18.2f}")
        for p in workdir.glob(f"*{n}.*"):
            p.unlink()


def part_d(args):
    cuda = args.device.startswith("cuda")
    max_ics = args.max_ics or (10**6 if cuda else 10**5)
    ics = [n for n in (10**4, 10**5, 10**6) if n <= max_ics]
    model, what = _d_model(args)
    name = torch.cuda.get_device_name(args.device) if cuda else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads"
    print(f"\n(d) rollouts at scale on {args.device} ({name}): paper VPT, {what}; state-steps/s = trajectories x steps / s")
    if "d1" not in args.skip_set:
        part_d1(args, model, ics)
    if "d2" not in args.skip_set:
        part_d2(args, model, ics)
    if "d3" not in args.skip_set:
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            part_d3(args, model, ics, Path(tmp))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=PAPER_STEPS,
                        help="(a) steps of the single trajectory (fewer: t = 50 000 extrapolated, labelled)")
    parser.add_argument("--runner-steps", type=int, default=6_000, help="(a') steps per round")
    parser.add_argument("--numpy-steps", type=int, default=1_000, help="(a') steps per round of the NumPy path")
    parser.add_argument("--eager-steps", type=int, default=600, help="(a'') steps per round of the torch runners")
    parser.add_argument("--rounds", type=int, default=2,
                        help="(a) warm processes per method, (a') alternating rounds (the minimum is kept)")
    parser.add_argument("--batch-steps", type=int, default=500, help="(b) steps of the 1238-trajectory batch")
    parser.add_argument("--memory-steps", type=lambda s: [int(v) for v in s.split(",")], default=[10_000, 100_000])
    parser.add_argument("--memory-traj", type=int, default=16, help="(c) trajectories streamed")
    parser.add_argument("--skip", default="",
                        help="comma list of parts to skip: a,a2,a3,b,c,d (or parts of d: d1,d2,d3)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="(d) cpu or cuda (default: cuda when available)")
    parser.add_argument("--max-ics", type=int, help="(d) up to 10^4, 10^5, 10^6 ICs (default 10^5 on the CPU, 10^6 on CUDA)")
    parser.add_argument("--d-steps", type=int, help="(d) steps of part (i) (default 60 on the CPU, 600 on CUDA)")
    parser.add_argument("--d-metric-steps", type=int,
                        help="(d) steps of part (ii), steps with metrics (default 12 on the CPU, 300 on CUDA)")
    parser.add_argument("--d-process-steps", type=int,
                        help="(d) steps of part (iii), the whole run_rollouts (default 9 on the CPU, 120 on CUDA)")
    parser.add_argument("--d-chunk-steps", type=int, default=64,
                        help="(d) steps per block (device memory ~ 10^6 ICs x 64 steps x 100 bytes x 2)")
    parser.add_argument("--workdir", help="(d) where part (iii) writes its files (default: the system's temp dir)")
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
    args.skip_set = skip
    cuda = args.device.startswith("cuda")
    args.d_steps = args.d_steps or (600 if cuda else 60)
    args.d_metric_steps = args.d_metric_steps or (300 if cuda else 12)
    args.d_process_steps = args.d_process_steps or (120 if cuda else 9)
    print(f"vpintegrator rollout benchmark: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}, numpy {np.__version__}")
    if "a" not in skip:
        part_a(args)
    mods = models(args)
    if "a2" not in skip:
        part_a2(args, mods)
    if "a3" not in skip:
        part_a3(args)
    if "b" not in skip:
        part_b(args, mods)
    if "c" not in skip:
        part_c(args)
    if "d" not in skip:
        part_d(args)


if __name__ == "__main__":
    main()
