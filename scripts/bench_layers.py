"""Forward + backward throughput of the paper VPT: fast Cayley path against the torch.linalg.inv baseline.

One paper epoch (118 848 windows of shape (seq_len 3, dim 3)) of random data in batches of 16 384 (the
paper's batch size): for each batch, MSE loss against random targets and ``loss.backward()`` (no optimiser
step). Both Cayley implementations run in the same process, interleaved, ``--repeats`` times each; the
table reports the fastest and the median epoch (the fastest is the least disturbed by other load).

    python scripts/bench_layers.py                    # torch's default thread count
    python scripts/bench_layers.py --threads 1
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=PAPER_WINDOWS)
    parser.add_argument("--batch-size", type=int, default=PAPER_BATCH)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads is not None:
        torch.set_num_threads(args.threads)
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
