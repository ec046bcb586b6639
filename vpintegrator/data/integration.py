"""A classical method as a step map ([`IntegratorMap`][vpintegrator.data.integration.IntegratorMap]) and [`integrate`][vpintegrator.data.integration.integrate]: a call of the one
host driver ([`vpintegrator.stepping.drive`][vpintegrator.stepping.drive]) with that map and the failure policy ``"raise"``, into a
Trajectories. The rollouts' [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] is the same map with the volume metric."""

from __future__ import annotations

import functools
import math
import threading
import time
from typing import Any, Callable

import numpy as np

from ..clock import thread_cpu
from ..errors import VPIntegratorError, finite_float
from ..resources import available_memory, check_memory
from ..systems import System, get_system, system_meta
from ..systems.registry import MetaTemplate
from ..systems.initial_conditions import as_points
from ..integrators import Integrator, NotConverged, check_dt, get_integrator
from ..integrators.base import every_kth
from ..stepping import StepFailure, StepMap, bad_states, drive, time_grid
from .trajectories import Trajectories

__all__ = ["IntegratorMap", "integrate", "CHUNK_STEPS", "SCALAR_MAX_BATCH", "ALL_ROWS"]

#: steps per call of the map in integrate (any value gives the same states: each step depends on the last only)
CHUNK_STEPS = 1024
#: a compiled stepper's statuses from this one on wrote the failing state (not finite, or above the norm limit)
_WRITTEN = 3
#: a selection of at most this many trajectories is rolled out in one process (``vp-rollout --workers``: no blocks)
SCALAR_MAX_BATCH = 8
#: ``compiled_max_batch`` of every number of trajectories: a classical method with a kernel runs compiled (numba)
#: for any batch, one trajectory after the other in one compiled loop (``CompiledStepper.step_rows``)
ALL_ROWS = 2**62


