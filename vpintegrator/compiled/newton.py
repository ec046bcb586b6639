"""Compiled implicit steps: s-stage Gauss-Legendre, Newton as in the NumPy code (the exact rule: the generic loops'
step and the lean loops' fallback), and the Newton pieces every compiled implicit step shares (NumPy's scale, stopping
test and update norm, the pivoted LU; implicit midpoint's exact rule is ``compiled.lean``'s ``ArrayMidpoint``).

Mirrors ``vpintegrator.integrators`` (``_Newton``, ``ImplicitMidpoint``, ``GaussLegendre``) on one
state: the same start guess (explicit Euler for the midpoint, ``Z_i = h c_i f(y)`` for the stages), the
same update (a full Newton step with the system Jacobian at the current iterate), the same test
(``e <= tol * scale``, or stalled at the rounding floor: ``e <= 1e3 tol scale`` and ``e >= prev / 2``,
with ``e = max |delta|`` and non-finite ``e`` read as ``inf``, ``scale = max(1, |y|_inf)``), the same
``max_iter``. The linear solve is LU with partial pivoting (LAPACK's rule); an exactly zero pivot is the
"singular Newton matrix" failure.

Return codes of the step functions: 0 converged, 1 no convergence in ``max_iter`` (``info[0]`` = last
update), 2 singular Newton matrix; the run loops add 3 (a state that is not finite) and 4 (a state whose squared
norm is above the limit ``info[3]``: the engine's blow-up rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from ._jit import jit
from .systems import jacobian, vector_field

OK, NOT_CONVERGED, SINGULAR, NONFINITE, BLOWN_UP = 0, 1, 2, 3, 4


@jit
def lu_solve(m, r, n):
    """Solve ``m[:n, :n] x = r[:n]`` in place (x in r, m overwritten); False if a pivot is exactly 0."""
    for k in range(n):
        piv = k
        best = abs(m[k, k])
        for i in range(k + 1, n):
            a = abs(m[i, k])
            if a > best:
                best = a
                piv = i
        if m[piv, k] == 0.0:
            return False
        if piv != k:
            for j in range(n):
                t = m[k, j]
                m[k, j] = m[piv, j]
                m[piv, j] = t
            t = r[k]
            r[k] = r[piv]
            r[piv] = t
        inv = 1.0 / m[k, k]
        for i in range(k + 1, n):
            l = m[i, k] * inv
            if l != 0.0:
                for j in range(k + 1, n):
                    m[i, j] -= l * m[k, j]
                r[i] -= l * r[k]
    for k in range(n - 1, -1, -1):
        s = r[k]
        for j in range(k + 1, n):
            s -= m[k, j] * r[j]
        r[k] = s / m[k, k]
    return True


@jit
def update_norm(delta, n):
    """max |delta[:n]|, ``inf`` when any entry is not finite (NumPy: ``where(isfinite(e), e, inf)``)."""
    e = 0.0
    for i in range(n):
        a = abs(delta[i])
        if not (a <= np.inf) or a == np.inf:
            return np.inf
        if a > e:
            e = a
    return e


@jit
def scale_of(y):
    """max(1, |y|_inf) in NumPy's order (a NaN component leaves it); y an array or a tuple."""
    s = 1.0
    for i in range(len(y)):
        a = abs(y[i])
        if a > s:
            s = a
    return s


@jit
def converged(e, prev, scale, tol):
    """NumPy's stopping test: the update at the tolerance, or stalled at the rounding floor."""
    return (e <= tol * scale) or ((e <= 1e3 * tol * scale) and (e >= 0.5 * prev))


@jit
def step_gauss_legendre(kid, p, y, h, y1, ws, m, a, b, c, tol, max_iter, info):
    """s-stage Gauss collocation (tableau a (s, s), b (s,), c (s,)).

    ws (>= 3 s + 2, dim): rows [0, s) stage increments Z, [s, 2 s) stage values Y, [2 s, 3 s) f(Y),
    3 s the residual (length s dim, so ws must be (..., >= s dim) wide; see ``workspace``), 3 s + 1 f(y);
    m (>= s dim, >= s dim).
    """
    d = y.size
    s = b.size
    n = s * d
    f0 = ws[3 * s + 1]
    r = ws[3 * s]
    jac = ws[3 * s + 2 :]  # s * d rows of width >= d: the stage Jacobians, stacked
    vector_field(kid, p, y, f0)
    for i in range(s):
        for k in range(d):
            ws[i, k] = h * c[i] * f0[k]
    scale = scale_of(y)
    prev = np.inf
    e = np.inf
    for _ in range(max_iter):
        for j in range(s):
            for k in range(d):
                ws[s + j, k] = y[k] + ws[j, k]
            vector_field(kid, p, ws[s + j, :d], ws[2 * s + j, :d])
            jacobian(kid, p, ws[s + j, :d], jac[j * d : (j + 1) * d, :d])
        for i in range(s):
            for k in range(d):
                acc = 0.0
                for j in range(s):
                    acc += a[i, j] * ws[2 * s + j, k]
                r[i * d + k] = ws[i, k] - h * acc
        for i in range(s):
            for j in range(s):
                coef = -h * a[i, j]
                for k in range(d):
                    for l in range(d):
                        m[i * d + k, j * d + l] = coef * jac[j * d + k, l]
        for i in range(n):
            m[i, i] = m[i, i] + 1.0
        if not lu_solve(m, r, n):
            return SINGULAR
        for i in range(s):
            for k in range(d):
                ws[i, k] = ws[i, k] - r[i * d + k]
        e = update_norm(r, n)
        done = converged(e, prev, scale, tol)
        prev = e
        if done:
            for j in range(s):
                for k in range(d):
                    ws[s + j, k] = y[k] + ws[j, k]
                vector_field(kid, p, ws[s + j, :d], ws[2 * s + j, :d])
            for k in range(d):
                acc = 0.0
                for j in range(s):
                    acc += b[j] * ws[2 * s + j, k]
                y1[k] = y[k] + h * acc
            return OK
    info[0] = e
    return NOT_CONVERGED


