"""Long-time metrics of a rollout against a reference, in float64.

Array functions work on whole ``(n_traj, n_states, dim)`` arrays; the ``*Stream`` classes compute the same
quantities chunk by chunk along time, so that metrics of a rollout of any horizon fit in memory.

- relative error ``e(t) = ‖ẑ(t) − z(t)‖ / ‖z(t)‖`` against the reference;
- valid prediction time: the first ``t`` with ``e(t) > 0.1`` (a NaN error counts as exceeded), ``t_end``
  if never;
- in the field's conventions (dysts'): the normalised RMSE ``nrmse(t) = sqrt(mean_i ((ẑ_i − z_i) / σ_i)²)``,
  ``σ_i`` the spread (standard deviation) of component ``i`` over the data (``spread``), its mean over the
  predicted steps, the valid-prediction horizon ``vpt`` (the first ``t`` with ``nrmse(t) > 0.4``, ``t_end`` if
  never) and the same mean for the identity (do-nothing) map, which holds the last given state: a row whose
  mean NRMSE is not below the identity's has predicted nothing; horizons in Lyapunov times by the largest
  exponent's Benettin estimate on the true equations (``lyapunov_max``);
- relative drift of an invariant ``(I(ẑ_t) − I(ẑ_0)) / |I(ẑ_0)|``, its maximum modulus and the slope of
  a least-squares line through it over time (bounded drift gives a slope near 0, secular drift does not);
- volume: ``log|det J|`` of every step (or window) map along the trajectory and its cumulative sum
  (0 for an exactly volume-preserving map);
- wall time per step (measured by the rollout engine).

Periodic components (an angle of period ``P``: ``period[i] = P``, 0 where not periodic; a system's, spec's or
data file's ``periodic``, ``vpintegrator.data.trajectories.state_periods``): every difference ``ẑ_i − z_i`` is
wrapped to (−P/2, P/2] before any norm (``vpintegrator.arrays.wrap``), the relative error's ``‖z‖`` is the norm
of ``z``'s representative (its periodic components wrapped too), and the NRMSE's spread of such a component is
its circular spread ``σ_i = sqrt(−2 ln R) · P / (2π)``, ``R`` the mean resultant length of ``exp(2πi z_i / P)``.

Per-trajectory values are aggregated over trajectories in ``summary_row``: the mean for the final
relative error and the valid prediction time, the maximum (the worst trajectory) for drifts and volume.

One implementation for both rollout engines: [`relative_error`][vpintegrator.metrics.relative_error], [`relative_drift`][vpintegrator.metrics.relative_drift] and the
streams take NumPy arrays (host engine) or torch tensors (device engine, ``vpintegrator.rollout.device``:
on the GPU, no host-device synchronisation) and compute in the namespace given; summaries come back as
NumPy. [`block_metrics`][vpintegrator.metrics.block_metrics] puts together the per-step quantities of a rollout block.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .errors import VPIntegratorError
from .arrays import array_namespace, as_like, copy_array, first_true, row_max, to_numpy
from .arrays import relative_drift as _relative_drift, relative_error as _relative_error, wrap
from .data.summary import summary_row  # noqa: F401 (the table row; in the data layer, which merges rollout shards)
# the table's text and files: in the data layer too, where the work-precision table is written
from .data.summary import format_markdown, format_text, read_table, write_table  # noqa: F401

#: relative error above which a prediction stops being "valid" (valid prediction time)
VALID_ERROR_THRESHOLD = 0.1
#: NRMSE above which a prediction stops being valid (the valid-prediction horizon ``vpt``; dysts' 0.4)
VPT_THRESHOLD = 0.4
#: a mean state farther from 0 than this many spreads dominates ‖y‖: the relative error then says little (``spread``)
OFFSET_RATIO = 3.0


# --------------------------------------------------------------------------- array functions


def relative_error(y: np.ndarray, y_ref: np.ndarray, period: np.ndarray | None = None) -> np.ndarray:
    """Relative error ``‖ŷ − y‖ / ‖y‖`` at every step.

    Parameters
    ----------
    y, y_ref : ndarray, shape (n_traj, n_states, dim)
        Prediction and reference on the same time grid (or two torch tensors on one device).
    period : ndarray, shape (dim,), optional
        Each component's period, 0 where not periodic: the difference and ``y`` wrapped (module docstring).

    Returns
    -------
    ndarray, shape (n_traj, n_states), float64 (a tensor for tensors)
    """
    xp = array_namespace(y)
    if xp is np:
        y, y_ref = np.asarray(y, dtype=np.float64), np.asarray(y_ref, dtype=np.float64)
    if tuple(y.shape) != tuple(y_ref.shape):
        raise VPIntegratorError(
            f"relative_error: prediction shape {tuple(y.shape)} differs from reference shape {tuple(y_ref.shape)}; "
            "compare trajectories on the same (n_traj, n_states, dim) grid"
        )
    return _relative_error(y, y_ref, period)  # the one formula (vpintegrator.arrays)


def valid_prediction_time(
    error: np.ndarray, t: np.ndarray, threshold: float = VALID_ERROR_THRESHOLD
) -> np.ndarray:
    """First time at which the relative error exceeds ``threshold``; ``t[-1]`` if it never does.

    A NaN error (a failed trajectory) counts as exceeding the threshold.

    Parameters
    ----------
    error : ndarray, shape (n_traj, n_states)
    t : ndarray, shape (n_states,)

    Returns
    -------
    ndarray, shape (n_traj,)
    """
    error = np.asarray(error, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    exceeded = ~(error <= threshold)  # NaN -> exceeded
    first = np.argmax(exceeded, axis=1)
    return np.where(exceeded.any(axis=1), t[first], t[-1])


def nrmse(y: Any, y_ref: Any, scale: Any, period: Any = None) -> Any:
    """The normalised RMSE ``sqrt(mean_i ((ŷ_i − y_i) / σ_i)²)`` at every step (``σ = scale``, per component).

    Parameters
    ----------
    y, y_ref : ndarray, shape (n_traj, n_states, dim)
        Prediction and reference (or two float64 torch tensors on one device).
    scale : ndarray, shape (dim,)
        Each component's spread (``spread``), > 0.
    period : ndarray, shape (dim,), optional
        Each component's period, 0 where not periodic: those differences wrapped (module docstring).

    Returns
    -------
    ndarray, shape (n_traj, n_states) (a tensor for tensors)
    """
    xp = array_namespace(y)
    if xp is np:
        y, y_ref = np.asarray(y, dtype=np.float64), np.asarray(y_ref, dtype=np.float64)
    d = wrap(y - y_ref, period) / as_like(np.asarray(scale, dtype=np.float64), y)
    return xp.sqrt((d * d).mean(-1))


def spread(blocks: Any, period: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Each component's mean and standard deviation over every state of ``blocks`` (an iterable of arrays
    (..., dim); shifted sums in float64, so that a large offset costs no digits). A component that never
    moves gets a spread of 1 (its NRMSE is then its absolute error).

    With ``period`` (dim,) (0 where not periodic), a periodic component's mean is its circular mean (in
    (−P/2, P/2]) and its spread the circular standard deviation ``sqrt(−2 ln R) · P / (2π)``, ``R`` the mean
    resultant length ``|mean exp(2πi y / P)|`` (``R`` floored at 1e-300: a uniform spread stays finite).

    Returns
    -------
    mean, std : ndarray, shape (dim,)
    """
    shift: Any = None
    n, total, squares = 0, 0.0, 0.0
    circ: Any = 0j
    for block in blocks:
        b = np.asarray(block, dtype=np.float64).reshape(-1, np.shape(block)[-1])
        if shift is None:
            shift = b[0].copy()
        d = b - shift
        n, total, squares = n + b.shape[0], total + d.sum(0), squares + (d * d).sum(0)
        if period is not None and np.any(period):
            p = np.where(np.asarray(period) > 0, period, np.inf)
            circ = circ + np.exp(2j * np.pi * b / p).sum(0)  # (dim,): 1 per state where not periodic
    if not n:
        raise VPIntegratorError("spread: no states given")
    mean: Any = total / n
    std: Any = np.sqrt(np.maximum(squares / n - mean * mean, 0.0))
    mean = shift + mean
    if period is not None and np.any(period):
        on, p = np.asarray(period) > 0, np.asarray(period, dtype=np.float64)
        c = circ / n
        r = np.maximum(np.abs(c), 1e-300)
        mean = np.where(on, np.angle(c) * p / (2 * np.pi), mean)
        std = np.where(on, np.sqrt(np.maximum(-2 * np.log(np.minimum(r, 1.0)), 0.0)) * p / (2 * np.pi), std)
    return mean, np.where(std > 0, std, 1.0)


