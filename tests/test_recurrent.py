"""The recurrent window models ``gru`` and ``lru``: held against slow references written here (``torch.nn.GRU``
with the same weights, an explicit complex loop of the LRU's recurrence), their initialisation, dtypes and seeds,
model files, ``vp-train`` + ``vp-rollout`` on observed windows from the CLI and from Python, and one-line
refusals of bad options."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator import VPIntegratorError
from vpintegrator.data import integrate, read_rollout, write_trajectories
from vpintegrator.models import build_model, count_parameters, load_model, model_preserves, save_model
from vpintegrator.nn.recurrent import GRULayer, LRULayer, fused_gru_last

pytestmark = pytest.mark.usefixtures("one_thread")


def _randomise(model: torch.nn.Module, seed: int = 0, scale: float = 0.5) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


# ------------------------------------------------------------------------------ the slow references


def _torch_gru(model) -> torch.nn.GRU:
    """``torch.nn.GRU`` with the weights of the model's stacked ``GRULayer``s."""
    ref = torch.nn.GRU(model.dim, model.grus[0].width, num_layers=len(model.grus), batch_first=True).double()
    with torch.no_grad():
        for i, layer in enumerate(model.grus):
            getattr(ref, f"weight_ih_l{i}").copy_(layer.input.weight)
            getattr(ref, f"bias_ih_l{i}").copy_(layer.input.bias)
            getattr(ref, f"weight_hh_l{i}").copy_(layer.hidden.weight)
            getattr(ref, f"bias_hh_l{i}").copy_(layer.hidden.bias)
    return ref


def _lru_loop(layer: LRULayer, u: torch.Tensor) -> torch.Tensor:
    """The LRU as written in the paper: complex numbers, one step at a time from h = 0."""
    lam = torch.exp(-torch.exp(layer.nu_log) + 1j * torch.exp(layer.theta_log))
    gamma = torch.exp(layer.gamma_log)
    B = torch.complex(layer.B_re, layer.B_im)
    C = torch.complex(layer.C_re, layer.C_im)
    h = torch.zeros(u.shape[0], layer.state, dtype=torch.complex128)
    ys = []
    for t in range(u.shape[1]):
        h = lam * h + gamma * (u[:, t].to(torch.complex128) @ B.T)
        ys.append((h @ C.T).real + layer.D * u[:, t])
    return torch.stack(ys, dim=1)


def _lru_model_reference(model, x: torch.Tensor) -> torch.Tensor:
    """The LRU window model's forward with every LRU layer replaced by the loop."""
    sigma = torch.tanh if model.config["activation"] == "tanh" else torch.nn.functional.silu
    u = model.encoder(x)
    for lru, mix in zip(model.lrus, model.mix):
        u = u + mix(sigma(_lru_loop(lru, u)))
    h = u[:, -1]
    for layer in model.readout.hidden:
        h = sigma(layer(h))
    return x[:, -1] + model.readout.out(h)


