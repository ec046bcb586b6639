"""The compiled field and Jacobian of a fitted library field ż = Θ(z) Ξ (``vpintegrator.rollout.sindy.SindyField``,
the ``sindy+METHOD`` rows), so that the compiled steppers (RK4, implicit midpoint, Gauss–Legendre, ...) run a
SINDy fit at batch 1 as they run a shipped system: kernel id ``LIBRARY_FIELD`` of
``vpintegrator.compiled.systems``, the library and coefficients packed into the parameter array ``p`` by
`pack_library_field`. Without it a fitted field ran on the NumPy path, about 1000× the oracle's cost per step,
which put SINDy's rows at a cost that was the stepper's, not the method's.

The features are those of ``vpintegrator.rollout.sindy.Library`` (monomials by exponent rows, then sin z_c,
cos z_c, exp z_c), the derivatives analytic, as ``Library.gradient``; a monomial's powers are products of
repeated factors, so values agree with the NumPy field to rounding (tests/test_sindy_compiled.py).

``p`` = [dim, n_mono, n_sin, n_cos, n_exp, degree, factors (n_mono, degree), sin components, cos components, exp
components, Ξ (n_features, dim)], every array C-ordered, integers as float64; a monomial's factors are its components
repeated by their powers, in component order, padded with -1 to the library's largest degree ``degree``: the monomial
is their product in turn (``x_0^2 x_3`` as ``(x_0 x_0) x_3``), its derivative in x_j the power of j times the
product of the others (the first j left out), so no loop visits a component the monomial lacks.
"""

from __future__ import annotations

import math

import numpy as np

from ._jit import jit

__all__ = ["pack_library_field", "library_vector_field", "library_jacobian"]

_HEADER = 6


def pack_library_field(powers: np.ndarray, sin: tuple[int, ...], cos: tuple[int, ...], exp: tuple[int, ...],
                       coefficients: np.ndarray) -> np.ndarray:
    """The parameter array of the field Θ(z) Ξ: monomial exponent rows ``powers`` (n_mono, dim), the components
    of the sin, cos and exp features, and Ξ ``coefficients`` (n_features, dim)."""
    counts = np.asarray(powers, dtype=np.int64).reshape(-1, np.shape(coefficients)[1])
    n_mono, dim = counts.shape
    degree = int(counts.sum(1).max()) if n_mono else 0
    factors = np.full((n_mono, degree), -1.0)
    for f, row in enumerate(counts):
        idx = np.repeat(np.arange(dim), row)
        factors[f, :idx.size] = idx
    head = np.array([dim, n_mono, len(sin), len(cos), len(exp), degree], dtype=np.float64)
    parts = [head, factors.ravel(), np.asarray(sin, dtype=np.float64), np.asarray(cos, dtype=np.float64),
             np.asarray(exp, dtype=np.float64), np.asarray(coefficients, dtype=np.float64).ravel()]
    return np.ascontiguousarray(np.concatenate(parts))


@jit
def _feature(p, y, f, j):
    """Feature f of Θ at y (j < 0), or its derivative ∂Θ_f/∂y_j (j >= 0); no array is allocated (the steppers
    call the field a few times a step; the field computes its monomials itself)."""
    n_mono, n_sin, degree = int(p[1]), int(p[2]), int(p[5])
    if f < n_mono:
        v = 1.0
        e = 0  # the power of y_j
        for q in range(_HEADER + f * degree, _HEADER + (f + 1) * degree):
            i = int(p[q])
            if i < 0:
                break
            if i == j:
                e += 1
                if e == 1:  # the factor differentiated away
                    continue
            v *= y[i]
        return v if j < 0 else e * v if e else 0.0
    g = f - n_mono
    c = int(p[_HEADER + n_mono * degree + g])  # the component (sin, cos and exp components follow one another)
    if j >= 0 and j != c:
        return 0.0
    x = y[c]
    if g < n_sin:
        return math.sin(x) if j < 0 else math.cos(x)
    if g < n_sin + int(p[3]):
        return math.cos(x) if j < 0 else -math.sin(x)
    return math.exp(x)


@jit
def _layout(p):
    """(dim, the number of features, the offset of Ξ) of a packed field ``p``."""
    dim, n_mono = int(p[0]), int(p[1])
    n = n_mono + int(p[2]) + int(p[3]) + int(p[4])
    return dim, n, _HEADER + n_mono * int(p[5]) + n - n_mono


@jit
def library_vector_field(p: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """Θ(y) Ξ into out (dim,); a monomial's product written here (``_feature``'s loop, with its test of a derivative,
    costs the field 4x)."""
    dim, n, xi = _layout(p)
    n_mono, degree = int(p[1]), int(p[5])
    for i in range(dim):
        out[i] = 0.0
    for f in range(n):
        if f < n_mono:
            v = 1.0
            for q in range(_HEADER + f * degree, _HEADER + (f + 1) * degree):
                k = int(p[q])
                if k < 0:
                    break
                v *= y[k]
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
