"""Layers: formulas against per-sample references in the seeds' column convention, volume preservation,
orthogonality, permutation behaviour along seq, dtypes, Stiefel projections, errors."""

from __future__ import annotations

import math

import pytest
import torch

from vpintegrator.errors import VPIntegratorError
from vpintegrator.nn import (
    MultiHeadAttention,
    ResNetLayer,
    VolumePreservingAttention,
    VolumePreservingLowerLayer,
    VolumePreservingUpperLayer,
    cayley_method,
)
from vpintegrator.testing import assert_volume_preserving, audit_volume

ALLCLOSE = {torch.float32: 1e-5, torch.float64: 1e-12}
DET = {torch.float32: 1e-4, torch.float64: 1e-10}
DIM_SEQ = [(2, 2), (3, 3), (3, 5), (4, 3), (5, 4), (3, 7)]  # seq 7 uses the solve path


def windows(n, seq, dim, dtype=torch.float64, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(n, seq, dim, generator=gen, dtype=torch.float64)).to(dtype)


def made(cls, *args, dtype=torch.float64, seed=0, **kwargs):
    torch.manual_seed(seed)
    return cls(*args, **kwargs).to(dtype)


# ---------------------------------------------------------------- triangular layers


TRIANGULAR = [
    (VolumePreservingLowerLayer, "identity", False),
    (VolumePreservingLowerLayer, "identity", True),
    (VolumePreservingLowerLayer, "tanh", True),
    (VolumePreservingUpperLayer, "identity", False),
    (VolumePreservingUpperLayer, "identity", True),
    (VolumePreservingUpperLayer, "tanh", True),
]


@pytest.mark.parametrize("cls, activation, bias", TRIANGULAR)
@pytest.mark.parametrize("dim, seq", DIM_SEQ)
def test_triangular_layer_is_volume_preserving(cls, activation, bias, dim, seq):
    layer = made(cls, dim, activation, bias=bias)
    with torch.no_grad():
        if bias:
            layer.bias.normal_()
    assert_volume_preserving(layer, windows(32, seq, dim), atol=DET[torch.float64])


@pytest.mark.parametrize("cls, lower", [(VolumePreservingLowerLayer, True), (VolumePreservingUpperLayer, False)])
def test_triangular_layer_formula_and_parameters(cls, lower):
    dim = 4
    layer = made(cls, dim, "tanh", bias=True)
    with torch.no_grad():
        layer.bias.normal_()
    L = layer.matrix()
    expected_zero = torch.triu(torch.ones(dim, dim)) if lower else torch.tril(torch.ones(dim, dim))
    assert torch.all(L[expected_zero.bool()] == 0)
    assert sum(p.numel() for p in layer.parameters()) == dim * (dim - 1) // 2 + dim
    x = windows(5, 3, dim)
    # seed form per state: z ↦ z + tanh(L z + b)
    ref = torch.stack([torch.stack([z + torch.tanh(L @ z + layer.bias) for z in w]) for w in x])
    torch.testing.assert_close(layer(x), ref, rtol=0, atol=1e-12)


def test_triangular_init_glorot_over_free_vector_and_zero_bias():
    layer = VolumePreservingLowerLayer(6, "tanh", bias=True)
    n = 15
    assert layer.weight.shape == (n,)
    assert layer.weight.abs().max() <= math.sqrt(6 / n)
    assert torch.all(layer.bias == 0)
    assert VolumePreservingLowerLayer(3, bias=False).bias is None


# ---------------------------------------------------------------- volume-preserving attention


def vp_attention_reference(layer: VolumePreservingAttention, x: torch.Tensor) -> torch.Tensor:
    """Seed 004 literally, in columns: Z = Xᵀ, C = ZᵀAZ (skew) or the GML lower-triangle construction,
    Λ = (I − C) inv(I + C), output Z Λ, returned as rows (Z Λ)ᵀ."""
    A = layer.weight_matrix().detach().double()
    d = layer.dim
    out = []
    for X in x.double():
        Z = X.T  # (dim, T)
        T = Z.shape[1]
        if layer.skew_sym:
            C = Z.T @ A @ Z
        else:
            C = torch.zeros(T, T, dtype=torch.float64)
            for i in range(T):
                for j in range(i):  # correlations (z⁽ⁱ⁾)ᵀ A z⁽ʲ⁾ for i > j, antisymmetrised
                    C[i, j] = Z[:, i] @ A @ Z[:, j] / math.sqrt(d)
                    C[j, i] = -C[i, j]
        eye = torch.eye(T, dtype=torch.float64)
        lam = (eye - C) @ torch.linalg.inv(eye + C)
        out.append((Z @ lam).T)
    return torch.stack(out)


