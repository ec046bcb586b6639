"""Sparse regression (SINDy) as a rollout row: ``sindy+METHOD`` fits ż = Θ(z) Ξ on the data file's training
trajectories, then integrates the fitted field by the classical method METHOD at the data's step.

The regression is pysindy's sequentially thresholded least squares (``pysindy.optimizers.STLSQ``) on a
feature matrix Θ written here: a ridge term ``RIDGE`` inside the iterations (it resolves libraries that are
linearly dependent on the data, e.g. z₀² + z₁² + z₂² = 1 on a sphere, towards the sparse solution), then an
unregularised least-squares refit on the kept terms (pysindy's ``unbias``). Θ is written here so that the
fitted field has an exact, analytic Jacobian for the implicit methods (no finite differences anywhere) and
needs no pysindy once fitted. pysindy is an optional extra: ``pip install "vpintegrator[sindy]"``.

**Data.** Training trajectories (n, T, dim) sampled at h; the derivatives ż are central differences of
order 8 on each trajectory (``pysindy.FiniteDifference(order=8)``, the 4 states at each end dropped; a
shorter trajectory takes the highest even order its length allows), error ~1e-3 h⁸ ‖z⁽⁹⁾‖: clean data at
h ≤ 0.2 gives ż to ~1e-8, noisy data is not smoothed (this baseline is for clean files).

**Libraries** (``LIBRARIES``; every one has the constant 1): ``poly1`` … ``poly4`` (all monomials of the
state components up to that degree), ``trig`` (sin z_j, cos z_j), ``exp`` (exp z_j) and the union
``poly3+trig+exp``; one with more than ``MAX_FEATURES`` features (high degrees of a large state) is left out.
At most ``MAX_FIT_STATES`` training states (the first trajectories) enter the fit. **Thresholds** ``THRESHOLDS`` (STLSQ's: a coefficient below it in magnitude is set to 0
and the rest refitted, to convergence).

**Selection by validation rollout.** Every (library, threshold) is fitted on the training trajectories and
rolled out by METHOD at h from the first state of each validation trajectory (held out of the fit) for
``VAL_STEPS`` steps (or the trajectory's length); its score is the mean over validation trajectories of the
largest relative error ‖ẑ_k − z_k‖ / ‖z_k‖ over those steps, each capped at 1 (a blow-up, a failed Newton
solve or a state that is not finite counts as 1). The lowest score wins; among candidates within
``PARSIMONY`` × the lowest score the one with the fewest nonzero terms (then the lower score). A candidate
with every coefficient 0 is skipped. When no candidate scores below 1 (no skill on any validation
trajectory) the row has no model: [`SindyStep`][vpintegrator.rollout.sindy.SindyStep] then produces NaN, so
the rollout's failure rule fails that row alone (its ``fit_failure`` attribute and the failure line say
why) and the rest of the run goes on.

The chosen equations are written in readable form (``x0' = 0.500000 x1 x2 - ...``, the state components
named ``x0 .. x<dim-1>``) with the library, the threshold, the validation score and every candidate's score,
into the rollout file's attributes of the row (``describe``).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..errors import VPIntegratorError
from ..systems.base import System
from .engine import StepMap

__all__ = ["LIBRARIES", "THRESHOLDS", "VAL_STEPS", "PARSIMONY", "INSTALL", "MAX_FIT_STATES", "MAX_VAL_TRAJ",
           "MAX_FEATURES", "require_pysindy", "Library", "library", "SindyField", "SindyFit", "derivatives",
           "fit_sindy", "select_sindy", "SindyStep"]

#: the feature libraries of the validation grid
LIBRARIES = ("poly1", "poly2", "poly3", "poly4", "trig", "exp", "poly3+trig+exp")
#: the STLSQ thresholds of the validation grid
THRESHOLDS = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
#: steps of each validation rollout (at most; fewer when the trajectories are shorter)
VAL_STEPS = 100
#: candidates within this factor of the best validation score compete on the number of terms
PARSIMONY = 2.0
#: what a user without pysindy is told
INSTALL = 'pip install "vpintegrator[sindy]"'
#: at most this many training states enter the fit (the first trajectories of the split), and this many
#: validation trajectories the selection
MAX_FIT_STATES = 200_000
MAX_VAL_TRAJ = 32
#: a library with more features than this (high degree on many state components) is left out of the grid
MAX_FEATURES = 1000
#: the ridge term of STLSQ's iterations (the kept terms are refitted without it)
RIDGE = 1e-8
#: the finite-difference order of the derivatives
FD_ORDER = 8


def require_pysindy(what: str = "sindy rows") -> Any:
    """pysindy, or a one-line error saying how to install it (key ``integrators``)."""
    try:
        import pysindy
    except ImportError:
        raise VPIntegratorError(f"{what} uses pysindy, an optional extra: {INSTALL}", key="integrators") from None
    return pysindy


# --------------------------------------------------------------------------- the feature libraries


@dataclass(frozen=True)
class Library:
    """A feature library Θ(z): monomials (exponent rows), then sin z_j, cos z_j, exp z_j for the listed j.

    Attributes
    ----------
    name : str
    dim : int
    powers : ndarray, shape (n_mono, dim)
        Exponents of the monomials (the constant first when present).
    sin, cos, exp : tuple of int
        The components of the trigonometric and exponential features.
    """

    name: str
    dim: int
    powers: np.ndarray
    sin: tuple[int, ...] = ()
    cos: tuple[int, ...] = ()
    exp: tuple[int, ...] = ()

    @property
    def n_features(self) -> int:
        return int(self.powers.shape[0]) + len(self.sin) + len(self.cos) + len(self.exp)

    def names(self) -> list[str]:
        """The features' names: ``1``, ``x0``, ``x0^2 x1``, ``sin(x2)``, ``exp(x0)``."""
        out = []
        for row in self.powers:
            parts = [f"x{j}" + (f"^{int(p)}" if p > 1 else "") for j, p in enumerate(row) if p > 0]
            out.append(" ".join(parts) or "1")
        out += [f"sin(x{j})" for j in self.sin] + [f"cos(x{j})" for j in self.cos] + [f"exp(x{j})" for j in self.exp]
        return out

    def select(self, keep: np.ndarray) -> "Library":
        """The library of the features ``keep`` (bool, n_features) only (in the same order)."""
        n_mono = self.powers.shape[0]
        keep = np.asarray(keep, dtype=bool)
        k_mono, rest = keep[:n_mono], keep[n_mono:]
        a, b = len(self.sin), len(self.cos)
        pick = lambda comps, mask: tuple(c for c, m in zip(comps, mask) if m)  # noqa: E731
        return Library(self.name, self.dim, self.powers[k_mono], pick(self.sin, rest[:a]), pick(self.cos, rest[a:a + b]),
                       pick(self.exp, rest[a + b:]))

    def transform(self, z: np.ndarray) -> np.ndarray:
        """Θ(z); z (n, dim) -> (n, n_features)."""
        z = np.asarray(z, dtype=np.float64)
        cols = [np.prod(z[:, None, :] ** self.powers[None], axis=-1)] if self.powers.shape[0] else []
        if self.sin:
            cols.append(np.sin(z[:, list(self.sin)]))
        if self.cos:
            cols.append(np.cos(z[:, list(self.cos)]))
        if self.exp:
            cols.append(np.exp(z[:, list(self.exp)]))
        return np.concatenate(cols, axis=1) if cols else np.zeros((z.shape[0], 0))

    def gradient(self, z: np.ndarray) -> np.ndarray:
        """∂Θ/∂z; z (n, dim) -> (n, n_features, dim), analytic."""
        z = np.asarray(z, dtype=np.float64)
        n, dim = z.shape
        out = np.zeros((n, self.n_features, dim))
        m = self.powers.shape[0]
        for j in range(dim):
            if m:
                lowered = self.powers.copy()
                lowered[:, j] = np.maximum(lowered[:, j] - 1, 0)
                out[:, :m, j] = self.powers[None, :, j] * np.prod(z[:, None, :] ** lowered[None], axis=-1)
        col = m
        for comps, d in ((self.sin, np.cos), (self.cos, lambda x: -np.sin(x)), (self.exp, np.exp)):
            for c in comps:
                out[:, col, c] = d(z[:, c])
                col += 1
        return out