def offset_note(mean: np.ndarray, std: np.ndarray, what: str = "the data") -> str | None:
    """A line when ``‖mean‖ > OFFSET_RATIO · ‖std‖`` (the states sit far from 0 against their spread): the
    relative error ‖ẑ − z‖/‖z‖ then divides by the offset; None otherwise."""
    m, s = float(np.linalg.norm(mean)), float(np.linalg.norm(std))
    if not m > OFFSET_RATIO * s:
        return None
    return (f"note: ‖y‖ is dominated by an offset (over {what}: ‖mean‖ = {m:.4g}, {m / s:.3g}x the spread {s:.4g}): "
            "final_rel_error and valid_time divide by it and flatter every row; read mean_nrmse and vpt")


def lyapunov_max(advance: Callable[[np.ndarray, int], np.ndarray], y0: np.ndarray, dt: float, n_steps: int,
                 every: int = 10, d0: float = 1e-8, late: bool = False) -> Any:
    """Benettin's estimate of the largest Lyapunov exponent from each initial state (two trajectories).

    A companion starts ``d0 · max(‖y‖, 1)`` away along a random direction (seed 0); both are advanced ``every``
    steps at a time, the log of the separation's growth is summed and the companion brought back to
    ``d0 · max(‖y‖, 1)`` along the separation; the sum over ``n_steps · dt`` is the estimate (NaN where a state
    is not finite). With ``late``, also the growth (nats) summed over the second half of the steps alone: an
    exponential separation grows there by λ·t/2, a linear one (a regular, integrable motion, whose finite-time
    estimate log(1 + c t)/t is positive too) by at most log 2.

    Parameters
    ----------
    advance : callable
        States (m, dim) and a number of steps k -> the states k steps later (m, dim): the true equations' flow.
    y0 : ndarray, shape (n, dim)
    dt : float
    n_steps : int

    Returns
    -------
    ndarray, shape (n,)
        Per unit time; with ``late``, the pair (that, the second half's growth in nats, shape (n,)).
    """
    y = np.array(y0, dtype=np.float64)
    n = y.shape[0]
    u = np.random.default_rng(0).normal(size=y.shape)
    start = d0 * np.maximum(np.linalg.norm(y, axis=1), 1.0)  # (n,): the separation at a block's start
    z = y + (start / np.linalg.norm(u, axis=1))[:, None] * u
    total, second, done = np.zeros(n), np.zeros(n), 0
    with np.errstate(all="ignore"):
        while done < n_steps:
            k = min(every, n_steps - done)
            both = np.asarray(advance(np.concatenate([y, z]), k), dtype=np.float64)
            y, z = both[:n], both[n:]
            d = np.linalg.norm(z - y, axis=1)
            grew = np.log(d / start)
            total += grew
            if 2 * done >= n_steps:
                second += grew
            start = d0 * np.maximum(np.linalg.norm(y, axis=1), 1.0)
            z = y + (start / d)[:, None] * (z - y)
            done += k
    return (total / (n_steps * dt), second) if late else total / (n_steps * dt)


