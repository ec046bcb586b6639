"""Sequentially thresholded least squares (pysindy's ``STLSQ``, as the ``sindy+METHOD`` and ``delay_sindy+METHOD``
rows fit it) in plain loops, so that the same Θ and ż give bitwise the same coefficients on every CPU: no BLAS
(whose summation order moves with its thread count and with the CPU's kernels), no ``np.linalg``, no fastmath
(the same bits compiled for any x86-64 CPU as run by the Python interpreter).

The algorithm is pysindy 2.1's ``STLSQ(threshold, alpha, max_iter)`` with its defaults (``unbias=True``, no column
normalisation): for each component, ridge least squares ``min |ż_i − Θ_S c|² + alpha |c|²`` on its kept terms S
(all at first), coefficients below ``threshold`` in magnitude dropped; repeated until no term was dropped in the
first pass, the kept terms stop changing, or ``max_iter`` passes; then the terms with a coefficient above 1e-14
refitted without the ridge. Θ is reduced once by Householder QR to its triangle R and Qᵀż (never the normal
equations: the delay fits' Θ, condition ~1e14, is too ill-conditioned to square); each ridge is the small problem
``[R_S; √alpha I] c ≈ [Qᵀż_i; 0]`` by Householder QR, each refit the minimum-norm least squares by one-sided
Jacobi SVD of R_S, singular values below ``REFIT_CUTOFF`` of the largest left out, as pysindy's refit
(scikit-learn's ``LinearRegression``, ``scipy.linalg.lstsq``) leaves them. On well-posed problems the coefficients
are pysindy's to rounding (tests/test_stlsq.py); on the ill-conditioned ones they are one CPU-independent answer
among the BLAS-dependent ones.
"""

from __future__ import annotations

import numpy as np

from ._jit import jit

__all__ = ["stlsq", "REFIT_CUTOFF"]

#: the refit leaves out singular values below this fraction of the largest: scikit-learn 1.9's
#: ``LinearRegression(tol=1e-6)``, the ``cond`` of its ``scipy.linalg.lstsq``, which pysindy's refit runs
REFIT_CUTOFF = 1e-6


@jit
def _householder(a: np.ndarray, p: int) -> None:
    """Householder QR, in place, of the columns 0..p-1 of ``a`` (shape (p + m, n): the columns of a matrix and its
    m right-hand sides as rows), the reflections applied to the right-hand sides too: R and Qᵀb in the first
    min(n, p) entries of each row (below the diagonal, the rest of Qᵀb; the reflectors are not kept)."""
    ncol, n = a.shape
    for k in range(min(n, p)):
        norm2 = 0.0
        for i in range(k, n):
            norm2 += a[k, i] * a[k, i]
        norm = np.sqrt(norm2)
        if norm == 0.0:
            continue
        alpha = -norm if a[k, k] >= 0.0 else norm
        v0 = a[k, k] - alpha
        beta = norm2 - a[k, k] * a[k, k] + v0 * v0  # vᵀv with v = (v0, a[k, k+1:])
        a[k, k] = v0
        for j in range(k + 1, ncol):
            s = 0.0
            for i in range(k, n):
                s += a[k, i] * a[j, i]
            s = 2.0 * s / beta
            for i in range(k, n):
                a[j, i] -= s * a[k, i]
        a[k, k] = alpha


@jit
def _triangle(a: np.ndarray, p: int) -> np.ndarray:
    """``_householder`` of ``a`` (shape (p + m, n): the columns of [Θ | ż] as rows): the first min(n, p) rows of
    [R | Qᵀż], shape (r, p + m)."""
    ncol, n = a.shape
    r = min(n, p)
    _householder(a, p)
    out = np.zeros((r, ncol))
    for i in range(r):
        for j in range(i, ncol):
            out[i, j] = a[j, i]
    return out


@jit
def _ridge(rq: np.ndarray, target: int, cols: np.ndarray, alpha: float) -> np.ndarray:
    """Ridge least squares ``min |b − R_S c|² + alpha |c|²``, R_S the columns ``cols`` of the triangle and b its
    right-hand side ``target`` (``rq`` from ``_triangle``), by Householder QR of [R_S; √alpha I]."""
    r = rq.shape[0]
    s = cols.shape[0]
    rows = r + s
    m = np.zeros((s + 1, rows))  # columns as rows: the s columns of the matrix, then b
    for j in range(s):
        for i in range(r):
            m[j, i] = rq[i, cols[j]]
        m[j, r + j] = np.sqrt(alpha)
    for i in range(r):
        m[s, i] = rq[i, target]
    _householder(m, s)
    c = np.zeros(s)
    for k in range(s - 1, -1, -1):
        if m[k, k] == 0.0:  # only without a ridge: a column of zeros keeps a 0
            continue
        t = m[s, k]
        for j in range(k + 1, s):
            t -= m[j, k] * c[j]
        c[k] = t / m[k, k]
    return c


