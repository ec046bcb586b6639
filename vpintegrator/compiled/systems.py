"""Compiled vector fields and Jacobians of the shipped systems, parameters passed as a float64 array.

One kernel serves every parameter set of a system: the system is a small integer ``kid`` and its
parameters a float64 array ``p`` (``system_kernel`` maps a [`System`][vpintegrator.systems.System]
instance to both). The formulas are written term by term as in the NumPy classes (same operation order,
no fastmath), so they agree with ``System.vector_field`` / ``System.jacobian`` to rounding (~1e-16).

=====  ====================  ====================================  =====================================
kid    system                ``p``                                 extra kernels
=====  ====================  ====================================  =====================================
0      rigid_body            (a, b, c) = ``RigidBody.coefficients``
1      coupled_oscillator    (m1, m2, k1, k2, k)                   ``potential_gradient``, ``kinetic_gradient``
2      volterra              (none, an empty array)
3      abc_flow              (A, B, C)
4      rigid_body_exp        (a, b, c, epsilon)
100    a learned field       its networks (``learned_field``)
=====  ====================  ====================================  =====================================

User-defined systems (and subclasses of the shipped ones, which may override the equations) are not
compiled: ``system_kernel`` returns ``None`` and callers fall back to NumPy. A system with a
``compiled_kernel()`` method (the rollout's ``LearnedField``) gives its own ``(kid, p)``.
"""

from __future__ import annotations

import math

import numpy as np

from ._jit import jit
from .learned_field import learned_jacobian, learned_vector_field

RIGID_BODY, COUPLED_OSCILLATOR, VOLTERRA, ABC_FLOW, RIGID_BODY_EXP = 0, 1, 2, 3, 4
#: a learned vector field (``vpintegrator.compiled.learned_field``; its networks packed into ``p``)
LEARNED_FIELD = 100
KERNEL_NAMES = {RIGID_BODY: "rigid_body", COUPLED_OSCILLATOR: "coupled_oscillator", VOLTERRA: "volterra",
                ABC_FLOW: "abc_flow", RIGID_BODY_EXP: "rigid_body_exp", LEARNED_FIELD: "learned_field"}


def system_kernel(system) -> tuple[int, np.ndarray] | None:
    """``(kid, params)`` of a shipped system instance, or ``None`` (user system, subclass, unknown)."""
    from ..systems import ABCFlow, CoupledOscillator, RigidBody, RigidBodyExp, Volterra

    kind = type(system)
    kernel = getattr(system, "compiled_kernel", None)  # a learned field packs its own networks
    if callable(kernel):
        return kernel()
    if kind is RigidBody:
        return RIGID_BODY, np.array(system.coefficients, dtype=np.float64)
    if kind is CoupledOscillator:
        m1, m2 = system.m
        return COUPLED_OSCILLATOR, np.array([m1, m2, system.k1, system.k2, system.k], dtype=np.float64)
    if kind is Volterra:
        return VOLTERRA, np.zeros(0, dtype=np.float64)
    if kind is ABCFlow:
        return ABC_FLOW, np.array([system.A, system.B, system.C], dtype=np.float64)
    if kind is RigidBodyExp:
        return RIGID_BODY_EXP, np.array([*system.coefficients, system.epsilon], dtype=np.float64)
    return None


# --- the coupled oscillator's pieces (NumPy: vpintegrator/systems/coupled_oscillator.py) --------------
@jit
def _sigmoid(x):
    e = math.exp(-abs(x))
    if x >= 0:
        return 1.0 / (1.0 + e)
    return e / (1.0 + e)


@jit
def potential_gradient(kid, p, q, out):
    """``V'(q)`` into ``out`` (2,) (coupled oscillator only)."""
    k1, k2, k = p[2], p[3], p[4]
    q1, q2 = q[0], q[1]
    s = _sigmoid(q1)
    ds = s * (1.0 - s)
    d = q1 - q2
    out[0] = k1 * q1 + k * s * d + 0.5 * k * ds * d * d
    out[1] = k2 * q2 - k * s * d


@jit
def kinetic_gradient(kid, p, mom, out):
    """``T'(p) = p / m`` into ``out`` (2,) (coupled oscillator only)."""
    out[0] = mom[0] / p[0]
    out[1] = mom[1] / p[1]


@jit
def _potential_hessian(p, q1, q2):
    k1, k2, k = p[2], p[3], p[4]
    s = _sigmoid(q1)
    ds = s * (1.0 - s)
    dds = ds * (1.0 - 2.0 * s)
    d = q1 - q2
    h11 = k1 + k * s + 2.0 * k * ds * d + 0.5 * k * dds * d * d
    h12 = -k * s - k * ds * d
    h22 = k2 + k * s
    return h11, h12, h22


