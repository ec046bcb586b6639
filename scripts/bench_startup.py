"""Whole-process start-up of a small ``vp-gen`` on this tree against a baseline tree (issue 33, item 4).

    python scripts/bench_startup.py --base /path/to/worktree-of-main [--runs 7] [--n-traj 10]

Times ``python -m vpintegrator.cli.gen rigid_body --n-traj 10 --t-end 20 --out X -q --overwrite`` (the
command the issue measured: 10 trajectories, or ``--n-traj``; DOP853 at rtol = atol = 1e-12, written to HDF5) as a fresh
process, ``PYTHONPATH`` set to each tree, one thread. After one untimed warm-up run per tree (numba's
on-disk cache filled), the trees alternate run by run (``--runs`` each), so that the load of a shared
machine falls on both alike; prints each run's wall and CPU time (user + system of the process, from
``getrusage``), the wall medians, the CPU minima and their ratios (this / base), and checks that both trees
wrote the same ``/t`` and ``/y`` to the bit. CPU time is the figure a loaded machine does not bend.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
COMMAND = ["rigid_body", "--n-traj", "10", "--t-end", "20", "-q", "--overwrite"]


def _run(tree: Path, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one process."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vpintegrator.cli.gen", *COMMAND, "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=out.parent)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the baseline tree (a git worktree of main)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per tree (default 7)")
    parser.add_argument("--n-traj", type=int, default=10, help="trajectories (default 10)")
    args = parser.parse_args(argv)
    COMMAND[2] = str(args.n_traj)
    trees = {"base": Path(args.base).resolve(), "this": HERE}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: Path(tmp) / f"{name}.h5" for name in trees}
        for name, tree in trees.items():  # warm-up: numba's cache of each tree
            _run(tree, outs[name])
        times: dict[str, list[float]] = {name: [] for name in trees}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.runs):
            for name, tree in trees.items():
                wall, used = _run(tree, outs[name])
                times[name].append(wall)
                cpu[name].append(used)
            print(f"run {i + 1}: base {times['base'][-1]:.3f} s (CPU {cpu['base'][-1]:.3f} s), "
                  f"this {times['this'][-1]:.3f} s (CPU {cpu['this'][-1]:.3f} s)", flush=True)
        import h5py

        with h5py.File(outs["base"], "r") as a, h5py.File(outs["this"], "r") as b:
            same = all(a[k][()].tobytes() == b[k][()].tobytes() for k in ("t", "y"))
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"vp-gen {' '.join(COMMAND)}: median base {med['base']:.3f} s, this {med['this']:.3f} s, "
          f"ratio this/base {med['this'] / med['base']:.2f} ({args.runs} alternating runs each)")
    low = {name: min(v) for name, v in cpu.items()}
    print(f"CPU time, minimum: base {low['base']:.3f} s, this {low['this']:.3f} s, ratio this/base "
          f"{low['this'] / low['base']:.2f}")
    print(f"/t and /y of both trees: {'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
