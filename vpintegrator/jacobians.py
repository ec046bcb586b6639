"""Jacobians of window maps, shared by the metrics (volume along a rollout) and the structure audits
([`vpintegrator.testing`][vpintegrator.testing]).

The *window map* of a model or layer is x ↦ f(x) viewed as ℝ^{seq·dim} → ℝ^{seq·dim} (the input window
flattened row by row). Jacobians come per sample from ``torch.func.jacrev``, batched with
``torch.func.vmap`` ([`window_jacobian`][vpintegrator.testing.window_jacobian]), layer by layer along [`window_chain`][vpintegrator.testing.window_chain]
([`jacobian_slogdet`][vpintegrator.testing.jacobian_slogdet] with ``method="chain"``), or from fourth-order central differences where autograd
cannot go ([`fd_jacobian`][vpintegrator.testing.fd_jacobian]).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .errors import VPIntegratorError

__all__ = ["window_jacobian", "window_chain", "jacobian_slogdet", "chain_inputs", "fd_jacobian", "METHODS",
           "callable_name"]


def window_jacobian(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """Jacobian of the window map at each input.

    Parameters
    ----------
    model : nn.Module
        Maps (batch, seq, dim) -> (batch, seq, dim).
    inputs : Tensor, shape (batch, seq, dim)

    Returns
    -------
    Tensor, shape (batch, seq·dim, seq·dim)
        J[b, i, j] = ∂ y_flat[i] / ∂ x_flat[j], flattened row by row (index = position·dim + component).
    """
    if inputs.ndim != 3:
        raise VPIntegratorError(f"inputs: expected shape (batch, seq, dim), got {tuple(inputs.shape)}")
    batch, seq, dim = inputs.shape

    def window_map(x_flat: torch.Tensor) -> torch.Tensor:
        y = model(x_flat.reshape(1, seq, dim))  # (seq·dim,) -> (1, seq, dim)
        if y.shape[-2:] != (seq, dim):
            raise VPIntegratorError(
                f"{callable_name(model)}: window map must be square, input (seq, dim) = {(seq, dim)} "
                f"gave output {tuple(y.shape[-2:])}"
            )
        return y.reshape(seq * dim)  # (1, seq, dim) -> (seq·dim,)

    flat = inputs.reshape(batch, seq * dim)  # (batch, seq, dim) -> (batch, seq·dim)
    # enable_grad: under an outer no_grad, vmap(jacrev(.)) through torch.linalg.solve returns wrong
    # Jacobians in torch 2.13 (observed: off by 1e8), so never let an outer no_grad leak in
    with torch.enable_grad():
        return torch.func.vmap(torch.func.jacrev(window_map))(flat)


def window_chain(model: nn.Module) -> list[nn.Module]:
    """The leaf layers whose composition is ``model`` (``nn.Sequential`` and ``window_chain()`` expanded)."""
    if hasattr(model, "window_chain"):
        parts = list(model.window_chain())
    elif isinstance(model, nn.Sequential):
        parts = list(model)
    else:
        return [model]
    return [leaf for part in parts for leaf in window_chain(part)]


METHODS = ("full", "chain")


def jacobian_slogdet(
    model: nn.Module, inputs: torch.Tensor, method: str = "full"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sign and log|det J| of the window map at each input.

    Parameters
    ----------
    model : nn.Module
    inputs : Tensor, shape (batch, seq, dim)
    method : {"full", "chain"}
        See the module docstring.

    Returns
    -------
    sign, logabsdet : Tensor, shape (batch,) each
    """
    if method not in METHODS:
        raise VPIntegratorError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if method == "full":
        return torch.linalg.slogdet(window_jacobian(model, inputs))
    sign = torch.ones(inputs.shape[0], dtype=inputs.dtype, device=inputs.device)
    logabsdet = torch.zeros_like(sign)
    for layer, x in chain_inputs(model, inputs):
        s, ld = torch.linalg.slogdet(window_jacobian(layer, x))
        sign, logabsdet = sign * s, logabsdet + ld
    return sign, logabsdet


def chain_inputs(model: nn.Module, inputs: torch.Tensor) -> list[tuple[nn.Module, torch.Tensor]]:
    """(layer, its actual input) along [`window_chain`][vpintegrator.testing.window_chain], checked to compose to ``model(inputs)``."""
    pairs = []
    x = inputs
    for layer in window_chain(model):
        pairs.append((layer, x))
        with torch.no_grad():
            x = layer(x)  # (batch, seq, dim): input of the next layer
    with torch.no_grad():
        reference = model(inputs)
    if not torch.allclose(x, reference, rtol=1e-5, atol=1e-6 * (1 + float(reference.abs().max()))):
        raise VPIntegratorError(
            f"{callable_name(model)}: composing window_chain() does not reproduce forward "
            f"(max difference {float((x - reference).abs().max()):.3e}); use method='full'"
        )
    return pairs


def fd_jacobian(fn: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, step: float | None = None) -> torch.Tensor:
    """Jacobian of the window map of ``fn`` by fourth-order central differences (no autograd needed).

    J[:, :, j] ≈ (−f(x + 2δe_j) + 8 f(x + δe_j) − 8 f(x − δe_j) + f(x − 2δe_j)) / (12 δ_j), with
    δ_j = step·max(1, |x_j|) and step = eps^(1/5) of the dtype by default (truncation ~δ⁴, rounding ~eps/δ).
    All 4·seq·dim perturbed windows go to ``fn`` in one call. ``fn`` may return a tensor or an array.

    Returns
    -------
    Tensor, shape (batch, seq·dim, seq·dim)
        Laid out as [`window_jacobian`][vpintegrator.testing.window_jacobian]'s.
    """
    batch, seq, dim = inputs.shape
    m = seq * dim
    if step is None:
        step = torch.finfo(inputs.dtype).eps ** 0.2
    flat = inputs.detach().reshape(batch, m)  # (batch, m)
    delta = step * flat.abs().clamp(min=1.0)  # (batch, m)
    eye = torch.eye(m, dtype=inputs.dtype, device=inputs.device)
    coeffs = torch.tensor([2.0, 1.0, -1.0, -2.0], dtype=inputs.dtype, device=inputs.device)
    # (4, m, batch, m): perturbation k of direction j at sample b
    shifted = flat + coeffs[:, None, None, None] * eye[None, :, None, :] * delta[None, None]
    with torch.no_grad():
        out = torch.as_tensor(fn(shifted.reshape(4 * m * batch, seq, dim)), dtype=inputs.dtype, device=inputs.device)
    if out.shape != (4 * m * batch, seq, dim):
        raise VPIntegratorError(
            f"{callable_name(fn)}: window map must be square, input (seq, dim) = {(seq, dim)} "
            f"gave output {tuple(out.shape[1:])}"
        )
    f = out.reshape(4, m, batch, m)  # (k, j, b, i)
    deriv = (-f[0] + 8 * f[1] - 8 * f[2] + f[3]) / (12 * delta.T[:, :, None])  # (j, b, i)
    return deriv.permute(1, 2, 0)  # (b, i, j)


def callable_name(model: Any) -> str:
    """The name errors use for a model (its class) or a window function (its ``__name__``)."""
    return type(model).__name__ if isinstance(model, nn.Module) else getattr(model, "__name__", type(model).__name__)