# --- the dispatchers ---------------------------------------------------------------------------------
@jit
def vector_field(kid, p, y, out):
    """``f(y)`` of system ``kid`` with parameters ``p`` into ``out``; y, out (dim,)."""
    if kid == RIGID_BODY:
        a, b, c = p[0], p[1], p[2]
        z1, z2, z3 = y[0], y[1], y[2]
        out[0] = a * z2 * z3
        out[1] = b * z1 * z3
        out[2] = c * z1 * z2
    elif kid == COUPLED_OSCILLATOR:
        k1, k2, k = p[2], p[3], p[4]
        q1, q2 = y[0], y[1]
        s = _sigmoid(q1)
        ds = s * (1.0 - s)
        d = q1 - q2
        g1 = k1 * q1 + k * s * d + 0.5 * k * ds * d * d
        g2 = k2 * q2 - k * s * d
        out[0] = y[2] / p[0]
        out[1] = y[3] / p[1]
        out[2] = -g1
        out[3] = -g2
    elif kid == VOLTERRA:
        y1, y2, y3 = y[0], y[1], y[2]
        out[0] = y1 * (y2 - y3)
        out[1] = y2 * (y3 - y1)
        out[2] = y3 * (y1 - y2)
    elif kid == RIGID_BODY_EXP:
        a, b, c, eps = p[0], p[1], p[2], p[3]
        z1, z2, z3 = y[0], y[1], y[2]
        e = math.exp(z1)
        out[0] = a * z2 * z3
        out[1] = b * z1 * z3 + eps * z3 * e
        out[2] = c * z1 * z2 - eps * z2 * e
    elif kid == LEARNED_FIELD:
        learned_vector_field(p, y, out)
    else:  # ABC_FLOW
        A, B, C = p[0], p[1], p[2]
        x, yy, z = y[0], y[1], y[2]
        out[0] = A * math.sin(z) + C * math.cos(yy)
        out[1] = B * math.sin(x) + A * math.cos(z)
        out[2] = C * math.sin(yy) + B * math.cos(x)


@jit
def jacobian(kid, p, y, out):
    """``df/dy`` of system ``kid`` into ``out`` (dim, dim), ``out[i, j] = d f_i / d y_j``."""
    if kid == RIGID_BODY:
        a, b, c = p[0], p[1], p[2]
        z1, z2, z3 = y[0], y[1], y[2]
        out[0, 0] = 0.0
        out[0, 1] = a * z3
        out[0, 2] = a * z2
        out[1, 0] = b * z3
        out[1, 1] = 0.0
        out[1, 2] = b * z1
        out[2, 0] = c * z2
        out[2, 1] = c * z1
        out[2, 2] = 0.0
    elif kid == COUPLED_OSCILLATOR:
        h11, h12, h22 = _potential_hessian(p, y[0], y[1])
        for i in range(4):
            for j in range(4):
                out[i, j] = 0.0
        out[0, 2] = 1.0 / p[0]
        out[1, 3] = 1.0 / p[1]
        out[2, 0] = -h11
        out[2, 1] = -h12
        out[3, 0] = -h12
        out[3, 1] = -h22
    elif kid == VOLTERRA:
        y1, y2, y3 = y[0], y[1], y[2]
        out[0, 0] = y2 - y3
        out[0, 1] = y1
        out[0, 2] = -y1
        out[1, 0] = -y2
        out[1, 1] = y3 - y1
        out[1, 2] = y2
        out[2, 0] = y3
        out[2, 1] = -y3
        out[2, 2] = y1 - y2
    elif kid == RIGID_BODY_EXP:
        a, b, c, eps = p[0], p[1], p[2], p[3]
        z1, z2, z3 = y[0], y[1], y[2]
        e = math.exp(z1)
        out[0, 0] = 0.0
        out[0, 1] = a * z3
        out[0, 2] = a * z2
        out[1, 0] = b * z3 + eps * z3 * e
        out[1, 1] = 0.0
        out[1, 2] = b * z1 + eps * e
        out[2, 0] = c * z2 - eps * z2 * e
        out[2, 1] = c * z1 - eps * e
        out[2, 2] = 0.0
    elif kid == LEARNED_FIELD:
        learned_jacobian(p, y, out)
    else:  # ABC_FLOW
        A, B, C = p[0], p[1], p[2]
        x, yy, z = y[0], y[1], y[2]
        out[0, 0] = 0.0
        out[0, 1] = -C * math.sin(yy)
        out[0, 2] = A * math.cos(z)
        out[1, 0] = B * math.cos(x)
        out[1, 1] = 0.0
        out[1, 2] = -A * math.sin(z)
        out[2, 0] = -B * math.sin(x)
        out[2, 1] = C * math.cos(yy)
        out[2, 2] = 0.0


@jit
def vector_field_rows(kid, p, ys, out):
    """``f`` on each row of ys (n, dim) into out (n, dim) (for tests and batched callers)."""
    for r in range(ys.shape[0]):
        vector_field(kid, p, ys[r], out[r])


@jit
def jacobian_rows(kid, p, ys, out):
    """``df/dy`` on each row of ys (n, dim) into out (n, dim, dim)."""
    for r in range(ys.shape[0]):
        jacobian(kid, p, ys[r], out[r])


__all__ = ["system_kernel", "vector_field", "jacobian", "potential_gradient", "kinetic_gradient",
           "vector_field_rows", "jacobian_rows", "KERNEL_NAMES"]
