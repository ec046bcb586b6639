"""Forward + backward throughput of the paper VPT: fast Cayley path against the torch.linalg.inv baseline.

One paper epoch (118 848 windows of shape (seq_len 3, dim 3)) of random data in batches of 16 384 (the
paper's batch size): for each batch, MSE loss against random targets and ``loss.backward()`` (no optimiser
step). Both Cayley implementations run in the same process, interleaved, ``--repeats`` times each; the
table reports the fastest and the median epoch (the fastest is the least disturbed by other load).

    python scripts/bench_layers.py                    # torch's default thread count
    python scripts/bench_layers.py --threads 1

``--compile`` measures ``torch.compile`` instead (issue 68), CPU time of this process, min over interleaved
repeats, compilation apart (reported as set-up):

    python scripts/bench_layers.py --compile --threads 1 [--windows 10000] [--step-batch 256] [--steps 80]

1. the paper VPT's forward (no grad) at ``--windows`` windows: eager (the fused node) against compiled in
   component form (``vpintegrator.nn.componentwise``, what the models trace) and compiled through the layers'
   unfused path (component form switched off: the compiled path before it);
2. one training step (the real ``Trainer`` of ``vpintegrator.training.op_count``: Adam, exponential schedule
   per step, float32, batch ``--step-batch``): ``fast_step = "off"`` against ``"compile"``;
3. float64: ``--steps`` steps of both from the same start, the largest relative weight difference (the
   target: 1e-9).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

from vpintegrator.models import build_model, count_parameters
from vpintegrator.nn import cayley_method

PAPER_WINDOWS = 118_848
PAPER_BATCH = 16_384
METHODS = {"fast (closed form)": "closed", "baseline (torch.linalg.inv)": "inv"}


def epoch(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    """Seconds for forward + backward over all windows; x, y (n_windows, seq_len, dim)."""
    start = time.perf_counter()
    for i in range(0, x.shape[0], batch_size):
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x[i : i + batch_size]), y[i : i + batch_size])
        loss.backward()
    return time.perf_counter() - start


def cayley_only(x: torch.Tensor, method: str, repeats: int) -> float:
    """Fastest seconds for forward + backward of the attention layer alone on x (batch, seq, dim)."""
    from vpintegrator.nn import VolumePreservingAttention

    layer = VolumePreservingAttention(x.shape[-1], cayley_method=method).to(x.dtype)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        layer(x).square().sum().backward()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def _cpu_best(fn, repeats: int, inner: int) -> float:
    """Fastest CPU seconds per call of ``fn`` over ``repeats`` chunks of ``inner`` calls."""
    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.process_time() - start) / inner)
    return best


def _interleaved(fns: dict, repeats: int, inner: int) -> dict[str, float]:
    """``_cpu_best`` of each, the candidates alternating chunk by chunk (a load change hits them alike)."""
    best = {k: math.inf for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            best[k] = min(best[k], _cpu_best(fn, 1, inner))
    return best


def compiled_forward(windows: int, repeats: int) -> None:
    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3).eval()
    x = torch.randn(windows, 3, 3)
    x = x / x.norm(dim=-1, keepdim=True)  # states on the unit sphere, as the rigid body's
    start = time.process_time()
    planes = torch.compile(model, dynamic=False)
    with torch.no_grad():
        planes(x)
    t_planes = time.process_time() - start
    from vpintegrator.nn.common import from_planes, to_planes

    def unfused_forward(x: torch.Tensor) -> torch.Tensor:  # the VPT's forward without the component form
        xp = to_planes(x)
        for block in model.blocks:
            xp = block._forward_planes(xp)  # traced: the layers' unfused autograd path (no fused node)
        return from_planes(xp)

    start = time.process_time()
    unfused = torch.compile(unfused_forward, dynamic=False)
    with torch.no_grad():
        unfused(x)
    t_unfused = time.process_time() - start
    with torch.no_grad():
        ref = model(x)
        err = float((planes(x) - ref).abs().max() / ref.abs().max())
        best = _interleaved({"eager": lambda: model(x), "planes": lambda: planes(x),
                             "unfused": lambda: unfused(x)}, repeats, 5)
    print(f"1. paper VPT forward, {windows} windows, float32, no grad (CPU ms per call, best of {repeats}):")
    print(f"   eager (fused node)            {best['eager'] * 1e3:8.3f}")
    print(f"   compiled, component form      {best['planes'] * 1e3:8.3f}   eager/compiled {best['eager'] / best['planes']:.2f}x"
          f"   (compile {t_planes:.1f} CPU s; largest difference from eager {err:.2g} of max |out|)")
    print(f"   compiled, unfused layers      {best['unfused'] * 1e3:8.3f}   eager/compiled {best['eager'] / best['unfused']:.2f}x"
          f"   (compile {t_unfused:.1f} CPU s)")


def _trainer(tmp: str, batch: int, dtype: str, fast: str):
    from vpintegrator.training.fast_step import FastStep
    from vpintegrator.training.op_count import make_trainer, single_steps

    trainer = make_trainer("vpt", batch, dtype, tmp, fast_step="off")
    steps = single_steps(trainer)
    if fast == "compile":
        steps.fast_mode = "compile"
        steps.fast = FastStep("compile", steps._window_loss, steps.optimizer, trainer.device)
    return steps


def compiled_step(batch: int, repeats: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        steps = {"off": _trainer(a, batch, "float32", "off"), "compile": _trainer(b, batch, "float32", "compile")}
        idx = steps["off"].sampler.epoch_order()[:batch]
        start = time.process_time()
        steps["compile"]._step(idx)  # compiles (and checks against an eager step)
        t_compile = time.process_time() - start
        for s in steps.values():
            for _ in range(3):
                s._step(idx)
        best = _interleaved({k: (lambda s=s: s._step(idx)) for k, s in steps.items()}, repeats, 50)
    print(f"2. paper VPT training step (Adam, float32, batch {batch}; CPU ms per step, best of {repeats}):")
    print(f"   eager (fast_step off)         {best['off'] * 1e3:8.3f}")
    print(f"   compiled (fast_step compile)  {best['compile'] * 1e3:8.3f}   eager/compiled "
          f"{best['off'] / best['compile']:.2f}x   (compile {t_compile:.1f} CPU s)")


def compiled_float64(batch: int, n_steps: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        steps = {"off": _trainer(a, batch, "float64", "off"), "compile": _trainer(b, batch, "float64", "compile")}
        order = steps["off"].sampler.epoch_order()
        for k in range(n_steps):
            idx = order[(k * batch) % (len(order) - batch):][:batch]
            for s in steps.values():
                s._step(idx)
        with torch.no_grad():
            drift = max(float((p - q).abs().max()) / float(q.abs().max())
                        for p, q in zip(steps["compile"].model.parameters(), steps["off"].model.parameters()))
    print(f"3. float64, {n_steps} steps from the same start, batch {batch}: largest relative weight difference "
          f"compiled vs eager {drift:.2g} (target 1e-9)")


def compiled_main(args) -> None:
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device cpu, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start; CPU time of this process")
    compiled_forward(args.windows if args.windows != PAPER_WINDOWS else 10_000, args.repeats)
    compiled_step(args.step_batch, args.repeats)
    compiled_float64(args.step_batch, args.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=PAPER_WINDOWS)
    parser.add_argument("--batch-size", type=int, default=PAPER_BATCH)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="torch.compile against eager (module docstring)")
    parser.add_argument("--step-batch", type=int, default=256, help="--compile: the training step's batch")
    parser.add_argument("--steps", type=int, default=80, help="--compile: float64 steps compared")
    args = parser.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.compile:
        compiled_main(args)
        return
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    config = dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3)
    model = build_model("vpt", **config).to(dtype)
    x = torch.randn(args.windows, 3, 3, dtype=dtype)  # (windows, seq_len, dim)
    y = torch.randn(args.windows, 3, 3, dtype=dtype)

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}"
          f"{' (default)' if args.threads is None else ''}, {args.dtype}, device cpu, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    print(f"model vpt {config}, {count_parameters(model)} parameters")
    print(f"epoch: {args.windows} windows, batch size {args.batch_size}, forward + backward, "
          f"{args.repeats} interleaved repeats per method")

    times: dict[str, list[float]] = {label: [] for label in METHODS}
    for label, method in METHODS.items():  # warm-up, not timed
        with cayley_method(method):
            epoch(model, x[: args.batch_size], y[: args.batch_size], args.batch_size)
    for _ in range(args.repeats):
        for label, method in METHODS.items():
            with cayley_method(method):
                times[label].append(epoch(model, x, y, args.batch_size))

    print(f"{'Cayley path':<30} {'best s':>8} {'median s':>9} {'windows/s (best)':>17}")
    for label, ts in times.items():
        print(f"{label:<30} {min(ts):8.3f} {statistics.median(ts):9.3f} {args.windows / min(ts):17,.0f}")
    fast, base = (times[label] for label in METHODS)
    print(f"ratio baseline/fast: best {min(base) / min(fast):.2f}x, median "
          f"{statistics.median(base) / statistics.median(fast):.2f}x")

    xb = x[: args.batch_size].clone()
    layer_times = {label: cayley_only(xb, method, args.repeats) for label, method in METHODS.items()}
    fast, base = layer_times.values()
    print(f"attention layer alone (one batch of {args.batch_size}, fwd+bwd, best): "
          f"fast {fast * 1e3:.2f} ms, baseline {base * 1e3:.2f} ms, ratio {base / fast:.2f}x")


if __name__ == "__main__":
    main()
