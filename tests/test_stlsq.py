"""The SINDy rows' sequentially thresholded least squares in plain loops (vpintegrator.compiled.stlsq): pysindy's
``STLSQ`` coefficients and support on well-posed problems, and the same bits under every BLAS kernel and thread
count (the delay fits are ill-conditioned enough that BLAS's summation order moved the memory study's row)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("numba")
ps = pytest.importorskip("pysindy")

from vpintegrator.compiled.stlsq import stlsq  # noqa: E402


def _problem(seed=0, n=300, p=15, m=3):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(n, p))
    xi = np.where(rng.random((p, m)) < 0.4, rng.uniform(0.05, 2.0, (p, m)) * rng.choice([-1, 1], (p, m)), 0.0)
    return theta, theta @ xi + 1e-3 * rng.normal(size=(n, m))


def _pysindy(theta, zdot, threshold, alpha, max_iter=50):
    opt = ps.STLSQ(threshold=threshold, alpha=alpha, max_iter=max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.fit(theta, zdot)
    return opt.coef_.T


@pytest.mark.parametrize("threshold, alpha", [(0.0, 1e-8), (1e-3, 1e-8), (0.1, 1e-8), (0.3, 1.0), (0.8, 5.0),
                                              (5.0, 1e-8)])
def test_pysindy_coefficients_and_support(threshold, alpha):
    theta, zdot = _problem()
    ref = _pysindy(theta, zdot, threshold, alpha)
    xi = stlsq(theta, zdot, threshold, alpha, 50)
    assert xi.shape == ref.shape
    np.testing.assert_array_equal(xi != 0, ref != 0)
    np.testing.assert_allclose(xi, ref, rtol=0, atol=1e-10)


def test_rank_deficient_refit_is_the_minimum_norm_one():
    """Two equal columns: the refit splits their coefficient as pysindy's (scipy's ``lstsq``) does; one iteration
    only, so that the ridge iterations keep both."""
    theta, zdot = _problem(1)
    theta[:, 5] = theta[:, 4]
    ref = _pysindy(theta, zdot, 1e-3, 1e-8, max_iter=1)
    xi = stlsq(theta, zdot, 1e-3, 1e-8, 1)
    np.testing.assert_array_equal(xi != 0, ref != 0)
    np.testing.assert_allclose(xi, ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(xi[4], xi[5], rtol=1e-12)



@pytest.mark.parametrize("T", [60, 8, 5, 3])
def test_derivatives_are_pysindys_finite_differences(T):
    """The derivatives' exact stencil weights (no LAPACK solve) give pysindy's ``FiniteDifference`` to rounding, at
    the highest even order the trajectories' length allows."""
    from vpintegrator.rollout.sindy import FD_ORDER, derivatives

    t = 0.05 * np.arange(T)
    y = np.stack([np.stack([np.sin((1 + w) * t), np.cos(t) * w], 1) for w in range(3)])
    order = min(FD_ORDER, 2 * ((T - 1) // 2))
    m = order // 2
    fd = ps.FiniteDifference(order=order, drop_endpoints=True, axis=0)
    ref = np.concatenate([np.asarray(fd(y[i], 0.05))[m:T - m] for i in range(3)])
    z, zdot = derivatives(y, 0.05)
    np.testing.assert_array_equal(z, y[:, m:T - m].reshape(-1, 2))
    np.testing.assert_allclose(zdot, ref, rtol=0, atol=1e-12 * np.abs(ref).max())

_HASH = """
import hashlib, numpy as np
from vpintegrator.rollout.sindy import derivatives, fit_sindy
t = 0.05 * np.arange(301)
x = np.stack([np.stack([np.sin(w * t + w), np.cos(1.3 * w * t), np.sin(0.7 * t + w) ** 2], 1) for w in (1, 1.5, 2)])
z = np.concatenate([x[:, :-1], x[:, 1:]], 2)  # delay vectors: their poly3 features nearly collinear
fit = fit_sindy(*derivatives(z, 0.05), "poly3", 1e-3)
print(fit.n_terms, hashlib.sha1(fit.field.coefficients.tobytes()).hexdigest())
"""


def test_same_bits_under_every_blas_kernel_and_thread_count():
    """A SINDy fit (the derivatives and STLSQ of ``fit_sindy``) in subprocesses with OpenBLAS forced to kernels every
    x86-64 CPU runs, on one and two threads (another BLAS ignores the variables, and the test still holds)."""
    hashes = set()
    for env in ({"OPENBLAS_CORETYPE": "Nehalem", "OPENBLAS_NUM_THREADS": "1"},
                {"OPENBLAS_CORETYPE": "Sandybridge", "OPENBLAS_NUM_THREADS": "2"},
                {"OPENBLAS_NUM_THREADS": "1"}, {"OPENBLAS_NUM_THREADS": "2"}):
        out = subprocess.run([sys.executable, "-c", _HASH], env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        hashes.add(out.stdout.strip())
    assert len(hashes) == 1, hashes
