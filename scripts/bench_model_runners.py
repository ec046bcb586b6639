#!/usr/bin/env python
"""How ModelStep runs a model, timed against the TorchScript trace it used to run, in the same run.

    OMP_NUM_THREADS=1 python scripts/bench_model_runners.py [--batches 1,16,128,1024] [--rounds 3] [--calls 3000] [--compile]

For every shipped model (float64, CPU, one torch thread) and batch size, the thread CPU time per step of
``ModelStep.generate`` by each runner, in interleaved rounds (best of ``--rounds``; the machines are shared):

- ``numba``: the compiled kernel (``vpintegrator.rollout.numba_model``), ModelStep's runner up to
  ``MODEL_MAX_BATCH`` trajectories;
- ``eager``: the model under ``torch.inference_mode``, the torch runner of ``fast_step = "auto"``;
- ``compile`` (with ``--compile``): ``torch.compile`` of the model, the torch runner of ``fast_step =
  "compile"``; its build time (CPU s, once per model and batch shape) is printed beside it;
- ``trace``: ``torch.jit.freeze(torch.jit.trace(model))``, the torch runner before TorchScript was dropped,
  built here only as the baseline.

Ratios are the trace's time over each runner's (above 1: faster than the old runner). Also the largest
difference of each runner's states from eager's after the timed steps.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

import vpintegrator as vp
from vpintegrator.rollout import MODEL_MAX_BATCH, ModelStep

MODELS = ("rigid_body_vpt", "rigid_body_vpff", "rigid_body_st", "rigid_body_lpnet",
          "coupled_oscillator_g_sympnet", "coupled_oscillator_symplectic_transformer")


def traced(model, example):
    """The old torch runner: a frozen TorchScript trace (deprecated upstream; the baseline only)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        fn = torch.jit.freeze(torch.jit.trace(model.eval(), example, check_trace=False))
        with torch.inference_mode():
            for _ in range(3):  # TorchScript profiles its first calls
                fn(example)
    return fn


def step_maps(model, x: np.ndarray, use_compile: bool) -> dict[str, tuple[ModelStep, float, object]]:
    """Each runner as a ModelStep, with its set-up's CPU seconds and the function that replaces the
    step's own after each start (the trace's)."""
    out = {}
    kinds = {"numba": dict(scalar_max_batch=x.shape[0]), "eager": dict(scalar_max_batch=0, jit="off"),
             "trace": dict(scalar_max_batch=0, jit="off")}
    if use_compile:
        kinds["compile"] = dict(scalar_max_batch=0, jit="compile")
    for name, kw in kinds.items():
        sm = ModelStep(model, device="cpu", **kw)
        tic = time.process_time()
        sm.start(x, None)
        fn = traced(model, sm._init) if name == "trace" else None
        out[name] = (sm, time.process_time() - tic, fn)
    return out


def restart(sm: ModelStep, x: np.ndarray, fn) -> None:
    """The step back at the first windows, running ``fn`` (the trace) when given."""
    sm.start(x, None)
    if fn is not None:
        sm._fn = fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default=f"1,16,{MODEL_MAX_BATCH},1024",
                        type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","))
    parser.add_argument("--calls", type=int, default=3000, help="trajectory-calls per timed round")
    parser.add_argument("--compile", action="store_true", help="time torch.compile too (seconds to build each)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"thread CPU µs per step, best of {args.rounds} interleaved rounds; ratio = trace / runner "
          f"(> 1: faster than the TorchScript trace); MODEL_MAX_BATCH = {MODEL_MAX_BATCH}")
    for name in args.models:
        model = vp.load_model(f"pretrained:{name}").double().eval()
        for batch in args.batches:
            x = np.random.default_rng(0).normal(size=(batch, model.seq_len, model.dim)) * 0.3
            maps = step_maps(model, x, args.compile)
            runners = {k: v for k, v in maps.items() if k != "numba" or v[0].describe()["runner"] == "numba"}
            n = max(20, min(20_000, args.calls // batch))
            best = {k: float("inf") for k in runners}
            for _ in range(args.rounds):
                for k, (sm, _, fn) in runners.items():
                    restart(sm, x, fn)
                    tic = time.thread_time()
                    sm.generate(n)
                    best[k] = min(best[k], (time.thread_time() - tic) / n)
            states = {}
            for k, (sm, _, fn) in runners.items():  # the same 30 steps from the first windows
                restart(sm, x, fn)
                states[k] = sm.generate(30)
            cells = []
            for k, sec in best.items():
                ratio = best["trace"] / sec
                extra = f", build {runners[k][1]:.1f} s" if k == "compile" else ""
                diff = float(np.nanmax(np.abs(states[k] - states["eager"])))
                cells.append(f"{k} {sec * 1e6:8.1f} ({ratio:5.2f}x, Δ {diff:.0e}{extra})")
            print(f"{name:42s} batch {batch:5d}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
