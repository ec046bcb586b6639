"""Volume on delay coordinates: what a map of observed windows can preserve.

A multi-step model maps a window of T observed states to the next; a volume-preserving one (VPT, VPFF) has
``det J = 1`` on the window's T·k numbers by construction. Window volume is not phase-space volume:

- the position form of Störmer–Verlet, ``q_{n+1} = 2 q_n − q_{n−1} − h² M⁻¹ ∇V(q_n)``, is a map of the
  delay window ``(q_{n−1}, q_n)`` whose Jacobian ``[[0, I], [−I, 2I − h² M⁻¹ ∇²V]]`` has determinant 1
  exactly (``verlet_delay_map``, ``verlet_delay_jacobian``): here window volume is preserved;
- the **exact** delay map of a flow observed by ``C`` is ``F = O ∘ Φ_h ∘ O⁻¹`` with the delay embedding
  ``O(z) = (C z, C Φ_h z, …, C Φ_{(T−1)h} z)``; where ``T·k = d`` (the window has as many numbers as the state)
  ``log|det DF(O z)| = log|det DO(Φ_h z)| − log|det DO(z)|`` (Liouville: ``det DΦ_h = 1``), which is not 0 in
  general: ``exact_delay_log_det`` measures it along trajectories (``scripts/delay_volume.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from .observation import Observation

__all__ = ["verlet_delay_map", "verlet_delay_jacobian", "delay_embedding_log_det", "exact_delay_log_det"]


def _separable_parts(system: Any, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a separable canonical system at positions ``q`` (n, m): ``(acc, Minv, hess)``: the acceleration
    ``−M⁻¹ ∇V(q)`` (n, m), ``M⁻¹`` (m, m) and ``∇²V(q)`` (n, m, m), read from the system's vector field and
    Jacobian at p = 0 (``dq/dt = M⁻¹ p``, ``dp/dt = −∇V(q)``)."""
    if not getattr(system, "separable", False):
        raise VPIntegratorError(f"the position form of Stormer-Verlet needs a separable canonical system (H = T(p) + "
                                f"V(q)); {getattr(system, 'name', system)!r} is not")
    n, m = q.shape
    z = np.concatenate([q, np.zeros_like(q)], axis=1)
    f = np.asarray(system.vector_field(z))
    jac = np.asarray(system.jacobian(z))  # (n, 2m, 2m)
    Minv = jac[0, :m, m:]
    hess = -jac[:, m:, :m]
    return f[:, m:] @ Minv.T, Minv, hess


def verlet_delay_map(system: Any, window: np.ndarray, dt: float) -> np.ndarray:
    """``(q_{n−1}, q_n) -> (q_n, q_{n+1})``, ``q_{n+1} = 2 q_n − q_{n−1} + h² (−M⁻¹ ∇V(q_n))``: Störmer–Verlet
    on positions only. ``window`` (n, 2, m) -> (n, 2, m)."""
    w = np.asarray(window, dtype=np.float64)
    acc, _, _ = _separable_parts(system, w[:, 1])
    nxt = 2.0 * w[:, 1] - w[:, 0] + dt * dt * acc
    return np.stack([w[:, 1], nxt], axis=1)


def verlet_delay_jacobian(system: Any, window: np.ndarray, dt: float) -> np.ndarray:
    """The Jacobian (n, 2m, 2m) of ``verlet_delay_map`` at ``window`` (n, 2, m): ``[[0, I], [−I, 2I − h² M⁻¹ ∇²V(q_n)]]``
    (its determinant is 1: the lower-left block is −I and the upper-left 0)."""
    w = np.asarray(window, dtype=np.float64)
    n, _, m = w.shape
    _, Minv, hess = _separable_parts(system, w[:, 1])
    eye = np.eye(m)
    J = np.zeros((n, 2 * m, 2 * m))
    J[:, :m, m:] = eye
    J[:, m:, :m] = -eye
    J[:, m:, m:] = 2.0 * eye - dt * dt * np.einsum("ij,njk->nik", Minv, hess)
    return J


def delay_embedding_log_det(system: Any, observation: Observation, states: np.ndarray, dt: float, T: int,
                            eps: float = 1e-6) -> np.ndarray:
    """``log|det DO(z)|`` (n,) of the delay embedding ``O(z) = (C z, C Φ_h z, …, C Φ_{(T−1)h} z)`` at full states
    ``states`` (n, d), with ``T·k = d``; ``DO`` by central differences of the exact flow (DOP853, 1e-12)."""
    from .flow import solve_flow

    z = np.asarray(states, dtype=np.float64)
    n, d = z.shape
    k = observation.dim
    if T * k != d:
        raise VPIntegratorError(f"T = {T}: the window of {T} x {k} observed numbers must have the state's {d} (T * k = d) "
                                f"for its volume to be compared with phase-space volume; give T = {d // k}"
                                if d % k == 0 else f"T = {T}: no window of {k}-channel states has {d} numbers")
    t = dt * np.arange(T)
    h = eps * np.maximum(1.0, np.abs(z))
    cols = []
    for i in range(d):
        e = np.zeros(d)
        e[i] = 1.0
        plus = solve_flow(system, z + h[:, [i]] * e, t) if T > 1 else (z + h[:, [i]] * e)[:, None]
        minus = solve_flow(system, z - h[:, [i]] * e, t) if T > 1 else (z - h[:, [i]] * e)[:, None]
        diff = observation.apply(np.asarray(plus)) - observation.apply(np.asarray(minus))  # (n, T, k)
        cols.append(diff.reshape(n, -1) / (2.0 * h[:, [i]]))
    DO = np.stack(cols, axis=-1)  # (n, T k, d)
    return np.linalg.slogdet(DO)[1]


def exact_delay_log_det(system: Any, observation: Observation, trajectories: np.ndarray, dt: float, T: int
                        ) -> np.ndarray:
    """``log|det|`` of the exact delay map at every window of full-state ``trajectories`` (n_traj, n_states, d):
    ``log|det DO(z_{j+1})| − log|det DO(z_j)|``, shape (n_traj, n_states − 1); 0 would be volume preserving."""
    y = np.asarray(trajectories, dtype=np.float64)
    n_traj, n_states, d = y.shape
    logdet = delay_embedding_log_det(system, observation, y.reshape(-1, d), dt, T).reshape(n_traj, n_states)
    return np.diff(logdet, axis=1)
