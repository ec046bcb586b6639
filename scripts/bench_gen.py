"""Benchmark data generation: vectorised DOP853 vs a per-trajectory solve_ivp loop, and memory.

1. The paper data set (rigid body, 1238 initial conditions, dt = 0.2, t in [0, 20], DOP853 at
   rtol = atol = 1e-12) through :func:`vpintegrator.data.solve_flow` (one ``solve_ivp`` call on the stacked
   state) against a Python loop of ``solve_ivp`` calls, one per trajectory, same tolerances, same run.
   Prints both times, the ratio and the max abs difference; for context also the one-call variant
   without tolerance scaling, and the error of each against a tighter per-trajectory reference on a
   subset.
2. Memory: ``generate`` of 10^4 and 10^5 random-sphere rigid-body trajectories to an HDF5 file, each in
   a fresh process; prints each process's peak RSS (flat = bounded by the chunk, not the data set).

Run: ``python scripts/bench_gen.py`` (about three minutes on 2 busy cores; the loop dominates).
"""

from __future__ import annotations

import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
from scipy.integrate import solve_ivp

from vpintegrator.data import generate, load_spec, solve_flow
from vpintegrator.systems import get_system, paper_sphere_points

RTOL = ATOL = 1e-12


def _loop(system, y0, t, rtol, atol):
    """The per-trajectory baseline: one solve_ivp(DOP853) call per initial condition."""
    out = np.empty((y0.shape[0], t.size, y0.shape[1]))
    for i, y in enumerate(y0):
        sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y, method="DOP853", t_eval=t, rtol=rtol, atol=atol)
        out[i] = sol.y.T
    return out


def _one_call_unscaled(system, y0, t, rtol, atol):
    """One solve_ivp call on the stacked state with the tolerances as given (RMS norm over all)."""
    n, dim = y0.shape
    sol = solve_ivp(
        lambda s, z: system.vector_field(z.reshape(n, dim)).reshape(-1),
        (t[0], t[-1]), y0.reshape(-1), method="DOP853", t_eval=t, rtol=rtol, atol=atol,
    )
    return sol.y.reshape(n, dim, t.size).transpose(0, 2, 1)


def _best_of(fn, repeat):
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def bench_speed(repeat: int) -> None:
    system = get_system("rigid_body")
    y0 = paper_sphere_points()
    t = np.arange(101) * 0.2
    print(f"paper data set: {y0.shape[0]} trajectories, {t.size} states (dt 0.2, t in [0, 20]), DOP853 rtol = atol = {RTOL:g}")
    t_vec, vec = _best_of(lambda: solve_flow(system, y0, t, rtol=RTOL, atol=ATOL), repeat)
    t_raw, raw = _best_of(lambda: _one_call_unscaled(system, y0, t, RTOL, ATOL), repeat)
    start = time.perf_counter()
    loop = _loop(system, y0, t, RTOL, ATOL)
    t_loop = time.perf_counter() - start
    diff = np.max(np.abs(vec - loop), axis=(1, 2))  # (n_traj,)
    worst = np.argsort(diff)[::-1][:10]
    tight = (100 * np.finfo(float).eps, 1e-16)  # the smallest rtol solve_ivp accepts
    print(f"  per-trajectory solve_ivp loop       : {t_loop:8.3f} s")
    print(f"  vectorised solve_flow (tol/sqrt(n)) : {t_vec:8.3f} s   (best of {repeat})")
    print(f"  ratio loop / vectorised             : {t_loop / t_vec:8.1f} x")
    print(f"  max |vectorised - loop|             : {diff.max():.2e} (trajectory {worst[0]}, y0 = "
          f"{np.array2string(y0[worst[0]], precision=6)}); {np.sum(diff > 1e-10)} of {diff.size} trajectories differ by > 1e-10")
    print(f"  [one call, tolerances unscaled      : {t_raw:8.3f} s, ratio {t_loop / t_raw:.1f} x, "
          f"max |. - loop| {np.max(np.abs(raw - loop)):.2e}]")
    print(f"  error against a tighter per-trajectory reference (DOP853 rtol {tight[0]:.1e}, atol {tight[1]:.0e}):")
    for label, idx in (("10 largest |vectorised - loop|", worst), ("every 20th trajectory", np.arange(0, y0.shape[0], 20))):
        ref = _loop(system, y0[idx], t, *tight)
        errs = [np.max(np.abs(a[idx] - ref)) for a in (loop, vec, raw)]
        print(f"    {label:<31}: loop {errs[0]:.2e}, vectorised {errs[1]:.2e}, one call unscaled {errs[2]:.2e}")
    print(f"  max ||z| - 1|: vectorised {np.max(np.abs(np.linalg.norm(vec, axis=-1) - 1)):.2e}, "
          f"loop {np.max(np.abs(np.linalg.norm(loop, axis=-1) - 1)):.2e}")


