"""SciPy's DOP853, compiled with numba, one trajectory at a time with its own step size.

``solve_many`` integrates a batch of initial conditions of a shipped system (rigid body, Volterra,
ABC flow, coupled oscillator) with exactly the algorithm of ``scipy.integrate.solve_ivp(method="DOP853",
t_eval=t, rtol=rtol, atol=atol)`` applied to each trajectory separately:

* SciPy's tableau (``scipy.integrate._ivp.dop853_coefficients``: stages, weights, the 5th- and
  3rd-order error estimators, the three extra stages and the degree-7 interpolant);
* SciPy's error norm, ``|h| * ||err5||^2 / sqrt((||err5||^2 + 0.01 ||err3||^2) * dim)`` with
  ``err = K^T E / scale``, ``scale = atol + rtol * max(|y|, |y_new|)`` over the trajectory's own ``dim``
  components;
* SciPy's controller (safety 0.9, factors within [0.2, 10], exponent -1/8, no growth right after a
  rejection, the step clipped to the end of the interval, failure below 10 ulp of t), SciPy's initial
  step (Hairer-Norsett-Wanner II.4), rtol raised to 100 eps as SciPy does;
* sampling as ``t_eval`` does: each output time ``t[k]`` from the dense output of the step that
  contains it (``t_old < t[k] <= t_new``), the extra stages computed only for steps that contain one.

So every trajectory carries exactly SciPy's per-trajectory guarantee (its own local error estimate
below 1 in SciPy's norm at every accepted step); the results equal a per-trajectory ``solve_ivp`` up to
rounding (different summation order in the dot products; a rounding-level change of a step size moves
the result by far less than the tolerance). The loop over trajectories is compiled, on one thread
(``parallel=False``), and releases the GIL.

The vector fields are the compiled kernels of ``vpintegrator.compiled.systems`` (one per shipped
system, parameters as an array); a system is served only when its class is exactly one of the shipped
classes (a subclass may change the vector field). Without numba, ``available`` is False and the caller uses
its vectorised fallback.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._jit import _numba, njit  # numba is optional: without it the vectorised solve_ivp path is used
from .systems import system_kernel, vector_field
from .user import COMPILED as USER

__all__ = ["GENERATOR", "available", "kernel_for", "solve_many"]

GENERATOR = "vpintegrator numba DOP853 (scipy's tableau, error norm and controller) per trajectory"

# the flag the callers test (tests monkeypatch it to exercise the fallback)
NUMBA = _numba is not None

# SciPy's DOP853 tableau, copied from scipy.integrate._ivp.dop853_coefficients (scipy 1.17; unchanged
# since scipy 1.4) so that the compiled path does not import scipy.integrate (0.2 s of a vp-gen run);
# tests/test_gen_compiled.py checks it equals SciPy's bit for bit.
_N_STAGES = 12
_N_EXT = 16
_A = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.05260015195876773, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0197250569845379, 0.0591751709536137, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.02958758547680685, 0.0, 0.08876275643042054, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.2413651341592667, 0.0, -0.8845494793282861, 0.924834003261792, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.037037037037037035, 0.0, 0.0, 0.17082860872947386, 0.12546768756682242, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.037109375, 0.0, 0.0, 0.17025221101954405, 0.06021653898045596, -0.017578125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.03709200011850479, 0.0, 0.0, 0.17038392571223998, 0.10726203044637328, -0.015319437748624402, 0.008273789163814023, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.6241109587160757, 0.0, 0.0, -3.3608926294469414, -0.868219346841726, 27.59209969944671, 20.154067550477894, -43.48988418106996, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.47766253643826434, 0.0, 0.0, -2.4881146199716677, -0.590290826836843, 21.230051448181193, 15.279233632882423, -33.28821096898486, -0.020331201708508627, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [-0.9371424300859873, 0.0, 0.0, 5.186372428844064, 1.0914373489967295, -8.149787010746927, -18.52006565999696, 22.739487099350505, 2.4936055526796523, -3.0467644718982196, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [2.273310147516538, 0.0, 0.0, -10.53449546673725, -2.0008720582248625, -17.9589318631188, 27.94888452941996, -2.8589982771350235, -8.87285693353063, 12.360567175794303, 0.6433927460157636, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034, 0.04471061572777259, 0.0, 0.0, 0.0, 0.0],
    [0.056167502283047954, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25350021021662483, -0.2462390374708025, -0.12419142326381637, 0.15329179827876568, 0.00820105229563469, 0.007567897660545699, -0.008298, 0.0, 0.0, 0.0],
    [0.03183464816350214, 0.0, 0.0, 0.0, 0.0, 0.028300909672366776, 0.053541988307438566, -0.05492374857139099, 0.0, 0.0, -0.00010834732869724932, 0.0003825710908356584, -0.00034046500868740456, 0.1413124436746325, 0.0, 0.0],
    [-0.42889630158379194, 0.0, 0.0, 0.0, 0.0, -4.697621415361164, 7.683421196062599, 4.06898981839711, 0.3567271874552811, 0.0, 0.0, 0.0, -0.0013990241651590145, 2.9475147891527724, -9.15095847217987, 0.0],
])
_B = np.array([0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034, 0.04471061572777259])
_C = np.array([0.0, 0.05260015195876773, 0.0789002279381516, 0.1183503419072274, 0.2816496580927726, 0.3333333333333333, 0.25, 0.3076923076923077, 0.6512820512820513, 0.6, 0.8571428571428571, 1.0, 1.0, 0.1, 0.2, 0.7777777777777778])
_E3 = np.array([-0.18980075407240762, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, -0.4226823213237919, -0.1521609496625161, 0.20136540080403034, 0.02265179219836082, 0.0])
_E5 = np.array([0.01312004499419488, 0.0, 0.0, 0.0, 0.0, -1.2251564463762044, -0.4957589496572502, 1.6643771824549864, -0.35032884874997366, 0.3341791187130175, 0.08192320648511571, -0.022355307863886294, 0.0])
_D = np.array([
    [-8.428938276109013, 0.0, 0.0, 0.0, 0.0, 0.5667149535193777, -3.0689499459498917, 2.38466765651207, 2.117034582445028, -0.871391583777973, 2.2404374302607883, 0.6315787787694688, -0.08899033645133331, 18.148505520854727, -9.194632392478356, -4.436036387594894],
    [10.427508642579134, 0.0, 0.0, 0.0, 0.0, 242.28349177525817, 165.20045171727028, -374.5467547226902, -22.113666853125306, 7.733432668472264, -30.674084731089398, -9.332130526430229, 15.697238121770845, -31.139403219565178, -9.35292435884448, 35.81684148639408],
    [19.985053242002433, 0.0, 0.0, 0.0, 0.0, -387.0373087493518, -189.17813819516758, 527.8081592054236, -11.57390253995963, 6.8812326946963, -1.0006050966910838, 0.7777137798053443, -2.778205752353508, -60.19669523126412, 84.32040550667716, 11.99229113618279],
    [-25.69393346270375, 0.0, 0.0, 0.0, 0.0, -154.18974869023643, -231.5293791760455, 357.6391179106141, 93.40532418362432, -37.45832313645163, 104.0996495089623, 29.8402934266605, -43.53345659001114, 96.32455395918828, -39.17726167561544, -149.72683625798564],
])


_RTOL_FLOOR = 100 * np.finfo(np.float64).eps

# status codes of solve_many, per trajectory
OK, TOO_SMALL_STEP = 0, 1


def available() -> bool:
    """Whether the compiled path can run (numba importable)."""
    return NUMBA


def kernel_for(system) -> tuple[Any, np.ndarray] | None:
    """``(kind, params)`` of the compiled vector field of ``system`` (``vpintegrator.compiled.systems.system_kernel``: a
    shipped class's integer id, or a user's system's parameter tuple when its field compiles), or None."""
    return system_kernel(system)


def _solve_one_py(kind, p, y0, t, rtol, atol, out, K, F, y, y_new, scale, ynew_tmp, acc, acc3):  # pragma: no cover
    """One trajectory; writes out (n_t, dim); returns (status, t reached)."""
    n = y0.shape[0]
    n_t = t.shape[0]
    t0 = t[0]
    t_bound = t[n_t - 1]
    for j in range(n):
        y[j] = y0[j]
    f = K[0]  # f at the current point lives in K[0] at the start of each step
    vector_field(kind, p, y, f)
    # --- select_initial_step (direction +1, max_step inf, error estimator order 7)
    interval = abs(t_bound - t0)
    d0 = 0.0
    d1 = 0.0
    for j in range(n):
        sc = atol + abs(y[j]) * rtol
        scale[j] = sc
        d0 += (y[j] / sc) ** 2
        d1 += (f[j] / sc) ** 2
    d0 = math.sqrt(d0) / math.sqrt(n)
    d1 = math.sqrt(d1) / math.sqrt(n)
    if d0 < 1e-5 or d1 < 1e-5:
        h0 = 1e-6
    else:
        h0 = 0.01 * d0 / d1
    h0 = min(h0, interval)
    for j in range(n):
        ynew_tmp[j] = y[j] + h0 * f[j]
    f1 = K[1]
    vector_field(kind, p, ynew_tmp, f1)
    d2 = 0.0
    for j in range(n):
        d2 += ((f1[j] - f[j]) / scale[j]) ** 2
    d2 = math.sqrt(d2) / math.sqrt(n) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / 8.0)
    h_abs = min(100 * h0, h1, interval)

    tt = t0
    i_eval = 0
    exponent = -1.0 / 8.0
    while True:
        if tt == t_bound:
            break
        # --- RungeKutta._step_impl
        min_step = 10 * abs(np.nextafter(tt, np.inf) - tt)
        if h_abs < min_step:
            h_abs = min_step
        accepted = False
        rejected = False
        h = 0.0
        t_new = tt
        while not accepted:
            if h_abs < min_step:
                return TOO_SMALL_STEP, tt
            h = h_abs
            t_new = tt + h
            if t_new - t_bound > 0:
                t_new = t_bound
            h = t_new - tt
            h_abs = abs(h)
            # rk_step: K[0] = f already
            for s in range(1, _N_STAGES):
                for j in range(n):
                    a = 0.0
                    for r in range(s):
                        a += K[r, j] * _A[s, r]
                    ynew_tmp[j] = y[j] + a * h
                vector_field(kind, p, ynew_tmp, K[s])
            for j in range(n):
                a = 0.0
                for r in range(_N_STAGES):
                    a += K[r, j] * _B[r]
                y_new[j] = y[j] + h * a
            vector_field(kind, p, y_new, K[_N_STAGES])
            # error norm
            e5 = 0.0
            e3 = 0.0
            for j in range(n):
                sc = atol + max(abs(y[j]), abs(y_new[j])) * rtol
                a5 = 0.0
                a3 = 0.0
                for r in range(_N_STAGES + 1):
                    a5 += K[r, j] * _E5[r]
                    a3 += K[r, j] * _E3[r]
                a5 = a5 / sc
                a3 = a3 / sc
                e5 += a5 * a5
                e3 += a3 * a3
            if e5 == 0 and e3 == 0:
                error_norm = 0.0
            else:
                error_norm = abs(h) * e5 / math.sqrt((e5 + 0.01 * e3) * n)
            if error_norm < 1:
                if error_norm == 0:
                    factor = 10.0
                else:
                    factor = min(10.0, 0.9 * error_norm**exponent)
                if rejected:
                    factor = min(1.0, factor)
                h_abs *= factor
                accepted = True
            else:
                if error_norm != error_norm or math.isinf(error_norm):  # NaN/inf: as Python's max(0.2, nan)
                    h_abs *= 0.2
                else:
                    h_abs *= max(0.2, 0.9 * error_norm**exponent)
                rejected = True
        t_old = tt
        tt = t_new
        # --- t_eval: every t[k] with t_old < t[k] <= t_new (t[0] with the first step) from the dense output
        i_new = i_eval
        while i_new < n_t and t[i_new] <= tt:
            i_new += 1
        if i_new > i_eval:
            for s in range(_N_STAGES + 1, _N_EXT):
                for j in range(n):
                    a = 0.0
                    for r in range(s):
                        a += K[r, j] * _A[s, r]
                    ynew_tmp[j] = y[j] + a * h
                vector_field(kind, p, ynew_tmp, K[s])
            for j in range(n):
                dy = y_new[j] - y[j]
                f_old = K[0, j]
                F[0, j] = dy
                F[1, j] = h * f_old - dy
                F[2, j] = 2 * dy - h * (K[_N_STAGES, j] + f_old)
                for q in range(4):
                    a = 0.0
                    for r in range(_N_EXT):
                        a += _D[q, r] * K[r, j]
                    F[3 + q, j] = h * a
            for k in range(i_eval, i_new):
                x = (t[k] - t_old) / h
                for j in range(n):
                    v = 0.0
                    for i in range(7):
                        v += F[6 - i, j]
                        if i % 2 == 0:
                            v *= x
                        else:
                            v *= 1 - x
                    out[k, j] = v + y[j]
            i_eval = i_new
        for j in range(n):
            y[j] = y_new[j]
            K[0, j] = K[_N_STAGES, j]
        if tt - t_bound >= 0:
            break
    return OK, tt


