#!/usr/bin/env python
"""Batched classical rollouts (issue 59 item 2): the old NumPy path against the compiled path, in one run.

A rollout of ``--traj`` trajectories (default 100, random points of the unit sphere) of the rigid body, ``--steps``
steps (default 10^4) of h = 0.2, by the rollout engine (``vpintegrator.rollout.rollout`` with an ``IntegratorStep``,
what ``vp-rollout``, the studies and the work-precision ladders run), for each method: ``compiled_max_batch=0``
(the NumPy step on the whole batch: the path every rollout of more than 8 trajectories took before) against the
default (the compiled per-trajectory loop over every row). CPU seconds of the calling thread (``time.thread_time``:
steady on a loaded machine) and wall seconds of the whole ``rollout`` call, each the best of ``--rounds``
alternating rounds, one thread; the kernels are compiled (or loaded from the cache) before the timing. It also checks that
the compiled batch gives every row's states of the compiled batch-1 stepper bit for bit, and prints the largest
difference from the NumPy path.

    OMP_NUM_THREADS=1 python scripts/bench_batch_rollout.py [--traj 100] [--steps 10000] [--methods rk4,gauss_legendre4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vpintegrator.compiled.integrators import compiled_stepper
from vpintegrator.rollout import IntegratorStep, rollout

DT = 0.2


def timed(step_map, y0: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(CPU s, wall s) of one rollout, and its states."""
    cpu, wall = time.thread_time(), time.perf_counter()
    res = rollout(step_map, y0[:, None], DT, n)
    return np.array([time.thread_time() - cpu, time.perf_counter() - wall]), res.y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traj", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default="rk4,gauss_legendre4")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(args.traj, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    print(f"rigid body, {args.traj} trajectories x {args.steps} steps of h = {DT}, rollout engine, one thread; "
          f"CPU s (wall s), best of {args.rounds} rounds")
    print(f"{'method':<18}{'numpy s':>18}{'compiled s':>18}{'speed-up CPU (wall)':>22}{'runner':>8}{'rows=batch-1':>14}"
          f"{'max |numpy - compiled|':>24}")
    for name in args.methods.split(","):
        old, new = IntegratorStep("rigid_body", name, DT, compiled_max_batch=0), IntegratorStep("rigid_body", name, DT)
        timed(new, y0[:2], 2)  # compile or load the kernels
        best_old, best_new = np.full(2, np.inf), np.full(2, np.inf)
        y_old = y_new = None
        for _ in range(args.rounds):
            t, y_old = timed(old, y0, args.steps)
            best_old = np.minimum(best_old, t)
            t, y_new = timed(new, y0, args.steps)
            best_new = np.minimum(best_new, t)
        stepper = compiled_stepper("rigid_body", name, DT)
        same = all(np.array_equal(stepper.run(y0[i], args.steps), y_new[i]) for i in range(args.traj))
        diff = float(np.max(np.abs(y_old - y_new)))
        old_s, new_s = (f"{v[0]:.4f} ({v[1]:.4f})" for v in (best_old, best_new))
        up = f"{best_old[0] / best_new[0]:.1f}x ({best_old[1] / best_new[1]:.1f}x)"
        print(f"{name:<18}{old_s:>18}{new_s:>18}{up:>22}{new.describe()['runner']:>8}{str(same):>14}{diff:>24.3g}")


if __name__ == "__main__":
    main()