@jit
def _svd_solve(rq: np.ndarray, target: int, cols: np.ndarray, rcond: float) -> np.ndarray:
    """The minimum-norm least squares ``min |b − R_S c|`` (as ``_ridge``, no ridge) by one-sided Jacobi SVD of R_S
    (cyclic sweeps in a fixed order), singular values at most ``rcond`` times the largest left out: the solution
    pysindy's refit (``scipy.linalg.lstsq``, sklearn's cutoff) gives."""
    r = rq.shape[0]
    s = cols.shape[0]
    a = np.zeros((s, r))  # columns as rows
    v = np.zeros((s, s))
    for j in range(s):
        v[j, j] = 1.0
        for i in range(r):
            a[j, i] = rq[i, cols[j]]
    eps = np.finfo(np.float64).eps
    for _ in range(80):
        rotated = False
        for j in range(s - 1):
            for k in range(j + 1, s):
                aa = 0.0
                bb = 0.0
                gg = 0.0
                for i in range(r):
                    aa += a[j, i] * a[j, i]
                    bb += a[k, i] * a[k, i]
                    gg += a[j, i] * a[k, i]
                if gg == 0.0 or abs(gg) <= eps * np.sqrt(aa) * np.sqrt(bb):
                    continue
                rotated = True
                zeta = (bb - aa) / (2.0 * gg)
                if abs(zeta) > 1e150:
                    t = 0.5 / zeta
                else:
                    t = (1.0 if zeta >= 0.0 else -1.0) / (abs(zeta) + np.sqrt(1.0 + zeta * zeta))
                cs = 1.0 / np.sqrt(1.0 + t * t)
                sn = cs * t
                for i in range(r):
                    x = a[j, i]
                    a[j, i] = cs * x - sn * a[k, i]
                    a[k, i] = sn * x + cs * a[k, i]
                for i in range(s):
                    x = v[j, i]
                    v[j, i] = cs * x - sn * v[k, i]
                    v[k, i] = sn * x + cs * v[k, i]
        if not rotated:
            break
    sigma2 = np.zeros(s)
    big = 0.0
    for j in range(s):
        for i in range(r):
            sigma2[j] += a[j, i] * a[j, i]
        big = max(big, sigma2[j])
    c = np.zeros(s)
    for j in range(s):
        if sigma2[j] == 0.0 or np.sqrt(sigma2[j]) <= rcond * np.sqrt(big):
            continue
        t = 0.0
        for i in range(r):
            t += a[j, i] * rq[i, target]
        t /= sigma2[j]
        for i in range(s):
            c[i] += v[j, i] * t
    return c


@jit
def _stlsq(rq: np.ndarray, p: int, threshold: float, alpha: float, max_iter: int) -> np.ndarray:
    """The iterations and the refit (module docstring) on the triangle ``rq`` of p features: Ξ, shape (m, p)."""
    m = rq.shape[1] - p
    ind = np.ones((m, p), dtype=np.bool_)
    last = np.ones((m, p), dtype=np.bool_)  # pysindy's start (least squares): every term nonzero
    coef = np.zeros((m, p))
    for _ in range(max_iter):
        if not ind.any():
            coef[:] = 0.0
            break
        coef = np.zeros((m, p))
        for i in range(m):
            cols = np.nonzero(ind[i])[0]
            if cols.shape[0] == 0:
                continue
            c = _ridge(rq, p + i, cols, alpha)
            for j in range(cols.shape[0]):
                coef[i, cols[j]] = c[j]
            for j in range(p):
                ind[i, j] = abs(coef[i, j]) >= threshold
                if not ind[i, j]:
                    coef[i, j] = 0.0
        now = coef != 0.0
        if ind.sum() == m * p or (now == last).all():
            break
        last = now
    out = np.zeros((m, p))
    for i in range(m):
        cols = np.nonzero(np.abs(coef[i]) > 1e-14)[0]
        if cols.shape[0] > 0:
            c = _svd_solve(rq, p + i, cols, REFIT_CUTOFF)
            for j in range(cols.shape[0]):
                out[i, cols[j]] = c[j]
    return out


def stlsq(theta: np.ndarray, zdot: np.ndarray, threshold: float, alpha: float, max_iter: int) -> np.ndarray:
    """pysindy's ``STLSQ(threshold=threshold, alpha=alpha, max_iter=max_iter).fit(theta, zdot).coef_.T``
    (module docstring), the same bits on every CPU.

    Parameters
    ----------
    theta : ndarray, shape (n, p)
        The library's features at the n samples.
    zdot : ndarray, shape (n, m)
        The derivatives.
    threshold, alpha : float
        STLSQ's threshold (>= 0) and ridge term (>= 0).
    max_iter : int
        At most this many thresholding passes.

    Returns
    -------
    ndarray, shape (p, m)
        Ξ: ż ≈ Θ Ξ.

    Raises
    ------
    ValueError
        Θ or ż not finite (pysindy's check, in its words).
    """
    theta = np.asarray(theta, dtype=np.float64)
    zdot = np.asarray(zdot, dtype=np.float64)
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(zdot))):
        raise ValueError("Input contains NaN, infinity or a value too large for dtype('float64').")
    p = theta.shape[1]
    a = np.ascontiguousarray(np.concatenate([theta, zdot], axis=1).T)
    rq = _triangle(a, p)
    return _stlsq(rq, p, float(threshold), float(alpha), int(max_iter)).T
