"""A comparison run on observed channels (the ``observe`` key of ``vp-rollout``; ``vpintegrator.data.observation``).

When a run observes part of the state (``observe = "q"``, or models trained on an observation), every row is
scored on the observed channels:

- the **reference** is computed in the full state (the exact flow from the file's initial conditions, or the
  file continued by its generator; held-out conditions from their own) and then observed
  (``observed_reference``); a file that holds observed channels only is its own reference (no exact flow:
  ``check_observed_rows`` refuses the rows that need the full state);
- **models** roll out on observed windows, their first window the reference's first ``seq_len`` observed
  states; a model trained on another observation (or on the full state) is refused in one line
  (``run_observation``);
- **state estimation + a classical method** (the row ``estimate+METHOD``, ``EstimatedStep``): the full state
  is recovered from the first ``context_len`` observed states by least squares on the true flow (DOP853 at
  rtol = atol = 1e-12; Levenberg–Marquardt from several starts), then integrated by METHOD (a classical
  integrator or ``exact_flow``) and observed: the known-equations competitor. Plain classical rows are
  refused (they need the full initial state, which the run does not observe).
- **a whole-window estimate for a row that starts from one observed state** (``estimate+ROW`` with ROW a row of
  one state, the hidden-bath arena's ``gle`` or ``bath+METHOD``: ``WindowEstimatedStep``): the observed first
  state is replaced by the state whose trajectory under the row's own flow (the GLE, or the particle with the
  bath at rest stepped by METHOD) fits the first ``context_len`` observed states best in least squares, then the
  row runs from it: a batch smoother over the window instead of one noisy observation.

The run's system is an ``ObservedSystem``: the observed dimension, no invariants (they need the full state),
the full system and the observation kept for the reference and the estimation rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..data.observation import Observation, check_same, observation_from_record, observation_of, resolve_observation
from ..errors import VPIntegratorError
from ..systems.unknown import UnknownSystem
from .engine import StepMap
from ..quantiles import median

__all__ = ["ObservedSystem", "EstimatedStep", "WindowEstimatedStep", "estimate_first_state", "estimate_states", "run_observation", "check_observed_rows",
           "observed_reference", "observation_attrs", "ESTIMATE_STARTS_MAX"]

#: at most this many Levenberg–Marquardt starts per trajectory (1 + 2 per unobserved direction)
ESTIMATE_STARTS_MAX = 9


@dataclass(frozen=True)
class ObservedSystem(UnknownSystem):
    """The system of an observed run: ``dim`` observed channels and no invariants (an ``UnknownSystem`` to
    the writer: it records no system of that dimension), with the ``full`` system and the ``observation``
    for the reference and the estimation rows."""

    full: Any = None
    observation: Observation | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        spec = self.observation.spec if self.observation is not None else "?"
        return f"{getattr(self.full, 'name', 'system')} observed in {spec}"


def observation_attrs(system: Any, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The rollout file's attributes of an observed run: the observation (``observation``, its matrix, the
    observed system by name); ``{}`` for a run on the whole state. ``meta``: the data file's, for a file of
    observed channels."""
    obs = getattr(system, "observation", None)
    if obs is None and meta is not None:
        obs = observation_of(meta)
    if obs is None:
        return {}
    return obs.meta()


def _model_observation(label: str, model: Any) -> tuple[bool, Observation | None]:
    """``(recorded, observation)`` of a model: whether its checkpoint says what it saw, and what."""
    record = getattr(model, "trained_on", None)
    if not isinstance(record, dict) or "observation" not in record:
        return False, None
    observation = observation_from_record(record["observation"], f"model {label}")
    if observation is None:  # trained on the full state: nothing to attach
        return True, None
    from ..reduction.observation import attach_reduction  # a nonlinear reduction: loaded from its recorded file

    return True, attach_reduction(observation, f"model {label}")


