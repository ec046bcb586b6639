"""The hidden-bath arena's whole-window estimate (``estimate+gle``, ``estimate+bath+METHOD``: ``WindowEstimatedStep``,
``estimate_first_state``): the particle's first state by least squares on the row's own flow over the first K
observed states, then the row. Held against references written here: a linear row's closed-form least squares, and
SciPy's ``least_squares`` on the same objective made from plain rollouts of the row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vpintegrator.rollout.engine import StepMap, rollout

H = 0.2


class _Linear(StepMap):
    """A row of one state: y_{j+1} = A y_j (two channels)."""

    kind, seq_len, pred_window, dim, name = "integrator", 1, 1, 2, "linear"

    def __init__(self, A: np.ndarray) -> None:
        self.A = A

    def start(self, window0, limit):
        self._y0 = np.asarray(window0, dtype=np.float64)[:, 0].copy()
        self._y = self._y0.copy()

    def generate(self, n):
        out = np.empty((len(self._y), int(n), 2))
        for j in range(int(n)):
            self._y = self._y @ self.A.T
            out[:, j] = self._y
        return out

    def reset(self, rows):
        self._y[rows] = self._y0[rows]


def _observed_bath(N: int = 20):
    from vpintegrator.data.observation import resolve_observation
    from vpintegrator.rollout.observed import ObservedSystem
    from vpintegrator.systems import get_system

    kz = get_system("kac_zwanzig", N=N)
    obs = resolve_observation(f"0,{N + 1}", kz.dim, kz.state_names, kz.name)
    return ObservedSystem(dim=2, source="test", full=kz, observation=obs)


def _rows(names, K, N=20):
    from vpintegrator.rollout.methods import StepSettings, prepare_methods

    methods = prepare_methods(list(names), [], _observed_bath(N), H, 0.0, 50, Path("unused.h5"),
                              StepSettings(context_len=K))
    steps = {m.label: m.step_map for m in methods}
    for step in steps.values():  # no data file to check the bath's rest against (the rows here start from windows)
        getattr(step, "inner", step).data = None
    return steps


def test_a_linear_row_gets_the_closed_form_least_squares_first_state():
    """For y_j = A^j z the objective sum_j |A^j z - w_j|^2 is linear least squares: z = argmin |M z - w| with M the
    stacked A^j. The estimate is it, and the row rolled out by the engine continues from it: its states from step
    K on are A^j z, the window's states the observed ones."""
    from vpintegrator.rollout.observed import WindowEstimatedStep, estimate_first_state

    A = np.array([[0.98, 0.19], [-0.19, 0.97]])
    K, rng = 6, np.random.default_rng(1)
    z_true = rng.normal(size=(4, 2))
    clean = np.stack([[np.linalg.matrix_power(A, j) @ z for j in range(K)] for z in z_true])
    windows = clean + 1e-2 * rng.normal(size=clean.shape)
    M = np.concatenate([np.linalg.matrix_power(A, j) for j in range(K)])  # (2K, 2)
    best = np.stack([np.linalg.lstsq(M, w.ravel(), rcond=None)[0] for w in windows])
    z, residual = estimate_first_state(_Linear(A), windows)
    np.testing.assert_allclose(z, best, rtol=0, atol=1e-10)
    assert np.abs(z - windows[:, 0]).max() > 1e-3  # the window moved it off the first observed state
    assert np.all(residual > 0) and np.all(residual < 0.05)
    y = rollout(WindowEstimatedStep(_Linear(A), K), windows, H, 12).y
    np.testing.assert_array_equal(y[:, :K], windows)
    want = np.stack([[np.linalg.matrix_power(A, j) @ b for j in range(13)] for b in best])
    np.testing.assert_allclose(y[:, K:], want[:, K:], rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["gle", "bath+stormer_verlet", "bath+bath_splitting_y6"])
def test_noise_free_windows_give_back_the_first_state(name):
    """On windows the row itself made, from a start 0.05 off, the estimate converges to the true first state (the
    double well makes the problem nonlinear)."""
    from vpintegrator.rollout.observed import estimate_first_state

    K = 5
    row = _rows([name], K)[name]
    rng = np.random.default_rng(2)
    z0 = rng.uniform(-1.5, 1.5, size=(6, 1, 2))
    windows = rollout(row, z0, H, K - 1).y
    z, residual = estimate_first_state(row, windows, start=z0[:, 0] + 0.05 * rng.standard_normal((6, 2)))
    np.testing.assert_allclose(z, z0[:, 0], rtol=0, atol=1e-10)
    assert residual.max() < 1e-10


def test_noisy_windows_against_scipy_least_squares_on_plain_rollouts():
    """With noise 1e-3 on every state of a window of 8, the estimate equals SciPy's ``least_squares`` on the same
    objective, each residual made by a fresh rollout of the ``gle`` row from the candidate first state; the row from
    it (``estimate+gle``) is the ``gle`` row started there, and closer to the clean trajectory at t = 10 than the
    row from the first noisy state."""
    from scipy.optimize import least_squares

    K = 8
    rows = _rows(["gle", "estimate+gle"], K)
    row, smoothed = rows["gle"], rows["estimate+gle"]
    rng = np.random.default_rng(4)
    z0 = rng.uniform(-1.5, 1.5, size=(5, 1, 2))
    clean = rollout(row, z0, H, 50).y
    windows = clean[:, :K] + 1e-3 * rng.standard_normal((5, K, 2))

    def reference(w):
        def res(z):
            return (rollout(row, z[None, None, :], H, K - 1).y[0] - w).ravel()

        return least_squares(res, w[0], xtol=1e-15, ftol=1e-15, gtol=1e-15).x

    want = np.stack([reference(w) for w in windows])
    y = rollout(smoothed, windows, H, 50).y
    from_want = rollout(row, want[:, None, :], H, 50).y
    np.testing.assert_allclose(y[:, K:], from_want[:, K:], rtol=0, atol=1e-8)
    first = rollout(row, windows[:, :1], H, 50).y
    err = lambda a: np.linalg.norm(a[:, -1] - clean[:, -1], axis=-1)  # noqa: E731
    assert np.median(err(y)) < 0.5 * np.median(err(first))
    assert smoothed.describe()["context_len"] == K and smoothed.name == "estimate+gle"


def test_the_rows_names_and_refusals():
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.rollout.observed import WindowEstimatedStep

    rows = _rows(["estimate+bath+stormer_verlet", "estimate+gle"], 4)
    assert all(isinstance(s, WindowEstimatedStep) and s.seq_len == 4 for s in rows.values())
    assert rows["estimate+bath+stormer_verlet"].inner.name == "bath+stormer_verlet"
    with pytest.raises(VPIntegratorError, match="bath\\+METHOD|needs a classical method"):
        _rows(["estimate+bath"], 4)
    with pytest.raises(VPIntegratorError, match="gle or bath"):
        _rows(["estimate+nonsense"], 4)


def test_the_memory_study_adds_the_whole_window_rows_to_the_bath():
    """The memory study's smoother rows on the bath arena: every known row over the whole window."""
    from vpintegrator.studies.memory.ladder import smoother_steps

    steps = smoother_steps("kac_zwanzig", _observed_bath(), Path("unused.h5"), 4)
    assert set(steps) == {"estimate+gle", "estimate+bath+stormer_verlet", "estimate+bath+bath_splitting_y6"}
    assert all(s.seq_len == 4 for s in steps.values())