def relative_drift(values: np.ndarray, initial: np.ndarray | None = None, period: int | None = None) -> np.ndarray:
    """Relative drift ``(I_t − I_0) / |I_0|`` of an invariant along each trajectory.

    Parameters
    ----------
    values : ndarray, shape (n_traj, n_states)
        The invariant along each trajectory (or a torch tensor).
    initial : ndarray, shape (n_traj,), optional
        ``I_0``; default ``values[:, 0]``. Where ``I_0 = 0`` the absolute drift is returned.
    period : int, optional
        For a window model that maps T states to the next T (non-overlapping windows): state ``k`` descends
        from state ``k mod T`` of the first window, so its drift is taken against that state's own value,
        ``values[:, k % period]``. The first window's states come from a reference whose own error would
        otherwise be booked to the model. Not with ``initial``.

    Returns
    -------
    ndarray, shape (n_traj, n_states)
    """
    xp = array_namespace(values)
    if xp is np:
        values = np.asarray(values, dtype=np.float64)
        initial = None if initial is None else np.asarray(initial, dtype=np.float64)
    if period is not None:
        if initial is not None or isinstance(period, bool) or int(period) != period or period < 1:
            raise VPIntegratorError(f"relative_drift: period must be an int >= 1 without initial; got {period!r}")
        own = values[:, np.arange(values.shape[1]) % int(period)]  # (n_traj, n_states): each state's first-window value
        return _relative_drift(values, own)
    initial = values[:, 0] if initial is None else initial
    return _relative_drift(values, initial[:, None])  # the one formula (vpintegrator.arrays)


