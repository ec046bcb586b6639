"""Compiled full-order steppers of the lattices (``toda``, ``fpu_beta``): array loops at any number of sites.

The lean loops of ``vpintegrator.compiled.lean`` hold the state in a tuple of ``dim`` scalars, which numba
specialises per length: right for 3 or 4 components, impossible for 1600. A lattice
([`Lattice`][vpintegrator.systems.lattice.Lattice]) steps here instead, on float64 arrays, one pass over the
bonds per force (one ``exp`` per bond for Toda):

- ``stormer_verlet`` (kick-drift-kick) and every composition of it (``stormer_verlet_tj4``, ``_suzuki4``,
  ``_y6``: the sub-steps' fractions ``gammas``), the force at the end of one kick reused by the next: the package's
  one Verlet loop (``compiled.lean.run_verlet``) with the array state ops here, for a lattice and for PSD-Galerkin's
  reduced system of one, by its force (``force``);
- ``exponential_splitting`` (and its compositions): the nonlinear kicks compiled (``nonlinear_kick``, one pass over
  the bonds), the exact linear flow by one real FFT (DST-I with fixed ends) of (q, p) together and one inverse per
  (sub)step, with the modes' cos, sin / omega and omega sin computed once per step size (NumPy's
  ``Lattice.linear_flow`` computes them every step, by the same expressions);
- ``implicit_midpoint`` (and its compositions): the one compiled midpoint step (``compiled.lean``'s ``_midpoint``,
  its start, stopping and divergence tests) with the lattice as its rule (``LatticeMidpoint``): the N unknowns of
  the midpoint positions ``Q``, ``G(Q) = Q - q - h p / 2 + h^2 / 4 V'(Q) = 0``, Newton with the lattice's own
  structure, ``I + h^2 / 4 V''(Q)`` (cyclic) tridiagonal, by the Thomas algorithm (with Sherman-Morrison on a
  ring), O(N) per iteration; ``q1 = 2 Q - q``, ``p1 = p - h V'(Q)``. A failure is this loop's: NOT_CONVERGED or
  SINGULAR (``vpintegrator.compiled.newton``'s codes), the last good state kept (no dense fallback).

[`lattice_stepper`][vpintegrator.compiled.lattice.lattice_stepper] gives a stepper with the API of
``CompiledStepper`` (``step_block``, ``run``, ``run_batch``, ``status``, ``error``), which
``compiled_stepper`` returns for a lattice; ``integrate`` and the rollouts then use it as they use any compiled
stepper (at most ``SCALAR_MAX_BATCH`` trajectories, one after the other). Memory: the stepper holds a few
arrays of N floats; the caller's output array is checked by ``integrate`` before it is allocated.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from . import lean
from ._jit import HAVE_NUMBA, jit, njit
from ..integrators.base import every_kth
from .lean import NONE, inline_jit, run_verlet
from .newton import BLOWN_UP, NONFINITE, OK, check_block, failure_error, initial_states, rows_by_block, step_count
from .user import LATTICES, lattice_kind

__all__ = ["lattice_stepper", "LatticeStepper", "lattice_force", "run_verlet", "VERLET", "MIDPOINT", "TODA",
           "FPU_BETA", "force", "observe", "norm2"]

#: method ids of the lattice loops
VERLET, MIDPOINT, EXPONENTIAL = 0, 1, 2
#: the registered base methods the lattice loops run (and their compositions)
_METHODS = {"stormer_verlet": VERLET, "implicit_midpoint": MIDPOINT, "exponential_splitting": EXPONENTIAL}
#: as ``jit``, sums reassociated (numba ``fastmath={"reassoc"}``): a loop that sums vectorises, rounded as its lanes
reassoc_jit = njit(error_model="numpy", fastmath={"reassoc"}) if HAVE_NUMBA else jit
#: lattice kinds (``Lattice.kind``)
TODA, FPU_BETA = 0, 1


@jit
def _shipped_dphi(kind, par, r):
    if kind == TODA:
        return -par[0] * math.exp(-r)
    return r + par[0] * r * r * r


@jit
def _shipped_ddphi(kind, par, r):
    if kind == TODA:
        return par[0] * math.exp(-r)
    return 1.0 + 3.0 * par[0] * r * r


def _shipped_interior(kind, par, q, d):
    n = q.shape[0]
    if kind == TODA:  # the branch once per force, not per bond: each loop is one formula, vectorised
        for b in range(1, n):
            d[b] = _shipped_dphi(TODA, par, q[b] - q[b - 1])
    else:
        for b in range(1, n):
            d[b] = _shipped_dphi(FPU_BETA, par, q[b] - q[b - 1])


def _user_interior(kind, par, q, d):
    for b in range(1, q.shape[0]):
        d[b] = _dphi(kind, par, q[b] - q[b - 1])


if HAVE_NUMBA:  # a lattice's ``kind``: a shipped one's integer, or a user's lattice's tag (``compiled.user.lattice_kind``)
    from numba import types as _types
    from numba.extending import overload as _overload

    def _dphi(kind, par, r):
        """phi'(r) of the lattice ``kind`` (compiled code only)."""
        raise NotImplementedError("compiled code only")

    def _ddphi(kind, par, r):
        """phi''(r) of the lattice ``kind`` (compiled code only)."""
        raise NotImplementedError("compiled code only")

    def _interior(kind, par, q, d):
        """The interior bonds' phi' into d[1:N] (compiled code only)."""
        raise NotImplementedError("compiled code only")

    def _bond(shipped, which):
        def typer(kind, par, r):
            if isinstance(kind, _types.Integer):
                return lambda kind, par, r: shipped(kind, par, r)
            fn = LATTICES.get(getattr(kind, "instance_class", None), (None, None))[which]
            if fn is not None:
                return lambda kind, par, r: fn(par, r)
        return typer

    _overload(_dphi, inline="always")(_bond(_shipped_dphi, 0))
    _overload(_ddphi, inline="always")(_bond(_shipped_ddphi, 1))
    _overload(_interior, inline="always")(
        lambda kind, par, q, d: _shipped_interior if isinstance(kind, _types.Integer) else _user_interior)
