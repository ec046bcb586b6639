"""How far the exact delay map of observed windows is from volume preserving, measured on a data file.

For an observation ``C`` (``--observe``, e.g. q of the coupled oscillator) and a window of ``T`` observed
states with ``T * k = d`` numbers, the exact delay map ``(x_n .. x_{n+T-1}) -> (x_{n+1} .. x_{n+T})`` has
``log|det J| = log|det DO(z_{n+1})| - log|det DO(z_n)|`` (``vpintegrator.data.delay``): printed per step
(median, 90th percentile and max over the data's windows) and summed over the horizon (the window volume a
volume-preserving model of the window keeps and the true delay map does not). For a separable system the same
line is printed for the position form of Stormer-Verlet, whose delay map has det J = 1 exactly.

    python scripts/delay_volume.py DATA.h5 --observe q --n-traj 20 --n-states 101
"""

from __future__ import annotations

import argparse

import numpy as np

from vpintegrator.data import read_trajectories
from vpintegrator.data.delay import exact_delay_log_det, verlet_delay_jacobian
from vpintegrator.data.observation import resolve_observation


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a vp-gen file with the full state")
    ap.add_argument("--observe", default="q", help="the observation (q, p, z1,z2, 0,1)")
    ap.add_argument("--n-traj", type=int, default=20)
    ap.add_argument("--n-states", type=int, default=101)
    a = ap.parse_args(argv)
    data = read_trajectories(a.data, traj=np.arange(a.n_traj), steps=np.arange(a.n_states))
    system = data.system
    obs = resolve_observation(a.observe, data.dim, system.state_names, system.name)
    assert obs is not None
    T = data.dim // obs.dim
    ld = exact_delay_log_det(system, obs, data.y, data.dt, T)
    a_ld = np.abs(ld)
    print(f"{a.data}: {system.name} observed in {obs.describe()}, window T = {T}, h = {data.dt:g}, "
          f"{data.n_traj} trajectories x {data.n_states} states")
    print(f"exact delay map, |log det J| per step: median {np.median(a_ld):.3g}, p90 {np.quantile(a_ld, 0.9):.3g}, "
          f"max {a_ld.max():.3g}; |sum over the horizon| median {np.median(np.abs(ld.sum(1))):.3g}, "
          f"max over windows of |log det| of the T*k-window volume change from the start "
          f"{np.abs(np.cumsum(ld, 1)).max():.3g}")
    if getattr(system, "separable", False) and T == 2 and obs.spec == "q":
        J = verlet_delay_jacobian(system, data.y[:, :2, : obs.dim], data.dt)
        print(f"Stormer-Verlet position form, |det J - 1|: max {np.abs(np.linalg.det(J) - 1).max():.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
