"""Compiled explicit steps and the run loops (one compiled loop per method) of the single-trajectory steppers.

A run loop advances one state ``y`` (dim,) by ``n`` steps of size ``h``, writes the states after steps
1..n into ``out`` (>= n, dim), leaves the last good state in ``y`` and returns how many states it wrote.
It stops early on a failure and records it in ``info`` (float64 (4,)): ``info[1]`` the status
(``vpintegrator.compiled.newton``: 1 no Newton convergence, 2 singular Newton matrix, 3 non-finite state, 4 a
state whose squared norm is above ``info[3]``, the engine's blow-up limit squared: inf turns it off), ``info[2]`` the
1-based step that failed, ``info[0]`` the last Newton update. A non-finite state is written (it counts in
the return value); a Newton failure writes nothing for its step.

Method ids (``METHODS``): 0 an explicit Runge-Kutta method of any tableau (the plan's ``etab``), 2
implicit_midpoint, 3 gauss_legendre (any s), 4 stormer_verlet (planned here, stepped only by its lean loop: every
separable system with a kernel is a shipped one), 6 a sequence of exact shears ``y_i += c f_i(y)`` given
as arrays (components, coefficients) computed once for the step size (every shear splitting, Strang's
``splitting`` included, and the compositions of shear sequences). Compositions run a base method id with substeps ``gamma_i h``.
"""

from __future__ import annotations

import numpy as np

from . import lean
from ._jit import jit
from .lean import step_implicit_midpoint
from .newton import BLOWN_UP, NONFINITE, OK, step_gauss_legendre
from .systems import vector_field

EXPLICIT, IMPLICIT_MIDPOINT, GAUSS_LEGENDRE, STORMER_VERLET, SHEARS = 0, 2, 3, 4, 6
METHODS = {"explicit": EXPLICIT, "implicit_midpoint": IMPLICIT_MIDPOINT, "gauss_legendre": GAUSS_LEGENDRE,
           "stormer_verlet": STORMER_VERLET, "shears": SHEARS}


# --- explicit steps (scratch: the last rows of ws) ----------------------------------------------------
@jit
def step_explicit(kid, p, y, h, y1, ws, tab):
    """The explicit Runge-Kutta method of tableau ``tab = (a, b, scale)`` (``integrators.coefficients``): stage i
    in row top - 1 - i of ws, its input in row top - 1 - s."""
    a, b, scale = tab
    d, s, top = y.size, len(b), ws.shape[0]
    x = ws[top - 1 - s, :d]
    for i in range(s):
        for q in range(d):
            x[q] = y[q]
        for j in range(i):
            if a[i][j] != 0.0:
                c, k = a[i][j] * h, ws[top - 1 - j]
                for q in range(d):
                    x[q] = x[q] + c * k[q]
        vector_field(kid, p, x, ws[top - 1 - i])
    w = h / scale
    for q in range(d):
        acc = b[0] * ws[top - 1, q]
        for i in range(1, s):
            acc = acc + b[i] * ws[top - 1 - i, q]
        y1[q] = y[q] + w * acc
    return OK


@jit
def step_shears(kid, p, y, comps, coefs, y1, ws):
    """The shears ``y_i += c f_i(y)`` for (i, c) in zip(comps, coefs), in order (coefficients include h)."""
    f = ws[ws.shape[0] - 1]
    for i in range(y.size):
        y1[i] = y[i]
    for k in range(comps.size):
        comp = comps[k]
        vector_field(kid, p, y1, f)
        y1[comp] += coefs[k] * f[comp]
    return OK


@jit
def step_any(mid, kid, p, y, h, y1, ws, m, a, b, c, tol, max_iter, info, comps, coefs, etab):
    """One step of method ``mid`` (the composition and batched loops dispatch through this).

    For ``SHEARS`` the coefficients ``coefs`` already hold the step size (``h`` is ignored); ``etab`` is the
    explicit tableau ``(a, b, scale)`` (arrays) of ``EXPLICIT``.
    """
    if mid == SHEARS:
        return step_shears(kid, p, y, comps, coefs, y1, ws)
    if mid == EXPLICIT:
        return step_explicit(kid, p, y, h, y1, ws, etab)
    if mid == IMPLICIT_MIDPOINT:
        return step_implicit_midpoint(kid, p, y, h, y1, ws, m, tol, max_iter, info)
    return step_gauss_legendre(kid, p, y, h, y1, ws, m, a, b, c, tol, max_iter, info)


