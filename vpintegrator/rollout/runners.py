"""How [`ModelStep`][vpintegrator.rollout.steps.ModelStep] runs a model: the compiled kernel, a TorchScript trace, or eager.

ModelStep takes the first of these that applies and reproduces the model:

``"numba"``
    Float64 VPFF, VPT, ST, Lie–Poisson (lpnet, lp_transformer) and symplectic (LA-SympNet, G-SympNet,
    symplectic transformer) models on the CPU, rollouts of at most
    ``SCALAR_MAX_BATCH`` (8) trajectories: the model packed into arrays
    (``vpintegrator.rollout.numba_model.pack``) and iterated by one numba kernel for a whole block of steps
    ([`compiled_model`][vpintegrator.rollout.runners.compiled_model]). At batch 1 a call of the paper models costs ~1-2 µs there against ~60-150 µs for
    the trace: torch's per-operation overhead, not arithmetic, is the cost of a (3, 3) window. Checked against
    the model on the first windows (≤ 1e-12); without numba, or for other models, dtypes or devices, the next
    runner runs.
``"jit.trace+freeze"``
    ``torch.jit.trace`` + ``freeze`` for the rollout's batch shape ([`trace_model`][vpintegrator.rollout.runners.trace_model]), checked against
    the eager model on the first window.
``"eager"``
    The model itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUNNERS", "compiled_model", "trace_model"]

#: the runner names ModelStep reports in ``describe()["runner"]``, fastest first
RUNNERS = ("numba", "jit.trace+freeze", "eager")

#: per-call agreement required of the compiled kernel with the model (float64)
COMPILED_TOL = 1e-12


def compiled_model(model, example) -> Any:
    """The model as a ``vpintegrator.rollout.numba_model.CompiledModel``, checked on ``example``, or None.

    Parameters
    ----------
    model : torch.nn.Module
        A float64 model on the CPU (others are the caller's to exclude).
    example : torch.Tensor (batch, seq_len, dim)
        The rollout's first windows: the kernel must agree with ``model(example)`` and with the model on a
        perturbed copy to ``COMPILED_TOL`` (relative and absolute), NaN where the model gives NaN.

    Returns
    -------
    CompiledModel or None
        None without numba, for models ``vpintegrator.rollout.numba_model.pack`` does not cover, or when
        the check fails.
    """
    import numpy as np
    import torch

    try:
        from .numba_model import pack
    except ImportError:  # pragma: no cover - numba or the module missing: torch runs the model
        return None
    compiled = pack(model)
    if compiled is None:
        return None
    with torch.no_grad():
        for x in (example, 1.01 * example + 0.01):  # a second input without touching the user's RNG
            want = model(x).detach().to(device="cpu", dtype=torch.float64).numpy()
            got = compiled.forward(x.detach().to(device="cpu", dtype=torch.float64).numpy())
            if got.shape != want.shape or not np.allclose(got, want, rtol=COMPILED_TOL, atol=COMPILED_TOL, equal_nan=True):
                return None
    return compiled


def trace_model(model, example) -> Any:
    """A frozen TorchScript trace of the model for inputs shaped like ``example``, or None.

    Checked against the eager model on ``example`` and a perturbed copy (rtol 1e-6, atol 1e-7); None
    when it differs or the tracer cannot handle the model.
    """
    import warnings

    import torch

    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.freeze(torch.jit.trace(model.eval(), example, check_trace=False))
            probe = 1.01 * example + 0.01  # a second input (no RNG: leave the user's seed alone)
            for x in (example, probe):
                want, got = model(x), traced(x)
                if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True):
                    return None
        with torch.inference_mode():  # TorchScript profiles the first calls (tens of ms): not per-step time
            for _ in range(3):
                traced(example)
    except Exception:  # anything the tracer cannot handle: run eagerly
        return None
    return traced
