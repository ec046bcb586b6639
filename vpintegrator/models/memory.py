"""Fitted linear memory as rollout rows: ``arx`` (a linear function of the last T states), ``delay_dmd`` (the
exact DMD of the delay-embedded data, truncated) and ``narx`` (the ARX window plus polynomial terms of the
newest state), each least squares on every window of the training trajectories, iterated from the first
window of T = ``context_len`` observed states (the first information ``parrot`` and the window models read).

**ARX.** x_{n+1} = c + Σ_{j<T} A_j x_{n−j}: least squares of each next state on its window (the T·k numbers,
oldest first, each column standardised over the training windows) with a ridge λ·N on the standardised
coefficients (N windows; the intercept is not penalised), computed from one SVD of the standardised window
matrix (λ = 0: the least-norm least-squares solution, singular values below ``eps · max(N, p) · s_max``
dropped, as ``numpy.linalg.lstsq``). λ is chosen from ``RIDGES`` by validation rollout (below).

**NARX.** The ARX window plus a library of the newest state: ``polyD`` = every monomial of x_n of degree
2 … D (k = 2, ``poly3``: x², xy, y², x³, x²y, xy², y³), in the same standardised least squares. The
(library, λ) pair is chosen from ``NARX_LIBRARIES`` × ``RIDGES`` by validation rollout; a library of more than
``MAX_FEATURES`` features is left out of the default grid and refused when asked for.

**Delay DMD.** The delay vectors h_n = (x_{n−T+1}, …, x_n) (T·k numbers) of every window with a successor,
centred by their training means (so the map is affine), form the Hankel matrix X and its successors Y. With
X_c = U Σ Vᵀ truncated to rank r, the exact DMD operator is A_r = Y_cᵀ U_r Σ_r⁻¹ V_rᵀ and the model is
h_{n+1} = μ_Y + A_r (h_n − μ_X), iterated in its r reduced coordinates a_n = V_rᵀ (h_n − μ_X); the
prediction is the newest block of h_{n+1}. At full rank it is the ARX fit without ridge (the shift rows of
A are then exact): the test suite holds it to that. r is chosen by validation rollout from 1 … T·k
(at most ``MAX_RANKS`` ranks, spread geometrically, the full rank always among them).

**Selection by validation rollout.** Every candidate is rolled out from the first T states of each
validation trajectory (at most ``MAX_VAL_TRAJ``) for at most ``VAL_STEPS`` steps; its score is the mean over
those trajectories of the largest error ‖x̂_n − x_n‖ over the steps divided by the trajectory's RMS state norm,
each capped at 1 (a blow-up or a state that is not finite counts as 1). The lowest score wins (ties: the
earlier candidate of the grid: the smaller ridge, library or rank). When no candidate scores below 1 the
row has no model: its states are NaN and the failure rule fails the row alone (``fit_failure``), as a SINDy
row without skill. A grid of one candidate (one ridge, one rank, one library given) needs no validation.

**Skill.** The identity map (every predicted state the window's newest) is scored on the same validation
windows (``identity_score``); a row whose chosen score is not below ``SKILL_FRACTION`` times the identity map's, or
that has no model, has no skill (``skill`` False, ``memory_skill`` in the record): a study reports it as "no skill",
not as a result. The SINDy rows apply the same rule (``vpintegrator.rollout.sindy``).

**The rollout.** One compiled loop (numba) runs every step of a block for the whole batch: a window model
costs one (T·k + F) × k product per step (F the library's terms), delay DMD r² + r·k, with no Python per
step; the fit, with its validation rollouts, is timed apart (``fit_seconds``, process CPU, compilation of the
loops excluded: it runs once before the clock starts).

**The record** (``describe``, the row's attributes in the rollout file): ``context_len``, the chosen
``memory_ridge`` / ``memory_rank`` / ``memory_library``, ``memory_validation_error``,
``memory_n_coefficients``, every candidate's score (``memory_candidates``, JSON), the coefficients
(``memory_coefficients``, JSON, when at most ``MAX_RECORDED`` numbers), ``fit_seconds`` and ``fit_source``; delay
DMD's eigenvalues (``memory_dmd_eigenvalues``, always), its exact DMD modes (``memory_dmd_modes``, when at most
``MAX_RECORDED`` numbers) and ``memory_dmd_centred`` (``CENTRED``: the fit subtracts the training means, PyDMD's
does not).

**The boundary**: trajectories that are not (n, K, k) finite numbers, a window with no successor in them
(K ≤ T: one line naming ``context_len``), fewer training windows than coefficients, a feature matrix larger
than the memory, a ridge that is not a finite number ≥ 0, a rank outside 1 … T·k, an unknown or oversized
library: each a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming the argument.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import VPIntegratorError, finite_float
from .fitted import SKILL_FRACTION, FittedModel, RowData, nan_none, none_nan, skill_of  # noqa: F401

__all__ = ["RIDGES", "NARX_LIBRARIES", "VAL_STEPS", "MAX_VAL_TRAJ", "MAX_RANKS", "MAX_FEATURES", "MAX_FIT_WINDOWS",
           "MAX_RECORDED", "CENTRED", "SKILL_FRACTION", "skill_of", "check_trajectories", "window_pairs",
           "delay_vectors", "newest_powers", "window_score", "MemoryFit", "WindowRegressionStep", "ARXStep",
           "NARXStep", "DelayDMDStep"]

#: the ridge grid (relative: λ·N on the standardised coefficients)
RIDGES = (0.0, 1e-10, 1e-8, 1e-6, 1e-4)
#: the NARX libraries of the newest state (monomials of degree 2 … D)
NARX_LIBRARIES = ("poly2", "poly3")
#: steps of each validation rollout (at most), and validation trajectories (at most)
VAL_STEPS = 100
MAX_VAL_TRAJ = 32
#: at most this many ranks of delay DMD are validated
MAX_RANKS = 24
#: a library of more terms than this is left out / refused
MAX_FEATURES = 1000
#: at most this many training windows enter a fit (the first trajectories' windows)
MAX_FIT_WINDOWS = 200_000
#: the coefficients (and delay DMD's modes) are recorded (JSON) when there are at most this many numbers
MAX_RECORDED = 2000
#: delay DMD's record of its centring (``memory_dmd_centred``)
CENTRED = ("centred: the delay vectors minus their training means, h' = mu_Y + A_r (h - mu_X) (an affine map; "
           "PyDMD's DMD fits the vectors as they are, a linear map h' = A h)")


# --------------------------------------------------------------------------- the compiled loops

def _njit(fn):
    from .._jitcache import njit

    return njit(fn, nogil=True)


def _window_run_py(buf, T, c, W, powers, P):  # pragma: no cover - compiled below
    """Fill ``buf[:, T:]`` (n, T + m, k): each state c + Wᵀ(window, oldest first) + Pᵀ(monomials of the newest)."""
    n, total, k = buf.shape
    n_mono = powers.shape[0]
    acc = np.empty(k)
    for i in range(n):
        for j in range(total - T):
            for a in range(k):
                acc[a] = c[a]
            for s in range(T):
                for b in range(k):
                    x = buf[i, j + s, b]
                    row = s * k + b
                    for a in range(k):
                        acc[a] += x * W[row, a]
            for mono in range(n_mono):
                v = 1.0
                for b in range(k):
                    x = buf[i, j + T - 1, b]
                    for _ in range(powers[mono, b]):
                        v *= x
                for a in range(k):
                    acc[a] += v * P[mono, a]
            for a in range(k):
                buf[i, j + T, a] = acc[a]


def _reduced_run_py(s, e, At, f, G, out):  # pragma: no cover - compiled below
    """Advance the reduced states s (n, r) in place m = out.shape[1] times: out[:, j] = f + G s, s ← e + Ã s."""
    n, r = s.shape
    m, k = out.shape[1], out.shape[2]
    tmp = np.empty(r)
    for i in range(n):
        for j in range(m):
            for a in range(k):
                v = f[a]
                for b in range(r):
                    v += G[a, b] * s[i, b]
                out[i, j, a] = v
            for a in range(r):
                v = e[a]
                for b in range(r):
                    v += At[a, b] * s[i, b]
                tmp[a] = v
            for a in range(r):
                s[i, a] = tmp[a]


_KERNELS: dict[str, Any] = {}


def _kernels() -> tuple[Any, Any]:
    """The two compiled loops, compiled (and run once on tiny input) on first use."""
    if not _KERNELS:
        runner = "numba"
        try:
            window, reduced = _njit(_window_run_py), _njit(_reduced_run_py)
            window(np.zeros((1, 2, 1)), 1, np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1), dtype=np.int64),
                   np.zeros((1, 1)))
            reduced(np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1, 1)))
        except ImportError:  # pragma: no cover - numba missing: the same loops in Python
            window, reduced, runner = _window_run_py, _reduced_run_py, "python"
        _KERNELS.update(window=window, reduced=reduced, runner=runner)
    return _KERNELS["window"], _KERNELS["reduced"]


# --------------------------------------------------------------------------- data


def check_trajectories(value: Any, what: str, context_len: int, dim: int | None = None, label: str = "memory row"
                       ) -> np.ndarray:
    """``value`` as float64 trajectories (n, K, k) of finite numbers with K > ``context_len`` (a window and its
    successor); else one line naming ``data`` or ``context_len``."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise VPIntegratorError(f"{label}: {what} are not an array of numbers ({' '.join(str(err).split())[:120]})",
                                key="data") from None
    if a.ndim != 3 or a.shape[0] == 0 or a.shape[2] == 0 or (dim is not None and a.shape[2] != dim):
        want = "(n, K, k)" if dim is None else f"(n, K, {dim})"
        raise VPIntegratorError(f"{label}: {what} must be trajectories {want} with n >= 1; got shape {a.shape}",
                                key="data")
    if a.shape[1] <= context_len:
        raise VPIntegratorError(f"{label}: context_len = {context_len} is a window as long as or longer than the {what} "
                                f"({a.shape[1]} states: a window and the state after it need context_len + 1); give "
                                f"context_len <= {a.shape[1] - 1} or longer trajectories", key="context_len")
    if not np.isfinite(a).all():
        at = [int(i) for i in np.argwhere(~np.isfinite(a))[0]]
        raise VPIntegratorError(f"{label}: {what} hold NaN/Inf at {at}; the fit needs finite data (drop or repair "
                                "those trajectories)", key="data")
    return a