else:  # pragma: no cover
    _dphi, _ddphi, _interior = _shipped_dphi, _shipped_ddphi, _shipped_interior


@inline_jit
def lattice_force(kind, periodic, par, q, g, d):
    """``g = dV/dq`` (N,) of the lattice ``kind`` at ``q`` (N,): ``phi'(r_b) - phi'(r_{b+1})`` per site, with
    ``d`` (N + 1,) scratch for the bonds' ``phi'`` (bond b between sites b-1 and b; one loop without a carried
    dependency, which numba vectorises, ``exp`` included)."""
    n = q.shape[0]
    _interior(kind, par, q, d)
    if periodic:
        d[0] = _dphi(kind, par, q[0] - q[n - 1])
        d[n] = d[0]
    else:
        d[0] = _dphi(kind, par, q[0])
        d[n] = _dphi(kind, par, -q[n - 1])
    for i in range(n):
        g[i] = d[i] - d[i + 1]


@jit
def nonlinear_kick(kind, periodic, par, d0, kappa, q, p, c, g, d):
    """``p -= c dV_nl/dq``: the force of the potential less its quadratic part, bond by bond
    ``psi'(r) = (phi'(r) - phi'(0)) - kappa r`` (``Lattice.nonlinear_gradient``'s order): the bonds' ``phi'`` of
    ``lattice_force`` (the one place they are written) less their affine part, g (N,) and d (N + 1,) scratch."""
    lattice_force(kind, periodic, par, q, g, d)
    n = q.shape[0]
    for b in range(1, n):
        d[b] = d[b] - d0 - kappa * (q[b] - q[b - 1])
    r0 = q[0] - q[n - 1] if periodic else q[0]
    d[0] = d[0] - d0 - kappa * r0
    d[n] = d[0] if periodic else d[n] - d0 - kappa * -q[n - 1]
    for i in range(n):
        p[i] = p[i] - c * (d[i] - d[i + 1])


@reassoc_jit
def norm2(y):
    """|y|^2 vectorised (a serial sum cost more than the force at N = 800, four partial sums 15-20 % of a step)."""
    s = 0.0
    for i in range(y.shape[0]):
        s += y[i] * y[i]
    return s


