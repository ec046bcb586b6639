"""Classical one-step integrators, vectorised over a batch of states, float64.

The contract (every :class:`Integrator`):

- ``step(system, y, dt)`` maps states ``y`` of shape ``(batch, dim)`` to the states one step ``dt`` later,
  same shape;
- ``step_jacobian(system, y, dt)`` gives ``d y_next / d y`` of shape ``(batch, dim, dim)``, computed
  analytically (tangents propagated through explicit stages with ``system.jacobian``; implicit methods
  differentiate their converged stage equations), accurate to rounding;
- ``name``, ``order``, ``implicit`` describe it; ``supports(system)`` raises if the method cannot run on
  that system (Stormer-Verlet needs a separable Hamiltonian, the splitting a shear-splittable field).

| name              | order | preserves                                                        |
|-------------------|-------|------------------------------------------------------------------|
| euler             | 1     | nothing                                                          |
| rk4               | 4     | nothing                                                          |
| implicit_midpoint | 2     | symplectic; quadratic invariants; NOT volume (det J = 1 + O(h^3)) |
| gauss_legendre4   | 4     | same as implicit midpoint                                        |
| stormer_verlet    | 2     | symplectic, volume (separable H only)                            |
| splitting         | 2     | volume exactly (det J = 1): Strang composition of shear flows     |

Symplectic maps preserve phase-space volume of canonical Hamiltonian systems (the coupled
oscillator: det J = 1 to rounding), but the rigid body is Lie-Poisson, not canonical: there implicit
midpoint has det J = 1 + (h^3/2) abc z1 z2 z3 + O(h^5) (abc = -1/4 by default), up to 1.9e-4 from 1
at h = 0.2 on the unit sphere (Gauss-Legendre: ~1e-11).

:func:`integrate` runs one of them on a batch for ``n_steps`` steps into a
:class:`~vpintegrator.data.trajectories.Trajectories`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from .errors import VPIntegratorError, finite_float
from .systems import System, get_system, system_meta
from .data.trajectories import Trajectories


class _NotConverged(Exception):
    """Newton failed inside a step (turned into a VPIntegratorError naming the step)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Integrator:
    """Base class of a one-step method (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    order: ClassVar[int] = 0
    implicit: ClassVar[bool] = False

    def supports(self, system: System) -> None:
        """Raise :class:`VPIntegratorError` if this method cannot integrate ``system``."""

    def step(self, system: System, y: np.ndarray, dt: float) -> np.ndarray:
        """One step; y (batch, dim) -> (batch, dim), float64."""
        y = self._prepare(system, y, dt)
        try:
            return self._step(system, y, float(dt))
        except _NotConverged as exc:
            raise VPIntegratorError(f"{self.name}: {exc.detail}") from None

    def step_jacobian(self, system: System, y: np.ndarray, dt: float) -> np.ndarray:
        """Jacobian of the one-step map; y (batch, dim) -> (batch, dim, dim), ``[b, i, j] = d y1_i / d y_j``."""
        y = self._prepare(system, y, dt)
        try:
            return self._step_jacobian(system, y, float(dt))
        except _NotConverged as exc:
            raise VPIntegratorError(f"{self.name}: {exc.detail}") from None

    # subclasses implement these on validated (batch, dim) float64 arrays
    def _step(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        raise NotImplementedError

    def _step_jacobian(self, system: System, y: np.ndarray, h: float) -> np.ndarray:
        raise NotImplementedError

    def _prepare(self, system: System, y: np.ndarray, dt: float) -> np.ndarray:
        if not isinstance(system, System):
            raise VPIntegratorError(f"system must be a vpintegrator System; got {type(system).__name__}")
        self.supports(system)
        _check_dt(dt)
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 2 or y.shape[1] != system.dim:
            raise VPIntegratorError(
                f"y must have shape (batch, {system.dim}) for system {system.name!r}; got shape {y.shape}"
            )
        return y

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --- explicit methods --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExplicitEuler(Integrator):
    """Explicit Euler: ``y1 = y + h f(y)``."""

    name: ClassVar[str] = "euler"
    order: ClassVar[int] = 1

    def _step(self, system, y, h):
        return y + h * system.vector_field(y)

    def _step_jacobian(self, system, y, h):
        return _eye_like(y) + h * system.jacobian(y)


@dataclass(frozen=True)
class RK4(Integrator):
    """The classical fourth-order Runge-Kutta method."""

    name: ClassVar[str] = "rk4"
    order: ClassVar[int] = 4

    def _step(self, system, y, h):
        f = system.vector_field
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        k4 = f(y + h * k3)
        return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    def _step_jacobian(self, system, y, h):
        f, jac = system.vector_field, system.jacobian
        eye = _eye_like(y)
        # K_i = d k_i / d y: the stage Jacobian times the tangent of the stage input
        k1, K1 = f(y), jac(y)
        y2 = y + 0.5 * h * k1
        k2, K2 = f(y2), jac(y2) @ (eye + 0.5 * h * K1)
        y3 = y + 0.5 * h * k2
        k3, K3 = f(y3), jac(y3) @ (eye + 0.5 * h * K2)
        y4 = y + h * k3
        K4 = jac(y4) @ (eye + h * K3)
        return eye + (h / 6.0) * (K1 + 2.0 * K2 + 2.0 * K3 + K4)


# --- implicit Runge-Kutta (Gauss collocation) --------------------------------------------------------
@dataclass(frozen=True)
class _Newton(Integrator):
    """Shared Newton options of the implicit methods.

    Parameters
    ----------
    tol : float
        Stop when the largest Newton update of a state is below ``tol * max(1, |y|_inf)``.
    max_iter : int
        Give up (VPIntegratorError) after this many iterations.
    """

    tol: float = 1e-15
    max_iter: int = 50
    implicit: ClassVar[bool] = True

    def _converged(self, err: np.ndarray, prev: np.ndarray, scale: np.ndarray) -> np.ndarray:
        # either below tol, or stalled at the rounding floor (an update no smaller than the last one,
        # both already tiny): Newton converges quadratically, so a stall means rounding noise
        return (err <= self.tol * scale) | ((err <= 1e3 * self.tol * scale) & (err >= 0.5 * prev))

    def _fail(self, err: np.ndarray, active: np.ndarray) -> _NotConverged:
        candidates = np.flatnonzero(active)
        worst = int(candidates[np.argmax(err[candidates])])
        return _NotConverged(
            f"Newton did not converge in {self.max_iter} iterations for batch item {worst} "
            f"(last update {err[worst]:.3g}); reduce dt or raise max_iter"
        )


@dataclass(frozen=True)
class ImplicitMidpoint(_Newton):
    """Implicit midpoint: ``y1 = y + h f((y + y1) / 2)``, solved by Newton with the system Jacobian."""

    name: ClassVar[str] = "implicit_midpoint"
    order: ClassVar[int] = 2

    def _solve(self, system, y, h):
        """Converged ``y1`` (batch, dim); iterates only the items not yet converged."""
        eye = np.eye(y.shape[1])
        y1 = y + h * system.vector_field(y)  # explicit Euler guess, error O(h^2)
        scale = np.maximum(1.0, np.max(np.abs(y), axis=1))
        active = np.ones(y.shape[0], dtype=bool)
        prev = np.full(y.shape[0], np.inf)
        err = np.full(y.shape[0], np.inf)
        for _ in range(self.max_iter):
            idx = np.flatnonzero(active)
            ya, y1a = y[idx], y1[idx]
            mid = 0.5 * (ya + y1a)
            residual = y1a - ya - h * system.vector_field(mid)
            matrix = eye - 0.5 * h * system.jacobian(mid)
            delta = _newton_solve(matrix, residual[..., None])[..., 0]
            y1[idx] = y1a - delta
            e = np.max(np.abs(delta), axis=1)
            e = np.where(np.isfinite(e), e, np.inf)
            done = self._converged(e, prev[idx], scale[idx])
            err[idx], prev[idx] = e, e
            active[idx[done]] = False
            if not active.any():
                return y1
        raise self._fail(err, active)

    def _step(self, system, y, h):
        return self._solve(system, y, h)

    def _step_jacobian(self, system, y, h):
        # differentiate y1 = y + h f(m), m = (y + y1)/2:  (I - h/2 A) dy1 = (I + h/2 A) dy,  A = f'(m)
        y1 = self._solve(system, y, h)
        a = system.jacobian(0.5 * (y + y1))
        eye = _eye_like(y)
        return _newton_solve(eye - 0.5 * h * a, eye + 0.5 * h * a)


_SQ3 = math.sqrt(3.0)
_GL4_A = np.array([[0.25, 0.25 - _SQ3 / 6.0], [0.25 + _SQ3 / 6.0, 0.25]])
_GL4_B = np.array([0.5, 0.5])
_GL4_C = np.array([0.5 - _SQ3 / 6.0, 0.5 + _SQ3 / 6.0])


@dataclass(frozen=True)
class GaussLegendre4(_Newton):
    """Two-stage Gauss-Legendre collocation (order 4), Newton on the stage equations.

    Stage increments ``Z_i = Y_i - y`` solve ``Z_i = h sum_j a_ij f(y + Z_j)``; then
    ``y1 = y + h sum_j b_j f(y + Z_j)``.
    """

    name: ClassVar[str] = "gauss_legendre4"
    order: ClassVar[int] = 4

    def _newton_matrix(self, system, stages, h):
        """``I - h (a_ij f'(Y_j))`` as (batch, s*dim, s*dim) from stages Y (batch, s, dim)."""
        batch, s, d = stages.shape
        jac = system.jacobian(stages)  # (batch, s, d, d)
        blocks = -h * _GL4_A[None, :, :, None, None] * jac[:, None, :, :, :]  # (batch, i, j, d, d)
        matrix = blocks.transpose(0, 1, 3, 2, 4).reshape(batch, s * d, s * d)  # rows (i, d), cols (j, d)
        return matrix + np.eye(s * d)

    def _solve(self, system, y, h):
        """Converged stage values Y (batch, 2, dim)."""
        batch, d = y.shape
        f0 = system.vector_field(y)
        z = h * _GL4_C[None, :, None] * f0[:, None, :]  # (batch, 2, dim)
        scale = np.maximum(1.0, np.max(np.abs(y), axis=1))
        active = np.ones(batch, dtype=bool)
        prev = np.full(batch, np.inf)
        err = np.full(batch, np.inf)
        for _ in range(self.max_iter):
            idx = np.flatnonzero(active)
            ya, za = y[idx], z[idx]
            stages = ya[:, None, :] + za
            fs = system.vector_field(stages)  # (n, 2, dim)
            residual = za - h * np.einsum("ij,njd->nid", _GL4_A, fs)
            matrix = self._newton_matrix(system, stages, h)
            delta = _newton_solve(matrix, residual.reshape(len(idx), 2 * d, 1)).reshape(len(idx), 2, d)
            z[idx] = za - delta
            e = np.max(np.abs(delta), axis=(1, 2))
            e = np.where(np.isfinite(e), e, np.inf)
            done = self._converged(e, prev[idx], scale[idx])
            err[idx], prev[idx] = e, e
            active[idx[done]] = False
            if not active.any():
                return y[:, None, :] + z
        raise self._fail(err, active)

    def _step(self, system, y, h):
        stages = self._solve(system, y, h)
        return y + h * np.einsum("j,njd->nd", _GL4_B, system.vector_field(stages))

    def _step_jacobian(self, system, y, h):
        # dY_i = dy + h sum_j a_ij f'(Y_j) dY_j  ->  (I - h A (x) f') dY = [I; I] dy
        batch, d = y.shape
        stages = self._solve(system, y, h)
        matrix = self._newton_matrix(system, stages, h)
        rhs = np.tile(np.eye(d), (2, 1))  # (2d, d)
        dstages = _newton_solve(matrix, np.broadcast_to(rhs, (batch, 2 * d, d))).reshape(batch, 2, d, d)
        jac = system.jacobian(stages)  # (batch, 2, d, d)
        return np.eye(d) + h * np.einsum("j,njab,njbc->nac", _GL4_B, jac, dstages)


# --- structure-specific methods ----------------------------------------------------------------------
@dataclass(frozen=True)
class StormerVerlet(Integrator):
    """Stormer-Verlet (velocity Verlet, kick-drift-kick) for ``H = T(p) + V(q)``, state ``(q, p)``.

    ``p½ = p - h/2 V'(q);  q1 = q + h T'(p½);  p1 = p½ - h/2 V'(q1)``.
    """

    name: ClassVar[str] = "stormer_verlet"
    order: ClassVar[int] = 2

    def supports(self, system):
        if not getattr(system, "separable", False):
            raise VPIntegratorError(
                f"method 'stormer_verlet' needs a separable Hamiltonian H(q, p) = T(p) + V(q); system "
                f"{system.name!r} is not one. Use implicit_midpoint, gauss_legendre4 or rk4"
            )

    def _step(self, system, y, h):
        n = y.shape[1] // 2
        q, p = y[:, :n], y[:, n:]
        p_half = p - 0.5 * h * system.potential_gradient(q)
        q1 = q + h * system.kinetic_gradient(p_half)
        p1 = p_half - 0.5 * h * system.potential_gradient(q1)
        return np.concatenate([q1, p1], axis=1)

    def _step_jacobian(self, system, y, h):
        batch, d = y.shape
        n = d // 2
        q, p = y[:, :n], y[:, n:]
        eye = np.eye(d)
        dq, dp = eye[:n], eye[n:]  # tangents of q and p w.r.t. y: (n, d)
        p_half = p - 0.5 * h * system.potential_gradient(q)
        dp_half = dp - 0.5 * h * system.potential_hessian(q) @ dq
        q1 = q + h * system.kinetic_gradient(p_half)
        dq1 = dq + h * system.kinetic_hessian(p_half) @ dp_half
        dp1 = dp_half - 0.5 * h * system.potential_hessian(q1) @ dq1
        return np.concatenate([dq1, dp1], axis=1)


@dataclass(frozen=True)
class ShearSplitting(Integrator):
    """Exactly volume-preserving Strang splitting into shear flows.

    For a field whose component ``f_i`` does not depend on ``y_i`` (rigid body, ABC flow), the flow of
    ``dy_i/dt = f_i(y)`` (others frozen) is the exact shear ``y_i += t f_i(y)``, whose Jacobian is
    unit-triangular up to permutation (det 1). The symmetric composition
    ``1(h/2) 2(h/2) ... d(h) ... 2(h/2) 1(h/2)`` is of order 2 and det J = 1 to rounding.
    """

    name: ClassVar[str] = "splitting"
    order: ClassVar[int] = 2

    def supports(self, system):
        if not getattr(system, "shear_splittable", False):
            raise VPIntegratorError(
                f"method 'splitting' needs a field whose i-th component does not depend on y_i "
                f"(shear_splittable); system {system.name!r} is not. Use implicit_midpoint or rk4"
            )

    @staticmethod
    def _sequence(d: int, h: float) -> list[tuple[int, float]]:
        half = [(i, 0.5 * h) for i in range(d - 1)]
        return half + [(d - 1, h)] + half[::-1]

    def _step(self, system, y, h):
        y = y.copy()
        for i, c in self._sequence(y.shape[1], h):
            y[:, i] += c * system.vector_field(y)[:, i]
        return y

    def _step_jacobian(self, system, y, h):
        y = y.copy()
        jac = _eye_like(y)
        for i, c in self._sequence(y.shape[1], h):
            grad = system.jacobian(y)[:, i, :]  # d f_i / d y at the current point, (batch, d)
            # the shear's Jacobian is I + c e_i grad^T: only row i of the accumulated tangent changes
            jac[:, i, :] += c * np.einsum("nb,nbc->nc", grad, jac)
            y[:, i] += c * system.vector_field(y)[:, i]
        return jac


_REGISTRY: dict[str, Integrator] = {
    cls.name: cls()
    for cls in (ExplicitEuler, RK4, ImplicitMidpoint, GaussLegendre4, StormerVerlet, ShearSplitting)
}


def list_integrators() -> list[str]:
    """Registry names of the classical integrators."""
    return list(_REGISTRY)


def get_integrator(name: str | Integrator, **options: Any) -> Integrator:
    """An integrator by name; ``options`` (e.g. ``tol``, ``max_iter`` for implicit ones) override defaults."""
    if isinstance(name, Integrator):
        method = name
    elif isinstance(name, str) and name in _REGISTRY:
        method = _REGISTRY[name]
    else:
        raise VPIntegratorError(f"unknown method {name!r}; valid methods: {', '.join(list_integrators())}")
    if options:
        valid = [f.name for f in dataclasses.fields(method)]  # type: ignore[arg-type]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise VPIntegratorError(
                f"method {method.name!r} has no option(s) {', '.join(unknown)}; valid options: "
                f"{', '.join(valid) or '(none)'}"
            )
        method = dataclasses.replace(method, **options)  # type: ignore[type-var]
    return method


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
        One of :func:`list_integrators`.
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
        ``system``/``param_<name>`` (:func:`~vpintegrator.systems.system_meta`).
    """
    system = get_system(system)
    method = get_integrator(method)
    method.supports(system)
    h = _check_dt(dt)
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise VPIntegratorError(f"n_steps must be an int >= 0; got {n_steps!r}")
    n_steps = int(n_steps)
    t0 = finite_float(t0, "t0")
    y = _check_initial_conditions(system, y0)

    out = np.empty((y.shape[0], n_steps + 1, system.dim))
    out[:, 0] = y
    for k in range(1, n_steps + 1):
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported just below
                y = method._step(system, y, h)
        except _NotConverged as exc:
            raise VPIntegratorError(
                f"{method.name}: step {k} (t = {t0 + (k - 1) * h:g} -> {t0 + k * h:g}): {exc.detail}"
            ) from None
        finite = np.all(np.isfinite(y), axis=1)
        if not finite.all():
            i = int(np.argmin(finite))
            raise VPIntegratorError(
                f"{method.name}: trajectory {i} became non-finite at step {k} (t = {t0 + k * h:g}); "
                "reduce dt or use a stable method"
            )
        out[:, k] = y
        if callback is not None:
            callback(k, y)

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


# --- helpers -----------------------------------------------------------------------------------------
def _check_dt(dt: Any) -> float:
    return finite_float(dt, "dt", positive=True)


def _check_initial_conditions(system: System, y0: Any) -> np.ndarray:
    try:
        y = np.array(y0, dtype=np.float64)
    except (TypeError, ValueError):
        raise VPIntegratorError(
            f"y0 must be numbers of shape (n_traj, {system.dim}); got {type(y0).__name__}"
        ) from None
    if y.ndim == 1 and y.shape[0] == system.dim:
        y = y[None]
    if y.ndim != 2 or y.shape[1] != system.dim or y.shape[0] == 0:
        raise VPIntegratorError(
            f"y0 must have shape (n_traj, {system.dim}) for system {system.name!r}; got shape {y.shape}"
        )
    finite = np.all(np.isfinite(y), axis=1)
    if not finite.all():
        i = int(np.argmin(finite))
        raise VPIntegratorError(
            f"initial condition {i} is not finite: {y[i].tolist()}; give finite numbers"
        )
    return y


def _newton_solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Batched solve (batch, n, n) x (batch, n, k); a singular Newton matrix becomes _NotConverged."""
    try:
        return np.linalg.solve(matrix, rhs)
    except np.linalg.LinAlgError:
        bad = int(np.argmin(np.abs(np.linalg.det(matrix))))
        raise _NotConverged(
            f"the Newton matrix I - h df/dy is singular for batch item {bad}; reduce dt"
        ) from None


def _eye_like(y: np.ndarray) -> np.ndarray:
    """Identity matrices (batch, dim, dim) for states y (batch, dim)."""
    return np.broadcast_to(np.eye(y.shape[1]), (y.shape[0], y.shape[1], y.shape[1])).copy()


__all__ = [
    "Integrator",
    "ExplicitEuler",
    "RK4",
    "ImplicitMidpoint",
    "GaussLegendre4",
    "StormerVerlet",
    "ShearSplitting",
    "get_integrator",
    "list_integrators",
    "integrate",
]
