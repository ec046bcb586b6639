"""A classical method as a step map ([`IntegratorMap`][vpintegrator.data.integration.IntegratorMap]) and [`integrate`][vpintegrator.data.integration.integrate]: a call of the one
host driver ([`vpintegrator.stepping.drive`][vpintegrator.stepping.drive]) with that map and the failure policy ``"raise"``, into a
Trajectories. The rollouts' [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] is the same map with the volume metric."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError, finite_float
from ..systems import System, get_system, system_meta
from ..systems.initial_conditions import as_points
from ..integrators import Integrator, NotConverged, check_dt, get_integrator
from ..stepping import StepFailure, StepMap, bad_states, drive
from .trajectories import Trajectories

__all__ = ["IntegratorMap", "integrate", "CHUNK_STEPS", "SCALAR_MAX_BATCH"]

#: steps per call of the map in integrate (any value gives the same states: each step depends on the last only)
CHUNK_STEPS = 1024
#: rollouts of at most this many trajectories run compiled (numba): float64 VPFF/VPT/ST/Lie–Poisson/SympNet models in
#: ModelStep, classical integrators with a kernel in IntegratorStep (one trajectory after the other)
SCALAR_MAX_BATCH = 8


class IntegratorMap(StepMap):
    """A classical integrator as a step map (``seq_len = pred_window = 1``), float64: the stepping of
    [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] (which adds the volume metric) and of [`integrate`][vpintegrator.data.integration.integrate].

    Under the failure policy ``"mark"`` (``start`` with a ``limit``) a step whose Newton solve fails gives
    NaN for the failing rows, and a row that is not finite or above its limit restarts from its first state
    (so that no NaN or overflow enters the next, implicit, step). Rollouts of at most
    ``compiled_max_batch`` trajectories then run the compiled single-trajectory stepper
    (``vpintegrator.compiled.compiled_stepper``, the same numbers to ~1e-15 per step and the same Newton
    rule) one trajectory after the other, when it has a kernel for the system and method; otherwise, and
    without numba, the NumPy path runs. ``describe()["runner"]`` says which (``"numba"`` or ``"numpy"``).

    Under the policy ``"raise"`` (``start`` with ``limit`` None) the NumPy path runs, the method's step on
    the whole batch, and ``generate`` raises [`StepFailure`][vpintegrator.stepping.StepFailure] at the first step that does not
    converge or gives a state that is not finite.

    Parameters
    ----------
    system : System or str
    integrator : Integrator or str
        One of ``vpintegrator.integrators.list_integrators()``.
    dt : float
    compiled_max_batch : int
        0 turns the compiled path off.
    """

    kind = "integrator"

    #: set by __init__ (declared for type checkers)
    dim: int
    dt: float
    name: str

    def __init__(self, system, integrator, dt: float, compiled_max_batch: int = SCALAR_MAX_BATCH) -> None:
        self.system = get_system(system)
        self.integrator = get_integrator(integrator)
        self.integrator.supports(self.system)
        self.dim = self.system.dim
        self.dt = finite_float(dt, "dt (the step size)", positive=True, key="dt")
        self.name = self.integrator.name
        if isinstance(compiled_max_batch, bool) or not isinstance(compiled_max_batch, int) or compiled_max_batch < 0:
            raise VPIntegratorError(f"compiled_max_batch must be an int >= 0 (0: off); got {compiled_max_batch!r}")
        self.compiled_max_batch = compiled_max_batch
        self._stepper = None
        self._runner = "numpy"
        self._raise = False

    def start(self, window0, limit):
        self._y0 = np.array(window0[:, -1], dtype=np.float64)  # (n_traj, dim)
        self._y = self._y0.copy()
        self._raise = limit is None
        self._limit = None if self._raise else np.asarray(limit, dtype=np.float64)
        self._stepper, self._runner = None, "numpy"
        if not self._raise and 0 < self._y.shape[0] <= self.compiled_max_batch:
            self._stepper = self._compiled_stepper()
            if self._stepper is not None:
                self._runner = "numba"

    def _compiled_stepper(self):
        """The compiled stepper (``vpintegrator.compiled.integrators``) for this method, or None."""
        try:
            from ..compiled import compiled_stepper

            stepper = compiled_stepper(self.system, self.integrator, self.dt)
            if stepper is not None:  # compile (or load from the cache) now: set-up time, not step time
                y = self._y0[0].copy()
                stepper.step_block(y, 1, np.empty((1, self.dim)))
            return stepper
        except Exception:  # no numba, no module, or a kernel that cannot run: the NumPy path
            return None

    def _step(self, y: np.ndarray) -> np.ndarray:
        try:
            with np.errstate(all="ignore"):
                return self.integrator.step(self.system, y, self.dt)
        except VPIntegratorError:
            # a Newton failure: find the failing rows one by one, mark them NaN (they fail), keep the rest
            out = np.empty_like(y)
            for i in range(y.shape[0]):
                try:
                    with np.errstate(all="ignore"):
                        out[i] = self.integrator.step(self.system, y[i : i + 1], self.dt)[0]
                except VPIntegratorError:
                    out[i] = np.nan
            return out

    def generate(self, n):
        if self._raise:
            return self._generate_raising(n)
        if self._stepper is not None:
            return self._generate_compiled(n)
        y = self._y
        out = np.empty((y.shape[0], n, self.dim))
        for k in range(n):
            y = self._step(y)
            out[:, k] = y
            bad = bad_states(y, self._limit)
            if bad.any():  # restart failed rows so that no NaN/overflow enters the next (implicit) step
                y = np.where(bad[:, None], self._y0, y)
        self._y = y
        return out

    def _generate_raising(self, n: int) -> np.ndarray:
        """[`generate`][vpintegrator.data.integration.IntegratorMap.generate] under the policy ``"raise"``: the method's own step (``Integrator._step``, the
        subclass hook, on the checked batch) ``n`` times, stopping at the first failure."""
        system, h, step = self.system, self.dt, self.integrator._step
        y = self._y
        out = np.empty((y.shape[0], n, self.dim))
        for k in range(n):
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported just below
                    y = step(system, y, h)
            except NotConverged as exc:
                raise StepFailure(out[:, :k], detail=exc.detail) from None
            finite = np.all(np.isfinite(y), axis=1)
            if not finite.all():
                raise StepFailure(out[:, :k], row=int(np.argmin(finite)))
            out[:, k] = y
        self._y = y
        return out

    def _generate_compiled(self, n):
        """[`generate`][vpintegrator.data.integration.IntegratorMap.generate] by the compiled stepper, one trajectory after the other.

        A Newton failure or a non-finite state ends the row's block: the failing step and the rest are NaN
        (the NumPy path's NaN at that step; the engine discards a failed row's later states) and the row
        restarts from its first state (the engine also calls [`reset`][vpintegrator.data.integration.IntegratorMap.reset] for it, as for a blown-up row).
        """
        out = np.empty((self._y.shape[0], n, self.dim))
        stepper = self._stepper
        for i in range(self._y.shape[0]):
            y = np.ascontiguousarray(self._y[i])
            done = stepper.step_block(y, n, out[i])
            if stepper.status != 0:  # Newton failure (done states are good) or a non-finite state (written)
                out[i, done if stepper.status != 3 else done - 1 :] = np.nan
                y = self._y0[i].copy()
            self._y[i] = y  # a row that blew up (finite) within the block is reset by the engine
        return out

    def reset(self, rows):
        self._y[rows] = self._y0[rows]

    def describe(self):
        return {**super().describe(), "integrator": self.name, "order": int(self.integrator.order),
                "runner": self._runner}


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

    A call of the one host driver ([`drive`][vpintegrator.stepping.drive]) with an [`IntegratorMap`][vpintegrator.data.integration.IntegratorMap] and the failure
    policy ``"raise"``. The map runs the method's step on the whole batch (the NumPy path, never the
    compiled single-trajectory stepper, which agrees only to a few ulp per step), so the states are the
    method's ``step`` applied ``n_steps`` times, bit for bit.

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
        ``callback(k, y)`` for each step k = 1..n_steps in order, with the states y (n_traj, dim) at
        t0 + k dt (e.g. a progress bar), once the driver has its chunk of steps (``CHUNK_STEPS``); the steps
        before a failing one are called back before the error.

    Returns
    -------
    Trajectories
        ``y`` (n_traj, n_steps + 1, dim), ``t`` (n_steps + 1,); meta: system, dim, method, dt, t0,
        t_end, n_traj, n_states (= n_steps + 1), n_steps, invariant_names, and the system as
        ``system``/``param_<name>`` ([`system_meta`][vpintegrator.systems.system_meta]).

    Raises
    ------
    VPIntegratorError
        At the first step that does not converge (``"<method>: step k (t = a -> b): <why>"``) or gives a
        state that is not finite (``"<method>: trajectory i became non-finite at step k (t = b); ..."``).
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

    def deliver(k0: int, block: np.ndarray) -> None:
        n = block.shape[1]
        out[:, k0 : k0 + n] = block
        if callback is not None:
            for k in range(max(k0, 1), k0 + n):
                callback(k, out[:, k])

    step_map = IntegratorMap(system, method, h, compiled_max_batch=0)
    drive(step_map, y[:, None], n_steps, deliver, chunk_steps=CHUNK_STEPS, failure="raise", dt=h, t0=t0)

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
