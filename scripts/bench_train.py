"""Training throughput of the paper VPT on the paper's rigid-body data set: ours vs the obvious loop.

    python scripts/bench_train.py [--epochs 3] [--threads N] [--device cpu|cuda] [--fast-steps auto,off,compile]
                                  [--no-profile]

* ours: :func:`vpintegrator.fit` (windows gathered by one ``index_select`` per batch from the trajectory
  tensor, closed-form Cayley for T = 3, validation off so both loops see the same windows), once per
  ``fast_step`` in ``--fast-steps`` (``auto``: the whole step as one CUDA graph on CUDA, the eager step on
  the CPU; ``off``: eager; ``compile``: torch.compile, graph-captured on CUDA), with the ratio of each to
  ``off`` (the eager path) measured in the same run;
* plain: the loop written the obvious way: every window materialised up front by a Python loop, a
  ``torch.utils.data.DataLoader`` over a ``TensorDataset`` with the default per-item collation,
  ``torch.linalg.inv`` in the Cayley transform, ``ExponentialLR`` stepped per batch;
* plain + gather: the same obvious loop but fed by our batch gather (separates data from Cayley costs).

Both train the paper configuration (dim 3, seq_len 3, n_blocks 2, n_linear 1, L 3; batch 16384, Adam
(0.9, 0.99), lr 1e-2 -> 1e-6, float32) on all 1238 x 96 windows. The first epoch of each is a warm-up and
not timed; the loops alternate over rounds and the rate is each loop's fastest epoch (the median is
printed too: on a shared machine the fastest is the least disturbed). Then a torch.profiler table of where our loop's
time goes (regions ``vp/gather``, ``vp/forward``, ``vp/backward``, ``vp/optimizer``, ...).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

PAPER_MODEL = {"name": "vpt", "dim": 3, "seq_len": 3, "n_blocks": 2, "n_linear": 1, "L": 3}
DATA = Path(__file__).resolve().parents[1] / "datasets" / "rigid_body_paper.h5"


def load_paper_data():
    """The paper data set: datasets/rigid_body_paper.h5 if present, else generated here (in memory)."""
    from vpintegrator.data import generate, read_trajectories

    if DATA.exists():
        return read_trajectories(DATA), str(DATA)
    return generate("rigid_body_paper"), "generated in memory (spec rigid_body_paper)"


def bench_ours(traj, epochs: int, device: str, batch_size: int, fast_step: str = "auto") -> tuple[list[float], str]:
    """Seconds per epoch of :func:`vpintegrator.fit` (first epoch, with any capture or compile, dropped as
    warm-up) and the fast step that ran."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        result = _fit_on(traj, tmp, epochs + 1, device, batch_size, fast_step)
        summary = json.loads((result.run_dir / "summary.json").read_text())
    ran = summary.get("fast_step_used", summary["fast_step"])
    if summary.get("fast_step_fallback"):  # auto fell back to the eager step: say why
        ran += f"; fell back: {summary['fast_step_fallback']}"
    seconds = [h["seconds"] for h in result.history]
    return np.diff(seconds).tolist(), ran


def _fit_on(traj, tmp: str, epochs: int, device: str, batch_size: int, fast_step: str = "auto"):
    from vpintegrator.data.trajectory_files import write_trajectories
    from vpintegrator.training import fit

    path = write_trajectories(Path(tmp) / "data.h5", traj)
    return fit(
        dict(data=[str(path)], model=PAPER_MODEL, epochs=epochs, batch_size=batch_size, val_fraction=0.0,
             device=device, dtype="float32", seed=1234, checkpoint_every=10**6, out=f"{tmp}/run",
             fast_step=fast_step)
    )


def _n_windows(traj, seq_len: int = 3, pred_window: int = 3) -> int:
    return traj.n_traj * (traj.n_states - seq_len - pred_window + 1)


def plain_windows(y: np.ndarray, seq_len: int = 3, pred_window: int = 3):
    """Every window materialised, the obvious way."""
    xs, ts = [], []
    for i in range(y.shape[0]):
        for s in range(y.shape[1] - seq_len - pred_window + 1):
            xs.append(torch.tensor(y[i, s : s + seq_len], dtype=torch.float32))
            ts.append(torch.tensor(y[i, s + seq_len : s + seq_len + pred_window], dtype=torch.float32))
    return torch.stack(xs), torch.stack(ts)


def bench_plain(traj, epochs: int, device: str, batch_size: int, our_gather: bool) -> list[float]:
    from vpintegrator.data.windows import WindowBatchSampler, WindowDataset
    from vpintegrator.models import build_model
    from vpintegrator.nn.cayley import cayley_method

    dev = torch.device(device)
    torch.manual_seed(1234)
    cfg = dict(PAPER_MODEL)
    model = build_model(cfg.pop("name"), **cfg).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    steps_per_epoch = -(-_n_windows(traj) // batch_size)
    gamma = (1e-6 / 1e-2) ** (1.0 / ((epochs + 1) * steps_per_epoch))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma)
    if our_gather:
        ds = WindowDataset(torch.as_tensor(traj.y, dtype=torch.float32, device=dev), 3, 3)
        sampler = WindowBatchSampler(len(ds), batch_size, generator=torch.Generator().manual_seed(0))
        batches = lambda: (ds.batch(i.to(dev)) for i in sampler)  # noqa: E731
    else:
        x_all, t_all = plain_windows(traj.y)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x_all, t_all), batch_size=batch_size, shuffle=True
        )
        batches = lambda: ((x.to(dev), t.to(dev)) for x, t in loader)  # noqa: E731
    times = []
    with cayley_method("inv"):
        for _ in range(epochs + 1):
            t0 = time.perf_counter()
            for x, target in batches():
                opt.zero_grad()
                pred = model(x)
                loss = torch.norm(pred - target) / torch.norm(target)
                loss.backward()
                opt.step()
                sched.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return times[1:]


