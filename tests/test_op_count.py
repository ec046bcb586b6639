"""Ops per training step (a count, not a timing) and the fused node (nn.fused_attention) against the unfused path."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

import vpintegrator.models.volume as volume_models
import vpintegrator.nn.attention as attention_mod
import vpintegrator.nn.feedforward as feedforward_mod
from vpintegrator.models import build_model, default_model_config
from vpintegrator.nn import VolumePreservingAttention, VolumePreservingLowerLayer, VolumePreservingUpperLayer
from vpintegrator.nn.fused_attention import fused_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
count_ops = pytest.importorskip("count_ops", reason="scripts/count_ops.py is in the repository, not the wheel")

pytestmark = pytest.mark.usefixtures("one_thread")

# measured (scripts/count_ops.py, batch 256, float32): vpt 352, vpff 215, st 423;
# before the fused attention 765 / 278 / 423, before the fused triangular chain 1540 / 957 / 664
LIMITS = {"vpt": 360, "vpff": 225, "st": 440}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_training_step_op_count(name, tmp_path):
    counts = count_ops.count_step(count_ops.make_trainer(name, 64, "float32", str(tmp_path))).counts()
    assert counts["optimizer"] <= 4  # fused Adam: one kernel for all parameters
    assert sum(counts.values()) <= LIMITS[name], counts


def test_graph_step_leaves_the_host_a_handful_of_ops(tmp_path):
    """fast_step graph: around one replay the host copies the batch's index, writes the scheduled lr into its
    tensor and accumulates the loss (7 ops, measured); every model op is inside the graph."""
    counter = count_ops.count_step(count_ops.make_trainer("vpt", 64, "float32", str(tmp_path), fast_step="graph"))
    counts = counter.counts()
    assert not {"forward", "backward", "optimizer"} & set(counts), counts
    assert sum(counts.values()) <= 8, counter.ops


def test_matrices_match_reference():
    torch.manual_seed(0)
    for dim in (2, 3, 5):
        for cls in (VolumePreservingLowerLayer, VolumePreservingUpperLayer):
            layer = cls(dim).double()
            assert torch.equal(layer.matrix().detach(), layer.reference_matrix())
        att = VolumePreservingAttention(dim).double()
        assert torch.equal(att.weight_matrix().detach(), att.reference_weight_matrix())


# ---------------------------------------------------------------- the fused node against the unfused path


@contextlib.contextmanager
def unfused():
    """Every layer and model on its unfused path (per-layer autograd, the seq-3 attention by autograd)."""
    mods = (attention_mod, feedforward_mod, volume_models)
    saved = [m.fused_spec for m in mods]
    for m in mods:
        m.fused_spec = lambda layers, x: None
    try:
        yield
    finally:
        for m, f in zip(mods, saved):
            m.fused_spec = f


def _module(name: str, dtype: torch.dtype, dim: int = 3) -> tuple[torch.nn.Module, int]:
    torch.manual_seed(1)
    if name == "attention":
        return VolumePreservingAttention(dim).to(dtype), 3
    if name == "lower_tanh":
        return VolumePreservingLowerLayer(dim, "tanh").to(dtype), 4
    model = build_model(name, dim=dim, **default_model_config(name)).to(dtype)
    return model, model.seq_len


def _layers(model) -> list[torch.nn.Module]:
    if hasattr(model, "blocks"):
        return model._layers()
    return list(model.layers) if hasattr(model, "layers") else [model]


def _forward_backward(model, x, weights):
    model.zero_grad(set_to_none=True)
    x.grad = None
    y = model(x)
    (y * weights).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return y.detach(), (x.grad.clone() if x.requires_grad else None), grads


FUSED = ["attention", "lower_tanh", "vpff", "vpt"]


def _max_error(run, ref) -> float:
    """Largest gradient error (input and each parameter) relative to that gradient's largest entry."""
    pairs = [(run[1], ref[1])] + list(zip(run[2], ref[2], strict=True))
    return max(float((a.double() - b).abs().max() / b.abs().max()) for a, b in pairs)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", FUSED)
