"""The Casimir of a Lie–Poisson Hamiltonian network under the collocation methods (issue 43's target).

The field z × ∇H_θ(z) is tangent to the spheres ‖z‖ = const for any weights θ, and implicit midpoint and the
Gauss–Legendre methods keep every quadratic invariant of a field exactly. Rolled out by either, ‖z‖² must then
stay at its initial value to round-off, whatever H_θ is: the check runs on several weight draws, the
networks' weights scaled up so that the field is far from linear, over 10⁴ steps of h = 0.2 (t = 2000).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout.engine import rollout
from vpintegrator.rollout.field import LearnedField
from vpintegrator.rollout.steps import IntegratorStep

H = 0.2
STEPS = 10_000


def _lphnn(seed: int, scale: float, method: str = "implicit_midpoint") -> torch.nn.Module:
    """An lphnn of width 16, depth 2 with its initial weights times ``scale`` (any weights keep the Casimir)."""
    torch.manual_seed(seed)
    model = build_model("lphnn", dim=3, dt=H, method=method, width=16, depth=2).double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def _casimir_drift(y: np.ndarray) -> float:
    """The largest relative change of ‖z‖² along each trajectory; y (n, T, 3)."""
    c = np.sum(y ** 2, axis=-1)
    return float(np.max(np.abs(c - c[:, :1]) / c[:, :1]))


@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
@pytest.mark.parametrize("seed,scale", [(0, 1.0), (1, 2.0), (2, 3.0)])
def test_lphnn_collocation_rollout_keeps_the_casimir_over_ten_thousand_steps(method, seed, scale):
    pytest.importorskip("numba")  # the compiled stepper: 10⁴ steps in well under a second
    field = LearnedField(_lphnn(seed, scale))
    z0 = np.random.default_rng(seed).normal(size=(2, 3))
    z0 *= np.array([[1.0], [1.7]]) / np.linalg.norm(z0, axis=1, keepdims=True)  # radii 1 and 1.7
    step = IntegratorStep(field, method, H)
    tr = rollout(step, z0[:, None], H, STEPS)
    assert step.describe()["runner"] == "numba"
    assert tr.y.shape == (2, STEPS + 1, 3) and np.isfinite(tr.y).all()
    # the flow moves the state (a frozen rollout would keep ‖z‖² trivially)
    assert float(np.min(np.linalg.norm(tr.y[:, 1:] - tr.y[:, :1], axis=-1).max(axis=1))) > 1e-2
    assert _casimir_drift(tr.y) <= 1e-12


@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
def test_lphnn_collocation_rollout_in_numpy_keeps_the_casimir(method):
    """The NumPy path (batches, machines without numba) keeps it too; 1 000 steps to stay fast."""
    field = LearnedField(_lphnn(3, 2.0))
    z0 = np.random.default_rng(3).normal(size=(8, 3))
    tr = rollout(IntegratorStep(field, method, H, compiled_max_batch=0), z0[:, None], H, 1_000)
    assert np.isfinite(tr.y).all()
    assert _casimir_drift(tr.y) <= 1e-12


@pytest.mark.parametrize("method", ["rk4"])
def test_rk4_does_not_keep_the_casimir_of_the_same_field(method):
    """The control: an explicit Runge–Kutta method drifts on the same field, so the checks above have teeth."""
    pytest.importorskip("numba")
    field = LearnedField(_lphnn(1, 2.0))
    z0 = np.random.default_rng(1).normal(size=(2, 3))
    tr = rollout(IntegratorStep(field, method, H), z0[:, None], H, STEPS)
    assert _casimir_drift(tr.y) > 1e-10


@pytest.mark.parametrize("method", ["implicit_midpoint", "gauss_legendre4"])
def test_lphnn_training_step_in_torch_keeps_the_casimir(method):
    """The window map vp-train fits (the torch collocation step, Newton to tol) keeps ‖z‖² step after step."""
    model = _lphnn(4, 2.0, method)
    z = torch.as_tensor(np.random.default_rng(4).normal(size=(16, 1, 3)))
    c0 = (z ** 2).sum(-1)
    with torch.no_grad():
        for _ in range(300):
            z = model(z)
    c = (z ** 2).sum(-1)
    assert torch.isfinite(z).all()
    assert float(((c - c0).abs() / c0).max()) <= 1e-12