@jit
def _reduced_force(kind, periodic, par, phi, xi, f, q, g, d, hyper):
    """The force of PSD-Galerkin's reduced potential into f (k,). Without hyper-reduction (``hyper[0]`` empty)
    ``Phi^T V'(Phi xi)``: the full lattice's force at the lifted positions, projected (q, g (N,) and d (N + 1,)
    scratch). With it, ``hyper = (rows (m, k), weights (m,), K (k, k), (phi'(0), kappa))`` and the force is
    ``K xi + sum_b w_b psi'(rows_b . xi) rows_b`` (``vpintegrator.reduction.hyper``), O(k^2 + m k)."""
    rows, weights, stiff, aff = hyper
    k = xi.shape[0]
    if rows.shape[0] > 0:
        for j in range(k):
            s = 0.0
            for l in range(k):
                s += stiff[j, l] * xi[l]
            f[j] = s
        for b in range(rows.shape[0]):
            r = 0.0
            for j in range(k):
                r += rows[b, j] * xi[j]
            c = weights[b] * (_dphi(kind, par, r) - aff[0] - aff[1] * r)
            for j in range(k):
                f[j] += c * rows[b, j]
        return
    n = phi.shape[0]
    for i in range(n):
        s = 0.0
        for j in range(k):
            s += phi[i, j] * xi[j]
        q[i] = s
    lattice_force(kind, periodic, par, q, g, d)
    for j in range(k):
        f[j] = 0.0
    for i in range(n):
        gi = g[i]
        for j in range(k):
            f[j] += phi[i, j] * gi


def force(fa, x, f):
    """``f = dV/dx`` by the force arguments ``fa``: ``(kind, periodic, par, d)`` the lattice's own at its sites'
    positions x (``lattice_force``), ``(kind, periodic, par, phi, q, g, d, hyper)`` PSD-Galerkin's reduced one at the
    reduced positions x (``_reduced_force``); other modules register theirs (``vpintegrator.compiled.bath``: the
    particle + chain). Compiled code only: numba resolves it as it types a loop (a loop is compiled once per force, as
    if written for it; a branch on the force in the loop cost FPU-beta N = 200 15-25 %)."""
    raise NotImplementedError("compiled code only")