def _monomials(dim: int, degree: int) -> np.ndarray:
    """Exponent rows of every monomial of degree 0 .. ``degree`` (graded, then lexicographic)."""
    rows = [np.zeros(dim, dtype=np.int64)]
    for d in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(dim), d):
            row = np.zeros(dim, dtype=np.int64)
            for j in combo:
                row[j] += 1
            rows.append(row)
    return np.array(rows, dtype=np.int64)


def library(name: str, dim: int) -> Library:
    """The library ``name`` (``polyD``, ``trig``, ``exp``, or a ``+`` union of them) on states of ``dim``."""
    degree, trig, exp = 0, False, False
    for part in name.split("+"):
        if part.startswith("poly") and part[4:].isdigit() and int(part[4:]) >= 1:
            degree = max(degree, int(part[4:]))
        elif part == "trig":
            trig = True
        elif part == "exp":
            exp = True
        else:
            raise VPIntegratorError(f"SINDy library {name!r}: parts are polyD (D >= 1), trig and exp, joined by '+'",
                                    key="library")
    comps = tuple(range(dim))
    return Library(name, dim, _monomials(dim, degree), comps if trig else (), comps if trig else (),
                   comps if exp else ())


# --------------------------------------------------------------------------- the fitted field


@dataclass(frozen=True, eq=False)
class SindyField(System):
    """ż = Θ(z) Ξ with the fitted coefficients: a [`System`][vpintegrator.systems.System] any classical
    integrator steps (analytic Jacobian; no invariant is known).

    Attributes
    ----------
    library : Library
        The features with a nonzero coefficient only.
    coefficients : ndarray, shape (n_features, dim)
        Ξ.
    """

    name: ClassVar[str] = "sindy"
    library: Library
    coefficients: np.ndarray

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self.library.dim)

    def params(self) -> dict[str, float | list]:
        return {"coefficients": self.coefficients.tolist()}

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        flat = y.reshape(-1, self.dim)  # (n, dim)
        return (self.library.transform(flat) @ self.coefficients).reshape(y.shape)

    def jacobian(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        flat = y.reshape(-1, self.dim)
        J = np.einsum("nfj,fi->nij", self.library.gradient(flat), self.coefficients)  # (n, dim, dim): ∂f_i/∂z_j
        return J.reshape(*y.shape, self.dim)

    def compiled_kernel(self) -> tuple[int, np.ndarray]:
        """``(kid, p)`` of the compiled field (``vpintegrator.compiled.library_field``): the compiled steppers run
        the fitted field at batch 1 as they run a shipped system."""
        from ..compiled.library_field import pack_library_field
        from ..compiled.systems import LIBRARY_FIELD

        lib = self.library
        return LIBRARY_FIELD, pack_library_field(lib.powers, lib.sin, lib.cos, lib.exp, self.coefficients)

    def equations(self, precision: int = 6) -> list[str]:
        """One readable line per component: ``x0' = 0.500000 x1 x2 - 0.250000 x0`` (``0`` when empty)."""
        names = self.library.names()
        lines = []
        for i in range(self.dim):
            terms = [(c, n) for c, n in zip(self.coefficients[:, i], names) if c != 0]
            text = ""
            for k, (c, n) in enumerate(terms):
                mag = f"{abs(c):.{precision}f}" + ("" if n == "1" else f" {n}")
                text += (("-" if c < 0 else "") + mag) if k == 0 else ((" - " if c < 0 else " + ") + mag)
            lines.append(f"x{i}' = {text or '0'}")
        return lines


# --------------------------------------------------------------------------- fitting and selection


def derivatives(y: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """States and their central-difference derivatives (order ``FD_ORDER``, fewer where the trajectories
    are short) of trajectories y (n, T, dim): ``(z, ż)``, each (n · (T − 2m), dim), the m end states of
    each trajectory dropped."""
    ps = require_pysindy()
    n, T, dim = y.shape
    order = min(FD_ORDER, 2 * ((T - 1) // 2))
    if order < 2:
        raise VPIntegratorError(f"SINDy: trajectories of {T} states give no central difference; give at least 3",
                                key="data")
    fd = ps.FiniteDifference(order=order, drop_endpoints=True, axis=0)
    m = order // 2
    z = y[:, m:T - m].reshape(-1, dim)
    zdot = np.concatenate([np.asarray(fd(y[i], float(dt)))[m:T - m] for i in range(n)])
    return z, zdot


@dataclass(frozen=True)
class SindyFit:
    """A fitted candidate: its library and threshold, the field (None: every coefficient 0), its number of
    terms and its validation score (NaN before validation)."""

    library: str
    threshold: float
    field: SindyField | None
    n_terms: int
    score: float = float("nan")


def fit_sindy(z: np.ndarray, zdot: np.ndarray, library_name: str, threshold: float) -> SindyFit:
    """STLSQ (pysindy; ridge ``RIDGE``, then the unregularised refit) of ż on Θ(z) for one library and threshold.

    Parameters
    ----------
    z, zdot : ndarray, shape (n, dim)
    library_name : str
    threshold : float
    """
    ps = require_pysindy()
    import warnings

    lib = library(library_name, z.shape[1])
    theta = lib.transform(z)
    with warnings.catch_warnings():  # an unfittable library warns (ill-conditioned, all-zero): scored below
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            opt = ps.STLSQ(threshold=float(threshold), alpha=RIDGE, max_iter=50).fit(theta, zdot)
    xi = np.asarray(opt.coef_, dtype=np.float64).T  # (n_features, dim)
    keep = np.any(xi != 0, axis=1) & np.all(np.isfinite(xi), axis=1)
    if not keep.any() or not np.all(np.isfinite(xi)):
        return SindyFit(library_name, float(threshold), None, 0)
    field = SindyField(library=lib.select(keep), coefficients=xi[keep])
    return SindyFit(library_name, float(threshold), field, int(np.count_nonzero(xi)))


def _score(field: SindyField, integrator: str, dt: float, val: np.ndarray) -> float:
    """Mean over the validation trajectories (n, K + 1, dim) of the largest relative error of METHOD's rollout
    of ``field`` from their first states, each capped at 1."""
    from ..data.integration import IntegratorMap
    from ..stepping import drive

    n, T, dim = val.shape
    step = IntegratorMap(field, integrator, dt, compiled_max_batch=0)
    w0 = val[:, :1].copy()
    out = np.empty_like(val)

    def deliver(k0, block):
        out[:, k0:k0 + block.shape[1]] = block

    with np.errstate(all="ignore"):
        drive(step, w0, T - 1, deliver, chunk_steps=T, failure="mark", blowup=1e3)
    err = np.linalg.norm(out[:, 1:] - val[:, 1:], axis=-1) / np.maximum(np.linalg.norm(val[:, 1:], axis=-1), 1e-300)
    worst = np.where(np.isfinite(err).all(axis=1), err.max(axis=1, initial=0.0), np.inf)
    return float(np.mean(np.minimum(worst, 1.0)))


def select_sindy(train: np.ndarray, val: np.ndarray, dt: float, integrator: str,
                 libraries: Sequence[str] | None = None, thresholds: Sequence[float] | None = None
                 ) -> tuple[SindyFit | None, list[SindyFit]]:
    """Fit every (library, threshold) on ``train`` and pick by validation rollout on ``val`` (module
    docstring): ``(the chosen fit or None when none has skill, every candidate with its score)``.

    Parameters
    ----------
    train : ndarray, shape (n_train, T, dim)
    val : ndarray, shape (n_val, T', dim)
    dt : float
    integrator : str
        The method the validation rollouts (and the row) use.
    libraries, thresholds : sequence, optional
        The grid (default ``LIBRARIES`` × ``THRESHOLDS``).
    """
    from ..integrators import get_integrator

    get_integrator(integrator)
    z, zdot = derivatives(train, dt)
    val = val[:MAX_VAL_TRAJ, :VAL_STEPS + 1]
    fits = []
    for lib_name in LIBRARIES if libraries is None else libraries:
        if library(lib_name, train.shape[2]).n_features > MAX_FEATURES:
            continue
        for threshold in THRESHOLDS if thresholds is None else thresholds:
            fit = fit_sindy(z, zdot, lib_name, threshold)
            score = 1.0 if fit.field is None else _score(fit.field, integrator, dt, val)
            fits.append(SindyFit(fit.library, fit.threshold, fit.field, fit.n_terms, score))
    usable = [f for f in fits if f.field is not None and f.score < 1.0]
    if not usable:
        return None, fits
    best = min(f.score for f in usable)
    near = [f for f in usable if f.score <= PARSIMONY * best]
    return min(near, key=lambda f: (f.n_terms, f.score)), fits


# --------------------------------------------------------------------------- the step map


class SindyStep(StepMap):
    """``sindy+METHOD``: the SINDy fit chosen by validation (module docstring), integrated by METHOD at ``dt``.

    The fit and the selection run in ``start`` (timed as set-up, ``setup_seconds``, like a model's training
    is not part of its step cost); the steps are those of an
    [`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] on the fitted field: a rollout of at most a
    few trajectories runs the compiled stepper on the fitted field's kernel (``compiled/library_field.py``), as
    the oracle's and the learned fields' rows do, a larger one the NumPy path (``describe()["runner"]``). When
    no candidate has skill every state is NaN (the row fails by the failure rule; ``describe()["fit_failure"]``
    says why).

    Parameters
    ----------
    train : ndarray, shape (n_train, T, dim), or a callable returning it
        The training trajectories (a callable: read when the row starts).
    val : ndarray, shape (n_val, T', dim), or a callable returning it
        The validation trajectories (held out of the fit).
    integrator : str
    dt : float
        The step of the data and of the rollout.
    """

    kind = "fitted"
    #: set by __init__ (declared for type checkers)
    integrator: str
    dt: float
    dim: int
    seq_len: int
    pred_window: int
    name: str
    source: str

    def __init__(self, train: np.ndarray | Callable[[], np.ndarray], val: np.ndarray | Callable[[], np.ndarray],
                 integrator: str, dt: float, dim: int | None = None, source: str = "") -> None:
        from ..errors import finite_float
        from ..integrators import get_integrator

        require_pysindy("sindy+" + str(integrator))
        get_integrator(integrator)
        self._train, self._val = train, val
        self.integrator, self.dt = str(integrator), finite_float(dt, "dt (the step size)", positive=True, key="dt")
        if dim is None:
            if callable(train):
                raise VPIntegratorError("SindyStep: give dim with a callable train")
            dim = int(np.asarray(train).shape[-1])
        self.dim, self.seq_len, self.pred_window = int(dim), 1, 1
        self.name, self.source = f"sindy+{integrator}", source
        self.fit: SindyFit | None = None
        self.candidates: list[SindyFit] = []
        self._inner: StepMap | None = None
        self._fitted = False

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        train = self._train() if callable(self._train) else self._train
        val = self._val() if callable(self._val) else self._val
        train, val = np.asarray(train, dtype=np.float64), np.asarray(val, dtype=np.float64)
        for what, a in (("train", train), ("val", val)):
            if a.ndim != 3 or a.shape[2] != self.dim or a.shape[0] == 0:
                raise VPIntegratorError(f"{self.name}: {what} trajectories must be (n >= 1, T, {self.dim}); got "
                                        f"{a.shape}", key="data")
        keep = max(1, MAX_FIT_STATES // max(1, train.shape[1]))
        return train[:keep], val

    def fit_now(self) -> SindyFit | None:
        """Fit and select (once); the chosen fit or None."""
        if not self._fitted:
            train, val = self._arrays()
            self.fit, self.candidates = select_sindy(train, val, self.dt, self.integrator)
            self._fitted = True
        return self.fit

    @property
    def field(self) -> SindyField | None:
        return None if self.fit is None else self.fit.field

    def start(self, window0, limit):
        from .steps import IntegratorStep

        self.fit_now()
        self._n = int(np.asarray(window0).shape[0])
        self._inner = None
        if self.field is not None:
            self._inner = IntegratorStep(self.field, self.integrator, self.dt)
            self._inner.start(window0, limit)

    def rollout_direct(self, window0: np.ndarray, n_steps: int, out: np.ndarray, limit: np.ndarray
                       ) -> tuple[np.ndarray, float, float, float] | None:
        """The engine's whole-rollout path (``IntegratorMap.rollout_direct``) of the fitted field: the fit and the
        selection are set-up (``setup_seconds``), the compiled stepper's run the seconds; None (the engine's
        block loop then runs) when no candidate has skill or the selection is too large to run compiled."""
        from ..clock import thread_cpu
        from .steps import IntegratorStep

        tic = thread_cpu()
        self.fit_now()
        fit_seconds = thread_cpu() - tic
        if self.field is None:
            return None
        inner = IntegratorStep(self.field, self.integrator, self.dt)
        done = inner.rollout_direct(window0, n_steps, out, limit)
        if done is None:
            return None
        self._inner, self._n = inner, int(np.asarray(window0).shape[0])
        failed, seconds, setup_seconds, wall = done
        return failed, seconds, setup_seconds + fit_seconds, wall

    def generate(self, n):
        if self._inner is None:
            return np.full((self._n, n, self.dim), np.nan)
        return self._inner.generate(n)

    def reset(self, rows):
        if self._inner is not None:
            self._inner.reset(rows)

    def log_abs_det_jacobian(self, windows):
        if self._inner is None:
            return np.full(np.asarray(windows).shape[0], np.nan)
        return self._inner.log_abs_det_jacobian(windows)

    @property
    def failure_reason(self) -> str | None:
        """Why the row has no model (None when it has one or has not been fitted)."""
        if not self._fitted or self.fit is not None:
            return None
        zero = sum(f.field is None for f in self.candidates)
        return (f"no SINDy candidate has skill on the validation trajectories ({len(self.candidates)} tried: "
                f"{zero} all-zero, the others with validation error >= 1 or blowing up)")

    def describe(self) -> dict[str, Any]:
        runner = "numpy" if self._inner is None else self._inner.describe().get("runner", "numpy")
        info: dict[str, Any] = {**super().describe(), "integrator": self.integrator, "runner": runner}
        if self.source:
            info["fit_source"] = self.source
        if self._fitted:
            info["sindy_candidates"] = json.dumps([
                {"library": f.library, "threshold": f.threshold, "n_terms": f.n_terms,
                 "validation_error": None if not np.isfinite(f.score) else f.score} for f in self.candidates])
            info["sindy_selection"] = (f"validation rollout by {self.integrator}: mean over validation trajectories of "
                                       f"the largest relative error (capped at 1) over <= {VAL_STEPS} steps; fewest "
                                       f"terms within {PARSIMONY:g}x the best")
        if self.fit is not None and self.field is not None:
            info.update(sindy_library=self.fit.library, sindy_threshold=self.fit.threshold,
                        sindy_n_terms=self.fit.n_terms, sindy_validation_error=self.fit.score,
                        sindy_equations="\n".join(self.field.equations()),
                        sindy_features=json.dumps(self.field.library.names()),
                        sindy_coefficients=json.dumps(self.field.coefficients.tolist()))
        elif self.failure_reason:
            info["fit_failure"] = self.failure_reason
        return info