def workspace(dim: int, stages: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Scratch arrays for every step kernel: ws (3 s + 2 + s dim + 8, max(s dim, dim)) and m (s dim, s dim)."""
    s = max(1, int(stages))
    width = s * dim
    return np.zeros((3 * s + 2 + s * dim + 8, width)), np.zeros((width, width))


def failure_error(stepper, t0: float, newton_matrix: str, nonfinite: tuple[int, ...] = (NONFINITE,)
                  ) -> VPIntegratorError | None:
    """The error ``integrate`` raises for a compiled stepper's last failure, from its ``status``, ``failed_step``,
    ``failed_row``, ``dt``, ``name``, ``max_iter`` and ``last_update`` (None when the last call succeeded);
    ``newton_matrix`` names the matrix a SINGULAR status found singular, ``nonfinite`` the statuses told as a
    non-finite state."""
    k, h, name, row = stepper.failed_step, stepper.dt, stepper.name, stepper.failed_row
    if stepper.status in nonfinite:
        return VPIntegratorError(f"{name}: trajectory {row} became non-finite at step {k} (t = {t0 + k * h:g}); "
                                 "reduce dt or use a stable method")
    if stepper.status == NOT_CONVERGED:
        detail = (f"Newton did not converge in {stepper.max_iter} iterations for batch item {row} "
                  f"(last update {stepper.last_update:.3g}); reduce dt or raise max_iter")
    elif stepper.status == SINGULAR:
        detail = f"the Newton matrix {newton_matrix} is singular for batch item {row}; reduce dt"
    else:
        return None
    return VPIntegratorError(f"{name}: step {k} (t = {t0 + (k - 1) * h:g} -> {t0 + k * h:g}): {detail}")


def check_block(dim: int, y: Any, n: int, out: Any, contiguous: bool = False) -> None:
    """A stepper's ``step_block`` arguments: y float64 (dim,) (C-contiguous where ``contiguous``), out (>= n, dim)."""
    if not (isinstance(y, np.ndarray) and y.dtype == np.float64 and y.shape == (dim,)
            and (y.flags.c_contiguous or not contiguous) and isinstance(out, np.ndarray) and out.dtype == np.float64
            and out.ndim == 2 and out.shape[0] >= n >= 0 and out.shape[1] == dim):
        raise VPIntegratorError(f"step_block needs y float64{' contiguous' * contiguous} ({dim},) and out float64 (>= "
                                f"{n}, {dim}); got {getattr(y, 'shape', y)!r} and {getattr(out, 'shape', out)!r}")


def initial_states(y0: Any, dim: int) -> np.ndarray:
    """A compiled stepper's ``y0`` (dim,) or (n_traj, dim) as our own float64 rows, checked as ``integrate`` checks
    them (``vpintegrator.systems.initial_conditions.as_points``: its one-line errors)."""
    from ..systems.initial_conditions import as_points

    return as_points(y0, dim, "y0", rows="n_traj", point="initial condition")


def step_count(n_steps: Any) -> int:
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise VPIntegratorError(f"n_steps must be an int >= 0; got {n_steps!r}")
    return int(n_steps)


def rows_by_block(stepper, ys: np.ndarray, n: int, out: np.ndarray, infos: np.ndarray, every: int = 1) -> np.ndarray:
    """``stepper.step_block`` for every row of ``ys`` in turn (every ``every``-th state kept), each row's norm limit
    the square root of ``infos[r, 3]``, its info (last update, status, failing step) into ``infos[r, :3]``: the
    states written."""
    done = np.zeros(ys.shape[0], dtype=np.int64)
    for r in range(ys.shape[0]):
        done[r] = stepper.step_block(ys[r], n, out[r], float(np.sqrt(infos[r, 3])), every)
        infos[r, :3] = stepper._info[:3]
    return done


__all__ = ["failure_error", "check_block", "initial_states", "step_count", "rows_by_block", "lu_solve", "scale_of",
           "converged", "update_norm", "step_gauss_legendre", "workspace",
           "OK", "NOT_CONVERGED", "SINGULAR", "NONFINITE"]
