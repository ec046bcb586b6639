"""Long-time metrics of a rollout against a reference, in float64 (DESIGN.md §8).

Array functions work on whole ``(n_traj, n_states, dim)`` arrays; the ``*Stream`` classes compute the same
quantities chunk by chunk along time, so that metrics of a rollout of any horizon fit in memory.

- relative error ``e(t) = ‖ẑ(t) − z(t)‖ / ‖z(t)‖`` against the reference;
- valid prediction time: the first ``t`` with ``e(t) > 0.1`` (a NaN error counts as exceeded), ``t_end``
  if never;
- relative drift of an invariant ``(I(ẑ_t) − I(ẑ_0)) / |I(ẑ_0)|``, its maximum modulus and the slope of
  a least-squares line through it over time (bounded drift gives a slope near 0, secular drift does not);
- volume: ``log|det J|`` of every step (or window) map along the trajectory and its cumulative sum
  (0 for an exactly volume-preserving map);
- wall time per step (measured by the rollout engine).

Per-trajectory values are aggregated over trajectories in :func:`summary_row`: the mean for the final
relative error and the valid prediction time, the maximum (the worst trajectory) for drifts and volume.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import VPIntegratorError

#: relative error above which a prediction stops being "valid" (valid prediction time)
VALID_ERROR_THRESHOLD = 0.1


# --------------------------------------------------------------------------- array functions


def relative_error(y: np.ndarray, y_ref: np.ndarray) -> np.ndarray:
    """Relative error ``‖ŷ − y‖ / ‖y‖`` at every step.

    Parameters
    ----------
    y, y_ref : ndarray, shape (n_traj, n_states, dim)
        Prediction and reference on the same time grid.

    Returns
    -------
    ndarray, shape (n_traj, n_states), float64
    """
    y = np.asarray(y, dtype=np.float64)
    y_ref = np.asarray(y_ref, dtype=np.float64)
    if y.shape != y_ref.shape:
        raise VPIntegratorError(
            f"relative_error: prediction shape {y.shape} differs from reference shape {y_ref.shape}; "
            "compare trajectories on the same (n_traj, n_states, dim) grid"
        )
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.linalg.norm(y - y_ref, axis=-1) / np.linalg.norm(y_ref, axis=-1)


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


def relative_drift(values: np.ndarray, initial: np.ndarray | None = None) -> np.ndarray:
    """Relative drift ``(I_t − I_0) / |I_0|`` of an invariant along each trajectory.

    Parameters
    ----------
    values : ndarray, shape (n_traj, n_states)
        The invariant along each trajectory.
    initial : ndarray, shape (n_traj,), optional
        ``I_0``; default ``values[:, 0]``. Where ``I_0 = 0`` the absolute drift is returned.

    Returns
    -------
    ndarray, shape (n_traj, n_states)
    """
    values = np.asarray(values, dtype=np.float64)
    initial = values[:, 0] if initial is None else np.asarray(initial, dtype=np.float64)
    scale = np.where(initial == 0.0, 1.0, np.abs(initial))
    return (values - initial[:, None]) / scale[:, None]


def invariant_drift(system, y: np.ndarray) -> dict[str, np.ndarray]:
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


def step_log_det_jacobian(system, integrator, y: np.ndarray, dt: float) -> np.ndarray:
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


def window_map(model, overlap: bool = False) -> Callable:
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


def window_log_det_jacobian(model, windows, overlap: bool = False, chunk: int = 4096) -> np.ndarray:
    """``log|det J|`` of a model's window map (see :func:`window_map`) at each window, via ``torch.func``.

    Evaluated in the model's dtype; pass a float64 copy (``copy.deepcopy(model).double()``) to measure
    the map's structure rather than float32 rounding.

    Parameters
    ----------
    model : torch.nn.Module
    windows : ndarray or Tensor, shape (n, seq_len, dim)

    Returns
    -------
    ndarray, shape (n,), float64
    """
    import torch

    param = next(iter(model.parameters()), None)
    dtype = param.dtype if param is not None else torch.float64
    device = param.device if param is not None else torch.device("cpu")
    windows = torch.as_tensor(windows).to(device=device, dtype=dtype)
    n, seq_len, dim = windows.shape
    if not overlap and int(model.pred_window) == seq_len:
        # the square window map is the model itself: vpintegrator.testing's Jacobian does exactly this
        from .testing import jacobian_slogdet

        out = np.empty(n, dtype=np.float64)
        with torch.no_grad():
            for start in range(0, n, chunk):
                out[start : start + chunk] = jacobian_slogdet(model, windows[start : start + chunk])[1].double().cpu().numpy()
        return out
    fn = window_map(model, overlap=overlap)

    def flat(x):  # x: (seq_len * dim,) -> (seq_len * dim,)
        return fn(x.reshape(seq_len, dim)).reshape(-1)

    jac_fn = torch.func.vmap(torch.func.jacrev(flat))
    out = np.empty(n, dtype=np.float64)
    with torch.no_grad():
        for start in range(0, n, chunk):
            x = windows[start : start + chunk].reshape(-1, seq_len * dim)
            jac = jac_fn(x)  # (b, seq_len*dim, seq_len*dim)
            out[start : start + chunk] = torch.linalg.slogdet(jac.double())[1].cpu().numpy()
    return out


# --------------------------------------------------------------------------- streaming


class _LineFit:
    """Streaming per-row least-squares slope of ``v`` against ``t`` (NaN skipped), centred for accuracy."""

    def __init__(self, n_rows: int, t_center: float = 0.0) -> None:
        self.t_center = t_center
        self.n = np.zeros(n_rows)
        self.st = np.zeros(n_rows)
        self.stt = np.zeros(n_rows)
        self.sv = np.zeros(n_rows)
        self.stv = np.zeros(n_rows)

    def update(self, t: np.ndarray, v: np.ndarray) -> None:
        tc = np.broadcast_to(t - self.t_center, v.shape)
        ok = np.isfinite(v)
        tc = np.where(ok, tc, 0.0)
        v = np.where(ok, v, 0.0)
        self.n += ok.sum(axis=1)
        self.st += tc.sum(axis=1)
        self.stt += (tc * tc).sum(axis=1)
        self.sv += v.sum(axis=1)
        self.stv += (tc * v).sum(axis=1)

    def slope(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = self.n * self.stt - self.st**2
            s = (self.n * self.stv - self.st * self.sv) / denom
        return np.where((self.n >= 2) & (denom > 0), s, np.nan)


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
    """

    def __init__(self, system, n_traj: int, t_center: float = 0.0, threshold: float = VALID_ERROR_THRESHOLD):
        self.system = system
        self.names = tuple(system.invariant_names)
        self.threshold = threshold
        self.n_traj = n_traj
        self._initial: dict[str, np.ndarray] | None = None
        self._fits = {name: _LineFit(n_traj, t_center) for name in self.names}
        self._max_drift = {name: np.zeros(n_traj) for name in self.names}
        self._valid_time = np.full(n_traj, np.nan)
        self._last_t = np.nan
        self._final_error = np.full(n_traj, np.nan)

    def update(self, t: np.ndarray, y: np.ndarray, y_ref: np.ndarray | None) -> dict[str, np.ndarray]:
        """Consume the next chunk of steps; return its per-step metrics.

        Parameters
        ----------
        t : ndarray, shape (n,)
        y : ndarray, shape (n_traj, n, dim)
            The method's states.
        y_ref : ndarray, shape (n_traj, n, dim), or None
            The reference states (None: no error metrics).

        Returns
        -------
        dict
            ``"rel_error"`` -> (n_traj, n) (if ``y_ref`` is given) and ``"invariant/<name>"`` -> (n_traj, n).
        """
        out: dict[str, np.ndarray] = {}
        t = np.asarray(t, dtype=np.float64)
        if y_ref is not None:
            err = relative_error(y, y_ref)
            out["rel_error"] = err
            exceeded = ~(err <= self.threshold)
            pending = np.isnan(self._valid_time) & exceeded.any(axis=1)
            self._valid_time[pending] = t[np.argmax(exceeded[pending], axis=1)]
            self._final_error = err[:, -1]
        self._last_t = float(t[-1])
        with np.errstate(all="ignore"):
            values = {k: np.asarray(v, dtype=np.float64) for k, v in self.system.invariants(np.asarray(y)).items()}
        if self._initial is None:
            self._initial = {k: v[:, 0].copy() for k, v in values.items()}
        for name in self.names:
            v = values[name]
            out[f"invariant/{name}"] = v
            drift = relative_drift(v, self._initial[name])
            self._fits[name].update(t, drift)
            with np.errstate(invalid="ignore"):
                # a NaN drift (failed trajectory) makes the maximum NaN: honest, and counted as failed
                self._max_drift[name] = np.maximum(self._max_drift[name], np.abs(drift).max(axis=1))
        return out

    def summary(self) -> dict[str, np.ndarray]:
        """Per-trajectory summary: ``final_rel_error``, ``valid_time``, ``max_rel_drift_<inv>``,
        ``drift_slope_<inv>``; each an ndarray, shape (n_traj,)."""
        out = {
            "final_rel_error": self._final_error.copy(),
            "valid_time": np.where(np.isnan(self._valid_time), self._last_t, self._valid_time),
        }
        for name in self.names:
            out[f"max_rel_drift_{name}"] = self._max_drift[name].copy()
            out[f"drift_slope_{name}"] = self._fits[name].slope()
        return out


