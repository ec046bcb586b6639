"""The component-wise (planes) form of the layers (``vpintegrator.nn.componentwise``), held against the layers'
own forwards in float64: outputs, gradients, det J (and the symplectic form) to round-off; the models take it
under ``torch.compile`` only. The compiled runs themselves are in the slow tests at the end (inductor takes tens
of seconds on the CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vpintegrator.models import build_model
from vpintegrator.nn import componentwise
from vpintegrator.nn.attention import VolumePreservingAttention
from vpintegrator.nn.feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer
from vpintegrator.nn.sympnet import (
    ActivationLayerP, ActivationLayerQ, BiasLayer, GradientLayerP, GradientLayerQ, LinearLayerP, LinearLayerQ,
)
from vpintegrator.testing import assert_symplectic, assert_volume_preserving

pytestmark = pytest.mark.usefixtures("one_thread")

#: round-off of a float64 forward through a chain of ~30 layers on unit-scale inputs
RTOL, ATOL = 1e-12, 1e-13

LAYERS = {
    "lower_tanh": lambda: VolumePreservingLowerLayer(3, "tanh"),
    "upper_tanh": lambda: VolumePreservingUpperLayer(3, "tanh"),
    "lower_linear_nobias": lambda: VolumePreservingLowerLayer(3, "identity", bias=False),
    "upper_linear": lambda: VolumePreservingUpperLayer(3, "identity"),
    "lower_sigmoid_dim4": lambda: VolumePreservingLowerLayer(4, "sigmoid"),
    "upper_tanh_dim5": lambda: VolumePreservingUpperLayer(5, "tanh"),
    "attention_skew": lambda: VolumePreservingAttention(3),
    "attention_skew_dim4": lambda: VolumePreservingAttention(4),
    "attention_arbitrary": lambda: VolumePreservingAttention(3, skew_sym=False),
    "sympnet_linear_q": lambda: LinearLayerQ(4),
    "sympnet_linear_p_bias": lambda: LinearLayerP(6, bias=True),
    "sympnet_activation_q": lambda: ActivationLayerQ(4),
    "sympnet_activation_p": lambda: ActivationLayerP(4, "sigmoid"),
    "sympnet_gradient_q": lambda: GradientLayerQ(4),
    "sympnet_gradient_p": lambda: GradientLayerP(6, 8),
    "sympnet_bias": lambda: BiasLayer(4),
}
VOLUME = [k for k in LAYERS if not k.startswith("sympnet") and k != "attention_arbitrary"]
SYMPLECTIC = [k for k in LAYERS if k.startswith("sympnet")]

MODELS = {
    "vpt_paper": dict(name="vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpt_arbitrary": dict(name="vpt", dim=3, seq_len=3, n_blocks=1, n_linear=2, L=2, skew_sym=False),
    "vpt_init_upper": dict(name="vpt", dim=3, seq_len=3, n_blocks=1, L=2, init_upper=True),
    "vpff": dict(name="vpff", dim=3, n_blocks=6, n_linear=1),
    "gsympnet": dict(name="g_sympnet", dim=4, n_layers=4),
    "lasympnet": dict(name="la_sympnet", dim=4, depth=3, nhidden=2),
}


def _randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    """float64, every parameter drawn (biases and zero-initialised weights included) at scale 0.5."""
    module = module.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _windows(dim: int, seq: int, n: int = 64, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, seq, dim, generator=g, dtype=torch.float64)


class _Components(nn.Module):
    """A chain of layers run in component form (the form a compiled model traces), as a module for the
    structure checks of ``vpintegrator.testing``."""

    def __init__(self, layers: list[nn.Module], dim: int, seq_len: int) -> None:
        super().__init__()
        self.chain = nn.ModuleList(layers)
        self.dim, self.seq_len = dim, seq_len

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return componentwise.chain_components(list(self.chain), x)


def _seq(layer: nn.Module) -> int:
    return 3 if isinstance(layer, VolumePreservingAttention) else 2


@pytest.mark.parametrize("name", LAYERS)
def test_layer_components_equal_the_layer(name):
    layer = _randomised(LAYERS[name]())
    x = _windows(layer.dim, _seq(layer)).requires_grad_(True)
    assert componentwise.supported([layer], x.shape[1])
    ref = layer(x)
    got = componentwise.chain_components([layer], x)
    torch.testing.assert_close(got, ref, rtol=RTOL, atol=ATOL)
    # gradients (what a compiled training step differentiates) against the layer's own backward
    weights = torch.randn_like(ref)
    params = [x, *layer.parameters()]
    g_ref = torch.autograd.grad((ref * weights).sum(), params)
    g_got = torch.autograd.grad((got * weights).sum(), params)
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", VOLUME)
def test_layer_components_preserve_volume(name, tol):
    layer = _randomised(LAYERS[name]())
    assert_volume_preserving(_Components([layer], layer.dim, _seq(layer)), atol=tol("det"))


@pytest.mark.parametrize("name", SYMPLECTIC)
def test_sympnet_components_are_symplectic(name):
    layer = _randomised(LAYERS[name]())
    assert_symplectic(_Components([layer], layer.dim, 1), jacobian="autograd")


def test_the_arbitrary_attention_in_components_is_not_volume_preserving():
    """The negative case of the det J check: GML's arbitrary weighting, component form too."""
    layer = _randomised(LAYERS["attention_arbitrary"]())
    with pytest.raises(AssertionError, match="not volume preserving"):
        assert_volume_preserving(_Components([layer], 3, 3), atol=1e-6)


