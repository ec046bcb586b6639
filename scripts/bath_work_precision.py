"""The hidden-bath arena's work-precision table: the particle's error at t = 100 against batch-1 CPU per unit time.

For each bath size N (default 10^2, 10^3, 10^4) of ``kac_zwanzig`` (harmonic bath) and ``particle_chain`` (FPU-beta
chain), on held-out particle states (the sampler ``particle``, seed 1; the shipped specs draw with seed 0), every
row starts from the particle's first state (the bath at rest) and is scored on the particle ``(Q, P)``:

- error: the median over conditions of ``|z(T) - z_ref(T)| / |z_ref(T)|`` at T = ``--t-end`` (z = (Q, P)), and the
  median of the maximum of the same over t = 1, 2, .., T;
- reference: SciPy DOP853 at rtol = atol = 1e-12 on the full system for N <= 10^3; for N = 10^4 the full-order
  model at a fine step (order 6: the exact-bath splitting composed by Yoshida at h = 0.01 for the harmonic bath,
  Verlet composed likewise at h = 0.01 for the chain);
- cost: the price of a row, as every study prices its rows (``vpintegrator.rollout.engine.price_seconds``, rule
  ``PRICE_OF``: the engine's thread-CPU seconds of the step map's start and its steps to T, batch 1, one condition),
  warm, the least over interleaved repeats (``vpintegrator.clock.meter``), divided by T. Each row is a step map of
  ``vpintegrator.rollout.gle`` (``BathStep``, ``GLEStep``: the rows ``vp-rollout`` and the memory study run) rolled
  out by the engine, so a row costs here what it costs on the memory page.

Rows: ``verlet h`` (the compiled O(N) Stormer-Verlet), ``split h`` (the exact-bath-flow splitting), ``coarse h``
(the coarse bath of ``KacZwanzig.coarse(T)``, by the splitting), ``-y6``: the same composed to order 6 (Yoshida, 7
sub-steps per step), ``gle h`` (the GLE row: the exact kernel fitted by
a sum of exponentials within 1e-7 of K(0), O(terms) per step) and ``gle-direct h`` (the same quadrature over the
whole history, O(n) per step); for the chain, ``verlet h`` and ``trunc h`` (the chain
truncated to 100 sites, also ``-y6``: the front of a disturbance from the particle has not returned from its wall
by T = 100).

    python scripts/bath_work_precision.py            # default: 3 sizes, 5 conditions (about 3 minutes here)
    python scripts/bath_work_precision.py --quick    # 2 sizes (10^2, 10^3), 3 conditions, < 1 minute
    python scripts/bath_work_precision.py --json out.json --figure out.png
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp

from vpintegrator.clock import meter
from vpintegrator.compiled.bath import bath_stepper
from vpintegrator.rollout import engine
from vpintegrator.rollout.engine import StepMap
from vpintegrator.rollout.gle import GLE_FIT_TOL, BathStep, GLEStep
from vpintegrator.systems import get_system, sample_initial_conditions


def reference(system: Any, y0: np.ndarray, t_end: float, fine: tuple[str, float] | None) -> np.ndarray:
    """The particle (rows, T + 1, 2) at t = 0, 1, .., T: DOP853 at 1e-12, or the compiled ``fine`` (method, h)."""
    n = system.N + 1
    steps = int(round(t_end))
    if fine is None:
        grid = np.arange(steps + 1, dtype=float)
        out = []
        for y in y0:
            sol = solve_ivp(system, (0.0, t_end), y, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=grid)
            out.append(sol.y[[0, n]].T)
        return np.array(out)
    method, h = fine
    per = int(round(1.0 / h))
    return bath_stepper(system, method, h).run(y0, steps * per)[:, ::per]


def score(states: np.ndarray, h: float, ref: np.ndarray) -> tuple[float, float]:
    """(median final relative error, median max-over-t relative error) of (rows, n + 1, 2) states of step h."""
    per = int(round(1.0 / h))
    z = states[:, ::per][:, : ref.shape[1]]
    err = np.linalg.norm(z - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
    return float(np.median(err[:, -1])), float(np.median(err[:, 1:].max(axis=1)))


def rows_for(system: Any, t_end: float, kind: str) -> dict[str, tuple[float, StepMap]]:
    """name -> (h, the row's step map: one particle state in, the particle's (Q, P) out)."""
    rows: dict[str, tuple[float, StepMap]] = {}
    for h in (0.4, 0.2, 0.1):
        rows[f"verlet {h}"] = (h, BathStep(system, "stormer_verlet", h))
    if kind == "kac_zwanzig":
        for h in (0.4, 0.2, 0.1, 0.05):
            rows[f"split {h}"] = (h, BathStep(system, "bath_splitting", h))
        for h in (0.5, 0.25):
            rows[f"split-y6 {h}"] = (h, BathStep(system, "bath_splitting_y6", h))
        coarse = system.coarse(t_end)  # (the bath lifted at rest for the coarse system, as coarse_bath+METHOD's)
        for h in (0.2, 0.1, 0.05):
            rows[f"coarse(M={coarse.N}) {h}"] = (h, BathStep(coarse, "bath_splitting", h))
        for h in (0.5, 0.25, 0.125):
            rows[f"coarse(M={coarse.N})-y6 {h}"] = (h, BathStep(coarse, "bath_splitting_y6", h))
        for h in (0.2, 0.1, 0.05, 0.025):
            rows[f"gle {h}"] = (h, GLEStep(system, h, fit=GLE_FIT_TOL))
        for h in (0.1, 0.05):
            rows[f"gle-direct {h}"] = (h, GLEStep(system, h))
    else:
        rows[f"verlet {0.05}"] = (0.05, BathStep(system, "stormer_verlet", 0.05))
        for h in (0.4, 0.2):
            rows[f"verlet-y6 {h}"] = (h, BathStep(system, "stormer_verlet_y6", h))
        short = get_system("particle_chain", N=min(system.N, 100), beta=system.beta, coupling=system.coupling)
        for h in (0.2, 0.1, 0.05):
            rows[f"trunc(N={short.N}) {h}"] = (h, BathStep(short, "stormer_verlet", h))
        for h in (0.4, 0.2, 0.1):
            rows[f"trunc(N={short.N})-y6 {h}"] = (h, BathStep(short, "stormer_verlet_y6", h))
    return rows


def priced(step: StepMap, window: np.ndarray, h: float, t_end: float) -> Callable[[], float]:
    """The meter's call of a row: one rollout of ``step`` from ``window`` to ``t_end``, its reading the row's price
    (``engine.price_seconds`` of the call's meta: the engine's seconds of the start and the steps)."""
    n_steps = int(round(t_end / h))
    return lambda: engine.price_seconds(engine.rollout(step, window, h, n_steps, blowup=np.inf).meta)


def arena(kind: str, sizes: list[int], n_cond: int, t_end: float, repeats: int) -> list[dict[str, Any]]:
    out = []
    for n_bath in sizes:
        system = get_system(kind, N=n_bath)
        y0 = sample_initial_conditions(system, "particle", n_cond, 1)
        tic = time.process_time()
        fine = None if n_bath <= 1000 else (("bath_splitting_y6", 0.01) if kind == "kac_zwanzig"
                                            else ("stormer_verlet_y6", 0.01))
        ref = reference(system, y0, t_end, fine)
        ref_seconds = time.process_time() - tic
        rows = rows_for(system, t_end, kind)
        window = y0[:, None][..., [0, system.N + 1]]  # (n_cond, 1, 2): the particle's first state
        results = {name: engine.rollout(step, window, h, int(round(t_end / h)), blowup=np.inf).y
                   for name, (h, step) in rows.items()}
        costs = meter({name: priced(step, window[:1], h, t_end) for name, (h, step) in rows.items()}, repeats=repeats)
        for name, (h, _step) in rows.items():
            final, worst = score(results[name], h, ref)
            out.append({"system": kind, "N": n_bath, "row": name, "h": h, "error_T": final, "error_max": worst,
                        "cpu_per_unit_time": costs[name].per(t_end), "setup_seconds": costs[name].setup_seconds,
                        "cost_of": engine.PRICE_OF,
                        "reference": "dop853 1e-12" if fine is None else f"{fine[0]} h={fine[1]}",
                        "reference_cpu": ref_seconds, "n_cond": n_cond, "t_end": t_end})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^2, 10^3 and 3 conditions (< 1 minute)")
    parser.add_argument("--sizes", type=str, default=None, help="comma list of N (default 100,1000,10000)")
    parser.add_argument("--n-cond", type=int, default=None, help="held-out conditions (default 5; --quick 3)")
    parser.add_argument("--t-end", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--systems", type=str, default="kac_zwanzig,particle_chain")
    parser.add_argument("--json", type=str, default=None, help="write the rows here")
    parser.add_argument("--figure", type=str, default=None, help="draw error against cost here (PNG/PDF)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("100,1000" if args.quick else "100,1000,10000")).split(",")]
    n_cond = args.n_cond or (3 if args.quick else 5)
    tic = time.process_time()
    load = os.getloadavg()
    rows = []
    for kind in args.systems.split(","):
        rows += arena(kind, sizes, n_cond, args.t_end, args.repeats)
    print("| system | N | row | h | error at T | max error on [0, T] | CPU s per unit time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['N']} | {r['row']} | {r['h']} | {r['error_T']:.2e} | {r['error_max']:.2e} | "
              f"{r['cpu_per_unit_time']:.2e} |")
    total = time.process_time() - tic
    print(f"\nT = {args.t_end}, {n_cond} held-out conditions (sampler particle, seed 1); median over conditions; "
          f"cost: the row's price (engine.price_seconds: {engine.PRICE_OF}), batch 1, thread CPU, warm, the least "
          f"of {args.repeats} interleaved repeats (vpintegrator.clock.meter); "
          f"process CPU {total:.0f} s; load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "load_start": load[0], "cpu_seconds": total}, f, indent=1)
    if args.figure:
        figure(rows, args.figure)


def figure(rows: list[dict[str, Any]], path: str) -> None:
    """Error at T against CPU per unit time: one panel per system, one marker per N, one line per row family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({r["system"] for r in rows})
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4.5), squeeze=False)
    markers = {n: m for n, m in zip(sorted({r["N"] for r in rows}), "os^Dv")}
    for ax, kind in zip(axes[0], kinds):
        families = sorted({(r["row"].rsplit(" ", 1)[0], r["N"]) for r in rows if r["system"] == kind})
        for i, (family, n) in enumerate(families):
            pts = sorted((-r["h"], r["cpu_per_unit_time"], r["error_T"]) for r in rows
                         if r["system"] == kind and r["N"] == n and r["row"].rsplit(" ", 1)[0] == family)
            _, x, y = zip(*pts)  # along the step, largest first
            color = f"C{sorted({f for f, _ in families}).index(family) % 10}"
            ax.loglog(x, y, marker=markers[n], color=color, label=f"{family}, N = {n}")
        ax.set(title=kind, xlabel="CPU s per unit time (batch 1)", ylabel="particle's relative error at T")
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=150)


if __name__ == "__main__":
    main()