def run_observation(spec: str | None, meta: Mapping[str, Any], system: Any, entries: Sequence[tuple[str, Any, str]],
                    data: Any) -> tuple[Observation | None, list[str]]:
    """The observation of a run and the lines to say: the ``observe`` key ``spec`` (None: the models'), the data
    file's (a file of observed channels: ``meta``), the models' records (``entries``: (label, model, source)).
    All must agree: a model trained on another observation, or on the full state in an observed run (or the
    other way round), is refused in one line (key ``models``, or ``observe`` for the key itself)."""
    from ..reduction import observation as _reductions  # noqa: F401  (registers psd:K, psd_balanced:K, file:PATH)

    held = observation_of(meta)
    recorded = [(label, *_model_observation(label, model)) for label, model, _ in entries]
    known = [(label, obs) for label, has, obs in recorded if has]
    lines: list[str] = []
    names = tuple(getattr(system, "state_names", ()) or ())
    sys_name = None if isinstance(system, UnknownSystem) else str(getattr(system, "name", "") or "") or None
    run: Observation | None
    if held is not None:  # the file holds observed channels only
        if spec is not None and not held.spelled_by(spec):  # the same channels by index or by name: one observation
            raise VPIntegratorError(f"observe {spec!r}: {data} holds the observed channels of observation "
                                    f"{held.describe()} only; give observe = {held.spec!r} or leave it out",
                                    key="observe")
        run = held
    elif spec is not None:
        fitted = next((obs for _, obs in known if obs is not None and obs.spec == spec), None)
        run = fitted if fitted is not None else resolve_observation(spec, int(system.dim), names, sys_name)
    else:
        observed = [(label, obs) for label, obs in known if obs is not None]
        run = observed[0][1] if observed else None
        if run is not None:
            lines.append(f"observe {run.spec}: the observation {observed[0][0]} was trained on "
                         f"({run.describe()}); every row is scored on it")
    for label, obs in known:
        check_same(obs, run, f"models: {label}", "this run" if held is None else f"data {data}", key="models")
    if run is not None and held is None and run.full_dim != int(system.dim):
        raise VPIntegratorError(f"observe {run.spec}: the observation maps states of dim {run.full_dim}, but {data} "
                                f"holds states of dim {int(system.dim)}", key="observe")
    return run, lines


def check_observed_rows(observation: Observation, names: Sequence[str], integrating: Sequence[str], system: Any,
                        data: Any, *, init: str, parametric: bool) -> None:
    """Refuse, each in one line and before anything runs, what an observed run cannot do (``names``: the rows;
    ``integrating``: those of them that integrate the equations): classical rows and
    ``exact_flow`` (they need the full initial state: ``estimate+METHOD`` estimates it), any row that
    integrates the equations when the file holds observed channels only (no full state: no exact flow), a
    first window made by an integrator, per-trajectory parameters."""
    from ..integrators import list_integrators

    if isinstance(system, UnknownSystem) and not isinstance(system, ObservedSystem):  # observed channels only
        full = list(integrating)
        if full:
            raise VPIntegratorError(
                f"integrators: {', '.join(full)}: {data} holds the observed channels of observation "
                f"{observation.describe()} only, not the full state: no exact flow, classical or estimation row can "
                "integrate the equations; give a file with the full state (vp-gen) and observe, or models only",
                key="integrators")
        return
    plain = [n for n in names if n == "exact_flow" or n in list_integrators()]
    if plain:
        raise VPIntegratorError(
            f"integrators: {', '.join(plain)} integrate(s) the full state, which this run observes only in "
            f"{observation.spec}; give estimate+{plain[0]} (the full state estimated from the first context_len "
            "observed states, then integrated)", key="integrators")
    if init != "reference":
        raise VPIntegratorError(f"init: {init!r} integrates the first window in the full state; an observed run "
                                "starts from the reference's observed states: use init = 'reference'", key="init")
    if parametric:
        raise VPIntegratorError("observe: per-trajectory parameters (/params) with an observation are not supported; "
                                "observe data of one parameter set", key="observe")