@pytest.mark.parametrize("name", ["lower_tanh", "upper_tanh", "attention_skew_dim4", "sympnet_linear_q"])
def test_index_pairs_are_the_layers_own(name):
    """The component form's Python index pairs are where the layers' free weights sit."""
    layer = LAYERS[name]()
    if isinstance(layer, LinearLayerQ):
        rows, cols = torch.tril_indices(layer.n, layer.n)
        assert componentwise.lower_pairs(layer.n, diagonal=True) == tuple(zip(rows.tolist(), cols.tolist()))
        return
    pairs = tuple(zip(layer._rows.tolist(), layer._cols.tolist()))
    lower = componentwise.lower_pairs(layer.dim)
    assert pairs == (lower if getattr(layer, "_lower", True) else tuple((j, i) for i, j in lower))


def test_unsupported_chains_are_refused():
    assert not componentwise.supported([], 3)
    assert not componentwise.supported([ResNetLayer(3)], 3)
    assert not componentwise.supported([VolumePreservingAttention(3)], 4)  # the closed form is seq 3
    assert not componentwise.supported([VolumePreservingAttention(3, cayley_method="solve")], 3)
    assert componentwise.supported([VolumePreservingLowerLayer(3)], 7)


def _chain(model: nn.Module) -> list[nn.Module]:
    return model._layers() if hasattr(model, "_layers") else list(model.layers)


