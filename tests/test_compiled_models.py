"""The numba kernel of the three architectures (vpintegrator.rollout.numba_model): one compiled kernel with the
weights as arrays, equal to the torch float64 models to ≤ 1e-12 per call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model, list_pretrained, load_model

cm = pytest.importorskip("vpintegrator.rollout.numba_model")
pytestmark = pytest.mark.skipif(not cm.AVAILABLE, reason="numba not installed")

CASES = {
    "vpff": dict(dim=3, n_blocks=6),
    "vpff_silu_seq2": dict(dim=4, n_blocks=2, n_linear=2, activation="silu", seq_len=2),
    "vpff_upper_sigmoid": dict(dim=5, n_blocks=1, activation="sigmoid", init_upper=True),
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpt_arbitrary": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=False),
    "vpt_dim4_upper": dict(dim=4, seq_len=3, n_blocks=1, n_linear=2, L=2, init_upper=True, activation="sigmoid"),
    **{f"vpt_seq{T}": dict(dim=3, seq_len=T, n_blocks=1, L=2) for T in (1, 2, 4, 5, 7)},
    **{f"vpt_arbitrary_seq{T}_dim4": dict(dim=4, seq_len=T, n_blocks=2, L=1, skew_sym=False) for T in (1, 2, 3, 4, 5)},
    "st": dict(dim=3, seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False),
    "st_stiefel_heads2": dict(dim=4, seq_len=3, n_heads=2, n_blocks=1, L=2, stiefel=True, add_connection=True),
    "st_standard": dict(dim=4, seq_len=5, n_heads=2, n_blocks=2, L=1, form="standard"),
    "st_standard_seq1_silu": dict(dim=6, seq_len=1, n_heads=3, n_blocks=1, L=2, form="standard", activation="silu"),
}


def case(key, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = build_model(key.split("_")[0], **CASES[key]).to(dtype)
    with torch.no_grad():  # non-zero biases, so that every bias enters the comparison
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return model.eval()


def sphere_windows(n, seq, dim, seed=0):
    x = torch.randn(n, seq, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("key", CASES)
def test_forward_equals_torch_float64(key):
    model = case(key)
    packed = cm.pack(model)
    assert packed is not None
    x = sphere_windows(4, model.seq_len, model.dim, seed=1)
    with torch.no_grad():
        want = model(x).numpy()
    got = packed.forward(x.numpy())
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(packed.forward(x[0].numpy()), want[0], rtol=1e-12, atol=1e-12)  # one window


def torch_rollout(model, window, n_calls, overlap):
    """The window iteration in torch: (n_calls·adv, dim) kept states."""
    T, states = model.seq_len, []
    x = torch.as_tensor(window)[None]
    with torch.no_grad():
        for _ in range(n_calls):
            pred = model(x)
            if overlap:
                states.append(pred[0, 0])
                x = torch.cat([x[:, 1:], pred[:, :1]], dim=1)
            else:
                states.extend(pred[0])
                x = pred
    return torch.stack(states).numpy()


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("key", ["vpff", "vpt", "vpt_arbitrary", "vpt_seq5", "vpt_arbitrary_seq2_dim4", "st", "st_standard"])
def test_rollout_block_equals_torch_per_call(key, overlap):
    # per call from the same window: the compiled and the torch call agree to <= 1e-12
    model = case(key)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.1)  # bounded rollouts
    packed = cm.pack(model)
    window = sphere_windows(1, model.seq_len, model.dim, seed=3)[0].numpy()
    n_calls = 40
    adv = 1 if overlap else model.seq_len
    out = np.empty((n_calls * adv, model.dim))
    last = packed.rollout_block(window, n_calls, out, overlap=overlap)
    want = torch_rollout(model, window, n_calls, overlap)
    # random models are no integrators: their rollouts leave the sphere and amplify the ~1e-16 per-call
    # roundings, so end to end only over the first calls; every call below
    k = 10 * adv
    np.testing.assert_allclose(out[:k], want[:k], rtol=1e-11, atol=1e-11)
    # each call equals the torch call on the same window
    states = np.concatenate([window, out])
    T = model.seq_len
    checked = 0
    for k in range(0, n_calls * adv - T, adv):
        w = states[k : k + T]
        if np.abs(w).max() > 5.0:  # grown states: Cayley of C ~ 1e4 is conditioned ~1e4 (either way of computing it)
            continue
        checked += 1
        with torch.no_grad():
            ref = model(torch.as_tensor(w)[None])[0].numpy()
        np.testing.assert_allclose(packed.forward(w), ref, rtol=1e-12, atol=1e-12)
    assert checked >= 5
    np.testing.assert_array_equal(last, states[-T:])
    np.testing.assert_array_equal(window, sphere_windows(1, T, model.dim, seed=3)[0].numpy())  # not modified


@pytest.mark.parametrize("name", ["rigid_body_vpt", "rigid_body_vpff", "rigid_body_st"])
def test_shipped_models_over_hundreds_of_steps(name):
    if name not in list_pretrained():
        pytest.skip(f"{name} not shipped")
    from vpintegrator.rollout import initial_window
    from vpintegrator.systems import paper_sphere_points, paper_trajectory_index

    model = load_model(f"pretrained:{name}")
    packed = cm.pack(model)
    y0 = paper_sphere_points()[[paper_trajectory_index(1)]]
    window = initial_window("rigid_body", y0, 0.2, model.seq_len)[0]
    n_calls = 300 // model.seq_len
    out = np.empty((n_calls * model.seq_len, 3))
    packed.rollout_block(window, n_calls, out)
    states = np.concatenate([window, out])
    T = model.seq_len
    with torch.no_grad():  # every call against torch from the same window
        wins = np.stack([states[k : k + T] for k in range(0, n_calls * T, T)])
        want = model(torch.as_tensor(wins)).numpy().reshape(-1, 3)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out, torch_rollout(model, window, n_calls, False), rtol=0, atol=1e-11)


def test_one_kernel_for_every_weight_set_and_configuration():
    assert cm.compile_kernels() >= 0.0
    kernel = cm._rollout_rows
    before = len(kernel.signatures)
    for key in ("vpff", "vpt", "vpt_arbitrary_seq4_dim4", "st", "st_standard"):
        for seed in (0, 1):
            packed = cm.pack(case(key, seed))
            packed.forward(sphere_windows(2, packed.seq_len, packed.dim).numpy())
            out = np.empty((2, 5 * packed.seq_len, packed.dim))
            packed.rollout_block(sphere_windows(2, packed.seq_len, packed.dim).numpy(), 5, out)
    for key in ("lpnet", "lp_transformer_seq4_sym"):  # the Lie–Poisson ops: the same kernel
        packed = cm.pack(lp_case(key))
        packed.forward(sphere_windows(2, packed.seq_len, 3).numpy())
    for model in [symp_case(key, scale=0.3) for key in ("la_sympnet", "g_sympnet_dim6_sigmoid_lower", "st_sym_vector",
                                                         "st_arb_matrix_lower")] + [  # the shears
            sym_vp_case("vpt_sym", scale=0.1), sym_vp_case("vpff_sym", scale=0.1)]:  # flow times and inverses
        packed = cm.pack(model)
        out = np.empty((2, 5 * packed.seq_len, packed.dim))
        packed.rollout_block(np.ones((2, packed.seq_len, packed.dim)), 5, out)
    assert len(kernel.signatures) == max(before, 1) <= 1  # no recompilation per model
    assert kernel._cache.__class__.__name__ != "NullCache"  # cached across processes


def test_float32_model_is_computed_in_float64_from_its_weights():
    model = case("vpt", dtype=torch.float32)
    x = sphere_windows(3, 3, 3)
    got = cm.pack(model).forward(x.numpy())
    with torch.no_grad():
        want = model.double()(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_snapshot_unsupported_and_bad_shapes():
    model = case("vpt")
    packed = cm.pack(model)
    x = sphere_windows(2, 3, 3).numpy()
    before = packed.forward(x)
    with torch.no_grad():
        model.blocks[0].feedforward.layers[0].weight.add_(1.0)
    np.testing.assert_array_equal(packed.forward(x), before)  # weights copied at pack time
    assert cm.pack(torch.nn.Linear(3, 3)) is None
    odd = case("vpff")
    odd.layers[0].activation = "gelu"
    assert cm.pack(odd) is None  # unknown activation: callers fall back to torch
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        packed.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="C-contiguous float64"):
        packed.rollout_block(x[0], 4, np.empty((5, 3)))


def test_blow_up_gives_inf_or_nan_not_an_exception():
    model = case("st")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(40.0)
    packed = cm.pack(model)
    out = np.empty((3 * 50, 3))
    packed.rollout_block(np.full((3, 3), 10.0), 50, out)  # exp/tanh of huge arguments: no OverflowError
    x = torch.full((1, 3, 3), 1e300, dtype=torch.float64)
    with torch.no_grad():
        want = model(x).numpy()[0]
    np.testing.assert_allclose(packed.forward(x[0].numpy()), want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_a_zero_pivot_of_the_cayley_system_is_nan_not_an_exception():
    """A blown-up window of rank 2 (entries up to 1e14): I + S, S of rank 2 and ~1e20 or more, meets an exactly zero
    pivot in the kernel's Gauss–Jordan (T = 4) for some windows. Division is IEEE there (NaN: the model has
    diverged; torch's solve returns finite values of a system of condition > 1e16 instead), never numba's default
    ZeroDivisionError, which crashed a study's batch-1 rollout of a trained VPT (its rollout now fails at a step)."""
    torch.manual_seed(0)
    model = build_model("vpt", dim=4, seq_len=4, n_blocks=1, L=2).double().eval()
    packed = cm.pack(model)
    rng = np.random.default_rng(0)
    met = []
    for _ in range(40):
        window = (rng.normal(size=(4, 2)) @ rng.normal(size=(2, 4))) * 10.0 ** rng.uniform(6, 14)
        if np.isnan(packed.forward(window)).all():
            met.append(window)
    assert met, "no window met the zero pivot: the case is not exercised"
    out = np.empty((4 * 3, 4))
    packed.rollout_block(met[0], 3, out)
    assert np.isnan(out).all()


