"""Comparing two code paths that compute the same numbers in a different floating-point order.

Two paths (a compiled kernel and NumPy, SciPy's ``solve_ivp`` and the compiled DOP853, a batch and one
row at a time through BLAS, torch and NumPy) may round apart by an ulp per operation depending on the
CPU (vector width, FMA contraction, the BLAS kernel chosen): on a 2-core AVX-512 EPYC the rollout of
``implicit_midpoint_tj4`` differed from ``integrate`` by one ulp at step 35. Such pairs are compared with
:func:`assert_ulp_close`; bit-equality stays where the same code runs on the same data (resume, shards,
workers, chunking, a file read back), and those tests say so.
"""

from __future__ import annotations

import numpy as np


def ulp_tolerance(want, ulps: float = 4, steps: int = 1) -> float:
    """``ulps * max(1, steps)`` units in the last place of the largest finite ``|want|`` (in want's dtype):
    a rounding difference in one component reaches the others through the map, and each of ``steps``
    steps may add its own."""
    want = np.asarray(want)
    dtype = want.dtype if want.dtype.kind == "f" else np.dtype(np.float64)
    finite = np.abs(want[np.isfinite(want)])
    scale = float(finite.max()) if finite.size else 0.0
    return float(ulps * max(1, steps) * np.spacing(dtype.type(max(scale, np.finfo(dtype).tiny))))


def assert_ulp_close(got, want, ulps: float = 4, steps: int = 1, err_msg: str = "") -> None:
    """``got`` equals ``want`` up to :func:`ulp_tolerance` (NaN in the same places, same shape)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape, err_msg)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=err_msg)
    np.testing.assert_allclose(got, want, rtol=0, atol=ulp_tolerance(want, ulps, steps), err_msg=err_msg)
