"""The lattices' full-order Stormer-Verlet kernel against an independent lean Verlet, batch 1, same process.

The package's kernel is ``vpintegrator.compiled.lattice`` (the stepper ``integrate`` runs for ``toda`` and
``fpu_beta``); the independent one is written below from the Hamiltonian alone, a lean numba loop: one pass
over the bonds per force, one ``exp`` per bond (Toda), the last force reused. Both integrate the same initial condition (the bump, mu = 0.45, p0 = 0) for ``--n-steps`` steps of h = 1.2 at each
N, timed interleaved on this thread's CPU clock (``vpintegrator.clock.thread_cpu``), the minimum of
``--repeats`` runs each. The kernel is timed twice: alone (``step_block`` into a preallocated array) and as
the whole call ``vp.integrate`` (checks, output allocated, metadata). Prints seconds per step and the ratios
to the independent loop (target: kernel <= 1.3x), and the largest difference of the two final states.

Usage::

    python scripts/bench_lattice.py [--system toda] [--n 800] [--n-steps 2000] [--repeats 15]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

import vpintegrator as vp  # noqa: E402
from vpintegrator.clock import thread_cpu  # noqa: E402
from vpintegrator.compiled import compiled_stepper  # noqa: E402
from vpintegrator.systems import get_system, sample_initial_conditions  # noqa: E402

TARGET = 1.3


@numba.njit(cache=False)
def _independent_verlet(kind, par, periodic, y, h, n_steps, out):
    """Velocity Verlet for H = |p|^2/2 + sum_b phi(r_b), written from scratch and lean: each force is one pass
    over the bonds (one phi' per bond, kind 0: Toda alpha exp(-r), kind 1: FPU r^2/2 + beta r^4/4) and the
    force at the end of a step is the next step's first; y (2N,) advanced in place, states into out."""
    n = y.shape[0] // 2
    nb = n if periodic else n + 1  # bond b joins sites b-1 and b (periodic: mod N; fixed: sites -1, N are 0)
    d = np.empty(nb + 1)
    g = np.empty(n)

    def force(y, d, g):
        for b in range(nb):
            left = y[b - 1] if b > 0 else (y[n - 1] if periodic else 0.0)
            right = y[b] if b < n else 0.0
            r = right - left
            d[b] = -par * math.exp(-r) if kind == 0 else r + par * r * r * r
        d[nb] = d[0]  # periodic: site N-1's right bond is bond 0
        for i in range(n):
            g[i] = d[i] - d[i + 1]

    force(y, d, g)
    for k in range(n_steps):
        for i in range(n):
            y[n + i] -= 0.5 * h * g[i]
        for i in range(n):
            y[i] += h * y[n + i]
        force(y, d, g)
        for i in range(n):
            y[n + i] -= 0.5 * h * g[i]
        out[k] = y
    return y


def bench(system_name: str, n_sites: int, n_steps: int, repeats: int, h: float) -> dict[str, float]:
    system = get_system(system_name, N=n_sites)
    y0 = sample_initial_conditions(system, "bump", mu=[0.45])[0]
    par = float(system.bond_params()[0])
    stepper = compiled_stepper(system, "stormer_verlet", h)
    out = np.empty((n_steps, system.dim))
    out2 = np.empty((n_steps, system.dim))
    calls = {
        "independent": lambda: _independent_verlet(system.kind, par, system.periodic, y0.copy(), h, n_steps, out2),
        "kernel": lambda: stepper.step_block(y0.copy(), n_steps, out),
        "integrate": lambda: vp.integrate(system, y0, dt=h, n_steps=n_steps, method="stormer_verlet"),
    }
    for call in calls.values():  # compile, touch the outputs
        call()
    assert vp.integrate(system, y0, dt=h, n_steps=2, method="stormer_verlet").meta["runner"] == "numba"
    best = {k: math.inf for k in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            tic = thread_cpu()
            call()
            best[name] = min(best[name], thread_cpu() - tic)
    diff = float(np.max(np.abs(out[-1] - out2[-1])))
    return {**{k: v / n_steps for k, v in best.items()}, "diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="toda", choices=("toda", "fpu_beta"))
    ap.add_argument("--n", type=int, nargs="+", default=[800], help="lattice sizes N")
    ap.add_argument("--n-steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--dt", type=float, default=None, help="step (default 1.2 for toda, 0.9 for fpu_beta)")
    args = ap.parse_args()
    h = args.dt or (1.2 if args.system == "toda" else 0.9)
    print(f"{args.system}, stormer_verlet, h = {h}, {args.n_steps} steps, min of {args.repeats}, thread CPU, "
          f"numba {numba.__version__}")
    print("| N | independent s/step | kernel s/step | kernel / independent | integrate / independent | max |diff| |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        r = bench(args.system, n, args.n_steps, args.repeats, h)
        ratio = r["kernel"] / r["independent"]
        print(f"| {n} | {r['independent']:.3g} | {r['kernel']:.3g} | {ratio:.2f}"
              f"{'' if ratio <= TARGET else ' (above 1.3)'} | {r['integrate'] / r['independent']:.2f} | {r['diff']:.1e} |")


if __name__ == "__main__":
    main()
