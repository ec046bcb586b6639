#!/usr/bin/env python
"""How ModelStep runs a model, timed against the TorchScript trace it used to run, in the same run.

    OMP_NUM_THREADS=1 python scripts/bench_model_runners.py [--batches 1,16,128,1024] [--rounds 3] [--calls 3000] [--compile]
        [--models a,b] [--window-models gru,lru,delay_mlp,delay_mlp2,vpt_mix,delay_vpff] [--steps 3000]
        [--rollout-calls 100,1000] [--call-rounds 30]

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

Then the window models of the memory and partial-observation studies (``--window-models``: ``gru``, ``lru``,
``delay_mlp``, ``delay_mlp2``, ``vpt_mix``, ``delay_vpff`` of their configurations at T = 4, dim 2, random weights)
at batch 1, the thread CPU µs per step of ``ModelStep.generate`` by torch eager
and by the compiled runner, interleaved, best of ``--rounds``, and the ratio eager / compiled. For the GRU also
a lean loop of the same weights written here as a user would (``lean_gru``: one numba function, the GRU and the
readout by hand, the window shifted in place), timed in the same rounds: compiled / lean is what the package's
runner costs over the arithmetic (the compiled runner's kernel alone, ``CompiledModel.run_rows``, beside it).

With ``--rollout-calls 100,1000``: whole ``rollout()`` calls of each of those many steps at batch 1 for the GRU (of
the window-model table) and the paper VPT (``pretrained:rigid_body_vpt``), thread CPU per call, interleaved, best of
``--call-rounds``: ``fresh`` a new ModelStep per call (its start packs and checks the model, as every start did
before ModelStep kept its check), ``reused`` one ModelStep for every call (``price``: the engine's own seconds of
that call, ``meta["seconds"] + meta["setup_seconds"]``, what the studies' meter prices), against the kernel alone
on the same steps (``kernel``) and, for the GRU, the lean loop (``lean``); the ratios are over the lean loop, or
over the kernel for the VPT (no lean VPT is written here).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

import vpintegrator as vp
from vpintegrator.rollout import MODEL_MAX_BATCH, ModelStep, rollout

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


def lean_gru(model):
    """A user's numba loop of ``model`` (a one-layer GRUWindow, readout of one tanh layer, increment "first"):
    ``run(window (T, dim), n_steps, out (n_steps, dim))`` advances ``window`` in place."""
    from numba import njit

    (gru,) = model.grus
    arrays = [p.detach().double().numpy().copy() for p in (gru.input.weight, gru.input.bias, gru.hidden.weight,
                                                          gru.hidden.bias, model.readout.hidden[0].weight,
                                                          model.readout.hidden[0].bias, model.readout.out.weight,
                                                          model.readout.out.bias)]

    @njit(cache=False, nogil=True, fastmath=False)
    def _run(x, n_steps, out, Wi, bi, Wh, bh, W1, b1, Wo, bo):
        T, D = x.shape
        w = Wh.shape[1]
        h = np.zeros(w)
        gi = np.empty(3 * w)
        gh = np.empty(3 * w)
        a = np.empty(W1.shape[0])
        for k in range(n_steps):
            for t in range(T):
                for i in range(3 * w):
                    acc = bi[i]
                    for j in range(D):
                        acc += Wi[i, j] * x[t, j]
                    gi[i] = acc
                    acc = bh[i]
                    if t > 0:
                        for j in range(w):
                            acc += Wh[i, j] * h[j]
                    gh[i] = acc
                for i in range(w):
                    r = 1.0 / (1.0 + np.exp(-(gi[i] + gh[i])))
                    z = 1.0 / (1.0 + np.exp(-(gi[w + i] + gh[w + i])))
                    n = np.tanh(gi[2 * w + i] + r * gh[2 * w + i])
                    h[i] = n + z * ((h[i] if t > 0 else 0.0) - n)
            for i in range(a.size):
                acc = b1[i]
                for j in range(w):
                    acc += W1[i, j] * h[j]
                a[i] = np.tanh(acc)
            for c in range(D):
                acc = bo[c]
                for j in range(a.size):
                    acc += Wo[c, j] * a[j]
                out[k, c] = x[T - 1, c] + acc
            for t in range(T - 1):
                for c in range(D):
                    x[t, c] = x[t + 1, c]
            for c in range(D):
                x[T - 1, c] = out[k, c]

    return lambda x, n_steps, out: _run(x, n_steps, out, *arrays)


#: the window models of the memory and partial-observation studies (their configurations at T = 4), dim 2
WINDOW_MODELS = {"gru": dict(name="gru"), "lru": dict(name="lru"), "delay_mlp": dict(name="delay_mlp", seq_len=4),
                 "delay_mlp2": dict(name="delay_mlp", seq_len=4, width=32, depth=2, increment="second"),
                 "vpt_mix": dict(name="vpt", seq_len=4, n_blocks=4, L=4, positional="mixing"),
                 "delay_vpff": dict(name="delay_vpff", seq_len=4, n_blocks=4)}


def window_model(key: str):
    """The model of ``WINDOW_MODELS[key]``, float64, its zero-initialised parts made random (small): the whole
    network is computed."""
    torch.manual_seed(0)
    cfg = dict(WINDOW_MODELS[key])
    model = vp.build_model(cfg.pop("name"), dim=2, **cfg).double().eval()
    with torch.no_grad():
        if key in ("vpt_mix", "delay_vpff"):  # small: a random volume-preserving map's rollouts grow
            for n, p in model.named_parameters():
                p.normal_(0.0, 0.002 if "bias" in n else 0.02)
        else:
            out = model.out if key.startswith("delay_mlp") else model.readout.out
            out.weight.normal_(0.0, 2e-4 if model.increment == "second" else 0.01)  # a second difference drifts
    return model


def gap(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference, NaN where the two rollouts fail at different places (a failure is NaN)."""
    same = np.isnan(a) == np.isnan(b)
    return float(np.nanmax(np.abs(a - b), initial=0.0)) if same.all() else float("nan")


