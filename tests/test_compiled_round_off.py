"""The compiled model's check against torch (``vpintegrator.rollout.steps.compiled_model``) on a model with large
weights: the kernel rounds as torch does, so it is held to the model's own round-off (``_round_off``), not a fixed
1e-12, and a kernel of another formula is still refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model
from vpintegrator.rollout import numba_model, steps

pytestmark = pytest.mark.skipif(not numba_model.AVAILABLE, reason="numba not installed")


def large_weight_vpt_mix():
    """The memory study's ``vpt_mix`` at T = 4 on two observed coordinates, weights ~0.3, and the last unit's
    attention weight 4e4 (as two of its trained oscillator seeds: C ≈ 1e7 there) -> model, windows (8, 4, 2)."""
    torch.manual_seed(0)
    model = build_model("vpt", dim=2, seq_len=4, n_blocks=4, L=4, positional="mixing").double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn_like(p))
        model.blocks[3].attention.weight.fill_(4e4)
    x = torch.randn(8, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return model, x


def test_a_large_weight_model_runs_compiled_within_its_own_round_off():
    model, x = large_weight_vpt_mix()
    with torch.no_grad():
        want = model(x).numpy()
        spread = steps._round_off(model, steps._probe(x), lambda t: t.numpy())
    got = numba_model.pack(model).forward(x.numpy())
    assert not np.allclose(got, want, rtol=1e-12, atol=1e-12)  # the old check refused it (the model ran eager)
    assert 1e-12 < spread < 1e-6  # torch itself moves this much when the windows move by 4 ulps
    compiled = steps.compiled_model(model, x)
    assert compiled is not None
    np.testing.assert_allclose(compiled.forward(x.numpy()), want, rtol=1e-12, atol=steps.ROUND_OFF_FACTOR * spread)


def test_a_kernel_of_another_formula_is_still_refused_on_it(monkeypatch):
    model, x = large_weight_vpt_mix()
    real_pack = numba_model.pack

    def wrong_pack(m):  # one weight off by 1e-6: beyond the model's round-off, refused
        packed = real_pack(m)
        packed.params = packed.params * (1 + 1e-6)
        return packed

    monkeypatch.setattr(numba_model, "pack", wrong_pack)
    assert steps.compiled_model(model, x) is None

