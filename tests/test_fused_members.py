"""The members' fused chain (``vpintegrator.nn.fused_members``): K stacked models in one autograd node.

Held against each member run alone (its own model's forward: the single fused chain, itself bitwise the
unfused layers) and autograd's gradients of that: the forward bitwise at dim 3 (the same products and sums), the
gradients to round-off; an ensemble of the paper VPT (seq 3, the fused path) trains each member as the seed
trained alone (float64); and the ensemble's step dispatches as many operations for 8 members as for 2."""

from __future__ import annotations

import json

import pytest
import torch
from torch.func import stack_module_state

from vpintegrator.models.volume import VolumePreservingFeedForward, VolumePreservingTransformer
from vpintegrator.nn.fused_members import members_chain, members_layers

pytestmark = pytest.mark.usefixtures("one_thread")


def _members(make, k: int, dtype, seed: int = 0):
    torch.manual_seed(seed)
    models = [make().to(dtype) for _ in range(k)]
    for m in models:  # away from the initialisation (zero biases, small weights): every term matters
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.2 * torch.randn_like(p))
    params, _ = stack_module_state(models)
    return models, {name: v.detach().requires_grad_() for name, v in params.items()}


def _one_by_one(models, x, w):
    """The slow reference: every member's own forward on its own rows, and autograd's gradients of Σ w ⊙ out."""
    xs = x.detach().clone().requires_grad_()
    for m in models:
        m.zero_grad(set_to_none=True)
    out = torch.stack([m(xs[k]) for k, m in enumerate(models)])
    (out * w).sum().backward()
    grads = {name: torch.stack([dict(m.named_parameters())[name].grad for m in models])
             for name, _ in models[0].named_parameters()}
    return out.detach(), grads, xs.grad


MODELS = {
    "paper_vpt": lambda: VolumePreservingTransformer(3, 3, n_blocks=2, n_linear=1, L=3),
    "vpff": lambda: VolumePreservingFeedForward(3, n_blocks=2, n_linear=2),
    "vpt_dim5": lambda: VolumePreservingTransformer(5, 3, n_blocks=1, L=2),
}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_members_chain_is_each_member_alone(name, dtype):
    models, params = _members(MODELS[name], 4, dtype)
    chain = members_layers(models[0])
    assert chain is not None
    d = models[0].dim
    x = torch.randn(4, 33, 3, d, dtype=dtype, requires_grad=True)
    out = members_chain(chain, params, x)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    ref, grads, gx = _one_by_one(models, x, w)
    eps = torch.finfo(dtype).eps
    if d <= 4:  # the same products and length-3 sums as the single chain: bit for bit
        assert torch.equal(out.detach(), ref)
    else:
        assert float((out.detach() - ref).abs().max()) <= 100 * eps * float(ref.abs().max())
    for key, g in grads.items():  # gradients: the bias sums and G Hᵀ batched otherwise, rounding only
        scale = float(g.abs().max())
        assert float((params[key].grad - g).abs().max()) <= 1e3 * eps * scale, key
    assert float((x.grad - gx).abs().max()) <= 1e3 * eps * float(gx.abs().max())


def test_no_gradient_without_grad_and_members_apart():
    models, params = _members(MODELS["paper_vpt"], 3, torch.float64)
    chain = members_layers(models[0])
    x = torch.randn(3, 10, 3, 3, dtype=torch.float64)
    with torch.no_grad():
        out = members_chain(chain, params, x)
    assert not out.requires_grad
    # member k's output depends on member k's parameters only
    bumped = {k: v.detach().clone() for k, v in params.items()}
    bumped["blocks.0.attention.weight"][1] += 0.5
    with torch.no_grad():
        other = members_chain(chain, bumped, x)
    assert torch.equal(other[0], out[0]) and torch.equal(other[2], out[2]) and not torch.equal(other[1], out[1])


