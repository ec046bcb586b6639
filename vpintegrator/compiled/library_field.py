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
Ξ (n_features, dim), factors (n_mono, degree)], every array C-ordered, integers as float64; a monomial's factors are
its components repeated by their powers, in component order, padded with -1 to the library's largest degree (the
field multiplies them in turn: its arithmetic is a loop written from the powers, ``x_0 x_0 x_3`` as
``(x_0 x_0) x_3``; the Jacobian reads the powers).
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
    counts = powers.astype(np.int64)
    degree = int(counts.sum(1).max()) if counts.size else 0
    factors = np.full((powers.shape[0], degree), -1.0)
    for f, row in enumerate(counts):
        idx = np.repeat(np.arange(dim), row)
        factors[f, :idx.size] = idx
    parts = [head, powers.ravel(), np.asarray(sin, dtype=np.float64), np.asarray(cos, dtype=np.float64),
             np.asarray(exp, dtype=np.float64), np.asarray(coefficients, dtype=np.float64).ravel(), factors.ravel()]
    return np.ascontiguousarray(np.concatenate(parts))


@jit
def _ipow(x, e):
    """x ** e for an integer e >= 0 by repeated products (e = 0: 1)."""
    v = 1.0
    for _ in range(e):
        v *= x
    return v


@jit
def _feature(p, y, f, j):
    """Feature f of Θ at y (j < 0), or its derivative ∂Θ_f/∂y_j (j >= 0); no array is allocated (the steppers
    call the field a few times a step)."""
    dim, n_mono, n_sin, n_cos = int(p[0]), int(p[1]), int(p[2]), int(p[3])
    if f < n_mono:
        row = _HEADER + f * dim
        if j < 0:
            v = 1.0
            for k in range(dim):
                v *= _ipow(y[k], int(p[row + k]))
            return v
        e = int(p[row + j])
        if e == 0:
            return 0.0
        d = float(e)
        for k in range(dim):
            d *= _ipow(y[k], int(p[row + k]) - (1 if k == j else 0))
        return d
    g = f - n_mono
    c = int(p[_HEADER + n_mono * dim + g])  # the component (sin, cos and exp components follow one another)
    if j >= 0 and j != c:
        return 0.0
    x = y[c]
    if g < n_sin:
        return math.sin(x) if j < 0 else math.cos(x)
    if g < n_sin + n_cos:
        return math.cos(x) if j < 0 else -math.sin(x)
    return math.exp(x)


@jit
def _layout(p):
    """(dim, the number of features, the offset of Ξ) of a packed field ``p``."""
    dim, n_mono = int(p[0]), int(p[1])
    n = n_mono + int(p[2]) + int(p[3]) + int(p[4])
    return dim, n, _HEADER + n_mono * dim + n - n_mono


@jit
def library_vector_field(p: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """Θ(y) Ξ into out (dim,); a monomial as the product of its factors (no loop over the components it lacks)."""
    dim, n, xi = _layout(p)
    n_mono = int(p[1])
    fac = xi + n * dim
    degree = (p.size - fac) // n_mono if n_mono else 0
    for i in range(dim):
        out[i] = 0.0
    for f in range(n):
        if f < n_mono:
            v = 1.0
            for q in range(fac + f * degree, fac + (f + 1) * degree):
                j = int(p[q])
                if j < 0:
                    break
                v *= y[j]
        else:
            v = _feature(p, y, f, -1)
        row = xi + f * dim
        for i in range(dim):
            out[i] += v * p[row + i]


@jit
def library_jacobian(p: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """∂(Θ(y) Ξ)_i / ∂y_j into out (dim, dim)."""
    dim, n, xi = _layout(p)
    for i in range(dim):
        for j in range(dim):
            out[i, j] = 0.0
    for f in range(n):
        for j in range(dim):
            d = _feature(p, y, f, j)
            if d != 0.0:
                for i in range(dim):
                    out[i, j] += d * p[xi + f * dim + i]
