"""Ops per training step (a count, not a timing) and the fused triangular chain against the per-layer path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from vpintegrator.models import build_model, default_model_config
from vpintegrator.nn import VolumePreservingAttention, VolumePreservingLowerLayer, VolumePreservingUpperLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import count_ops  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# measured (scripts/count_ops.py, batch 256, float32): vpt 765, vpff 278, st 423; before: 1540 / 957 / 664
LIMITS = {"vpt": 800, "vpff": 300, "st": 450}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_training_step_op_count(name, tmp_path):
    counts = count_ops.count_step(count_ops.make_trainer(name, 64, "float32", str(tmp_path))).counts()
    assert counts["optimizer"] <= 4  # fused Adam: one kernel for all parameters
    assert sum(counts.values()) <= LIMITS[name], counts


def test_matrices_match_reference():
    torch.manual_seed(0)
    for dim in (2, 3, 5):
        for cls in (VolumePreservingLowerLayer, VolumePreservingUpperLayer):
            layer = cls(dim).double()
            assert torch.equal(layer.matrix().detach(), layer.reference_matrix())
        att = VolumePreservingAttention(dim).double()
        assert torch.equal(att.weight_matrix().detach(), att.reference_weight_matrix())


@pytest.mark.parametrize("name", ["vpff", "vpt"])
def test_chain_matches_per_layer_autograd(name, monkeypatch):
    """The fused chain: forward bitwise the per-layer autograd path, gradients to rounding (summation order)."""
    import vpintegrator.models.volume as models

    torch.manual_seed(1)
    model = build_model(name, dim=3, **default_model_config(name)).double()
    x = torch.randn(7, model.seq_len, 3, dtype=torch.float64, requires_grad=True)

    def run():
        model.zero_grad(set_to_none=True)
        x.grad = None
        y = model(x)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        return y.detach(), x.grad.clone(), [p.grad.clone() for p in model.parameters()]

    fast = run()
    monkeypatch.setattr(models, "chain_supported", lambda layers, xp: False)
    import vpintegrator.nn.feedforward as ff
    monkeypatch.setattr(ff, "chain_supported", lambda layers, xp: False)
    slow = run()
    assert torch.equal(fast[0], slow[0])
    torch.testing.assert_close(fast[1], slow[1], rtol=1e-10, atol=1e-12)
    for a, b in zip(fast[2], slow[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
