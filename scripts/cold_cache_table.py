"""A fresh install's first vp-rollout table against a warm second one (issue 65's target: the same cost column
within 1.3x per row).

In a temporary directory: ``vp-gen`` writes a small rigid-body file; then the same ``vp-rollout`` command runs
twice with ``NUMBA_CACHE_DIR`` set to one new, empty directory (the first run compiles every kernel into it, as a
fresh install's first run does; the second finds them there). Prints each row's ``seconds_per_step`` of both
runs, their ratio and the first run's ``warmup_seconds`` (where the compilation went).

    python scripts/cold_cache_table.py [--n-traj 20] [--t-end 100]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py

ROWS = "implicit_midpoint,rk4,gauss_legendre4,splitting"


def _rollout(work: Path, cache: Path, name: str, t_end: float) -> tuple[dict[str, float], dict[str, float]]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    out = work / f"{name}.h5"
    subprocess.run([sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(work / "rb.h5"),
                    "--model", "vpt=pretrained:rigid_body_vpt", "--integrators", ROWS, "--t-end", f"{t_end:g}",
                    "--out", str(out), "-q"], check=True, env=env)
    with open(out.with_suffix(".csv"), newline="") as fh:
        cost = {r["method"]: float(r["seconds_per_step"]) for r in csv.DictReader(fh)}
    with h5py.File(out) as f:
        warm = {k: float(f["methods"][k].attrs.get("warmup_seconds", float("nan"))) for k in f["methods"]}
    return cost, warm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-traj", type=int, default=20)
    parser.add_argument("--t-end", type=float, default=100.0)
    a = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gen_cache, cache = work / "gen_cache", work / "cache"
        subprocess.run([sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body_paper", "--method",
                        "implicit_midpoint", "--n-traj", str(a.n_traj), "--out", str(work / "rb.h5"), "-q"],
                       check=True, env={**os.environ, "NUMBA_CACHE_DIR": str(gen_cache)})
        cold, warm_up = _rollout(work, cache, "first", a.t_end)
        warm, _ = _rollout(work, cache, "second", a.t_end)
    print(f"{'row':<20} {'first s/step':>13} {'second s/step':>14} {'first/second':>13} {'first warmup s':>15}")
    worst = 0.0
    for row in cold:
        ratio = cold[row] / warm[row]
        worst = max(worst, ratio, 1 / ratio)
        print(f"{row:<20} {cold[row]:>13.3g} {warm[row]:>14.3g} {ratio:>13.2f} {warm_up.get(row, float('nan')):>15.3g}")
    print(f"largest ratio either way: {worst:.2f} (target <= 1.3); the CPU clock of the rolling-out thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
