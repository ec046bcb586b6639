"""Compiled single-trajectory classical integrators (numba), with the NumPy path's numbers and errors.

The API::

    from vpintegrator.compiled import available, compiled_stepper

    stepper = compiled_stepper(system, method, dt)   # CompiledStepper, or None -> use the NumPy path
    ys = stepper.run(y0, n_steps, t0=0.0)            # y0 (dim,) -> (n_steps + 1, dim); raises on failure
    n_done = stepper.step_block(y, n, out)           # advance y (dim,) in place, states into out[:n]
    done, status, info = stepper.step_rows(ys, n, out)  # the same for each row of ys (rows, dim)
    stepper.status, stepper.failed_step              # after step_block: 0 = ok; the 1-based failing step
    raise stepper.error(t0)                          # the VPIntegratorError integrate() would raise
    ys = stepper.run_batch(y0s, n_steps)             # few trajectories (batch, dim) -> (batch, n + 1, dim)

``compiled_stepper`` takes a system (instance or registry name) and a method (registry name or
``Integrator``) as [`vpintegrator.data.integrate`][vpintegrator.data.integration.integrate] does. It returns ``None`` when numba is
missing (``vpintegrator.compiled.available``), when the system is neither a shipped one nor a user's system whose
field compiles (``vpintegrator.compiled.user``: a numba typing failure of a loop says so once and runs NumPy) or
when the method has no kernel; it raises the NumPy path's error when the
method cannot run on the system (``method.supports``) or dt is invalid.

Compiled methods: every explicit Runge-Kutta method that is its tableau (an ``ExplicitRungeKutta``: ``euler``,
``rk4``, a user's ``heun`` registered as its tableau alone), ``implicit_midpoint``, Gauss-Legendre with any stage count
(``gauss_legendre4``, ``gauss_legendre6``, ...), ``stormer_verlet`` (coupled oscillator), ``splitting``
(rigid body, ABC flow), the McLachlan-type shear splittings (any method with a ``_sequence(dim, h)`` of
shears, e.g. ``splitting_mclachlan2``, ``splitting_blanes_moan4``), and every composition method (an
integrator with attributes ``base``, a registered base method name, and ``gammas``, the sub-step
fractions) whose base is compiled (compositions of shear sequences become one shear sequence), and the rigid
body's rotation splittings with their compositions (``vpintegrator.compiled.lie_poisson``).

On the shipped systems and a user's compiled system each method runs a lean loop (``vpintegrator.compiled.lean``: one loop per method that
numba specialises per system, scalar state, stages unrolled, no per-step workspace; Gauss-Legendre up to 4
stages), else the generic loops of ``vpintegrator.compiled.kernels``. The implicit methods use the method's
``tol`` and ``max_iter`` and NumPy's start and convergence test; the lean loops iterate by full Newton
(implicit midpoint, the solve unrolled) or by fixed point (Gauss-Legendre) and redo any step that iteration
cannot do with the exact NumPy Newton rule (``compiled.lean.step_implicit_midpoint``, ``compiled.newton``'s
Gauss-Legendre), which then decides
success or failure. States agree with ``integrate`` to a few ulp per step (the converged iterates differ
at rounding); failures (status, step, message, last update) are NumPy's.

``step_block`` semantics: it returns the number of states written to ``out``; on a Newton failure at
step k it stops with ``out[:k-1]`` written, ``status`` 1 (no convergence) or 2 (singular Newton matrix),
``failed_step = k`` and ``y`` the last good state; on a non-finite state at step k it writes it
(``out[k-1]``, count k), sets ``status`` 3 and ``y`` to that state. Statuses persist until the next call.

Kernels compile on first use (0.4-7 s per method: implicit midpoint 6.7 s with its exact-rule
fallback, Gauss-Legendre 4 3.0 s, rk4 0.9 s) and are cached on disk (``cache=True``), so a new process
only loads them (~10 ms each). Numba keys each cache entry on the file that defines the function only;
every kernel's key here also holds the content hash of each file compiled code can reach
(``vpintegrator._jitcache.dependency_stamp``), so editing a system's ``field`` recompiles them. ``step_rows`` runs
any number of trajectories, each by the batch-1 loop (one compiled loop over the rows where the method has a lean
loop): each row's states are batch 1's bit for bit (``integrate`` and the rollouts of any batch use it).
``run_batch`` steps a few trajectories step by step (the generic loops, with ``integrate``'s failure rule).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import VPIntegratorError, finite_float
from ..integrators import GaussLegendre, ImplicitMidpoint, StormerVerlet, get_integrator
from ..systems import get_system
from . import _jit
from . import kernels as K
from . import lean
from . import lie_poisson as LP
from ..integrators.base import every_kth
from .newton import (NOT_CONVERGED, OK, SINGULAR, check_block, failure_error, initial_states, rows_by_block,
                     step_count, workspace)
from .systems import system_kernel
from .user import lattice_kind

if TYPE_CHECKING:
    from .lattice import LatticeStepper

_F64 = np.dtype(np.float64)
#: the lean loops that never touch the Newton scratch (``ws``, ``m``): ``fresh`` copies share it
_NO_SCRATCH = ("explicit", "verlet", "shears")
#: the methods whose loop their class decides (a subclass may change the step: NumPy only), by class, not by name
_SIMPLE = {ImplicitMidpoint: K.IMPLICIT_MIDPOINT, StormerVerlet: K.STORMER_VERLET}


def compiled_stepper(system: Any, method: Any, dt: float) -> "CompiledStepper | LatticeStepper | None":
    """A compiled single-trajectory stepper for ``(system, method, dt)``, or ``None`` (see the module doc)."""
    if not _jit.HAVE_NUMBA:
        return None
    system = get_system(system)
    method = get_integrator(method)
    method.supports(system)
    h = finite_float(dt, "dt", positive=True)
    shipped_lattice = bool(vars(type(system)).get("lattice_kernel"))  # its own class body, not a subclass's
    if shipped_lattice or getattr(type(system), "bond_force", None) is not None:  # or a user's with its bond force
        from .lattice import lattice_stepper

        return lattice_stepper(system, method, h) if shipped_lattice or lattice_kind(system) is not None else None
    try:
        key: Any = (system, method, h)
        proto = _PLANS.get(key, _NOT_PLANNED)
    except TypeError:  # a system with an unhashable parameter: planned each time
        key, proto = None, _NOT_PLANNED
    if proto is _NOT_PLANNED:
        kernel = system_kernel(system)
        plan = None if kernel is None else _plan(method, int(system.dim), h)
        if kernel is not None and plan is not None and plan["mid"] in LP.MIDS and not isinstance(kernel[0], int):
            plan = None  # the rotation splittings step the shipped rigid body's own rotations (its inertia), no other
        proto = None if kernel is None or plan is None else CompiledStepper(system, method, h, kernel, plan)
        if proto is not None and proto.engine == "generic" and K.STORMER_VERLET in (proto.mid, proto.base):
            proto = None  # Stormer-Verlet's one compiled loop is the lean one (every separable kernel system has it)
        if proto is not None and key is not None:  # compile (or load from the disk cache) once, here: warm
            y0 = getattr(system, "default_y0", None)
            y = np.array(np.zeros(system.dim) if y0 is None else y0, dtype=np.float64).reshape(system.dim)
            try:
                proto.step_block(y, 1, np.empty((1, proto.dim)))
                proto.warm = True
            except Exception as err:  # noqa: BLE001 - a kernel that cannot take this state: the caller warms its own
                if not isinstance(proto.kid, int) and type(err).__module__.startswith("numba"):
                    logging.getLogger("vpintegrator").warning(  # a user's loop numba cannot type: NumPy, said once
                        "%s on %s runs in NumPy, not compiled: %s", method.name, system.name,
                        str(err).strip().splitlines()[0][:200])
                    proto = None
        if key is not None:
            if len(_PLANS) >= _PLANS_MAX:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = proto
    return None if proto is None else proto.fresh()


#: (system, method, h) -> a planned stepper (or None: no kernel): a batch-1 call (``integrate``, a rollout of one
#: trajectory) does not plan again; each caller gets its own ``fresh()`` copy (its own status and scratch arrays,
#: the plan's read-only arrays shared); the oldest of ``_PLANS_MAX`` goes first
_PLANS: dict[Any, Any] = {}
_PLANS_MAX = 256
_NOT_PLANNED = object()


def _plan(method, dim: int, h: float) -> dict[str, Any] | None:
    """How to run a compilable method (kernel ids, tableau, shear sequence, Newton options), else None."""
    plan = {"mid": -1, "base": -1, "gammas": np.zeros(0), "tableau": _EMPTY_TABLEAU, "etab": (),
            "tol": float(getattr(method, "tol", 1e-15)), "max_iter": int(getattr(method, "max_iter", 50)),
            "comps": np.zeros(0, dtype=np.int64), "coefs": np.zeros(0)}
    lp = LP.plan(method, h)  # the rigid body's rotation splittings and their compositions (lie_poisson.py)
    if lp is not None:
        return {**plan, **lp}
    name = getattr(method, "name", "")
    gammas, base = getattr(method, "gammas", None), getattr(method, "base", None)
    if gammas is not None and base is not None:  # a composition of a registered base method
        base_method = get_integrator(base)
        g = tuple(float(v) for v in gammas)
        if _is_shear_sequence(base_method) and name != "splitting":  # flatten into one shear sequence
            seq = [pair for gamma in g for pair in base_method._sequence(dim, gamma * h)]
            return {**plan, "mid": K.SHEARS, **_shears(seq)}
        inner = _plan(base_method, dim, h)
        if inner is None or inner["base"] >= 0 or inner["mid"] == K.SHEARS:
            return None
        return {**inner, "base": inner["mid"], "gammas": np.array(g, dtype=np.float64),
                "tol": float(getattr(method, "tol", inner["tol"])),
                "max_iter": int(getattr(method, "max_iter", inner["max_iter"]))}
    etab = _explicit_tableau(method)
    if etab is not None:  # the method is its tableau: the one explicit loop steps it
        return {**plan, "mid": K.EXPLICIT, "etab": etab}
    if type(method) in _SIMPLE:
        return {**plan, "mid": _SIMPLE[type(method)]}
    if isinstance(method, GaussLegendre) and type(method)._step is GaussLegendre._step:  # its step is its tableau's
        return {**plan, "mid": K.GAUSS_LEGENDRE, "tableau": _tableau(method, int(method.stages))}
    if _is_shear_sequence(method):  # McLachlan-type splittings: the method's own shears for this h
        return {**plan, "mid": K.SHEARS, **_shears(method._sequence(dim, h))}
    return None


_EMPTY_TABLEAU = (np.zeros((1, 1)), np.zeros(1), np.zeros(1))
_EMPTY_ETAB = (np.zeros((1, 1)), np.zeros(1), 1.0)


def _explicit_tableau(method) -> tuple | None:
    """The tableau ``(a, b, scale)`` as tuples of floats (``a`` strictly lower) of an explicit Runge-Kutta method
    whose step is its tableau's (an ``ExplicitRungeKutta`` that does not override ``_step``), else None."""
    from ..integrators.explicit import ExplicitRungeKutta

    if not isinstance(method, ExplicitRungeKutta) or type(method)._step is not ExplicitRungeKutta._step:
        return None
    try:
        a, b, scale = method.tableau
        s = len(b)
        rows = tuple(tuple(float(a[i][j]) if j < i else 0.0 for j in range(s)) for i in range(s))
        if any(float(a[i][j]) != 0.0 for i in range(s) for j in range(i, len(a[i]))) or len(a) != s or s == 0:
            return None  # not explicit, or not a tableau: the NumPy path says what is wrong
        return rows, tuple(float(v) for v in b), float(scale)
    except (TypeError, ValueError, IndexError):
        return None