@pytest.mark.parametrize("name", MODELS)
def test_model_components_equal_the_model(name):
    cfg = dict(MODELS[name])
    model = _randomised(build_model(cfg.pop("name"), **cfg))
    x = _windows(model.dim, getattr(model, "seq_len", 1) if model.seq_len > 1 else 2)
    torch.testing.assert_close(componentwise.chain_components(_chain(model), x), model(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["vpt_paper", "vpff"])
def test_model_components_preserve_volume(name, tol):
    cfg = dict(MODELS[name])
    model = _randomised(build_model(cfg.pop("name"), **cfg))
    seq = model.seq_len if model.seq_len > 1 else 2
    assert_volume_preserving(_Components(_chain(model), model.dim, seq), atol=tol("det"))


@pytest.fixture
def tracing(monkeypatch):
    """The models' forwards as ``torch.compile`` traces them (is_compiling true), run eagerly, recording the
    chains that went through the component form."""
    seen = []
    real = componentwise.chain_components

    def spy(layers, x):
        seen.append(len(layers))
        return real(layers, x)

    monkeypatch.setattr(componentwise, "chain_components", spy)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    return seen


@pytest.mark.parametrize("name", MODELS)
def test_models_take_the_component_form_when_compiled(name, tracing):
    cfg = dict(MODELS[name])
    model = _randomised(build_model(cfg.pop("name"), **cfg))
    seq = model.seq_len if model.seq_len > 1 else 2
    x = _windows(model.dim, seq)
    got = model(x)
    assert tracing == [len(_chain(model))]
    torch.compiler.is_compiling = lambda: False  # restored by monkeypatch; the eager reference
    torch.testing.assert_close(got, model(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("cfg", [dict(positional="feedforward"), dict(positional="mixing"), dict(symmetric=True)])
def test_models_without_a_component_form_keep_their_path_when_compiled(cfg, tracing):
    model = build_model("vpt", dim=3, seq_len=3, L=2, **cfg).double()
    model(_windows(3, 3))
    assert tracing == []


def test_the_shipped_vpt_in_components_equals_it():
    """The shipped model's weights, the paper's windows scale (unit sphere): the component form to round-off."""
    from vpintegrator.models import load_model

    model = load_model("pretrained:rigid_body_vpt").double()
    x = _windows(3, 3)
    x = x / x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(componentwise.chain_components(model._layers(), x), model(x), rtol=RTOL, atol=ATOL)


# -- compiled (slow: inductor on the CPU) ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vpt_paper", "gsympnet"])
def test_compiled_model_equals_the_eager_model(name):
    """torch.compile of the model (component form, fused by inductor): outputs and parameter gradients to
    round-off in float64."""
    cfg = dict(MODELS[name])
    model = _randomised(build_model(cfg.pop("name"), **cfg))
    seq = model.seq_len if model.seq_len > 1 else 2
    x = _windows(model.dim, seq, n=256)
    compiled = torch.compile(model, dynamic=False)
    ref, got = model(x), compiled(x)
    # inductor reassociates the sums too (vectorised): measured 3e-12 relative after the paper VPT's 33 layers
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-11)
    g_ref = torch.autograd.grad(ref.square().sum(), list(model.parameters()))
    g_got = torch.autograd.grad(got.square().sum(), list(model.parameters()))
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _stacked_forward(name: str):
    """Three members of a model, stacked as the ensemble stacks them, and their vmapped forward."""
    from torch.func import functional_call, stack_module_state, vmap

    cfg = dict(MODELS[name])
    kind = cfg.pop("name")
    members = [_randomised(build_model(kind, **cfg), seed=k) for k in range(3)]
    params, buffers = stack_module_state(members)
    template = members[0]

    def forward(x):  # x (members, batch, seq, dim)
        return vmap(lambda p, b, xx: functional_call(template, (p, b), (xx,)), in_dims=(0, 0, 0))(params, buffers, x)

    seq = template.seq_len if template.seq_len > 1 else 2
    x = torch.stack([_windows(template.dim, seq, n=16, seed=k) for k in range(3)])
    return members, forward, x


@pytest.mark.parametrize("name", ["vpt_paper", "gsympnet"])
def test_component_form_under_vmap_equals_each_member(name, tracing):
    """The ensemble's step traced by torch.compile runs the component form under vmap: member k's slice is
    member k's own forward."""
    members, forward, x = _stacked_forward(name)
    got = forward(x)
    assert tracing  # the component form ran (under vmap)
    torch.compiler.is_compiling = lambda: False
    for k, m in enumerate(members):
        torch.testing.assert_close(got[k], m(x[k]), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_compiled_vmapped_members_equal_each_member():
    members, forward, x = _stacked_forward("vpt_paper")
    got = torch.compile(forward, dynamic=False)(x)
    for k, m in enumerate(members):
        torch.testing.assert_close(got[k], m(x[k]), rtol=1e-10, atol=1e-11)
