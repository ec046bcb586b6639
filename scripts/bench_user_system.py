"""A user's system at compiled speed (issue 91): ratios measured in one run, on the one meter.

Two rows sets, each timed warm on ``vpintegrator.clock.meter`` (one cold call, then the minimum of interleaved
rounds, thread CPU):

1. A user's copy of the rigid body (a ``System`` subclass written in this file, its field written once as
   ``field(p, x)``, as ``docs/own_system.md`` says) against the shipped ``rigid_body``: RK4, implicit midpoint and
   Gauss-Legendre 4 through ``vp.integrate`` (one trajectory, ``--steps`` steps). Also the same copy on the NumPy
   path (``compiled=False``: what every user's system cost before it compiled). The states must agree to 1e-12.
2. A user's 4-D separable Hamiltonian (Henon-Heiles, ``field_potential_gradient`` / ``field_kinetic_gradient``):
   Stormer-Verlet through ``vp.integrate`` against a lean numba loop of the same equations written here, as a user
   would write it (state in scalars, one force per step carried over).

    python scripts/bench_user_system.py [--steps 10000] [--repeats 7]

Targets (issue 91): user / shipped <= 1.5 for each method of (1); vp.integrate / lean loop <= 1.5 for (2).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numba
import numpy as np

import vpintegrator as vp
from vpintegrator.clock import meter
from vpintegrator.systems import System

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from user_systems import HenonHeiles  # noqa: E402  (the tests' user Hamiltonian, given by its split)


@dataclass(frozen=True)
class UserRigidBody(System):
    """The free rigid body as a user writes it (docs/own_system.md, "A system that compiles")."""

    inertia: tuple = (2.0, 1.0, 2.0 / 3.0)
    name: ClassVar[str] = "user_rigid_body"
    dim: ClassVar[int] = 3
    shear_splittable: ClassVar[bool] = True

    def field_params(self):
        i1, i2, i3 = self.inertia
        return np.array([(i2 - i3) / (i2 * i3), (i3 - i1) / (i3 * i1), (i1 - i2) / (i1 * i2)])

    @staticmethod
    def field(p, x):
        return (p[0] * x[1] * x[2], p[1] * x[0] * x[2], p[2] * x[0] * x[1])

    @staticmethod
    def field_jacobian(p, x):
        a, b, c = p[0], p[1], p[2]
        return ((0.0, a * x[2], a * x[1]), (b * x[2], 0.0, b * x[0]), (c * x[1], c * x[0], 0.0))


@numba.njit(cache=True)
def lean_verlet(lam, y0, h, n, out):
    """Stormer-Verlet (kick-drift-kick) on Henon-Heiles, state in scalars, the force carried to the next step."""
    q1, q2, v1, v2 = y0[0], y0[1], y0[2], y0[3]
    g1 = q1 + 2.0 * lam * q1 * q2
    g2 = q2 + lam * (q1 * q1 - q2 * q2)
    c = 0.5 * h
    for k in range(n):
        v1 = v1 - c * g1
        v2 = v2 - c * g2
        q1 = q1 + h * v1
        q2 = q2 + h * v2
        g1 = q1 + 2.0 * lam * q1 * q2
        g2 = q2 + lam * (q1 * q1 - q2 * q2)
        v1 = v1 - c * g1
        v2 = v2 - c * g2
        out[k, 0], out[k, 1], out[k, 2], out[k, 3] = q1, q2, v1, v2
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--numpy-steps", type=int, default=1_000, help="steps of the NumPy-path rows (slow)")
    args = parser.parse_args()
    n, dt = args.steps, 0.1
    user, y0 = UserRigidBody(), np.array([np.sin(1.1), 0.0, np.cos(1.1)])
    print(f"# 1. a user's rigid body vs the shipped one: vp.integrate, one trajectory, {n} steps of {dt}")
    print(f"{'method':<20}{'shipped s':>12}{'user s':>12}{'user/shipped':>14}{'NumPy s/step':>14}"
          f"{'NumPy/user':>12}{'max |diff|':>12}")
    for method in ("rk4", "implicit_midpoint", "gauss_legendre4"):
        a = vp.integrate(user, y0, dt, n, method=method).y
        b = vp.integrate("rigid_body", y0, dt, n, method=method).y
        cost = meter({"shipped": lambda m=method: vp.integrate("rigid_body", y0, dt, n, method=m),
                      "user": lambda m=method: vp.integrate(user, y0, dt, n, method=m)}, repeats=args.repeats)
        slow = meter({"numpy": lambda m=method: vp.integrate(user, y0, dt, args.numpy_steps, method=m, compiled=False)},
                     repeats=1)["numpy"].seconds / args.numpy_steps
        s, u = cost["shipped"].seconds, cost["user"].seconds
        print(f"{method:<20}{s:>12.3e}{u:>12.3e}{u / s:>14.2f}{slow:>14.3e}{slow * n / u:>12.0f}"
              f"{float(np.max(np.abs(a - b))):>12.1e}")
    hh, z0, h = HenonHeiles(), np.array([0.1, -0.2, 0.3, 0.1]), 0.05
    out = np.empty((n, 4))
    lean = lean_verlet(1.0, z0, h, n, out)
    ours = vp.integrate(hh, z0, h, n, method="stormer_verlet").y[0, 1:]
    cost = meter({"lean": lambda: lean_verlet(1.0, z0, h, n, out),
                  "vp.integrate": lambda: vp.integrate(hh, z0, h, n, method="stormer_verlet")}, repeats=args.repeats)
    print(f"\n# 2. a user's 4-D separable Hamiltonian (Henon-Heiles): Stormer-Verlet, {n} steps of {h}")
    print(f"lean numba loop {cost['lean'].seconds:.3e} s, vp.integrate {cost['vp.integrate'].seconds:.3e} s, "
          f"ratio {cost['vp.integrate'].seconds / cost['lean'].seconds:.2f}, "
          f"max |diff| {float(np.max(np.abs(ours - lean))):.1e}")


if __name__ == "__main__":
    main()