# --- run loops ------------------------------------------------------------------------------------------
# One loop per method on purpose: running plain methods through run_composition (step_any per step)
# gives the same numbers but measured 1.9x (RK4), 2.5x (splitting), 1.4x (implicit midpoint) slower.
@jit
def _commit(y, y1, out, k, info):
    """Copy y1 into y and out[k]; False (and status NONFINITE, or BLOWN_UP when its squared norm is above
    ``info[3]``, at step k + 1) if y1 is not finite or above that limit."""
    finite = True
    nn = 0.0
    for i in range(y.size):
        v = y1[i]
        y[i] = v
        out[k, i] = v
        nn += v * v
        if not np.isfinite(v):
            finite = False
    if not finite:
        info[1] = NONFINITE
        info[2] = k + 1
    elif nn > info[3]:
        info[1] = BLOWN_UP
        info[2] = k + 1
        return False
    return finite


@jit
def _fail(status, k, info):
    info[1] = status
    info[2] = k + 1
    return k


@jit
def run_explicit(kid, p, y, h, n, out, ws, info, tab):
    y1 = np.empty_like(y)
    for k in range(n):
        step_explicit(kid, p, y, h, y1, ws, tab)
        if not _commit(y, y1, out, k, info):
            return k + 1
    return n


@jit
def run_shears(kid, p, y, comps, coefs, n, out, ws, info):
    y1 = np.empty_like(y)
    for k in range(n):
        step_shears(kid, p, y, comps, coefs, y1, ws)
        if not _commit(y, y1, out, k, info):
            return k + 1
    return n


@jit
def run_implicit(mid, kid, p, y, h, n, out, ws, m, a, b, c, tol, max_iter, info):
    """Implicit midpoint (``mid`` IMPLICIT_MIDPOINT) or Gauss-Legendre of tableau (a, b, c), by the exact rule."""
    y1 = np.empty_like(y)
    for k in range(n):
        if mid == IMPLICIT_MIDPOINT:
            st = step_implicit_midpoint(kid, p, y, h, y1, ws, m, tol, max_iter, info)
        else:
            st = step_gauss_legendre(kid, p, y, h, y1, ws, m, a, b, c, tol, max_iter, info)
        if st != OK:
            return _fail(st, k, info)
        if not _commit(y, y1, out, k, info):
            return k + 1
    return n


@jit
def run_composition(base, gammas, kid, p, y, h, n, out, ws, m, a, b, c, tol, max_iter, info, comps, coefs, etab):
    """Each step: base steps of size ``gammas[i] * h`` in order (``gammas`` sum to 1)."""
    u = np.empty_like(y)
    v = np.empty_like(y)
    for k in range(n):
        for i in range(y.size):
            u[i] = y[i]
        for g in range(gammas.size):
            st = step_any(base, kid, p, u, gammas[g] * h, v, ws, m, a, b, c, tol, max_iter, info, comps, coefs, etab)
            if st != OK:
                return _fail(st, k, info)
            for i in range(y.size):
                u[i] = v[i]
        if not _commit(y, u, out, k, info):
            return k + 1
    return n


# --- the lean loops over the rows of a batch (each row: the batch-1 loop, the same states bit for bit) ---------
@jit
def rows_explicit(tag, pp, ys, h, n, out, gammas, infos, every):
    done = np.zeros(ys.shape[0], dtype=np.int64)
    for r in range(ys.shape[0]):
        done[r] = lean.run_explicit(tag, pp, ys[r], h, n, out[r], gammas, infos[r], every)
    return done


@jit
def rows_verlet(fa, cols, watch, ys, h, gammas, n, out, infos, f, every):
    done = np.zeros(ys.shape[0], dtype=np.int64)
    for r in range(ys.shape[0]):
        done[r] = lean.run_verlet(fa, cols, watch, ys[r], h, gammas, n, out[r], infos[r], f, every)
    return done


@jit
def rows_shears(pp, ys, comps, coefs, n, out, infos, every):
    done = np.zeros(ys.shape[0], dtype=np.int64)
    for r in range(ys.shape[0]):
        done[r] = lean.run_shears(pp, ys[r], comps, coefs, n, out[r], infos[r], every)
    return done


@jit
def rows_implicit(tag, pp, p, ys, h, n, out, gammas, tol, max_iter, infos, ws, m, ta, tb, tc, tab, every):
    done = np.zeros(ys.shape[0], dtype=np.int64)
    for r in range(ys.shape[0]):
        done[r] = lean.run_implicit(tag, pp, p, ys[r], h, n, out[r], gammas, tol, max_iter, infos[r], ws, m, ta, tb,
                                    tc, tab, every)
    return done


__all__ = ["METHODS", "rows_explicit", "rows_shears", "rows_implicit", "step_any", "run_explicit", "run_shears",
           "run_implicit", "run_composition"]
