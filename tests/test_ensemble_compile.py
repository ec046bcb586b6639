"""An ensemble's step under ``fast_step = "compile"`` (issue 68 item 2: the members on the fused path): the vmapped
step of K members is compiled as one (the component-wise layers under ``vmap``) and trains each member as the
eager ensemble does, to round-off in float64."""

from __future__ import annotations

import glob
import json
import os

import pytest
import torch


@pytest.mark.slow  # torch.compile of the vmapped step: 5-45 CPU s on 2 cores
def test_a_compiled_ensemble_trains_each_member_as_the_eager_one(tiny_data, tmp_path):
    from vpintegrator.training import fit

    members = {}
    for mode in ("off", "compile"):
        out = tmp_path / mode
        result = fit(dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}, epochs=3,
                          batch_size=32, lr=3e-3, dtype="float64", device="cpu", seeds=[1, 2], fast_step=mode,
                          out=str(out)))
        used = [json.load(open(p))["fast_step_used"] for p in sorted(glob.glob(os.path.join(out, "member*", "summary.json")))]
        assert used == [mode, mode]  # the compiled step ran (no quiet fallback to eager)
        members[mode] = [m.model.state_dict() for m in result.members]
    for eager, compiled in zip(members["off"], members["compile"]):
        assert max(float((eager[k] - compiled[k]).abs().max()) for k in eager) <= 1e-12
    assert not all(torch.equal(members["off"][0][k], members["off"][1][k]) for k in members["off"][0])  # two seeds
