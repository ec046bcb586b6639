"""ModelStep packs and checks its compiled model once and reuses it on later starts (issue 86: a rollout call costs
what its steps cost), and packs and checks again whenever the model's weights change: in place, by assignment or
by ``load_state_dict``; the rollout then follows the new weights, equal to a fresh ModelStep's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout import ModelStep, rollout
from vpintegrator.rollout import steps

cm = pytest.importorskip("vpintegrator.rollout.numba_model")
pytestmark = pytest.mark.skipif(not cm.AVAILABLE, reason="numba not installed")


def gru() -> torch.nn.Module:
    """A float64 GRU window model with every weight random (its zero-initialised readout too)."""
    torch.manual_seed(0)
    model = build_model("gru", dim=2, seq_len=4).double().eval()
    with torch.no_grad():
        model.readout.out.weight.normal_(0.0, 0.01)
    return model


@pytest.fixture
def checks(monkeypatch):
    """The models ``compiled_model`` packed and checked, one entry a call."""
    seen: list = []
    real = steps.compiled_model

    def counted(model, example):
        seen.append(model)
        return real(model, example)

    monkeypatch.setattr(steps, "compiled_model", counted)
    return seen


WINDOW = np.array([[[0.3, -0.2], [0.31, -0.21], [0.32, -0.22], [0.33, -0.23]]])  # (1, seq_len, dim)


def run(step: ModelStep, window: np.ndarray = WINDOW) -> np.ndarray:
    y = rollout(step, window, 0.1, 60).y
    assert step.describe()["runner"] == "numba"
    return y


def fresh(model: torch.nn.Module) -> np.ndarray:
    return rollout(ModelStep(model, device="cpu"), WINDOW, 0.1, 60).y


def test_the_compiled_model_is_checked_once_and_reused(checks):
    model = gru()
    step = ModelStep(model, device="cpu")
    first = run(step)
    again = run(step)
    other = run(step, np.concatenate([WINDOW, WINDOW + 0.1]))  # another batch and windows: the same kernel
    assert len(checks) == 1
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(other[:1], first)
    np.testing.assert_array_equal(first, fresh(model))


def _in_place(model):
    with torch.no_grad():
        model.readout.out.weight.mul_(3.0)


def _assigned(model):
    model.readout.out.weight = torch.nn.Parameter(3.0 * model.readout.out.weight.detach())


def _loaded(model):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["readout.out.weight"] *= 3.0
    model.load_state_dict(state)


@pytest.mark.parametrize("change", [_in_place, _assigned, _loaded])
def test_a_weight_changed_between_rollouts_is_checked_again_and_followed(checks, change):
    model = gru()
    step = ModelStep(model, device="cpu")
    before = run(step)
    change(model)
    after = run(step)
    assert len(checks) == 2  # the new weights packed and checked against torch
    assert np.abs(after - before).max() > 1e-6  # the change is seen in the states
    np.testing.assert_array_equal(after, fresh(model))  # the new weights' rollout, as a new ModelStep rolls it
    with torch.inference_mode():  # and torch's: the first predicted state
        want = model(torch.as_tensor(WINDOW))[0, 0].numpy()
    np.testing.assert_allclose(after[0, WINDOW.shape[1]], want, rtol=1e-12, atol=1e-12)


def test_a_module_built_elsewhere_leaves_the_check_alone(checks):
    model = gru()
    step = ModelStep(model, device="cpu")
    run(step)
    gru()  # parameters registered on another model: this one walked again, found the same, not checked again
    run(step)
    assert len(checks) == 1