def window_pairs(y: np.ndarray, T: int, max_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every window of T consecutive states with its successor in trajectories y (n, K, k): the windows
    flattened oldest first (N, T·k) and the next states (N, k), trajectory by trajectory; at most
    ``max_windows`` (the first trajectories')."""
    n, K, k = y.shape
    per = K - T
    keep = n if max_windows is None else max(1, min(n, int(max_windows) // per))
    win = np.lib.stride_tricks.sliding_window_view(y[:keep, :K - 1], T, axis=1)  # (n, per, k, T)
    X = np.ascontiguousarray(np.swapaxes(win, 2, 3)).reshape(keep * per, T * k)
    return X, np.ascontiguousarray(y[:keep, T:]).reshape(keep * per, k)


def delay_vectors(y: np.ndarray, T: int) -> np.ndarray:
    """The delay vectors (x_n, …, x_{n+T−1}) of trajectories y (n, K, k): (n, K − T + 1, T·k), oldest first."""
    y = np.asarray(y, dtype=np.float64)
    return np.concatenate([y[:, j:y.shape[1] - T + 1 + j] for j in range(T)], axis=-1)


def newest_powers(name: str, k: int) -> np.ndarray:
    """The exponents (n_terms, k) of a NARX library ``polyD``: every monomial of the k components of degree
    2 … D (graded, lexicographic within a degree); refused in one line (key ``libraries``) when unknown or of
    more than ``MAX_FEATURES`` terms (counted before it is built)."""
    import itertools

    text = str(name)
    degree = int(text[4:]) if text.startswith("poly") and text[4:].isdigit() else -1
    if degree < 2:
        raise VPIntegratorError(f"narx: library {name!r} is not polyD with D >= 2 (the monomials of the newest state "
                                "of degree 2 ... D); give e.g. poly3", key="libraries")
    count = sum(math.comb(k + d - 1, d) for d in range(2, degree + 1))
    if count > MAX_FEATURES:
        raise VPIntegratorError(f"narx: library {name} on {k} components has {count:,} terms, more than MAX_FEATURES = "
                                f"{MAX_FEATURES}; give a lower degree", key="libraries")
    rows = []
    for d in range(2, degree + 1):
        for combo in itertools.combinations_with_replacement(range(k), d):
            rows.append(np.bincount(np.array(combo), minlength=k))
    return np.array(rows, dtype=np.int64).reshape(-1, k)


def _monomials(x: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """Every monomial of ``powers`` (F, k) at states x (N, k): (N, F)."""
    if powers.shape[0] == 0:
        return np.zeros((x.shape[0], 0))
    return np.prod(x[:, None, :] ** powers[None], axis=-1)


def window_score(pred: np.ndarray, truth: np.ndarray) -> float:
    """The validation score of rollouts ``pred`` against ``truth`` (n, m, k), both past the first window: the
    mean over trajectories of the largest ‖x̂_n − x_n‖ over the steps divided by the trajectory's RMS state
    norm, each capped at 1 (not finite: 1)."""
    with np.errstate(all="ignore"):
        rms = np.sqrt(np.mean(np.sum(truth * truth, axis=-1), axis=1))
        err = np.linalg.norm(pred - truth, axis=-1).max(axis=1) / np.maximum(rms, 1e-300)
    err = np.where(np.isfinite(err), err, 1.0)
    return float(np.mean(np.minimum(err, 1.0)))


def _ridge(value: Any) -> float:
    return finite_float(value, "ridge", nonnegative=True, key="ridges")


def _as_grid(values: Any, default: Sequence[Any], what: str) -> list[Any]:
    if values is None:
        return list(default)
    out = list(values) if isinstance(values, (list, tuple, np.ndarray)) else [values]
    if not out:
        raise VPIntegratorError(f"{what} is empty; give at least one", key=what)
    if len(set(map(str, out))) != len(out):
        raise VPIntegratorError(f"{what}: a value is given twice ({out})", key=what)
    return out


# --------------------------------------------------------------------------- the fits


@dataclass(frozen=True)
class MemoryFit:
    """A fitted candidate: what it is (``ridge``, ``library``, ``rank``), its coefficients and its score.

    ``c`` (k,), ``W`` (T·k, k) on the window oldest first, ``P`` (F, k) on the monomials ``powers`` (F, k) of the
    newest state (window models); ``e, At, f, G`` the reduced affine map (delay DMD: a' = e + Ã a, x = f + G a,
    a₀ = ``Vr`` (h₀ − ``mu``); ``B`` (T·k, r) with A_r = B V_r, its last k rows G). ``score``: NaN before
    validation."""

    ridge: float = math.nan
    library: str = ""
    rank: int = 0
    n_coefficients: int = 0
    score: float = math.nan
    c: np.ndarray | None = None
    W: np.ndarray | None = None
    P: np.ndarray | None = None
    powers: np.ndarray | None = None
    e: np.ndarray | None = None
    At: np.ndarray | None = None
    f: np.ndarray | None = None
    G: np.ndarray | None = None
    Vr: np.ndarray | None = None
    mu: np.ndarray | None = None
    B: np.ndarray | None = None

    def record(self) -> dict[str, Any]:
        """The candidate as the rollout file's ``memory_candidates`` lists it."""
        out: dict[str, Any] = {"n_coefficients": self.n_coefficients,
                               "validation_error": None if not math.isfinite(self.score) else self.score}
        if math.isfinite(self.ridge):
            out["ridge"] = self.ridge
        if self.library:
            out["library"] = self.library
        if self.rank:
            out["rank"] = self.rank
        return out

    @classmethod
    def from_record(cls, rec: dict[str, Any], **arrays: np.ndarray) -> "MemoryFit":
        """The candidate ``record`` wrote, with the fit's ``arrays`` when given (``FittedModel.save``)."""
        return cls(ridge=none_nan(rec.get("ridge")), library=rec.get("library", ""), rank=rec.get("rank", 0),
                   n_coefficients=rec["n_coefficients"], score=none_nan(rec["validation_error"]), **arrays)


def _check_fit_size(n_windows: int, n_features: int, label: str) -> None:
    from ..resources import check_size

    check_size("context_len", n_windows * n_features, 8, f"{label}: the feature matrix of {n_windows} training windows "
               f"x {n_features} features and its SVD", copies=3, way_out="give a shorter context_len or fewer "
               "training trajectories")
    if n_windows < n_features + 1:
        raise VPIntegratorError(f"{label}: {n_windows} training windows for {n_features + 1} coefficients per "
                                "component: the least squares is underdetermined; give more training trajectories or "
                                "a shorter context_len", key="context_len")


#: the MemoryFit fields that are arrays (what ``save`` writes beside the record)
_ARRAYS = ("c", "W", "P", "powers", "e", "At", "f", "G", "Vr", "mu", "B")


class _Regression:
    """Standardised least squares of Y (N, k) on features F (N, p) for any ridge, from one SVD."""

    def __init__(self, F: np.ndarray, Y: np.ndarray) -> None:
        self.mu, sd = F.mean(axis=0), F.std(axis=0)
        self.sd = np.where(sd > 0, sd, 1.0)
        self.ybar = Y.mean(axis=0)
        U, self.s, Vt = np.linalg.svd((F - self.mu) / self.sd, full_matrices=False)
        self.V, self.UtY = Vt.T, U.T @ (Y - self.ybar)
        self.N = F.shape[0]
        self.cut = self.s[0] * np.finfo(float).eps * max(F.shape) if self.s.size else 0.0

    def solve(self, ridge: float) -> tuple[np.ndarray, np.ndarray]:
        """(c (k,), B (p, k)): Y ≈ c + F B with the ridge λ·N on the standardised coefficients."""
        s = self.s
        with np.errstate(divide="ignore", invalid="ignore"):
            filt = np.where(s > self.cut, s / (s * s + ridge * self.N), 0.0)
        B = (self.V * filt) @ self.UtY / self.sd[:, None]
        return self.ybar - self.mu @ B, B


def _window_rollout(fit: MemoryFit, T: int, window0: np.ndarray, m: int) -> np.ndarray:
    """m states after the windows (n, T, k) by a window model."""
    window_run, _ = _kernels()
    n, _, k = window0.shape
    buf = np.empty((n, T + m, k))
    buf[:, :T] = window0
    assert fit.c is not None and fit.W is not None and fit.P is not None and fit.powers is not None
    window_run(buf, T, fit.c, fit.W, fit.powers, fit.P)
    return buf[:, T:]


def _reduced_start(fit: MemoryFit, window0: np.ndarray) -> np.ndarray:
    assert fit.Vr is not None and fit.mu is not None
    h = window0.reshape(window0.shape[0], -1)
    return np.ascontiguousarray((h - fit.mu) @ fit.Vr.T)


def _reduced_rollout(fit: MemoryFit, state: np.ndarray, m: int, k: int) -> np.ndarray:
    """m states from the reduced states ``state`` (n, r), advanced in place."""
    _, reduced_run = _kernels()
    out = np.empty((state.shape[0], m, k))
    reduced_run(state, fit.e, fit.At, fit.f, fit.G, out)
    return out


# --------------------------------------------------------------------------- the step maps


class WindowRegressionStep(FittedModel):
    """The common part of ``arx``, ``narx`` and ``delay_dmd`` (module docstring): the data, the fit by
    validation once (``fit_now``, timed: ``fit_seconds``), the compiled rollout from the first window; a fitted
    model (``vpintegrator.models.fitted``: ``save``, ``load_fitted``).

    Parameters
    ----------
    train : ndarray, shape (n_train, K, k), or a callable returning it
        Training trajectories at the rollout's step (a callable: read when the row starts).
    val : ndarray, shape (n_val, K', k), a callable returning it, or None
        Validation trajectories (held out of the fit); None: the last tenth of ``train`` (at least 2
        trajectories needed) when the grid has more than one candidate.
    context_len : int
        T, the window (the first T states of a rollout are given).
    dim : int, optional
        k; needed with a callable ``train``.
    source : str
        Where the training trajectories come from (recorded as ``fit_source``).
    **grid
        The row's candidate grid (``ridges``, ``libraries``, ``ranks``: each row's own), checked here.
    """

    reach = 1
    max_fit_states = 2 * MAX_FIT_WINDOWS  # MAX_FIT_WINDOWS windows where K >= 2 T
    max_val_traj = MAX_VAL_TRAJ

    @classmethod
    def val_steps(cls, context_len: int) -> int | None:
        return int(context_len) + VAL_STEPS

    @classmethod
    def for_row(cls, data: RowData) -> "WindowRegressionStep":
        return cls(data.train, data.val, context_len=data.context_len, dim=data.dim, source=data.source)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        fit = self.fit
        config = {"context_len": self.seq_len, "dim": self.dim, "source": self.source,
                  "fit_seconds": nan_none(self.fit_seconds), "identity_score": nan_none(self.identity_score),
                  "candidates": [f.record() for f in self.candidates], "fit": None if fit is None else fit.record()}
        return config, {} if fit is None else {k: v for k in _ARRAYS if (v := getattr(fit, k)) is not None}

    @classmethod
    def _restore(cls, settings: dict[str, Any], arrays: dict[str, np.ndarray]) -> "WindowRegressionStep":
        model = cls(None, None, context_len=int(settings["context_len"]), dim=int(settings["dim"]),
                    source=str(settings["source"]))
        model.candidates = [MemoryFit.from_record(c) for c in settings["candidates"]]
        model.fit = None if settings["fit"] is None else MemoryFit.from_record(settings["fit"], **arrays)
        model.fit_seconds, model.identity_score = none_nan(settings["fit_seconds"]), none_nan(settings["identity_score"])
        model._fitted = True
        return model

    def __init__(self, train: np.ndarray | Callable[[], np.ndarray] | None,
                 val: np.ndarray | Callable[[], np.ndarray] | None = None, context_len: int = 3,
                 dim: int | None = None, source: str = "", **grid: Any) -> None:
        if isinstance(context_len, bool) or not isinstance(context_len, (int, np.integer)) or context_len < 1:
            raise VPIntegratorError(f"{self.row}: context_len must be an int >= 1; got {context_len!r}",
                                    key="context_len")
        T = int(context_len)
        if dim is None:
            if callable(train):
                raise VPIntegratorError(f"{type(self).__name__}: give dim with a callable train")
            dim = int(check_trajectories(train, "training trajectories", T, label=self.row).shape[2])
        for what, given in (("training trajectories", train), ("validation trajectories", val)):
            if given is not None and not callable(given):
                check_trajectories(given, what, T, int(dim), label=self.row)
        self._train, self._val = train, val
        self.dim: int = int(dim)
        self.seq_len: int = T
        self.pred_window: int = 1
        self.name: str = self.row
        self.source = source
        self.fit: MemoryFit | None = None  # type: ignore[assignment]  # the instance's fit; the class's is fit_on
        self.candidates: list[MemoryFit] = []
        self.fit_seconds = math.nan
        #: the identity map's score on the validation windows (NaN: no validation)
        self.identity_score = math.nan
        self._fitted = False
        self._set_grid(**grid)  # the row's candidates (ridges, libraries, ranks), checked now

    # -- what each row defines (and ``_set_grid``, its options' candidates)
    def _candidates(self, train: np.ndarray) -> list[MemoryFit]:
        raise NotImplementedError

    def _predict(self, fit: MemoryFit, window0: np.ndarray, m: int) -> np.ndarray:
        raise NotImplementedError

    def _grid_size(self) -> int:
        raise NotImplementedError

    def _set_grid(self, *args: Any, **grid: Any) -> None:
        raise NotImplementedError

    # -- the fit
    def _arrays(self) -> tuple[np.ndarray, np.ndarray | None]:
        T = self.seq_len
        train = self._train() if callable(self._train) else self._train
        train = check_trajectories(train, "training trajectories", T, self.dim, self.row)
        val = self._val() if callable(self._val) else self._val
        if val is not None:
            return train, check_trajectories(val, "validation trajectories", T, self.dim, self.row)
        if self._grid_size() == 1:
            return train, None
        if train.shape[0] < 2:
            raise VPIntegratorError(f"{self.row}: one training trajectory and no validation trajectory to choose "
                                    "among the candidates; give val, more trajectories, or a single candidate",
                                    key="data")
        n_val = max(1, train.shape[0] // 10)
        return train[:-n_val], train[-n_val:]

    def fit_now(self) -> MemoryFit | None:
        """Fit every candidate and choose by validation (once); the chosen fit or None (no skill)."""
        from ..clock import process_cpu

        if self._fitted:
            return self.fit
        _kernels()  # compiled before the clock starts
        tic = process_cpu()
        train, val = self._arrays()
        fits = self._candidates(train)
        if val is None:
            self.fit, self.candidates = fits[0], fits
        else:
            T = self.seq_len
            val = val[:MAX_VAL_TRAJ, :T + VAL_STEPS]
            scored = []
            for fit in fits:
                with np.errstate(all="ignore"):
                    pred = self._predict(fit, np.ascontiguousarray(val[:, :T]), val.shape[1] - T)
                scored.append(replace(fit, score=window_score(pred, val[:, T:])))
            self.candidates = scored
            self.identity_score = window_score(np.repeat(val[:, T - 1:T], val.shape[1] - T, axis=1), val[:, T:])
            usable = [f for f in scored if f.score < 1.0]
            self.fit = min(usable, key=lambda f: f.score) if usable else None
        self.fit_seconds = process_cpu() - tic
        self._fitted = True
        return self.fit

    # -- the step map
    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self.fit_now()
        self._window0 = np.array(window0, dtype=np.float64)
        self._begin()

    def _begin(self) -> None:
        self._win = self._window0.copy()

    def generate(self, n: int) -> np.ndarray:
        if self.fit is None:
            return np.full((self._window0.shape[0], n, self.dim), np.nan)
        out = self._predict(self.fit, self._win, n)
        self._win = np.ascontiguousarray(np.concatenate([self._win, out], axis=1)[:, -self.seq_len:])
        return out

    def reset(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self._win[rows] = self._window0[rows]

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """log|det| of the window map (T·k numbers to the next T·k): |det A_{T−1}| (the oldest state's block)
        for T > 1; at T = 1 the step's own Jacobian."""
        windows = np.asarray(windows, dtype=np.float64)
        fit = self.fit
        if fit is None or fit.W is None:
            return np.full(windows.shape[0], np.nan)
        k = self.dim
        if self.seq_len > 1:
            sign, logdet = np.linalg.slogdet(fit.W[:k].T)
            return np.full(windows.shape[0], logdet if sign != 0 else -np.inf)
        x = windows[:, -1]
        J = np.broadcast_to(fit.W.T, (x.shape[0], k, k)).copy()
        if fit.powers is not None and fit.P is not None and fit.powers.shape[0]:
            for b in range(k):  # ∂/∂x_b of every monomial
                p = fit.powers.copy()
                has = p[:, b] > 0
                coef = np.where(has, p[:, b], 0)
                p[:, b] = np.maximum(p[:, b] - 1, 0)
                J[:, :, b] += (_monomials(x, p) * coef) @ fit.P
        sign, logdet = np.linalg.slogdet(J)
        return np.where(sign != 0, logdet, -np.inf)

    @property
    def failure_reason(self) -> str | None:
        """Why the row has no model (None when it has one or has not been fitted)."""
        if not self._fitted or self.fit is not None:
            return None
        return (f"no {self.row} candidate has skill on the validation trajectories ({len(self.candidates)} tried, "
                "every one with validation error >= 1 or blowing up)")

    def _coefficients(self, fit: MemoryFit) -> list | None:
        if fit.W is None or fit.c is None:
            return None
        parts = {"c": fit.c.tolist(), "A": fit.W.tolist()}
        if fit.P is not None and fit.P.size:
            parts["P"] = fit.P.tolist()
        return [parts]

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {**super().describe(), "context_len": self.seq_len,
                                "runner": _KERNELS.get("runner", "numba")}
        if self.source:
            info["fit_source"] = self.source
        if self._fitted:
            info["fit_seconds"] = float(self.fit_seconds)
            info["fit_clock"] = "process_cpu"
            info["memory_candidates"] = json.dumps([f.record() for f in self.candidates])
            info["memory_selection"] = (f"validation rollout from the first {self.seq_len} states of each validation "
                                        f"trajectory (<= {MAX_VAL_TRAJ}) for <= {VAL_STEPS} steps: mean of the largest "
                                        "error over the steps / the trajectory's RMS norm, capped at 1; the lowest wins")
            if self.skill is not None:
                info.update(memory_identity_validation_error=float(self.identity_score), memory_skill=self.skill)
        fit = self.fit
        if fit is not None:
            info.update(memory_n_coefficients=int(fit.n_coefficients),
                        memory_validation_error=float(fit.score))
            if math.isfinite(fit.ridge):
                info["memory_ridge"] = float(fit.ridge)
            if fit.library:
                info["memory_library"] = fit.library
            if fit.rank:
                info["memory_rank"] = int(fit.rank)
            coefs = self._coefficients(fit)
            if coefs is not None and fit.n_coefficients <= MAX_RECORDED:
                info["memory_coefficients"] = json.dumps(coefs[0])
        elif self.failure_reason:
            info["fit_failure"] = self.failure_reason
        return info


class NARXStep(WindowRegressionStep):
    """``narx``: x_{n+1} = c + Σ_j A_j x_{n−j} + Pᵀ m(x_n), m the monomials of a library of the newest state
    (module docstring). ``libraries``: names ``polyD`` (default ``NARX_LIBRARIES``; ``[]`` is refused);
    ``ridges``: numbers >= 0 (default ``RIDGES``). The other parameters are
    ``WindowRegressionStep``'s."""

    row = "narx"
    summary = ("the arx window plus polynomial terms (degree 2 ... D) of the newest state; library and ridge by "
               "validation rollout")

    def _set_grid(self, libraries: Sequence[str] | str | None = None,
                  ridges: Sequence[float] | float | None = None) -> None:
        self._libraries = self._library_grid(libraries)
        self._ridges = [_ridge(r) for r in _as_grid(ridges, RIDGES, "ridges")]

    def _library_grid(self, libraries: Any) -> list[tuple[str, np.ndarray]]:
        if libraries is None:
            out = []
            for name in NARX_LIBRARIES:
                try:
                    out.append((name, newest_powers(name, self.dim)))
                except VPIntegratorError:  # too large for this state: left out of the default grid
                    pass
            return out or [("poly2", newest_powers("poly2", self.dim))]
        return [(str(n), newest_powers(str(n), self.dim)) for n in _as_grid(libraries, (), "libraries")]

    def _grid_size(self) -> int:
        return len(self._libraries) * len(self._ridges)

    def _candidates(self, train: np.ndarray) -> list[MemoryFit]:
        T, k = self.seq_len, self.dim
        fits = []
        for name, powers in self._libraries:
            n_win = train.shape[0] * (train.shape[1] - T)
            _check_fit_size(min(n_win, MAX_FIT_WINDOWS), T * k + powers.shape[0], self.row)
            X, Y = window_pairs(train, T, MAX_FIT_WINDOWS)
            F = np.concatenate([X, _monomials(X[:, -k:], powers)], axis=1) if powers.shape[0] else X
            reg = _Regression(F, Y)
            for ridge in self._ridges:
                c, B = reg.solve(ridge)
                fits.append(MemoryFit(ridge=ridge, library=name, n_coefficients=int(c.size + B.size), c=c,
                                      W=np.ascontiguousarray(B[:T * k]), P=np.ascontiguousarray(B[T * k:]),
                                      powers=powers))
        return fits

    def _predict(self, fit, window0, m):
        return _window_rollout(fit, self.seq_len, window0, m)


class ARXStep(NARXStep):
    """``arx``: x_{n+1} = c + Σ_{j<T} A_j x_{n−j}, the ridge by validation (module docstring). ``ridges``:
    numbers >= 0 (default ``RIDGES``; one number: no validation). The other parameters are
    ``WindowRegressionStep``'s."""

    row = "arx"
    summary = ("linear memory: the next state a linear function of the last context_len states (least squares on "
               "the training windows, ridge by validation rollout)")

    def _set_grid(self, ridges: Sequence[float] | float | None = None) -> None:  # type: ignore[override]
        super()._set_grid(None, ridges)

    def _library_grid(self, libraries: Any) -> list[tuple[str, np.ndarray]]:
        return [("", np.zeros((0, self.dim), dtype=np.int64))]


class DelayDMDStep(WindowRegressionStep):
    """``delay_dmd``: the exact DMD of the delay vectors of T states, truncated to a rank chosen by
    validation (module docstring). ``ranks``: ints in 1 … T·k (default: up to ``MAX_RANKS`` of them, the full
    rank among them; one int: no validation). The other parameters are
    ``WindowRegressionStep``'s."""

    row = "delay_dmd"
    summary = ("Hankel / delay DMD: exact DMD of the delay vectors of context_len states, truncated to the rank "
               "chosen by validation rollout")

    def _set_grid(self, ranks: Sequence[int] | int | None = None) -> None:
        p = self.seq_len * self.dim
        if ranks is None:
            grid = (list(range(1, p + 1)) if p <= MAX_RANKS else
                    sorted(set(np.round(np.geomspace(1, p, MAX_RANKS)).astype(int).tolist()) | {p}))
        else:
            grid = _as_grid(ranks, (), "ranks")
            for r in grid:
                if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 1 <= r <= p:
                    raise VPIntegratorError(f"delay_dmd: rank {r!r} is not an int in 1 ... T*k = {p} (context_len "
                                            f"{self.seq_len} x {self.dim} components)", key="ranks")
        self._ranks = [int(r) for r in grid]

    def _grid_size(self) -> int:
        return len(self._ranks)

    def _candidates(self, train: np.ndarray) -> list[MemoryFit]:
        T, k = self.seq_len, self.dim
        p = T * k
        n_win = train.shape[0] * (train.shape[1] - T)
        _check_fit_size(min(n_win, MAX_FIT_WINDOWS), p, self.row)
        X, nxt = window_pairs(train, T, MAX_FIT_WINDOWS)
        Y = np.concatenate([X[:, k:], nxt], axis=1)  # the successors' delay vectors
        mx, my = X.mean(axis=0), Y.mean(axis=0)
        U, s, Vt = np.linalg.svd(X - mx, full_matrices=False)
        cut = s[0] * np.finfo(float).eps * max(X.shape) if s.size else 0.0
        Yc = Y - my
        fits = []
        for r in self._ranks:
            r_eff = min(int(r), int(np.count_nonzero(s > cut)))
            if r_eff < 1:
                continue
            B = (Yc.T @ U[:, :r_eff]) / s[:r_eff]  # (p, r): A_r = B V_rᵀ
            Vr = np.ascontiguousarray(Vt[:r_eff])  # a = V_r (h − μ_X): h' = μ_Y + B a, a' = V_r (μ_Y − μ_X) + V_r B a
            # the numbers the rollout uses: Ã (r²), e (r), G (k·r), f (k), the projection V_r (r·p) and μ_X (p)
            n_coef = r_eff * r_eff + r_eff + k * r_eff + k + r_eff * p + p
            fits.append(MemoryFit(rank=r, n_coefficients=int(n_coef), e=np.ascontiguousarray(Vr @ (my - mx)),
                                  At=np.ascontiguousarray(Vr @ B), f=np.ascontiguousarray(my[-k:]),
                                  G=np.ascontiguousarray(B[-k:]), Vr=Vr, mu=mx, B=B))
        return fits

    def _predict(self, fit, window0, m):
        state = _reduced_start(fit, window0)
        return _reduced_rollout(fit, state, m, self.dim)

    def _begin(self) -> None:
        self._z0 = None if self.fit is None else _reduced_start(self.fit, self._window0)
        self._z = None if self._z0 is None else self._z0.copy()

    def generate(self, n: int) -> np.ndarray:
        if self.fit is None or self._z is None:
            return np.full((self._window0.shape[0], n, self.dim), np.nan)
        return _reduced_rollout(self.fit, self._z, n, self.dim)

    def reset(self, rows: np.ndarray) -> None:
        if self._z is not None and self._z0 is not None:
            rows = np.asarray(rows, dtype=np.int64)
            self._z[rows] = self._z0[rows]

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """log|det| of the DMD map on its delay vectors, det A_r (−inf below full rank)."""
        n = np.asarray(windows).shape[0]
        fit = self.fit
        if fit is None or fit.At is None:
            return np.full(n, np.nan)
        if fit.At.shape[0] < self.seq_len * self.dim:
            return np.full(n, -np.inf)
        sign, logdet = np.linalg.slogdet(fit.At)  # similar to A_r at full rank (V_r orthogonal)
        return np.full(n, logdet if sign != 0 else -np.inf)

    def _coefficients(self, fit):
        if fit.G is None or fit.Vr is None or fit.f is None or fit.e is None or fit.At is None or fit.mu is None:
            return None
        return [{"mu": fit.mu.tolist(), "V_r": fit.Vr.tolist(), "A_tilde": fit.At.tolist(), "e": fit.e.tolist(),
                 "f": fit.f.tolist(), "G": fit.G.tolist()}]

    def spectrum(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The chosen fit's DMD eigenvalues λ (r,) and exact DMD modes Φ (T·k, r), complex: Ã w = λ w on the
        reduced map and Φ = B w (B = Y_cᵀ U_r Σ_r⁻¹, so A_r Φ = Φ Λ), each mode of unit norm, their rows the
        delay vector's components oldest state first; sorted by |λ|, largest first. None without a fit."""
        fit = self.fit_now()
        if fit is None or fit.At is None or fit.Vr is None or fit.B is None:
            return None
        lam, w = np.linalg.eig(fit.At)
        modes = fit.B @ w
        zero = np.linalg.norm(modes, axis=0) <= np.finfo(float).eps * max(1.0, float(np.abs(fit.At).max()))
        modes[:, zero] = (fit.Vr.T @ w)[:, zero]  # λ = 0: the exact mode vanishes; its projected mode V_rᵀ w
        modes /= np.linalg.norm(modes, axis=0)
        order = np.argsort(-np.abs(lam), kind="stable")
        return lam[order], modes[:, order]

    def describe(self) -> dict[str, Any]:
        """The window row's record plus the spectrum (``spectrum``): ``memory_dmd_eigenvalues`` always (JSON,
        ``[re, im]`` each), ``memory_dmd_modes`` (JSON ``{"re", "im"}``, (T·k, r)) when at most ``MAX_RECORDED``
        numbers, and ``memory_dmd_centred``: the line saying the fit is centred."""
        info = super().describe()
        spec = self.spectrum() if self.fit is not None else None
        if spec is not None:
            lam, modes = spec
            info["memory_dmd_eigenvalues"] = json.dumps([[float(v.real), float(v.imag)] for v in lam])
            if 2 * modes.size <= MAX_RECORDED:
                info["memory_dmd_modes"] = json.dumps({"re": modes.real.tolist(), "im": modes.imag.tolist()})
            info["memory_dmd_centred"] = CENTRED
        return info

