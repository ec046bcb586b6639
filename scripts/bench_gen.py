"""Benchmark data generation: whole-process ``vp-gen`` vs a per-trajectory solve_ivp loop, accuracy, memory.

1. Speed, whole process: ``vp-gen rigid_body --n-traj N --t-end 20`` (random sphere initial conditions,
   dt 0.1, DOP853 at rtol = atol = 1e-12 per trajectory, written to HDF5) for N = 2*10^4 and 2*10^5, in a
   fresh process each (the console script, numba's cache warm; the cold-cache compile is timed once and
   reported separately), against the per-trajectory baseline: a Python loop of ``solve_ivp(DOP853,
   rtol = atol = 1e-12)`` calls, one per trajectory, on the same initial conditions. The loop is timed on a
   sample of trajectories and EXTRAPOLATED linearly to N (it would take minutes to hours); it only
   integrates (it writes nothing), so the ratio is conservative. The fallback path (numba disabled:
   the vectorised solve_ivp on the stacked state, tolerances / sqrt(chunk)) is timed the same way.
2. Accuracy: on a sample of the N trajectories, the max over trajectories and samples of
   |y - y_ref| against a tight per-trajectory reference (solve_ivp DOP853, rtol 1e-14 - which SciPy raises to
   its floor 100 eps = 2.2e-14 - and atol 1e-16), for
   the loop (rtol 1e-12), vp-gen compiled and vp-gen fallback; and max |vp-gen compiled - loop|.
3. Memory: ``generate`` of 10^4 and 10^5 trajectories to an HDF5 file, each in a fresh process; prints
   each process's peak RSS (flat = bounded by the chunk, not the data set).

Run: ``python scripts/bench_gen.py`` (about two minutes on 2 cores). Timings on a shared machine are
noisy: every ratio compares timings taken in the same run.
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np
from scipy.integrate import solve_ivp

from vpintegrator.data import generate, load_spec
from vpintegrator.systems import get_system

RTOL = ATOL = 1e-12
TIGHT = (100 * np.finfo(float).eps, 1e-16)  # the reference: per-trajectory solve_ivp at rtol 2.2e-14 = 100 eps
# (SciPy raises any smaller rtol, 1e-14 included, to this floor)
VP_GEN = str(Path(sys.executable).parent / "vp-gen")
# the fallback, whole process: vp-gen's CLI with the compiled path switched off (as without numba)
_FALLBACK = (
    "import sys; import vpintegrator.compiled.dop853 as d; d.NUMBA = False; "
    "from vpintegrator.cli.gen import main; sys.argv[0] = 'vp-gen'; main()"
)


def _loop(system, y0, t, rtol, atol):
    """The per-trajectory baseline: one solve_ivp(DOP853) call per initial condition."""
    out = np.empty((y0.shape[0], t.size, y0.shape[1]))
    for i, y in enumerate(y0):
        sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y, method="DOP853", t_eval=t, rtol=rtol, atol=atol)
        out[i] = sol.y.T
    return out


def _vp_gen(args: list[str], fallback: bool = False) -> float:
    """Wall seconds of one whole vp-gen process."""
    cmd = [sys.executable, "-c", _FALLBACK, *args] if fallback else [VP_GEN, *args]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def bench_speed(sizes: list[int], repeat: int, n_loop: int, n_acc: int, skip_fallback: bool) -> None:
    system = get_system("rigid_body")
    print(f"vp-gen rigid_body --n-traj N --t-end 20: sphere initial conditions, dt 0.1, 201 states, DOP853 "
          f"rtol = atol = {RTOL:g} per trajectory; whole process ({VP_GEN}), best of {repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "numba_cache"
        env_cold = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
        start = time.perf_counter()
        subprocess.run([VP_GEN, "rigid_body", "--n-traj", "10", "--t-end", "20", "--out", str(Path(tmp) / "w.h5")],
                       check=True, capture_output=True, env=env_cold)
        cold = time.perf_counter() - start
        warm = _vp_gen(["rigid_body", "--n-traj", "10", "--t-end", "20", "--out", str(Path(tmp) / "w.h5")])
        print(f"  vp-gen with 10 trajectories: {cold:.2f} s with an empty numba cache (the one-off compile), "
              f"{warm:.2f} s with it warm (start-up, imports, cache load)")
        rows = []
        for n in sizes:
            out = Path(tmp) / f"gen_{n}.h5"
            args = ["rigid_body", "--n-traj", str(n), "--t-end", "20", "--out", str(out)]
            t_gen = min(_vp_gen(args) for _ in range(repeat))
            with h5py.File(out) as fh:
                t = fh["t"][:]
                generator = fh.attrs["generator"]
                idx_loop = np.linspace(0, n - 1, n_loop).astype(int)
                idx_acc = np.linspace(0, n - 1, n_acc).astype(int)
                y_gen_loop = fh["y"][np.sort(np.unique(idx_loop))]
                y_gen_acc = fh["y"][np.sort(np.unique(idx_acc))]
            idx_loop, idx_acc = np.unique(idx_loop), np.unique(idx_acc)
            y0 = y_gen_loop[:, 0]
            start = time.perf_counter()
            loop = _loop(system, y0, t, RTOL, ATOL)
            per_traj = (time.perf_counter() - start) / len(idx_loop)
            t_loop = per_traj * n
            if skip_fallback:
                t_fb, y_fb_acc = math.nan, None
            else:
                out_fb = Path(tmp) / f"gen_{n}_fallback.h5"
                t_fb = _vp_gen(["rigid_body", "--n-traj", str(n), "--t-end", "20", "--out", str(out_fb)], fallback=True)
                with h5py.File(out_fb) as fh:
                    y_fb_acc = fh["y"][idx_acc]
                    assert "scipy" in fh.attrs["generator"] and "numba" not in fh.attrs["generator"]
                out_fb.unlink()
            out.unlink()
            # accuracy against the tight per-trajectory reference, on the accuracy sample
            ref = _loop(system, y_gen_acc[:, 0], t, *TIGHT)
            loop_acc = _loop(system, y_gen_acc[:, 0], t, RTOL, ATOL)
            err = {
                "loop": np.max(np.abs(loop_acc - ref), axis=(1, 2)),
                "compiled": np.max(np.abs(y_gen_acc - ref), axis=(1, 2)),
            }
            if y_fb_acc is not None:
                err["fallback"] = np.max(np.abs(y_fb_acc - ref), axis=(1, 2))
            diff = np.max(np.abs(y_gen_loop - loop))
            worse = np.sum(err["compiled"] > 2 * err["loop"] + 1e-13)
            rows.append((n, t_gen, t_loop, t_fb, per_traj, err, diff, worse, generator))
        print(f"  generator: {rows[0][8]}")
        print(f"  per-trajectory solve_ivp loop timed on {n_loop} trajectories spread over the N, extrapolated "
              "linearly to N (marked ~)")
        print(f"  {'N':>7} {'vp-gen s':>9} {'loop s (~)':>11} {'ratio':>7} {'fallback s':>11} {'ratio':>7}")
        for n, t_gen, t_loop, t_fb, per_traj, *_ in rows:
            print(f"  {n:>7} {t_gen:>9.2f} {t_loop:>11.1f} {t_loop / t_gen:>6.1f}x {t_fb:>11.2f} {t_loop / t_fb:>6.1f}x"
                  f"   (loop {per_traj * 1e3:.2f} ms per trajectory)")
        print(f"  accuracy on {n_acc} trajectories spread over the N: max over trajectories and samples of |y - y_ref|, "
              f"y_ref = per-trajectory solve_ivp DOP853 rtol {TIGHT[0]:g}, atol {TIGHT[1]:g}")
        for n, _, _, _, _, err, diff, worse, _ in rows:
            parts = ", ".join(f"{k} {v.max():.2e} (median {np.median(v):.1e})" for k, v in err.items())
            print(f"  {n:>7}: {parts}")
            print(f"           max |vp-gen compiled - loop| on the {n_loop} loop trajectories {diff:.2e}; "
                  f"trajectories where compiled error > 2 x loop error + 1e-13: {worse} of {len(err['loop'])}")


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
@click.option("--repeat", default=2, show_default=True, help="Repeats of each vp-gen run (best taken).")
@click.option("--speed-sizes", default="20000,200000", show_default=True, help="N for the speed runs.")
@click.option("--n-loop", default=200, show_default=True, help="Trajectories the loop is timed on.")
@click.option("--n-acc", default=100, show_default=True, help="Trajectories of the accuracy check.")
@click.option("--skip-fallback", is_flag=True, help="Do not time the fallback (no numba) path.")
@click.option("--sizes", default="10000,100000", show_default=True, help="n_traj for the memory runs.")
@click.option("--t-end", default=20.0, show_default=True, help="Horizon of the memory runs.")
@click.option("--skip-speed", is_flag=True)
@click.option("--skip-memory", is_flag=True)
@click.option("--memory-child", "child_n_traj", type=int, hidden=True)
@click.option("--out", hidden=True)
def main(repeat, speed_sizes, n_loop, n_acc, skip_fallback, sizes, t_end, skip_speed, skip_memory, child_n_traj, out):
    """Benchmark whole-process vp-gen against a per-trajectory solve_ivp loop, its accuracy and memory."""
    if child_n_traj:
        memory_child(child_n_traj, t_end, out)
        return
    if not skip_speed:
        bench_speed([int(s) for s in speed_sizes.split(",")], repeat, n_loop, n_acc, skip_fallback)
    if not skip_memory:
        bench_memory([int(s) for s in sizes.split(",")], t_end)


if __name__ == "__main__":
    main()
