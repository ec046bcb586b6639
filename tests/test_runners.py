"""The model runners of ModelStep: a model compiled to straight-line Python on floats
(``vpintegrator.rollout.runners``), checked against the model's own forward."""

from __future__ import annotations

import pytest
import torch

from vpintegrator.errors import VPIntegratorError
from vpintegrator.models import build_model, list_pretrained, load_model

PAPER = {
    "vpff": dict(dim=3, n_blocks=6),
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpt_arbitrary": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=False),
    "st": dict(dim=3, seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False),
}


def windows(n, seq, dim, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, seq, dim, generator=gen, dtype=torch.float64).to(dtype)


def test_runners_are_not_in_nn():
    import vpintegrator.nn as nn_package

    assert not hasattr(nn_package, "compile_scalar")
    from vpintegrator.rollout import ScalarForward, ScalarUnsupported, compile_scalar  # noqa: F401
    from vpintegrator.rollout.runners import compile_scalar as runner_compile

    assert compile_scalar is runner_compile


# --- the small-batch inference path: the model as generated Python on floats ------------------------------

SCALAR_CASES = {
    **PAPER,
    "vpt_seq1": dict(dim=3, seq_len=1, n_blocks=1, L=2),
    "vpt_dim4_upper": dict(dim=4, seq_len=3, n_blocks=1, n_linear=2, L=2, init_upper=True, activation="sigmoid"),
    "vpff_silu": dict(dim=4, n_blocks=2, n_linear=2, activation="silu", seq_len=2),
    "st_stiefel": dict(dim=4, seq_len=3, n_heads=2, n_blocks=1, L=2, stiefel=True, add_connection=True),
    "st_standard": dict(dim=4, seq_len=5, n_heads=2, n_blocks=2, L=1, form="standard"),
}


def sphere_windows(n, seq, dim, dtype=torch.float64, seed=0):
    """Random windows with every state on the unit sphere (the rigid-body data's scale)."""
    x = windows(n, seq, dim, seed=seed)
    return (x / x.norm(dim=-1, keepdim=True)).to(dtype)


def scalar_case(key, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = build_model(key.split("_")[0], **SCALAR_CASES[key]).to(dtype)
    with torch.no_grad():  # non-zero biases, so that every bias enters the comparison
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return model.eval()


@pytest.mark.parametrize("key", SCALAR_CASES)
@pytest.mark.parametrize("batch", [1, 4])
def test_scalar_forward_equals_forward_float64(key, batch):
    from vpintegrator.rollout.runners import compile_scalar

    model = scalar_case(key)
    x = sphere_windows(batch, model.seq_len, model.dim, seed=batch)
    with torch.no_grad():
        want = model(x)
    got = compile_scalar(model)(x)
    assert got.shape == want.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", ["vpff", "vpt", "vpt_arbitrary", "st", "st_standard"])
def test_scalar_forward_of_float32_model_is_float64_arithmetic(key):
    from vpintegrator.rollout.runners import compile_scalar

    model = scalar_case(key, torch.float32)
    x = sphere_windows(3, model.seq_len, model.dim, dtype=torch.float32)
    got = compile_scalar(model)(x)
    with torch.no_grad():
        want64 = model.double()(x.double())  # the same float32 weights, float64 arithmetic
        want32 = model.float()(x).double()
    torch.testing.assert_close(got, want64, rtol=1e-12, atol=1e-12)
    # so it differs from the float32 forward by that forward's own rounding (see test_float32_agrees_with_float64;
    # ModelStep therefore uses the scalar code for float64 models only)
    torch.testing.assert_close(got, want32, rtol=1e-4, atol=1e-4 * (1 + float(want32.abs().max())))


@pytest.mark.parametrize("name", ["rigid_body_vpt", "rigid_body_vpff", "rigid_body_st"])
@pytest.mark.parametrize("batch", [1, 5])
def test_scalar_forward_of_shipped_models(name, batch):
    from vpintegrator.rollout.runners import compile_scalar

    if name not in list_pretrained():
        pytest.skip(f"{name} not shipped")
    model = load_model(f"pretrained:{name}")
    x = sphere_windows(batch, model.seq_len, model.dim, seed=7)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compile_scalar(model)(x), want, rtol=0, atol=1e-12)


def test_scalar_forward_is_a_snapshot_and_rejects_other_modules():
    from vpintegrator.rollout.runners import ScalarUnsupported, compile_scalar

    model = scalar_case("vpt")
    scalar = compile_scalar(model)
    x = windows(2, 3, 3)
    before = scalar(x)
    with torch.no_grad():
        model.blocks[0].feedforward.layers[0].weight.add_(1.0)
    torch.testing.assert_close(scalar(x), before, rtol=0, atol=0)  # weights were copied at compile time
    with pytest.raises(ScalarUnsupported, match="seq 1 and 3"):
        compile_scalar(build_model("vpt", dim=3, seq_len=4))
    with pytest.raises(ScalarUnsupported, match="Linear"):
        compile_scalar(torch.nn.Linear(3, 3))
    with pytest.raises(VPIntegratorError, match=r"\(batch, 3, 3\)"):
        scalar(torch.zeros(2, 4, 3))
