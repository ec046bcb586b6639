"""Slow, obviously-correct reference steppers of every registered classical method, written from the methods'
textbook definitions and independent of the package's arithmetic.

Nothing here calls the package's steps, its tableaux or its coefficient tables: only a system's vector field
(``system.vector_field``, the equations, which the methods take as given) and, for the rigid body's rotation
splittings, its inertia. Every step works on one state (dim,) in plain NumPy:

- explicit Runge-Kutta (euler, rk4) from the Butcher tableau written as exact fractions;
- Gauss-Legendre with s stages (implicit_midpoint = s 1, its own midpoint formula too) from the closed-form
  tableaux of Hairer, Lubich & Wanner (s <= 3) or by collocation (the Legendre roots, the Lagrange basis
  integrated exactly as polynomials; s >= 4), the stage equations solved by fixed-point iteration to
  machine precision (until the update is 0 or stops shrinking at the rounding floor);
- Stormer-Verlet (kick-drift-kick) through the field: for a separable H the q-part of f depends on p only and
  the p-part on q only;
- the shear splittings: Strang ``1(h/2) .. d(h) .. 1(h/2)``; McLachlan's (1995) order-2 and Blanes & Moan's
  (2002) S6 order-4 splittings, the published two-part coefficients turned into alternating Lie-Trotter
  sweeps ``X(g1 h) X*(g2 h) ..`` (X: shears 1..d, X*: d..1; the package's definition for d parts), each shear
  ``y_i += t f_i(y)`` applied in full (no merging);
- the rigid body's rotation splittings: each ``R_k(t)`` is the exact flow of ``H_k = w_k z_k^2 / 2`` by the
  matrix exponential of its generator (``dz/dt = z x grad H_k``), rates ``w_k = 1 / I_k`` (centred: minus their
  mean);
- the lattices' exponential (Strang) splitting: half kicks by the nonlinear rest of the force (the field's force
  minus ``kappa L q``, L the graph Laplacian of the ring or of the chain with fixed ends, written here) around the
  exact flow of the quadratic part by the matrix exponential of its 2N x 2N generator (the package uses the DFT or
  the sine transform);
- compositions ``Phi(g_k h) o .. o Phi(g_1 h)`` with the coefficients of Yoshida (1990) and Suzuki (1990).

``reference_step(name)`` gives ``step(system, y, h) -> y1`` for a registered method name;
``reference_trajectory(system, name, y0, h, n)`` the states (n + 1, dim) from one y0.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

import numpy as np
from scipy.linalg import expm

Step = Callable[[object, np.ndarray, float], np.ndarray]
EPS = np.finfo(np.float64).eps


def _f(system, y: np.ndarray) -> np.ndarray:
    return np.asarray(system.vector_field(y[None]), dtype=np.float64)[0]


# --- explicit Runge-Kutta ------------------------------------------------------------------------------------
def _explicit_rk(a: list[list[Fraction]], b: list[Fraction]) -> Step:
    A = [[float(v) for v in row] for row in a]
    B = [float(v) for v in b]

    def step(system, y, h):
        k: list[np.ndarray] = []
        for i in range(len(B)):
            yi = y.copy()
            for j in range(i):
                yi = yi + h * A[i][j] * k[j]
            k.append(_f(system, yi))
        return y + h * sum(B[i] * k[i] for i in range(len(B)))

    return step


_H = Fraction(1, 2)
EULER = _explicit_rk([[Fraction(0)]], [Fraction(1)])
RK4 = _explicit_rk([[0, 0, 0, 0], [_H, 0, 0, 0], [0, _H, 0, 0], [0, 0, Fraction(1), 0]],
                   [Fraction(1, 6), Fraction(1, 3), Fraction(1, 3), Fraction(1, 6)])


# --- Gauss-Legendre collocation ----------------------------------------------------------------------------------
def gauss_tableau(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, b, c) of the s-stage Gauss method: closed forms for s <= 3, collocation integrals beyond."""
    if s == 1:
        return np.array([[0.5]]), np.array([1.0]), np.array([0.5])
    if s == 2:
        r = math.sqrt(3.0) / 6.0
        return (np.array([[0.25, 0.25 - r], [0.25 + r, 0.25]]), np.array([0.5, 0.5]), np.array([0.5 - r, 0.5 + r]))
    if s == 3:
        r = math.sqrt(15.0)
        A = np.array([[5 / 36, 2 / 9 - r / 15, 5 / 36 - r / 30],
                      [5 / 36 + r / 24, 2 / 9, 5 / 36 - r / 24],
                      [5 / 36 + r / 30, 2 / 9 + r / 15, 5 / 36]])
        return A, np.array([5 / 18, 4 / 9, 5 / 18]), np.array([0.5 - r / 10, 0.5, 0.5 + r / 10])
    return collocation_tableau(s)