def _solve_many_py(kind, p, y0, t, rtol, atol, out, status, t_fail):  # pragma: no cover - compiled below
    n_traj, n = y0.shape
    K = np.empty((_N_EXT, n))
    F = np.empty((7, n))
    y = np.empty(n)
    y_new = np.empty(n)
    scale = np.empty(n)
    tmp = np.empty(n)
    acc = np.empty(n)
    acc3 = np.empty(n)
    for i in range(n_traj):
        st, tt = _solve_one(kind, p, y0[i], t, rtol, atol, out[i], K, F, y, y_new, scale, tmp, acc, acc3)
        status[i] = st
        t_fail[i] = tt


if NUMBA:
    _solve_one = njit(nogil=True)(_solve_one_py)
    _solve_many = njit(nogil=True)(_solve_many_py)
else:  # pragma: no cover
    _solve_one = _solve_many = None


def solve_many(kind: Any, params: np.ndarray, y0: np.ndarray, t: np.ndarray, rtol: float, atol: float):
    """Integrate ``y0`` (n_traj, dim) and sample at ``t``; returns ``(y, status, t_reached)``.

    ``y`` (n_traj, n_t, dim) with ``y[:, 0] = y0``; ``status[i]`` is ``OK`` or
    ``TOO_SMALL_STEP`` (then ``t_reached[i]`` is where trajectory ``i`` stopped and its later
    samples are undefined).
    """
    if not NUMBA:
        raise RuntimeError("the compiled DOP853 needs numba")
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    t = np.ascontiguousarray(t, dtype=np.float64)
    n_traj, dim = y0.shape
    out = np.empty((n_traj, t.size, dim))
    status = np.zeros(n_traj, dtype=np.int64)
    t_fail = np.zeros(n_traj)
    if n_traj and t.size > 1:
        rtol = max(float(rtol), _RTOL_FLOOR)  # what solve_ivp does (with a warning)
        try:
            _solve_many(kind if type(kind) in USER else int(kind), np.ascontiguousarray(params, dtype=np.float64), y0, t, rtol, float(atol), out, status,
                        t_fail)
        except ZeroDivisionError:  # an error norm that overflowed float64 to inf (numba raises where NumPy gives inf)
            from ..errors import VPIntegratorError

            with np.errstate(all="ignore"):
                big = float(np.max(np.abs(y0))) if y0.size else 0.0
            raise VPIntegratorError(
                f"integration: intermediate values overflow float64 (system parameters "
                f"{np.asarray(params).ravel().tolist()}, largest |initial state| {big:.3g}); the parameters or initial "
                "conditions are too large or too small for double precision: rescale them") from None
    out[:, 0] = y0
    return out, status, t_fail
