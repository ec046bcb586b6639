"""Whole-process start-up of a small ``vp-gen`` on this tree against a baseline tree (issue 33, item 4).

    python scripts/bench_startup.py --base /path/to/worktree-of-main [--runs 7]

Times ``python -m vpintegrator.cli.gen rigid_body --n-traj 10 --t-end 20 --out X -q --overwrite`` (the
command the issue measured: 10 trajectories, DOP853 at rtol = atol = 1e-12, written to HDF5) as a fresh
process, ``PYTHONPATH`` set to each tree, one thread. After one untimed warm-up run per tree (numba's
on-disk cache filled), the trees alternate run by run (``--runs`` each), so that the load of a shared
machine falls on both alike; prints each run, the medians and their ratio (this / base), and checks that
both trees wrote the same ``/t`` and ``/y`` to the bit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
COMMAND = ["rigid_body", "--n-traj", "10", "--t-end", "20", "-q", "--overwrite"]


def _run(tree: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vpintegrator.cli.gen", *COMMAND, "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=out.parent)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the baseline tree (a git worktree of main)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per tree (default 7)")
    args = parser.parse_args(argv)
    trees = {"base": Path(args.base).resolve(), "this": HERE}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: Path(tmp) / f"{name}.h5" for name in trees}
        for name, tree in trees.items():  # warm-up: numba's cache of each tree
            _run(tree, outs[name])
        times: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.runs):
            for name, tree in trees.items():
                times[name].append(_run(tree, outs[name]))
            print(f"run {i + 1}: base {times['base'][-1]:.3f} s, this {times['this'][-1]:.3f} s", flush=True)
        import h5py

        with h5py.File(outs["base"], "r") as a, h5py.File(outs["this"], "r") as b:
            same = all(a[k][()].tobytes() == b[k][()].tobytes() for k in ("t", "y"))
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"vp-gen {' '.join(COMMAND)}: median base {med['base']:.3f} s, this {med['this']:.3f} s, "
          f"ratio this/base {med['this'] / med['base']:.2f} ({args.runs} alternating runs each)")
    print(f"/t and /y of both trees: {'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