# ---- the Lie–Poisson networks: one op per step of their schedule (plain, or the palindrome of half-time flows).
# Random strongly rotating models amplify roundings over a rollout (ψ's weights ×10 gave 1e-8 after 200 calls
# of lp_transformer from radius-2 states, chaos, not a kernel error); ×5 keeps angles of order 0.1-1.

LP_CASES = {
    "lpnet": ("lpnet", dict(dim=3, n_layers=3, width=3)),
    "lpnet_sym": ("lpnet", dict(dim=3, n_layers=3, width=3, symmetric=True)),
    "lpnet_seq3_sym": ("lpnet", dict(dim=3, n_layers=2, width=2, seq_len=3, symmetric=True)),
    "lp_transformer": ("lp_transformer", dict(dim=3, seq_len=3, L=2, n_layers=2, width=3)),
    "lp_transformer_sym": ("lp_transformer", dict(dim=3, seq_len=3, L=2, n_layers=1, width=2, symmetric=True)),
    "lp_transformer_seq4_sym": ("lp_transformer", dict(dim=3, seq_len=4, L=2, n_layers=1, width=3, symmetric=True)),
}


def lp_case(key, seed=0):
    torch.manual_seed(seed)
    name, config = LP_CASES[key]
    model = build_model(name, **config).double()
    with torch.no_grad():  # ψ's output weights scaled up and d non-zero: rotations by angles of order 1
        for pname, p in model.named_parameters():
            if pname.endswith("psi.w"):
                p.mul_(5.0)
            elif pname.endswith("psi.d"):
                p.uniform_(-1.0, 1.0)
    return model.eval()


