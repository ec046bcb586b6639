"""The compiled field and Jacobian of a learned vector field (``vpintegrator.models.vector_field``), so that the
compiled steppers (RK4, implicit midpoint, Gauss–Legendre, splittings) run a learned field at batch 1 as they run
a shipped system: kernel id ``LEARNED_FIELD`` of ``vpintegrator.compiled.systems``, its networks packed into the
parameter array ``p`` by `pack_learned_field`.

The arithmetic is that of ``vpintegrator.nn.mlp_bank.mlp_bank`` (forward-mode derivatives of K tanh MLPs)
written element by element, and of each family's ``assemble`` / ``assemble_jacobian``; it agrees with the NumPy
``LearnedField`` to rounding (tests/test_vector_field.py).

``p`` = [family, dim, K, m, width, depth, W_0 (K, width, dim, mask applied), b_0 (K, width), (W_l (K, width,
width), b_l (K, width)) for l = 1 .. depth − 1, C (K, m, width), c (K, m)], every array C-ordered; family 0 hnn,
1 lphnn, 2 divfree, 3 node.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ._jit import jit

__all__ = ["FAMILIES", "pack_learned_field", "learned_vector_field", "learned_jacobian"]

#: the family codes of ``p[0]``
FAMILIES = {"hnn": 0, "lphnn": 1, "divfree": 2, "node": 3}
_HEADER = 6


def pack_learned_field(family: str, dim: int, weights: Sequence[np.ndarray]) -> np.ndarray:
    """The parameter array of a learned field: ``family`` (a key of ``FAMILIES``), ``dim`` and the networks'
    ``weights`` (``MLPBank.weights()`` as float64 NumPy arrays)."""
    W0 = np.asarray(weights[0])
    K, width, _ = W0.shape
    C = np.asarray(weights[-2])
    m = C.shape[1]
    depth = (len(weights) - 2) // 2
    head = np.array([FAMILIES[family], dim, K, m, width, depth], dtype=np.float64)
    return np.ascontiguousarray(np.concatenate([head] + [np.asarray(w, dtype=np.float64).ravel() for w in weights]))


@jit
def _bank(p, y, order, val, G, H):
    """Values val (K, m), input Jacobians G (K, m, dim) (order >= 1) and second derivatives H (K, m, dim, dim)
    (order 2) of the packed networks at y (dim,)."""
    dim, K, m, width, depth = int(p[1]), int(p[2]), int(p[3]), int(p[4]), int(p[5])
    h = np.empty(width)
    hn = np.empty(width)
    dh = np.empty((width, dim))
    dhn = np.empty((width, dim))
    d2h = np.empty((width, dim, dim))
    d2hn = np.empty((width, dim, dim))
    T = np.empty(dim)
    size0 = width * dim + width
    size_l = width * width + width
    offC = _HEADER + K * size0 + (depth - 1) * K * size_l
    offc = offC + K * m * width
    for k in range(K):
        w0 = _HEADER + k * width * dim
        b0 = _HEADER + K * width * dim + k * width
        for u in range(width):
            a = p[b0 + u]
            for j in range(dim):
                a += p[w0 + u * dim + j] * y[j]
            t = math.tanh(a)
            h[u] = t
            if order >= 1:
                s1 = 1.0 - t * t
                for j in range(dim):
                    dh[u, j] = s1 * p[w0 + u * dim + j]
                if order >= 2:
                    s2 = -2.0 * t * s1
                    for i in range(dim):
                        for j in range(dim):
                            d2h[u, i, j] = s2 * p[w0 + u * dim + i] * p[w0 + u * dim + j]
        for layer in range(1, depth):
            base = _HEADER + K * size0 + (layer - 1) * K * size_l
            wl = base + k * width * width
            bl = base + K * width * width + k * width
            for u in range(width):
                a = p[bl + u]
                for v in range(width):
                    a += p[wl + u * width + v] * h[v]
                t = math.tanh(a)
                hn[u] = t
                if order >= 1:
                    s1 = 1.0 - t * t
                    s2 = -2.0 * t * s1
                    for j in range(dim):  # T = W_l dh_{l-1}
                        acc = 0.0
                        for v in range(width):
                            acc += p[wl + u * width + v] * dh[v, j]
                        T[j] = acc
                        dhn[u, j] = s1 * acc
                    if order >= 2:
                        for i in range(dim):
                            for j in range(dim):
                                S = 0.0
                                for v in range(width):
                                    S += p[wl + u * width + v] * d2h[v, i, j]
                                d2hn[u, i, j] = s2 * T[i] * T[j] + s1 * S
            h[:] = hn
            if order >= 1:
                dh[:, :] = dhn
                if order >= 2:
                    d2h[:, :, :] = d2hn
        for o in range(m):
            wc = offC + (k * m + o) * width
            acc = p[offc + k * m + o]
            for u in range(width):
                acc += p[wc + u] * h[u]
            val[k, o] = acc
            if order >= 1:
                for j in range(dim):
                    acc = 0.0
                    for u in range(width):
                        acc += p[wc + u] * dh[u, j]
                    G[k, o, j] = acc
                if order >= 2:
                    for i in range(dim):
                        for j in range(dim):
                            acc = 0.0
                            for u in range(width):
                                acc += p[wc + u] * d2h[u, i, j]
                            H[k, o, i, j] = acc


@jit
def learned_vector_field(p, y, out):
    """f_θ(y) into out (dim,)."""
    family, dim, K, m = int(p[0]), int(p[1]), int(p[2]), int(p[3])
    val = np.empty((K, m))
    G = np.empty((K, m, dim))
    H = np.empty((1, 1, 1, 1))
    if family == 0:  # hnn: J∇H
        _bank(p, y, 1, val, G, H)
        n = dim // 2
        for i in range(n):
            out[i] = G[0, 0, n + i]
            out[n + i] = -G[0, 0, i]
    elif family == 1:  # lphnn: z × ∇H
        _bank(p, y, 1, val, G, H)
        g0, g1, g2 = G[0, 0, 0], G[0, 0, 1], G[0, 0, 2]
        out[0] = y[1] * g2 - y[2] * g1
        out[1] = y[2] * g0 - y[0] * g2
        out[2] = y[0] * g1 - y[1] * g0
    elif family == 2:  # divfree: component i from network i
        _bank(p, y, 0, val, G, H)
        for i in range(dim):
            out[i] = val[i, 0]
    else:  # node
        _bank(p, y, 0, val, G, H)
        for i in range(dim):
            out[i] = val[0, i]


@jit
def learned_jacobian(p, y, out):
    """df_θ/dy into out (dim, dim)."""
    family, dim, K, m = int(p[0]), int(p[1]), int(p[2]), int(p[3])
    val = np.empty((K, m))
    G = np.empty((K, m, dim))
    if family == 0:
        H = np.empty((K, m, dim, dim))
        _bank(p, y, 2, val, G, H)
        n = dim // 2
        for i in range(n):
            for j in range(dim):
                out[i, j] = H[0, 0, n + i, j]
                out[n + i, j] = -H[0, 0, i, j]
    elif family == 1:
        H = np.empty((K, m, dim, dim))
        _bank(p, y, 2, val, G, H)
        g0, g1, g2 = G[0, 0, 0], G[0, 0, 1], G[0, 0, 2]
        for j in range(3):  # z × (Hess e_j) + e_j × g
            out[0, j] = y[1] * H[0, 0, 2, j] - y[2] * H[0, 0, 1, j]
            out[1, j] = y[2] * H[0, 0, 0, j] - y[0] * H[0, 0, 2, j]
            out[2, j] = y[0] * H[0, 0, 1, j] - y[1] * H[0, 0, 0, j]
        out[0, 1] += g2
        out[0, 2] -= g1
        out[1, 0] -= g2
        out[1, 2] += g0
        out[2, 0] += g1
        out[2, 1] -= g0
    else:
        H = np.empty((1, 1, 1, 1))
        _bank(p, y, 1, val, G, H)
        for i in range(dim):
            for j in range(dim):
                out[i, j] = G[i, 0, j] if family == 2 else G[0, i, j]