class VolumeStream:
    """``log|det J|`` of every step or window map along a trajectory, fed chunk by chunk along time.

    Map ``j`` reads the ``seq_len`` states before step ``o_j = seq_len + j * advance`` and produces the
    states from ``o_j`` on; its value is attributed to its last kept step ``o_j + advance − 1``.

    Parameters
    ----------
    log_det_fn : callable
        windows (n, seq_len, dim) float64 ndarray -> (n,) ``log|det J|``.
    n_traj, seq_len, advance, n_steps : int
        ``advance`` = ``pred_window`` for non-overlapping windows, 1 for overlapping windows and classical
        steps; the trajectory has states ``0 .. n_steps``.
    """

    def __init__(self, log_det_fn: Callable, n_traj: int, seq_len: int, advance: int, n_steps: int):
        self.log_det_fn = log_det_fn
        self.seq_len = seq_len
        self.advance = advance
        self.n_traj = n_traj
        self.n_maps = max(0, -(-(n_steps + 1 - seq_len) // advance))
        self.map_step = np.minimum(seq_len + advance * np.arange(self.n_maps) + advance - 1, n_steps)
        self._tail: np.ndarray | None = None  # (n_traj, <= seq_len, dim): states just before the chunk
        self._k = 0  # first step of the next chunk
        self._next_map = 0
        self._cum = np.zeros(n_traj)
        self.max_abs_cum = np.zeros(n_traj)

    def update(self, y: np.ndarray) -> tuple[slice, np.ndarray, np.ndarray]:
        """Consume the next chunk of states.

        Parameters
        ----------
        y : ndarray, shape (n_traj, n, dim)
            States of steps ``k .. k+n-1`` (chunks must arrive in order).

        Returns
        -------
        maps : slice
            The map indices finished in this chunk.
        log_det : ndarray, shape (n_traj, m)
        cum_log_det : ndarray, shape (n_traj, m)
        """
        y = np.asarray(y, dtype=np.float64)
        n = y.shape[1]
        k0 = self._k
        ctx = y if self._tail is None else np.concatenate((self._tail, y), axis=1)
        ctx_start = k0 - (0 if self._tail is None else self._tail.shape[1])  # step of ctx[:, 0]
        # maps whose input window ends inside [.., k0 + n): o_j <= k0 + n
        starts = []
        j = self._next_map
        while j < self.n_maps and self.seq_len + j * self.advance <= k0 + n:
            starts.append(self.seq_len + j * self.advance - self.seq_len - ctx_start)
            j += 1
        maps = slice(self._next_map, j)
        self._next_map = j
        self._k = k0 + n
        self._tail = ctx[:, -self.seq_len :].copy() if self.seq_len > 0 else None
        m = len(starts)
        if m == 0:
            empty = np.zeros((self.n_traj, 0))
            return maps, empty, empty
        idx = np.asarray(starts)[:, None] + np.arange(self.seq_len)  # (m, seq_len)
        windows = ctx[:, idx]  # (n_traj, m, seq_len, dim)
        dim = windows.shape[-1]
        ok = np.isfinite(windows).all(axis=(2, 3))  # (n_traj, m)
        flat = windows.reshape(-1, self.seq_len, dim)
        logdet = np.full(flat.shape[0], np.nan)
        good = ok.reshape(-1)
        if good.any():
            logdet[good] = self.log_det_fn(flat[good])
        logdet = logdet.reshape(self.n_traj, m)
        cum = self._cum[:, None] + np.cumsum(logdet, axis=1)
        self._cum = cum[:, -1].copy()
        with np.errstate(invalid="ignore"):
            self.max_abs_cum = np.fmax(self.max_abs_cum, np.nanmax(np.abs(cum), axis=1, initial=0.0))
        return maps, logdet, cum


# --------------------------------------------------------------------------- summary table


def summary_row(
    method: str,
    per_traj: Mapping[str, np.ndarray],
    invariant_names: Sequence[str],
    *,
    max_abs_cum_log_det_J: np.ndarray | None,
    seconds_per_step: float,
    failed_step: np.ndarray,
) -> dict[str, Any]:
    """One row of the metrics table: per-trajectory values aggregated over trajectories.

    Columns: ``method``, ``final_rel_error`` (mean; inf if any trajectory failed), ``valid_time`` (mean),
    ``max_rel_drift_<inv>`` and ``drift_slope_<inv>`` (worst trajectory; slope in units of 1/time),
    ``max_abs_cum_log_det_J`` (worst trajectory; NaN where not computed), ``seconds_per_step`` (wall time
    of one step of the whole batch), ``n_traj``, ``failed``.
    """
    failed = np.asarray(failed_step) >= 0
    row: dict[str, Any] = {"method": method}
    fin = np.asarray(per_traj["final_rel_error"], dtype=np.float64)
    row["final_rel_error"] = float(np.mean(np.where(np.isnan(fin), np.inf, fin))) if fin.size else math.nan
    row["valid_time"] = float(np.mean(per_traj["valid_time"]))
    for name in invariant_names:
        d = np.asarray(per_traj[f"max_rel_drift_{name}"], dtype=np.float64)
        row[f"max_rel_drift_{name}"] = float(np.max(np.where(np.isnan(d), np.inf, d)))
        s = np.asarray(per_traj[f"drift_slope_{name}"], dtype=np.float64)
        row[f"drift_slope_{name}"] = float(s[np.nanargmax(np.abs(s))]) if np.isfinite(s).any() else math.nan
    if max_abs_cum_log_det_J is None:
        row["max_abs_cum_log_det_J"] = math.nan
    else:
        row["max_abs_cum_log_det_J"] = float(np.max(max_abs_cum_log_det_J))
    row["seconds_per_step"] = float(seconds_per_step)
    row["n_traj"] = int(failed.size)
    row["failed"] = int(failed.sum())
    return row


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The metrics table as a GitHub Markdown table (one row per method)."""
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def format_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The metrics table as aligned plain text, for the terminal."""
    if not rows:
        return ""
    cols = list(rows[0])
    cells = [cols] + [[_fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells) + "\n"


def write_table(rows: Sequence[Mapping[str, Any]], stem: str | Path) -> tuple[Path, Path]:
    """Write the metrics table as ``<stem>.csv`` and ``<stem>.md`` (atomically); return both paths."""
    from ._io import atomic_path

    stem = Path(stem)
    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    cols = list(rows[0]) if rows else ["method"]
    with atomic_path(csv_path) as tmp:
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols)
            writer.writeheader()
            for r in rows:
                writer.writerow({c: (repr(r[c]) if isinstance(r[c], float) else r[c]) for c in cols})
    with atomic_path(md_path) as tmp:
        tmp.write_text(format_markdown(rows))
    return csv_path, md_path


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Read a metrics CSV written by :func:`write_table` (numbers parsed)."""
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append({k: (v if k == "method" else _parse_number(v)) for k, v in r.items()})
    return rows


def _parse_number(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        return float(v)