def test_models_without_a_fused_chain_keep_the_vmapped_path():
    assert members_layers(VolumePreservingTransformer(3, 3, L=1, symmetric=True)) is None
    assert members_layers(VolumePreservingTransformer(3, 3, L=1, positional="mixing")) is None
    assert members_layers(VolumePreservingTransformer(3, 3, L=1, skew_sym=False)) is None
    models, params = _members(MODELS["paper_vpt"], 2, torch.float64)
    chain = members_layers(models[0])
    assert members_chain(chain, params, torch.zeros(2, 4, 2, 3, dtype=torch.float64)) is None  # seq 2: no fusion


def _config(tiny_data, tmp_path, name, **kw) -> dict:
    base = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 3, "L": 2, "n_blocks": 1}, epochs=3,
                batch_size=16, lr=3e-3, dtype="float64", seed=5, val_rollout_steps=10, monitor="val_rollout",
                init_scale=0.1, out=str(tmp_path / name))
    return base | kw


def test_an_ensemble_on_the_fused_path_trains_each_member_as_alone(tiny_data, tmp_path, monkeypatch):
    from vpintegrator.nn import fused_members
    from vpintegrator.training import fit

    calls = []
    real = fused_members._MembersChain.apply
    monkeypatch.setattr(fused_members._MembersChain, "apply", lambda *a: calls.append(1) or real(*a))
    seeds = [5, 9]
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=seeds))
    assert calls  # the members ran on the fused chain (training, validation and the rollout score)
    for k, s in enumerate(seeds):
        alone = fit(_config(tiny_data, tmp_path, f"alone{s}", seed=s))
        member = ens.members[k]
        assert len(member.history) == len(alone.history) and member.best_epoch == alone.best_epoch
        for a, b in zip(member.history, alone.history):
            for key in ("train_loss", "val_loss", "val_rollout"):
                assert a[key] == pytest.approx(b[key], rel=1e-10, abs=1e-13), (key, a, b)
        theirs, ours = alone.model.state_dict(), member.model.state_dict()
        assert max(float((theirs[key] - ours[key]).abs().max()) for key in theirs) <= 1e-11


@pytest.mark.gpu
def test_on_cuda_the_graph_captured_ensemble_trains_each_member_as_alone(tiny_data, tmp_path, monkeypatch):
    """The fused chain inside the ensemble's CUDA graph: each member (float64) as its seed alone, eager on CUDA."""
    from vpintegrator.nn import fused_members
    from vpintegrator.training import fit

    calls = []
    real = fused_members._MembersChain.apply
    monkeypatch.setattr(fused_members._MembersChain, "apply", lambda *a: calls.append(1) or real(*a))
    seeds = [5, 9]
    ens = fit(_config(tiny_data, tmp_path, "ens", seeds=seeds, device="cuda", fast_step="graph"))
    assert calls
    assert json.loads((ens.members[0].run_dir / "summary.json").read_text())["fast_step_used"] == "graph"
    for k, s in enumerate(seeds):
        alone = fit(_config(tiny_data, tmp_path, f"alone{s}", seed=s, device="cuda", fast_step="off"))
        member = ens.members[k]
        for a, b in zip(member.history, alone.history):
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-9), (a, b)
        theirs, ours = alone.model.state_dict(), member.model.state_dict()
        assert max(float((theirs[key] - ours[key]).abs().max()) for key in theirs) <= 1e-9


def test_the_ensemble_step_dispatches_the_same_ops_for_8_members_as_for_2(tiny_data, tmp_path):
    from vpintegrator.training.config import TrainConfig
    from vpintegrator.training.ddp import DistInfo
    from vpintegrator.training.loop import Trainer
    from vpintegrator.training.op_count import OpCounter
    from vpintegrator.training.plan import build_plan

    counts = {}
    for n in (2, 8):
        config = TrainConfig.from_dict(_config(tiny_data, tmp_path, f"ops{n}", seeds=list(range(n)), val_fraction=0.0,
                                               monitor="val_loss", dtype="float32"))
        steps = Trainer(build_plan(config), DistInfo(), torch.device("cpu"), None, False).steps
        steps.begin_epoch()
        idx = steps.orders[:, :16]
        steps._step(idx)  # Adam's lazy state
        counter = OpCounter()
        with counter:
            steps._step(idx)
        counts[n] = sum(counter.counts().values())
    assert counts[8] == counts[2]