def observed_reference(system: "ObservedSystem", meta: Mapping[str, Any], y_file: np.ndarray, t_file: np.ndarray,
                       heldout_y0: np.ndarray | None, dt: float, t0: float, n_steps: int, exact_from_ics: bool,
                       chunk_steps: int, blowup: float) -> np.ndarray:
    """The observed reference (n_traj, n_steps + 1, dim): computed in the full state, then observed. The exact
    flow (DOP853, rtol = atol = 1e-12) from the initial conditions (``exact_from_ics``), else the file's states
    ``y_file`` continued beyond them by the data's generator; the held-out conditions from their own initial
    conditions. A failure is one line (key ``t_end``)."""
    from .engine import rollout
    from .steps import ExactFlowStep, reference_step_map

    full, obs = system.full, system.observation
    assert obs is not None
    parts = []

    def run(step_map: StepMap, y0: np.ndarray, n: int, t_first: float, what: str) -> np.ndarray:
        res = rollout(step_map, y0, dt, n, t0=t_first, chunk_steps=chunk_steps, blowup=blowup)
        failed = np.asarray(res.failed_step, dtype=np.int64)
        if (failed >= 0).any():
            k = int(failed[failed >= 0].min())
            raise VPIntegratorError(f"{what} failed (blow-up or non-finite) at t = {t_first + k * dt:g}; give a "
                                    "shorter t_end", key="t_end")
        return np.asarray(res.y)

    n_data = int(y_file.shape[0])
    if exact_from_ics:
        y0 = y_file[:, 0] if heldout_y0 is None else np.concatenate([y_file[:, 0], heldout_y0])
        return obs.apply(run(ExactFlowStep(full, dt), y0, n_steps, t0, "the exact-flow reference"))
    generator = reference_step_map(meta, full, dt)
    if n_data:  # the file's states, continued beyond them
        take = min(int(y_file.shape[1]), n_steps + 1)
        y = y_file[:, :take]
        if n_steps + 1 > take:
            cont = run(generator, y_file[:, take - 1], n_steps + 1 - take, float(t_file[take - 1]),
                       "continuing the reference with its generator")
            y = np.concatenate([y, cont[:, 1:]], axis=1)
        parts.append(y)
    if heldout_y0 is not None and len(heldout_y0):
        parts.append(run(generator, heldout_y0, n_steps, t0, "the held-out reference"))
    return obs.apply(np.concatenate(parts, axis=0))


# -- state estimation ---------------------------------------------------------------------------------


def _flow(system: Any, z0: np.ndarray, dt: float, K: int) -> np.ndarray:
    """The exact flow (DOP853, 1e-12) of ``z0`` (m, d) at 0, dt, .., (K-1) dt: (m, K, d)."""
    from ..data import solve_flow

    if K == 1:
        return np.asarray(z0, dtype=np.float64)[:, None, :]
    return np.asarray(solve_flow(system, z0, dt * np.arange(K), rtol=1e-12, atol=1e-12), dtype=np.float64)


def _starts(obs: Observation, w0: np.ndarray) -> np.ndarray:
    """Starting states (S, n, d): the least-norm state of each first observation ``w0`` (n, k), and that state
    moved by ± its scale along each unobserved direction (at most ``ESTIMATE_STARTS_MAX``)."""
    C = obs.matrix
    base = w0 @ np.linalg.pinv(C).T  # (n, d)
    _, s, vt = np.linalg.svd(C)
    null = vt[int(np.sum(s > 1e-12 * max(1.0, s.max()))):]  # (d - rank, d)
    scale = np.sqrt(np.mean(w0 ** 2, axis=1, keepdims=True)) + 1e-3  # (n, 1)
    starts = [base]
    for v in null:
        for sign in (1.0, -1.0):
            starts.append(base + sign * scale * v)
    return np.stack(starts[:ESTIMATE_STARTS_MAX])


