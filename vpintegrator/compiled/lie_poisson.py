"""Compiled rigid-body rotation splittings (``vpintegrator.integrators.lie_poisson``) and their compositions.

One run loop serves ``rotation_splitting``, ``rotation_splitting_centred`` and every composition of them
(``<base>_tj4``, ``_suzuki4``, ``_y6`` or a user's ``Composition``): the plan is the method's rotation
sequence for the step size: axes ``comps`` (int64) and times ``coefs`` (float64, ``frac * (gamma * h)`` as
NumPy's sub-steps compute them, not merged); the rates ``w_k`` come from the system's inertia (``1 / I_k``,
centred or not) as in NumPy. Before the loop, rotations with rate 0 (the identity: the middle axis of the
default body, centred) are dropped, which changes no bit (cos 0 = 1, sin 0 = 0); every other operation is
NumPy's in NumPy's order, so the states equal the NumPy path's wherever ``math.sin``/``math.cos`` and
``np.sin``/``np.cos`` agree (they do on the test machine; the tests here compare with a tolerance). Merging
adjacent rotations about one axis (exact in arithmetic) would save 6 of Yoshida 6's 35 rotations but change
the rounding.

The contract is the one of ``vpintegrator.compiled.kernels``' run loops: ``run_rotations`` writes the states after steps 1..n
into ``out``, leaves the last state in ``y``, returns the count, and on a non-finite state at step k writes
it, stops and sets ``info[1] = 3`` (NONFINITE), ``info[2] = k``. ``plan`` and ``step_block``
are the hooks of ``vpintegrator.compiled.integrators.CompiledStepper``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import VPIntegratorError
from ._jit import jit
from .newton import BLOWN_UP, NONFINITE

#: plan ids (``mid``) of the rotation loops (kept clear of the ids of ``vpintegrator.compiled.kernels``)
ROTATIONS, ROTATIONS_CENTRED = 100, 101
MIDS = (ROTATIONS, ROTATIONS_CENTRED)


def plan(method, h: float) -> dict | None:
    """``{"mid", "comps", "coefs"}`` for a rotation splitting or a composition of one, else ``None``."""
    from ..integrators import get_integrator
    from ..integrators.lie_poisson import STRANG_ROTATIONS, CentredRotationSplitting, RotationSplitting

    exact = (RotationSplitting, CentredRotationSplitting)  # subclasses may change the step: not compiled
    gammas: tuple[float, ...] = (1.0,)
    if type(method) in exact:
        base = method
    else:
        name, g = getattr(method, "base", None), getattr(method, "gammas", None)
        if not isinstance(name, str) or g is None:
            return None
        try:
            base = get_integrator(name)
        except VPIntegratorError:
            return None
        if type(base) not in exact:
            return None
        gammas = tuple(float(v) for v in g)
    seq = [(axis, frac * (g * h)) for g in gammas for axis, frac in STRANG_ROTATIONS]  # NumPy's sub-step times
    return {"mid": ROTATIONS_CENTRED if base.centred else ROTATIONS,
            "comps": np.array([axis for axis, _ in seq], dtype=np.int64),
            "coefs": np.array([t for _, t in seq], dtype=np.float64)}


# --- kernels ---------------------------------------------------------------------------------------------
@jit
def rotation_rates(inertia, centred, w):
    """``w_k = 1 / I_k`` (minus their mean when ``centred``) into ``w`` (3,), as the NumPy rotation_rates."""
    w1, w2, w3 = 1.0 / inertia[0], 1.0 / inertia[1], 1.0 / inertia[2]
    if centred:
        mean = (w1 + w2 + w3) / 3.0
        w1, w2, w3 = w1 - mean, w2 - mean, w3 - mean
    w[0], w[1], w[2] = w1, w2, w3


@jit
def compress(w, comps, coefs, axes, ts):
    """The rotations with a nonzero rate, in order (a zero rate is the identity); returns how many."""
    m = 0
    for k in range(comps.size):
        axis = comps[k]
        if w[axis] != 0.0:
            axes[m] = axis
            ts[m] = coefs[k]
            m += 1
    return m


@jit
def run_rotations(inertia, centred, comps, coefs, y, n, out, info):
    """n steps of the rotation sequence (comps, coefs) from y (3,) into out (>= n, 3); see the module doc."""
    w = np.empty(3)
    rotation_rates(inertia, centred, w)
    axes = np.empty(comps.size, dtype=np.int64)
    ts = np.empty(comps.size)
    m = compress(w, comps, coefs, axes, ts)
    for k in range(m):  # angle per unit z_axis: (t h) w_axis, as NumPy's wt = t * rate
        ts[k] = ts[k] * w[axes[k]]
    lim2 = info[3]
    z0, z1, z2 = y[0], y[1], y[2]
    for k in range(n):  # the state in scalars; each rotation NumPy's operations in NumPy's order (same bits)
        for q in range(m):
            axis = axes[q]
            if axis == 0:
                theta = ts[q] * z0
                c, s = math.cos(theta), math.sin(theta)
                z1, z2 = c * z1 + s * z2, c * z2 - s * z1
            elif axis == 1:
                theta = ts[q] * z1
                c, s = math.cos(theta), math.sin(theta)
                z2, z0 = c * z2 + s * z0, c * z0 - s * z2
            else:
                theta = ts[q] * z2
                c, s = math.cos(theta), math.sin(theta)
                z0, z1 = c * z0 + s * z1, c * z1 - s * z0
        y[0], y[1], y[2] = z0, z1, z2
        out[k, 0], out[k, 1], out[k, 2] = z0, z1, z2
        nn = z0 * z0 + z1 * z1 + z2 * z2
        if not nn < lim2:  # not finite, or above the limit info[3] (the engine's blow-up rule; inf: off)
            finite = np.isfinite(z0) and np.isfinite(z1) and np.isfinite(z2)
            if not finite or nn > lim2:
                info[1] = NONFINITE if not finite else BLOWN_UP
                info[2] = k + 1
                return k + 1
    return n


# --- the CompiledStepper hooks ----------------------------------------------------------------------------
def step_block(stepper, y: np.ndarray, n: int, out: np.ndarray) -> int:
    """``CompiledStepper.step_block`` of a rotation plan (inputs already checked there)."""
    info = stepper._info
    info[:3] = 0.0
    info[0] = math.inf
    done = run_rotations(stepper.system.inertia, stepper.mid == ROTATIONS_CENTRED, stepper.comps, stepper.coefs,
                         y, int(n), out, info)
    stepper.status, stepper.failed_step = int(info[1]), int(info[2])
    stepper.failed_row, stepper.last_update = 0, float(info[0])
    return int(done)


__all__ = ["ROTATIONS", "ROTATIONS_CENTRED", "MIDS", "plan", "run_rotations", "step_block"]
