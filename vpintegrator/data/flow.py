"""The exact flow: SciPy's DOP853 at per-trajectory tolerances, on a batch of initial conditions.

[`solve_flow`][vpintegrator.data.flow.solve_flow] integrates a batch of initial conditions with DOP853 at
per-trajectory tolerances. For the shipped systems, with numba installed, it runs ``vpintegrator.compiled.dop853``:
SciPy's DOP853 (tableau, error norm, step-size controller, dense output) compiled, each trajectory with its own
step size, so each trajectory gets exactly what a separate ``solve_ivp(method="DOP853", rtol, atol)`` call gives
it. Otherwise (no numba, or a user-defined system) it stacks the batch into one ``solve_ivp`` call on the stacked
state (a vectorised right-hand side) with tolerances scaled by ``1/sqrt(batch)``. vp-gen's DOP853 data
([`generate`][vpintegrator.data.generation.generate]) and every exact-flow reference of a rollout come from here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..compiled import dop853 as _dop853
from ..errors import VPIntegratorError
from ..systems import System, get_system

__all__ = ["compiled_kernel", "max_batch", "solve_flow"]

# solve_ivp raises rtol below 100 eps to 100 eps (with a warning)
_RTOL_FLOOR = 100 * np.finfo(np.float64).eps


def max_batch(rtol: float) -> int:
    """Largest batch whose scaled tolerance ``rtol / sqrt(batch)`` stays above SciPy's floor."""
    return max(1, int((rtol / _RTOL_FLOOR) ** 2))


def compiled_kernel(system: System) -> tuple[Any, np.ndarray] | None:
    """The compiled DOP853's vector field for ``system``, or None (no numba, or a system whose field does not compile:
    ``vpintegrator.compiled.user``)."""
    if not _dop853.available():
        return None
    return _dop853.kernel_for(system)


def solve_flow(
    system: System | str,
    y0: np.ndarray,
    t: np.ndarray,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    compiled: bool | None = None,
) -> np.ndarray:
    """Integrate a batch of initial conditions with SciPy's DOP853 at per-trajectory tolerances.

    Compiled path (``compiled`` None or True; used when numba is installed and ``system`` is a shipped class or a
    user's system whose field compiles, ``vpintegrator.compiled.user``): ``vpintegrator.compiled.dop853.solve_many``, SciPy's DOP853 algorithm (tableau,
    error norm over the trajectory's own components, step-size controller, dense output sampled at
    ``t``) compiled and run on each trajectory with its own step size. Each trajectory gets exactly the
    guarantee of its own ``solve_ivp(method="DOP853", t_eval=t, rtol=rtol, atol=atol)`` call, and the
    same numbers up to rounding. ``compiled=True`` raises when that path is not available.

    Vectorised path (``compiled=False``, or no numba, or a system whose field does not compile): all trajectories
    are stacked into one state of size ``n_traj * dim`` and integrated by one
    ``solve_ivp`` call whose right-hand side evaluates the vector field on the whole batch. The solver's
    RMS error norm over all ``n_traj * dim`` components would let a hard trajectory hide behind easy
    ones, so ``rtol`` and ``atol`` are divided by ``sqrt(n_traj)``: then every trajectory's own
    error norm is at most what a separate ``solve_ivp(rtol, atol)`` call would accept. Batches are split
    so that the scaled ``rtol`` stays above SciPy's floor of 100 eps (at most 2028 trajectories per call
    at ``rtol = 1e-12``).

    Parameters
    ----------
    system : System or str
        The system (or its registry name).
    y0 : ndarray, shape (n_traj, dim)
        Initial conditions at ``t[0]``.
    t : ndarray, shape (n_steps,)
        Increasing output times; the solution is sampled there (DOP853's dense output).
    rtol, atol : float
        Per-trajectory tolerances.
    compiled : bool or None
        None: the compiled path where available, else the vectorised one; True: the compiled path
        (an error where unavailable); False: the vectorised one.

    Returns
    -------
    ndarray, shape (n_traj, n_steps, dim)
        ``y[:, 0]`` is ``y0``.
    """
    system = get_system(system)
    y0 = np.array(y0, dtype=np.float64)
    if y0.ndim != 2 or y0.shape[1] != system.dim:
        raise VPIntegratorError(f"solve_flow: y0 must have shape (n_traj, {system.dim}); got {y0.shape}")
    if not np.all(np.isfinite(y0)):
        i = int(np.argmin(np.all(np.isfinite(y0), axis=1)))
        raise VPIntegratorError(f"solve_flow: initial condition {i} is not finite: {y0[i].tolist()}")
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise VPIntegratorError("solve_flow: t must be a non-empty, finite, strictly increasing 1-d array")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
            raise VPIntegratorError(f"solve_flow: {name} must be a finite number > 0; got {tol!r}")
    n_traj, dim = y0.shape
    kernel = None if compiled is False else compiled_kernel(system)
    if compiled and kernel is None:
        why = "numba is not installed" if not _dop853.available() else f"no compiled vector field for {type(system).__name__}"
        raise VPIntegratorError(f"solve_flow: compiled=True but {why}; pass compiled=None or False")
    if kernel is not None:
        return _solve_compiled(kernel, y0, t, rtol, atol)
    out = np.empty((n_traj, t.size, dim))
    out[:, 0] = y0
    if t.size == 1 or n_traj == 0:
        return out
    batch = max_batch(rtol)
    for start in range(0, n_traj, batch):
        out[start : start + batch] = _solve_batch(system, y0[start : start + batch], t, rtol, atol)
    return out


def _solve_compiled(kernel: tuple[int, np.ndarray], y0: np.ndarray, t: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    y, status, t_reached = _dop853.solve_many(kernel[0], kernel[1], y0, t, rtol, atol)
    bad = np.flatnonzero(status != _dop853.OK)
    if bad.size:
        i = int(bad[0])
        raise VPIntegratorError(
            f"solve_flow: DOP853 failed for initial condition {i} ({bad.size} of {y0.shape[0]} failed) at "
            f"t = {t_reached[i]:g}: required step size is less than spacing between numbers; "
            "check the initial conditions, or loosen rtol/atol"
        )
    return y


def _solve_batch(system: System, y0: np.ndarray, t: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    from scipy.integrate import solve_ivp  # here, not at import: the compiled path does without scipy.integrate

    k, dim = y0.shape
    scale = math.sqrt(k)

    def rhs(_: float, y: np.ndarray) -> np.ndarray:  # y (k * dim,) -> (k * dim,)
        return system.vector_field(y.reshape(k, dim)).reshape(-1)

    sol = solve_ivp(
        rhs, (t[0], t[-1]), y0.reshape(-1), method="DOP853", t_eval=t, rtol=rtol / scale, atol=atol / scale
    )
    if sol.status != 0:
        raise VPIntegratorError(
            f"solve_flow: DOP853 failed at t = {sol.t[-1] if sol.t.size else t[0]:g}: {sol.message}; "
            "check the initial conditions, or loosen rtol/atol"
        )
    y = sol.y.reshape(k, dim, t.size).transpose(0, 2, 1)  # (k * dim, n_steps) -> (k, n_steps, dim)
    y[:, 0] = y0
    return y
