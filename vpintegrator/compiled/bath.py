"""Compiled O(N) steppers of the particle-bath systems (``kac_zwanzig``, ``particle_chain``) and of the particle's GLE.

Methods (by name, [`bath_stepper`][vpintegrator.compiled.bath.bath_stepper]):

- ``stormer_verlet`` (both systems): velocity Verlet, the states of ``vpintegrator.integrators``' ``stormer_verlet``
  to rounding: the particle + chain by the package's one Verlet loop (``lean.run_verlet``, its force
  ``chain_force``); the harmonic bath by one fused pass over the bath per step, its sum reassociated (``bath_jit``:
  ~0.5 ns per oscillator and step; run by the shared loop's separate passes it cost 1.5-2.7x in a trial).
- ``bath_splitting`` (``kac_zwanzig``): the exact-bath-flow Strang splitting ``A(h/2) B(h) A(h/2)`` of
  ``H = P^2 / 2 + [V(Q) + H_bath(q, p; Q)]``: A drifts the particle, ``Q += t P``; B is the exact flow of the rest
  with Q frozen: each bath oscillator rotates exactly about its Q-shifted centre (``x_j = q_j - c_j Q / omega_j^2``,
  ``(x_j, p_j)`` turned by ``omega_j h``) and the particle's momentum receives the exact time integral of its force,
  ``P += -h V'(Q) + sum_j c_j (x_j sin(omega_j h) / omega_j + p_j (1 - cos(omega_j h)) / omega_j^2)``. Symplectic,
  second order, no step-size limit from the bath's frequencies (Verlet needs ``h < 2 / omega_max``); O(N) per
  step with the rotation's numbers precomputed for the step. (As a registered classical method it would be an
  ``Integrator`` whose step calls this kernel, with ``needs`` the system's ``bath_at_rest``.)
- the compositions ``stormer_verlet_suzuki4`` / ``_y6`` and ``bath_splitting_suzuki4`` / ``_y6``: each step the
  base method's sub-steps ``gamma_i h`` (Suzuki's order-4, 5 sub-steps; Yoshida's order-6, 7 sub-steps;
  ``vpintegrator.integrators.coefficients``), the states written once per step.
- the GLE (``gle_steps``): ``Q'' = -V'(Q) - M(t)``, ``M(t) = int_0^t K(t - s) P(s) ds``, by velocity Verlet with the
  memory integral by the trapezoidal rule on the step grid (convolution quadrature of order 2). The rule is
  implicit in the newest momentum only through ``h K(0) / 2``, which is solved for in closed form::

      P_half = P_n + h/2 (-V'(Q_n) - M_n);  Q_{n+1} = Q_n + h P_half
      S = h [sum_{j=1}^{min(n, m)} K_j P_{n+1-j} + (1/2 K_{n+1} P_0 if n + 1 <= m)]
      P_{n+1} = (P_half + h/2 (-V'(Q_{n+1}) - S)) / (1 + h^2 K_0 / 4);  M_{n+1} = S + h/2 K_0 P_{n+1}

  with ``K_j = K(j h)`` and the memory cut after m steps (m = the whole history when not cut): O(min(n, m)) per
  step; or (``gle_soe_steps``) with K a sum of exponentials ``K_j = Re sum_k a_k z_k^j``, when the same
  trapezoidal sum is a recursion per term (``U_k <- z_k (U_k + P_{n+1})``): O(terms) per step.

Every kernel steps one trajectory in place and writes either the particle ``(Q, P)`` or the whole state of each
step; [`BathStepper.run`][vpintegrator.compiled.bath.BathStepper.run] loops over rows. Kernels compile on first
use and are cached on disk like the package's others (``vpintegrator.compiled._jit``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError, finite_float
from ..systems.kac_zwanzig import KacZwanzig, ParticleBath
from ..systems.particle_chain import ParticleChain
from ._jit import HAVE_NUMBA, jit
from .lattice import force, observe, reassoc_jit, run_verlet
from .newton import NONFINITE, OK

#: the bath loops' compiler (the sum over oscillators vectorised, 2.2x per oscillator-step): to rounding (~1e-15)
bath_jit = reassoc_jit

__all__ = ["BATH_METHODS", "BathStepper", "bath_stepper", "bath_jit", "gle_steps", "gle_soe_steps", "kz_verlet",
           "kz_splitting", "chain_force", "splitting_tables"]

#: method name -> the systems it steps
BATH_METHODS = {**{f"stormer_verlet{c}": ("kac_zwanzig", "particle_chain") for c in ("", "_suzuki4", "_y6")},
                **{f"bath_splitting{c}": ("kac_zwanzig",) for c in ("", "_suzuki4", "_y6")}}


@bath_jit
def kz_verlet(y, hs, n_steps, w2, c, s, out, cols, watch):
    """Kac-Zwanzig velocity Verlet: y (2 (N + 1),) advanced n_steps in place, each step's state (or particle) in
    out[k]; a step is the sub-steps ``hs`` (one: Verlet; a composition's: ``gamma_i h``). ``w2 = omega^2``, ``c``
    the couplings, ``s = c / omega^2``; y[cols] stored, y[watch] checked (``lattice.observe``): OK or NONFINITE."""
    n = w2.shape[0]
    m = n + 1
    f = np.empty(n)
    Q = y[0]
    acc = 0.0
    for j in range(n):
        x = y[1 + j] - s[j] * Q
        f[j] = -w2[j] * x
        acc += c[j] * x
    fq = -(Q * Q * Q - Q) + acc
    for k in range(n_steps):
        for g in range(hs.shape[0]):
            h = hs[g]
            hh = 0.5 * h
            P = y[m] + hh * fq
            Q = y[0] + h * P
            y[0] = Q
            acc = 0.0
            for j in range(n):
                pj = y[m + 1 + j] + hh * f[j]
                qj = y[1 + j] + h * pj
                x = qj - s[j] * Q
                fj = -w2[j] * x
                f[j] = fj
                acc += c[j] * x
                y[1 + j] = qj
                y[m + 1 + j] = pj + hh * fj
            fq = -(Q * Q * Q - Q) + acc
            y[m] = P + hh * fq
        if observe(cols, watch, y, out, k, 0.0, 1) != OK:
            return NONFINITE
    return OK


@bath_jit
def kz_splitting(y, hs, n_steps, s, cs, sw, ws, a, b, out, cols, watch):
    """Kac-Zwanzig exact-bath-flow splitting A(h/2) B(h) A(h/2) (module docstring), each step the sub-steps ``hs``
    (g,) (one: Strang; a composition's: ``gamma_i h``), with the rotation's numbers of each sub-step in rows of
    (g, N) arrays: ``cs = cos(omega h)``, ``sw = sin(omega h) / omega``, ``ws = omega sin(omega h)``,
    ``a = c sin(omega h) / omega``, ``b = c (1 - cos(omega h)) / omega^2`` (``splitting_tables``)."""
    n = s.shape[0]
    m = n + 1
    for k in range(n_steps):
        for g in range(hs.shape[0]):
            h = hs[g]
            hh = 0.5 * h
            P = y[m]
            Q = y[0] + hh * P
            acc = 0.0
            for j in range(n):
                sq = s[j] * Q
                x = y[1 + j] - sq
                pj = y[m + 1 + j]
                acc += a[g, j] * x + b[g, j] * pj
                y[1 + j] = cs[g, j] * x + sw[g, j] * pj + sq
                y[m + 1 + j] = cs[g, j] * pj - ws[g, j] * x
            P = P - h * (Q * Q * Q - Q) + acc
            y[0] = Q + hh * P
            y[m] = P
        if observe(cols, watch, y, out, k, 0.0, 1) != OK:
            return NONFINITE
    return OK


@jit
def chain_force(beta, kc, x, g):
    """The particle-chain's ``g = dV/dq`` (N + 1,) at positions x (N + 1,), one pass over the bonds (the wall's bond
    after the loop, no branch per bond)."""
    m = g.shape[0]
    Q = x[0]
    d_prev = kc * (x[1] - Q)  # the spring's tension
    g[0] = (Q * Q * Q - Q) - d_prev
    for i in range(1, m - 1):
        r = x[i + 1] - x[i]
        d = r + beta * r * r * r
        g[i] = d_prev - d
        d_prev = d
    r = 0.0 - x[m - 1]
    g[m - 1] = d_prev - (r + beta * r * r * r)


if HAVE_NUMBA:  # pragma: no branch - the chain's force in the one Verlet loop (``lattice.force``: fa = (beta, kc))
    from numba import types
    from numba.extending import overload

    @overload(force, inline="always")
    def _chain(fa, x, f):
        if len(fa) == 2 and isinstance(fa[0], types.Float):
            return lambda fa, x, f: chain_force(fa[0], fa[1], x, f)
        return None


@jit
def gle_steps(Q, P, M, hist, count, K, m, h, n_steps, out):
    """The particle's GLE by velocity Verlet + trapezoidal memory (module docstring), each row r from step
    ``count`` (its momenta P_0 .. P_count in ``hist[r]``; ``M[r]`` the memory integral at that step) for n_steps:
    ``Q, P, M`` (rows,) and ``hist`` (rows, >= count + n_steps + 1) updated in place, ``out`` (rows, n_steps, 2)
    the states. ``K`` holds K_0 .. K_L (L >= min(count + n_steps, m)); m the memory cut in steps."""
    rows = Q.shape[0]
    hh = 0.5 * h
    denom = 1.0 + hh * hh * K[0]
    for r in range(rows):
        q = Q[r]
        p = P[r]
        mem = M[r]
        for k in range(n_steps):
            c = count + k
            ph = p + hh * (-(q * q * q - q) - mem)
            q = q + h * ph
            top = c if c < m else m
            acc = 0.0
            for j in range(1, top + 1):
                acc += K[j] * hist[r, c + 1 - j]
            if c + 1 <= m:
                acc += 0.5 * K[c + 1] * hist[r, 0]
            acc *= h
            p = (ph + hh * (-(q * q * q - q) - acc)) / denom
            mem = acc + hh * K[0] * p
            hist[r, c + 1] = p
            out[r, k, 0] = q
            out[r, k, 1] = p
        Q[r] = q
        P[r] = p
        M[r] = mem


def splitting_tables(system: KacZwanzig, hs: np.ndarray) -> tuple[np.ndarray, ...]:
    """The per-sub-step numbers of ``kz_splitting`` for sub-steps hs (g,): ``(s, cos, sin / omega, omega sin, a, b)``,
    the last five (g, N)."""
    w, c = system.frequencies, system.couplings
    wh = np.outer(np.asarray(hs, dtype=np.float64), w)
    cs, sn = np.cos(wh), np.sin(wh)
    return (system.shifts, cs, sn / w, w * sn, c * sn / w, c * (1.0 - cs) / w**2)


def _substeps(method: str, h: float) -> np.ndarray:
    """The sub-steps of one step of ``method``: (h,) for the base method, ``gamma_i h`` for its compositions."""
    from ..integrators.coefficients import SUZUKI4, YOSHIDA6

    for suffix, gammas in (("_suzuki4", SUZUKI4), ("_y6", YOSHIDA6)):
        if method.endswith(suffix):
            return h * np.asarray(gammas, dtype=np.float64)
    return np.array([h])


class BathStepper:
    """A compiled O(N) stepper of a particle-bath system (module docstring); ``bath_stepper`` builds one.

    ``run(y0, n_steps, full=False)``: y0 (dim,) or (rows, dim) -> (rows, n_steps + 1, 2) particle states (or the
    whole state with ``full=True``), the first being y0's; ``step(y, n, out)``: advance one state y (dim,) in place,
    the states into out (n, 2 or dim); returns the status (0 ok, 3 a non-finite state).
    """

    def __init__(self, system: ParticleBath, method: str, h: float) -> None:
        self.system, self.method, self.h = system, method, h
        self.dim = int(system.dim)
        self.hs = _substeps(method, h)
        if isinstance(system, KacZwanzig):
            if method.startswith("stormer_verlet"):
                w = system.frequencies
                self._args: tuple = (w * w, system.couplings, system.shifts)
            else:
                self._args = splitting_tables(system, self.hs)
        elif isinstance(system, ParticleChain):
            self._args = (float(system.beta), float(system.coupling))
            self._f, self._info = np.empty(self.dim // 2), np.zeros(4)
        else:
            raise VPIntegratorError(f"bath stepper: no kernel for {system.name!r}", key="system")

    def step(self, y: np.ndarray, n: int, out: np.ndarray) -> int:
        """Advance y in place by n steps (states into out); the status."""
        m = self.dim // 2
        obs = (np.zeros(0, np.int64) if out.shape[1] == self.dim else np.array([0, m]), np.array([0, m]))
        if self.method.startswith("bath_splitting"):
            return int(kz_splitting(y, self.hs, int(n), *self._args, out, *obs))
        if isinstance(self.system, KacZwanzig):
            return int(kz_verlet(y, self.hs, int(n), *self._args, out, *obs))
        run_verlet(self._args, *obs, y, 1.0, self.hs, int(n), out, self._info, self._f, 1)
        return int(self._info[1])

    def run(self, y0: np.ndarray, n_steps: int, full: bool = False) -> np.ndarray:
        """Trajectories from y0 (dim,) or (rows, dim): (rows, n_steps + 1, 2 or dim)."""
        y0 = np.atleast_2d(np.asarray(y0, dtype=np.float64))
        if y0.shape[-1] != self.dim:
            raise VPIntegratorError(f"{self.system.name}: states must have {self.dim} components; got shape "
                                    f"{y0.shape}", key="y0")
        n = self.system.N + 1
        width = self.dim if full else 2
        out = np.empty((y0.shape[0], int(n_steps) + 1, width))
        for r in range(y0.shape[0]):
            y = y0[r].copy()
            out[r, 0] = y if full else (y[0], y[n])
            if self.step(y, int(n_steps), out[r, 1:]) != 0:
                raise VPIntegratorError(f"{self.system.name} by {self.method} at dt = {self.h}: a non-finite state; "
                                        "take a smaller step", key="dt")
        return out


def bath_stepper(system: Any, method: str, dt: float) -> BathStepper:
    """The compiled stepper of ``system`` (a ``kac_zwanzig`` or ``particle_chain`` instance or name) by ``method``
    (``BATH_METHODS``) at step ``dt``; one line for a method the system has not."""
    from ..systems import get_system

    system = get_system(system)
    h = finite_float(dt, "dt", positive=True, key="dt")
    name = getattr(system, "name", "")
    if method not in BATH_METHODS:
        raise VPIntegratorError(f"bath stepper: unknown method {method!r}; valid: {', '.join(BATH_METHODS)}",
                                key="method")
    if name not in BATH_METHODS[method] or not isinstance(system, (KacZwanzig, ParticleChain)):
        raise VPIntegratorError(f"bath stepper: method {method!r} steps {', '.join(BATH_METHODS[method])}, not "
                                f"{name!r}", key="method")
    return BathStepper(system, method, h)


@jit
def gle_soe_steps(Q, P, M, U, a, z, K0, h, n_steps, out):
    """The GLE of ``gle_steps`` with the kernel a sum of exponentials, ``K_j = Re sum_k a_k z_k^j``: the
    trapezoidal memory by recursion, O(terms) per step. ``U`` (rows, terms) complex: each term's history sum
    (``U = z (U + P_n)`` per step, ``U = z P_0 / 2`` at the start); ``K0`` the fitted ``K_0``."""
    rows = Q.shape[0]
    terms = a.shape[0]
    hh = 0.5 * h
    denom = 1.0 + hh * hh * K0
    for r in range(rows):
        q = Q[r]
        p = P[r]
        mem = M[r]
        for k in range(n_steps):
            ph = p + hh * (-(q * q * q - q) - mem)
            q = q + h * ph
            acc = 0.0
            for t in range(terms):
                acc += (a[t] * U[r, t]).real
            acc *= h
            p = (ph + hh * (-(q * q * q - q) - acc)) / denom
            mem = acc + hh * K0 * p
            for t in range(terms):
                U[r, t] = z[t] * (U[r, t] + p)
            out[r, k, 0] = q
            out[r, k, 1] = p
        Q[r] = q
        P[r] = p
        M[r] = mem
