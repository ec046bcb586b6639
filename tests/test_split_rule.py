"""One split rule for every row: a data-fitted row (SINDy, parrot) of a run without a model's recorded split
fits on the trajectories a default ``vp-train`` run trains on (``vpintegrator.data.windows.default_split``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")


def test_fitted_rows_without_a_model_fit_on_vp_trains_default_training_trajectories(tiny_data, tmp_path):
    from vpintegrator.rollout.methods import fit_split

    fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=1,
             batch_size=32, dtype="float64", out=str(tmp_path / "run")))  # every split key at its default
    trained = json.loads((tmp_path / "run" / "summary.json").read_text())["split"]
    rows = fit_split([], 12)  # no model in the run: the default rule
    assert rows.train.tolist() == trained["train"]
    assert rows.val.tolist() == trained["val"] and rows.test.tolist() == trained["test"]
    assert "split_seed 0" in rows.source


def test_default_split_is_split_train_val_test_with_the_config_defaults():
    import dataclasses

    from vpintegrator.data.windows import default_split, split_train_val_test
    from vpintegrator.training import TrainConfig

    d = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for n in (3, 50, 124, 1238):
        for got, want in zip(default_split(n), split_train_val_test(n, d["val_fraction"], d["test_fraction"],
                                                                   d["split_seed"])):
            assert np.array_equal(got, want)