@pytest.mark.parametrize("key", LP_CASES)
def test_lie_poisson_forward_and_rollout_equal_torch(key):
    model = lp_case(key)
    packed = cm.pack(model)
    assert packed is not None
    assert len(packed.ops) == len(model._schedule(1.0))  # one op per step (twice the layers when symmetric)
    x = sphere_windows(5, model.seq_len, 3, seed=2)
    with torch.no_grad():
        want = model(x).numpy()
        angles = (model(x) - x).norm(dim=-1)
    assert angles.mean() > 0.1  # the rotations are not tiny
    np.testing.assert_allclose(packed.forward(x.numpy()), want, rtol=1e-12, atol=1e-12)
    n_calls, T = 200, model.seq_len
    window = (2.0 * x[0]).numpy()  # states off the unit sphere as well
    out = np.empty((n_calls * T, 3))
    packed.rollout_block(window, n_calls, out)
    np.testing.assert_allclose(out, torch_rollout(model, window, n_calls, False), rtol=1e-10, atol=1e-10)
    out1 = np.empty((n_calls, 3))
    packed.rollout_block(window, n_calls, out1, overlap=True)
    np.testing.assert_allclose(out1, torch_rollout(model, window, n_calls, True), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("key", ["lpnet", "lpnet_sym", "lp_transformer", "lp_transformer_sym"])
def test_lie_poisson_kernel_keeps_every_casimir(key):
    model = lp_case(key)
    packed = cm.pack(model)
    window = sphere_windows(1, model.seq_len, 3, seed=4)[0].numpy() * np.linspace(0.5, 2.0, model.seq_len)[:, None]
    n_calls, T = 10_000, model.seq_len
    out = np.empty((n_calls * T, 3))
    packed.rollout_block(window, n_calls, out)
    radii = np.linalg.norm(out.reshape(n_calls, T, 3), axis=-1)  # state i of every window: its radius kept
    worst = np.max(np.abs(radii / np.linalg.norm(window, axis=-1) - 1.0))
    # round-off only: at most one unit roundoff per rotation (n_calls · n_ops rotations per state). 1e-13 is
    # not reachable by Rodrigues' formula in float64 (the drift is correlated along the orbit): lpnet seed 0
    # drifts 6.2e-13 here and 6.1e-13 in torch's own forward over the same 10 000 calls
    assert worst <= n_calls * len(packed.ops) * 2.0**-53


def test_lie_poisson_symmetric_steps_and_reuse():
    # the palindrome: each layer's axis and ψ stored once, the flow times +1/2 (inverse at −1/2 = flow at +1/2)
    plain, sym = lp_case("lp_transformer"), lp_case("lp_transformer_sym")
    sym_packed = cm.pack(sym)
    n_weights = sum(p.numel() for p in sym.parameters())
    assert sym_packed.params.size == n_weights + len(sym._schedule(1.0))  # the weights once, one τ per step
    taus = sym_packed.params[sym_packed.ops[:, 4]]
    np.testing.assert_array_equal(taus, 0.5)
    np.testing.assert_array_equal(cm.pack(plain).params[cm.pack(plain).ops[:, 4]], 1.0)
    codes = sym_packed.ops[:, 0].tolist()
    assert codes == codes[::-1] and codes[0] == cm.OP_LP_LAYER and cm.OP_LP_COUPLING in codes
    x = sphere_windows(2, 3, 3, seed=5)
    with torch.no_grad():  # Φ_{-1} = Φ_1⁻¹ also through the kernel's forward
        back = sym.inverse(torch.as_tensor(sym_packed.forward(x.numpy())))
    np.testing.assert_allclose(back.numpy(), x.numpy(), rtol=1e-13, atol=1e-13)


def test_lie_poisson_rollouts_run_compiled():
    from vpintegrator.rollout import ModelStep, rollout

    model = lp_case("lpnet_sym")
    w0 = sphere_windows(2, 1, 3, seed=6).numpy()
    step = ModelStep(model, device="cpu")
    y = rollout(step, w0, 0.2, 50).y
    assert step.describe()["runner"] == "numba"
    want = np.stack([torch_rollout(model, w0[i], 50, False) for i in range(2)])
    np.testing.assert_allclose(y[:, 1:], want, rtol=1e-12, atol=1e-12)


# ---- the symplectic architectures: every SympNet layer and the symplectic attention as shear ops.

SYMP_CASES = {
    "la_sympnet": ("la_sympnet", dict(dim=4)),
    "la_sympnet_dim6_silu_lower": ("la_sympnet", dict(dim=6, depth=3, nhidden=2, activation="silu",
                                                      init_upper_linear=False, init_upper_act=False)),
    "la_sympnet_nhidden0_seq2": ("la_sympnet", dict(dim=4, depth=2, nhidden=0, seq_len=2)),
    "la_sympnet_sigmoid": ("la_sympnet", dict(dim=2, depth=1, nhidden=1, activation="sigmoid")),
    "la_sympnet_identity": ("la_sympnet", dict(dim=4, depth=4, nhidden=1, activation="identity")),
    "g_sympnet": ("g_sympnet", dict(dim=4)),
    "g_sympnet_dim6_sigmoid_lower": ("g_sympnet", dict(dim=6, upscaling_dimension=10, n_layers=3,
                                                       activation="sigmoid", init_upper=False)),
    "g_sympnet_silu_seq3": ("g_sympnet", dict(dim=2, upscaling_dimension=6, n_layers=4, activation="silu", seq_len=3)),
    "st_sym_matrix": ("symplectic_transformer", dict(dim=4)),
    "st_sym_vector": ("symplectic_transformer", dict(dim=6, seq_len=5, attention_activation="vector_softmax")),
    "st_arb_matrix_lower": ("symplectic_transformer", dict(dim=4, seq_len=4, symmetric=False, init_upper=False)),
    "st_arb_vector_L2": ("symplectic_transformer", dict(dim=4, L=2, symmetric=False,
                                                        attention_activation="vector_softmax")),
    "st_seq1_no_sympnet": ("symplectic_transformer", dict(dim=4, seq_len=1, n_sympnet=0, L=2)),
    "st_silu_up12": ("symplectic_transformer", dict(dim=4, seq_len=2, upscaling_dimension=12,
                                                    sympnet_activation="silu", L=2)),
}


def symp_case(key, seed=0, scale=1.0):
    torch.manual_seed(seed)
    name, config = SYMP_CASES[key]
    model = build_model(name, **config).double()
    with torch.no_grad():  # non-zero biases (the gradient layers start at 0), so every bias enters
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            p.mul_(scale)
    return model.eval()


@pytest.mark.parametrize("key", SYMP_CASES)
def test_symplectic_forward_equals_torch(key):
    model = symp_case(key)
    packed = cm.pack(model)
    assert packed is not None
    assert len(packed.ops) == len(model.window_chain())  # one op per layer
    x = torch.randn(4, model.seq_len, model.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(want - x.numpy()).max() > 0.1  # the layers do something
    np.testing.assert_allclose(packed.forward(x.numpy()), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(packed.forward(x[0].numpy()), want[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("key", ["la_sympnet", "g_sympnet_dim6_sigmoid_lower", "st_sym_matrix", "st_sym_vector",
                                 "st_arb_matrix_lower", "st_arb_vector_L2"])
def test_symplectic_rollout_equals_torch(key, overlap):
    # random models are no integrators: most grow (hyperbolic linear shears; vector softmax with symmetric A
    # is not even symplectic) and amplify the ~1e-16 per-call roundings, so end to end over the first calls
    # (weights ×0.1: still bounded there), and every call of the 200 against torch from the same window
    model = symp_case(key, scale=0.1)
    packed = cm.pack(model)
    window = torch.randn(model.seq_len, model.dim, generator=torch.Generator().manual_seed(3),
                         dtype=torch.float64).numpy()
    n_calls, T = 200, model.seq_len
    adv = 1 if overlap else T
    out = np.empty((n_calls * adv, model.dim))
    last = packed.rollout_block(window, n_calls, out, overlap=overlap)
    want = torch_rollout(model, window, n_calls, overlap)
    k = 30 * adv
    size = max(1.0, np.abs(want[:k]).max())  # la_sympnet grows to ~1e2 there
    np.testing.assert_allclose(out[:k], want[:k], rtol=1e-12, atol=1e-12 * size)
    states = np.concatenate([window, out])
    attention = key.startswith("st_")
    checked = 0
    for k in range(0, n_calls * adv, adv):
        w = states[k : k + T]
        size = np.abs(w).max()
        if attention and size > 10.0:  # grown states: exp of C ~ |x|² magnifies the roundings of C either way
            continue
        checked += 1
        with torch.no_grad():
            ref = model(torch.as_tensor(w)[None])[0].numpy()
        np.testing.assert_allclose(packed.forward(w), ref, rtol=1e-12, atol=1e-12 * max(1.0, size))
    assert checked >= (15 if attention else n_calls)
    np.testing.assert_array_equal(last, states[-T:])


@pytest.mark.parametrize("name", ["coupled_oscillator_g_sympnet", "coupled_oscillator_symplectic_transformer"])
def test_shipped_symplectic_models_over_hundreds_of_steps(name):
    if name not in list_pretrained():
        pytest.skip(f"{name} not shipped")
    from vpintegrator.rollout import initial_window
    from vpintegrator.systems import get_system

    model = load_model(f"pretrained:{name}")
    system = get_system("coupled_oscillator")
    packed = cm.pack(model)
    assert packed is not None
    T = model.seq_len
    window = initial_window("coupled_oscillator", np.array([system.default_y0]), system.default_dt, T)[0]
    n_calls = 300 // T
    out = np.empty((n_calls * T, model.dim))
    packed.rollout_block(window, n_calls, out)
    states = np.concatenate([window, out])
    with torch.no_grad():  # every call against torch from the same window
        wins = np.stack([states[k : k + T] for k in range(0, n_calls * T, T)])
        want = model(torch.as_tensor(wins)).numpy().reshape(-1, model.dim)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)
    # and the whole 300-step rollout against torch's own
    np.testing.assert_allclose(out, torch_rollout(model, window, n_calls, False), rtol=0, atol=1e-12)
    # the rollout engine runs the shipped model compiled, with the same states
    from vpintegrator.rollout import ModelStep, rollout

    step = ModelStep(model, device="cpu")
    y = rollout(step, window[None], system.default_dt, n_calls * T + T - 1).y[0]
    assert step.describe()["runner"] == "numba"
    np.testing.assert_array_equal(y[T:], out)


@pytest.mark.parametrize("key", ["g_sympnet", "st_sym_matrix", "st_arb_vector_L2"])
def test_symplectic_rollouts_run_compiled(key):
    from vpintegrator.rollout import ModelStep, rollout

    model = symp_case(key, scale=0.05)
    w0 = torch.randn(2, model.seq_len, model.dim, generator=torch.Generator().manual_seed(6),
                     dtype=torch.float64).numpy()
    step = ModelStep(model, device="cpu")
    y = rollout(step, w0, 0.4, 60).y
    assert step.describe()["runner"] == "numba"
    n_calls = -(-(60 + 1 - model.seq_len) // model.seq_len)
    want = np.stack([torch_rollout(model, w0[i], n_calls, False) for i in range(2)])
    np.testing.assert_allclose(y[:, model.seq_len :], want[:, : 61 - model.seq_len], rtol=1e-12, atol=1e-12)


def test_symplectic_unpackable_variants_fall_back_to_torch():
    from vpintegrator.rollout import ModelStep, rollout

    # an activation the kernel does not know (set after construction, as a user's layer could) ...
    model = symp_case("g_sympnet", scale=0.3)
    model.layers[1].activation = "gelu"
    model.layers[1]._sigma = torch.nn.functional.gelu
    assert cm.pack(model) is None
    step = ModelStep(model, device="cpu")
    w0 = np.full((1, 1, 4), 0.3)
    y = rollout(step, w0, 0.4, 10).y
    assert step.describe()["runner"] != "numba"
    np.testing.assert_array_equal(y[0, 1:], torch_rollout(model, w0[0], 10, False))
    # ... an attention softmax it does not know, a layer subclass that changes the formula, a foreign layer
    st = symp_case("st_sym_matrix")
    st.layers[0].activation = "sparsemax"
    assert cm.pack(st) is None
    from vpintegrator.nn.sympnet import GradientLayerQ

    class Doubled(GradientLayerQ):
        def increment(self, source):
            return 2.0 * super().increment(source)

    g = symp_case("g_sympnet")
    g.layers[0] = Doubled(4)
    assert cm.pack(g) is None
    la = symp_case("la_sympnet")
    la.layers[0] = torch.nn.Identity()
    assert cm.pack(la) is None


def test_symplectic_kernel_keeps_the_shears_symplectic():
    # the compiled map's Jacobian (central differences of the kernel itself) satisfies JᵀΩJ = Ω on ℝ^{T·dim}
    model = symp_case("st_arb_matrix_lower", scale=0.5)
    packed = cm.pack(model)
    T, D = model.seq_len, model.dim
    n = D // 2
    x0 = torch.randn(T, D, generator=torch.Generator().manual_seed(8), dtype=torch.float64).numpy()
    eps = 1e-6
    J = np.empty((T * D, T * D))
    for k in range(T * D):
        e = np.zeros(T * D)
        e[k] = eps
        J[:, k] = (packed.forward(x0 + e.reshape(T, D)) - packed.forward(x0 - e.reshape(T, D))).ravel() / (2 * eps)
    omega1 = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    omega = np.kron(np.eye(T), omega1)
    assert np.abs(J.T @ omega @ J - omega).max() < 1e-7


# ---- the symmetric (palindromic) VPFF/VPT: half-time members and the triangular layers' explicit inverses
# (back-substitution), the attention's inverse as the layer at −τ; one op per step of the schedule.

SYM_VP_CASES = {
    "vpff_sym": ("vpff", dict(dim=3, n_blocks=2, symmetric=True)),
    "vpff_sym_upper_sigmoid": ("vpff", dict(dim=4, n_blocks=1, n_linear=2, activation="sigmoid", init_upper=True,
                                            symmetric=True)),
    "vpt_sym": ("vpt", dict(dim=3, seq_len=3, n_blocks=2, L=3, symmetric=True)),
    "vpt_sym_seq4_silu": ("vpt", dict(dim=4, seq_len=4, n_blocks=1, L=2, activation="silu", symmetric=True)),
    "vpt_sym_seq2_upper": ("vpt", dict(dim=3, seq_len=2, n_blocks=1, L=2, init_upper=True, symmetric=True)),
}


def sym_vp_case(key, seed=0, scale=1.0):
    torch.manual_seed(seed)
    name, config = SYM_VP_CASES[key]
    model = build_model(name, **config).double()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            p.mul_(scale)
    return model.eval()


@pytest.mark.parametrize("key", SYM_VP_CASES)
def test_symmetric_vp_forward_rollout_and_inverse(key):
    model = sym_vp_case(key, scale=0.5)
    packed = cm.pack(model)
    assert packed is not None
    assert len(packed.ops) == len(model._schedule(1.0))  # every layer twice
    # each layer's matrix (materialised dim×dim) and bias stored once, and one τ per step
    once = sum(model.dim**2 + (0 if getattr(m, "bias", None) is None else m.bias.numel()) for m in model._flow_layers())
    assert packed.params.size == once + len(packed.ops)
    residual = packed.ops[packed.ops[:, 0] == cm.OP_RESIDUAL]
    np.testing.assert_array_equal(np.abs(packed.params[residual[:, 6]]), 0.5)
    assert (residual[:, 5] == 2).sum() == (residual[:, 5] == 1).sum() == len(residual) // 2  # half: the inverses
    x = sphere_windows(4, model.seq_len, model.dim, seed=1)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(want - x.numpy()).max() > 0.1
    got = packed.forward(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # the model's own inverse undoes the compiled map
        back = model.inverse(torch.as_tensor(got)).numpy()
    np.testing.assert_allclose(back, x.numpy(), rtol=1e-12, atol=1e-12)
    # a rollout of a smaller model (random VPTs are chaotic: roundings grow), end to end over the first calls
    model = sym_vp_case(key, scale=0.1)
    packed = cm.pack(model)
    n_calls, T = 200, model.seq_len
    window = x[0].numpy()
    out = np.empty((n_calls * T, model.dim))
    packed.rollout_block(window, n_calls, out)
    ref = torch_rollout(model, window, n_calls, False)
    np.testing.assert_allclose(out[: 10 * T], ref[: 10 * T], rtol=1e-11, atol=1e-11)
    states = np.concatenate([window, out])
    for k in range(0, n_calls * T, T):  # every call against torch from the same window
        w = states[k : k + T]
        if np.abs(w).max() > 5.0:  # grown states: Cayley of a large C is ill-conditioned either way
            continue
        with torch.no_grad():
            np.testing.assert_allclose(packed.forward(w), model(torch.as_tensor(w)[None])[0].numpy(),
                                       rtol=1e-12, atol=1e-12)


def test_symmetric_vpt_kernel_is_time_symmetric():
    # Φ_{−1} = Φ_1⁻¹: the packed palindrome with every flow time negated inverts the packed map
    model = sym_vp_case("vpt_sym", scale=0.5)
    packed = cm.pack(model)
    negated = cm.CompiledModel(packed.params.copy(), packed.ops, packed.dim, packed.seq_len, packed.pred_window)
    tau_offsets = np.concatenate([packed.ops[packed.ops[:, 0] == cm.OP_RESIDUAL, 6],
                                  packed.ops[packed.ops[:, 0] == cm.OP_VP_ATTENTION, 4]])
    negated.params[tau_offsets] *= -1.0
    x = sphere_windows(3, 3, 3, seed=9).numpy()
    np.testing.assert_allclose(negated.forward(packed.forward(x)), x, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("key", ["st_sym_matrix", "st_arb_vector_L2", "g_sympnet_silu_seq3"])
def test_symplectic_blow_up_gives_inf_or_nan_not_an_exception(key):
    model = symp_case(key, scale=40.0)
    packed = cm.pack(model)
    out = np.empty((model.seq_len * 400, model.dim))
    packed.rollout_block(np.full((model.seq_len, model.dim), 10.0), 400, out)  # exp/tanh overflow: no exception
    assert not np.isfinite(out).all()
    x = torch.full((1, model.seq_len, model.dim), 1e300, dtype=torch.float64)
    with torch.no_grad():
        want = model(x).numpy()[0]
    np.testing.assert_allclose(packed.forward(x[0].numpy()), want, rtol=1e-12, atol=1e-12, equal_nan=True)
