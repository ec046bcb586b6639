"""Same command, same rows, under any load (issue 65): run ``vp-study partial_observation`` twice, the second time
beside a CPU-bound load on every core, and compare the two results JSON files field by field, timing fields
aside (``train_cpu``, the curves' CPU seconds, the rows' batch-1 ``cost``). Training budgets are step budgets
(``--budget plateau``, the study's default), so every error, step count and stop must be equal.

    python scripts/same_rows_under_load.py --out runs/same_rows                 # a tiny study (about 2 CPU min)
    python scripts/same_rows_under_load.py --out runs/same_rows -- --quick      # the --quick study (twice)
    python scripts/same_rows_under_load.py --compare A.json B.json              # two results files already made

Prints every differing field and exits 1 if any differs besides the timing fields.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

#: the fields that are clocks (they may differ; everything else must not): a training's CPU seconds, its curve's,
#: and a row's batch-1 cost per unit time on the cost meter (thread CPU seconds, which load moves)
TIMING = {"train_cpu", "cpu", "cost"}
#: the tiny study: one system, two approaches, two windows, one seed, a few held-out conditions
TINY = ["--systems", "coupled_oscillator", "--approaches", "delay_mlp,vpt", "--windows", "1,2", "--seeds", "0",
        "--n-train", "8", "--n-test", "3", "--max-steps", "20", "--jobs", "1"]


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The paths at which ``a`` and ``b`` differ, the ``TIMING`` keys aside (NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in TIMING:
                continue
            if k not in a or k not in b:
                yield f"{path}/{k}: only in {'the first' if k in a else 'the second'}"
            else:
                yield from differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} against {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    elif a != b:
        yield f"{path}: {a!r} against {b!r}"


def _rows(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    return {"rows": sorted(data["rows"], key=lambda r: (r["system"], str(r.get("seed")), r["label"])),
            "budgets": data.get("budgets")}


def compare(a: Path, b: Path) -> int:
    found = list(differences(_rows(a), _rows(b)))
    n = len(_rows(a)["rows"])
    for line in found[:50]:
        print(line)
    print(f"{n} rows; {len(found)} differing fields besides the clocks ({', '.join(sorted(TIMING))})")
    return 1 if found else 0


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def run(out: Path, args: list[str], loaded: bool) -> Path:
    cmd = [sys.executable, "-m", "vpintegrator", "study", "partial_observation", "--out", str(out), *args]
    stop, spinners = None, []
    if loaded:
        ctx = mp.get_context("fork")
        stop = ctx.Event()
        spinners = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 2)]
        for p in spinners:
            p.start()
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    finally:
        if stop is not None:
            stop.set()
            for p in spinners:
                p.join(timeout=10)
    return out / "partial_observation.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="a directory for the two runs (quiet/, loaded/)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar="JSON", help="compare two results files only")
    parser.add_argument("study_args", nargs="*", help="the study's arguments after -- (default: a tiny study)")
    a = parser.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    if a.out is None:
        parser.error("--out is required (or --compare A B)")
    args = a.study_args or TINY
    quiet = run(a.out / "quiet", args, loaded=False)
    loaded = run(a.out / "loaded", args, loaded=True)
    return compare(quiet, loaded)


if __name__ == "__main__":
    sys.exit(main())
