"""Batch-1 CPU cost per unit of simulated time of a learned vector field rolled out by the NumPy path
(``vpintegrator.rollout.field``), against the compiled classical kernel on the true rigid body.

    OMP_NUM_THREADS=1 python scripts/vector_field_cost.py [--width 16] [--depth 2] [--steps 2000]

Prints one line per (field or system, integrator): seconds per unit time at h = 0.2 (min of 3 runs) and the
runner (``numpy`` for the learned field, ``numba`` for the shipped system).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout.engine import rollout
from vpintegrator.rollout.field import field_step
from vpintegrator.rollout.steps import IntegratorStep


def seconds(make, y0, h, n, repeats=3):
    best, runner = np.inf, "?"
    for _ in range(repeats):
        sm = make()
        t0 = time.process_time()
        tr = rollout(sm, y0, h, n, chunk_steps=16384)
        best = min(best, float(tr.meta.get("seconds", time.process_time() - t0)))
        runner = sm.describe().get("runner", "?")
    return best, runner


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    h, n = 0.2, args.steps
    y0 = np.array([[[0.6, 0.5, 0.6245]]])
    torch.manual_seed(0)
    model = build_model("lphnn", dim=3, dt=h, width=args.width, depth=args.depth).double()
    for method in ("rk4", "implicit_midpoint", "gauss_legendre4"):
        s, runner = seconds(lambda: field_step(model, h, method), y0, h, n)
        print(f"lphnn (width {args.width}, depth {args.depth}) + {method}: {s / (n * h):.3g} s per unit time ({runner})")
        s, runner = seconds(lambda: IntegratorStep("rigid_body", method, h), y0, h, n)
        print(f"rigid_body + {method}: {s / (n * h):.3g} s per unit time ({runner})")


if __name__ == "__main__":
    main()