def estimate_states(system: Any, observation: Observation, windows: np.ndarray, dt: float, *, iterations: int = 40
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The full states behind observed windows, by least squares on the true flow.

    For each window ``w`` (K observed states, (n, K, k)), the initial state ``z`` minimising
    ``sum_j |C Φ_{j dt}(z) − w_j|^2`` (Φ the exact flow, DOP853 at 1e-12; C the observation), by
    Levenberg–Marquardt (finite-difference Jacobians) from the starts of ``_starts``; the best start is kept.

    Returns
    -------
    (z_last, residual)
        ``z_last`` (n, d): the estimated full state at the window's last step, ``Φ_{(K−1) dt}(z)``;
        ``residual`` (n,): the RMS of the fit's residual, in the observed channels' units.
    """
    w = np.asarray(windows, dtype=np.float64)
    n, K, k = w.shape
    d = observation.full_dim
    if K * k < d:
        raise VPIntegratorError(f"context_len: {K} observed states of {k} channels give {K * k} numbers, fewer than "
                                f"the {d} of a full state; give context_len >= {-(-d // k)}", key="context_len")
    C = observation.matrix
    starts = _starts(observation, w[:, 0])  # (S, n, d)
    S = starts.shape[0]
    z = starts.reshape(S * n, d).copy()
    target = np.tile(w, (S, 1, 1))  # (S n, K, k)

    def residual(zz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        traj = _flow(system, zz, dt, K)
        return (traj @ C.T - target).reshape(len(zz), -1), traj

    def jac(zz: np.ndarray, r0: np.ndarray) -> np.ndarray:
        h = 1e-6 * np.maximum(1.0, np.abs(zz))  # (m, d)
        shifted = np.concatenate([zz + h[:, [i]] * np.eye(d)[i] for i in range(d)])  # (d m, d)
        traj = _flow(system, shifted, dt, K) @ C.T  # (d m, K, k)
        m = len(zz)
        cols = [(traj[i * m:(i + 1) * m].reshape(m, -1) - target.reshape(m, -1) - r0) / h[:, [i]] for i in range(d)]
        return np.stack(cols, axis=-1)  # (m, K k, d)

    r, traj = residual(z)
    cost = np.sum(r ** 2, axis=1)
    lam = np.full(S * n, 1e-3)
    with np.errstate(all="ignore"):
        for _ in range(int(iterations)):
            active = np.isfinite(cost) & (cost > 1e-28)
            if not active.any():
                break
            J = jac(z, r)
            JtJ = np.einsum("mri,mrj->mij", J, J)
            g = np.einsum("mri,mr->mi", J, r)
            A = JtJ + lam[:, None, None] * (np.einsum("mii->mi", JtJ)[:, :, None] * np.eye(d) + 1e-12 * np.eye(d))
            try:
                step = -np.linalg.solve(A, g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = -np.einsum("mij,mj->mi", np.linalg.pinv(A), g)
            step[~active] = 0.0
            z_new = z + step
            r_new, traj_new = residual(z_new)
            cost_new = np.sum(r_new ** 2, axis=1)
            better = np.isfinite(cost_new) & (cost_new < cost)
            z[better], r[better], cost[better], traj[better] = z_new[better], r_new[better], cost_new[better], \
                traj_new[better]
            lam = np.where(better, np.maximum(lam / 10.0, 1e-12), np.minimum(lam * 10.0, 1e12))
            if np.all(~active | (np.abs(step).max(axis=1) <= 1e-14 * np.maximum(1.0, np.abs(z).max(axis=1)))):
                break
    cost = np.where(np.isfinite(cost), cost, np.inf).reshape(S, n)
    best = np.argmin(cost, axis=0)  # (n,)
    last = traj[:, -1].reshape(S, n, d)[best, np.arange(n)]
    rms = np.sqrt(cost[best, np.arange(n)] / (K * k))
    return last, rms


class EstimatedStep(StepMap):
    """``estimate+METHOD``: the full state estimated from the first ``context_len`` observed states
    (``estimate_states``), then integrated by METHOD (a classical integrator or ``exact_flow``) and observed.

    Parameters
    ----------
    system : System
        The full system (the true equations: the known-equations competitor).
    observation : Observation
    method : str
        A classical integrator name or ``"exact_flow"``.
    dt : float
    context_len : int
        K, the observed states the estimate reads (the first window).
    """

    kind = "estimated"
    pred_window = 1

    def __init__(self, system: Any, observation: Observation, method: str, dt: float, context_len: int = 3) -> None:
        from ..integrators import list_integrators

        if method != "exact_flow" and method not in list_integrators():
            raise VPIntegratorError(f"integrators: estimate+{method}: unknown method {method!r}; give a classical "
                                    "integrator or exact_flow after estimate+ (or, observing a particle-bath "
                                    "system's particle, gle or bath+METHOD)", key="integrators")
        self.system, self.observation, self.method, self.dt = system, observation, method, float(dt)
        self.seq_len: int = int(context_len)
        self.dim: int = observation.dim
        self.name: str = f"estimate+{method}"
        self.residual = np.zeros(0)

    def _inner(self) -> StepMap:
        from .steps import ExactFlowStep, IntegratorStep

        if self.method == "exact_flow":
            return ExactFlowStep(self.system, self.dt)
        return IntegratorStep(self.system, self.method, self.dt)

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        z, self.residual = estimate_states(self.system, self.observation, np.asarray(window0), self.dt)
        self._map = self._inner()
        self._map.start(z[:, None, :], np.full(len(z), np.inf))

    def generate(self, n: int) -> np.ndarray:
        return np.ascontiguousarray(self.observation.apply(self._map.generate(n)))

    def reset(self, rows: np.ndarray) -> None:
        self._map.reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        # a map of observed windows through an estimate: no volume to speak of
        return np.full(len(windows), np.nan)

    def describe(self) -> dict[str, Any]:
        res = self.residual
        return {**super().describe(), "method": self.method, "context_len": self.seq_len,
                "estimate_residual_median": median(res.ravel()),
                "estimate_residual_max": float(np.max(res)) if res.size else float("nan")}


# -- a whole-window estimate for a row of one state ----------------------------------------------------


def estimate_first_state(step_map: StepMap, windows: np.ndarray, channels: Sequence[int] | None = None, *,
                         iterations: int = 40, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first state that ``step_map``'s own flow carries closest to the observed windows, in least squares.

    ``step_map`` is a row that starts from one state (``seq_len = 1``: the hidden-bath arena's ``gle`` or
    ``bath+METHOD``); for each window ``w`` ((n, K, dim), K >= 1), the channels ``channels`` (default all) of
    the first state, ``z``, minimise ``|z − w_0|^2 + sum_{j=1}^{K−1} |y_j(z) − w_j|^2`` with ``y_j(z)`` the
    row's state j steps after starting from ``w_0`` with those channels set to ``z`` (the other channels of
    ``w_0`` as given). Levenberg–Marquardt with forward-difference Jacobians (all rows and their shifted copies
    in one batch of the step map) from ``start`` ((n, c); default ``w_0``'s channels, the first-state estimate).

    Returns
    -------
    (z0, residual)
        ``z0`` (n, dim): ``w_0`` with the fitted channels; ``residual`` (n,): the RMS of the fit's residual over
        the window's fitted channels.
    """
    w = np.asarray(windows, dtype=np.float64)
    if w.ndim != 3 or int(getattr(step_map, "seq_len", 1)) != 1:
        raise VPIntegratorError(f"estimate: windows must be (n, K, dim) and the row start from one state; got "
                                f"{w.shape} and seq_len {getattr(step_map, 'seq_len', '?')}", key="context_len")
    n, K, dim = w.shape
    ch = np.arange(dim) if channels is None else np.asarray(list(channels), dtype=np.int64)
    c = ch.size
    target = w[:, :, ch].reshape(n, K * c)

    def trajectories(z: np.ndarray) -> np.ndarray:
        """(m, K c): the fitted channels of the row's first K states from the first states ``z`` (m, c)."""
        m = len(z)
        rows = np.arange(m) % n
        first = w[rows, :1].copy()
        first[:, 0, ch] = z
        if K == 1:
            return z.copy()
        step_map.start(first, None)
        later = np.asarray(step_map.generate(K - 1))[:, :, ch]
        return np.concatenate([z[:, None, :], later], axis=1).reshape(m, K * c)

    z = (w[:, 0, ch] if start is None else np.asarray(start, dtype=np.float64).reshape(n, c)).copy()
    r = trajectories(z) - target
    cost = np.sum(r ** 2, axis=1)
    lam = np.full(n, 1e-3)
    eye = np.eye(c)
    with np.errstate(all="ignore"):
        for _ in range(int(iterations)):
            active = np.isfinite(cost) & (cost > 1e-28)
            if not active.any() or K == 1:
                break
            h = 1e-7 * np.maximum(1.0, np.abs(z))  # (n, c)
            shifted = np.concatenate([z + h[:, [i]] * eye[i] for i in range(c)])  # (c n, c)
            both = trajectories(np.concatenate([z, shifted]))
            r = both[:n] - target
            cost = np.sum(r ** 2, axis=1)
            J = np.stack([(both[n * (i + 1):n * (i + 2)] - both[:n]) / h[:, [i]] for i in range(c)], axis=-1)
            JtJ = np.einsum("mri,mrj->mij", J, J)
            g = np.einsum("mri,mr->mi", J, r)
            A = JtJ + lam[:, None, None] * (np.einsum("mii->mi", JtJ)[:, :, None] * eye + 1e-12 * eye)
            step = -np.linalg.solve(A, g[..., None])[..., 0]
            step[~active | ~np.isfinite(step).all(axis=1)] = 0.0
            z_new = z + step
            cost_new = np.sum((trajectories(z_new) - target) ** 2, axis=1)
            better = np.isfinite(cost_new) & (cost_new < cost)
            z[better], cost[better] = z_new[better], cost_new[better]
            lam = np.where(better, np.maximum(lam / 10.0, 1e-12), np.minimum(lam * 10.0, 1e12))
            if np.all(~active | (np.abs(step).max(axis=1) <= 1e-14 * np.maximum(1.0, np.abs(z).max(axis=1)))):
                break
    z0 = w[:, 0].copy()
    z0[:, ch] = z
    return z0, np.sqrt(np.where(np.isfinite(cost), cost, np.inf) / (K * c))


class WindowEstimatedStep(StepMap):
    """``estimate+ROW`` for a row ``ROW`` that starts from one observed state (``gle``, ``bath+METHOD``): its first
    state estimated over the whole first window of ``context_len`` observed states by least squares on the row's
    own flow (``estimate_first_state``), then the row from that state; the states of the window are the
    observed ones (as for every row), the row's own from step ``context_len`` on.

    Parameters
    ----------
    inner : StepMap
        The row (``seq_len = 1``); its ``channels`` (the particle's Q and P among the run's) are the fitted
        channels where it has them, else all.
    context_len : int
        K, the observed states the estimate reads (K = 1: the row itself).
    label : str, optional
        The row's name (default ``estimate+`` and the inner row's).
    """

    kind = "estimated"
    pred_window = 1

    def __init__(self, inner: StepMap, context_len: int, label: str | None = None) -> None:
        if int(getattr(inner, "seq_len", 0)) != 1:
            raise VPIntegratorError(f"integrators: {label or 'estimate'}: the whole-window estimate is for a row that "
                                    "starts from one state (gle, bath+METHOD)", key="integrators")
        if int(context_len) < 1:
            raise VPIntegratorError(f"context_len: {context_len} observed states; give context_len >= 1",
                                    key="context_len")
        self.inner = inner
        self.seq_len: int = int(context_len)
        self.dim: int = int(inner.dim)
        self.channels = tuple(int(c) for c in getattr(inner, "channels", range(self.dim)))
        self.name: str = label or f"estimate+{getattr(inner, 'name', 'row')}"
        self.residual = np.zeros(0)

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        w = np.asarray(window0, dtype=np.float64)
        z0, self.residual = estimate_first_state(self.inner, w, self.channels)
        self.inner.start(z0[:, None, :], limit)
        if self.seq_len > 1:  # the row's states inside the window: the engine hands on the observed ones
            self.inner.generate(self.seq_len - 1)

    def generate(self, n: int) -> np.ndarray:
        return self.inner.generate(n)

    def reset(self, rows: np.ndarray) -> None:
        # a failed row restarts from its estimated first state (its output from the failure on is discarded)
        self.inner.reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        return np.full(len(windows), np.nan)

    def describe(self) -> dict[str, Any]:
        res = self.residual
        inner = {k: v for k, v in self.inner.describe().items() if k not in ("kind", "seq_len", "pred_window",
                                                                             "overlap")}
        return {**super().describe(), **inner, "context_len": self.seq_len, "estimate": "whole window, the row's flow",
                "estimate_residual_median": median(res.ravel()),
                "estimate_residual_max": float(np.max(res)) if res.size else float("nan")}
