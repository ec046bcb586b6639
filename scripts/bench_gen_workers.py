"""Benchmark ``vp-gen --workers``: whole processes, the settings alternated in one run, ratios printed.

Runs ``vp-gen rigid_body --n-traj N --t-end 20 --dt 0.2 --rtol 1e-12 --atol 1e-12 --workers W`` (DOP853 per
trajectory, written to HDF5) for each W in ``--workers-list`` (default 1,2), alternating the settings
``--repeat`` times so that a change of the machine's load hits all of them alike. Prints, per setting,
the best and median wall time and the CPU time (user + system of the child), the load average before and
after, and the ratios of the best and of the median wall times to the first setting. Checks that every
setting wrote the same ``/y`` bit for bit.

Run: ``python scripts/bench_gen_workers.py`` (2*10^5 trajectories; about a minute per repeat on 2 cores).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np

VP_GEN = str(Path(sys.executable).parent / "vp-gen")


def _run(args: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one whole vp-gen process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([VP_GEN, *args], check=True, capture_output=True, text=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@click.command()
@click.option("--n-traj", default=200_000, show_default=True)
@click.option("--workers-list", default="1,2", show_default=True)
@click.option("--repeat", default=3, show_default=True)
def main(n_traj: int, workers_list: str, repeat: int) -> None:
    settings = [int(w) for w in workers_list.split(",")]
    common = ["rigid_body", "--n-traj", str(n_traj), "--t-end", "20", "--dt", "0.2", "--rtol", "1e-12",
              "--atol", "1e-12", "--quiet", "--overwrite"]
    print(f"vp-gen {' '.join(common[:-2])} --workers W; {os.cpu_count()} CPUs; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    times: dict[int, list[tuple[float, float]]] = {w: [] for w in settings}
    with tempfile.TemporaryDirectory() as tmp:
        _run(["rigid_body", "--n-traj", "10", "--t-end", "1", "--out", f"{tmp}/warm.h5", "--quiet"])  # numba cache
        for r in range(repeat):
            for w in settings:
                wall, cpu = _run([*common, "--out", f"{tmp}/w{w}.h5", "--workers", str(w)])
                times[w].append((wall, cpu))
                print(f"  repeat {r + 1}: --workers {w}: {wall:6.2f} s wall, {cpu:6.2f} s CPU", flush=True)
        ys = {}
        for w in settings:
            with h5py.File(f"{tmp}/w{w}.h5", "r") as f:
                ys[w] = f["y"][:]
        same = all(np.array_equal(ys[settings[0]], ys[w]) for w in settings)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = settings[0]
    best0 = min(t[0] for t in times[base])
    med0 = statistics.median(t[0] for t in times[base])
    for w in settings:
        best = min(t[0] for t in times[w])
        med = statistics.median(t[0] for t in times[w])
        cpu = statistics.median(t[1] for t in times[w])
        print(f"--workers {w}: best {best:6.2f} s, median {med:6.2f} s wall, median CPU {cpu:6.2f} s; "
              f"speed-up vs --workers {base}: best {best0 / best:.2f}x, median {med0 / med:.2f}x")
    print(f"/y bit-identical across settings: {same}")


if __name__ == "__main__":
    main()