def collocation_tableau(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, b, c) by collocation: c the roots of P_s(2t - 1), a_ij = int_0^{c_i} l_j, b_j = int_0^1 l_j."""
    P = np.polynomial.Polynomial
    c = np.sort((np.polynomial.legendre.legroots([0] * s + [1]) + 1.0) / 2.0)
    A, b = np.empty((s, s)), np.empty(s)
    for j in range(s):
        others = np.delete(c, j)
        lj = (P.fromroots(others) if others.size else P([1.0])) / float(np.prod(c[j] - others))
        Lj = lj.integ()
        b[j] = Lj(1.0) - Lj(0.0)
        A[:, j] = Lj(c) - Lj(0.0)
    return A, b, c


def _fixed_point(update: Callable[[np.ndarray], np.ndarray], z: np.ndarray, scale: float, what: str) -> np.ndarray:
    """Iterate z <- update(z) until the update is 0 or stops shrinking at the rounding floor."""
    prev = math.inf
    for _ in range(2000):
        new = update(z)
        e = float(np.max(np.abs(new - z)))
        z = new
        if e == 0.0 or (e <= 64 * EPS * scale and e >= 0.5 * prev):
            return z
        prev = e
    raise RuntimeError(f"reference {what}: the fixed-point iteration did not converge (last update {e:.3g})")


def gauss(s: int) -> Step:
    A, b, c = gauss_tableau(s)

    def step(system, y, h):
        scale = max(1.0, float(np.max(np.abs(y))))

        def update(Z):  # Z (s, dim): the stage increments, Z_i = h sum_j a_ij f(y + Z_j)
            F = np.array([_f(system, y + Z[j]) for j in range(s)])
            return h * (A @ F)

        Z = _fixed_point(update, np.zeros((s, y.size)), scale, f"gauss_legendre{2 * s}")
        F = np.array([_f(system, y + Z[j]) for j in range(s)])
        return y + h * (b @ F)

    return step


def implicit_midpoint(system, y, h):
    """``y1 = y + h f((y + y1) / 2)`` by fixed point."""
    scale = max(1.0, float(np.max(np.abs(y))))
    return _fixed_point(lambda z: y + h * _f(system, 0.5 * (y + z)), y.copy(), scale, "implicit_midpoint")


# --- Stormer-Verlet ----------------------------------------------------------------------------------------------
def stormer_verlet(system, y, h):
    """Kick-drift-kick: ``p+ = p + h/2 f_p(q); q1 = q + h f_q(p+); p1 = p+ + h/2 f_p(q1)`` (f_q = T'(p), f_p = -V'(q))."""
    n = y.size // 2
    q, p = y[:n], y[n:]
    p_half = p + 0.5 * h * _f(system, np.concatenate([q, p]))[n:]
    q1 = q + h * _f(system, np.concatenate([q, p_half]))[:n]
    p1 = p_half + 0.5 * h * _f(system, np.concatenate([q1, p_half]))[n:]
    return np.concatenate([q1, p1])


# --- shear splittings ------------------------------------------------------------------------------------------
def _shear(system, y, i, t):
    z = y.copy()
    z[i] = z[i] + t * _f(system, z)[i]
    return z


def strang_shears(system, y, h):
    d = y.size
    for i in range(d - 1):
        y = _shear(system, y, i, h / 2)
    y = _shear(system, y, d - 1, h)
    for i in range(d - 2, -1, -1):
        y = _shear(system, y, i, h / 2)
    return y


def lie_trotter_fractions(a: list[float], b: list[float]) -> list[float]:
    """Fractions g of X(g1) X*(g2) ... from a two-part splitting A(a1) B(b1) A(a2) ... B(bs) A(a_{s+1}):
    for two parts X(g1) X*(g2) = 1(g1) 2(g1 + g2) 1(g2 + ..), so a1 = g1, b1 = g1 + g2, a2 = g2 + g3, ..."""
    stages = [a[0]]
    for k in range(len(b)):
        stages += [b[k], a[k + 1]]
    g = [stages[0]]
    for v in stages[1:-1]:
        g.append(v - g[-1])
    assert abs(g[-1] - stages[-1]) < 1e-14, (g, stages)
    return g


def lie_trotter(gammas: list[float]) -> Step:
    def step(system, y, h):
        d = y.size
        for k, g in enumerate(gammas):
            for i in (range(d) if k % 2 == 0 else range(d - 1, -1, -1)):
                y = _shear(system, y, i, g * h)
        return y

    return step


#: McLachlan (1995): A(a) B(1/2) A(1 - 2a) B(1/2) A(a), a = 0.1931833275037836
_MA = 0.1931833275037836
MCLACHLAN2 = lie_trotter(lie_trotter_fractions([_MA, 1 - 2 * _MA, _MA], [0.5, 0.5]))
#: Blanes & Moan (2002), S6 order 4: A(a1) B(b1) A(a2) B(b2) A(a3) B(b3) A(a4) B(b3) A(a3) B(b2) A(a2) B(b1) A(a1)
_BA = [0.0792036964311957, 0.353172906049774, -0.0420650803577195]
_BB = [0.209515106613362, -0.143851773179818]
_BA = _BA + [1 - 2 * sum(_BA)] + _BA[::-1]
_BB = _BB + [0.5 - sum(_BB)] * 2 + _BB[::-1]
BLANES_MOAN4 = lie_trotter(lie_trotter_fractions(_BA, _BB))


# --- the rigid body's exact rotations --------------------------------------------------------------------------
def _cross_matrix(e):
    return np.array([[0.0, -e[2], e[1]], [e[2], 0.0, -e[0]], [-e[1], e[0], 0.0]])


def rotations(centred: bool) -> Step:
    def step(system, z, h):
        w = np.array([1.0 / v for v in system.inertia])
        if centred:
            w = w - w.mean()
        for k, t in ((0, h / 2), (1, h / 2), (2, h), (1, h / 2), (0, h / 2)):
            # the flow of H_k = w_k z_k^2 / 2: dz/dt = z x (w_k z_k e_k) = -w_k z_k [e_k]_x z, z_k constant
            generator = -w[k] * z[k] * _cross_matrix(np.eye(3)[k])
            z = expm(t * generator) @ z
        return z

    return step


# --- the lattices' exponential splitting ---------------------------------------------------------------------
def _laplacian(n: int, periodic: bool) -> np.ndarray:
    """The bonds' graph Laplacian: a ring of n sites, or a chain whose two end sites are bonded to fixed walls."""
    lap = 2.0 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    if periodic:
        lap[0, -1] = lap[-1, 0] = -1.0
    return lap