@pytest.mark.parametrize("layers", [1, 3])
def test_gru_is_torch_nn_gru_with_the_same_weights(layers):
    torch.manual_seed(1)
    model = build_model("gru", dim=3, seq_len=6, width=5, layers=layers, depth=2).double()
    _randomise(model)
    x = torch.randn(7, 6, 3, dtype=torch.float64)
    out, _ = _torch_gru(model)(x)
    torch.testing.assert_close(model.features(x), out[:, -1], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(fused_gru_last(list(model.grus), x), out[:, -1], rtol=1e-13, atol=1e-13)
    with torch.inference_mode():  # a rollout's path: torch's fused kernel, the same numbers
        torch.testing.assert_close(model.features(x), out[:, -1], rtol=1e-13, atol=1e-13)
        # under a torch.func transform the fused kernel has no batching rule: the layers' loop runs instead
        torch.testing.assert_close(torch.func.vmap(model)(x.unsqueeze(1))[:, 0], model(x), rtol=1e-13, atol=1e-13)
    h = out[:, -1]
    for layer in model.readout.hidden:
        h = torch.tanh(layer(h))
    torch.testing.assert_close(model(x)[:, 0], x[:, -1] + model.readout.out(h), rtol=1e-13, atol=1e-13)


def test_the_gru_reference_can_fail():
    """The parity test above sees a wrong gate order: the r and z rows of the input weights swapped."""
    torch.manual_seed(2)
    model = build_model("gru", dim=2, seq_len=5, width=4).double()
    ref = _torch_gru(model)
    with torch.no_grad():
        w = model.grus[0].input.weight
        w.copy_(torch.cat([w[4:8], w[:4], w[8:]]))
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    assert (model.features(x) - ref(x)[0][:, -1]).abs().max() > 1e-3


def test_gru_layer_initialises_as_torch_nn_gru():
    torch.manual_seed(0)
    layer = GRULayer(3, 25)
    bound = 1 / math.sqrt(25)
    for p in layer.parameters():
        assert p.abs().max() <= bound and p.abs().max() > 0.8 * bound


@pytest.mark.parametrize("T", [1, 2, 7])
def test_lru_layer_is_the_complex_recurrence(T):
    torch.manual_seed(0)
    layer = LRULayer(4, 6, r_min=0.3, r_max=0.95, max_phase=math.pi).double()
    u = torch.randn(5, T, 4, dtype=torch.float64)
    ref = _lru_loop(layer, u)
    torch.testing.assert_close(layer(u), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer(u, last=True), ref[:, -1], rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # the reference can fail: a conjugated eigenvalue gives another sequence
        layer.theta_log.add_(math.log(2.0))
    assert (layer(u) - ref).abs().max() > 1e-3 or T == 1


@pytest.mark.parametrize("layers", [1, 2])
def test_lru_model_is_its_loop_reference(layers):
    torch.manual_seed(3)
    model = build_model("lru", dim=2, seq_len=5, width=6, state=4, layers=layers, depth=1).double()
    with torch.no_grad():  # a readout that is not zero, so that the whole path is compared
        model.readout.out.weight.normal_()
        model.readout.out.bias.normal_()
    x = torch.randn(8, 5, 2, dtype=torch.float64)
    torch.testing.assert_close(model(x)[:, 0], _lru_model_reference(model, x), rtol=1e-12, atol=1e-12)


def test_lru_initialisation_draws_the_ring():
    torch.manual_seed(0)
    layer = LRULayer(8, 2000, r_min=0.4, r_max=0.9, max_phase=1.0).double()
    mod, phase = (t.detach() for t in layer.eigenvalues())
    assert mod.min() >= 0.4 - 1e-12 and mod.max() <= 0.9 + 1e-12
    assert mod.min() < 0.45 and mod.max() > 0.85  # the whole ring is drawn
    assert phase.min() >= 0 and phase.max() <= 1.0 + 1e-12 and phase.max() > 0.95
    # |λ|² uniform on [r_min², r_max²]: its mean is (r_min² + r_max²) / 2
    assert abs(float((mod**2).mean()) - (0.16 + 0.81) / 2) < 0.02
    torch.testing.assert_close(torch.exp(layer.gamma_log), torch.sqrt(1 - mod**2), rtol=1e-6, atol=1e-7)  # drawn in float32


# ------------------------------------------------------------------------------ the window model's contract


@pytest.mark.parametrize("name", ["gru", "lru"])
def test_untrained_models_are_the_identity_or_the_extrapolation(name):
    torch.manual_seed(0)
    x = torch.randn(4, 3, 2, dtype=torch.float64)
    first = build_model(name, dim=2, seq_len=3).double()
    torch.testing.assert_close(first(x)[:, 0], x[:, -1], rtol=0, atol=0)
    second = build_model(name, dim=2, seq_len=3, increment="second").double()
    torch.testing.assert_close(second(x)[:, 0], 2 * x[:, -1] - x[:, -2], rtol=0, atol=0)
    assert (first.pred_window, first.seq_len, first.dim) == (1, 3, 2) and model_preserves(first) == ()


@pytest.mark.parametrize("name", ["gru", "lru"])
def test_dtypes_seeds_windows_and_jacobians(name):
    torch.manual_seed(5)
    a = build_model(name, dim=3, seq_len=4)
    torch.manual_seed(5)
    b = build_model(name, dim=3, seq_len=4)
    for p, q in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(p, q)  # the same seed, the same model
    _randomise(a, scale=0.3)
    x = torch.randn(6, 4, 3, dtype=torch.float64)
    y32 = a(x.float())
    y64 = a.double()(x)
    assert y32.dtype == torch.float32 and y64.dtype == torch.float64 and y64.shape == (6, 1, 3)
    torch.testing.assert_close(y32.double(), y64, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a(x[2]), y64[2], rtol=1e-13, atol=1e-13)  # one window
    J = torch.func.vmap(torch.func.jacrev(a))(x[:2])
    ref = torch.autograd.functional.jacobian(lambda w: a(w.unsqueeze(0))[0], x[1])
    torch.testing.assert_close(J[1], ref, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["gru", "lru"])
def test_the_same_numbers_on_the_gpu(name):
    torch.manual_seed(0)
    model = _randomise(build_model(name, dim=2, seq_len=4).double(), scale=0.3)
    x = torch.randn(5, 4, 2, dtype=torch.float64)
    torch.testing.assert_close(model.to("cuda")(x.to("cuda")).cpu(), model.cpu()(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, config", [("gru", dict(width=5, layers=2, depth=0, activation="silu")),
                                          ("lru", dict(width=5, state=3, layers=2, r_min=0.5, r_max=0.8,
                                                       max_phase=1.5, increment="second"))])
def test_model_files_round_trip(name, config, tmp_path):
    torch.manual_seed(0)
    model = _randomise(build_model(name, dim=2, seq_len=4, **config).double(), scale=0.3)
    path = save_model(model, tmp_path / "m.pt")
    again = load_model(path)
    assert type(again) is type(model) and again.config == model.config
    x = torch.randn(3, 4, 2, dtype=torch.float64)
    torch.testing.assert_close(again.double()(x), model(x), rtol=0, atol=0)
    rebuilt = build_model(**model.config)
    assert count_parameters(rebuilt) == count_parameters(model)


def test_parameter_counts():
    # the GRU's formula: 3·width·(dim + width + 2), the readout (width + 1)·width + (width + 1)·dim
    assert count_parameters(build_model("gru", dim=2, width=16, depth=1)) == 3 * 16 * 20 + 17 * 16 + 17 * 2
    # the LRU: encoder (dim + 1)·width; per layer 3·state + 4·state·width + width, mix (width + 1)·width; readout
    n = 4 * 16 + (3 * 8 + 4 * 8 * 16 + 16) + 17 * 16 + 17 * 16 + 17 * 3
    assert count_parameters(build_model("lru", dim=3, width=16, state=8, depth=1)) == n


# ------------------------------------------------------------------------------ bad options


@pytest.mark.parametrize("name, change, match", [
    ("lru", dict(r_min=0.9, r_max=0.5), r"0 <= r_min < r_max <= 1; got r_min = 0.9, r_max = 0.5; set model.r_min"),
    ("lru", dict(r_min=0.5, r_max=0.5), r"0 <= r_min < r_max <= 1"),
    ("lru", dict(r_max=1.5), r"r_max = 1.5"),
    ("lru", dict(r_min=-0.1), r"r_min = -0.1"),
    ("lru", dict(max_phase=7.0), r"max_phase must be in \(0, 2π\]"),
    ("lru", dict(max_phase=0.0), r"max_phase must be a finite number > 0"),
    ("lru", dict(r_min="a"), r"r_min must be a finite number"),
    ("lru", dict(state=0), r"state: expected an integer >= 1, got 0"),
    ("lru", dict(width=0), r"width: expected an integer >= 1, got 0"),
    ("gru", dict(width=0), r"width: expected an integer >= 1, got 0"),
    ("gru", dict(layers=0), r"layers: expected an integer >= 1, got 0"),
    ("gru", dict(depth=-1), r"depth: expected an integer >= 0, got -1"),
    ("gru", dict(activation="relu"), r"activation: expected one of"),
    ("gru", dict(increment="third"), r"increment must be one of first, second"),
    ("gru", dict(seq_len=1, increment="second"), r"needs seq_len >= 2"),
    ("lru", dict(seq_len=1, increment="second"), r"needs seq_len >= 2"),
])
def test_bad_options_are_one_line(name, change, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        build_model(name, dim=2, **change)
    assert "\n" not in str(info.value) and f"model config for {name!r}" in str(info.value)


def test_a_wrong_window_is_one_line():
    model = build_model("gru", dim=2, seq_len=4)
    with pytest.raises(VPIntegratorError, match=r"GRUWindow: expected input of shape \(batch, seq_len=4, dim=2\)"):
        model(torch.zeros(3, 5, 2))


# ------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def co_small(tmp_path_factory):
    """16 coupled-oscillator trajectories of 31 states (Gauss-Legendre 4, h = 0.2)."""
    rng = np.random.default_rng(7)
    y0 = rng.uniform([-1, -1, -2, -2], [1, 1, 2, 2], size=(16, 4))
    traj = integrate("coupled_oscillator", y0, 0.2, 30, method="gauss_legendre4")
    return write_trajectories(tmp_path_factory.mktemp("rec") / "co.h5", traj)


@pytest.mark.parametrize("name", ["gru", "lru"])
def test_vp_train_and_vp_rollout_on_observed_windows_from_the_cli(name, co_small, tmp_path):
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    config = tmp_path / "c.toml"
    config.write_text(f'data = ["{co_small}"]\nout = "{tmp_path / "run"}"\nobserve = "q"\nepochs = 2\n'
                      'batch_size = 64\ndtype = "float64"\nseed = 0\noptimizer = "adam"\nlr = 1e-3\n'
                      f'[model]\nname = "{name}"\nseq_len = 3\nwidth = 6\n')
    res = CliRunner().invoke(train_main, [str(config), "--quiet"])
    assert res.exit_code == 0, res.output
    model = load_model(tmp_path / "run")
    assert model.config["name"] == name and model.dim == 2 and model.seq_len == 3
    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(rollout_main, ["--data", str(co_small), "--model", f"{name}={tmp_path / 'run'}",
                                            "--n-traj", "3", "--t-end", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ro = read_rollout(out)
    y = ro.methods[name].y
    assert y.shape == (3, 21, 2) and np.isfinite(y).all()
    np.testing.assert_allclose(y[:, :3], ro.reference.y[:, :3], rtol=0, atol=1e-12)  # handed the first window
    # the rollout is the model's sliding window, as in training: the next state from the last three
    x = torch.as_tensor(y[:, 5:8])
    with torch.no_grad():
        np.testing.assert_allclose(model.double()(x)[:, 0].numpy(), y[:, 8], rtol=1e-10, atol=1e-12)


def test_fit_and_run_rollouts_from_python(co_small, tmp_path):
    from vpintegrator.rollout import RolloutConfig, run_rollouts
    from vpintegrator.training import fit

    res = fit({"data": [str(co_small)], "model": {"name": "lru", "seq_len": 4, "width": 6, "state": 4},
               "observe": "q", "optimizer": "lm", "max_steps": 4, "epochs": 100, "lm_iters_per_epoch": 2,
               "lm_windows": 128, "lm_check_windows": 64, "dtype": "float64", "seed": 0, "out": str(tmp_path / "r")})
    assert res.model.config["name"] == "lru" and np.isfinite(res.train_loss)
    first = res.train_loss
    again = fit({"data": [str(co_small)], "model": {"name": "lru", "seq_len": 4, "width": 6, "state": 4},
                 "observe": "q", "optimizer": "lm", "max_steps": 4, "epochs": 100, "lm_iters_per_epoch": 2,
                 "lm_windows": 128, "lm_check_windows": 64, "dtype": "float64", "seed": 0,
                 "out": str(tmp_path / "r2")})
    assert again.train_loss == first  # deterministic under the seed
    out = tmp_path / "ro.h5"
    run_rollouts(RolloutConfig(data=str(co_small), models=[("lru", res.model), ("lru_file", tmp_path / "r")],
                               n_traj=2, t_end=3.0, out=str(out), observe="q"))
    ro = read_rollout(out)
    assert {"lru", "lru_file"} <= set(ro.methods) and np.isfinite(ro.methods["lru"].y).all()
    np.testing.assert_allclose(ro.methods["lru"].y, ro.methods["lru_file"].y, rtol=0, atol=0)  # in memory and saved


@pytest.mark.parametrize("name", ["gru", "lru"])
def test_a_seed_ensemble_trains_them_vmapped(name, co_small, tmp_path):
    """The ensemble's step is ``vmap`` over ``functional_call`` (and its LM a vmapped ``jacrev``): the recurrent
    layers are plain tensor code, so both run."""
    from vpintegrator.training import fit

    res = fit({"data": [str(co_small)], "model": {"name": name, "seq_len": 3, "width": 5}, "observe": "q",
               "ensemble": 2, "optimizer": "lm", "max_steps": 2, "epochs": 10, "lm_windows": 64,
               "lm_check_windows": 32, "lm_iters_per_epoch": 2, "dtype": "float64", "seed": 0,
               "out": str(tmp_path / "ens")})
    assert np.isfinite(res.train_loss)