def test_fused_matches_unfused(name, dtype):
    """Forward bitwise the unfused path. Gradients w.r.t. the input and every parameter: float64 equal to the
    unfused path's to ~1e-12 (summation order differs); float32 as accurate as the unfused path's, both
    measured against float64."""
    model, seq = _module(name, dtype)
    reference = _module(name, torch.float64)[0]
    gen = torch.Generator().manual_seed(2)
    for batch in (1, 7, 300):
        x64 = torch.randn(batch, seq, 3, generator=gen, dtype=torch.float64)
        weights = torch.randn(batch, seq, 3, generator=gen, dtype=torch.float64).to(dtype)
        x = x64.to(dtype).requires_grad_()
        assert fused_spec(_layers(model), x) is not None
        fast = _forward_backward(model, x, weights)
        with unfused():
            slow = _forward_backward(model, x, weights)
        assert torch.equal(fast[0], slow[0])
        if dtype == torch.float64:
            torch.testing.assert_close(fast[1], slow[1], rtol=1e-11, atol=1e-12)
            for a, b in zip(fast[2], slow[2], strict=True):
                torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
        else:
            with unfused():
                exact = _forward_backward(reference, x64.clone().requires_grad_(), weights.double())
            assert _max_error(fast, exact) <= 10 * _max_error(slow, exact) + 1e-6
        with torch.no_grad():  # nothing kept for a backward pass: the same numbers
            assert torch.equal(model(x), fast[0])
        fast_p = _forward_backward(model, x.detach(), weights)  # training: no gradient for the input
        assert torch.equal(fast_p[0], fast[0]) and fast_p[1] is None
        for a, b in zip(fast_p[2], fast[2]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dim", [2, 4, 5, 8])
def test_fused_forward_bitwise_for_any_dim_batch_and_scale(dim, dtype):
    """Every dim (the reductions over dim of the unfused path are reproduced above dim 4), batch sizes that
    are not multiples of a vector width, large and small inputs, a strided input, with and without grad."""
    torch.manual_seed(dim)
    att = VolumePreservingAttention(dim).to(dtype)
    vpt = build_model("vpt", dim=dim, seq_len=3, n_blocks=1, L=2).to(dtype)
    gen = torch.Generator().manual_seed(3)
    for batch in (1, 5, 33):
        for scale in (1e-3, 1.0, 30.0):
            x = (scale * torch.randn(batch, 3, 2 * dim, generator=gen, dtype=torch.float64)).to(dtype)[..., ::2]
            for model in (att, vpt):
                y = model(x)
                with torch.no_grad():
                    assert torch.equal(model(x), y)
                with unfused(), torch.no_grad():
                    assert torch.equal(model(x), y)


def test_whole_vpt_is_one_autograd_node():
    model, seq = _module("vpt", torch.float32)
    y = model(torch.randn(4, seq, 3, requires_grad=True))
    assert type(y.grad_fn).__name__ == "_FusedChainBackward"
    inputs = [type(f).__name__ for f, _ in y.grad_fn.next_functions if f is not None]
    assert inputs.count("AccumulateGrad") == len(list(model.parameters())) + 1  # + the input


def test_gradcheck_fused_attention():
    layer, _ = _module("attention", torch.float64)
    x = (0.7 * torch.randn(2, 3, 3, dtype=torch.float64)).requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()

    def f(x, w):
        return torch.func.functional_call(layer, {"weight": w}, (x,))  # not a transform: the fused node

    assert fused_spec([layer], x) is not None
    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-8)


def test_gradcheck_fused_vpt_all_parameters():
    model, seq = _module("vpt", torch.float64)
    names = [k for k, _ in model.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = (0.7 * torch.randn(2, seq, 3, dtype=torch.float64)).requires_grad_()

    def f(x, *ps):
        return torch.func.functional_call(model, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-8)


def test_torch_func_transforms_take_the_unfused_path():
    """vmap/jacrev (Levenberg–Marquardt, the audits, the ensembles) trace the layers' autograd path; the
    Jacobians agree with the fused node's backward."""
    model, seq = _module("vpt", torch.float64)
    x = torch.randn(4, seq, 3, dtype=torch.float64)
    seen = []

    def one(x1):
        seen.append(fused_spec(model._layers(), x1[None]))
        return model(x1[None])[0]

    jac = torch.func.vmap(torch.func.jacrev(one))(x)  # (4, seq, 3, seq, 3)
    assert seen and all(s is None for s in seen)
    for b in range(x.shape[0]):
        ref = torch.autograd.functional.jacobian(lambda t: model(t[None])[0], x[b])  # the fused node
        torch.testing.assert_close(jac[b], ref, rtol=1e-11, atol=1e-12)
