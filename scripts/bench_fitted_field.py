"""A fitted SINDy field in the compiled steppers, against the true equations: what a ``sindy+METHOD`` row's cost
is made of.

The rigid body's Euler equations written as a library field (``SindyField``: the three true monomials of the
degree-2 library with their coefficients, what SINDy recovers on the control system) and the shipped
``RigidBody`` are stepped at batch 1, h = 0.2, by

- **oracle, lean**: the rigid body's lean loop (``compiled/lean.py``), what the study's oracle row runs;
- **oracle, generic**: the same system through the generic loops of ``compiled/kernels.py`` (the loops a
  learned or fitted field runs; its lean loop switched off for this measurement);
- **library field**: the fitted field through the generic loops (kernel id 101, ``compiled/library_field.py``);
- **library field, NumPy**: the NumPy path, what a ``sindy+METHOD`` row ran before the kernel existed.

Thread CPU seconds per unit time (``vpintegrator.clock.thread_cpu``), the minimum of ``--repeats`` interleaved
runs, and each row's ratio to the lean oracle measured in the same run. Usage::

    python scripts/bench_fitted_field.py [--n-steps 20000] [--repeats 5]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402

from vpintegrator.clock import thread_cpu  # noqa: E402
from vpintegrator.compiled import compiled_stepper  # noqa: E402
from vpintegrator.data.integration import IntegratorMap  # noqa: E402
from vpintegrator.rollout.sindy import SindyField, library  # noqa: E402
from vpintegrator.stepping import drive  # noqa: E402
from vpintegrator.systems import RigidBody  # noqa: E402

H = 0.2
METHODS = ("rk4", "implicit_midpoint", "gauss_legendre4")


def euler_as_library_field() -> SindyField:
    lib = library("poly2", 3)
    keep = np.array([n in ("x0 x1", "x0 x2", "x1 x2") for n in lib.names()])
    a, b, c = RigidBody().coefficients  # ż = (a z₂z₃, b z₁z₃, c z₁z₂)
    return SindyField(library=lib.select(keep), coefficients=np.array([[0, 0, c], [0, b, 0], [a, 0, 0]]))


def compiled_seconds(system, method: str, n: int, generic: bool):
    stepper = compiled_stepper(system, method, H)
    if generic:
        stepper._fast = ("", None, ())  # the generic loops of compiled/kernels.py, as a fitted field runs them
    out = np.empty((n, 3))
    out.fill(0.0)
    y = np.array([0.6, 0.3, 0.74])
    tic = thread_cpu()
    stepper.step_block(y, n, out)
    return thread_cpu() - tic


def numpy_seconds(system, method: str, n: int):
    step = IntegratorMap(system, method, H, compiled_max_batch=0)
    w0 = np.array([[[0.6, 0.3, 0.74]]])
    tic = thread_cpu()
    drive(step, w0, n, lambda k0, block: None, chunk_steps=n, failure="mark")
    return thread_cpu() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    field, truth = euler_as_library_field(), RigidBody()
    n, n_numpy = args.n_steps, max(1, args.n_steps // 50)
    for method in METHODS:
        rows = {"oracle, lean": lambda: compiled_seconds(truth, method, n, False) / (n * H),
                "oracle, generic": lambda: compiled_seconds(truth, method, n, True) / (n * H),
                "library field": lambda: compiled_seconds(field, method, n, True) / (n * H),
                "library field, NumPy": lambda: numpy_seconds(field, method, n_numpy) / (n_numpy * H)}
        for f in rows.values():  # compile or load every kernel first
            f()
        best = {name: min(f() for _ in range(args.repeats)) for name, f in rows.items()}
        base = best["oracle, lean"]
        print(f"{method}:")
        for name, s in best.items():
            print(f"  {name:22s} {s:.2e} CPU s per unit time   {s / base:7.1f}x the lean oracle")


if __name__ == "__main__":
    main()
