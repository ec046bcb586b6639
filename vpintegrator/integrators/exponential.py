"""Strang splitting with the linear part solved exactly: the classical large-step method of the lattices.

For a system ``H = H_lin + V_nl(q)`` whose quadratic part ``H_lin`` has an exact flow (a
[`Lattice`][vpintegrator.systems.lattice.Lattice]: ``linear_flow``, by the DFT on a ring or the sine transform
with fixed ends, and ``nonlinear_gradient``, the force of the rest)::

    p½ = p - h/2 V_nl'(q);   (q1, p1*) = exp(h X_lin) (q, p½);   p1 = p1* - h/2 V_nl'(q1)

Symplectic (a composition of exact Hamiltonian flows), symmetric, order 2 in h, and exact on the linear part:
no step-size limit from the lattice's fastest mode (Stormer-Verlet's ``h < 2 / omega_max``), so its error is
that of the nonlinear remainder alone; one step costs two forces and two pairs of FFTs (O(N log N)).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import Integrator


class ExponentialSplitting(Integrator):
    """Strang splitting ``kick(h/2) o exact linear flow(h) o kick(h/2)`` (module docstring); needs a system with
    ``linear_part`` (the lattices ``toda`` and ``fpu_beta``)."""

    name: ClassVar[str] = "exponential_splitting"
    order: ClassVar[int] = 2
    symplectic: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    preserves_volume: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ("linear_part",)
    description: ClassVar[str] = "Strang splitting, the linear part's flow exact (FFT / sine transform) and nonlinear kicks"
    family: ClassVar[str] = "splitting"

    def _step(self, system, y, h):
        n = y.shape[1] // 2
        q, p = y[:, :n], y[:, n:]
        p = p - 0.5 * h * system.nonlinear_gradient(q)
        q1, p1 = system.linear_flow(q, p, h)
        p1 = p1 - 0.5 * h * system.nonlinear_gradient(q1)
        return np.concatenate([q1, p1], axis=1)

    def _step_jacobian(self, system, y, h):
        n = y.shape[1] // 2
        q, p = y[:, :n], y[:, n:]
        eye = np.eye(y.shape[1])
        dq, dp = np.broadcast_to(eye[:n], (y.shape[0],) + eye[:n].shape), eye[n:]
        p_half = p - 0.5 * h * system.nonlinear_gradient(q)
        dp_half = dp - 0.5 * h * system.nonlinear_hessian(q) @ dq
        # the linear flow is linear: apply it to each tangent column (the last axis is the lattice's)
        tq, tp = system.linear_flow(np.swapaxes(dq, 1, 2), np.swapaxes(dp_half, 1, 2), h)
        dq1, dp1 = np.swapaxes(tq, 1, 2), np.swapaxes(tp, 1, 2)
        q1, _ = system.linear_flow(q, p_half, h)
        dp1 = dp1 - 0.5 * h * system.nonlinear_hessian(q1) @ dq1
        return np.concatenate([dq1, dp1], axis=1)
