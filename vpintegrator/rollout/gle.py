"""The hidden-bath arena's rows: the particle's GLE (the known-equations row) and the full-order baths, each
started from the observed particle.

In the Kac-Zwanzig system (``vpintegrator.systems.kac_zwanzig``) started with the bath at rest in its equilibrium,
the observed particle ``(Q, P)`` obeys exactly the noise-free generalised Langevin equation::

    Q'' = -V'(Q) - int_0^t K_N(t - s) P(s) ds,     K_N(t) = sum_j c_j^2 / omega_j^2 cos(omega_j t)

so the particle's first state is all a row needs (the rows' ``seq_len`` is 1, the window every row is handed):

- ``gle`` ([`GLEStep`][vpintegrator.rollout.gle.GLEStep], [`gle_row`][vpintegrator.rollout.gle.gle_row]): the GLE
  with the exact kernel ``K_N``, by velocity Verlet with the memory integral by the trapezoidal rule on the step
  grid (convolution quadrature, order 2 in the step; ``vpintegrator.compiled.bath.gle_steps``). Its cost does not
  depend on N: O(n) per step over the whole history, or O(memory / dt) with the memory cut at ``memory`` time
  units (``GLEStep(memory=...)``; K_N is not zero after its envelope decays, so the cut is a further error), or
  O(terms) with the kernel fitted by a sum of exponentials (``GLEStep(fit=tol)``, the row's default: the matrix
  pencil fit of [`exponential_fit`][vpintegrator.rollout.gle.exponential_fit], the fewest terms whose kernel is
  within ``tol`` of K_N on the fit window, relative to K_N(0); the same trapezoidal rule then runs as one
  recursion per term).
- ``bath+METHOD`` ([`BathStep`][vpintegrator.rollout.gle.BathStep], [`bath_row`][vpintegrator.rollout.gle.bath_row]):
  the full-order model, the bath lifted at rest from the particle's first state (``System.bath_at_rest``: exact for
  this convention), stepped by the compiled O(N) loops of ``vpintegrator.compiled.bath`` (METHOD
  ``stormer_verlet`` or, for ``kac_zwanzig``, ``bath_splitting``); also for ``particle_chain``.
- ``coarse_bath+METHOD`` ([`CoarseBathStep`][vpintegrator.rollout.gle.CoarseBathStep],
  [`coarse_bath_row`][vpintegrator.rollout.gle.coarse_bath_row]): the same with the coarse bath of
  ``KacZwanzig.coarse``: a full-order model of a smaller bath, valid to t = 100 first and rebuilt for a longer run.

The ``gle`` row's fitted kernel holds ``K_N`` on its fit window (twice the memory time) and decays after it; ``K_N``
itself recurs at ``2 pi N / omega_max`` (157 at N = 100): past that time the particle of the N-oscillator bath feels
an echo that only the direct quadrature (``GLEStep(fit=None)``) keeps.

The rows run on an observed run of the particle (``observe = "q0,p0"``: ``vp-rollout`` scores them on the observed
channels); their step maps also take a plain system and the particle's channels in Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError, finite_float
from .engine import StepMap

__all__ = ["GLEStep", "BathStep", "CoarseBathStep", "exponential_fit", "GLE_FIT_TOL", "gle_row", "bath_row",
           "coarse_bath_row", "gle_solve", "particle_channels",
           "GLE_SUMMARY", "BATH_SUMMARY", "COARSE_SUMMARY"]

#: the ``gle`` row's kernel fit: a sum of exponentials within this fraction of K(0) on the fit window
GLE_FIT_TOL = 1e-7

GLE_SUMMARY = ("kac_zwanzig observed in its particle: the GLE with the exact memory kernel from the first observed "
               "state (velocity Verlet + trapezoidal convolution quadrature, order 2)")
BATH_SUMMARY = ("particle-bath systems observed in their particle: the full-order model, the bath lifted at rest from "
                "the first observed state, by METHOD (stormer_verlet, bath_splitting)")
COARSE_SUMMARY = ("kac_zwanzig observed in its particle: the coarse bath (the same density on fewer oscillators, "
                  "matched to the run's horizon), by METHOD")


def particle_channels(system: Any, where: str = "gle") -> tuple[Any, tuple[int, int]]:
    """``(full system, (i_Q, i_P))``: the particle-bath system behind a run's system and where its particle's Q and P
    are among the run's channels: an observed run (``ObservedSystem``) observing ``q0`` and ``p0`` (channels of the
    observation), or a particle-bath system itself (channels 0 and N + 1 of the state)."""
    full = getattr(system, "full", None)
    obs = getattr(system, "observation", None)
    if full is None:
        full = system
    n = getattr(full, "N", None)
    if not callable(getattr(full, "bath_at_rest", None)) or n is None:
        raise VPIntegratorError(f"{where}: the row is the particle-bath systems' (kac_zwanzig, particle_chain); the "
                                f"run's system is {getattr(full, 'name', full)!r}", key="integrators")
    if obs is None:
        return full, (0, int(n) + 1)
    idx = tuple(obs.indices or ())
    if 0 not in idx or int(n) + 1 not in idx:
        raise VPIntegratorError(f"{where}: the row starts from the observed particle: observe must hold q0 and p0 "
                                f"(e.g. 'q0,p0'), not {obs.spec!r}", key="observe")
    return full, (idx.index(0), idx.index(int(n) + 1))


def _need_kz(system: Any, where: str) -> Any:
    from ..systems.kac_zwanzig import KacZwanzig

    if not isinstance(system, KacZwanzig):
        raise VPIntegratorError(f"{where}: the row needs the harmonic bath of kac_zwanzig (a linear memory kernel); "
                                f"the run's system is {getattr(system, 'name', system)!r}", key="integrators")
    return system


class _ParticleRow(StepMap):
    """The shared part of the arena's rows: one observed particle state in, the particle's channels out."""

    kind = "integrator"

    def __init__(self, channels: tuple[int, int], dim: int) -> None:
        self.channels = (int(channels[0]), int(channels[1]))
        self.dim: int = int(dim)
        self.seq_len: int = 1
        self.pred_window: int = 1

    #: the run's data file, whose trajectories must start with the bath at rest (checked once, at the first start)
    data: Any = None
    #: the particle-bath system the row's bath is lifted for (set by the subclasses)
    bath_system: Any = None
    #: the check's verdict: None (not read yet), "" (at rest) or the refusal
    _rest: str | None = None

    def _check_rest(self) -> None:
        """Refuse, in one line, a data file whose trajectories do not start with the bath at rest (the rows lift the
        bath from the particle: on such a file they would integrate another motion)."""
        if self.data is None or self.bath_system is None:
            return
        if self._rest is None:  # read once; a refusal is raised at every start (a warm-up may swallow the first)
            from ..data import read_trajectories

            y0 = read_trajectories(self.data, steps=np.array([0])).y[:, 0]
            system = self.bath_system
            self._rest = ""
            if y0.shape[-1] == system.dim:  # (observed channels only: nothing to check)
                lifted = system.bath_at_rest(y0[:, 0], y0[:, system.N + 1])
                bad = np.flatnonzero(np.abs(lifted - y0).max(axis=-1) > 1e-12 * (1.0 + np.abs(y0).max(axis=-1)))
                if bad.size:
                    self._rest = (f"{self.name}: trajectory {int(bad[0])} of {self.data} does not start with the bath "
                                  "at rest (the row lifts the bath from the particle); generate with the sampler "
                                  "'particle'")
        if self._rest:
            raise VPIntegratorError(self._rest, key="integrators")

    def _particle0(self, window0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._check_rest()
        w = np.asarray(window0, dtype=np.float64)
        if w.ndim != 3 or w.shape[2] != self.dim:
            raise VPIntegratorError(f"{self.name}: windows must be (n, 1, {self.dim}); got {w.shape}")
        return w[:, 0, self.channels[0]].copy(), w[:, 0, self.channels[1]].copy()

    def _emit(self, particle: np.ndarray) -> np.ndarray:
        """(rows, n, 2) particle states as (rows, n, dim) channels (the other channels NaN: none exist in an observed
        run of the particle)."""
        if self.dim == 2 and self.channels == (0, 1):
            return particle
        out = np.full(particle.shape[:2] + (self.dim,), np.nan)
        out[..., self.channels[0]] = particle[..., 0]
        out[..., self.channels[1]] = particle[..., 1]
        return out

    def log_abs_det_jacobian(self, windows: np.ndarray) -> np.ndarray:
        """NaN: the map of the observed particle alone is not a map of its channels (it has memory)."""
        return np.full(np.asarray(windows).shape[0], np.nan)



def exponential_fit(K: np.ndarray, h: float, tol: float, max_terms: int = 60,
                    samples: int = 400) -> tuple[np.ndarray, np.ndarray, float]:
    """A sum of exponentials for a kernel sampled on the step grid: ``K_j ~ Re sum_k a_k z_k^j`` (j = 0 .. L).

    The matrix pencil method on at most ``samples`` of the values (every s-th: a fit on a grid of step ``s h``,
    its poles taken back to step h by ``z = exp(log(z_s) / s)``), the number of terms from the count of singular
    values above ``tol / 10`` of the largest, raised by pairs (at most 4 times, at most ``max_terms``; |z| < 1 kept:
    no growing term) until ``max_j |K_j - fit_j| <= tol |K_0|``. Returns ``(a, z, worst)``: complex
    amplitudes and poles for step h, and the fit's largest error relative to ``|K_0|`` on the grid."""
    K = np.asarray(K, dtype=np.float64)
    stride = max(1, int(np.ceil((K.size - 1) / samples)))
    y = K[::stride]
    L = y.size - 1
    pencil = max(2, L // 2)
    hank = np.lib.stride_tricks.sliding_window_view(y, pencil + 1)  # (L - pencil + 1, pencil + 1)
    _, sv, vh = np.linalg.svd(hank, full_matrices=False)
    j = np.arange(K.size)
    scale = max(abs(K[0]), 1e-300)
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    top = min(max_terms, sv.size - 1)
    first = int(np.count_nonzero(sv > 0.1 * tol * sv[0]))  # the rank the tolerance sees: start there, try 4 more
    first = min(max(2, first + first % 2), top)
    for terms in range(first, min(top, first + 8) + 1, 2):
        v = vh[:terms].conj().T
        zs = np.linalg.eigvals(np.linalg.lstsq(v[:-1], v[1:], rcond=None)[0])
        zs = zs[np.abs(zs) < 1.0]
        if zs.size == 0:
            continue
        z = np.exp(np.log(zs.astype(complex)) / stride)
        vander = z[None, :] ** j[:, None]
        a = np.linalg.lstsq(vander, K.astype(complex), rcond=None)[0]
        worst = float(np.abs((vander @ a).real - K).max() / scale)
        if best is None or worst < best[2]:
            best = (a, z, worst)
        if worst <= tol:
            break
    if best is None:
        raise VPIntegratorError("gle: no decaying sum of exponentials fits the kernel; use the direct quadrature "
                                "(fit=None)", key="fit")
    return best


class GLEStep(_ParticleRow):
    """``gle``: the particle's GLE with the exact kernel of a ``kac_zwanzig`` system (module docstring).

    Parameters
    ----------
    system : KacZwanzig
        The full system (its kernel ``K_N``).
    dt : float
        The step (the run's).
    memory : float, optional
        Cut the memory integral after this many time units (None: the whole history, exact quadrature). With
        ``fit``: the fit window (default twice ``system.memory_time()``).
    fit : float, optional
        Fit the kernel by a sum of exponentials within ``fit`` of K(0) on the fit window (``exponential_fit``) and
        run the recursion, O(terms) per step; where no decaying sum is that close (a small bath, whose kernel
        recurs inside the window), the direct quadrature over the whole history (``describe`` says which). None
        (the default here; the ``gle`` row uses ``GLE_FIT_TOL``): the direct quadrature.
    channels : (int, int)
        Where Q and P are among the window's ``dim`` channels. Default (0, 1).
    dim : int
        The window's channels. Default 2.
    """

    def __init__(self, system: Any, dt: float, memory: float | None = None, channels: tuple[int, int] = (0, 1),
                 dim: int = 2, fit: float | None = None) -> None:
        super().__init__(channels, dim)
        self.system = self.bath_system = _need_kz(system, "gle")
        self.h = finite_float(dt, "gle: dt", positive=True, key="dt")
        self.fit = None if fit is None else finite_float(fit, "gle: fit", positive=True, key="fit")
        self._soe: tuple[np.ndarray, np.ndarray, float] | None = None
        self._fitted: float | None = None  # the fit's error once tried
        if self.fit is not None and memory is None:
            memory = 2.0 * self.system.memory_time()
        if memory is None:
            self.m = np.iinfo(np.int64).max // 4
        else:
            mem = finite_float(memory, "gle: memory", positive=True, key="memory")
            self.m = max(1, int(round(mem / self.h)))
        self.memory = memory
        self.name = "gle"
        self._K = np.zeros(0)

    def _kernel_to(self, steps: int) -> np.ndarray:
        """K_0 .. K_L on the step grid, L >= min(steps, m) (extended by doubling: computed once per length)."""
        need = min(int(steps), self.m) + 1
        if self._K.size < need:
            size = need if self.m < np.iinfo(np.int64).max // 4 else max(need, 2 * self._K.size, 1024)
            size = min(size, self.m + 1)
            have = self._K.size
            self._K = np.concatenate([self._K, self.system.kernel(self.h * np.arange(have, size))])
        return self._K

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        """Begin every row at step 0 from its particle state (the kernel grid is kept from earlier starts)."""
        self._Q0, self._P0 = self._particle0(window0)
        rows_n = self._Q0.size
        self._Q, self._P, self._M = self._Q0.copy(), self._P0.copy(), np.zeros(rows_n)
        self._hist = np.zeros((rows_n, 1024))
        self._count = np.zeros(rows_n, dtype=np.int64)
        if self.fit is not None and self._fitted is None:  # set-up, once: the kernel on the fit window and its fit
            soe = exponential_fit(self._kernel_to(self.m), self.h, self.fit)
            self._fitted = soe[2]
            if soe[2] <= self.fit:
                self._soe = soe
            else:  # no decaying sum fits (a small bath's kernel recurs inside the window): the direct quadrature
                self.m = np.iinfo(np.int64).max // 4
        if self._soe is not None:
            self._U = np.zeros((rows_n, self._soe[0].size), dtype=complex)
        self._restart(np.arange(rows_n))

    def _restart(self, rows: np.ndarray) -> None:
        self._Q[rows], self._P[rows], self._M[rows] = self._Q0[rows], self._P0[rows], 0.0
        self._hist[rows, 0] = self._P0[rows]
        self._count[rows] = 0
        if self._soe is not None:
            self._U[rows] = 0.5 * self._soe[1][None, :] * self._P0[rows, None]

    def generate(self, n: int) -> np.ndarray:
        from ..compiled.bath import gle_soe_steps, gle_steps

        n = int(n)
        out = np.empty((self._Q.size, n, 2))
        if self._soe is not None:
            a, z, _ = self._soe
            gle_soe_steps(self._Q, self._P, self._M, self._U, a, z, float((a.sum()).real), self.h, n, out)
            self._count += n
            return self._emit(out)
        top = int(self._count.max(initial=0)) + n + 1
        if self._hist.shape[1] < top:
            grown = np.zeros((self._hist.shape[0], max(top, 2 * self._hist.shape[1])))
            grown[:, : self._hist.shape[1]] = self._hist
            self._hist = grown
        K = self._kernel_to(top)
        for count in np.unique(self._count):  # rows restarted by reset() are at another step
            rows = np.flatnonzero(self._count == count)
            Q, P, M, hist = self._Q[rows], self._P[rows], self._M[rows], self._hist[rows]
            block = np.empty((rows.size, n, 2))
            gle_steps(Q, P, M, hist, int(count), K, int(self.m), self.h, n, block)
            self._Q[rows], self._P[rows], self._M[rows], self._hist[rows] = Q, P, M, hist
            out[rows] = block
        self._count += n
        return self._emit(out)

    def reset(self, rows: np.ndarray) -> None:
        self._restart(np.asarray(rows, dtype=np.int64))

    def describe(self) -> dict[str, Any]:
        info = {**super().describe(), "runner": "numba", "gle_scheme": "velocity Verlet + trapezoidal convolution "
                "quadrature (order 2)", "gle_memory": "whole history" if self.memory is None else float(self.memory),
                "bath_N": int(self.system.N)}
        if self._soe is not None:
            info.update(gle_kernel="sum of exponentials (matrix pencil)", gle_terms=int(self._soe[0].size),
                        gle_fit_error=float(self._soe[2]))
        elif self._fitted is not None:
            info.update(gle_kernel=f"direct quadrature (no decaying sum of exponentials within {self.fit:g} of K(0): "
                                   f"best {self._fitted:.2g})", gle_memory="whole history")
        return info


class BathStep(_ParticleRow):
    """``bath+METHOD`` / ``coarse_bath+METHOD``: the full-order particle-bath model from the observed particle,
    the bath lifted at rest (``bath_at_rest``), stepped by ``vpintegrator.compiled.bath`` (module docstring).

    Parameters
    ----------
    system : KacZwanzig or ParticleChain
        The model integrated (the coarse bath for ``coarse_bath``).
    method : str
        ``stormer_verlet`` or ``bath_splitting`` (``kac_zwanzig`` only).
    dt : float
    channels, dim : as for ``GLEStep``.
    label : str, optional
        The row's name.
    """

    def __init__(self, system: Any, method: str, dt: float, channels: tuple[int, int] = (0, 1), dim: int = 2,
                 label: str | None = None) -> None:
        from ..compiled.bath import bath_stepper

        super().__init__(channels, dim)
        self.system = self.bath_system = system
        self.stepper = bath_stepper(system, method, dt)
        self.name: str = label or f"bath+{method}"

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        Q0, P0 = self._particle0(window0)
        self._y0 = self.system.bath_at_rest(Q0, P0)
        self._y = self._y0.copy()

    def generate(self, n: int) -> np.ndarray:
        n = int(n)
        out = np.empty((self._y.shape[0], n, 2))
        for r in range(self._y.shape[0]):
            self.stepper.step(self._y[r], n, out[r])
        return self._emit(out)

    def reset(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self._y[rows] = self._y0[rows]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "runner": "numba", "bath_method": self.stepper.method,
                "bath_N": int(self.system.N)}


def gle_row(req: Any) -> GLEStep:
    """The ``gle`` row of a comparison run (a row kind's ``build``: ``req`` a ``RowRequest``: its ``system``, the
    observed run's, ``dt`` and ``data``, whose trajectories must start with the bath at rest: checked when the row
    starts, one line otherwise)."""
    full, channels = particle_channels(req.system, "gle")
    step = GLEStep(full, req.dt, None, channels, int(req.system.dim), fit=GLE_FIT_TOL)
    step.data = getattr(req, "data", None)
    return step


def bath_row(req: Any) -> BathStep:
    """The ``bath+METHOD`` row (a row kind's ``build``)."""
    full, channels = particle_channels(req.system, str(req.label))
    step = BathStep(full, str(req.integrator), req.dt, channels, int(req.system.dim), label=str(req.label))
    step.data = getattr(req, "data", None)
    return step


class CoarseBathStep(BathStep):
    """``coarse_bath+METHOD``: the coarse bath of a ``kac_zwanzig`` system (``KacZwanzig.coarse``) for a horizon
    that grows with the run: it starts valid to ``t_max``, and a step past that horizon rebuilds the coarse bath for
    twice the time needed and replays each row from its first state (a bath of M oscillators recurs after
    ``2 pi M / omega_c``: without this a long run would see echoes the full bath does not have before it). Every
    state is thus made by a coarse bath valid at its time; the replays at most double the work.

    Parameters
    ----------
    system : KacZwanzig
        The full system.
    method, dt, channels, dim, label : as for ``BathStep``.
    t_max : float
        The first horizon. Default 100 (the arena's).
    """

    def __init__(self, system: Any, method: str, dt: float, channels: tuple[int, int] = (0, 1), dim: int = 2,
                 label: str | None = None, t_max: float = 100.0) -> None:
        self.full = _need_kz(system, str(label or "coarse_bath"))
        self.t_max = finite_float(t_max, "coarse_bath: t_max", positive=True, key="t_max")
        self.method = method
        super().__init__(self.full.coarse(self.t_max), method, dt, channels, dim,
                         label=label or f"coarse_bath+{method}")
        self.bath_system = self.full  # the data's bath

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        super().start(window0, limit)
        self._done = np.zeros(self._y.shape[0], dtype=np.int64)

    def _grow(self, steps: int) -> None:
        """Rebuild the coarse bath for twice the time of ``steps`` steps and replay every row to where it is."""
        from ..compiled.bath import bath_stepper

        h = self.stepper.h
        self.t_max = max(2.0 * self.t_max, 2.0 * steps * h)
        self.system = self.full.coarse(self.t_max)
        self.stepper = bath_stepper(self.system, self.method, h)
        Q0, P0 = self._y0[:, 0], self._y0[:, self._y0.shape[1] // 2]
        self._y0 = self.system.bath_at_rest(Q0, P0)
        self._y = self._y0.copy()
        for r in range(self._y.shape[0]):
            if self._done[r]:
                self.stepper.step(self._y[r], int(self._done[r]), np.empty((int(self._done[r]), 2)))

    def generate(self, n: int) -> np.ndarray:
        n = int(n)
        if (int(self._done.max(initial=0)) + n) * self.stepper.h > self.t_max and self.system is not self.full:
            self._grow(int(self._done.max(initial=0)) + n)
        out = super().generate(n)
        self._done += n
        return out

    def reset(self, rows: np.ndarray) -> None:
        super().reset(rows)
        self._done[np.asarray(rows, dtype=np.int64)] = 0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "coarse_horizon": float(self.t_max), "full_N": int(self.full.N)}


def coarse_bath_row(req: Any, t_max: float = 100.0) -> CoarseBathStep:
    """The ``coarse_bath+METHOD`` row (a row kind's ``build``): the coarse bath, valid to ``t_max`` first and
    rebuilt for longer runs (``CoarseBathStep``)."""
    full, channels = particle_channels(req.system, str(req.label))
    step = CoarseBathStep(full, str(req.integrator), req.dt, channels, int(req.system.dim), label=str(req.label),
                          t_max=t_max)
    step.data = getattr(req, "data", None)
    return step


def gle_solve(system: Any, Q0: Any, P0: Any, dt: float, n_steps: int, memory: float | None = None,  # noqa: N803
              fit: float | None = None) -> np.ndarray:
    """The GLE's particle from ``(Q0, P0)`` (numbers or (rows,) arrays): (rows, n_steps + 1, 2) (``GLEStep``'s
    ``memory`` and ``fit``)."""
    step = GLEStep(system, dt, memory, fit=fit)
    Q0, P0 = np.broadcast_arrays(np.atleast_1d(np.asarray(Q0, dtype=np.float64)),
                                 np.atleast_1d(np.asarray(P0, dtype=np.float64)))
    window = np.stack([Q0, P0], axis=-1)[:, None, :]
    step.start(window, None)
    return np.concatenate([window, step.generate(int(n_steps))], axis=1)