def profile_ours(traj, device: str, batch_size: int, rows: int = 14) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with tempfile.TemporaryDirectory() as tmp:
        _fit_on(traj, tmp, 1, device, batch_size)  # warm-up outside the profile
    with tempfile.TemporaryDirectory() as tmp, profile(activities=activities) as prof:
        t0 = time.perf_counter()
        _fit_on(traj, tmp, 2, device, batch_size)
        wall = time.perf_counter() - t0
    lines = [f"regions of fit() over 2 epochs, wall {wall:.2f} s (inclusive CPU time):"]
    for evt in sorted(prof.key_averages(), key=lambda e: -e.cpu_time_total):
        if evt.key.startswith("vp/"):
            ms = evt.cpu_time_total / 1e3
            lines.append(f"  {evt.key:<14s} {ms:9.1f} ms  {100 * ms / 1e3 / wall:5.1f} %  {evt.count:4d} calls")
    events = prof.key_averages()
    if device.startswith("cuda"):  # device kernels launched (inside a CUDA graph's replays too, where recorded)
        kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        lines.append(f"  device kernels over the 2 epochs: {kernels}")
        lines.append("\ntop ops by self device time:\n" + events.table(sort_by="self_device_time_total",
                                                                      row_limit=rows))
    top = events.table(sort_by="self_cpu_time_total", row_limit=rows)
    return "\n".join(lines) + "\n\ntop ops by self CPU time:\n" + top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per loop and round (after 1 warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the loops")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--fast-steps", default="auto,off,compile",
                        help="comma list of fast_step values to time (off is the baseline; always timed)")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain loops")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    traj, source = load_paper_data()
    n_windows = _n_windows(traj)
    print(f"data: {source}: {traj.n_traj} x {traj.n_states} states, {n_windows} windows (seq_len 3, pred_window 3)")
    print(f"model: {PAPER_MODEL}, batch {args.batch_size}, float32, device {args.device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    t0 = time.perf_counter()
    x_all, _ = plain_windows(traj.y)
    build = time.perf_counter() - t0
    print(f"plain: materialising the windows took {build:.2f} s ({x_all.numel() * 2 * 4 / 2**20:.1f} MiB) "
          "(not counted in its rate)")
    del x_all

    # Alternate the loops round by round so that load from other processes hits them alike; the
    # headline rate uses each loop's fastest epoch (least disturbed), the median is printed beside it.
    modes = list(dict.fromkeys(["off"] + [m.strip() for m in args.fast_steps.split(",") if m.strip()]))
    ours: dict[str, list[float]] = {m: [] for m in modes}
    ran: dict[str, str] = {}
    plain, hybrid = [], []
    for _ in range(args.rounds):
        for mode in modes:
            t_mode = time.perf_counter()
            times, ran[mode] = bench_ours(traj, args.epochs, args.device, args.batch_size, mode)
            ours[mode] += times
            # a line per loop as it ends, with its rate: a run killed at its limit still has every figure so far
            print(f"  {mode} (ran: {ran[mode]}): {1 / min(times):.3f} epochs/s (fastest timed epoch); "
                  f"{time.perf_counter() - t_mode:.1f} s in all (warm-up epoch with any capture or build included), "
                  f"timed epochs {', '.join(f'{t:.3f}' for t in times)} s", flush=True)
        if not args.no_plain:
            for name, runs, gather in (("plain", plain, False), ("plain + our gather", hybrid, True)):
                times = bench_plain(traj, args.epochs, args.device, args.batch_size, our_gather=gather)
                runs += times
                print(f"  {name}: {1 / min(times):.3f} epochs/s (fastest timed epoch); timed epochs "
                      f"{', '.join(f'{t:.3f}' for t in times)} s", flush=True)

    def line(name: str, times: list[float]) -> float:
        best, med = min(times), statistics.median(times)
        print(f"{name:<42s} {1 / best:8.3f} epochs/s {n_windows / best:10,.0f} windows/s "
              f"{1e3 * best / steps:8.2f} ms/step   (median {1 / med:.3f} epochs/s; epoch s: "
              f"{', '.join(f'{t:.3f}' for t in times)})")
        return best

    steps = -(-n_windows // args.batch_size)
    print()
    best = {m: line(f"ours, fast_step={m} (ran: {ran[m]})", ours[m]) for m in modes}
    print("the paper (Julia, RTX 4090): 23 epochs/s; the issue's target on an H100 (fast path): >= 300 epochs/s")
    for mode in modes:
        if mode != "off":
            print(f"ratio fast_step={mode} / off (eager): {best['off'] / best[mode]:.2f}x faster "
                  f"(median: {statistics.median(ours['off']) / statistics.median(ours[mode]):.2f}x)")
    if not args.no_plain:
        m_ours = best["off"]
        m_plain = line("plain (DataLoader + inv Cayley)", plain)
        m_hybrid = line("plain loop + our gather, inv Cayley", hybrid)
        print(f"\nratio ours (eager) / plain: {m_plain / m_ours:.2f}x faster (median: "
              f"{statistics.median(plain) / statistics.median(ours['off']):.2f}x); data pipeline alone "
              f"{m_plain / m_hybrid:.2f}x, Cayley and the rest {m_hybrid / m_ours:.2f}x")
    if not args.no_profile:
        print("\nprofile of ours (2 epochs, torch.profiler):")
        print(profile_ours(traj, args.device, args.batch_size))


if __name__ == "__main__":
    main()
