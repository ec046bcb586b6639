"""[`integrate`][vpintegrator.data.integration.integrate]: run a classical method on a batch for ``n_steps`` steps into a Trajectories, by the rollout
core's block loop ([`vpintegrator.stepping.run_blocks`][vpintegrator.stepping.run_blocks])."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError, finite_float
from ..systems import System, get_system, system_meta
from ..systems.initial_conditions import as_points
from ..integrators import Integrator, NotConverged, check_dt, get_integrator
from ..stepping import block_schedule, run_blocks
from .trajectories import Trajectories

#: steps per block of the block loop (any value gives the same states: each step depends on the last only)
CHUNK_STEPS = 1024


def integrate(
    system: System | str,
    y0: np.ndarray,
    dt: float,
    n_steps: int,
    method: str | Integrator = "rk4",
    t0: float = 0.0,
    callback: Callable[[int, np.ndarray], None] | None = None,
) -> Trajectories:
    """Integrate a batch of initial conditions with a classical method.

    Parameters
    ----------
    system : System or str
        The system, or its registry name (default parameters).
    y0 : ndarray, shape (n_traj, dim)
        Initial conditions (a single state of shape (dim,) is taken as n_traj = 1).
    dt : float
        Step size, finite and > 0.
    n_steps : int
        Number of steps (>= 0); the result holds n_steps + 1 states including y0.
    method : str or Integrator
        One of [`list_integrators`][vpintegrator.integrators.list_integrators] (or ``gauss_legendre<2s>`` for any s).
    t0 : float
        Initial time.
    callback : callable, optional
        ``callback(k, y)`` after step k = 1..n_steps with the states y (n_traj, dim) at t0 + k dt
        (e.g. a progress bar).

    Returns
    -------
    Trajectories
        ``y`` (n_traj, n_steps + 1, dim), ``t`` (n_steps + 1,); meta: system, dim, method, dt, t0,
        t_end, n_traj, n_states (= n_steps + 1), n_steps, invariant_names, and the system as
        ``system``/``param_<name>`` ([`system_meta`][vpintegrator.systems.system_meta]).
    """
    system = get_system(system)
    method = get_integrator(method)
    method.supports(system)
    h = check_dt(dt)
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise VPIntegratorError(f"n_steps must be an int >= 0; got {n_steps!r}")
    n_steps = int(n_steps)
    t0 = finite_float(t0, "t0")
    y = _check_initial_conditions(system, y0)
    from ..resources import check_memory

    check_memory(8.0 * y.shape[0] * (n_steps + 1) * system.dim,
                 f"integrate: {y.shape[0]} trajectories x {n_steps + 1} states x {system.dim}",
                 "take fewer n_steps or trajectories (vp-gen writes long runs to disk in chunks)", key="n_steps")
    out = np.empty((y.shape[0], n_steps + 1, system.dim))

    def produce(i: int, k0: int, n: int) -> np.ndarray:
        """Steps k0 .. k0 + n − 1 into ``out`` (block 0: the initial conditions); a step that does not
        converge or gives a non-finite state is an error where it happens (no NaN enters the next step)."""
        nonlocal y
        block = out[:, k0 : k0 + n]
        if i == 0:
            block[:, 0] = y
            return block
        for j, k in enumerate(range(k0, k0 + n)):
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported just below
                    y = method._step(system, y, h)
            except NotConverged as exc:
                raise VPIntegratorError(
                    f"{method.name}: step {k} (t = {t0 + (k - 1) * h:g} -> {t0 + k * h:g}): {exc.detail}"
                ) from None
            finite = np.all(np.isfinite(y), axis=1)
            if not finite.all():
                row = int(np.argmin(finite))
                raise VPIntegratorError(
                    f"{method.name}: trajectory {row} became non-finite at step {k} (t = {t0 + k * h:g}); "
                    "reduce dt or use a stable method"
                )
            block[:, j] = y
            if callback is not None:
                callback(k, y)
        return block

    # the rollout core's block loop; no failure rule (a bad state is an error above), the states already in out
    run_blocks([(0, 1), *block_schedule(1, n_steps + 1, CHUNK_STEPS)], produce, lambda i, k0, block: None)

    t = t0 + h * np.arange(n_steps + 1)
    meta: dict[str, Any] = {
        **system_meta(system),
        "dim": system.dim,
        "method": method.name,
        "order": method.order,
        "dt": h,
        "t0": t0,
        "t_end": float(t[-1]),
        "n_traj": int(out.shape[0]),
        "n_states": int(out.shape[1]),
        "n_steps": n_steps,
        "invariant_names": list(system.invariant_names),
    }
    return Trajectories(y=out, t=t, meta=meta)


def _check_initial_conditions(system: System, y0: Any) -> np.ndarray:
    return as_points(y0, system.dim, "y0", rows="n_traj", point="initial condition",
                     context=f" for system {system.name!r}")
