"""Pickles written by an earlier version that name a gone module or class load through the one table of moved
paths (``vpintegrator.models.MOVED_MODULES``, read by ``load_pickled``); the package keeps no doorway modules."""

from __future__ import annotations

import pytest
import torch

from vpintegrator.errors import VPIntegratorError


def test_a_model_pickled_before_the_helpers_moved_still_loads(tmp_path, monkeypatch):
    """The layer helpers moved from ``nn._common`` to ``nn.common`` and the old module is gone; a model pickled
    whole before (``torch.save(model)``) names its activation ``vpintegrator.nn._common.identity``:
    ``load_pickled`` reads it through the one table of moved modules, plain ``torch.load`` cannot."""
    import sys
    import types

    from vpintegrator.models import MOVED_MODULES, load_pickled
    from vpintegrator.nn import common
    from vpintegrator.nn.common import identity

    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    model.activation = identity  # an attribute that pickles by its module path
    old = types.ModuleType("vpintegrator.nn._common")
    old.identity = identity
    file = tmp_path / "old_model.pt"
    with monkeypatch.context() as m:  # pickle it as the earlier version did: under the old module path
        m.setitem(sys.modules, "vpintegrator.nn._common", old)
        m.setattr(identity, "__module__", "vpintegrator.nn._common")
        torch.save(model, file)
    assert b"vpintegrator.nn._common" in file.read_bytes()
    with pytest.raises(ModuleNotFoundError, match="vpintegrator.nn._common"):
        torch.load(file, weights_only=False)
    loaded = load_pickled(file)
    assert loaded.activation is identity and common.identity is identity
    assert torch.equal(loaded[0].weight, model[0].weight)
    assert MOVED_MODULES["vpintegrator.nn._common"] == "vpintegrator.nn.common"
    with pytest.raises(VPIntegratorError, match="not found"):
        load_pickled(tmp_path / "missing.pt")


def test_a_pickle_naming_a_removed_class_loads_as_its_successor(tmp_path, monkeypatch):
    """``EnsembleResult`` (an ensemble's FitResult under an old name) is gone; a pickle naming it loads as a
    ``FitResult`` through the moved-names rows of the same table."""
    from vpintegrator.models import load_pickled
    from vpintegrator.training import FitResult
    from vpintegrator.training import results

    class EnsembleResult(FitResult):  # the old subclass, as an earlier version pickled it
        pass

    EnsembleResult.__module__, EnsembleResult.__qualname__ = results.__name__, "EnsembleResult"
    file = tmp_path / "old_result.pt"
    with monkeypatch.context() as m:
        m.setattr(results, "EnsembleResult", EnsembleResult, raising=False)
        torch.save(EnsembleResult.__new__(EnsembleResult), file)
    assert b"EnsembleResult" in file.read_bytes() and not hasattr(results, "EnsembleResult")
    assert type(load_pickled(file)) is FitResult
