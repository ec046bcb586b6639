"""Benchmark ``vp-rollout --workers``: whole processes, the settings alternated in one run, ratios printed.

Generates a rigid-body data set (``--n-traj`` trajectories, t in [0, 20], dt 0.2), then runs
``vp-rollout --data D --integrators rk4,implicit_midpoint,splitting,exact_flow --t-end T --workers W``
for each W in ``--workers-list`` (default 1,2), alternating the settings ``--repeat`` times so that a
change of the machine's load hits all of them alike. Prints, per setting, the best and median wall time
and the CPU time (user + system of the child and its worker processes), the load average, and the ratios
of the best and median wall times to the first setting. Checks that every setting wrote the same
datasets bit for bit.

Run: ``python scripts/bench_rollout_workers.py`` (about half a minute per repeat on 2 cores).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import click
import h5py


def _run(args: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one whole vp-rollout process (with its worker processes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vpintegrator.cli.rollout", *args], check=True, capture_output=True,
                   text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _datasets(path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, o: out.__setitem__(k, o[()].tobytes()) if isinstance(o, h5py.Dataset) else None)
    return out


@click.command()
@click.option("--n-traj", default=2000, show_default=True)
@click.option("--t-end", default=100.0, show_default=True, help="Horizon (beyond 20 the reference is continued).")
@click.option("--workers-list", default="1,2", show_default=True)
@click.option("--repeat", default=3, show_default=True)
def main(n_traj: int, t_end: float, workers_list: str, repeat: int) -> None:
    from vpintegrator.data import generate, load_spec

    settings = [int(w) for w in workers_list.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        data = f"{tmp}/data.h5"
        generate(load_spec("rigid_body", n_traj=n_traj, t_end=20.0, dt=0.2), data)
        common = ["--set", f'data="{data}"', "--integrators", "rk4,implicit_midpoint,splitting,exact_flow",
                  "--t-end", str(t_end), "--quiet", "--overwrite"]
        print(f"vp-rollout --data <rigid_body, {n_traj} trajectories, dt 0.2> {' '.join(common[2:-2])} --workers W; "
              f"{os.cpu_count()} CPUs; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        _run([*common, "--out", f"{tmp}/warm.h5", "--n-traj", "20", "--t-end", "1"])  # numba cache, imports
        times: dict[int, list[tuple[float, float]]] = {w: [] for w in settings}
        for r in range(repeat):
            for w in settings:
                wall, cpu = _run([*common, "--out", f"{tmp}/w{w}.h5", "--workers", str(w)])
                times[w].append((wall, cpu))
                print(f"  repeat {r + 1}: --workers {w}: {wall:6.2f} s wall, {cpu:6.2f} s CPU", flush=True)
        first = _datasets(f"{tmp}/w{settings[0]}.h5")
        same = all(_datasets(f"{tmp}/w{w}.h5") == first for w in settings[1:])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base_best = min(t[0] for t in times[settings[0]])
    base_median = statistics.median(t[0] for t in times[settings[0]])
    for w in settings:
        walls = [t[0] for t in times[w]]
        print(f"--workers {w}: best {min(walls):6.2f} s, median {statistics.median(walls):6.2f} s wall, "
              f"CPU {statistics.median(t[1] for t in times[w]):6.2f} s; speed-up vs --workers {settings[0]}: "
              f"best {base_best / min(walls):.2f}x, median {base_median / statistics.median(walls):.2f}x")
    print(f"datasets bit-identical across settings: {same}")


if __name__ == "__main__":
    main()
