"""Delay-coordinate SINDy as a rollout row ``delay_sindy+METHOD``: the ``sindy+METHOD`` fit and selection
([`select_sindy`][vpintegrator.rollout.sindy.select_sindy]) on the delay vectors z_n = (x_n, …, x_{n+T−1}) of
the training trajectories (T = ``context_len``), the chosen field integrated by METHOD at the data's step from
the first delay vector of a rollout (its first T observed states); the prediction is the newest block of the
integrated delay vector.

A field of the delay vectors exists where T observed states determine the state (T = 2 on positions of a
mechanical system: (q_n, q_{n+1}) stands in for (q, p)); the library and threshold grid is
``select_sindy``'s, its selection the validation rollout of the delay vectors of the validation
trajectories. The integrated delay vector is the model's own state: after the first step it is not the
window of emitted states (the field is fitted, not a shift), and the row's volume column is that of the
delay-vector map. The fit is timed (``fit_seconds``, process CPU) apart from the steps, which are an
[`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] on the fitted field (compiled at small batch, as
``sindy+METHOD``). The study "when the state is incomplete" runs this class for its delay-SINDy row
(``vpintegrator.studies.partial_observation.delay_sindy``). Needs pysindy (the ``sindy`` extra).

The search is bounded by a count, as a network's training is by its steps: at most ``max_candidates`` candidates
(default: the grid); ``max_fit_seconds`` process CPU seconds (default ``FIT_BUDGET_SECONDS``) is a safety valve,
said in ``sindy_budget`` when it stopped the search (``cut``: where depends on the machine's speed and load). Its
fits are ill-conditioned enough that BLAS's summation order moved them (the memory study's row at t = 100 read
0.0148-0.030 with the thread count and the CPU's kernels): they run without BLAS (``vpintegrator.compiled.stlsq``,
the derivatives' exact weights; an optimizer of your own, or no numba, is pysindy's), the same bits on every CPU.
The row has skill (``skill``, ``sindy_skill``) only
when its validation score is below ``SKILL_FRACTION`` of the identity map's on the same delay vectors
(``vpintegrator.models.memory.skill_of``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import VPIntegratorError
from ..models.fitted import FittedModel, RowData, nan_none, none_nan
from .engine import StepMap
from .sindy import MAX_FIT_STATES, MAX_VAL_TRAJ, VAL_STEPS
from ..models.memory import check_trajectories, delay_vectors

__all__ = ["DelaySindyStep", "delay_names", "FIT_BUDGET_SECONDS"]

#: the default CPU safety valve of the candidate search (process CPU seconds, checked after each candidate; the
#: memory study's fits take 0.2-5 s)
FIT_BUDGET_SECONDS = 60.0


def delay_names(names: Sequence[str], T: int, dim: int) -> tuple[str, ...]:
    """The names of a delay vector's T·k components, oldest first: ``q1[n-1]``, ``q2[n-1]``, ``q1[n]``, ...
    (the state components ``names``, else ``x0 ..``)."""
    base = list(names) if len(names) == dim else [f"x{i}" for i in range(dim)]
    return tuple(f"{b}[n{'' if j == T - 1 else f'-{T - 1 - j}'}]" for j in range(T) for b in base)


class DelaySindyStep(FittedModel):
    """``delay_sindy+METHOD`` (module docstring).

    Parameters
    ----------
    train, val : ndarray, shape (n, K, k), or callables returning them
        Training and validation trajectories (observed) at the rollout's step ``dt``.
    integrator : str
        METHOD: integrates the fitted field (and scores the candidates).
    dt : float
    context_len : int
        T, the states of a delay vector (and of the rollout's first window); >= 1.
    dim : int, optional
        k; needed with a callable ``train``.
    source : str
        Recorded as ``fit_source``.
    libraries, thresholds, optimizer : optional
        ``select_sindy``'s grid (on the delay vectors' T·k components).
    component_names : sequence of str
        The state components' names (the equations name the delay components ``q1[n-1]`` ...).
    compiled : bool
        False: the NumPy integrator path only (bit for bit the method's ``step``; the study's rule).
    max_candidates : int, optional
        At most this many candidates are fitted (default: the whole grid).
    max_fit_seconds : float, optional
        The safety valve: the search stops once its process CPU seconds reach this (default ``FIT_BUDGET_SECONDS``;
        None: no limit), said in ``budget`` when it does.
    """

    row = "delay_sindy"
    takes_integrator = True
    summary = ("SINDy on the delay vectors of context_len states (library and threshold by validation rollout), "
               "integrated by METHOD")
    needs = 'pysindy: pip install "vpintegrator[sindy]"'
    requires = "pysindy"
    reach = 2
    max_fit_states = MAX_FIT_STATES
    max_val_traj = MAX_VAL_TRAJ

    @classmethod
    def val_steps(cls, context_len: int) -> int | None:
        return int(context_len) - 1 + VAL_STEPS

    @classmethod
    def for_row(cls, data: RowData) -> "DelaySindyStep":
        return cls(data.train, data.val, str(data.integrator), data.dt, context_len=data.context_len, dim=data.dim,
                   source=data.source, component_names=data.component_names)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from .sindy import sindy_state

        libraries, thresholds, _ = self._grid_args  # names and numbers are saved (a pysindy object is not)
        grid = [None if v is None else list(v) for v in (libraries, thresholds)]
        if any(v is not None and not all(isinstance(x, (str, int, float)) for x in v) for v in grid):
            grid = [None, None]
        return sindy_state(self.fit, self.candidates, {"grid": grid,
            "integrator": self.integrator, "dt": self.dt, "context_len": self.seq_len, "dim": self.dim,
            "source": self.source, "component_names": list(self.component_names), "compiled": self.compiled,
            "max_candidates": self.max_candidates, "max_fit_seconds": self.max_fit_seconds,
            "fit_seconds": nan_none(self.fit_seconds), "identity_score": nan_none(self.identity_score)})

    @classmethod
    def _restore(cls, settings: dict[str, Any], arrays: dict[str, np.ndarray]) -> "DelaySindyStep":
        from .sindy import sindy_restore

        model = cls(None, None, settings["integrator"], settings["dt"], int(settings["context_len"]), int(settings["dim"]),
                    settings["source"], component_names=settings["component_names"], compiled=settings["compiled"],
                    max_candidates=settings["max_candidates"], max_fit_seconds=settings["max_fit_seconds"],
                    libraries=settings["grid"][0], thresholds=settings["grid"][1])
        T, k = model.seq_len, model.dim
        model.fit, model.candidates = sindy_restore(settings, arrays, delay_names(model.component_names, T, k))
        model.fit_seconds, model.identity_score = none_nan(settings["fit_seconds"]), none_nan(settings["identity_score"])
        model._fitted = True
        return model

    def __init__(self, train: np.ndarray | Callable[[], np.ndarray] | None,
                 val: np.ndarray | Callable[[], np.ndarray] | None,
                 integrator: str, dt: float, context_len: int = 2, dim: int | None = None, source: str = "", *,
                 libraries: Sequence[Any] | None = None, thresholds: Sequence[float] | None = None,
                 optimizer: Any = None, component_names: Sequence[str] = (), compiled: bool = True,
                 max_candidates: int | None = None, max_fit_seconds: float | None = FIT_BUDGET_SECONDS) -> None:
        from ..errors import finite_float
        from ..integrators import get_integrator
        from .sindy import _grid, require_pysindy

        require_pysindy("delay_sindy+" + str(integrator))
        get_integrator(integrator)
        if isinstance(context_len, bool) or not isinstance(context_len, (int, np.integer)) or context_len < 1:
            raise VPIntegratorError(f"delay_sindy: context_len must be an int >= 1; got {context_len!r}",
                                    key="context_len")
        T = int(context_len)
        self.integrator = str(integrator)
        self.dt = finite_float(dt, "dt (the step size)", positive=True, key="dt")
        self.name: str = f"delay_sindy+{integrator}"
        if dim is None:
            if callable(train):
                raise VPIntegratorError("DelaySindyStep: give dim with a callable train")
            dim = int(check_trajectories(train, "training trajectories", T, label=self.name).shape[2])
        for what, given in (("training trajectories", train), ("validation trajectories", val)):
            if given is not None and not callable(given):
                self._check(given, what, T, int(dim))
        self.dim: int = int(dim)
        self.seq_len: int = T
        self.pred_window: int = 1
        _grid(libraries, thresholds, optimizer, T * self.dim)  # every argument checked before any work
        self._grid_args = (libraries, thresholds, optimizer)
        if max_candidates is not None and (isinstance(max_candidates, bool) or
                                           not isinstance(max_candidates, (int, np.integer)) or max_candidates < 1):
            raise VPIntegratorError(f"{self.name}: max_candidates must be an int >= 1; got {max_candidates!r}",
                                    key="max_candidates")
        self.max_candidates = None if max_candidates is None else int(max_candidates)
        self.max_fit_seconds = None if max_fit_seconds is None else finite_float(
            max_fit_seconds, f"{self.name}: max_fit_seconds", positive=True, key="max_fit_seconds")
        self.identity_score = math.nan
        self.component_names = tuple(str(n) for n in component_names)
        if self.component_names and len(self.component_names) != self.dim:
            raise VPIntegratorError(f"{self.name}: component_names has {len(self.component_names)} names for "
                                    f"{self.dim} components", key="component_names")
        self._train, self._val, self.source, self.compiled = train, val, source, bool(compiled)
        self.fit: Any = None
        self.candidates: list[Any] = []
        self.fit_seconds = math.nan
        self._fitted = False
        self._inner: StepMap | None = None

    def restrict(self, libraries: Sequence[Any]) -> "DelaySindyStep":
        """This row with its library grid narrowed to ``libraries`` before it fits (the memory study's polynomial
        libraries on the ``vp-rollout`` row), checked as the constructor checks it; refused once the row has fit."""
        from .sindy import _grid

        if self._fitted:
            raise VPIntegratorError(f"{self.name}: the row has already fit; narrow its libraries before it starts",
                                    key="libraries")
        _, thresholds, optimizer = self._grid_args
        _grid(libraries, thresholds, optimizer, self.seq_len * self.dim)
        self._grid_args = (libraries, thresholds, optimizer)
        return self

    def _check(self, value: Any, what: str, T: int, dim: int) -> np.ndarray:
        a = check_trajectories(value, what, T, dim, label=self.name)
        if a.shape[1] - T + 1 < 3:  # central differences of the delay vectors need 3 of them
            raise VPIntegratorError(f"{self.name}: context_len = {T} leaves {a.shape[1] - T + 1} delay vectors per "
                                    f"trajectory of the {what} ({a.shape[1]} states); the derivatives need 3: give "
                                    f"context_len <= {a.shape[1] - 2}", key="context_len")
        return a

    def fit_now(self) -> Any:
        """Fit and select on the delay vectors (once): the chosen ``SindyFit`` or None."""
        from ..clock import process_cpu
        from .sindy import identity_score, select_sindy

        if not self._fitted:
            tic = process_cpu()
            T = self.seq_len
            train = self._check(self._train() if callable(self._train) else self._train, "training trajectories",
                                T, self.dim)
            val = self._check(self._val() if callable(self._val) else self._val, "validation trajectories", T,
                              self.dim)
            libraries, thresholds, optimizer = self._grid_args
            self.fit, self.candidates = select_sindy(delay_vectors(train, T), delay_vectors(val, T), self.dt,
                                                     self.integrator, libraries, thresholds, optimizer,
                                                     delay_names(self.component_names, T, self.dim),
                                                     max_candidates=self.max_candidates,
                                                     max_seconds=self.max_fit_seconds)
            self.identity_score = identity_score(delay_vectors(val, T))
            self.fit_seconds = process_cpu() - tic
            self._fitted = True
        return self.fit

    @property
    def field(self) -> Any:
        """The fitted field of the delay vectors (a ``SindyField`` of T·k components), or None."""
        return None if self.fit is None else self.fit.field

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        from .steps import IntegratorStep

        self.fit_now()
        w = np.asarray(window0, dtype=np.float64)
        self._n = w.shape[0]
        self._inner = None
        if self.field is not None:
            self._inner = IntegratorStep(self.field, self.integrator, self.dt,
                                         **({} if self.compiled else {"compiled_max_batch": 0}))
            z0 = np.ascontiguousarray(w.reshape(w.shape[0], 1, -1))
            # a delay vector of T states each within the bound is within sqrt(T) times it
            self._inner.start(z0, None if limit is None else np.asarray(limit) * math.sqrt(self.seq_len))

    def generate(self, n: int) -> np.ndarray:
        if self._inner is None:
            return np.full((self._n, n, self.dim), np.nan)
        return np.ascontiguousarray(self._inner.generate(n)[..., -self.dim:])

    def reset(self, rows: np.ndarray) -> None:
        if self._inner is not None:
            self._inner.reset(rows)

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """The step's ``log|det J|`` on the delay vectors (the window flattened: the model's state)."""
        w = np.asarray(windows, dtype=np.float64)
        if self._inner is None:
            return np.full(w.shape[0], np.nan)
        return self._inner.log_abs_det_jacobian(w.reshape(w.shape[0], 1, -1))

    def grid_size(self) -> int:
        """The candidates of the whole grid (the budget may fit fewer)."""
        from .sindy import _grid

        libs, grid = _grid(*self._grid_args, self.seq_len * self.dim)
        return len(libs) * len(grid)

    @property
    def budget(self) -> str:
        """The search's budget and, once fitted, what it fitted (``sindy_budget``)."""
        said = (f"at most {'the grid' if self.max_candidates is None else self.max_candidates} candidates and "
                f"{'no CPU limit' if self.max_fit_seconds is None else f'{self.max_fit_seconds:g} process CPU s'}")
        if self._fitted:
            n, grid = len(self.candidates), self.grid_size()
            said += f": fitted {n} of {grid}" + (" (cut by the budget)" if n < grid else "")
            if self.cut == "cpu":
                said += "; the CPU valve stopped it, where a machine's speed and load decide"
        return said

    @property
    def cut(self) -> str | None:
        """What stopped the search before the grid's end: ``"candidates"`` (the count), ``"cpu"`` (the safety valve)
        or None (the whole grid, or not fitted yet)."""
        if not self._fitted or len(self.candidates) >= self.grid_size():
            return None
        return "candidates" if len(self.candidates) >= (self.max_candidates or math.inf) else "cpu"

    @property
    def failure_reason(self) -> str | None:
        """Why the row has no model (None when it has one or has not been fitted)."""
        if not self._fitted or self.fit is not None:
            return None
        return (f"no SINDy candidate on the delay vectors has skill on the validation trajectories "
                f"({len(self.candidates)} tried)")

    def describe(self) -> dict[str, Any]:
        from .sindy import kept_record

        runner = "numpy" if self._inner is None else self._inner.describe().get("runner", "numpy")
        info: dict[str, Any] = {**super().describe(), "integrator": self.integrator, "runner": runner,
                                "context_len": self.seq_len}
        if self.source:
            info["fit_source"] = self.source
        if self._fitted:
            info.update(kept_record(self, delay_names(self.component_names, self.seq_len, self.dim)),
                        fit_seconds=float(self.fit_seconds), fit_clock="process_cpu", sindy_budget=self.budget,
                        sindy_identity_validation_error=float(self.identity_score), sindy_skill=bool(self.skill))
        else:
            info["sindy_budget"] = self.budget
        if self.fit is None and self.failure_reason:
            info["fit_failure"] = self.failure_reason
        return info