@pytest.mark.parametrize("skew_sym", [True, False])
@pytest.mark.parametrize("dim, seq", DIM_SEQ)
def test_vp_attention_matches_seed_formula(skew_sym, dim, seq):
    layer = made(VolumePreservingAttention, dim, skew_sym=skew_sym)
    x = windows(8, seq, dim)
    torch.testing.assert_close(layer(x), vp_attention_reference(layer, x), rtol=0, atol=1e-11)


@pytest.mark.parametrize("dim, seq", DIM_SEQ + [(3, 1), (6, 2)])
def test_skew_attention_is_volume_preserving(dim, seq):
    layer = made(VolumePreservingAttention, dim, skew_sym=True, seed=dim + seq)
    assert_volume_preserving(layer, windows(64, seq, dim, seed=1), atol=DET[torch.float64])


@pytest.mark.parametrize("method", ["closed", "solve", "inv"])
def test_skew_attention_is_volume_preserving_for_every_cayley_path(method):
    layer = made(VolumePreservingAttention, 3, cayley_method=method)
    assert_volume_preserving(layer, windows(64, 3, 3, seed=2), atol=DET[torch.float64])


@pytest.mark.parametrize("dim, seq", [(3, 3), (4, 3), (3, 5)])
def test_arbitrary_attention_is_not_volume_preserving(dim, seq):
    layer = made(VolumePreservingAttention, dim, skew_sym=False)
    audit = audit_volume(layer, windows(128, seq, dim))
    assert audit.median_error > 1e-3
    with pytest.raises(AssertionError, match="not volume preserving"):
        assert_volume_preserving(layer, windows(16, seq, dim))


@pytest.mark.parametrize("skew_sym", [True, False])
def test_lambda_is_orthogonal(skew_sym):
    layer = made(VolumePreservingAttention, 3, skew_sym=skew_sym)
    lam = layer.orthogonal_matrix(windows(64, 4, 3, scale=2.0))
    eye = torch.eye(4, dtype=torch.float64)
    torch.testing.assert_close(lam.mT @ lam, eye.expand_as(lam), rtol=0, atol=1e-12)


def test_attention_cayley_paths_agree():
    layer = made(VolumePreservingAttention, 3)
    x = windows(64, 3, 3)
    outs = {}
    for method in ("closed", "solve", "inv"):
        with cayley_method(method):
            outs[method] = layer(x)
    torch.testing.assert_close(outs["closed"], outs["inv"], rtol=0, atol=1e-12)
    torch.testing.assert_close(outs["solve"], outs["inv"], rtol=0, atol=1e-12)


def test_skew_attention_is_permutation_equivariant_along_seq():
    # C(PX) = P C Pᵀ  =>  Λ(PX) = P Λ Pᵀ  =>  Λ(PX)ᵀ P X = P Λᵀ X
    layer = made(VolumePreservingAttention, 3)
    x = windows(16, 5, 3)
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm], rtol=0, atol=1e-12)


def test_arbitrary_attention_is_not_permutation_equivariant():
    # the strictly-lower-triangle construction depends on the order of the states
    layer = made(VolumePreservingAttention, 3, skew_sym=False)
    x = windows(16, 3, 3)
    perm = torch.tensor([2, 0, 1])
    assert (layer(x[:, perm]) - layer(x)[:, perm]).abs().max() > 1e-3


# ---------------------------------------------------------------- multi-head attention


