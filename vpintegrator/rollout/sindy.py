"""Sparse regression (SINDy) as a rollout row: ``sindy+METHOD`` fits ż = Θ(z) Ξ on the data file's training
trajectories, then integrates the fitted field by the classical method METHOD at the data's step.

The regression is pysindy's sequentially thresholded least squares (``pysindy.optimizers.STLSQ``), run by
``vpintegrator.compiled.stlsq`` (the same bits on every CPU and BLAS; pysindy's own without numba), on a
feature matrix Θ written here: a ridge term ``RIDGE`` inside the iterations (it resolves libraries that are
linearly dependent on the data, e.g. z₀² + z₁² + z₂² = 1 on a sphere, towards the sparse solution), then an
unregularised least-squares refit on the kept terms (pysindy's ``unbias``). Θ is written here so that the
fitted field has an exact, analytic Jacobian for the implicit methods (no finite differences anywhere) and
needs no pysindy once fitted. pysindy is an optional extra: ``pip install "vpintegrator[sindy]"``.

**Data.** Training trajectories (n, T, dim) sampled at h; the derivatives ż are central differences of
order 8 on each trajectory (``pysindy.FiniteDifference(order=8)``, the 4 states at each end dropped; a
shorter trajectory takes the highest even order its length allows), error ~1e-3 h⁸ ‖z⁽⁹⁾‖: clean data at
h ≤ 0.2 gives ż to ~1e-8, noisy data is not smoothed (this baseline is for clean files).

**Libraries** (``LIBRARIES``, built by ``vpintegrator.rollout.sindy_library``; every one has the constant 1): ``poly1`` … ``poly4`` (all monomials of the
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
why) and the rest of the run goes on. ``identity_score`` is the identity map's score on the same validation
trajectories (every state the first): the delay-SINDy row has skill only below ``SKILL_FRACTION`` of it
(``vpintegrator.models.memory.skill_of``). **Budget**: ``select_sindy(max_candidates=..., max_seconds=...)``
stops the search after that many candidates or once its process CPU seconds reach the limit (checked before each
candidate after the first, in the grid's order: the smaller libraries first), and chooses among those it fitted.

The chosen equations are written in readable form (``z1' = 0.500000 z2 z3 - ...``, the state components named
as the data file names them (its ``/state`` axis or its system's ``state_names``), else ``x0 .. x<dim-1>``)
with the library, the threshold, the validation score and every candidate's score, into the rollout file's
attributes of the row (``describe``).

**Your own pysindy objects** (Python): ``libraries`` may hold pysindy feature libraries (``PolynomialLibrary``,
``FourierLibrary(n_frequencies=1)``, ``IdentityLibrary`` and their sums ``a + b``), each turned into the exact
features here (so the field keeps its analytic Jacobian and compiled kernel); ``optimizer`` any pysindy
optimizer (``STLSQ``, ``SR3``, ...), cloned for each fit (with ``thresholds`` given, each set as its
``threshold``; without, it is fitted as configured). **The boundary**: every argument is checked before any
work, each bad one a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming it (a
threshold that is not a finite number >= 0, an empty list, a library of no features or of more than
``MAX_FEATURES`` (counted before it is built: ``poly60`` is refused at once, not built), Θ larger than the
memory (samples × features), training data that are not finite); pysindy's and scikit-learn's own exceptions
come out as one line naming the library and threshold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..config import distinct
from ..errors import VPIntegratorError, finite_float
from ..systems.base import System
from ..models.fitted import FittedModel, RowData, nan_none, none_nan
from ..stepping import StepMap
from .sindy_library import (INSTALL, MAX_FEATURES, Library, _label, _library_of, _one_line, library, library_size,
                            require_pysindy)

__all__ = ["LIBRARIES", "THRESHOLDS", "VAL_STEPS", "PARSIMONY", "INSTALL", "MAX_FIT_STATES", "MAX_VAL_TRAJ",
           "MAX_FEATURES", "require_pysindy", "Library", "library", "library_size", "SindyField", "SindyFit",
           "derivatives", "fit_sindy", "select_sindy", "identity_score", "sindy_record", "SindyStep"]

#: the feature libraries of the validation grid
LIBRARIES = ("poly1", "poly2", "poly3", "poly4", "trig", "exp", "poly3+trig+exp")
#: the STLSQ thresholds of the validation grid
THRESHOLDS = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
#: steps of each validation rollout (at most; fewer when the trajectories are shorter)
VAL_STEPS = 100
#: candidates within this factor of the best validation score compete on the number of terms
PARSIMONY = 2.0
#: at most this many training states enter the fit (the first trajectories of the split), and this many
#: validation trajectories the selection
MAX_FIT_STATES = 200_000
MAX_VAL_TRAJ = 32
#: the ridge term of STLSQ's iterations (the kept terms are refitted without it)
RIDGE = 1e-8
#: the finite-difference order of the derivatives
FD_ORDER = 8


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
    #: the names of the state components in ``equations`` (the data file's; empty: ``x0 .. x<dim-1>``)
    component_names: tuple[str, ...] = ()

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
        """One readable line per component: ``x0' = 0.500000 x1 x2 - 0.250000 x0`` (``0`` when empty), the
        components named by ``component_names`` when it has one per component (``z1' = 0.500000 z2 z3``)."""
        names = self.library.names(self.component_names)
        v = self.component_names if len(self.component_names) == self.dim else [f"x{i}" for i in range(self.dim)]
        lines = []
        for i in range(self.dim):
            terms = [(c, n) for c, n in zip(self.coefficients[:, i], names) if c != 0]
            text = ""
            for k, (c, n) in enumerate(terms):
                mag = f"{abs(c):.{precision}f}" + ("" if n == "1" else f" {n}")
                text += (("-" if c < 0 else "") + mag) if k == 0 else ((" - " if c < 0 else " + ") + mag)
            lines.append(f"{v[i]}' = {text or '0'}")
        return lines


# --------------------------------------------------------------------------- fitting and selection


def _finite_array(value: Any, what: str, ndim: int, dim: int | None = None) -> np.ndarray:
    """``value`` as a float64 array of ``ndim`` axes (at least one row, ``dim`` components when given), every
    entry finite; else one line naming ``data`` and ``what``."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise VPIntegratorError(f"SINDy {what}: not an array of numbers ({' '.join(str(err).split())[:120]})",
                                key="data") from None
    shape = "(n, T, dim)" if ndim == 3 else "(n, dim)"
    if a.ndim != ndim or a.shape[0] == 0 or a.shape[-1] == 0 or (dim is not None and a.shape[-1] != dim):
        want = shape if dim is None else shape.replace("dim", str(dim))
        raise VPIntegratorError(f"SINDy {what} must be {want} with n >= 1; got shape {a.shape}", key="data")
    finite = np.isfinite(a)
    if not finite.all():
        at = tuple(int(i) for i in np.unravel_index(int(np.argmin(finite)), a.shape))
        raise VPIntegratorError(f"SINDy {what} hold {'NaN' if np.isnan(a[at]) else 'Inf'} at {list(at)}; the fit needs "
                                "finite data (drop or repair those trajectories)", key="data")
    return a


def derivatives(y: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """States and their central-difference derivatives (order ``FD_ORDER``, fewer where the trajectories
    are short) of trajectories y (n, T, dim): ``(z, ż)``, each (n · (T − 2m), dim), the m end states of
    each trajectory dropped. The weights are exact fractions rounded once (pysindy's ``FiniteDifference`` solves
    for them by LAPACK, whose last bits move with the BLAS kernels), summed in pysindy's order."""
    from fractions import Fraction

    require_pysindy()
    y = _finite_array(y, "training trajectories", 3)
    dt = finite_float(dt, "dt (the step size)", positive=True, key="dt")
    n, T, dim = y.shape
    order = min(FD_ORDER, 2 * ((T - 1) // 2))
    if order < 2:
        raise VPIntegratorError(f"SINDy: trajectories of {T} states give no central difference; give at least 3",
                                key="data")
    m = order // 2
    zdot = np.zeros((n, T - 2 * m, dim))
    for j in range(-m, m + 1):  # ż(t) ≈ Σ_j w_j z(t + j h) / h, w_j = (-1)^(j+1) m!² / (j (m−j)! (m+j)!)
        if j:
            w = Fraction((1 if j % 2 else -1) * math.factorial(m) ** 2,
                         j * math.factorial(m - j) * math.factorial(m + j))
            zdot = zdot + y[:, m + j:T - m + j] * (float(w) / dt)
    return y[:, m:T - m].reshape(-1, dim), zdot.reshape(-1, dim)


@dataclass(frozen=True)
class SindyFit:
    """A fitted candidate: its library and threshold, the field (None: every coefficient 0), its number of
    terms and its validation score (NaN before validation). ``threshold`` is NaN for a user's optimizer
    fitted as configured."""

    library: str
    threshold: float
    field: SindyField | None
    n_terms: int
    score: float = float("nan")


def _threshold(value: Any) -> float:
    """A threshold: a finite number >= 0, else one line naming ``thresholds``."""
    return finite_float(value, "SINDy threshold", nonnegative=True, key="thresholds")


def _check_optimizer(optimizer: Any) -> Any:
    """A pysindy optimizer object (``pysindy.optimizers.BaseOptimizer``: ``STLSQ``, ``SR3``, ...), its
    ``threshold`` (when it has one) a finite number >= 0; else one line naming ``optimizer``."""
    if optimizer is None:
        return None
    ps = require_pysindy("a pysindy optimizer")
    if isinstance(optimizer, type) or not isinstance(optimizer, ps.optimizers.BaseOptimizer):
        raise VPIntegratorError(f"SINDy optimizer {_one_line(optimizer)[:80]}: give a pysindy optimizer object, e.g. "
                                "pysindy.STLSQ(threshold=0.05) or pysindy.SR3()", key="optimizer")
    params = optimizer.get_params(deep=False)
    if "threshold" in params:
        try:
            _threshold(params["threshold"])
        except VPIntegratorError as err:
            raise VPIntegratorError(f"SINDy optimizer {_one_line(optimizer)}: {err}", key="optimizer") from None
    return optimizer


def _grid(libraries: Any, thresholds: Any, optimizer: Any, dim: int) -> tuple[list[tuple[str, Library]], list[float | None]]:
    """The checked grid: ``[(label, Library)]`` and the thresholds (``[None]``: a user's optimizer as
    configured). Every library is counted before it is built; the default grid leaves out the ones larger than
    ``MAX_FEATURES``, a library asked for by name or object is refused."""
    optimizer = _check_optimizer(optimizer)
    if libraries is None:
        libs = [(name, library(name, dim)) for name in LIBRARIES if library_size(name, dim) <= MAX_FEATURES]
    else:
        specs = [libraries] if isinstance(libraries, str) or not isinstance(libraries, (list, tuple)) else list(libraries)
        if not specs:
            raise VPIntegratorError("SINDy libraries is empty; give at least one (e.g. ['poly2'])", key="libraries")
        distinct([_label(spec) for spec in specs], "libraries", label="SINDy libraries")
        libs = [(_label(spec), _library_of(spec, dim)) for spec in specs]
    if thresholds is None:
        grid: list[float | None] = list(THRESHOLDS) if optimizer is None else [None]
    else:
        values = list(thresholds) if isinstance(thresholds, (list, tuple, np.ndarray)) else [thresholds]
        if not values:
            raise VPIntegratorError("SINDy thresholds is empty; give at least one (e.g. [0.01])", key="thresholds")
        grid = [_threshold(v) for v in values]
        distinct(grid, "thresholds", label="SINDy thresholds")
        if optimizer is not None and "threshold" not in optimizer.get_params(deep=False):
            raise VPIntegratorError(f"SINDy thresholds: the optimizer {type(optimizer).__name__} has no threshold; "
                                    "leave thresholds out (it is fitted as configured)", key="thresholds")
    return libs, grid


def fit_sindy(z: np.ndarray, zdot: np.ndarray, library_name: Any, threshold: float | None,
              optimizer: Any = None, component_names: Sequence[str] = ()) -> SindyFit:
    """STLSQ (pysindy; ridge ``RIDGE``, then the unregularised refit) of ż on Θ(z) for one library and threshold,
    or ``optimizer`` (a pysindy optimizer, cloned; ``threshold`` set as its threshold unless None).

    Parameters
    ----------
    z, zdot : ndarray, shape (n, dim)
    library_name : str or pysindy feature library
    threshold : float or None
        None only with ``optimizer`` (fitted as configured).
    optimizer : pysindy optimizer, optional
    component_names : sequence of str, optional
        The state components' names in the field's equations.
    """
    ps = require_pysindy()
    z = _finite_array(z, "states z", 2)
    zdot = _finite_array(zdot, "derivatives zdot", 2, z.shape[1])
    if zdot.shape != z.shape:
        raise VPIntegratorError(f"SINDy derivatives zdot must have the shape of z {z.shape}; got {zdot.shape}",
                                key="data")
    optimizer = _check_optimizer(optimizer)
    if threshold is None and optimizer is None:
        raise VPIntegratorError("SINDy threshold must be a finite number >= 0; got None", key="thresholds")
    threshold = None if threshold is None else _threshold(threshold)
    lib = _library_of(library_name, z.shape[1])
    return _fit(z, zdot, _label(library_name), lib, threshold, optimizer, tuple(component_names), ps)


def _fit(z: np.ndarray, zdot: np.ndarray, label: str, lib: Library, threshold: float | None, optimizer: Any,
         names: tuple[str, ...], ps: Any) -> SindyFit:
    """``fit_sindy`` on checked arguments; pysindy's and scikit-learn's own errors as one line."""
    import warnings

    from ..compiled import available
    from ..compiled.stlsq import stlsq
    from ..resources import check_size

    # Θ (samples × features) and the monomials' intermediate (samples × features × components), before either exists
    check_size("library", z.shape[0] * lib.n_features * (z.shape[1] + 3), 8, f"Θ of the SINDy fit on library {label} "
               f"({z.shape[0]} samples × {lib.n_features} features × {z.shape[1]} components)")
    theta = lib.transform(z)
    if optimizer is None:
        assert threshold is not None  # checked above: a fit without an optimizer object has a threshold
        opt = ps.STLSQ(threshold=float(threshold), alpha=RIDGE, max_iter=50)
    else:
        from sklearn.base import clone  # type: ignore[import-untyped]

        opt = clone(optimizer)
        if threshold is not None:
            opt.set_params(threshold=float(threshold))
    try:
        with warnings.catch_warnings():  # an unfittable library warns (ill-conditioned, all-zero): scored below
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                if optimizer is None and available():
                    xi = stlsq(theta, zdot, float(opt.threshold), RIDGE, opt.max_iter)  # (n_features, dim)
                else:
                    xi = np.asarray(opt.fit(theta, zdot).coef_, dtype=np.float64).T
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as err:  # pysindy's and scikit-learn's own exceptions: one line naming what was fitted
        raise VPIntegratorError(
            f"SINDy fit of library {label} ({'as configured' if threshold is None else f'threshold {threshold:g}'}) "
            f"by {type(opt).__name__} failed: "
            f"{type(err).__name__}: {' '.join(str(err).split())[:200]}",
            key="library" if optimizer is None else "optimizer") from None
    if xi.shape != (lib.n_features, z.shape[1]):
        raise VPIntegratorError(f"SINDy optimizer {type(opt).__name__}: coef_ has shape {xi.T.shape}, expected "
                                f"({z.shape[1]}, {lib.n_features}) (one row per component)", key="optimizer")
    keep = np.any(xi != 0, axis=1) & np.all(np.isfinite(xi), axis=1)
    th = math.nan if threshold is None else float(threshold)
    if not keep.any() or not np.all(np.isfinite(xi)):
        return SindyFit(label, th, None, 0)
    field = SindyField(library=lib.select(keep), coefficients=xi[keep], component_names=names)
    return SindyFit(label, th, field, int(np.count_nonzero(xi)))


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


def identity_score(val: np.ndarray) -> float:
    """The identity map's validation score on ``val`` (n, K + 1, dim) as ``select_sindy`` scores a candidate (the same
    trajectories and steps): every predicted state the first, the mean of the largest relative error, capped at 1."""
    val = np.asarray(val, dtype=np.float64)[:MAX_VAL_TRAJ, :VAL_STEPS + 1]
    with np.errstate(all="ignore"):
        norm = np.maximum(np.linalg.norm(val[:, 1:], axis=-1), 1e-300)
        err = np.linalg.norm(val[:, :1] - val[:, 1:], axis=-1) / norm
    worst = np.where(np.isfinite(err).all(axis=1), err.max(axis=1, initial=0.0), np.inf)
    return float(np.mean(np.minimum(worst, 1.0)))


def select_sindy(train: np.ndarray, val: np.ndarray, dt: float, integrator: str,
                 libraries: Sequence[Any] | None = None, thresholds: Sequence[float] | None = None,
                 optimizer: Any = None, component_names: Sequence[str] = (), *, max_candidates: int | None = None,
                 max_seconds: float | None = None) -> tuple[SindyFit | None, list[SindyFit]]:
    """Fit every (library, threshold) on ``train`` and pick by validation rollout on ``val`` (module
    docstring): ``(the chosen fit or None when none has skill, every candidate with its score)``. Every
    argument is checked before anything is fitted (module docstring, "The boundary").

    Parameters
    ----------
    train : ndarray, shape (n_train, T, dim)
    val : ndarray, shape (n_val, T', dim)
    dt : float
    integrator : str
        The method the validation rollouts (and the row) use.
    libraries : sequence of names or pysindy feature libraries, optional
        The libraries (default ``LIBRARIES``).
    thresholds : sequence of float, optional
        STLSQ's thresholds, or the optimizer's (default ``THRESHOLDS``; with ``optimizer``, the optimizer as
        configured).
    optimizer : pysindy optimizer, optional
        Fitted (a clone) in place of the package's STLSQ.
    component_names : sequence of str, optional
        The state components' names in the equations (default ``x0 .. x<dim-1>``).
    max_candidates, max_seconds : optional
        The search's budget (module docstring): at most this many candidates, or until its process CPU seconds
        reach ``max_seconds``; the candidates fitted are returned (fewer than the grid when the budget cut it).
    """
    from ..clock import process_cpu
    from ..integrators import get_integrator

    ps = require_pysindy()
    get_integrator(integrator)
    dt = finite_float(dt, "dt (the step size)", positive=True, key="dt")
    train = _finite_array(train, "training trajectories", 3)
    val = _finite_array(val, "validation trajectories", 3, train.shape[2])
    libs, grid = _grid(libraries, thresholds, optimizer, train.shape[2])
    if max_candidates is not None and (isinstance(max_candidates, bool) or not isinstance(max_candidates, int)
                                       or max_candidates < 1):
        raise VPIntegratorError(f"max_candidates must be an int >= 1; got {max_candidates!r}", key="max_candidates")
    limit = math.inf if max_seconds is None else finite_float(max_seconds, "max_seconds", positive=True,
                                                               key="max_seconds")
    tic = process_cpu()
    names = tuple(str(n) for n in component_names)
    z, zdot = derivatives(train, dt)
    val = val[:MAX_VAL_TRAJ, :VAL_STEPS + 1]
    fits: list[SindyFit] = []
    for label, lib in libs:
        for threshold in grid:
            if fits and (len(fits) >= (max_candidates or math.inf) or process_cpu() - tic >= limit):
                break
            fit = _fit(z, zdot, label, lib, threshold, optimizer, names, ps)
            score = 1.0 if fit.field is None else _score(fit.field, integrator, dt, val)
            fits.append(SindyFit(fit.library, fit.threshold, fit.field, fit.n_terms, score))
    usable = [f for f in fits if f.field is not None and f.score < 1.0]
    if not usable:
        return None, fits
    best = min(f.score for f in usable)
    near = [f for f in usable if f.score <= PARSIMONY * best]
    return min(near, key=lambda f: (f.n_terms, f.score)), fits


def sindy_record(fit: SindyFit | None, candidates: Sequence[SindyFit], integrator: str,
                 component_names: Sequence[str] = ()) -> dict[str, Any]:
    """What a SINDy row records (its attributes in the rollout file): every candidate's library, threshold,
    terms and score (``sindy_candidates``, JSON), the selection rule (``sindy_selection``), and for the chosen
    fit its library, threshold, terms, score, equations, features and coefficients (``sindy_*``)."""
    info: dict[str, Any] = {
        "sindy_candidates": json.dumps([
            {"library": f.library, "threshold": None if not np.isfinite(f.threshold) else f.threshold,
             "n_terms": f.n_terms,
             "validation_error": None if not np.isfinite(f.score) else f.score} for f in candidates]),
        "sindy_selection": (f"validation rollout by {integrator}: mean over validation trajectories of the largest "
                            f"relative error (capped at 1) over <= {VAL_STEPS} steps; fewest terms within "
                            f"{PARSIMONY:g}x the best")}
    if fit is not None and fit.field is not None:
        names = tuple(component_names)
        info.update(sindy_library=fit.library, sindy_threshold=fit.threshold, sindy_n_terms=fit.n_terms,
                    sindy_validation_error=fit.score, sindy_equations="\n".join(fit.field.equations()),
                    sindy_features=json.dumps(fit.field.library.names(names)),
                    sindy_coefficients=json.dumps(fit.field.coefficients.tolist()))
    return info


def kept_record(step: Any, names: Sequence[str]) -> dict[str, Any]:
    """``step``'s ``sindy_record``, made once per fit and kept on the step (its equations and JSON are built once,
    not at every rollout's ``describe``); made again when ``step.fit`` or a candidate is another object (the fits
    are frozen) or the integrator or names differ."""
    names = tuple(names)
    kept = getattr(step, "_kept_record", None)
    if (kept is None or kept[0] is not step.fit or len(kept[1]) != len(step.candidates)
            or any(a is not b for a, b in zip(kept[1], step.candidates)) or kept[2] != (step.integrator, names)):
        kept = (step.fit, tuple(step.candidates), (step.integrator, names),
                sindy_record(step.fit, step.candidates, step.integrator, names))
        step._kept_record = kept
    return kept[3]


def sindy_state(fit: SindyFit | None, candidates: Sequence[SindyFit], settings: dict[str, Any]
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``settings`` with the chosen fit's and the candidates' library, threshold, terms and score, and the chosen
    field's arrays (``powers``, ``coefficients``): what a SINDy row saves (``FittedModel.save``)."""
    def scalars(f: SindyFit) -> list[Any]:
        return [f.library, nan_none(f.threshold), f.n_terms, nan_none(f.score)]

    out = {**settings, "candidates": [scalars(f) for f in candidates], "fit": None if fit is None else scalars(fit)}
    if fit is None or fit.field is None:
        return out, {}
    lib = fit.field.library
    out["library"] = {"name": lib.name, "sin": list(lib.sin), "cos": list(lib.cos), "exp": list(lib.exp)}
    return out, {"powers": lib.powers, "coefficients": fit.field.coefficients}


def sindy_restore(settings: dict[str, Any], arrays: dict[str, np.ndarray], names: Sequence[str] = ()
                  ) -> tuple[SindyFit | None, list[SindyFit]]:
    """The chosen fit and the candidates ``sindy_state`` wrote (the candidates without their fields)."""
    def fit(values: list[Any], field: SindyField | None) -> SindyFit:
        library, threshold, n_terms, score = values
        return SindyFit(library, none_nan(threshold), field, int(n_terms), none_nan(score))

    candidates = [fit(c, None) for c in settings["candidates"]]
    if settings["fit"] is None:
        return None, candidates
    field = None
    if "coefficients" in arrays:
        lib = settings["library"]
        library = Library(lib["name"], int(arrays["powers"].shape[1]), arrays["powers"], tuple(lib["sin"]),
                          tuple(lib["cos"]), tuple(lib["exp"]))
        field = SindyField(library=library, coefficients=arrays["coefficients"], component_names=tuple(names))
    return fit(settings["fit"], field), candidates


# --------------------------------------------------------------------------- the step map


class SindyStep(FittedModel):
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
    libraries, thresholds, optimizer : optional
        The grid and the optimizer of [`select_sindy`][vpintegrator.rollout.sindy.select_sindy] (names or pysindy
        feature libraries; thresholds; a pysindy optimizer), checked here, before anything is read or fitted.
    component_names : sequence of str, optional
        The state components' names in the equations (default ``x0 .. x<dim-1>``).
    """

    row = "sindy"
    takes_integrator = True
    summary = "SINDy on the training trajectories (library and threshold by validation rollout), integrated by METHOD"
    needs = f"pysindy: {INSTALL}"
    requires = "pysindy"
    max_fit_states = MAX_FIT_STATES
    max_val_traj = MAX_VAL_TRAJ

    @classmethod
    def val_steps(cls, context_len: int) -> int | None:
        return VAL_STEPS

    @classmethod
    def for_row(cls, data: RowData) -> "SindyStep":
        return cls(data.train, data.val, str(data.integrator), data.dt, dim=data.dim, source=data.source,
                   component_names=data.component_names)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return sindy_state(self.fit, self.candidates, {
            "integrator": self.integrator, "dt": self.dt, "dim": self.dim, "source": self.source,
            "component_names": list(self.component_names), "fit_seconds": nan_none(self.fit_seconds)})

    @classmethod
    def _restore(cls, settings: dict[str, Any], arrays: dict[str, np.ndarray]) -> "SindyStep":
        model = cls(None, None, settings["integrator"], settings["dt"], dim=int(settings["dim"]), source=settings["source"],
                    component_names=settings["component_names"])
        model.fit, model.candidates = sindy_restore(settings, arrays, model.component_names)
        model.fit_seconds, model._fitted = none_nan(settings["fit_seconds"]), True
        return model

    #: set by __init__ (declared for type checkers)
    integrator: str
    dt: float
    dim: int
    seq_len: int
    pred_window: int
    name: str
    source: str

    def __init__(self, train: np.ndarray | Callable[[], np.ndarray] | None,
                 val: np.ndarray | Callable[[], np.ndarray] | None,
                 integrator: str, dt: float, dim: int | None = None, source: str = "", *,
                 libraries: Sequence[Any] | None = None, thresholds: Sequence[float] | None = None,
                 optimizer: Any = None, component_names: Sequence[str] = ()) -> None:
        from ..integrators import get_integrator

        require_pysindy("sindy+" + str(integrator))
        get_integrator(integrator)
        self._train, self._val = train, val
        self.integrator, self.dt = str(integrator), finite_float(dt, "dt (the step size)", positive=True, key="dt")
        if dim is None:
            if callable(train):
                raise VPIntegratorError("SindyStep: give dim with a callable train")
            dim = int(_finite_array(train, "training trajectories", 3).shape[-1])
        for what, given in (("training", train), ("validation", val)):
            if given is not None and not callable(given):  # arrays: checked here (a callable's when the row starts)
                _finite_array(given, f"{what} trajectories", 3, int(dim))
        self.dim: int = int(dim)
        self.seq_len: int = 1
        self.pred_window: int = 1
        _grid(libraries, thresholds, optimizer, self.dim)  # the boundary: every argument checked before any work
        self._grid_args = (libraries, thresholds, optimizer)
        self.component_names = tuple(str(n) for n in component_names)
        if self.component_names and len(self.component_names) != self.dim:
            raise VPIntegratorError(f"sindy+{integrator}: component_names has "
                                    f"{len(self.component_names)} names for {self.dim} components", key="component_names")
        self.name: str = f"sindy+{integrator}"
        self.source = source
        self.fit: SindyFit | None = None
        self.candidates: list[SindyFit] = []
        self._inner: StepMap | None = None
        self._fitted = False
        #: process CPU seconds of the fit and the selection (NaN before ``fit_now``)
        self.fit_seconds = math.nan

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        train = self._train() if callable(self._train) else self._train
        val = self._val() if callable(self._val) else self._val
        train = _finite_array(train, f"{self.name}: training trajectories", 3, self.dim)
        val = _finite_array(val, f"{self.name}: validation trajectories", 3, self.dim)
        keep = max(1, MAX_FIT_STATES // max(1, train.shape[1]))
        return train[:keep], val

    def fit_now(self) -> SindyFit | None:
        """Fit and select (once); the chosen fit or None."""
        if not self._fitted:
            from ..clock import process_cpu

            tic = process_cpu()
            train, val = self._arrays()
            libraries, thresholds, optimizer = self._grid_args
            self.fit, self.candidates = select_sindy(train, val, self.dt, self.integrator, libraries, thresholds,
                                                     optimizer, self.component_names)
            self.fit_seconds = process_cpu() - tic
            self._fitted = True
        return self.fit

    @property
    def field(self) -> SindyField | None:
        return None if self.fit is None else self.fit.field

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
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

    def generate(self, n: int) -> np.ndarray:
        if self._inner is None:
            return np.full((self._n, n, self.dim), np.nan)
        return self._inner.generate(n)

    def reset(self, rows: np.ndarray) -> None:
        if self._inner is not None:
            self._inner.reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
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
            info.update(kept_record(self, self.component_names), fit_seconds=float(self.fit_seconds),
                        fit_clock="process_cpu")
        if self.fit is None and self.failure_reason:
            info["fit_failure"] = self.failure_reason
        return info
