"""The memory ladder on a system no study uses: Hénon–Heiles (4-dimensional, H = (p1² + p2²)/2 + (q1² + q2²)/2
+ q1² q2 − q2³/3), observed in its positions only, as a data-only file (``/t`` and ``/y`` = (q1, q2), written
with h5py: no system, no equations). Every fitted row of ``vp-rollout`` (``arx``, ``delay_dmd``, ``narx``,
``parrot``) at each window length T of ``--windows`` (``delay_sindy+rk4`` at the smallest), fitted on the file's default
training split (``--fit-on-data``) and scored on its test split against the file's own states; then a batch-1
run of each row (one test trajectory) for its seconds per step. Prints one table: the median relative error
at ``--t-score`` (past the longest window), the fit's process-CPU seconds (``fit_seconds``) and the batch-1
thread-CPU seconds per step (``seconds_per_step``), all read back from the rollout files.

    python scripts/memory_ladder_probe.py --out runs/memory_ladder            # a few minutes on one core
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np
from scipy.integrate import solve_ivp


def henon_heiles(t, y):
    q1, q2, p1, p2 = y
    return [p1, p2, -q1 - 2.0 * q1 * q2, -q2 - q1 * q1 + q2 * q2]


def energy(y):
    q1, q2, p1, p2 = y[..., 0], y[..., 1], y[..., 2], y[..., 3]
    return 0.5 * (p1**2 + p2**2 + q1**2 + q2**2) + q1**2 * q2 - q2**3 / 3.0


def initial_conditions(n: int, seed: int = 0, e_max: float = 0.1) -> np.ndarray:
    """``n`` states with energy in (0.02, e_max) (bounded motion below 1/6), by rejection."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        y = np.concatenate([rng.uniform(-0.35, 0.35, 2), rng.uniform(-0.4, 0.4, 2)])
        if 0.02 < energy(y) < e_max:
            out.append(y)
    return np.array(out)


def write_data_only(path: Path, n_traj: int, t_end: float, dt: float, seed: int = 0) -> Path:
    """The positions (q1, q2) of ``n_traj`` Hénon–Heiles trajectories (DOP853, rtol = atol = 1e-12), as a
    data-only file: ``/t`` and ``/y`` only."""
    t = dt * np.arange(int(round(t_end / dt)) + 1)
    y = np.empty((n_traj, t.size, 2))
    for i, y0 in enumerate(initial_conditions(n_traj, seed)):
        sol = solve_ivp(henon_heiles, (0.0, t[-1]), y0, method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12)
        y[i] = sol.y[:2].T
    with h5py.File(path, "w") as f:
        f["t"] = t
        f["y"] = y
    return path


ROWS = ("arx", "delay_dmd", "narx", "parrot")
#: delay SINDy runs at the smallest window only: its library grows as (T k)^D (poly3 of 16 delay components at
#: T = 8 already has 969 terms) and its validation grid with it
SINDY_ROW = "delay_sindy+rk4"


def run(data: Path, out: Path, T: int, t_end: float, rows: list[str], traj: list[int] | None = None) -> Path:
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    path = out / (f"T{T}.h5" if traj is None else f"T{T}_batch1.h5")
    run_rollouts(RolloutConfig(data=str(data), out=str(path), integrators=rows, fit_on_data=True,
                               context_len=T, t_end=t_end, reference="data", traj=traj),
                 log=lambda line: None, overwrite=True)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/memory_ladder")
    ap.add_argument("--windows", default="3,8,16")
    ap.add_argument("--n-traj", type=int, default=100)
    ap.add_argument("--t-end", type=float, default=40.0)
    ap.add_argument("--dt", type=float, default=0.2)
    ap.add_argument("--t-score", type=float, default=10.0)
    args = ap.parse_args(argv)
    from vpintegrator.data import read_rollout

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = write_data_only(out / "henon_heiles_q.h5", args.n_traj, args.t_end, args.dt)
    k_score = int(round(args.t_score / args.dt))
    lines = [f"Hénon–Heiles observed in (q1, q2), data-only file {data} ({args.n_traj} trajectories, h = {args.dt:g}, "
             f"t <= {args.t_end:g}); median relative error at t = {args.t_score:g} over the test split",
             "| row | T | error at t = %g | fit CPU s | batch-1 s/step | fitted |" % args.t_score,
             "|---|---|---|---|---|---|"]
    windows = sorted(int(w) for w in args.windows.split(","))
    for T in windows:
        rows = [*ROWS, *([SINDY_ROW] if T == windows[0] else [])]
        ro = read_rollout(run(data, out, T, args.t_end, rows))
        one = read_rollout(run(data, out, T, args.t_end, rows, traj=[int(ro.traj_index[0])]))
        for row in rows:
            err = ro.metrics[row].rel_error[:, k_score]
            meta, meta1 = ro.methods[row].meta, one.methods[row].meta
            what = ", ".join(f"{key.split('_', 1)[1]} {meta[key]}" for key in
                             ("memory_ridge", "memory_rank", "memory_library", "memory_n_coefficients",
                              "sindy_library", "sindy_n_terms") if key in meta)
            fit = meta.get("fit_seconds", float("nan"))
            lines.append(f"| {row} | {T} | {np.median(err):.3g} | {fit:.3g} | {meta1['seconds_per_step']:.3g} | "
                         f"{what or '-'} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
