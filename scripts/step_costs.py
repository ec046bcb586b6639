"""Print the measured step costs the studies' step budgets are made from (issue 65: budgets in work).

Reads the shipped results of the partial-observation study (``docs/data/partial_observation/default.json`` and
``toda_default.json``: each training run's validation curve holds the process CPU seconds at the end of every
epoch) and of the reduction study (``docs/data/reduction/default.json``: each flow map's ``train_cpu`` and
``epochs``), and prints, per training configuration, the median CPU seconds of one epoch: the literals
``STEP_COSTS`` of ``vpintegrator/studies/partial_observation/design.py`` and ``FLOW_MAP_EPOCH_COSTS`` of
``vpintegrator/studies/reduction/plan.py`` are this output. Measured on the 2-core machine that made those runs, one
thread per run.

    python scripts/step_costs.py
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def partial_observation() -> dict[tuple[str, str, int], float]:
    diffs: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
    for name in ("default.json", "toda_default.json"):
        rows = json.loads((ROOT / "docs/data/partial_observation" / name).read_text())["rows"]
        for r in rows:
            curve = r.get("curve") or {}
            cpu = [c for c in curve.get("cpu", []) if c is not None]
            if len(cpu) >= 2:  # the first epoch holds the set-up: differences from the second on
                diffs[(r["system"], r["approach"], int(r["T"]))] += np.diff(cpu).tolist()
    return {k: round(float(np.median(v)), 3) for k, v in sorted(diffs.items())}


def reduction() -> dict[int, float]:
    per: dict[int, list[float]] = collections.defaultdict(list)
    rows = json.loads((ROOT / "docs/data/reduction/default.json").read_text())["rows"]
    for r in rows:
        if r.get("row", "").endswith("flow_map") and r.get("epochs") and r.get("train_cpu"):
            per[int(r["reduced_dim"])].append(float(r["train_cpu"]) / int(r["epochs"]))
    return {k: round(float(np.median(v)), 3) for k, v in sorted(per.items())}


if __name__ == "__main__":
    print("# partial_observation: (system, approach, T) -> CPU s per epoch (10 Levenberg-Marquardt iterations)")
    print("STEP_COSTS = {")
    for k, v in partial_observation().items():
        print(f"    {k!r}: {v},")
    print("}")
    print("# reduction: 2n -> CPU s per epoch of the flow map's training")
    print(f"FLOW_MAP_EPOCH_COSTS = {reduction()!r}")
