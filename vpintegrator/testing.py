"""Structure checks shipped as public helpers (e3nn's ``assert_equivariant`` style).

The *window map* of a model or layer is x ↦ f(x) viewed as ℝ^{seq·dim} → ℝ^{seq·dim} (the input window
flattened row by row; it needs pred_window = seq). It preserves volume iff det J(x) = 1 for all x. Jacobians
are computed per sample with ``torch.func.jacrev`` and batched with ``torch.func.vmap``;
log|det J| and sign come from ``torch.linalg.slogdet``.

Two ways to get det J:

``method="full"``
    The Jacobian of the whole window map (black box). Its rounding error grows like eps·cond(J): a deep
    randomly initialised VPT can have cond(J) ~ 1e7 at some inputs, and then |det J − 1| ~ 1e-9 in float64
    although every layer is exactly volume preserving.
``method="chain"``
    For a model that is a composition of layers (``nn.Sequential``, or a module with ``window_chain()``
    returning its parts in order), det J = Π_k det J_k(x_k) with x_k the input of layer k: each layer's
    Jacobian is computed at its actual input and log|det| summed. The composition is checked against
    ``model(inputs)`` so a wrong chain is reported, never silently audited.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch import nn

from .errors import VPIntegratorError

__all__ = [
    "window_jacobian",
    "window_chain",
    "jacobian_slogdet",
    "random_inputs",
    "VolumeAudit",
    "audit_volume",
    "assert_volume_preserving",
]


def _window_shape(model: nn.Module, seq: int | None) -> tuple[int, int]:
    dim = getattr(model, "dim", None)
    if not isinstance(dim, int):
        raise VPIntegratorError(f"{type(model).__name__}: has no integer attribute 'dim'; cannot build inputs")
    if seq is None:
        seq = getattr(model, "seq_len", None) or 3
    return seq, dim


def random_inputs(
    model: nn.Module,
    n: int = 256,
    seq: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> torch.Tensor:
    """Random windows N(0, scale²) for ``model``.

    Parameters
    ----------
    model : nn.Module
        Has ``dim`` (and ``seq_len``; layers without it get seq = 3 unless ``seq`` is given).
    n : int
        Number of windows.
    seq : int, optional
        Window length; default ``model.seq_len`` (or 3).

    Returns
    -------
    Tensor, shape (n, seq, dim)
    """
    seq, dim = _window_shape(model, seq)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, seq, dim, generator=gen, dtype=torch.float64) * scale  # (n, seq, dim)
    return x.to(dtype=dtype, device=device)


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
                f"{type(model).__name__}: window map must be square, input (seq, dim) = {(seq, dim)} "
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
    x = inputs
    for layer in window_chain(model):
        s, ld = torch.linalg.slogdet(window_jacobian(layer, x))
        sign, logabsdet = sign * s, logabsdet + ld
        with torch.no_grad():
            x = layer(x)  # (batch, seq, dim): input of the next layer
    with torch.no_grad():
        reference = model(inputs)
    if not torch.allclose(x, reference, rtol=1e-5, atol=1e-6 * (1 + float(reference.abs().max()))):
        raise VPIntegratorError(
            f"{type(model).__name__}: composing window_chain() does not reproduce forward "
            f"(max difference {float((x - reference).abs().max()):.3e}); use method='full'"
        )
    return sign, logabsdet


@dataclasses.dataclass(frozen=True)
class VolumeAudit:
    """Result of :func:`audit_volume`; ``det`` has shape (batch,), ``inputs`` (batch, seq, dim)."""

    det: torch.Tensor
    inputs: torch.Tensor
    method: str = "full"

    @property
    def error(self) -> torch.Tensor:
        """|det J − 1| per input, shape (batch,)."""
        return (self.det - 1).abs()

    @property
    def median_error(self) -> float:
        return float(self.error.median())

    @property
    def max_error(self) -> float:
        return float(self.error.max())

    @property
    def worst_input(self) -> torch.Tensor:
        """The input window with the largest |det J − 1|, shape (seq, dim)."""
        return self.inputs[int(self.error.argmax())]


def _prepared(model: nn.Module, dtype: torch.dtype | None, device) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(
            f"model must be a torch.nn.Module (e.g. vpintegrator.build_model('vpt', ...)); got {type(model).__name__}"
        )
    if dtype is None and device is None:
        return model
    return copy.deepcopy(model).to(dtype=dtype, device=device)


def audit_volume(
    model: nn.Module,
    inputs: torch.Tensor | None = None,
    n: int = 256,
    dtype: torch.dtype | None = torch.float64,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
) -> VolumeAudit:
    """det J of the window map over a batch of inputs.

    Parameters
    ----------
    model : nn.Module
        Left unchanged; a copy is cast to ``dtype``/``device`` (``None`` keeps the model's).
    inputs : Tensor, shape (batch, seq, dim), optional
        Default :func:`random_inputs` (``n``, ``seq``, ``scale``, ``seed``).
    method : {"full", "chain"}
        Whole-map Jacobian or product over the layer chain (module docstring).

    Returns
    -------
    VolumeAudit
    """
    work = _prepared(model, dtype, device)
    if inputs is None:
        p = next(work.parameters(), None)
        inputs = random_inputs(
            work, n, seq=seq, dtype=p.dtype if p is not None else torch.float64,
            device=p.device if p is not None else None, scale=scale, seed=seed,
        )
    else:
        p = next(work.parameters(), None)
        if p is not None:
            inputs = inputs.to(dtype=p.dtype, device=p.device)
    sign, logabsdet = jacobian_slogdet(work, inputs, method=method)
    return VolumeAudit(det=(sign * logabsdet.exp()).detach(), inputs=inputs.detach(), method=method)


def assert_volume_preserving(
    model: nn.Module,
    inputs: torch.Tensor | None = None,
    n: int = 64,
    dtype: torch.dtype | None = torch.float64,
    atol: float = 1e-10,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
) -> VolumeAudit:
    """Assert |det J − 1| ≤ atol for the window map of ``model`` at every input.

    Parameters as :func:`audit_volume`. Raises ``AssertionError`` naming the worst |det J − 1| and the input
    that produced it; returns the :class:`VolumeAudit` otherwise.
    """
    audit = audit_volume(
        model, inputs, n=n, dtype=dtype, device=device, scale=scale, seed=seed, method=method, seq=seq
    )
    if not audit.max_error <= atol:  # also catches NaN
        worst = int(audit.error.argmax())
        raise AssertionError(
            f"{type(model).__name__} is not volume preserving within atol={atol:g} (method={method!r}): "
            f"max |det J - 1| = {audit.max_error:.3e} (det J = {float(audit.det[worst]):.12g}) at input "
            f"{audit.inputs[worst].tolist()}; median |det J - 1| = {audit.median_error:.3e} over "
            f"{audit.det.numel()} inputs"
        )
    return audit