@inline_jit
def observe(cols, watch, y, out, k, limit2, every):
    """y[cols] (cols empty: the whole y), the state after step k + 1, into out[(k + 1) / every - 1] when ``every``
    divides k + 1 (every = 1: out[k]); its status: NONFINITE when a component of y[watch] is not finite, else OK
    (watch empty: every component, and BLOWN_UP when |y|^2 > limit2, ``norm2``)."""
    if every == 1 or (k + 1) % every == 0:
        row = out[k if every == 1 else (k + 1) // every - 1]  # no integer division at every = 1
        if cols.shape[0] == 0:
            for i in range(y.shape[0]):
                row[i] = y[i]
        for i in range(cols.shape[0]):
            row[i] = y[cols[i]]
    for i in range(watch.shape[0]):
        if not math.isfinite(y[watch[i]]):
            return NONFINITE
    if watch.shape[0] > 0:
        return OK
    s = norm2(y)
    return NONFINITE if not math.isfinite(s) else BLOWN_UP if s > limit2 else OK


if HAVE_NUMBA:  # pragma: no branch - without numba the loops are never run
    from numba import types
    from numba.extending import overload

    @overload(force, inline="always")
    def _force(fa, x, f):
        if len(fa) == 4:
            return lambda fa, x, f: lattice_force(fa[0], fa[1], fa[2], x, f, fa[3])
        if len(fa) == 8:
            return lambda fa, x, f: _reduced_force(fa[0], fa[1], fa[2], fa[3], x, f, fa[4], fa[5], fa[6], fa[7])
        return None

    def _array(fn, at=1):  # the one Verlet loop's state ops (``lean.run_verlet``) on an array state y = (x, v)
        return lambda impl: overload(fn, strict=False, inline="always")(  # (argument ``at``), in place
            lambda *a: impl if isinstance(a[at], types.Array) else None)

    _array(lean.verlet_state)(lambda fa, y: y)
    _array(lean.store, at=2)(lambda cols, watch, y, out, k, lim2, every: observe(cols, watch, y, out, k, lim2, every))

    @_array(lean.verlet_force)
    def _verlet_force(fa, y, f):  # the force at the positions y[:n], n = f.size, into f
        force(fa, y[:f.shape[0]], f)
        return f

    @_array(lean.kick_drift)
    def _kick_drift(fa, y, f, c, hs):
        n = f.shape[0]
        for i in range(n):  # kick and drift, one pass
            v = y[n + i] - c * f[i]
            y[n + i] = v
            y[i] = y[i] + hs * v
        return y

    @_array(lean.kick)
    def _kick(fa, y, f, c):
        n = f.shape[0]
        for i in range(n):
            y[n + i] = y[n + i] - c * f[i]
        return y


@jit
def _thomas(diag, off, rhs, x, cp, n0, n1):
    """Solve the symmetric tridiagonal system on rows n0..n1-1 (diag, off[i] between i and i+1) into x;
    cp scratch. False when a pivot is exactly 0."""
    piv = diag[n0]
    if piv == 0.0:
        return False
    cp[n0] = off[n0] / piv
    x[n0] = rhs[n0] / piv
    for i in range(n0 + 1, n1):
        piv = diag[i] - off[i - 1] * cp[i - 1]
        if piv == 0.0:
            return False
        cp[i] = off[i] / piv
        x[i] = (rhs[i] - off[i - 1] * x[i - 1]) / piv
    for i in range(n1 - 2, n0 - 1, -1):
        x[i] = x[i] - cp[i] * x[i + 1]
    return True


@jit
def _solve_structured(periodic, diag, off, rhs, x, ws):
    """Solve the (cyclic, when periodic: the corner ``off[n-1]`` between n-1 and 0) symmetric tridiagonal
    system; ws (>= 4, n + 1) scratch. False: singular."""
    n = diag.shape[0]
    if not periodic:
        return _thomas(diag, off, rhs, x, ws[0], 0, n)
    corner = off[n - 1]
    gam = -diag[0]
    d2 = ws[1]
    for i in range(n):
        d2[i] = diag[i]
    d2[0] = diag[0] - gam
    d2[n - 1] = diag[n - 1] - corner * corner / gam
    if not _thomas(d2, off, rhs, x, ws[0], 0, n):
        return False
    u = ws[2]
    z = ws[3]
    for i in range(n):
        u[i] = 0.0
    u[0] = gam
    u[n - 1] = corner
    if not _thomas(d2, off, u, z, ws[0], 0, n):
        return False
    den = 1.0 + z[0] + corner * z[n - 1] / gam
    if den == 0.0:
        return False
    fact = (x[0] + corner * x[n - 1] / gam) / den
    for i in range(n):
        x[i] = x[i] - fact * z[i]
    return True


#: implicit midpoint's rule on a lattice (``lean._midpoint``'s ``midpoint_start`` / ``_update`` / ``_state``, typed by
#: this class): the lattice (``kind``, ``periodic``, bond parameters ``par``) and the Newton's scratch, each (N,) but
#: ``ws`` (5, N + 1)
LatticeMidpoint = namedtuple("LatticeMidpoint", ["kind", "periodic", "par", "g", "big", "diag", "off", "rhs", "dq", "ws"])


def lattice_midpoint_start(rule, h, y):  # explicit Euler's y1 = y + h f(y): Q = q + h p / 2
    big = rule.big
    n = big.shape[0]
    for i in range(n):
        big[i] = y[i] + 0.5 * h * y[n + i]
    return big


def lattice_newton_update(rule, h, y, big):
    """A Newton update of the midpoint positions Q (``big``) in place: (solved, Q, e), e = max |dQ| (inf when not
    finite); ``G(Q) = Q - q - h p / 2 + h^2 / 4 V'(Q)``, its matrix ``I + h^2 / 4 V''(Q)`` (cyclic) tridiagonal."""
    kind, periodic, par, g, diag, off, rhs, dq, ws = (rule.kind, rule.periodic, rule.par, rule.g, rule.diag, rule.off,
                                                      rule.rhs, rule.dq, rule.ws)
    n = big.shape[0]
    c = 0.25 * h * h
    lattice_force(kind, periodic, par, big, g, ws[4])
    for i in range(n):
        rhs[i] = big[i] - y[i] - 0.5 * h * y[n + i] + c * g[i]
    # the Newton matrix I + c V''(Q): bond b between sites b-1 and b
    if periodic:
        for i in range(n):
            j = i + 1 if i + 1 < n else 0
            k = _ddphi(kind, par, big[j] - big[i])  # the bond between i and i+1 (mod n)
            off[i] = -c * k
        for i in range(n):
            diag[i] = 1.0 - off[i] - off[i - 1 if i > 0 else n - 1]
    else:
        k0 = _ddphi(kind, par, big[0])
        for i in range(n):
            k1 = _ddphi(kind, par, big[i + 1] - big[i]) if i + 1 < n else _ddphi(kind, par, -big[n - 1])
            diag[i] = 1.0 + c * (k0 + k1)
            off[i] = -c * k1
            k0 = k1
    if not _solve_structured(periodic, diag, off, rhs, dq, ws):
        return False, big, 0.0
    e = 0.0
    for i in range(n):
        big[i] = big[i] - dq[i]
        a = abs(dq[i])
        if a > e:
            e = a
    return True, big, e if math.isfinite(e) else math.inf


def lattice_midpoint_state(rule, h, y, big):  # in place: p1 = p - h V'(Q), q1 = 2 Q - q
    n = big.shape[0]
    lattice_force(rule.kind, rule.periodic, rule.par, big, rule.g, rule.ws[4])
    for i in range(n):
        y[n + i] = y[n + i] - h * rule.g[i]
        y[i] = 2.0 * big[i] - y[i]
    return y


if HAVE_NUMBA:  # pragma: no branch
    lean.midpoint_rule(LatticeMidpoint, lattice_midpoint_start, lattice_newton_update, lattice_midpoint_state)


@jit
def run_midpoint(rule, y, h, gammas, n_steps, out, info, tol, max_iter, keep, every):
    """Implicit midpoint (``lean._midpoint`` with the rule ``rule``, a ``LatticeMidpoint``; info[0] its last update)
    composed with ``gammas``, ``n_steps`` steps of y in place into out (as run_verlet); on a Newton failure
    (NOT_CONVERGED, or SINGULAR) y is the last good state (``keep`` scratch)."""
    n2 = y.shape[0]
    info[1] = 0.0
    info[2] = 0.0
    for k in range(n_steps):
        for i in range(n2):
            keep[i] = y[i]
        for j in range(gammas.shape[0]):
            st, _, info[0] = lean._midpoint(rule, gammas[j] * h, y, tol, max_iter, False)
            if st != OK:
                for i in range(n2):
                    y[i] = keep[i]
                info[1] = st
                info[2] = k + 1
                return k // every
        st = observe(NONE, NONE, y, out, k, info[3], every)
        if st != OK:
            info[1] = st
            info[2] = k + 1
            return (k + 1) // every
    return n_steps // every


def _plan(method: Any) -> tuple[int, np.ndarray] | None:
    """(method id, gammas) of a method the lattice loops run, else None."""
    name = getattr(method, "name", "")
    gammas, base = getattr(method, "gammas", None), getattr(method, "base", None)
    if gammas is not None and base is not None:
        inner = _METHODS.get(str(base))
        return None if inner is None else (inner, np.array([float(v) for v in gammas], dtype=np.float64))
    mid = _METHODS.get(name)
    return None if mid is None else (mid, np.ones(1))


def lattice_stepper(system: Any, method: Any, h: float) -> "LatticeStepper | None":
    """The compiled stepper of ``method`` on the lattice ``system`` with step ``h``, or None (a method without a
    lattice loop: the NumPy path runs). ``system`` may also be a reduced system that lifts to a lattice
    (``system.lattice_lift()`` gives the full lattice and a cotangent-lift basis Phi (N, k): PSD-Galerkin), which
    Stormer-Verlet and its compositions step here."""
    plan = _plan(method)
    if plan is None:
        return None
    lift = system.lattice_lift() if callable(getattr(system, "lattice_lift", None)) else None
    if lift is None and not hasattr(system, "kind"):
        return None  # a reduced system whose basis or full system has no loop here
    if lift is not None and plan[0] != VERLET:
        return None
    if plan[0] == EXPONENTIAL and not callable(getattr(system, "mode_frequencies", None)):
        return None
    return LatticeStepper(system, method, h, *plan, lift=lift)


class LatticeStepper:
    """A lattice's compiled stepper, with ``CompiledStepper``'s API (``step_block``, ``run``, ``run_batch``,
    ``status``, ``failed_step``, ``error``), run by the array loops of this module."""

    #: the kernel has run once in this process
    warm: bool = False

    def __init__(self, system: Any, method: Any, h: float, mid: int, gammas: np.ndarray,
                 lift: tuple[Any, np.ndarray, Any] | None = None) -> None:
        self.system, self.method, self.dt = system, method, float(h)
        self.name = method.name
        self.dim = int(system.dim)
        self.mid, self.gammas = int(mid), gammas
        self.base = -1
        lattice = system if lift is None else lift[0]
        #: the cotangent-lift basis (N, k) of a reduced system (PSD-Galerkin), else None
        self.phi = None if lift is None else np.ascontiguousarray(lift[1], dtype=np.float64)
        kind = lattice_kind(lattice)
        self.kind, self.periodic = (int(lattice.kind) if kind is None else kind), bool(lattice.periodic)
        self.params = np.ascontiguousarray(lattice.bond_params(), dtype=np.float64)
        self.sites = int(lattice.N)
        sampling = None if lift is None else lift[2]
        k = self.dim // 2
        #: the bond sampling's arrays (rows, weights, K, (phi'(0), kappa)); empty rows: none
        self.hyper = (np.zeros((0, k)), np.zeros(0), np.zeros((0, 0)), np.zeros(2)) if sampling is None else (
            np.ascontiguousarray(sampling.rows, dtype=np.float64), np.ascontiguousarray(sampling.weights, dtype=np.float64),
            np.ascontiguousarray(sampling.stiffness, dtype=np.float64),
            np.array([float(lattice.dphi(np.zeros(1))[0]), lattice.kappa]))
        self.tol, self.max_iter = float(getattr(method, "tol", 1e-15)), int(getattr(method, "max_iter", 50))
        if self.mid == EXPONENTIAL:  # per sub-step: the modes' (cos, sin / omega, omega sin), as linear_flow has them
            w = lattice.mode_frequencies()
            self._flows = [(np.cos(w * t), t * np.sinc(w * t / np.pi), w * np.sin(w * t))
                           for t in (float(g) * self.dt for g in gammas)]
            self._affine = (float(lattice.dphi(np.zeros(1))[0]), float(lattice.kappa))
        self._info = np.zeros(4)
        self._scratch()
        self.status, self.failed_step, self.failed_row, self.last_update = OK, 0, 0, math.inf
        self.warm = False

    def _scratch(self) -> None:
        n = self.sites
        self._f = np.zeros(self.dim // 2)  # a reduced system's force
        self._g, self._big, self._diag, self._off, self._rhs, self._dq = (np.zeros(n) for _ in range(6))
        self._ws = np.zeros((5, n + 1))  # the Newton solve's scratch; row 4: the bonds' phi' of a force
        self._d = np.zeros(n + 1)
        self._keep = np.zeros(self.dim)
        self._rule = LatticeMidpoint(self.kind, self.periodic, self.params, self._g, self._big, self._diag, self._off,
                                     self._rhs, self._dq, self._ws)

    def __repr__(self) -> str:
        return f"LatticeStepper({self.system!r}, {self.name!r}, dt={self.dt})"

    def fresh(self) -> "LatticeStepper":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._info = np.zeros(4)
        new._scratch()
        new.status, new.failed_step, new.failed_row, new.last_update = OK, 0, 0, math.inf
        return new

    def step_block(self, y: np.ndarray, n: int, out: np.ndarray, limit: float = math.inf, every: int = 1) -> int:
        """``CompiledStepper.step_block``: ``every``-th states only into ``out`` (>= n // every, dim)."""
        n, every = int(n), every_kth(every)
        check_block(self.dim, y, n // every, out, contiguous=True)  # the exponential splitting's view of y
        info = self._info
        info[0], info[3] = math.inf, limit * limit
        if self.mid == EXPONENTIAL:
            done = self._run_exponential(y, n, out, info, every)
        elif self.mid == VERLET:  # the lattice's force, or PSD-Galerkin's reduced one
            lattice = (self.kind, self.periodic, self.params)
            fa = (*lattice, self._d) if self.phi is None else (*lattice, self.phi, self._big, self._g, self._d, self.hyper)
            f = self._g if self.phi is None else self._f
            done = run_verlet(fa, NONE, NONE, y, self.dt, self.gammas, n, out, info, f, every)
        else:
            done = run_midpoint(self._rule, y, self.dt, self.gammas, n, out, info, self.tol, self.max_iter, self._keep,
                                every)
        last, status, failed = info.tolist()[:3]
        self.status, self.failed_step, self.failed_row, self.last_update = int(status), int(failed), 0, last
        self.warm = True
        return int(done)

    def _run_exponential(self, y: np.ndarray, n: int, out: np.ndarray, info: np.ndarray, every: int) -> int:
        """``exponential_splitting`` (composed with ``gammas``): per (sub)step a compiled half kick, the exact
        linear flow by one transform of (q, p) and one inverse, a compiled half kick; then the store's check."""
        import scipy.fft as sfft

        info[1] = info[2] = 0.0
        sites, (d0, kappa) = self.sites, self._affine
        qp = y.reshape(2, sites)  # rows q, p: views of y
        q, p, g, d = qp[0], qp[1], self._g, self._d
        for k in range(n):
            for t, (c, s_over_w, w_s) in zip(self.gammas * self.dt, self._flows):
                nonlinear_kick(self.kind, self.periodic, self.params, d0, kappa, q, p, 0.5 * t, g, d)
                if self.periodic:
                    qh, ph = sfft.rfft(qp, axis=-1)
                    qp[:] = sfft.irfft(np.stack([c * qh + s_over_w * ph, c * ph - w_s * qh]), n=sites, axis=-1)
                else:
                    qh, ph = sfft.dst(qp, type=1, axis=-1, norm="ortho")
                    qp[:] = sfft.dst(np.stack([c * qh + s_over_w * ph, c * ph - w_s * qh]), type=1, axis=-1,
                                     norm="ortho")
                nonlinear_kick(self.kind, self.periodic, self.params, d0, kappa, q, p, 0.5 * t, g, d)
            st = observe(NONE, NONE, y, out, k, info[3], every)
            if st != OK:
                info[1], info[2] = st, k + 1
                return (k + 1) // every
        return n // every

    def step_rows(self, ys: np.ndarray, n: int, out: np.ndarray, limits: Any = None, every: int = 1
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``step_block`` for every row of ``ys`` (rows, dim), the states into ``out`` (rows, >= n, dim), row after row,
        as ``CompiledStepper.step_rows`` (each row's states those of ``step_block``): each row's states written,
        status (int64) and info (last Newton update, status, failing step, limit squared)."""
        infos = np.zeros((ys.shape[0], 4))
        infos[:, 3] = np.inf if limits is None else np.square(np.asarray(limits, dtype=np.float64))
        return rows_by_block(self, ys, int(n), out, infos, every), infos[:, 1].astype(np.int64), infos

    def run(self, y0: Any, n_steps: int, t0: float = 0.0) -> np.ndarray:
        """States (n_steps + 1, dim) from y0 (dim,), as ``integrate(...).y[0]``; raises its errors."""
        return self.run_batch([y0], n_steps, t0)[0]

    def error(self, t0: float = 0.0) -> VPIntegratorError | None:
        """The error of the last failure (None when the last call succeeded), in ``integrate``'s words."""
        return failure_error(self, t0, "I + h^2/4 V''(Q)", nonfinite=(NONFINITE, BLOWN_UP))

    def run_batch(self, y0: Any, n_steps: int, t0: float = 0.0) -> np.ndarray:
        """States (batch, n_steps + 1, dim) of a few trajectories, one after the other; raises like integrate."""
        ys, n = initial_states(y0, self.dim), step_count(n_steps)
        out = np.empty((ys.shape[0], n + 1, self.dim))
        for i in range(ys.shape[0]):
            y = ys[i]  # a row of our own copy, stepped in place
            out[i, 0] = y
            self.step_block(y, n, out[i, 1:])
            if self.status != OK:
                self.failed_row = i
                raise self.error(t0)  # type: ignore[misc]  # a failure has an error
        return out


