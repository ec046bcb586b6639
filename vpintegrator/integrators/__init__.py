"""Classical one-step integrators, vectorised over a batch of states, float64, with a method registry.

Every method follows the [`Integrator`][vpintegrator.integrators.Integrator] contract (``step``, ``step_jacobian`` with an analytic
Jacobian, ``supports``, metadata in ``info``); [`list_methods`][vpintegrator.integrators.list_methods] and [`describe_methods`][vpintegrator.integrators.describe_methods] give the
metadata of every registered method (also ``vp-rollout --list-methods``).

Modules: ``base`` (contract, metadata), ``registry`` (names -> methods), ``newton`` (Newton helpers), ``coefficients``
(every method's coefficients, written once), ``explicit`` (euler, rk4), ``implicit`` (implicit
midpoint, Gauss-Legendre of any stage count), ``splitting`` (Stormer-Verlet, the shear splittings),
``lie_poisson`` (the rigid body's exact-rotation splittings), ``exponential`` (Strang splitting with a lattice's
linear part exact), ``composition`` (triple jump, Suzuki, Yoshida 6
of a symmetric base; [`register_compositions`][vpintegrator.integrators.register_compositions] for a user's own symmetric method);
[`integrate`][vpintegrator.data.integration.integrate] (in ``data``: it returns a Trajectories) runs one on a batch.

| family      | methods                                                        | preserves                          |
|-------------|----------------------------------------------------------------|------------------------------------|
| explicit RK | euler (1), rk4 (4)                                             | nothing                            |
| Gauss       | implicit_midpoint (2), gauss_legendre2/4/6/8 (2s)              | symplectic, quadratic invariants   |
| splitting   | stormer_verlet (2, separable H)                                | symplectic, volume                 |
| splitting   | splitting (2), splitting_mclachlan2 (2), splitting_blanes_moan4 | volume exactly (shear flows)      |
| splitting   | rotation_splitting, rotation_splitting_centred (2, rigid body) | Casimir, Poisson map, volume exactly |
| splitting   | exponential_splitting (2, lattices: linear part exact)         | symplectic, volume                 |
| composition | <base>_tj4 (4), <base>_suzuki4 (4), <base>_y6 (6)               | what the base preserves            |

Symplectic maps preserve phase-space volume of canonical Hamiltonian systems (the coupled oscillator:
det J = 1 to rounding), but the rigid body is Lie-Poisson, not canonical: there implicit midpoint has
det J = 1 + (h^3/2) abc z1 z2 z3 + O(h^5) (abc = -1/4 by default), up to 1.9e-4 from 1 at h = 0.2 on
the unit sphere (Gauss-Legendre 4: ~1e-11).
"""

from __future__ import annotations

from .base import NEEDS, Integrator, MethodInfo, check_dt
from .newton import NotConverged, eye_like, newton_solve
from .registry import (describe_methods, get_integrator, list_integrators, list_methods, register_integrator,
                       supported_integrators)
from .composition import SCHEMES, Composition, compositions, register_compositions
from .explicit import RK4, ExplicitEuler, ExplicitRungeKutta
from .implicit import GaussLegendre, ImplicitMidpoint, gauss_legendre_tableau
from .splitting import SPLITTINGS, LieTrotterComposition, ShearSplitting, StormerVerlet
from .lie_poisson import CentredRotationSplitting, RotationSplitting
from .exponential import ExponentialSplitting

#: the symmetric order-2 methods every composition scheme is registered for
COMPOSITION_BASES = ("implicit_midpoint", "splitting", "stormer_verlet", "rotation_splitting",
                     "rotation_splitting_centred", "exponential_splitting")


def _register_builtin() -> None:
    # the historical six first (their order is what error messages list first)
    for method in (ExplicitEuler(), RK4(), ImplicitMidpoint(), GaussLegendre(stages=2), StormerVerlet(),
                   ShearSplitting()):
        register_integrator(method)
    for s in (1, 3, 4):
        register_integrator(GaussLegendre(stages=s))
    for method in SPLITTINGS:
        register_integrator(method)
    register_integrator(RotationSplitting())
    register_integrator(CentredRotationSplitting())
    register_integrator(ExponentialSplitting())
    for method in compositions(COMPOSITION_BASES):
        register_integrator(method)


_register_builtin()

__all__ = [
    "Integrator",
    "MethodInfo",
    "ExplicitRungeKutta",
    "ExplicitEuler",
    "RK4",
    "ImplicitMidpoint",
    "GaussLegendre",
    "StormerVerlet",
    "ShearSplitting",
    "LieTrotterComposition",
    "RotationSplitting",
    "CentredRotationSplitting",
    "ExponentialSplitting",
    "Composition",
    "SCHEMES",
    "COMPOSITION_BASES",
    "gauss_legendre_tableau",
    "get_integrator",
    "list_integrators",
    "supported_integrators",
    "list_methods",
    "describe_methods",
    "register_integrator",
    "register_compositions",
    "check_dt",
]
