"""best.pt and ``FitResult.best_state`` hold the weights of the best epoch, not the last: the record keeps a copy
of the weights (tensor clones) when an epoch becomes the best, and ``save_best`` writes that copy with the live
model's architecture (no deep copy of the module, issue 89)."""

from __future__ import annotations

import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.models import build_model, save_model
from vpintegrator.training import fit

pytestmark = pytest.mark.usefixtures("one_thread")


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


@pytest.mark.parametrize("ensemble", [None, 2])
def test_best_pt_holds_the_weights_of_the_best_epoch(tiny_data, tmp_path, ensemble):
    """A constant, too large learning rate: the validation loss falls to epoch 4 and rises after (float64,
    seed 0: 3.37, 2.43, 1.64, 0.879, 1.07, 1.28), so the best epoch is not the last and a copy that followed
    the live weights (a reference instead of a clone) would write the last epoch's weights."""
    seen: dict[int, dict[int, dict[str, torch.Tensor]]] = {}

    def keep(info):
        for one in info if isinstance(info, list) else [info]:
            seen.setdefault(one.member, {})[one.epoch] = _weights(one.model)

    result = fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=6,
                      batch_size=32, dtype="float64", lr=0.2, lr_min=0.2, seed=0, out=str(tmp_path / "run"),
                      checkpoint_every=100),  # best.pt written at the end only: from the kept copy
                 callback=keep, ensemble=ensemble)
    members = result.members if ensemble else [result]
    assert len(members) == (ensemble or 1)
    assert members[0].best_epoch == 4 < len(members[0].history)  # the case the test needs
    for k, member in enumerate(members):
        at_best = seen[k][member.best_epoch]
        assert member.best_epoch == 6 or not _same(at_best, seen[k][6])  # the last epoch's weights differ
        saved = torch.load(member.run_dir / "best.pt", weights_only=True)
        assert saved["epoch"] == member.best_epoch and _same(saved["state_dict"], at_best)
        assert _same(member.best_state, at_best)
        assert _same(_weights(member.model), seen[k][6])  # the live model keeps its last weights


def test_save_model_writes_a_given_state_dict_of_the_same_keys_only(tmp_path):
    model = build_model("vpt", dim=3, seq_len=2, L=2, n_blocks=1)
    other = {k: torch.full_like(v, 0.5) for k, v in model.state_dict().items()}
    before = _weights(model)
    path = save_model(model, tmp_path / "m.pt", state_dict=other)
    assert _same(torch.load(path, weights_only=True)["state_dict"], other) and _same(_weights(model), before)
    with pytest.raises(VPIntegratorError, match="state_dict's keys are not model"):
        save_model(model, tmp_path / "bad.pt", state_dict={"x": torch.zeros(1)})
    assert not (tmp_path / "bad.pt").exists()
