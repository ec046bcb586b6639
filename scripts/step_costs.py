"""Print the measured step costs the studies' step budgets are made from (issue 65: budgets in work).

Reads the shipped results of the partial-observation study (``docs/data/partial_observation/default.json`` and
``toda_default.json``, archived since in ``docs/data/archive/``: each training run's validation curve holds the process CPU seconds at the end of every
epoch) and of the reduction study (``docs/data/reduction/default.json``: each flow map's ``train_cpu`` and
``epochs``), and prints, per training configuration, the median CPU seconds of one epoch: the literals
``STEP_COSTS`` of ``vpintegrator/studies/partial_observation/design.py`` and ``FLOW_MAP_EPOCH_COSTS`` of
``vpintegrator/studies/reduction/plan.py`` are this output. Measured on the 2-core machine that made those runs, one
thread per run.

The literals were printed from the CPU-budgeted runs as they were shipped at revision a99b4a4; the default-size
partial-observation run shipped since was itself budgeted in steps from those literals, so its epochs' CPU seconds
(this script without ``--rev``) are a new measurement, not the literals' source:

    python scripts/step_costs.py --rev a99b4a4    # the literals
    python scripts/step_costs.py                  # the files as they are now
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REV: str | None = None  # --rev: read the shipped files as they were at this git revision


def shipped(path: str) -> list[dict]:
    """The rows of a shipped results file, from the working tree (``docs/data/archive/`` once a re-make
    superseded it) or (``--rev``) from git."""
    if REV is None:
        archived = ROOT / path.replace("docs/data/", "docs/data/archive/", 1)
        text = (ROOT / path if (ROOT / path).is_file() else archived).read_text()
    else:
        text = subprocess.run(["git", "show", f"{REV}:{path}"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout
    return json.loads(text)["rows"]


def partial_observation() -> dict[tuple[str, str, int], float]:
    diffs: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
    for name in ("default.json", "toda_default.json"):
        for r in shipped(f"docs/data/partial_observation/{name}"):
            curve = r.get("curve") or {}
            cpu = [c for c in curve.get("cpu", []) if c is not None]
            if len(cpu) >= 2:  # the first epoch holds the set-up: differences from the second on
                diffs[(r["system"], r["approach"], int(r["T"]))] += np.diff(cpu).tolist()
    return {k: round(float(np.median(v)), 3) for k, v in sorted(diffs.items())}


def reduction() -> dict[int, float]:
    per: dict[int, list[float]] = collections.defaultdict(list)
    for r in shipped("docs/data/reduction/default.json"):
        if r.get("row", "").endswith("flow_map") and r.get("epochs") and r.get("train_cpu"):
            per[int(r["reduced_dim"])].append(float(r["train_cpu"]) / int(r["epochs"]))
    return {k: round(float(np.median(v)), 3) for k, v in sorted(per.items())}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", help="read the shipped files at this git revision (default: the working tree)")
    REV = ap.parse_args().rev
    print("# partial_observation: (system, approach, T) -> CPU s per epoch (10 Levenberg-Marquardt iterations)")
    print("STEP_COSTS = {")
    for k, v in partial_observation().items():
        print(f"    {k!r}: {v},")
    print("}")
    print("# reduction: 2n -> CPU s per epoch of the flow map's training")
    print(f"FLOW_MAP_EPOCH_COSTS = {reduction()!r}")