def _is_shear_sequence(method) -> bool:
    return callable(getattr(method, "_sequence", None)) and "shear_splittable" in tuple(getattr(method, "needs", ()))


def _shears(seq) -> dict[str, Any]:
    comps = np.array([int(i) for i, _ in seq], dtype=np.int64)
    coefs = np.array([float(c) for _, c in seq], dtype=np.float64)
    return {"comps": comps, "coefs": coefs}


def _tableau(method, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Butcher tableau (a, b, c) of s-stage Gauss: the method's own ``tableau`` when it has one, else the one
    of ``vpintegrator.integrators.coefficients``."""
    tab = getattr(method, "tableau", None)
    tab = tab() if callable(tab) else tab
    if tab is None:
        from ..integrators.coefficients import gauss_legendre

        tab = gauss_legendre(s)
    a, b, c = (np.ascontiguousarray(np.asarray(x, dtype=np.float64)) for x in tab)
    return a, b, c


class CompiledStepper:
    """One compiled method on one system with one step size; see the module docstring for the API."""

    #: set by __init__ (declared for type checkers)
    dt: float
    dim: int
    #: a shipped system's integer id, or a user's parameter tuple (``compiled.user``)
    kid: Any
    mid: int
    base: int
    gammas: Any
    a: Any
    b: Any
    c: Any
    tol: float
    max_iter: int
    comps: Any
    coefs: Any
    status: int
    failed_step: int
    failed_row: int
    last_update: float
    #: the kernel has run once in this process (compiled or loaded from the disk cache): no warm-up needed
    warm: bool = False

    def __init__(self, system, method, h, kernel, plan: dict[str, Any]) -> None:
        self.system, self.method, self.dt = system, method, float(h)
        self.name = method.name
        self.dim = int(system.dim)
        kid = kernel[0]
        self.kid = kid if lean.has_lean(kid) and not isinstance(kid, int) else int(kid)
        self.params = np.ascontiguousarray(kernel[1], dtype=np.float64)
        self.mid, self.base, self.gammas = int(plan["mid"]), int(plan["base"]), plan["gammas"]
        self.a, self.b, self.c = plan["tableau"]
        self.tol, self.max_iter = float(plan["tol"]), int(plan["max_iter"])
        self.comps, self.coefs = plan["comps"], plan["coefs"]
        #: the explicit tableau (a, b, scale): tuples for the lean loop, arrays for the generic ones
        self.etab = plan["etab"]
        self._etab_arrays = _EMPTY_ETAB if not self.etab else (np.array(self.etab[0]), np.array(self.etab[1]),
                                                                self.etab[2])
        self._ws, self._m = workspace(self.dim, self.b.size if self.mid == K.GAUSS_LEGENDRE else
                                      len(self.etab[1]) if self.etab else 1)
        self._info = np.zeros(4)  # last Newton update, status, failed step; [3] the squared norm limit
        self._nog = self.gammas if self.base >= 0 else np.zeros(0)
        self._shape = (self.dim,)
        self._fast = _fast_runner(self.kid, self.base if self.base >= 0 else self.mid, self.b, self.a, self.c,
                                  self.params, self.etab)
        #: "lean": the lean loop of ``compiled.lean`` for this system and method; "generic": the loops of
        #: ``compiled.kernels`` (or the rotation splittings' own)
        self.engine = "lean" if self._fast[1] is not None else "generic"
        self.status, self.failed_step, self.failed_row, self.last_update = OK, 0, 0, math.inf

    def __repr__(self) -> str:
        return f"CompiledStepper({self.system!r}, {self.name!r}, dt={self.dt})"

    def fresh(self) -> "CompiledStepper":
        """A stepper of the same plan with its own status and scratch arrays (the plan's arrays shared: read only)."""
        new = object.__new__(CompiledStepper)
        new.__dict__.update(self.__dict__)
        new._info = self._info.copy()
        if self._fast[0] not in _NO_SCRATCH:  # the loops that use the Newton scratch get their own
            new._ws, new._m = np.zeros(self._ws.shape), np.zeros(self._m.shape)
        new.status, new.failed_step, new.failed_row, new.last_update = OK, 0, 0, math.inf
        return new

    # --- the loops ------------------------------------------------------------------------------------
    def step_block(self, y: np.ndarray, n: int, out: np.ndarray, limit: float = math.inf, every: int = 1) -> int:
        """Advance ``y`` (dim,) float64 contiguous in place by up to ``n`` steps into ``out`` (>= n // every, dim).

        Returns the number of states written; ``status``/``failed_step`` say why it stopped early. ``limit``:
        the norm above which a state counts as blown up (the engine's failure rule, checked in the loop: status
        4, the state written, as for a state that is not finite); inf: only states that are not finite stop.
        ``every``: keep the states after steps ``every``, ``2 every``, ... only (the lean loops store no other;
        the generic loops run into a scratch block and keep those rows).
        """
        n = int(n)
        self._info[3] = limit * limit
        # the common case first, by identity (this runs once per block of the rollout engine)
        if not (type(y) is np.ndarray and type(out) is np.ndarray and y.dtype is _F64 and out.dtype is _F64
                and y.shape == self._shape and out.ndim == 2 and out.shape[0] >= n >= 0
                and out.shape[1] == self.dim and every == 1):
            every = every_kth(every)
            check_block(self.dim, y, n // every, out)
        info = self._info
        kind, run, lead = self._fast
        if kind == "explicit":
            done = run(*lead, y, self.dt, n, out, self._nog, info, every)
        elif kind == "verlet":  # the one Verlet loop, its state ops those of the shipped system's tuple
            done = run(*lead, y, self.dt, self._nog, n, out, info, lean.NONE, every)  # no force array
        elif kind == "shears":
            done = run(*lead, y, self.comps, self.coefs, n, out, info, every)
        elif kind == "implicit":
            tag, pp, p, tab = lead
            done = run(tag, pp, p, y, self.dt, n, out, self._nog, self.tol, self.max_iter, info, self._ws, self._m,
                       self.a, self.b, self.c, tab, every)
        elif every == 1:
            done = self._generic_block(y, n, out)
        else:
            block = np.empty((n, self.dim))
            written = self._generic_block(y, n, block)
            done = written // every
            out[:done] = block[every - 1 : written : every]
        last, status, failed = info.tolist()[:3]
        self.status, self.failed_step, self.failed_row, self.last_update = int(status), int(failed), 0, last
        return int(done)

    def step_rows(self, ys: np.ndarray, n: int, out: np.ndarray, limits: Any = None, every: int = 1
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[`step_block`][vpintegrator.compiled.integrators.CompiledStepper.step_block] for every row of ``ys`` (rows,
        dim) float64 C-contiguous, in place, the states into ``out`` (rows, >= n, dim): the same per-trajectory loop,
        row after row (one compiled loop over the rows where the method has a lean loop), so each row's states are
        ``step_block``'s bit for bit. ``limits`` (rows,): each row's norm limit (None: inf); ``every``: as
        ``step_block``'s (out then (rows, >= n // every, dim)). Returns each row's states written, status (int64) and
        info (last Newton update, status, failing step, limit squared)."""
        if not (isinstance(ys, np.ndarray) and ys.ndim == 2 and ys.flags.c_contiguous and isinstance(out, np.ndarray)
                and out.ndim == 3 and out.shape[0] == ys.shape[0]):
            raise VPIntegratorError(f"step_rows needs ys C-contiguous (rows, {self.dim}) and out (rows, >= {n}, "
                                    f"{self.dim}); got {getattr(ys, 'shape', ys)!r} and {getattr(out, 'shape', out)!r}")
        every = every_kth(every)
        for r in range(min(1, ys.shape[0])):  # the dtypes and the shape of a row
            check_block(self.dim, ys[r], int(n) // every, out[r])
        n, rows, infos = int(n), ys.shape[0], np.zeros((ys.shape[0], 4))
        infos[:, 3] = np.inf if limits is None else np.square(np.asarray(limits, dtype=np.float64))
        kind, run, lead = self._fast
        if kind == "explicit":
            done = K.rows_explicit(*lead, ys, self.dt, n, out, self._nog, infos, every)
        elif kind == "verlet":
            done = K.rows_verlet(*lead, ys, self.dt, self._nog, n, out, infos, lean.NONE, every)
        elif kind == "shears":
            done = K.rows_shears(*lead, ys, self.comps, self.coefs, n, out, infos, every)
        elif kind == "implicit":
            tag, pp, p, tab = lead
            done = K.rows_implicit(tag, pp, p, ys, self.dt, n, out, self._nog, self.tol, self.max_iter, infos,
                                   self._ws, self._m, self.a, self.b, self.c, tab, every)
        else:  # the generic loops and the rotation splittings: step_block row after row
            done = rows_by_block(self, ys, n, out, infos, every)
        return done, infos[:, 1].astype(np.int64), infos

    def _generic_block(self, y, n: int, out) -> int:
        """``step_block`` by the generic loops of ``vpintegrator.compiled.kernels`` (methods without a lean loop)."""
        if self.mid in LP.MIDS:  # rotation splittings: their own loop (lie_poisson.py)
            return LP.step_block(self, y, n, out)
        info = self._info
        info[:3] = 0.0
        info[0] = math.inf
        p, h, ws, m = self.params, self.dt, self._ws, self._m
        if self.base >= 0:
            return K.run_composition(self.base, self.gammas, self.kid, p, y, h, n, out, ws, m, self.a, self.b,
                                     self.c, self.tol, self.max_iter, info, self.comps, self.coefs, self._etab_arrays)
        if self.mid == K.SHEARS:
            return K.run_shears(self.kid, p, y, self.comps, self.coefs, n, out, ws, info)
        if self.mid in (K.IMPLICIT_MIDPOINT, K.GAUSS_LEGENDRE):
            return K.run_implicit(self.mid, self.kid, p, y, h, n, out, ws, m, self.a, self.b, self.c, self.tol,
                                  self.max_iter, info)
        if self.mid != K.EXPLICIT:  # Stormer-Verlet has only its lean loop: never the explicit tableau's
            raise VPIntegratorError(f"{type(self.method).__name__}: no generic compiled loop (mid {self.mid}); "
                                    "step it by its lean loop or with NumPy")
        return K.run_explicit(self.kid, p, y, h, n, out, ws, info, self._etab_arrays)

    def run(self, y0: Any, n_steps: int, t0: float = 0.0) -> np.ndarray:
        """States (n_steps + 1, dim) from y0 (dim,), as ``integrate(...).y[0]``; raises its errors."""
        return self.run_batch([y0], n_steps, t0)[0]

    def run_batch(self, y0: Any, n_steps: int, t0: float = 0.0) -> np.ndarray:
        """States (batch, n_steps + 1, dim) of trajectories y0 (batch, dim) by ``step_rows``; raises like integrate:
        the error names the earliest failing step and the row failing there (a singular Newton matrix first, then
        the largest last Newton update, then the first row)."""
        ys, n = initial_states(y0, self.dim), step_count(n_steps)
        out = np.empty((ys.shape[0], n + 1, self.dim))
        out[:, 0] = ys
        _, status, infos = self.step_rows(ys, n, out[:, 1:])
        if status.any():
            k = infos[status != OK, 2].min()
            at = np.flatnonzero((status != OK) & (infos[:, 2] == k))
            rank = [(st == SINGULAR, st == NOT_CONVERGED and infos[r, 0], -r) for r, st in zip(at, status[at])]
            row = int(at[max(range(at.size), key=rank.__getitem__)])
            self.status, self.failed_step, self.failed_row = int(status[row]), int(k), row
            self.last_update = float(infos[row, 0])
            raise self.error(t0)
        return out

    # --- errors ---------------------------------------------------------------------------------------
    def error(self, t0: float = 0.0) -> VPIntegratorError | None:
        """The error ``integrate`` raises for the last failure (``None`` when the last call succeeded)."""
        return failure_error(self, t0, "I - h df/dy")


def _fast_runner(kid: Any, mid: int, b: np.ndarray, a: np.ndarray, c: np.ndarray,
                 params: np.ndarray, etab: tuple = ()) -> tuple[str, Any, tuple]:
    """The lean loop (``vpintegrator.compiled.lean``) of method id ``mid`` on system ``kid``: (kind, function, the
    arguments before the state), or ("", None, ()) when there is none (then the generic loops of
    ``vpintegrator.compiled.kernels`` run)."""
    # the method's own ``supports`` has already refused a system it cannot step (compiled_stepper)
    key = {K.EXPLICIT: "explicit_rk", K.STORMER_VERLET: "stormer_verlet",
           K.SHEARS: "shears", K.IMPLICIT_MIDPOINT: "implicit_midpoint", K.GAUSS_LEGENDRE: "gauss"}.get(mid)
    if not lean.has_lean(kid) or key is None or (key == "gauss" and b.size > lean.MAX_STAGES):
        return "", None, ()
    kind, run, tag = lean.RUNNERS[key]
    if key == "explicit_rk":
        tag = lean.explicit_tag(etab)
    pp = lean.params_tuple(kid, params)
    if kind == "shears":
        return kind, run, (pp,)
    if kind == "explicit":
        return kind, run, (tag, pp)
    if kind == "verlet":  # no channels (the whole state stored and checked)
        return kind, run, (pp, lean.NONE, lean.NONE)
    tab = (tuple(tuple(float(v) for v in row) for row in a), tuple(float(v) for v in b),
           tuple(float(v) for v in c)) if key == "gauss" else ()
    return kind, run, (tag, pp, params, tab)


__all__ = ["compiled_stepper", "CompiledStepper"]
