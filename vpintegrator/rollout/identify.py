"""Identification baselines for families of systems: fit each trajectory's parameters from the
same prefix of observed states a context model reads, then integrate the **known** equations with them.

A learned context-conditioned integrator must beat these: they know the equations and only miss the
parameters. The vector fields the package knows how to fit are linear in a parameter vector θ,
ż = F(z) θ: the system's linear parameter form ([`System.parameter_features`][vpintegrator.systems.System.parameter_features],
``theta``, ``with_theta``, ``theta_basis``; rigid body θ = (a, b, c), coupled oscillator θ = (1/m₁, 1/m₂, k₁, k₂, k)).

- ``"finite_difference"``: central differences of the prefix, least squares for θ (second order in h);
- ``"shooting"``: Gauss–Newton / Levenberg–Marquardt (``scipy.optimize.least_squares``) on the flow of the
  known vector field (DOP853, rtol = atol = 1e-12): the initial state and the parameters that make the
  flow pass through the observed prefix; started from the finite-difference estimate.

The fit is in the identifiable parameters φ, θ = G φ (``System.theta_basis``; for the rigid body only
differences of the 1/I_k act on the motion, a + b + c = 0), and the fitted system is ``System.with_theta``.

[`IdentifiedStep`][vpintegrator.rollout.identify.IdentifiedStep] is a step map: it reads a prefix of ``context_len`` states (its ``seq_len``),
identifies each row's parameters (timed with the steps: the identification is part of the cost) and steps
a classical integrator with them. ``vp-rollout`` rows ``fd+rk4``, ``shooting+gauss_legendre4``, ...
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from ..systems import System
from ..systems.family import SystemFamily
from .config import IDENTIFY_METHODS
from .engine import StepMap

__all__ = ["IDENTIFY_METHODS", "theta_of", "system_from_theta", "identify_parameters", "add_noise", "IdentifiedStep"]

#: the identification methods (``vp-rollout`` rows ``METHOD+INTEGRATOR``)
_LONG = {"fd": "finite_difference", "shooting": "shooting", "finite_difference": "finite_difference"}


def _check_form(system) -> None:
    """A one-line error unless ``system`` has a linear parameter form (``System.linear_form_missing``)."""
    missing = type(system).linear_form_missing() if isinstance(system, System) else ["a System"]
    if missing:
        name = getattr(system, "name", None) or type(system).__name__
        raise VPIntegratorError(f"identification knows the systems with a linear parameter form f = F(y) θ; "
                                f"{name!r} lacks {', '.join(missing)} (define them on the system: "
                                "vpintegrator.systems.System)", key="integrators")


def theta_of(system) -> np.ndarray:
    """θ of a system (its ``theta_names`` order; [`System.theta`][vpintegrator.systems.System.theta]): (p,)."""
    _check_form(system)
    return system.theta()


def system_from_theta(base, theta: np.ndarray):
    """The system of ``base``'s class with parameters θ (p,) ([`System.with_theta`][vpintegrator.systems.System.with_theta]);
    a θ no system has is a one-line error."""
    _check_form(base)
    try:
        return base.with_theta(np.asarray(theta, dtype=np.float64))
    except VPIntegratorError as err:
        raise VPIntegratorError(f"identification: {err}; give a longer or less noisy prefix",
                                key="integrators") from None


def add_noise(prefix: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    """The prefix (n, k, dim) with N(0, σ²) observation noise on every component.

    Row i's draw is seeded by ``seed`` and a hash of row i's states, so a trajectory gets the same noise in
    every method, in any batch or block of rows and in any process."""
    import hashlib

    prefix = np.asarray(prefix, dtype=np.float64)
    if sigma == 0:
        return prefix.copy()
    out = prefix.copy()
    for i in range(prefix.shape[0]):
        digest = hashlib.blake2b(np.ascontiguousarray(prefix[i]).tobytes(), digest_size=8).digest()
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 34, int.from_bytes(digest, "little")]))
        out[i] += sigma * rng.normal(size=prefix.shape[1:])
    return out


def _fd_theta(system, prefix: np.ndarray, dt: float) -> np.ndarray:
    import torch

    from ..models.context import finite_difference_context

    c = finite_difference_context(type(system), torch.as_tensor(prefix, dtype=torch.float64)).numpy()  # (n, p): hθ
    G = system.theta_basis()  # the least-squares θ projected on the identifiable set θ = G φ
    phi = np.linalg.lstsq(G, (c / dt).T, rcond=None)[0]  # (q, n)
    return (G @ phi).T


def _shoot_one(base, z: np.ndarray, dt: float, theta0: np.ndarray) -> np.ndarray:
    from scipy.optimize import least_squares

    from ..data import solve_flow

    G = base.theta_basis()
    k, dim = z.shape
    t = dt * np.arange(k)
    phi0 = np.linalg.lstsq(G, theta0, rcond=None)[0]
    scale = np.maximum(np.abs(phi0), 0.1)

    def residual(v):
        y0, phi = v[:dim], v[dim:] * scale
        try:
            sys = system_from_theta(base, G @ phi)
            y = solve_flow(sys, y0[None], t)[0]
        except VPIntegratorError:
            return np.full(k * dim, 1e3)
        return (y - z).ravel()

    v0 = np.concatenate([z[0], phi0 / scale])
    sol = least_squares(residual, v0, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15, x_scale=1.0)
    return G @ (sol.x[dim:] * scale)


def _check_context_len(system, k: int) -> None:
    """k prefix states give (k − 2)·dim central differences: at least one per parameter."""
    n_theta = len(theta_of(system))
    if (k - 2) * system.dim < n_theta:
        need = 2 + -(-n_theta // system.dim)
        raise VPIntegratorError(f"context_len: {k} states of {system.name} give {max(0, (k - 2) * system.dim)} central "
                                f"differences for its {n_theta} parameters; give context_len >= {need}",
                                key="context_len")


def identify_parameters(system, prefix: np.ndarray, dt: float, method: str = "shooting") -> np.ndarray:
    """Each row's θ from its prefix of observed states.

    Parameters
    ----------
    system : System
        The class and the fixed parameters (e.g. ``RigidBody()``); only θ is fitted.
    prefix : ndarray, shape (n, k, dim)
        Observed states at t = 0, h, …, (k − 1) h (k >= 3).
    dt : float
        h.
    method : {"fd", "finite_difference", "shooting"}

    Returns
    -------
    ndarray, shape (n, p)
        θ̂ per row (rigid body (a, b, c), a + b + c = 0).
    """
    _check_form(system)
    prefix = np.asarray(prefix, dtype=np.float64)
    if prefix.ndim != 3 or prefix.shape[2] != system.dim or prefix.shape[1] < 3:
        raise VPIntegratorError(f"identify: prefix must be (n, k >= 3, {system.dim}); got {prefix.shape}",
                                key="context_len")
    _check_context_len(system, prefix.shape[1])
    if method not in _LONG:
        raise VPIntegratorError(f"identify: method must be one of fd, shooting; got {method!r}", key="integrators")
    theta = _fd_theta(system, prefix, float(dt))
    if _LONG[method] == "shooting":
        theta = np.stack([_shoot_one(system, prefix[i], float(dt), theta[i]) for i in range(prefix.shape[0])])
    return theta


class IdentifiedStep(StepMap):
    """Identify each row's parameters from its prefix, then step a classical integrator with them.

    ``seq_len`` is ``context_len``: the engine's first window is the prefix (the same states a context
    model reads, noise included); the integrator starts from its last state. The identification runs in
    the first ``generate`` call, so the rollout's ``seconds`` include it.

    Parameters
    ----------
    system : System or SystemFamily
        The true system(s): only their class and fixed parameters are used.
    how : {"fd", "shooting"}
    integrator : str
        A classical integrator name.
    dt : float
    context_len : int
    noise : float
        σ of the observation noise on the prefix (``add_noise`` with ``seed``).
    """

    kind = "integrator"

    def __init__(self, system, how: str, integrator: str, dt: float, context_len: int = 3, noise: float = 0.0,
                 seed: int = 0) -> None:
        from ..integrators import get_integrator

        base = system.base if isinstance(system, SystemFamily) else system
        _check_form(base)
        if how not in IDENTIFY_METHODS:
            raise VPIntegratorError(f"identification {how!r}: use one of {', '.join(IDENTIFY_METHODS)}",
                                    key="integrators")
        get_integrator(integrator).supports(base)
        _check_context_len(base, int(context_len))  # checked before anything runs
        self.base, self.how, self.integrator, self.dt = base, how, integrator, float(dt)
        self.dim: int = base.dim
        self.seq_len: int = int(context_len)
        self.noise, self.seed = float(noise), int(seed)
        self.name: str = f"{how}+{integrator}"
        self._inner: StepMap | None = None
        self.theta: np.ndarray | None = None

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self._window0 = np.asarray(window0, dtype=np.float64)
        self._limit = np.asarray(limit, dtype=np.float64)
        self._inner = None

    def _identify(self) -> StepMap:
        from .family import FamilyStep
        from .steps import IntegratorStep

        prefix = add_noise(self._window0, self.noise, self.seed)
        self.theta = identify_parameters(self.base, prefix, self.dt, self.how)
        family = SystemFamily([system_from_theta(self.base, th) for th in self.theta])
        inner = FamilyStep(family, lambda s: IntegratorStep(s, self.integrator, self.dt))
        inner.start(prefix[:, -1:], self._limit)
        return inner

    def generate(self, n: int) -> np.ndarray:
        if self._inner is None:
            self._inner = self._identify()
        return self._inner.generate(n)

    def reset(self, rows: np.ndarray) -> None:
        if self._inner is not None:
            self._inner.reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        if self._inner is None:
            self._inner = self._identify()
        return self._inner.log_abs_det_jacobian(np.asarray(windows)[:, -1:], rows)  # type: ignore[call-arg]

    by_rows = True

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "integrator": self.integrator, "identification": self.how,
                "context_len": self.seq_len, "context_noise": self.noise}
