"""Small shared helpers of the layers and the models: activations, argument and input-shape checks, the
(q, p) planes and the Glorot initialisation."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..errors import VPIntegratorError


def identity(x: torch.Tensor) -> torch.Tensor:
    """The identity activation (a module-level function, not a lambda, so that layers pickle)."""
    return x


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": torch.nn.functional.silu,
    "identity": identity,
}


def get_activation(name: str, argument: str = "activation") -> Callable[[torch.Tensor], torch.Tensor]:
    """Look up an activation function by name; unknown names list the valid ones."""
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise VPIntegratorError(
            f"{argument}: expected one of {', '.join(sorted(ACTIVATIONS))}, got {name!r}"
        )
    return ACTIVATIONS[name]


def check_positive_int(value: Any, argument: str, minimum: int = 1) -> int:
    """Validate an integer hyper-parameter (``bool`` is rejected) and return it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise VPIntegratorError(f"{argument}: expected an integer >= {minimum}, got {value!r}")
    return value


def check_bool(value: Any, argument: str) -> bool:
    """Validate a flag (only ``True``/``False``; 0/1 or strings are rejected) and return it."""
    if not isinstance(value, bool):
        raise VPIntegratorError(f"{argument}: expected true or false, got {value!r}")
    return value


def check_input(
    x: torch.Tensor, owner: str, dim: int, seq_len: int | None = None, like: torch.Tensor | None = None,
    unbatched: bool = False,
) -> None:
    """Check that ``x`` is a floating (batch, seq, dim) tensor, optionally with a fixed ``seq``.

    ``unbatched=True`` (the models) also accepts one window (seq, dim). With ``like`` (a parameter of the
    module) the dtype and device must match it too. Raises [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] naming ``owner``
    with the expected and the received shape.
    """
    seq = "seq" if seq_len is None else f"seq_len={seq_len}"
    expected = f"(batch, {seq}, dim={dim})" + (f" or one window ({seq}, dim={dim})" if unbatched else "")
    if not isinstance(x, torch.Tensor):
        raise VPIntegratorError(f"{owner}: expected a torch.Tensor of shape {expected}, got {type(x).__name__}")
    ndim_ok = x.ndim == 3 or (unbatched and x.ndim == 2)
    if not ndim_ok or x.shape[-1] != dim or (seq_len is not None and x.shape[-2] != seq_len):
        hint = "; add a batch axis with x.unsqueeze(0)" if x.ndim == 2 and not unbatched else ""
        raise VPIntegratorError(f"{owner}: expected input of shape {expected}, got {tuple(x.shape)}{hint}")
    if not x.is_floating_point():
        raise VPIntegratorError(f"{owner}: expected a floating-point input, got dtype {x.dtype}")
    if like is not None and (x.dtype != like.dtype or x.device != like.device):
        raise VPIntegratorError(
            f"{owner}: input is {x.dtype} on {x.device} but the parameters are {like.dtype} on {like.device}; "
            f"convert one with .to(dtype=..., device=...)"
        )


def to_planes(x: torch.Tensor) -> torch.Tensor:
    """(batch, seq, dim) -> contiguous (dim, seq, batch): the internal "component planes" layout.

    With the batch axis contiguous, the small (dim×dim) products become one wide matrix product
    (dim, dim) @ (dim, seq·batch) and the per-component arithmetic runs on long contiguous vectors; on CPU
    this is 2–10× faster than the (batch, seq, dim) layout for dim ≈ 3.
    """
    return _SwapOuterAxes.apply(x)  # (batch, seq, dim) -> (dim, seq, batch)


def from_planes(xp: torch.Tensor) -> torch.Tensor:
    """Contiguous (dim, seq, batch) -> contiguous (batch, seq, dim); inverse of ``to_planes``."""
    return _SwapOuterAxes.apply(xp)  # (dim, seq, batch) -> (batch, seq, dim)


class _SwapOuterAxes(torch.autograd.Function):
    """x.permute(2, 1, 0).contiguous() whose gradient is contiguous too.

    Autograd's own ``PermuteBackward`` returns a permuted *view* of the incoming gradient: the gradient of
    the (batch, seq, dim) model output would reach every layer as a (dim, seq, batch) tensor with strides
    (1, dim, seq·dim), and the whole backward pass would run on strided memory (measured 2–3× slower on
    CPU for the paper VPT). Here the backward makes one contiguous copy instead.
    """

    generate_vmap_rule = True  # torch.func (vmap/jacrev in vpintegrator.testing) works through it

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.permute(2, 1, 0).contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _SwapOuterAxes.apply(grad)  # differentiable again (double backward)


def glorot_uniform_(tensor: torch.Tensor, fan: int) -> torch.Tensor:
    """Fill ``tensor`` in place with U(−√(6/fan), √(6/fan)) (Glorot uniform with fan_in + fan_out = fan)."""
    bound = math.sqrt(6.0 / fan)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound)
