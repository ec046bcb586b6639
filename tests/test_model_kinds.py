"""Every model kind, fitted or trained, behind one interface (issue 87 item 5, ``vpintegrator.training.trained``):
``list_kinds`` lists the fitted kinds and the registered networks, ``kind_class(NAME)`` gives each kind's class,
``fit_on`` fits or trains it on a training split, and ``save`` / ``load_kind`` round-trip it to a model that steps
to the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.data import solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import FittedModel, fitted_class, list_fitted, list_models
from vpintegrator.rollout import rollout
from vpintegrator.systems import RigidBody
from vpintegrator.training.trained import TrainedModel, kind_class, list_kinds, load_kind

H = 0.2
#: one network (a few Levenberg-Marquardt steps: the test is of the interface, not the training) and one fitted kind
KINDS = {
    "vpff": {"dt": H, "max_steps": 10, "optimizer": "lm"},
    "arx": {"context_len": 2},
}


def _trajectories(n: int, seed: int, n_states: int = 21) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return solve_flow(RigidBody(), y0, H * np.arange(n_states))


def test_one_list_holds_the_fitted_kinds_and_the_networks():
    assert list_kinds() == list_fitted() + list_models()
    for name in list_models():
        cls = kind_class(name)
        assert issubclass(cls, TrainedModel) and cls.row == name and cls is kind_class(name)
    assert all(kind_class(name) is fitted_class(name) for name in list_fitted())
    assert not set(list_models()) & set(list_fitted())  # a network is not registered as a fitted row


def test_an_unknown_kind_is_one_line_listing_fitted_and_trained_kinds():
    with pytest.raises(VPIntegratorError) as err:
        kind_class("nope")
    text = str(err.value)
    assert "\n" not in text and "'nope'" in text and "arx" in text and "vpt" in text


@pytest.mark.parametrize("name", list(KINDS))
def test_a_trained_and_a_fitted_kind_fit_save_load_and_step_alike(name, tmp_path):
    cls = kind_class(name)
    model = cls.fit_on(_trajectories(6, 0), _trajectories(2, 1), **KINDS[name])
    assert isinstance(model, FittedModel)
    loaded = load_kind(model.save(tmp_path / ("model.pt" if issubclass(cls, TrainedModel) else "model.npz")))
    assert type(loaded) is cls
    window0 = _trajectories(3, 2)[:, : model.seq_len]
    want, got = rollout(model, window0, H, 10).y, rollout(loaded, window0, H, 10).y
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(got, want)
    keep = {k: v for k, v in model.describe().items() if k != "runner"}
    assert {k: v for k, v in loaded.describe().items() if k != "runner"} == keep
    if name == "vpff":
        assert keep["train_steps"] == 10 and keep["model"] == "vpff" and keep["fit_clock"] == "process_cpu"


def test_a_network_builds_as_an_engine_row_and_trains_when_it_starts(monkeypatch):
    from vpintegrator.models.fitted import RowData

    monkeypatch.setattr(TrainedModel, "MAX_STEPS", 3)
    row = kind_class("gru").for_row(RowData(lambda: _trajectories(6, 0), lambda: _trajectories(2, 1), 2, 3, H, None,
                                            "a test split"))
    assert row.module is None and (row.seq_len, row.dim) == (2, 3)  # nothing trained before the row starts
    y = rollout(row, _trajectories(2, 2)[:, :2], H, 5).y
    record = row.describe()
    assert np.isfinite(y).all() and record["train_steps"] == 3 and record["fit_source"] == "a test split"
