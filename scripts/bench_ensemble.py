"""Seed ensembles in one process vs the same members trained one after another.

    python scripts/bench_ensemble.py [--sizes 1 8 64] [--epochs 2] [--n-traj 128] [--batch-size 4096]
                                     [--device cpu|cuda] [--threads N] [--dtype float32] [--fast-step auto]
                                     [--optimizer adam|lm] [--profile]

Model-epochs per second (CPU seconds on the CPU, wall on a GPU) of an ensemble of N paper VPTs (dim 3, seq_len 3, n_blocks 2, n_linear 1, L 3; Adam, the
paper's schedule) trained by ``fit(..., ensemble=N)`` (stacked parameters, vmap) against N sequential
single ``fit`` runs, both measured in this run on the same data (the first ``--n-traj`` trajectories of the
paper data set, validation off so both see the same windows, no checkpoints but the last). A single run's
epoch costs the same whichever seed it has, so the sequential figure is measured on ``min(N,
--max-sequential)`` runs (default 8: at N = 8 every one of the 8): sequential model-epochs/s = runs x epochs /
their time. Each figure uses the
epochs after the first (warm-up); the ratio printed is ensemble / sequential. Both use ``--fast-step``
(default ``auto``: on CUDA the whole vmapped step as one CUDA graph, :mod:`vpintegrator.training.fast_step`);
where that is not the eager step, the ensemble is timed eagerly (``fast_step = "off"``) too and the ratio
fast / eager printed.

``--steps`` (CPU only) times single optimiser steps instead of whole runs: model-steps per CPU second of one
member (eager, and ``fast_step = "compile"``) and of the N-member ensemble step (eager vmap, and the vmapped
loss under ``torch.compile``, which traces the layers' component form, ``vpintegrator.nn.componentwise``), the
trainers built as ``vpintegrator.training.op_count`` builds them and the compiled step set on them directly (the
path ``fit(..., fast_step="compile", ensemble=N)`` takes). Compilation is set-up, not timed; the candidates
alternate chunk by chunk. ``--fast-step compile`` times whole runs with the compiled step, the ensemble's and each
sequential single run's (compilation in the untimed warm-up epoch).

Measured (8 members, paper VPT, batch 256, float32, one thread, CPU seconds, ``--sizes 8 --batch-size 256
--threads 1 --epochs 4 --max-sequential 8``; AMD EPYC, torch 2.13, 2 cores shared with other work): the eager
ensemble on vmap over the unfused layers 1.40x the sequential runs; on the members' fused chain
(``vpintegrator.nn.fused_members``) 2.8x-3.5x by the load of the machine (the target, 4x, not reached). Where the
step's time goes then: the chain's forward and backward ~4.1-4.5 ms of ~6 ms, against 3.6 ms for one model on
the 8 members' 2048 windows (the arithmetic floor of these kernels; tanh alone, not vectorised in this torch
build, 0.6 ms); the gather, the loss and the one stacked Adam step (54 tensors, 0.2 ms) the rest.

``--profile`` then profiles one epoch of the largest ensemble (torch.profiler, CPU and CUDA activity, after a
warm fit): device kernels and host synchronisations per optimiser step, the top ops by self device time (CPU time
on the CPU). On a lent H100 it did not return within 100 s at 64 members (docs/benchmarks.md).

``--optimizer lm`` times Levenberg–Marquardt instead, with the rigid-body study's settings
(configs/study/rigid_body_vpt.toml: 1024-window subsamples redrawn every 10 iterations, 10 iterations an
epoch, λ 1e-3, init_scale 0.1; float64 unless ``--dtype`` says otherwise): the ensemble's members take their
own LM iterations (:mod:`vpintegrator.training.ensemble_lm`: vmapped Jacobians, batched solves) against N
single LM runs; an epoch is then 10 iterations and the full training loss.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

PAPER_MODEL = {"name": "vpt", "dim": 3, "seq_len": 3, "n_blocks": 2, "n_linear": 1, "L": 3}
DATA = Path(__file__).resolve().parents[1] / "datasets" / "rigid_body_paper.h5"


def load_data(n_traj: int, tmp: str) -> tuple[str, int]:
    """The first ``n_traj`` trajectories of the paper data (datasets/ or generated) as an HDF5 file."""
    from vpintegrator.data import generate, read_trajectories
    from vpintegrator.data.trajectory_files import write_trajectories

    traj = read_trajectories(DATA) if DATA.exists() else generate("rigid_body_paper")
    n = min(n_traj, traj.n_traj)
    return str(write_trajectories(Path(tmp) / "data.h5", traj.select(traj=np.arange(n)))), n


#: the rigid-body study's LM settings (configs/study/rigid_body_vpt.toml)
LM = dict(optimizer="lm", lm_windows=1024, lm_resample_every=10, lm_iters_per_epoch=10, lm_lambda=1e-3,
          init_scale=0.1)


def _config(data: str, out: str, args, **kw) -> dict:
    lm = LM if args.optimizer == "lm" else {}
    return dict(data=[data], model=PAPER_MODEL, epochs=args.epochs + 1, batch_size=args.batch_size,
                val_fraction=0.0, device=args.device, dtype=args.dtype, seed=1234, fast_step=args.fast_step,
                checkpoint_every=10**6, out=out) | lm | kw


#: what an epoch costs, by device: the process's CPU seconds on the CPU (on a shared machine the wall time of
#: a preempted epoch is not its cost: docs, the cost meter), wall seconds on a GPU (the device's time)
CLOCK = {"cpu": "cpu_seconds"}


def _timed_epochs(history: list[dict], device: str = "cpu") -> float:
    """Seconds (``CLOCK``) of the epochs after the first."""
    key = CLOCK.get(device, "seconds")
    return history[-1][key] - history[0][key]


def _steps_of(data: str, out: str, n: int, batch: int, compiled: bool):
    """A Trainer's step strategy (``n`` members, or one model for 1) on ``data``, and a callable that takes one
    optimiser step; with ``compiled`` the step is ``fast_step = "compile"``'s (compiled at the first call)."""
    from vpintegrator.training.config import TrainConfig
    from vpintegrator.training.ddp import DistInfo
    from vpintegrator.training.fast_step import FastStep
    from vpintegrator.training.loop import Trainer
    from vpintegrator.training.plan import build_plan

    cfg = dict(data=[data], model=PAPER_MODEL, epochs=1, batch_size=batch, val_fraction=0.0, device="cpu",
               dtype="float32", seed=1234, fast_step="off", out=out)
    if n > 1:
        cfg["seeds"] = [1234 + k for k in range(n)]
    steps = Trainer(build_plan(TrainConfig.from_dict(cfg)), DistInfo(), torch.device("cpu"), None, False).steps
    if compiled:
        loss = steps._batch_losses if n > 1 else steps._window_loss
        steps.fast = FastStep("compile", loss, steps.optimizer, torch.device("cpu"))
    if n > 1:
        steps.begin_epoch()
        idx = steps.orders[:, :batch]
    else:
        idx = steps.sampler.epoch_order()[:batch]
    return lambda: steps._step(idx)


