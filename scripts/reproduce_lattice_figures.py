#!/usr/bin/env python
"""The independent figures of the Toda bump family, measured with the package: prints a table.

On the shipped specs ``toda_bump`` (training, mu = 0.30, 0.33 ... 0.60) and ``toda_bump_heldout`` (the midpoints),
periodic Toda, alpha = 0.64, q0 = h(20 mu |x + mu/2|), p0 = 0, T = 120, both generated here in memory by
DOP853 at rtol = atol = 1e-12 (the converged reference: it agrees with Yoshida 6 at h = 0.01 to ~5e-11):

- full-order Stormer-Verlet at h = 1.2 (its stability limit) at N = 200 and N = 800: the error of the full state
  at T against the reference, ``|y - y_ref| / |y_ref|``, median over the 10 held-out mu;
- the exponential splitting (Strang, the linear part exact by FFT), one step of h = 120, at N = 800;
- PSD by cotangent lift fitted on every state (dt = 0.1) of the 11 training trajectories at N = 200: the
  reconstruction floor ``|y - A A^T y| / |y|`` at T, median over the held-out mu, for 2n = 4, 8, 16, 32;
- PSD-Galerkin (the reduced Hamiltonian system) by Stormer-Verlet at h = 1.2 at 2n = 32, decoded at T, and the
  same hyper-reduced (ECSW: the bonds sampled and weighted on the training split to a residual of 1e-3).

Each classical row's cost is the batch-1 CPU time of this thread per unit of simulated time
(``vpintegrator.clock.thread_cpu``; the minimum of ``--repeats`` runs of one trajectory): the compiled lattice
stepper for Verlet and PSD-Galerkin (``vpintegrator.compiled.lattice``), the NumPy step (scipy.fft) for the
exponential splitting. The
"independent" column is the independent check's figure (its own numba code on the same family); "ratio" is
measured / independent (the target: within 10 %).

Usage::

    python scripts/reproduce_lattice_figures.py [--repeats 5]

About 30 s on one core.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

from vpintegrator.arrays import relative_error  # noqa: E402
from vpintegrator.clock import min_thread_cpu  # noqa: E402
from vpintegrator.compiled import compiled_stepper  # noqa: E402
from vpintegrator.data import generate, integrate, load_spec  # noqa: E402
from vpintegrator.reduction import PSDGalerkin, fit_bond_sampling, fit_psd, psd_floor  # noqa: E402
from vpintegrator.systems import get_system  # noqa: E402
from vpintegrator.quantiles import median  # noqa: E402

T = 120.0
#: the independent check's figures
INDEPENDENT = {"verlet_200": 1.25e-3, "verlet_800": 2.9e-5, "exp_800": 1.7e-3,
         "floor_4": 0.68, "floor_8": 0.42, "floor_16": 0.19, "floor_32": 2.9e-3}


def _data(name: str, n_sites: int, dt: float):
    spec = load_spec(name)
    return generate(load_spec(name, params={**spec.params, "N": n_sites}, dt=dt), workers=1)


def _cost(call: Callable[[], object], repeats: int) -> float:
    """The minimum CPU seconds of this thread over ``repeats`` calls (after one warm-up call)."""
    return min_thread_cpu(call, repeats)


def _median_error(y: np.ndarray, reference: np.ndarray) -> float:
    return median(relative_error(y, reference).ravel())


def _classical(system, held, method: str, h: float, repeats: int) -> tuple[float, float]:
    """(median error at T, batch-1 CPU s per unit time) of ``method`` at step h from the held-out states."""
    n = int(round(T / h))
    y = integrate(system, held.y[:, 0], h, n, method=method).y[:, -1]
    stepper = compiled_stepper(system, method, h)
    if stepper is not None:
        out = np.empty((n, system.dim))
        cost = _cost(lambda: stepper.step_block(held.y[0, 0].copy(), n, out), repeats)
    else:
        cost = _cost(lambda: integrate(system, held.y[0, 0], h, n, method=method), repeats)
    return _median_error(y, held.y[:, -1]), cost / T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--repeats", type=int, default=5, help="timing repeats (the minimum is kept)")
    args = ap.parse_args()
    rows: list[tuple[str, str, float, float | None, float | None]] = []  # what, N, error, cost, independent

    for n_sites in (200, 800):
        system = get_system("toda", N=n_sites)
        held = _data("toda_bump_heldout", n_sites, 1.2)
        err, cost = _classical(system, held, "stormer_verlet", 1.2, args.repeats)
        rows.append(("full-order stormer_verlet, h = 1.2", str(n_sites), err, cost, INDEPENDENT[f"verlet_{n_sites}"]))
        err, cost = _classical(system, held, "exponential_splitting", T, args.repeats)
        rows.append(("exponential_splitting, one step h = 120", str(n_sites), err, cost,
                     INDEPENDENT.get(f"exp_{n_sites}")))

    system = get_system("toda", N=200)
    train = _data("toda_bump", 200, 0.1)
    held = _data("toda_bump_heldout", 200, 1.2)
    for reduced_dim in (4, 8, 16, 32):
        basis = fit_psd(train, reduced_dim)
        floor = median(psd_floor(basis, held.y[:, -1]).ravel())
        rows.append((f"PSD floor (cotangent lift), 2n = {reduced_dim}", "200", floor, None,
                     INDEPENDENT[f"floor_{reduced_dim}"]))
    reduced = PSDGalerkin(system, basis)  # 2n = 32
    z0 = basis.encode(held.y[:, 0])
    h, n = 1.2, int(round(T / 1.2))
    y = basis.decode(integrate(reduced, z0, h, n, method="stormer_verlet").y[:, -1])
    stepper, out = compiled_stepper(reduced, "stormer_verlet", h), np.empty((n, reduced.dim))
    cost = _cost(lambda: stepper.step_block(z0[0].copy(), n, out), args.repeats) / T
    rows.append(("PSD-Galerkin 2n = 32, stormer_verlet h = 1.2", "200", _median_error(y, held.y[:, -1]), cost, None))
    sampling = fit_bond_sampling(system, basis, train, tol=1e-3)
    hyper = PSDGalerkin(system, basis, sampling)
    y = basis.decode(integrate(hyper, z0, h, n, method="stormer_verlet").y[:, -1])
    stepper = compiled_stepper(hyper, "stormer_verlet", h)
    cost = _cost(lambda: stepper.step_block(z0[0].copy(), n, out), args.repeats) / T
    rows.append((f"PSD-Galerkin 2n = 32 hyper-reduced ({sampling.bonds.size} of {sampling.n_bonds} bonds), "
                 "stormer_verlet h = 1.2", "200", _median_error(y, held.y[:, -1]), cost, None))

    print("Toda bump family, alpha = 0.64, T = 120, held-out mu = 0.315 ... 0.585; error = median over the held-out "
          "mu of |y(T) - y_ref(T)| / |y_ref(T)|; cost = batch-1 thread CPU s per unit time")
    print()
    print("| row | N | error at T | cost (s / unit time) | independent | ratio |")
    print("|---|---|---|---|---|---|")
    for what, n_sites, err, cost, other in rows:
        cost_text = "-" if cost is None else f"{cost:.2g}"
        other_text, ratio = ("-", "-") if other is None else (f"{other:.3g}", f"{err / other:.2f}")
        print(f"| {what} | {n_sites} | {err:.3g} | {cost_text} | {other_text} | {ratio} |")


if __name__ == "__main__":
    main()
