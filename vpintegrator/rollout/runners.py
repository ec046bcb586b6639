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

Each check is ``vpintegrator.fastpath.verified`` (the one rule of every fast path): a runner that raises or
differs is not used, and the reason is logged.
"""

from __future__ import annotations

from typing import Any

from ..fastpath import verified

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
    import torch

    try:
        from .numba_model import pack
    except ImportError:  # pragma: no cover - numba or the module missing: torch runs the model
        return None
    compiled = pack(model)
    if compiled is None:
        return None

    def host(x):  # (batch, seq_len, dim) tensor -> float64 NumPy on the host
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()

    with torch.no_grad():
        check = verified(lambda: lambda x: compiled.forward(host(x)), lambda x: host(model(x)), _probe(example),
                         rtol=COMPILED_TOL, atol=COMPILED_TOL, what="the compiled model (numba)")
    return compiled if check.fast else None


def trace_model(model, example) -> Any:
    """A frozen TorchScript trace of the model for inputs shaped like ``example``, or None.

    Checked against the eager model on ``example`` and a perturbed copy (rtol 1e-6, atol 1e-7); None
    when it differs or the tracer cannot handle the model.
    """
    import warnings

    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        check = verified(lambda: torch.jit.freeze(torch.jit.trace(model.eval(), example, check_trace=False)),
                         model, _probe(example), rtol=1e-6, atol=1e-7, what="the TorchScript trace")
    if not check.fast:  # anything the tracer cannot handle, or a trace that differs: run eagerly
        return None
    traced = check.fn
    try:
        with torch.inference_mode():  # TorchScript profiles the first calls (tens of ms): not per-step time
            for _ in range(3):
                traced(example)
    except Exception:  # noqa: BLE001 -- a trace that fails here runs eagerly too
        return None
    return traced


def _probe(example) -> tuple:
    """The inputs a runner is checked on: the rollout's first windows and a perturbed copy (no RNG: the
    user's seed is left alone)."""
    return example, 1.01 * example + 0.01