def invariant_drift(system: Any, y: np.ndarray) -> dict[str, np.ndarray]:
    """Relative drift of every invariant of ``system`` along ``y``.

    Parameters
    ----------
    system : vpintegrator.systems.System
    y : ndarray, shape (n_traj, n_states, dim)

    Returns
    -------
    dict
        invariant name -> ndarray, shape (n_traj, n_states)
    """
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(all="ignore"):
        return {name: relative_drift(np.asarray(v, dtype=np.float64)) for name, v in system.invariants(y).items()}


def drift_slope(drift: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Slope of the least-squares line through each trajectory's drift over time (NaN steps skipped).

    Parameters
    ----------
    drift : ndarray, shape (n_traj, n_states)
    t : ndarray, shape (n_states,)

    Returns
    -------
    ndarray, shape (n_traj,)
        Drift per unit time; NaN where fewer than two finite points.
    """
    fit = _LineFit(np.asarray(drift).shape[0], t_center=float(np.mean(t)))
    fit.update(np.asarray(t, dtype=np.float64), np.asarray(drift, dtype=np.float64))
    return fit.slope()


def log_abs_det(jacobian: np.ndarray) -> np.ndarray:
    """``log|det J|`` of a batch of square Jacobians, shape (..., n, n) -> (...)."""
    return np.linalg.slogdet(np.asarray(jacobian, dtype=np.float64))[1]


def step_log_det_jacobian(system: Any, integrator: Any, y: np.ndarray, dt: float) -> np.ndarray:
    """``log|det J|`` of every step map of a classical integrator along trajectories.

    Parameters
    ----------
    system : vpintegrator.systems.System
    integrator : vpintegrator.integrators.Integrator
    y : ndarray, shape (n_traj, n_states, dim)
        The trajectories; step ``k`` maps ``y[:, k]`` to ``y[:, k+1]``.
    dt : float

    Returns
    -------
    ndarray, shape (n_traj, n_steps), n_steps = n_states - 1
    """
    y = np.asarray(y, dtype=np.float64)
    n_traj, n_states, dim = y.shape
    states = y[:, :-1].reshape(-1, dim)  # (n_traj * n_steps, dim)
    jac = integrator.step_jacobian(system, states, dt)  # (n_traj * n_steps, dim, dim)
    return log_abs_det(jac).reshape(n_traj, n_states - 1)


def window_map(model: Any, overlap: bool = False) -> Callable[..., Any]:
    """The square map of state windows a multi-step model induces, as a function of one window.

    Non-overlapping (``overlap=False``): ``X ↦ last seq_len states of [X, f(X)]`` (for
    ``seq_len = pred_window`` just ``f(X)``); overlapping: ``X ↦ [X[1:], f(X)[0]]``.

    Parameters
    ----------
    model : torch.nn.Module
        With attributes ``seq_len``, ``pred_window``; forward (batch, seq_len, dim) -> (batch, pred_window, dim).

    Returns
    -------
    callable
        window (seq_len, dim) -> next window (seq_len, dim), torch.
    """
    import torch

    seq_len = int(model.seq_len)
    keep = 1 if overlap else int(model.pred_window)

    def fn(x):  # x: (seq_len, dim)
        pred = model(x[None])[0, :keep]  # (keep, dim)
        return torch.cat((x, pred), dim=0)[-seq_len:]  # (seq_len, dim)

    return fn


def window_log_det_jacobian(model: Any, windows: Any, overlap: bool = False, chunk: int = 4096) -> np.ndarray:
    """``log|det J|`` of a model's window map (see [`window_map`][vpintegrator.metrics.window_map]) at each window, via ``torch.func``.

    Evaluated in the model's dtype; pass a float64 copy (``copy.deepcopy(model).double()``) to measure
    the map's structure rather than float32 rounding.

    Parameters
    ----------
    model : torch.nn.Module
    windows : ndarray or Tensor, shape (n, seq_len, dim)
    chunk : int
        Windows per batched Jacobian (memory: ~ chunk x (seq_len dim)^2 x the model's activations).

    Returns
    -------
    ndarray, shape (n,), float64; for a tensor ``windows``, a float64 tensor on the model's device (no
    copy to the host, no synchronisation)
    """
    import torch

    as_tensor = torch.is_tensor(windows)
    param = next(iter(model.parameters()), None)
    dtype = param.dtype if param is not None else torch.float64
    device = param.device if param is not None else torch.device("cpu")
    windows = torch.as_tensor(windows).to(device=device, dtype=dtype)
    n, seq_len, dim = windows.shape
    if not overlap and int(model.pred_window) == seq_len:
        # the square window map is the model itself: vpintegrator.testing's Jacobian does exactly this
        from .jacobians import jacobian_slogdet

        def log_det(x):  # (b, seq_len, dim) -> (b,)
            return jacobian_slogdet(model, x)[1]
    else:
        fn = window_map(model, overlap=overlap)
        jac_fn = torch.func.vmap(torch.func.jacrev(lambda x: fn(x.reshape(seq_len, dim)).reshape(-1)))

        def log_det(x):  # (b, seq_len, dim) -> Jacobians (b, seq_len*dim, seq_len*dim) -> (b,)
            return torch.linalg.slogdet(jac_fn(x.reshape(-1, seq_len * dim)).double())[1]

    out = torch.empty(n, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, n, chunk):
            out[start : start + chunk] = log_det(windows[start : start + chunk])
    return out if as_tensor else out.cpu().numpy()


# --------------------------------------------------------------------------- streaming


class _LineFit:
    """Streaming per-row least-squares slope of ``v`` against ``t`` (NaN skipped), centred for accuracy;
    NumPy or torch: the sums live in the namespace (and on the device) of the values fed to it."""

    _SUMS = ("n", "st", "stt", "sv", "stv")

    def __init__(self, n_rows: int, t_center: float = 0.0) -> None:
        self.t_center = t_center
        for name in self._SUMS:
            setattr(self, name, np.zeros(n_rows))

    def update(self, t: np.ndarray, v: np.ndarray) -> None:
        xp = array_namespace(v)
        if array_namespace(self.n) is not xp:  # the first tensor: the sums move to its device
            for name in self._SUMS:
                setattr(self, name, as_like(getattr(self, name), v))
        tc = xp.broadcast_to(t - self.t_center, v.shape)
        ok = xp.isfinite(v)
        tc = xp.where(ok, tc, 0.0)
        v = xp.where(ok, v, 0.0)
        self.n += ok.sum(1)
        self.st += tc.sum(1)
        self.stt += (tc * tc).sum(1)
        self.sv += v.sum(1)
        self.stv += (tc * v).sum(1)

    def slope(self) -> np.ndarray:
        xp = array_namespace(self.n)
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = self.n * self.stt - self.st**2
            s = (self.n * self.stv - self.st * self.sv) / denom
        return xp.where((self.n >= 2) & (denom > 0), s, float("nan"))


class TrajectoryMetricsStream:
    """Error and invariant metrics of one method against a reference, fed chunk by chunk along time.

    Parameters
    ----------
    system : vpintegrator.systems.System
        Its ``invariants`` give the invariants tracked.
    n_traj : int
    t_center : float
        A time near the middle of the horizon (conditions the streaming line fit).
    threshold : float
        Relative error bounding the valid prediction time.
    scale : ndarray, shape (dim,), optional
        Each component's spread (``spread``): with it the NRMSE metrics (``nrmse``, ``vpt``, ``identity_nrmse``
        in ``summary``) are kept too.
    context : int
        The states given to the method (its first window): the NRMSE is averaged over the steps after them,
        and the identity map holds the last of them.
    vpt_threshold : float
        NRMSE bounding the valid-prediction horizon.
    period : ndarray, shape (dim,), optional
        Each component's period, 0 where not periodic: every error wraps those components (module docstring).
    """

    def __init__(self, system: Any, n_traj: int, t_center: float = 0.0,
                 threshold: float = VALID_ERROR_THRESHOLD, scale: np.ndarray | None = None, context: int = 1,
                 vpt_threshold: float = VPT_THRESHOLD, period: np.ndarray | None = None) -> None:
        self.scale, self.context, self.vpt_threshold = scale, int(context), float(vpt_threshold)
        self.period = period
        self._k = 0  # the step of the next chunk's first state
        self._hold: Any = None  # the identity map's state: the reference at step context - 1
        # per trajectory: the VPT, and the sums of the method's and the identity's NRMSE over the predicted steps
        self._vpt, self._sums = np.full(n_traj, np.nan), [np.zeros(n_traj), np.zeros(n_traj)]
        self.system: Any = system
        self.names: tuple[str, ...] = tuple(system.invariant_names)
        self.threshold = threshold
        self.n_traj = n_traj
        self._initial: dict[str, np.ndarray] | None = None
        self._fits = {name: _LineFit(n_traj, t_center) for name in self.names}
        self._max_drift = {name: np.zeros(n_traj) for name in self.names}
        self._valid_time = np.full(n_traj, np.nan)
        self._last_t = np.nan
        self._final_error = np.full(n_traj, np.nan)

    def update(self, t: np.ndarray, y: Any, y_ref: Any) -> dict[str, Any]:
        """Consume the next chunk of steps; return its per-step metrics.

        Parameters
        ----------
        t : ndarray, shape (n,)
        y : ndarray, shape (n_traj, n, dim)
            The method's states.
        y_ref : ndarray, shape (n_traj, n, dim), or None
            The reference states (None: no error metrics).

        Notes
        -----
        The arrays may also be float64 torch tensors on one device (``t`` may stay NumPy: a copy per call): the metrics are then
        tensors there, computed without a host-device synchronisation, and the running values stay there.

        Returns
        -------
        dict
            ``"rel_error"`` -> (n_traj, n) (if ``y_ref`` is given) and ``"invariant/<name>"`` -> (n_traj, n).
        """
        out: dict[str, np.ndarray] = {}
        xp = array_namespace(y)
        if xp is np:
            y, t = np.asarray(y, dtype=np.float64), np.asarray(t, dtype=np.float64)
        else:
            t = xp.as_tensor(t, dtype=xp.float64, device=y.device)
            if array_namespace(self._valid_time) is np:  # the first tensor: the running values move to its device
                self._valid_time, self._final_error = as_like(self._valid_time, y), as_like(self._final_error, y)
                self._vpt, self._sums = as_like(self._vpt, y), [as_like(v, y) for v in self._sums]
                self._max_drift = {k: as_like(v, y) for k, v in self._max_drift.items()}
        if y_ref is not None:
            err = relative_error(y, y_ref, self.period)
            out["rel_error"] = err
            exceeded = ~(err <= self.threshold)
            first = xp.isnan(self._valid_time) & exceeded.any(1)
            self._valid_time = xp.where(first, t[first_true(exceeded)], self._valid_time)
            self._final_error = err[:, -1]
            if self.scale is not None:
                self._nrmse(t, y, y_ref, xp)
        self._k += y.shape[1]
        self._last_t = t[-1]
        with np.errstate(all="ignore"):
            values = self.system.invariants(y)
        if xp is np:
            values = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
        if self._initial is None:
            self._initial = {k: copy_array(v[:, 0]) for k, v in values.items()}
        for name in self.names:
            v = values[name]
            out[f"invariant/{name}"] = v
            drift = relative_drift(v, self._initial[name])
            self._fits[name].update(t, drift)
            with np.errstate(invalid="ignore"):
                # a NaN drift (failed trajectory) makes the maximum NaN: honest, and counted as failed
                self._max_drift[name] = xp.maximum(self._max_drift[name], row_max(xp.abs(drift)))
        return out

    def _nrmse(self, t: Any, y: Any, y_ref: Any, xp: Any) -> None:
        """The NRMSE of a chunk (steps ``_k`` on): the VPT, and the sums over the predicted steps of the
        method's NRMSE and the identity map's (the reference held at step ``context − 1``)."""
        k0, n, c = self._k, y.shape[1], self.context
        if self._hold is None and k0 <= c - 1 < k0 + n:
            self._hold = copy_array(y_ref[:, c - 1 - k0 : c - k0])  # (n_traj, 1, dim)
        e = nrmse(y, y_ref, self.scale, self.period)
        exceeded = ~(e <= self.vpt_threshold)
        first = xp.isnan(self._vpt) & exceeded.any(1)
        self._vpt = xp.where(first, t[first_true(exceeded)], self._vpt)
        a = max(c - k0, 0)  # the chunk's first predicted step
        if a < n:
            held = xp.broadcast_to(self._hold, y_ref[:, a:].shape)
            self._sums = [self._sums[0] + e[:, a:].sum(1), self._sums[1] + nrmse(held, y_ref[:, a:], self.scale, self.period).sum(1)]

    def summary(self) -> dict[str, np.ndarray]:
        """Per-trajectory summary: ``final_rel_error``, ``valid_time``, ``max_rel_drift_<inv>``,
        ``drift_slope_<inv>``, and with a ``scale`` ``nrmse`` and ``identity_nrmse`` (the mean NRMSE over the
        predicted steps of the method and of the identity map) and ``vpt``; each an ndarray, shape (n_traj,)
        (NumPy also after tensor updates)."""
        xp = array_namespace(self._valid_time)
        out = {
            "final_rel_error": copy_array(self._final_error),
            "valid_time": xp.where(xp.isnan(self._valid_time), self._last_t, self._valid_time),
        }
        if self.scale is not None:
            n = max(self._k - self.context, 1)
            out.update(nrmse=self._sums[0] / n, identity_nrmse=self._sums[1] / n,
                       vpt=xp.where(xp.isnan(self._vpt), self._last_t, self._vpt))
        for name in self.names:
            out[f"max_rel_drift_{name}"] = copy_array(self._max_drift[name])
            out[f"drift_slope_{name}"] = self._fits[name].slope()
        return {k: to_numpy(v) for k, v in out.items()}


class VolumeStream:
    """``log|det J|`` of every step or window map along a trajectory, fed chunk by chunk along time.

    Map ``j`` reads the ``seq_len`` states before step ``o_j = seq_len + j * advance`` and produces the
    states from ``o_j`` on; its value is attributed to its last kept step ``o_j + advance − 1``.

    Parameters
    ----------
    log_det_fn : callable
        windows (n, seq_len, dim) float64 ndarray -> (n,) ``log|det J|`` (for a stream fed torch tensors:
        a float64 tensor -> a tensor on its device).
    n_traj, seq_len, advance, n_steps : int
        ``advance`` = ``pred_window`` for non-overlapping windows, 1 for overlapping windows and classical
        steps; the trajectory has states ``0 .. n_steps``.
    by_rows : bool
        Call ``log_det_fn(windows, rows)`` with each window's trajectory row (n,) too (NumPy chunks only): a
        parametric rollout's maps differ from row to row.

    Notes
    -----
    Windows with a non-finite state (failed trajectories) get NaN: NumPy chunks leave them out of
    ``log_det_fn``'s input, tensor chunks put them in as zeros (no data-dependent shape: no synchronisation).
    """

    #: set by __init__ (declared for type checkers)
    n_maps: int

    def __init__(self, log_det_fn: Callable, n_traj: int, seq_len: int, advance: int, n_steps: int,
                 by_rows: bool = False):
        self.log_det_fn = log_det_fn
        self.by_rows = by_rows  # log_det_fn(windows, rows): each window's row too (a parametric rollout)
        self.seq_len = seq_len
        self.advance = advance
        self.n_traj = n_traj
        self.n_maps = max(0, -(-(n_steps + 1 - seq_len) // advance))
        self.map_step: np.ndarray = np.minimum(seq_len + advance * np.arange(self.n_maps) + advance - 1, n_steps)
        self._tail: np.ndarray | None = None  # (n_traj, <= seq_len, dim): states just before the chunk
        self._k = 0  # first step of the next chunk
        self._next_map = 0
        self._cum = np.zeros(n_traj)
        self.max_abs_cum: Any = np.zeros(n_traj)

    def update(self, y: np.ndarray) -> tuple[slice, np.ndarray, np.ndarray]:
        """Consume the next chunk of states.

        Parameters
        ----------
        y : ndarray, shape (n_traj, n, dim)
            States of steps ``k .. k+n-1`` (chunks must arrive in order); or a float64 torch tensor (then
            the results are tensors on its device, and so are the running sums).

        Returns
        -------
        maps : slice
            The map indices finished in this chunk.
        log_det : ndarray, shape (n_traj, m)
        cum_log_det : ndarray, shape (n_traj, m)
        """
        xp = array_namespace(y)
        if xp is np:
            y = np.asarray(y, dtype=np.float64)
        elif array_namespace(self._cum) is np:  # the first tensor: the running sums move to its device
            self._cum, self.max_abs_cum = as_like(self._cum, y), as_like(self.max_abs_cum, y)
        n = y.shape[1]
        k0 = self._k
        ctx = y if self._tail is None else xp.concatenate((self._tail, y), 1)
        ctx_start = k0 - (0 if self._tail is None else self._tail.shape[1])  # step of ctx[:, 0]
        # maps j0 .. j - 1 have their input window end in this chunk (o_j <= k0 + n); map j's window
        # starts at step j * advance, index j * advance - ctx_start of ctx
        j0 = self._next_map
        j = self._next_map = max(j0, min(self.n_maps, (k0 + n - self.seq_len) // self.advance + 1))
        maps = slice(j0, j)
        self._k = k0 + n
        self._tail = copy_array(ctx[:, -self.seq_len :]) if self.seq_len > 0 else None
        m = j - j0
        if m == 0:
            empty = y[:, :0, 0] * 0.0 if xp is not np else np.zeros((self.n_traj, 0))
            return maps, empty, empty
        arange = np.arange if xp is np else (lambda k: xp.arange(k, device=y.device))  # no host-device copy
        idx = (j0 * self.advance - ctx_start) + self.advance * arange(m)[:, None] + arange(self.seq_len)[None, :]
        windows = ctx[:, idx]  # (n_traj, m, seq_len, dim)
        flat = windows.reshape(-1, *windows.shape[2:])
        good = xp.isfinite(flat).reshape(flat.shape[0], -1).all(-1)  # (n_traj * m,)
        if xp is np:
            logdet = np.full(flat.shape[0], np.nan)
            if good.any():
                if self.by_rows:
                    rows = np.repeat(np.arange(self.n_traj), m)
                    logdet[good] = self.log_det_fn(flat[good], rows[good])
                else:
                    logdet[good] = self.log_det_fn(flat[good])
        else:
            logdet = xp.where(good, self.log_det_fn(xp.where(good[:, None, None], flat, 0.0)), float("nan"))
        logdet = logdet.reshape(self.n_traj, m)
        cum = self._cum[:, None] + xp.cumsum(logdet, 1)
        self._cum = copy_array(cum[:, -1])
        abs_cum = xp.abs(cum)  # the largest so far, NaN (failed) maps left out:
        self.max_abs_cum = xp.fmax(self.max_abs_cum, row_max(xp.where(xp.isnan(abs_cum), 0.0, abs_cum)))
        return maps, logdet, cum


def block_metrics(stream: TrajectoryMetricsStream | None, volume: VolumeStream | None, t: Any, y: Any,
                  y_ref: Any) -> dict[str, Any]:
    """The per-step metrics of one block of a rollout, keyed as a rollout file stores them (both engines):
    ``stream.update(t, y, y_ref)`` (``"rel_error"``, ``"invariant/<name>"``) and, with a volume stream,
    ``"maps"`` (the slice of map indices finished in the block), ``"log_det_J"`` and ``"cum_log_det_J"``
    (n_traj, number of maps); NumPy arrays or tensors, as given."""
    out: dict[str, Any] = {} if stream is None else stream.update(t, y, y_ref)
    if volume is not None:
        out["maps"], out["log_det_J"], out["cum_log_det_J"] = volume.update(y)
    return out