def step_rates(data: str, tmp: str, n: int, batch: int, repeats: int = 5, inner: int = 20) -> None:
    """Model-steps per CPU second: one member and the n-member ensemble, eager and compiled (module docstring)."""
    runs = {("single", False): 1, ("single", True): 1, ("ensemble", False): n, ("ensemble", True): n}
    step = {}
    for (kind, compiled), size in runs.items():
        start = time.process_time()
        step[kind, compiled] = _steps_of(data, f"{tmp}/{kind}{int(compiled)}", size, batch, compiled)
        for _ in range(3):  # warm-up (and the compilation)
            step[kind, compiled]()
        if compiled:
            print(f"  {kind} compiled: set-up and compilation {time.process_time() - start:.1f} CPU s", flush=True)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for key, fn in step.items():
            start = time.process_time()
            for _ in range(inner):
                fn()
            best[key] = min(best[key], (time.process_time() - start) / inner)
    rate = {key: runs[key] / best[key] for key in runs}
    base = rate["single", False]
    print(f"model-steps per CPU second, batch {batch}, float32 (best of {repeats} chunks of {inner} steps):")
    for (kind, compiled), r in rate.items():
        what = f"{kind} ({runs[kind, compiled]} model{'s' if runs[kind, compiled] > 1 else ''}), " \
               f"{'compiled' if compiled else 'eager'}"
        print(f"  {what:<32} {r:9.1f}  ({best[kind, compiled] * 1e3:.2f} ms a step)  vs single eager {r / base:.2f}x")


