"""Fitted models beside the trained ones (issue 87 item 5, ``vpintegrator.models.fitted``): every registered kind
fits on training trajectories, saves and loads without refitting and steps identically after the load; the
rollout engine builds its fitted rows through the registry, and an unknown kind is one line listing the valid ones."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from vpintegrator.data import solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import FittedModel, fitted_class, list_fitted, load_fitted
from vpintegrator.rollout import rollout
from vpintegrator.rollout.methods import ROW_KINDS, FitSplit, RowRequest
from vpintegrator.systems import RigidBody

H = 0.2
#: the options each registered kind is fitted with here (small grids: the test is of the interface, not the fit);
#: a kind missing from this table fails below, so that a new kind is tested too
OPTIONS = {
    "arx": {"context_len": 2},
    "narx": {"context_len": 2, "libraries": ["poly2"]},
    "delay_dmd": {"context_len": 2},
    "parrot": {"context_len": 2},
    "sindy": {"integrator": "rk4", "dt": H, "libraries": ["poly2"], "thresholds": [1e-3]},
    "delay_sindy": {"integrator": "rk4", "dt": H, "context_len": 2, "libraries": ["poly2"], "thresholds": [1e-3]},
}
NEEDS_PYSINDY = ("sindy", "delay_sindy")


def _trajectories(n: int, seed: int, n_states: int = 31) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return solve_flow(RigidBody(), y0, H * np.arange(n_states))


def _skip_without_pysindy(name: str) -> None:
    if name in NEEDS_PYSINDY and importlib.util.find_spec("pysindy") is None:
        pytest.skip("pysindy (the sindy extra) is not installed")


@pytest.mark.parametrize("name", list_fitted())
def test_every_fitted_kind_round_trips_through_save_and_load(name, tmp_path):
    _skip_without_pysindy(name)
    assert name in OPTIONS, f"add the fitted kind {name!r} to OPTIONS"
    cls = fitted_class(name)
    model = cls.fit_on(_trajectories(12, 0), _trajectories(4, 1) if cls.validates else None, **OPTIONS[name])
    path = model.save(tmp_path / f"{name}.npz")
    loaded = load_fitted(path)
    assert type(loaded) is cls and isinstance(loaded, FittedModel)
    test = _trajectories(3, 2)
    window0 = test[:, : model.seq_len]
    want, got = rollout(model, window0, H, 20).y, rollout(loaded, window0, H, 20).y
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(got, want)
    keep = {k: v for k, v in model.describe().items() if k != "runner"}
    assert {k: v for k, v in loaded.describe().items() if k != "runner"} == keep
    # a model that has rolled out saves as before (its rollout state is not the fit's state)
    again = load_fitted(model.save(tmp_path / f"{name}_after.npz"))
    np.testing.assert_array_equal(rollout(again, window0, H, 20).y, want)


def test_a_file_that_is_not_a_fitted_model_is_one_line(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, y=np.zeros(3))
    with pytest.raises(VPIntegratorError, match="not a fitted-model file") as err:
        load_fitted(bad)
    assert "\n" not in str(err.value)


def test_an_unknown_fitted_kind_is_one_line_listing_the_valid_ones():
    with pytest.raises(VPIntegratorError) as err:
        fitted_class("nope+rk4")
    text = str(err.value)
    assert "\n" not in text and "'nope+rk4'" in text
    assert all(name in text for name in list_fitted())


@pytest.mark.parametrize("name", list_fitted())
def test_the_engine_builds_its_fitted_rows_through_the_registry(name, tmp_path):
    from vpintegrator import integrate
    from vpintegrator.data import write_trajectories

    _skip_without_pysindy(name)
    data = write_trajectories(tmp_path / "rb.h5", integrate("rigid_body", _trajectories(10, 3)[:, 0], H, 30,
                                                            method="rk4"))
    kind = ROW_KINDS[name]
    assert kind.fitted and kind.takes_integrator == fitted_class(name).takes_integrator
    split = FitSplit(np.arange(6), np.arange(6, 8), np.arange(8, 10), source="a test split", data=data)
    method = OPTIONS[name].get("integrator")
    row = kind.build(RowRequest(name if method is None else f"{name}+{method}", method, RigidBody(), H,
                                context_len=2, data=data, split=split))
    assert type(row) is fitted_class(name)
