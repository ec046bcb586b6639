"""The rigid body's rotation splittings at the paper's step: error, Casimir drift and batch-1 compiled cost.

On N random initial conditions on the unit sphere (``sample_initial_conditions(..., "sphere", N, seed)``),
h = 0.2, t = T: the median (and 90th percentile) relative error at T against the exact flow (DOP853, rtol =
atol = 1e-12), the largest relative Casimir drift |C(t) / C(0) - 1| over [0, T] and the trajectories, and
the compiled cost in CPU s per unit of simulated time at batch 1 (work_precision's harness: the rollout
engine, minimum of ``--repeats``). RK4 and Gauss-Legendre 4 run beside them as a baseline of the same run.
Usage::

    python scripts/lie_poisson_splittings.py [--n 20] [--t-end 100] [--seed 0] [--repeats 5]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402

METHODS = (
    "rotation_splitting", "rotation_splitting_tj4", "rotation_splitting_suzuki4", "rotation_splitting_y6",
    "rotation_splitting_centred", "rotation_splitting_centred_tj4", "rotation_splitting_centred_suzuki4",
    "rotation_splitting_centred_y6", "rk4", "gauss_legendre4",
)


def main() -> None:
    from vpintegrator.data import integrate
    from vpintegrator.rollout.precision import work_precision
    from vpintegrator.systems import get_system, sample_initial_conditions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--t-end", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    system, h = get_system("rigid_body"), 0.2
    y0 = sample_initial_conditions(system, "sphere", args.n, np.random.default_rng(args.seed))
    rows = work_precision(system, y0, h, args.t_end, methods=METHODS, ladder=(1.0, 0.5, 0.25, 0.125),
                          dop853_rtols=None, reference_rtol=1e-12, repeats=args.repeats)
    n_steps = round(args.t_end / h)
    print(f"rigid body, {args.n} random points on the unit sphere (seed {args.seed}), h = {h}, t = {args.t_end:g}")
    print("| method | order | median error | p90 error | Casimir drift | CPU s / unit time (batch 1) | runner |")
    print("|---|---|---|---|---|---|---|")
    from vpintegrator.integrators import get_integrator

    for r in rows:
        if r.h != h:
            continue
        y = integrate(system, y0, h, n_steps, r.method).y
        casimir = system.invariant("casimir", y)
        drift = float(np.max(np.abs(casimir / casimir[:, :1] - 1.0)))
        print(f"| {r.method} | {get_integrator(r.method).order} | {r.error_median:.2e} | {r.error_p90:.2e} | "
              f"{drift:.1e} | {r.seconds_per_time:.2e} | {r.runner} |")


if __name__ == "__main__":
    main()