def profile_epoch(data: str, tmp: str, args, size: int, rows: int = 12) -> str:
    """A torch.profiler account of one epoch of an ensemble of ``size`` (a warm fit first, outside the profile):
    device kernels and host synchronisations per optimiser step, and the top ops by self device (else CPU) time."""
    from torch.profiler import ProfilerActivity, profile

    from vpintegrator.training import fit

    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fit(_config(data, f"{tmp}/prof_warm", args, epochs=1), ensemble=size)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        result = fit(_config(data, f"{tmp}/prof", args, epochs=1), ensemble=size)
        wall = time.perf_counter() - t0
    steps = max(result.members[0].steps, 1)
    events = prof.key_averages()
    kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    syncs = {e.key: e.count for e in events
             if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense", "aten::item")}
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    head = (f"profile of one epoch, ensemble of {size} ({steps} optimiser steps, wall {wall:.3f} s incl. set-up): "
            f"{kernels} device kernels ({kernels / steps:.1f} a step); host syncs {syncs or 'none recorded'}")
    return head + "\n" + events.table(sort_by=sort, row_limit=rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (after one warm-up epoch)")
    parser.add_argument("--n-traj", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, choices=["float32", "float64"],
                        help="default float32 (adam), float64 (lm)")
    parser.add_argument("--optimizer", default="adam", choices=["adam", "lm"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--fast-step", default="auto", choices=["auto", "off", "graph", "compile"])
    parser.add_argument("--max-sequential", type=int, default=8, help="single runs timed for the sequential rate")
    parser.add_argument("--steps", action="store_true", help="time optimiser steps, eager and compiled (CPU)")
    parser.add_argument("--profile", action="store_true",
                        help="then a torch.profiler table (CPU and CUDA activity) of one epoch of the largest ensemble")
    args = parser.parse_args()
    if args.dtype is None:
        args.dtype = "float64" if args.optimizer == "lm" else "float32"
    if args.threads:
        torch.set_num_threads(args.threads)
    from vpintegrator.training import fit

    with tempfile.TemporaryDirectory() as tmp:
        data, n = load_data(args.n_traj, tmp)
        print(f"paper VPT, {args.optimizer}, {n} trajectories, batch {args.batch_size}, {args.dtype}, {args.device}, "
              f"{torch.get_num_threads()} threads, torch {torch.__version__}; {args.epochs} timed epochs")
        if args.steps:
            for size in args.sizes:
                step_rates(data, tmp, size, args.batch_size)
            return
        seq_runs, seq_seconds = 0, 0.0
        rows = []
        for size in args.sizes:
            while seq_runs < min(size, args.max_sequential):  # sequential single runs, more as needed
                result = fit(_config(data, f"{tmp}/single{seq_runs}", args, seed=1234 + seq_runs))
                seconds = _timed_epochs(result.history, args.device)
                seq_seconds += seconds
                seq_runs += 1
                print(f"  sequential run {seq_runs}: {args.epochs / seconds:.2f} model-epochs/s", flush=True)
            sequential = seq_runs * args.epochs / seq_seconds
            t0 = time.perf_counter()
            ens = fit(_config(data, f"{tmp}/ens{size}", args), ensemble=size)
            wall = time.perf_counter() - t0
            ensemble = size * args.epochs / _timed_epochs(ens.members[0].history, args.device)
            summary = json.loads((ens.members[0].run_dir / "summary.json").read_text())
            ran = summary.get("fast_step_used", summary["fast_step"])
            if summary.get("fast_step_fallback"):  # auto fell back to the eager step: say why
                ran += f"; fell back: {summary['fast_step_fallback']}"
            rows.append((size, ensemble, sequential, ensemble / sequential, wall))
            print(f"N = {size:3d}: ensemble {ensemble:9.2f} model-epochs/s (fast_step ran: {ran}), sequential "
                  f"{sequential:8.2f} model-epochs/s ({seq_runs} runs timed), ratio {ensemble / sequential:6.2f}x "
                  f"(ensemble fit {wall:.1f} s wall incl. setup)", flush=True)
            if not ran.startswith("off"):
                eager = fit(_config(data, f"{tmp}/eager{size}", args, fast_step="off"), ensemble=size)
                rate = size * args.epochs / _timed_epochs(eager.members[0].history, args.device)
                print(f"        eager ensemble (fast_step off) {rate:9.2f} model-epochs/s: fast / eager "
                      f"{ensemble / rate:.2f}x", flush=True)
        print("\n| N | ensemble model-epochs/s | sequential model-epochs/s | ratio |\n|---:|---:|---:|---:|")
        for size, e, s, r, _ in rows:
            print(f"| {size} | {e:.2f} | {s:.2f} | {r:.2f}x |")
        if args.profile:
            print(profile_epoch(data, tmp, args, max(args.sizes)))


if __name__ == "__main__":
    main()
