"""Same numbers on two trees: a refactoring's check that data, training logs and rollout files are unchanged.

    python scripts/same_numbers.py --base /path/to/worktree-of-the-old-commit [--work DIR]

Runs one small program in a fresh process per tree (``PYTHONPATH`` set to the tree; one torch thread):
the paper's rigid-body data by implicit midpoint, a float64 VPT trained 3 epochs with Adam and 2 epochs
with Levenberg–Marquardt, and a rollout of that VPT beside RK4 and implicit midpoint (trajectories
0, 5, 100, 719 to t = 60). Then it compares, bit for bit, every numeric column of both ``log.csv`` files
(times excepted) and every dataset of the data and rollout files, and prints what differs. Exit 1 if
anything does. Only API that both trees have is used.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
#: datasets that only label axes (HDF5 dimension scales: vpintegrator.data.h5labels), absent from older files
LABELS = {"trajectory", "state", "param"}

PROGRAM = """
import sys
from pathlib import Path
import torch
torch.set_num_threads(1)
import vpintegrator as vp
from vpintegrator.rollout import RolloutConfig, run_rollouts
work = Path(sys.argv[1])
work.mkdir(parents=True, exist_ok=True)
data = work / "data.h5"
vp.generate(vp.load_spec("rigid_body_paper", method="implicit_midpoint"), out=data)
vp.fit({"data": [str(data)], "model": {"name": "vpt"}, "epochs": 3, "batch_size": 1024, "seed": 7,
        "val_fraction": 0.1, "out": str(work / "run"), "dtype": "float64"})
vp.fit({"data": [str(data)], "model": {"name": "vpt"}, "epochs": 2, "optimizer": "lm", "lm_windows": 256,
        "lm_iters_per_epoch": 3, "seed": 3, "out": str(work / "lm"), "dtype": "float64", "init_scale": 0.1})
run_rollouts(RolloutConfig(data=str(data), models={"vpt": str(work / "run")},
                           integrators=["rk4", "implicit_midpoint"], t_end=60.0, traj=[0, 5, 100, 719],
                           out=str(work / "roll.h5")))
"""


def _run(tree: Path, work: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM), str(work)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the program failed on {tree}:\n{proc.stderr[-2000:]}")


def _log_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _datasets(path: Path) -> dict:
    import h5py

    found: dict = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            found[name] = obj[()]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


def compare(a: Path, b: Path) -> list[str]:
    """What differs between the outputs in ``a`` and ``b`` (empty: the same numbers)."""
    import numpy as np

    differ = []
    for run in ("run", "lm"):
        ra, rb = _log_rows(a / run / "log.csv"), _log_rows(b / run / "log.csv")
        cols = [c for c in ra[0] if c in rb[0] and "time" not in c and "second" not in c]
        same = len(ra) == len(rb) and all(x[c] == y[c] for x, y in zip(ra, rb) for c in cols)
        print(f"{run}/log.csv: {len(ra)} rows, columns {', '.join(cols)}: {'identical' if same else 'DIFFER'}")
        if not same:
            differ.append(f"{run}/log.csv")
    for name in ("data.h5", "roll.h5"):
        da, db = _datasets(a / name), _datasets(b / name)
        # the dimension-scale labels (issue 33) are new datasets, not changed numbers: compared where both have them
        # (bytes, e.g. the split labels, compare without equal_nan: isnan takes numbers only)
        bad = sorted(k for k in set(da) | set(db) if (k not in da or k not in db) and k not in LABELS
                     or k in da and k in db and da[k].dtype.kind != "O"
                     and not np.array_equal(da[k], db[k], equal_nan=da[k].dtype.kind in "fc"))
        print(f"{name}: {len(set(da) | set(db))} datasets: {'identical' if not bad else 'DIFFER: ' + ', '.join(bad)}")
        differ += [f"{name}:{k}" for k in bad]
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the baseline tree (a git worktree of the old commit)")
    parser.add_argument("--work", default=None, help="where the outputs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        _run(Path(args.base).resolve(), work / "base")
        _run(HERE, work / "this")
        differ = compare(work / "base", work / "this")
    print("same numbers" if not differ else f"{len(differ)} outputs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
