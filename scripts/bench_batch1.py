"""Batch-1 calls against their compiled kernel: what one trajectory costs a user beyond the kernel's own loop.

For each method (rigid body, h = 0.2, 10^4 steps by default) it times, interleaved and on the CPU clock of this
thread (``vpintegrator.clock.thread_cpu``; other processes on a loaded machine do not bend it):

- **kernel**: the compiled stepper's ``step_block`` alone, the stepper built beforehand and its output array
  allocated and touched beforehand (the loop and nothing else);
- **integrate**: the whole call ``vp.integrate("rigid_body", z0, dt, n_steps, method)`` (checks, the plan,
  the output allocated, the loop, the Trajectories with its metadata);
- **rollout**: the whole call ``vpintegrator.rollout.rollout(IntegratorStep("rigid_body", method, dt), z0, dt, n_steps)`` (the
  engine with its failure rule: what ``vp-rollout`` runs for a classical row).

Prints each whole call's CPU seconds over the kernel's (target <= 1.3 at 10^4 steps), the minimum of
``--repeats`` interleaved runs each. Usage::

    python scripts/bench_batch1.py [--n-steps 10000] [--repeats 30] [--method rk4 ...]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402

import vpintegrator as vp  # noqa: E402
from vpintegrator.clock import thread_cpu  # noqa: E402
from vpintegrator.compiled import compiled_stepper  # noqa: E402
from vpintegrator.rollout.engine import rollout  # noqa: E402
from vpintegrator.rollout.steps import IntegratorStep  # noqa: E402

TARGET = 1.3
METHODS = ("rk4", "implicit_midpoint", "gauss_legendre4", "splitting", "splitting_mclachlan2",
           "rotation_splitting_y6")


def bench(method: str, n: int, dt: float, repeats: int) -> tuple[float, float, float]:
    z0 = np.array([math.sin(1.1), 0.0, math.cos(1.1)])
    stepper = compiled_stepper("rigid_body", method, dt)
    out = np.empty((n, 3))
    calls = {
        "kernel": lambda: stepper.step_block(z0.copy(), n, out),
        "integrate": lambda: vp.integrate("rigid_body", z0, dt=dt, n_steps=n, method=method),
        "rollout": lambda: rollout(IntegratorStep("rigid_body", method, dt), z0[None], dt, n),
    }
    for call in calls.values():  # compile / load, touch the output
        call()
    assert vp.integrate("rigid_body", z0, dt=dt, n_steps=4, method=method).meta["runner"] == "numba"
    best = {k: math.inf for k in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            tic = thread_cpu()
            call()
            best[name] = min(best[name], thread_cpu() - tic)
    return best["kernel"], best["integrate"], best["rollout"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-steps", type=int, default=10_000)
    ap.add_argument("--dt", type=float, default=0.2)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--method", action="append")
    args = ap.parse_args(argv)
    print(f"rigid body, one trajectory, {args.n_steps} steps of h = {args.dt:g}; CPU s of this thread, min of "
          f"{args.repeats} interleaved runs; target: whole call / kernel <= {TARGET}")
    print(f"{'method':24s}{'kernel s':>11s}{'integrate s':>13s}{'ratio':>7s}{'rollout s':>11s}{'ratio':>7s}")
    worst = 0.0
    for method in args.method or METHODS:
        k, i, r = bench(method, args.n_steps, args.dt, args.repeats)
        worst = max(worst, i / k, r / k)
        print(f"{method:24s}{k:11.3e}{i:13.3e}{i / k:7.2f}{r:11.3e}{r / k:7.2f}", flush=True)
    print(f"worst ratio {worst:.2f} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
