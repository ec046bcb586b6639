"""The coefficients of every classical method, written once, as data, read by every path: the NumPy steps, the
compiled kernels and lean loops (``vpintegrator.compiled``) and the learned fields' torch step
(``vpintegrator.models.vector_field``); ``tests/test_coefficients.py`` finds no coefficient written elsewhere.

Explicit Runge-Kutta tableaus ``(a, b, scale)``: stage ``k_i = f(y + sum_j (a_ij h) k_j)`` (zero entries skipped),
``y1 = y + (h / scale) (b_1 k_1 + ... + b_s k_s)``, the weights over a common denominator so that RK4 does its
textbook formula's operations in their order. Gauss-Legendre of any stage count; the composition schemes of a
symmetric order-2 base; the shear splittings' Lie-Trotter fractions; the rigid body's rotation sequence.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.polynomial import legendre

#: an explicit Runge-Kutta tableau (a (s x s, strictly lower), b (s,), scale): the weights are b / scale
ExplicitTableau = tuple[tuple[tuple[float, ...], ...], tuple[float, ...], float]

EULER: ExplicitTableau = (((0.0,),), (1.0,), 1.0)
RK4: ExplicitTableau = (
    ((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
    (1.0, 2.0, 2.0, 1.0),
    6.0,
)

_SQ3 = math.sqrt(3.0)


@functools.lru_cache(maxsize=None)
def gauss_legendre(stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Butcher tableau ``(A, b, c)`` of the s-stage Gauss-Legendre method (order 2s), computed once, read-only.

    ``c`` are the roots of the shifted Legendre polynomial ``P_s(2t - 1)``, ``b`` the Gauss weights on [0, 1] and
    ``a_ij = int_0^{c_i} l_j(t) dt`` with ``l_j`` the Lagrange basis on ``c`` (s-point Gauss quadrature on
    [0, c_i], exact for the degree s-1 polynomial ``l_j``, in product form). For s = 2 the closed form.
    """
    s = int(stages)
    if s == 2:
        a = np.array([[0.25, 0.25 - _SQ3 / 6.0], [0.25 + _SQ3 / 6.0, 0.25]])
        b, c = np.array([0.5, 0.5]), np.array([0.5 - _SQ3 / 6.0, 0.5 + _SQ3 / 6.0])
    else:
        x, w = legendre.leggauss(s)
        c, b = 0.5 * (x + 1.0), 0.5 * w
        t = c[:, None] * c[None, :]  # quadrature nodes c_i * c_k on [0, c_i], (i, k)
        a = np.empty((s, s))
        for j in range(s):
            others = np.delete(c, j)
            lj = np.prod((t[..., None] - others) / (c[j] - others), axis=-1)  # l_j(c_i c_k)
            a[:, j] = c * (lj @ b)
    for arr in (a, b, c):
        arr.setflags(write=False)
    return a, b, c


_CBRT2 = 2.0 ** (1.0 / 3.0)
_CBRT4 = 4.0 ** (1.0 / 3.0)
#: Yoshida (1990) / Suzuki (1990) triple jump, order 4
TRIPLE_JUMP4 = (1.0 / (2.0 - _CBRT2), -_CBRT2 / (2.0 - _CBRT2), 1.0 / (2.0 - _CBRT2))
#: Suzuki (1990) fractal 5-stage composition, order 4
SUZUKI4 = (*(1.0 / (4.0 - _CBRT4),) * 2, -_CBRT4 / (4.0 - _CBRT4), *(1.0 / (4.0 - _CBRT4),) * 2)
#: Yoshida (1990) order 6, solution A: w3 w2 w1 w0 w1 w2 w3
_Y6_W = (0.784513610477560, 0.235573213359357, -1.17767998417887)
YOSHIDA6 = (*_Y6_W, 1.0 - 2.0 * sum(_Y6_W), *_Y6_W[::-1])

#: Strang's splitting as Lie-Trotter fractions: X(h/2) X*(h/2) (the shears 1(h/2) .. d(h) .. 1(h/2))
STRANG = (0.5, 0.5)
#: McLachlan (1995) symmetric order-2 splitting A(a) B(1/2) A(1 - 2a) B(1/2) A(a) with the coefficient
#: that minimises the leading error term; as Lie-Trotter fractions (a, 1/2 - a, 1/2 - a, a)
MCLACHLAN2_A = 0.1931833275037836
#: Blanes & Moan (2002) S6, order 4: A(a1) B(b1) A(a2) B(b2) A(a3) B(b3) A(a4) B(b3) A(a3) ...
_BM_A = (0.0792036964311957, 0.353172906049774, -0.0420650803577195)
_BM_B = (0.209515106613362, -0.143851773179818)
BLANES_MOAN4_A = (*_BM_A, 1.0 - 2.0 * sum(_BM_A), *_BM_A[::-1])
BLANES_MOAN4_B = (*_BM_B, 0.5 - sum(_BM_B), 0.5 - sum(_BM_B), *_BM_B[::-1])

#: the rigid body's Strang splitting R_1(h/2) R_2(h/2) R_3(h) R_2(h/2) R_1(h/2): (axis, fraction of h) in time order
STRANG_ROTATIONS: tuple[tuple[int, float], ...] = ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5))

__all__ = ["ExplicitTableau", "EULER", "RK4", "gauss_legendre", "TRIPLE_JUMP4", "SUZUKI4", "YOSHIDA6", "STRANG", "MCLACHLAN2_A",
           "BLANES_MOAN4_A", "BLANES_MOAN4_B", "STRANG_ROTATIONS"]
