"""The compiled field and Jacobian of a fitted library field ż = Θ(z) Ξ (``vpintegrator.rollout.sindy.SindyField``,
the ``sindy+METHOD`` rows), so that the compiled steppers (RK4, implicit midpoint, Gauss–Legendre, ...) run a
SINDy fit at batch 1 as they run a shipped system: kernel id ``LIBRARY_FIELD`` of
``vpintegrator.compiled.systems``, the library and coefficients packed into the parameter array ``p`` by
`pack_library_field`. Without it a fitted field ran on the NumPy path, about 1000× the oracle's cost per step,
which put SINDy's rows at a cost that was the stepper's, not the method's.

The features are those of ``vpintegrator.rollout.sindy.Library`` (monomials by exponent rows, then sin z_c,
cos z_c, exp z_c), the derivatives analytic, as ``Library.gradient``; a monomial's powers are products of
repeated factors, so values agree with the NumPy field to rounding (tests/test_sindy_compiled.py).

``p`` = [dim, n_mono, n_sin, n_cos, n_exp, powers (n_mono, dim), sin components, cos components, exp components,
Ξ (n_features, dim)], every array C-ordered, integers as float64.
"""

from __future__ import annotations

import math

import numpy as np

from ._jit import jit

__all__ = ["pack_library_field", "library_vector_field", "library_jacobian"]

_HEADER = 5


def pack_library_field(powers: np.ndarray, sin: tuple[int, ...], cos: tuple[int, ...], exp: tuple[int, ...],
                       coefficients: np.ndarray) -> np.ndarray:
    """The parameter array of the field Θ(z) Ξ: monomial exponent rows ``powers`` (n_mono, dim), the components
    of the sin, cos and exp features, and Ξ ``coefficients`` (n_features, dim)."""
    powers = np.asarray(powers, dtype=np.float64).reshape(-1, np.shape(coefficients)[1])
    dim = powers.shape[1]
    head = np.array([dim, powers.shape[0], len(sin), len(cos), len(exp)], dtype=np.float64)
    parts = [head, powers.ravel(), np.asarray(sin, dtype=np.float64), np.asarray(cos, dtype=np.float64),
             np.asarray(exp, dtype=np.float64), np.asarray(coefficients, dtype=np.float64).ravel()]
    return np.ascontiguousarray(np.concatenate(parts))


@jit
def _ipow(x, e):
    """x ** e for an integer e >= 0 by repeated products (e = 0: 1)."""
    v = 1.0
    for _ in range(e):
        v *= x
    return v


@jit
def _features(p, y, theta, dtheta, order):
    """Θ(y) into theta (n_features,) and, for order >= 1, ∂Θ/∂y into dtheta (n_features, dim)."""
    dim, n_mono, n_sin, n_cos, n_exp = int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4])
    off = _HEADER
    for m in range(n_mono):
        v = 1.0
        for j in range(dim):
            v *= _ipow(y[j], int(p[off + m * dim + j]))
        theta[m] = v
        if order >= 1:
            for j in range(dim):
                e = int(p[off + m * dim + j])
                if e == 0:
                    dtheta[m, j] = 0.0
                    continue
                d = float(e)
                for k in range(dim):
                    d *= _ipow(y[k], int(p[off + m * dim + k]) - (1 if k == j else 0))
                dtheta[m, j] = d
    off += n_mono * dim
    f = n_mono
    for kind in range(3):
        count = n_sin if kind == 0 else (n_cos if kind == 1 else n_exp)
        for i in range(count):
            c = int(p[off + i])
            x = y[c]
            if kind == 0:
                theta[f] = math.sin(x)
            elif kind == 1:
                theta[f] = math.cos(x)
            else:
                theta[f] = math.exp(x)
            if order >= 1:
                for j in range(dim):
                    dtheta[f, j] = 0.0
                if kind == 0:
                    dtheta[f, c] = math.cos(x)
                elif kind == 1:
                    dtheta[f, c] = -math.sin(x)
                else:
                    dtheta[f, c] = theta[f]
            f += 1
        off += count
    return off


@jit
def library_vector_field(p, y, out):
    """Θ(y) Ξ into out (dim,)."""
    dim = int(p[0])
    n = int(p[1]) + int(p[2]) + int(p[3]) + int(p[4])
    theta = np.empty(n)
    dtheta = np.empty((1, 1))
    off = _features(p, y, theta, dtheta, 0)
    for i in range(dim):
        acc = 0.0
        for f in range(n):
            acc += theta[f] * p[off + f * dim + i]
        out[i] = acc


@jit
def library_jacobian(p, y, out):
    """∂(Θ(y) Ξ)_i / ∂y_j into out (dim, dim)."""
    dim = int(p[0])
    n = int(p[1]) + int(p[2]) + int(p[3]) + int(p[4])
    theta = np.empty(n)
    dtheta = np.empty((n, dim))
    off = _features(p, y, theta, dtheta, 1)
    for i in range(dim):
        for j in range(dim):
            acc = 0.0
            for f in range(n):
                acc += dtheta[f, j] * p[off + f * dim + i]
            out[i, j] = acc