def exponential_strang(system, y, h):
    n = y.size // 2
    stiffness = system.kappa * _laplacian(n, system.periodic)
    generator = np.block([[np.zeros((n, n)), np.eye(n)], [-stiffness, np.zeros((n, n))]])

    def kick(q, p, t):
        force = _f(system, np.concatenate([q, np.zeros(n)]))[n:]  # -grad V(q): the p-part of a separable field
        return p + t * (force + stiffness @ q)  # the force of the nonlinear rest V - kappa/2 q.L q

    q, p = y[:n], y[n:]
    p = kick(q, p, h / 2)
    qp = expm(h * generator) @ np.concatenate([q, p])
    q1, p1 = qp[:n], qp[n:]
    return np.concatenate([q1, kick(q1, p1, h / 2)])


# --- compositions ------------------------------------------------------------------------------------------------
_X1 = 1 / (2 - 2 ** (1 / 3))
_P5 = 1 / (4 - 4 ** (1 / 3))
_W = [-1.17767998417887, 0.235573213359357, 0.784513610477560]  # Yoshida (1990) solution A: w1, w2, w3
COMPOSITIONS = {
    "tj4": [_X1, 1 - 2 * _X1, _X1],
    "suzuki4": [_P5, _P5, 1 - 4 * _P5, _P5, _P5],
    "y6": [_W[2], _W[1], _W[0], 1 - 2 * sum(_W), _W[0], _W[1], _W[2]],
}


def composition(base: Step, gammas: list[float]) -> Step:
    def step(system, y, h):
        for g in gammas:
            y = base(system, y, g * h)
        return y

    return step


BASES: dict[str, Step] = {
    "euler": EULER, "rk4": RK4, "implicit_midpoint": implicit_midpoint, "stormer_verlet": stormer_verlet,
    "splitting": strang_shears, "splitting_mclachlan2": MCLACHLAN2, "splitting_blanes_moan4": BLANES_MOAN4,
    "rotation_splitting": rotations(False), "rotation_splitting_centred": rotations(True),
    "exponential_splitting": exponential_strang,
    **{f"gauss_legendre{2 * s}": gauss(s) for s in range(1, 6)},
}


def reference_step(name: str) -> Step:
    """``step(system, y, h)`` of the registered method ``name`` (a KeyError for a method written nowhere here)."""
    if name in BASES:
        return BASES[name]
    base, _, scheme = name.rpartition("_")
    return composition(BASES[base], COMPOSITIONS[scheme])


def reference_trajectory(system, name: str, y0, h: float, n: int) -> np.ndarray:
    """States (n + 1, dim) of ``name`` from one state y0."""
    step = reference_step(name)
    out = np.empty((n + 1, len(y0)))
    out[0] = y = np.asarray(y0, dtype=np.float64)
    for k in range(n):
        out[k + 1] = y = step(system, y, h)
    return out