def window_models(names: list[str], rounds: int, steps: int) -> None:
    """The window models at batch 1: eager / compiled, and for the GRU compiled / lean (module docstring)."""
    print(f"\nthe studies' window models at batch 1, dim 2, thread CPU µs per step, best of {rounds} "
          f"interleaved rounds ({steps} steps a round, eager {max(20, steps // 20)})")
    for name in names:
        model = window_model(name)
        P = model.pred_window
        rng = np.random.default_rng(0)  # a slow walk (the second difference of delay_mlp2 extrapolates it)
        x = rng.normal(size=(1, 1, 2)) * 0.3 + np.cumsum(rng.normal(size=(1, model.seq_len, 2)), axis=1) * 1e-3
        eager, compiled = ModelStep(model, device="cpu", scalar_max_batch=0), ModelStep(model, device="cpu")
        eager.start(x, None)
        compiled.start(x, None)
        if compiled.describe()["runner"] != "numba":
            print(f"{name:10s} runs in torch (runner {compiled.describe()['runner']}): no compiled form")
            continue
        packed = compiled._compiled
        timed = {"eager": lambda n: eager.generate(n), "compiled": lambda n: compiled.generate(n)}
        kernel_out, kernel_ctx = np.empty((1, steps + P, 2)), np.ascontiguousarray(x.copy())
        timed["kernel"] = lambda n: packed.run_rows(kernel_ctx, -(-n // P), False, kernel_out)
        lean = None
        if name == "gru" and len(model.grus) == 1 and len(model.readout.hidden) == 1 and model.increment == "first":
            lean = lean_gru(model)
            lean_x, lean_out = x[0].copy(), np.empty((steps, 2))
            timed["lean"] = lambda n: lean(lean_x, n, lean_out)
        for fn in timed.values():  # compile / warm
            fn(20)
        best = {k: float("inf") for k in timed}
        for _ in range(rounds):
            for k, fn in timed.items():
                n = max(20, steps // 20) if k == "eager" else steps
                eager.start(x, None)
                compiled.start(x, None)
                kernel_ctx[:] = x
                if lean is not None:
                    lean_x[:] = x[0]
                tic = time.thread_time()
                fn(n)
                best[k] = min(best[k], (time.thread_time() - tic) / n)
        want = rollout(eager, x, 0.1, 300).y  # the same 300 steps by each
        diffs = {"compiled": gap(rollout(compiled, x, 0.1, 300).y, want)}
        if lean is not None:
            lean_x[:] = x[0]
            lean(lean_x, 300 - model.seq_len + 1, lean_out)
            diffs["lean"] = gap(lean_out[: 301 - model.seq_len], want[0, model.seq_len :])
        cells = "  ".join(f"{k} {sec * 1e6:8.2f}" for k, sec in best.items())
        ratios = f"eager/compiled {best['eager'] / best['compiled']:6.1f}x"
        if lean is not None:
            ratios += (f"  compiled/lean {best['compiled'] / best['lean']:5.2f}x"
                       f"  kernel/lean {best['kernel'] / best['lean']:5.2f}x")
        print(f"{name:10s} {cells}  {ratios}  (300 steps vs eager: "
              + ", ".join(f"{k} Δ {d:.0e}" for k, d in diffs.items()) + ")", flush=True)


def rollout_calls(lengths: list[int], rounds: int) -> None:
    """Whole rollout() calls at batch 1, a fresh ModelStep per call and one reused, against the kernel and the
    lean loop (module docstring)."""
    print(f"\nwhole rollout() calls at batch 1, thread CPU µs per call, best of {rounds} interleaved rounds; "
          "ratio = call / lean (GRU) or / kernel (VPT)")
    for name in ("gru", "rigid_body_vpt"):
        model = (window_model(name) if name == "gru"
                 else vp.load_model(f"pretrained:{name}").double().eval())
        T, P, dim = model.seq_len, model.pred_window, model.dim
        rng = np.random.default_rng(0)
        x = (rng.normal(size=(1, 1, dim)) * 0.3 + np.cumsum(rng.normal(size=(1, T, dim)), axis=1) * 1e-3
             if name == "gru" else rng.normal(size=(1, T, dim)) * 0.3)
        reused = ModelStep(model, device="cpu")
        reused.start(x, None)
        if reused.describe()["runner"] != "numba":
            print(f"{name:15s} runs in torch: no compiled form")
            continue
        packed = reused._compiled
        lean = lean_gru(model) if name == "gru" else None
        for n in lengths:
            n_calls = -(-(n - T + 1) // P)  # the calls a rollout of n steps makes
            kernel_ctx, kernel_out = x.copy(), np.empty((1, n_calls * P, dim))
            lean_x, lean_out = x[0].copy(), np.empty((n, dim))
            price = [float("inf")]

            def reuse() -> None:
                meta = rollout(reused, x, 0.1, n).meta
                price[0] = min(price[0], meta["seconds"] + meta["setup_seconds"])

            def kernel() -> None:
                kernel_ctx[:] = x
                packed.run_rows(kernel_ctx, n_calls, False, kernel_out)

            def lean_loop() -> None:
                lean_x[:] = x[0]
                lean(lean_x, n - T + 1, lean_out)

            timed = {"fresh": lambda: rollout(ModelStep(model, device="cpu"), x, 0.1, n), "reused": reuse,
                     "kernel": kernel}
            if lean is not None:
                timed["lean"] = lean_loop
            for fn in timed.values():  # compile / warm
                fn()
            price[0] = float("inf")
            best = {k: float("inf") for k in timed}
            for _ in range(rounds):
                for k, fn in timed.items():
                    tic = time.thread_time()
                    fn()
                    best[k] = min(best[k], time.thread_time() - tic)
            base = best["lean" if lean is not None else "kernel"]
            cells = "  ".join(f"{k} {sec * 1e6:8.1f}" for k, sec in best.items())
            print(f"{name:15s} {n:5d} steps: {cells}  price {price[0] * 1e6:8.1f}  |  "
                  f"fresh {best['fresh'] / base:5.2f}x  reused {best['reused'] / base:5.2f}x  "
                  f"price {price[0] / base:5.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default=f"1,16,{MODEL_MAX_BATCH},1024",
                        type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS), type=lambda s: [v for v in s.split(",") if v],
                        help="shipped models ('' for none)")
    parser.add_argument("--window-models", default=",".join(WINDOW_MODELS),
                        type=lambda s: [v for v in s.split(",") if v], help="one-step window models ('' for none)")
    parser.add_argument("--steps", type=int, default=3000, help="steps per timed round of the window models")
    parser.add_argument("--calls", type=int, default=3000, help="trajectory-calls per timed round")
    parser.add_argument("--compile", action="store_true", help="time torch.compile too (seconds to build each)")
    parser.add_argument("--rollout-calls", default="", type=lambda s: [int(v) for v in s.split(",") if v],
                        help="steps of the whole rollout() calls timed at batch 1 (e.g. 100,1000; '' for none)")
    parser.add_argument("--call-rounds", type=int, default=30, help="interleaved rounds of the rollout() calls")
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
    window_models(args.window_models, args.rounds, args.steps)
    if args.rollout_calls:
        rollout_calls(args.rollout_calls, args.call_rounds)


if __name__ == "__main__":
    main()