def gml_mha_reference(layer: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Seed 000 in columns: head i = V_i softmax_col(K_iᵀ Q_i / √dim), heads stacked (vcat)."""
    PQ, PK, PV = (p.detach().double() for p in layer.projections())
    out = []
    for X in x.double():
        Z = X.T  # (dim, T)
        heads = []
        for i in range(layer.n_heads):
            Q, K, V = PQ[i].T @ Z, PK[i].T @ Z, PV[i].T @ Z  # (d_head, T)
            P = torch.softmax(K.T @ Q / math.sqrt(layer.dim), dim=0)  # column softmax: each column sums to 1
            heads.append(V @ P)
        Y = torch.cat(heads, dim=0)  # (dim, T)
        out.append((Z + Y if layer.add_connection else Y).T)
    return torch.stack(out)


@pytest.mark.parametrize("add_connection", [False, True])
@pytest.mark.parametrize("dim, n_heads", [(3, 1), (3, 3), (4, 2), (6, 3)])
def test_gml_mha_matches_seed_formula(dim, n_heads, add_connection):
    layer = made(MultiHeadAttention, dim, n_heads, add_connection=add_connection)
    x = windows(6, 4, dim)
    torch.testing.assert_close(layer(x), gml_mha_reference(layer, x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dim, n_heads", [(3, 1), (4, 2), (6, 3)])
def test_standard_mha_matches_torch(dim, n_heads):
    layer = made(MultiHeadAttention, dim, n_heads, form="standard")
    with torch.no_grad():
        layer.in_proj_bias.normal_()
        layer.out_proj.bias.normal_()
    ref = torch.nn.MultiheadAttention(dim, n_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(layer.in_proj_weight)
        ref.in_proj_bias.copy_(layer.in_proj_bias)
        ref.out_proj.weight.copy_(layer.out_proj.weight)
        ref.out_proj.bias.copy_(layer.out_proj.bias)
    x = windows(6, 5, dim)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


def test_mha_parameter_counts():
    assert sum(p.numel() for p in MultiHeadAttention(3, 1).parameters()) == 27
    assert sum(p.numel() for p in MultiHeadAttention(6, 3).parameters()) == 108
    assert sum(p.numel() for p in MultiHeadAttention(4, 2, form="standard").parameters()) == 4 * 16 + 4 * 4


@pytest.mark.parametrize("form", ["gml", "standard"])
def test_mha_is_permutation_equivariant_along_seq(form):
    layer = made(MultiHeadAttention, 4, 2, form=form, add_connection=True)
    x = windows(8, 5, 4)
    perm = torch.tensor([4, 2, 0, 1, 3])
    torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm], rtol=0, atol=1e-12)


def test_stiefel_projections_stay_orthonormal_after_optimiser_steps():
    torch.manual_seed(0)
    layer = MultiHeadAttention(6, 2, stiefel=True).double()
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    x, y = windows(32, 4, 6), windows(32, 4, 6, seed=1)
    before = [p.detach().clone() for p in layer.projections()]
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(layer(x), y).backward()
        opt.step()
    eye = torch.eye(3, dtype=torch.float64)
    for P, P0 in zip(layer.projections(), before):  # (heads, dim, d_head)
        torch.testing.assert_close(P.mT @ P, eye.expand(2, 3, 3), rtol=0, atol=1e-12)
        assert (P - P0).abs().max() > 1e-3  # it did train


# ---------------------------------------------------------------- ResNet layer, dtypes, errors


def test_resnet_layer_formula():
    layer = made(ResNetLayer, 3, "tanh")
    with torch.no_grad():
        layer.bias.normal_()
    x = windows(4, 3, 3)
    ref = torch.stack([torch.stack([z + torch.tanh(layer.weight @ z + layer.bias) for z in w]) for w in x])
    torch.testing.assert_close(layer(x), ref, rtol=0, atol=1e-12)


LAYERS = {
    "skew attention": lambda: VolumePreservingAttention(3),
    "arbitrary attention": lambda: VolumePreservingAttention(3, skew_sym=False),
    "lower tanh": lambda: VolumePreservingLowerLayer(3, "tanh"),
    "upper linear": lambda: VolumePreservingUpperLayer(3),
    "gml mha": lambda: MultiHeadAttention(3, 1),
    "standard mha": lambda: MultiHeadAttention(3, 3, form="standard"),
    "resnet": lambda: ResNetLayer(3),
}


@pytest.mark.parametrize("name", LAYERS)
def test_float32_agrees_with_float64(name):
    torch.manual_seed(0)
    layer64 = LAYERS[name]().double()
    layer32 = LAYERS[name]().float()
    layer32.load_state_dict(layer64.state_dict())
    x = windows(32, 3, 3)
    torch.testing.assert_close(layer32(x.float()).double(), layer64(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize(
    "shape, match",
    [((3, 3), "add a batch axis"), ((2, 3, 4), r"dim=3\), got \(2, 3, 4\)"), ((2, 1, 3, 3), "got \\(2, 1, 3, 3\\)")],
)
def test_wrong_input_shape_is_a_clear_error(name, shape, match):
    with pytest.raises(VPIntegratorError, match=match):
        LAYERS[name]()(torch.zeros(shape))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: VolumePreservingAttention(0), "dim: expected an integer >= 1, got 0"),
        (lambda: VolumePreservingAttention(3, skew_sym="yes"), "skew_sym"),
        (lambda: VolumePreservingLowerLayer(3, "relu"), "activation: expected one of"),
        (lambda: MultiHeadAttention(3, 2), "n_heads: must divide dim = 3"),
        (lambda: MultiHeadAttention(3, 1, form="vaswani"), "form: expected one of gml, standard"),
        (lambda: MultiHeadAttention(3, 1, form="standard", stiefel=True), "stiefel"),
    ],
)
def test_bad_layer_arguments_are_clear_errors(make, match):
    with pytest.raises(VPIntegratorError, match=match):
        make()


@pytest.mark.gpu
@pytest.mark.parametrize("name", LAYERS)
def test_layers_run_on_cuda(name):
    torch.manual_seed(0)
    layer = LAYERS[name]().double()
    x = windows(16, 3, 3)
    # float64, CUDA against the CPU: the kernels sum in another order (~1e-16 relative); atol 1e-10 is the
    # float64 structure tolerance of these tests, ~1e6 ulps, and catches any float32 step on either side
    torch.testing.assert_close(layer.cuda()(x.cuda()).cpu(), layer.cpu()(x), rtol=0, atol=1e-10)


@pytest.mark.gpu
def test_skew_attention_volume_preserving_on_cuda():
    layer = made(VolumePreservingAttention, 3)
    # det J in float64 on CUDA: rounding differs from the CPU's by summation order only; the float64 table value
    assert_volume_preserving(layer, windows(64, 3, 3), device="cuda", atol=DET[torch.float64])


@pytest.mark.parametrize("skew_sym", [True, False])
@pytest.mark.parametrize("seq", [3, 4])  # 3: the seq-3 fast path; 4: the general closed form
def test_gradcheck_vp_attention(skew_sym, seq):
    layer = made(VolumePreservingAttention, 3, skew_sym=skew_sym)
    x = windows(2, seq, 3, scale=0.7).requires_grad_()
    assert torch.autograd.gradcheck(layer, (x,), eps=1e-6, atol=1e-8)
    weight = layer.weight

    def of_weight(w):
        return torch.func.functional_call(layer, {"weight": w}, (x.detach(),))

    assert torch.autograd.gradcheck(of_weight, (weight.detach().clone().requires_grad_(),), eps=1e-6, atol=1e-8)


def test_planes_layout_gradients_are_contiguous_and_twice_differentiable():
    from vpintegrator.nn.common import from_planes, to_planes

    x = windows(4, 3, 2).requires_grad_()  # (batch, seq, dim)
    xp = to_planes(x)
    assert xp.shape == (2, 3, 4) and torch.equal(from_planes(xp), x)
    (grad,) = torch.autograd.grad(from_planes(xp), xp, torch.randn(4, 3, 2, dtype=torch.float64))
    assert grad.is_contiguous()  # the backward pass stays in the contiguous planes layout
    assert torch.autograd.gradcheck(lambda t: from_planes(to_planes(t).square()), (x,))
    assert torch.autograd.gradgradcheck(lambda t: from_planes(to_planes(t).square()), (x,))