class IntegratorMap(StepMap):
    """A classical integrator as a step map (``seq_len = pred_window = 1``), float64: the stepping of
    [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] (which adds the volume metric) and of [`integrate`][vpintegrator.data.integration.integrate].

    Under the failure policy ``"mark"`` (``start`` with a ``limit``) a step whose Newton solve fails gives
    NaN for the failing rows, and a row that is not finite or above its limit restarts from its first state
    (so that no NaN or overflow enters the next, implicit, step). Rollouts of at most
    ``compiled_max_batch`` trajectories (default: any number) then run the compiled single-trajectory stepper
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
        The most trajectories that run compiled (default ``ALL_ROWS``: any number); 0 turns the compiled path off.
    """

    kind = "integrator"

    #: set by __init__ (declared for type checkers)
    dim: int
    dt: float
    name: str

    def __init__(self, system, integrator, dt: float, compiled_max_batch: int = ALL_ROWS) -> None:
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

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self._y0 = np.array(window0[:, -1], dtype=np.float64)  # (n_traj, dim)
        self._y = self._y0.copy()
        self._raise = limit is None
        self._limit = None if self._raise else np.asarray(limit, dtype=np.float64)
        self._stepper, self._runner = None, "numpy"
        if not self._raise and 0 < self._y.shape[0] <= self.compiled_max_batch:
            self._stepper = self._compiled_stepper()
            if self._stepper is not None:
                self._runner = "numba"

    def _compiled_stepper(self, rows: str | None = "blocks"):
        """The compiled stepper (``vpintegrator.compiled.integrators``) for this method, or None; compiled (or
        loaded from the disk cache) here, in the caller's set-up, never in its timed steps: its single-trajectory
        loop (``step_block``, one step of the first trajectory) and the loop over rows (``step_rows``, a kernel of
        its own, compiled for each memory layout of its output): ``rows="blocks"`` into a new array, as
        ``generate`` runs it; ``"direct"`` into a strided view, as ``rollout_direct`` writes a batch; None: not."""
        try:
            stepper = _compiled_stepper(self.system, self.integrator, self.dt)
        except Exception:  # no numba, no module, or a kernel that cannot run: the NumPy path
            return None
        if stepper is None:
            return None
        try:
            if not stepper.warm:
                stepper.step_block(self._y0[0].copy(), 1, np.empty((1, self.dim)))
            if rows == "blocks":
                stepper.step_rows(self._y0[:1].copy(), 1, np.empty((1, 1, self.dim)))
            elif rows == "direct" and self._y0.shape[0] > 1:  # two rows: a view numba types as strided
                stepper.step_rows(self._y0[:2].copy(), 1, np.empty((2, 2, self.dim))[:, 1:])
        except Exception:  # a kernel that cannot run: the NumPy path
            return None
        return stepper

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

    def generate(self, n: int) -> np.ndarray:
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
        y = np.ascontiguousarray(self._y)
        done, status, _ = self._stepper.step_rows(y, n, out, self._limit)
        for i in np.flatnonzero(status):  # Newton failure (done states are good), a non-finite or blown-up state
            out[i, done[i] if status[i] < _WRITTEN else done[i] - 1 :] = np.nan  # (written)
            y[i] = self._y0[i]
        self._y = y
        return out

    def rollout_direct(self, window0: np.ndarray, n_steps: int, out: np.ndarray, limit: np.ndarray
                       ) -> tuple[np.ndarray, float, float, float] | None:
        """The whole rollout in one call, written straight into ``out`` (n_traj, n_steps + 1, dim), under the
        failure rule ``"mark"`` with the norm ``limit`` (n_traj,): the engine's
        [`rollout`][vpintegrator.rollout.engine.rollout] takes this path when it exists and answers. The compiled stepper runs each
        trajectory to the end (the blow-up check is in its loop), with none of the engine's per-block passes: the
        same states as the block loop (a failed row is NaN from its failing step on, as the engine leaves it).

        Returns (failed_step (n_traj,), seconds, setup_seconds, wall_seconds) on the clock of
        [`drive`][vpintegrator.stepping.drive] (the calling thread's CPU), or None when this map would not run compiled
        (more than ``compiled_max_batch`` trajectories, no kernel): the engine's block loop then runs.
        """
        n_traj = window0.shape[0]
        if not 0 < n_traj <= self.compiled_max_batch:
            return None
        start = thread_cpu()
        self._y0 = np.array(window0[:, -1], dtype=np.float64)  # (n_traj, dim); what start() keeps, for reset
        self._stepper = stepper = self._compiled_stepper(rows="direct" if n_traj > 1 else None)
        if stepper is None:
            return None
        self._runner = "numba"
        failed = np.full(n_traj, -1, dtype=np.int64)
        out[:, 0] = window0[:, 0]
        tic, wall = thread_cpu(), time.perf_counter()
        if n_traj == 1:  # the stepper's own loop: step_rows's states bit for bit, without its per-row arrays
            done = np.array([stepper.step_block(self._y0[0].copy(), n_steps, out[0, 1:], float(limit[0]))])
            status = np.array([stepper.status])
        else:
            done, status, _ = stepper.step_rows(self._y0.copy(), n_steps, out[:, 1:], limit)
        for i in np.flatnonzero(status):
            k = 1 + (done[i] if status[i] < _WRITTEN else done[i] - 1)  # the first bad step of the row
            out[i, k:] = np.nan
            failed[i] = k
        toc = thread_cpu()
        return failed, toc - tic, tic - start, time.perf_counter() - wall

    def reset(self, rows: np.ndarray) -> None:
        self._y[rows] = self._y0[rows]

    def describe(self) -> dict[str, Any]:
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
    compiled: bool | None = None,
    save_every: int = 1,
) -> Trajectories:
    """Integrate a batch of initial conditions with a classical method.

    Any number of trajectories (without a ``callback``) run the compiled single-trajectory
    stepper (numba, ``vpintegrator.compiled.compiled_stepper``) where it has a kernel for the system and method,
    one trajectory after the other in one compiled loop (each row's states those of batch 1, bit for bit): the states agree with the method's NumPy ``step`` to a few ulp per step
    (the converged Newton iterates and the order of operations differ at rounding), at the kernel's cost per
    step (one trajectory of 10⁴ steps: the call costs within 1.3x of the kernel alone,
    ``scripts/bench_batch1.py``). Otherwise, and with ``compiled=False``, a call of the one host driver
    ([`drive`][vpintegrator.stepping.drive]) with an [`IntegratorMap`][vpintegrator.data.integration.IntegratorMap] and the failure policy ``"raise"``
    runs the method's ``step`` on the whole batch: the states are that step applied ``n_steps`` times, bit
    for bit. A failure on the compiled path is redone on the NumPy path, which raises its own error.

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
        before a failing one are called back before the error. (The NumPy path.)
    compiled : bool or None
        None (default): the compiled stepper where it applies (see above); False: the NumPy step, bit for bit
        (what ``vp-gen`` and the rollouts' first windows use, so that files and shipped numbers do not move
        with the compiler); True: as None, but an error when no kernel applies.
    save_every : int
        Keep the states at steps 0, k, 2k, ... <= n_steps only (k = ``save_every`` >= 1): the full output's
        ``y[:, ::k]`` and ``t[::k]``, the same numbers, without storing the others (the compiled loops write only
        those; the NumPy path keeps them from each chunk of ``CHUNK_STEPS``). Every step is still checked.

    Returns
    -------
    Trajectories
        ``y`` (n_traj, n_steps + 1, dim), ``t`` (n_steps + 1,) (with ``save_every`` k: n_steps // k + 1 states);
        meta: system, dim, method, dt, t0, t_end, n_traj, n_states, n_steps (the steps taken), invariant_names,
        runner (``"numba"``: compiled, ``"numpy"``: the NumPy step), and the system as ``system``/``param_<name>``
        ([`system_meta`][vpintegrator.systems.system_meta]); with k > 1 also ``save_every`` = k.

    Raises
    ------
    VPIntegratorError
        At the first step that does not converge (``"<method>: step k (t = a -> b): <why>"``) or gives a
        state that is not finite (``"<method>: trajectory i became non-finite at step k (t = b); ..."``).
    """
    system = get_system(system)
    method = get_integrator(method)
    method.supports(system)
    h = dt if type(dt) is float and 0.0 < dt < math.inf else check_dt(dt)
    if type(n_steps) is not int and (isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer))) \
            or n_steps < 0:
        raise VPIntegratorError(f"n_steps must be an int >= 0; got {n_steps!r}")
    n_steps = int(n_steps)
    t0 = t0 if type(t0) is float and math.isfinite(t0) else finite_float(t0, "t0")
    y = _check_initial_conditions(system, y0)
    every = save_every if type(save_every) is int and save_every >= 1 else every_kth(save_every)
    kept = n_steps // every + 1
    need = 8.0 * y.shape[0] * kept * system.dim
    if need > _MEMORY_FRACTION * available_memory():  # check_memory's own test, its message built only to refuse
        check_memory(need, f"integrate: {y.shape[0]} trajectories x {kept} states x {system.dim}",
                     "take fewer n_steps or trajectories, or keep fewer states (save_every; vp-gen writes long runs "
                     "to disk in chunks)", key="n_steps", fraction=_MEMORY_FRACTION)
    if compiled not in (None, True, False):
        raise VPIntegratorError(f"compiled must be None (where it applies), True or False; got {compiled!r}",
                                key="compiled")
    out = np.empty((y.shape[0], kept, system.dim))
    meta = None
    if compiled is not False and callback is None:
        meta = _integrate_compiled(system, method, h, y, n_steps, out, every)
    if meta is not None:  # numba is running: the compiled loop writes the grid (the same numbers)
        runner = "numba"
        t = _compiled().fill_time_grid(t0, h, every, np.empty(kept))
        t_end = float(t[-1])
    else:
        if compiled:
            raise VPIntegratorError(f"compiled=True: no compiled kernel runs {method.name} on {system.name} for "
                                    f"{y.shape[0]} trajectories (no callback, numba installed); leave compiled at "
                                    "None", key="compiled")

        def deliver(k0: int, block: np.ndarray) -> None:
            n = block.shape[1]
            first = -k0 % every  # the block's first state at a multiple of every
            out[:, (k0 + first) // every : (k0 + n + every - 1) // every] = block[:, first::every]
            if callback is not None:
                for k in range(max(k0, 1), k0 + n):
                    callback(k, block[:, k - k0])

        step_map = IntegratorMap(system, method, h, compiled_max_batch=0)
        drive(step_map, y[:, None], n_steps, deliver, chunk_steps=CHUNK_STEPS, failure="raise", dt=h, t0=t0)
        runner = "numpy"
        grid = _time_grid(t0, h, n_steps)
        if every > 1:
            grid = grid[::every].copy()
        t, t_end = grid, float(grid[-1])
        meta = _meta_head(system, method, h)
    meta.update(t0=t0, t_end=t_end, n_traj=out.shape[0], n_states=kept, n_steps=n_steps,
                invariant_names=list(system.invariant_names), runner=runner)
    if every > 1:
        meta["save_every"] = every
    return Trajectories.from_own_arrays(out, t, meta)


#: ``check_memory``'s fraction of the available memory that an output may take
_MEMORY_FRACTION = 0.8
#: the float64 dtype (``y0.dtype is _F64``: an array of float64 as NumPy makes them)
_F64 = np.dtype(np.float64)


def _meta_head(system: System, method: Integrator, h: float) -> dict[str, Any]:
    """The metadata of a call that depends on ``(system, method, h)`` only (the first keys of ``meta``): the
    system's (``system_meta``), ``dim``, ``method``, ``order``, ``dt``; a new dict with its own lists."""
    return {**system_meta(system), "dim": system.dim, "method": method.name, "order": method.order, "dt": h}


def _integrate_compiled(system: System, method: Integrator, h: float, y: np.ndarray, n_steps: int,
                        out: np.ndarray, every: int = 1) -> dict[str, Any] | None:
    """``out`` (n_traj, n_steps // every + 1, dim) by the compiled stepper: one trajectory by its own loop
    (``step_block``, advancing ``y[0]`` in place: ``y`` is the call's own copy, put back from ``out[:, 0]`` for
    the NumPy path to redo it), more one after the other (``step_rows``: each row's states ``step_block``'s bit
    for bit). Returns the call's metadata head (``_meta_head``'s, a copy of the one kept with the stepper), or None
    when there is no kernel (or no numba) or a trajectory failed (the NumPy path then raises its own error)."""
    kept = _take_kept(system, method, h)
    if kept is None:
        return None
    try:
        stepper = kept.stepper
        out[:, 0] = y
        if y.shape[0] == 1:
            stepper.step_block(y[0], n_steps, out[0, 1:], math.inf, every)
            ok = stepper.status == 0
            if not ok:
                y[0] = out[0, 0]
        else:
            ok = not stepper.step_rows(np.array(y, dtype=np.float64, order="C"), n_steps, out[:, 1:], None,
                                       every)[1].any()
    finally:
        kept.busy = False
    return kept.head.fresh() if ok else None


class _Kept:
    """What a thread keeps between calls of one ``(system, method, h)``: the compiled ``stepper`` and the calls'
    metadata head (a ``MetaTemplate``), made once; ``busy`` while a call of this thread runs the stepper."""

    __slots__ = ("stepper", "busy", "head")

    def __init__(self, stepper: Any, head: dict[str, Any]) -> None:
        self.stepper, self.busy, self.head = stepper, True, MetaTemplate(head)  # head.fresh(): each call's own


#: this thread's ``_Kept`` by (system, method, h), so that a batch-1 call does not make a fresh copy of the planned
#: stepper each time (``compiled_stepper``: ~3 us): a call marks its entry busy while it runs the
#: stepper (a nested call in the same thread finds it busy and makes its own); the oldest of ``_KEPT_MAX`` goes first
_LOCAL = threading.local()
_KEPT_MAX = 32


def _take_kept(system: System, method: Integrator, h: float) -> _Kept | None:
    """The compiled stepper of ``(system, method, h)``, marked busy for this call (which
    clears ``busy`` when done), or None: no kernel (or numba turned off)."""
    try:
        kept = _LOCAL.kept
    except AttributeError:
        kept = _LOCAL.kept = {}
    key: Any = (system, method, h)
    try:
        entry = kept.get(key)
    except TypeError:  # a system with an unhashable parameter: a stepper each call (compiled_stepper plans it anew)
        entry = key = None
    compiled = _compiled()
    if entry is not None and not entry.busy and compiled.available():  # numba may be off since (a test)
        entry.busy = True
        return entry
    stepper = compiled.compiled_stepper(system, method, h)  # None once numba is off
    if stepper is None:
        return None
    entry = _Kept(stepper, _meta_head(system, method, h))
    if key is not None and type(stepper) is compiled.CompiledStepper and key not in kept:  # a lattice's: each call
        if len(kept) >= _KEPT_MAX:
            kept.pop(next(iter(kept)))
        kept[key] = entry
    return entry


def _compiled_stepper(system: System, method: Integrator, h: float) -> Any:
    """``compiled_stepper(system, method, h)``."""
    return _compiled().compiled_stepper(system, method, h)


@functools.cache
def _compiled() -> Any:
    """The compiled side this module calls, imported on first use (numba stays out of ``import vpintegrator``):
    ``compiled_stepper`` and its class ``CompiledStepper``, the time grid ``fill_time_grid`` and ``available``
    (False once the compiled paths are turned off)."""
    import types

    from ..compiled import available
    from ..compiled.grid import fill_time_grid
    from ..compiled.integrators import CompiledStepper, compiled_stepper

    return types.SimpleNamespace(compiled_stepper=compiled_stepper, CompiledStepper=CompiledStepper,
                                 fill_time_grid=fill_time_grid, available=available)


#: the step counts 0, 1, 2, ... as float64 (read only), kept up to ``_GRID_KEPT`` states: a time grid is one multiply
_STEPS: list[np.ndarray] = [np.zeros(0)]
_GRID_KEPT = 1 << 17


def _time_grid(t0: float, h: float, n_steps: int) -> np.ndarray:
    """[`time_grid`][vpintegrator.stepping.time_grid] bit for bit (``t0 + h k``: ``k h`` then ``+ t0``, skipped for a
    zero ``t0``, which adds nothing to ``k h >= 0``), without building the counts 0..n each call."""
    if n_steps + 1 > _GRID_KEPT:
        return time_grid(t0, h, n_steps)
    if _STEPS[0].size < n_steps + 1:
        steps = np.arange(max(n_steps + 1, min(2 * _STEPS[0].size, _GRID_KEPT)), dtype=np.float64)
        steps.flags.writeable = False
        _STEPS[0] = steps
    t = np.multiply(_STEPS[0][: n_steps + 1], h)
    if t0 != 0.0:
        t += t0
    return t


def _check_initial_conditions(system: System, y0: Any) -> np.ndarray:
    """``y0`` as float64 (n_traj, dim), a copy; a float64 array of finite numbers is taken as it is, anything else
    (and every error) by ``as_points``."""
    dim = system.dim
    if type(y0) is np.ndarray and y0.dtype is _F64:  # (another float64 dtype object: as_points)
        shape = y0.shape
        if shape == (1, dim):  # one state (a batch-1 call): its numbers checked one by one
            if all(map(math.isfinite, y0.tolist()[0])):
                return y0.copy()  # C order
        elif shape == (dim,):
            if all(map(math.isfinite, y0.tolist())):
                return y0.reshape(1, dim).copy()
        elif len(shape) == 2 and shape[1] == dim and shape[0]:
            y = y0.copy()
            if all(map(math.isfinite, y.ravel().tolist())) if y.size <= 64 else np.isfinite(y).all():
                return y
    return as_points(y0, dim, "y0", rows="n_traj", point="initial condition",
                     context=f" for system {system.name!r}")
