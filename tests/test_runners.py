"""The model runners of ModelStep (``vpintegrator.rollout.steps``): the numba kernel checked against the
model, ``torch.compile``, eager; and the compiled classical integrators of IntegratorStep."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from vpintegrator.models import build_model

PAPER = {
    "vpff": dict(dim=3, n_blocks=6),
    "vpt": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3),
    "vpt_arbitrary": dict(dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3, skew_sym=False),
    "st": dict(dim=3, seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False),
}


#: torch.compile's inductor builds C++ on the CPU: without a compiler it cannot (and the runner is eager)
needs_c_compiler = pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")),
                                      reason="no C compiler for torch.compile's inductor")


def windows(n, seq, dim, seed=0):
    x = torch.randn(n, seq, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def model_of(key, dtype=torch.float64):
    torch.manual_seed(0)
    return build_model(key.split("_")[0], **PAPER[key]).to(dtype).eval()


def test_runner_names_and_no_generated_code():
    import vpintegrator.nn as nn_package
    import vpintegrator.rollout as rollout
    import vpintegrator.rollout.steps as runners

    assert rollout.RUNNERS == ("numba", "torch.compile", "eager")
    assert rollout.compiled_model is runners.compiled_model and rollout.compile_model is runners.compile_model
    for gone in ("compile_scalar", "ScalarForward", "ScalarUnsupported", "trace_model"):  # TorchScript: gone
        assert not hasattr(runners, gone) and not hasattr(nn_package, gone)
        with pytest.raises(AttributeError):
            getattr(rollout, gone)


@pytest.mark.parametrize("key", PAPER)
@pytest.mark.parametrize("batch", [1, 4])
def test_compiled_model_is_checked_and_equals_forward(key, batch):
    from vpintegrator.rollout.numba_model import AVAILABLE
    from vpintegrator.rollout.steps import compiled_model

    if not AVAILABLE:
        pytest.skip("numba not installed")
    model = model_of(key)
    x = windows(batch, model.seq_len, model.dim, seed=batch)
    compiled = compiled_model(model, x)
    assert compiled is not None
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(compiled.forward(x.numpy()), want, rtol=1e-12, atol=1e-12)


def test_compiled_model_refuses_what_it_does_not_reproduce(monkeypatch):
    import vpintegrator.rollout.numba_model as cm
    from vpintegrator.rollout.steps import compiled_model

    model = model_of("vpt")
    x = windows(2, 3, 3)
    assert compiled_model(torch.nn.Linear(3, 3), x) is None  # not a packable model
    real_pack = cm.pack

    def wrong_pack(m):  # a kernel whose numbers differ from the model's: refused by the check
        packed = real_pack(m)
        packed.params = packed.params * (1 + 1e-9)
        return packed

    monkeypatch.setattr(cm, "pack", wrong_pack)
    assert compiled_model(model, x) is None
    monkeypatch.setattr(cm, "pack", lambda m: None)  # e.g. numba missing: pack gives None
    assert compiled_model(model, x) is None


@needs_c_compiler
def test_compile_model_equals_eager():
    from vpintegrator.rollout.steps import compile_model

    model = model_of("vpt")
    x = windows(3, 3, 3)
    compiled = compile_model(model, x)
    assert compiled is not None
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-12, atol=1e-12)


@needs_c_compiler
def test_the_compile_runner_rolls_out_the_eager_numbers():
    from vpintegrator.rollout import ModelStep, initial_window, rollout

    model = model_of("vpt")
    y0 = windows(12, 1, 3)[:, 0].numpy()
    window = initial_window("rigid_body", y0, 0.1, 3)
    eager = rollout(ModelStep(model, "cpu", jit="off", scalar_max_batch=0), window, 0.1, 30)
    step = ModelStep(model, "cpu", jit="compile", scalar_max_batch=0)
    got = rollout(step, window, 0.1, 30)
    assert eager.meta["runner"] == "eager" and got.meta["runner"] == "torch.compile"
    np.testing.assert_allclose(got.y, eager.y, rtol=1e-10, atol=1e-12)
    # "auto" runs torch eagerly: the compilation (seconds) is asked for, never paid unasked
    assert rollout(ModelStep(model, "cpu", scalar_max_batch=0), window, 0.1, 6).meta["runner"] == "eager"


def test_compile_model_that_cannot_be_built_is_none(monkeypatch, caplog):
    from vpintegrator.rollout.steps import compile_model

    def broken(*args, **kwargs):
        raise RuntimeError("no C compiler\nmore")

    monkeypatch.setattr(torch, "compile", broken)
    with caplog.at_level("INFO", logger="vpintegrator.fastpath"):
        assert compile_model(model_of("vpt"), windows(3, 3, 3)) is None  # the caller runs eagerly
    assert "torch.compile of the model raised RuntimeError: no C compiler" in caplog.text


# --- the compiled classical integrators in IntegratorStep ----------------------------------------------


def _stepper_available():
    try:
        from vpintegrator.compiled import available, compiled_stepper  # noqa: F401

        return available()
    except ImportError:
        return False


@pytest.mark.parametrize("method", ["implicit_midpoint", "rk4", "gauss_legendre4", "splitting", "euler"])
def test_integrator_step_compiled_equals_numpy(method):
    from vpintegrator.rollout import IntegratorStep, initial_window, rollout

    if not _stepper_available():
        pytest.skip("compiled integrators not available")
    y0 = np.array([[np.cos(1.1), 0.0, np.sin(1.1)], [0.3, 0.8, -0.52]])
    window = initial_window("rigid_body", y0, 0.2, 1)
    got = rollout(IntegratorStep("rigid_body", method, 0.2), window, 0.2, 200, chunk_steps=64)
    want = rollout(IntegratorStep("rigid_body", method, 0.2, compiled_max_batch=0), window, 0.2, 200, chunk_steps=64)
    assert got.meta["runner"] == "numba" and want.meta["runner"] == "numpy"
    assert got.failed_step.tolist() == want.failed_step.tolist()
    np.testing.assert_allclose(got.y, want.y, rtol=0, atol=1e-12)


def test_integrator_step_runner_choice_and_failures():
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.rollout import IntegratorStep, initial_window, rollout

    y0 = np.tile([[np.cos(1.1), 0.0, np.sin(1.1)]], (9, 1))
    big = rollout(IntegratorStep("rigid_body", "rk4", 0.2), initial_window("rigid_body", y0, 0.2, 1), 0.2, 5)
    assert big.meta["runner"] == ("numba" if _stepper_available() else "numpy")  # any number of trajectories
    with pytest.raises(VPIntegratorError, match="compiled_max_batch"):
        IntegratorStep("rigid_body", "rk4", 0.2, compiled_max_batch=-1)
    if not _stepper_available():
        return
    # euler on the rigid body at a huge step blows up: failures and restarts as on the NumPy path
    window = initial_window("rigid_body", y0[:2] * [[1.0], [3.0]], 1.5, 1)
    got = rollout(IntegratorStep("rigid_body", "euler", 1.5), window, 1.5, 300, chunk_steps=32)
    want = rollout(IntegratorStep("rigid_body", "euler", 1.5, compiled_max_batch=0), window, 1.5, 300, chunk_steps=32)
    assert got.meta["runner"] == "numba"
    assert (want.failed_step >= 0).any()
    assert got.failed_step.tolist() == want.failed_step.tolist()
    np.testing.assert_allclose(got.y, want.y, rtol=1e-12, atol=1e-12)


def test_integrator_step_falls_back_without_compiled_module(monkeypatch):
    import vpintegrator.compiled._jit as jit
    from vpintegrator.rollout import IntegratorStep, initial_window, rollout

    monkeypatch.setattr(jit, "HAVE_NUMBA", False)  # as without numba: compiled_stepper gives None
    y0 = np.array([[np.cos(1.1), 0.0, np.sin(1.1)]])
    res = rollout(IntegratorStep("rigid_body", "implicit_midpoint", 0.2), initial_window("rigid_body", y0, 0.2, 1), 0.2, 20)
    assert res.meta["runner"] == "numpy"