def _peak_rss_mib() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss it does not carry over the parent's
    peak through fork + exec)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def memory_child(n_traj: int, t_end: float, out: str) -> None:
    """Run in a fresh process: generate n_traj trajectories to ``out``; print peak RSS at three points."""
    spec = load_spec("rigid_body", n_traj=n_traj, t_end=t_end)
    rss = {"import": _peak_rss_mib()}

    def progress(n_done: int, total: int) -> None:
        if n_done == 0:  # the initial conditions (n_traj, dim) are sampled, nothing integrated yet
            rss["sampled"] = _peak_rss_mib()

    start = time.perf_counter()
    generate(spec, out=out, progress=progress)
    seconds = time.perf_counter() - start
    size = n_traj * spec.n_steps * 3 * 8 / 2**20
    print(f"{n_traj} {spec.n_steps} {size:.1f} {rss['import']:.1f} {rss['sampled']:.1f} {_peak_rss_mib():.1f} "
          f"{seconds:.1f} {Path(out).stat().st_size / 2**20:.1f}")


def bench_memory(sizes: list[int], t_end: float) -> None:
    print(f"memory: rigid_body random sphere, dt 0.1, t_end {t_end:g} (short horizon to keep the run short), "
          "generate(...) to HDF5, one fresh process each; peak RSS after import, after sampling the initial "
          "conditions (n_traj x 3, sampled up front), and at the end")
    print(f"  {'n_traj':>8} {'n_steps':>7} {'data MiB':>9} {'import':>8} {'sampled':>8} {'peak':>8} "
          f"{'loop adds':>9} {'seconds':>8} {'file MiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            out = Path(tmp) / f"mem_{n}.h5"
            res = subprocess.run(
                [sys.executable, __file__, "--memory-child", str(n), "--t-end", str(t_end), "--out", str(out)],
                check=True, capture_output=True, text=True,
            )
            n_traj, n_steps, size, base, sampled, peak, seconds, file_size = res.stdout.split()
            added = float(peak) - float(sampled)
            print(f"  {n_traj:>8} {n_steps:>7} {size:>9} {base:>8} {sampled:>8} {peak:>8} {added:>9.1f} "
                  f"{seconds:>8} {file_size:>9}   (RSS in MiB)")
            out.unlink()


@click.command()
@click.option("--repeat", default=3, show_default=True, help="Repeats of the vectorised timings (best taken).")
@click.option("--sizes", default="10000,100000", show_default=True, help="n_traj for the memory runs.")
@click.option("--t-end", default=20.0, show_default=True, help="Horizon of the memory runs.")
@click.option("--skip-speed", is_flag=True)
@click.option("--skip-memory", is_flag=True)
@click.option("--memory-child", "child_n_traj", type=int, hidden=True)
@click.option("--out", hidden=True)
def main(repeat, sizes, t_end, skip_speed, skip_memory, child_n_traj, out):
    """Benchmark vectorised DOP853 generation against a per-trajectory loop, and its memory."""
    if child_n_traj:
        memory_child(child_n_traj, t_end, out)
        return
    if not skip_speed:
        bench_speed(repeat)
    if not skip_memory:
        bench_memory([int(s) for s in sizes.split(",")], t_end)


if __name__ == "__main__":
    main()
