"""The paper's standard-transformer baseline (GML ``StandardTransformerIntegrator``).

It keeps nothing by construction, so training's normalisation (``vpintegrator.models.normalise``) may scale
and shift each component (rule ``affine``), outside the network.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn.common import check_input, check_positive_int, from_planes, get_activation, glorot_uniform_, to_planes
from ..nn.attention import MHA_FORMS, MHA_SOFTMAXES, MultiHeadAttention
from ..nn.feedforward import ResNetLayer
from .registry import _first_parameter, _record_config
from .registry import register_model

__all__ = ["StandardTransformerIntegrator"]


class _STBlock(nn.Module):
    def __init__(self, attention: nn.Module, resnet: nn.Module) -> None:
        super().__init__()
        self.attention = attention
        self.resnet = resnet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resnet(self.attention(x))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        xp = to_planes(self.attention(from_planes(xp)))  # attention in (batch, seq, dim)
        for layer in self.resnet:
            xp = layer._forward_planes(xp)
        return xp

    def window_chain(self) -> list[nn.Module]:
        return [self.attention, self.resnet]


class _Dense(nn.Module):
    """x ↦ σ(x Wᵀ + b), W ∈ ℝ^{out×in} (GML/AbstractNeuralNetworks ``Dense(in, out, σ)``: z ↦ σ(W z + b)).

    The up- and downscaling layers of [`StandardTransformerIntegrator`][vpintegrator.models.StandardTransformerIntegrator] with ``transformer_dim ≠ dim``.
    Init: W Glorot U(±√(6/(in + out))), b = 0.
    """

    def __init__(self, dim_in: int, dim_out: int, activation: str = "identity") -> None:
        super().__init__()
        self.dim_in, self.dim_out, self.activation = dim_in, dim_out, activation
        self._sigma = get_activation(activation, "upscaling_activation")
        self.weight = nn.Parameter(glorot_uniform_(torch.empty(dim_out, dim_in), dim_in + dim_out))
        self.bias = nn.Parameter(torch.zeros(dim_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim_in) -> (batch, seq, dim_out)."""
        return self._sigma(torch.nn.functional.linear(x, self.weight, self.bias))

    def extra_repr(self) -> str:
        return f"{self.dim_in} -> {self.dim_out}, activation={self.activation!r}"


# the paper's configuration (Brantner et al. 2025)
@register_model(defaults=dict(seq_len=3, n_heads=1, n_blocks=2, L=3, add_connection=False, form="gml",
                             activation="tanh"))
class StandardTransformerIntegrator(nn.Module):
    """The paper's standard-transformer baseline (GML ``StandardTransformerIntegrator``).

    L × [MultiHeadAttention(D, n_heads, form, add_connection, stiefel, softmax),
    ResNet: n_blocks × (x ↦ x + σ(x Wᵀ + b)), then x ↦ x + (x Wᵀ + b)] on D = ``transformer_dim``. No
    positional encoding. Paper config (dim 3, n_heads 1, n_blocks 2, L 3, no add connection, gml form) →
    189 parameters.

    With ``transformer_dim`` D ≠ dim (GML's upscaling) the units work in ℝ^D between an upscaling layer
    x ↦ σ_up(x W_upᵀ + b_up) (dim → D, σ_up = ``upscaling_activation``) at the start and a linear
    downscaling layer x ↦ x W_downᵀ + b_down (D → dim) at the end, as GML's ``Chain`` builds them
    (``Dense`` layers with bias). Parameters, GML's count:
    ``[D ≠ dim]·(2·dim·D + D + dim) + L·(3 D² + (n_blocks + 1)(D² + D))`` (gml form);
    e.g. dim 3, D 6, n_heads 1, n_blocks 2, L 3 → 747. ``transformer_dim=None`` (or = dim) has no
    scaling layers.

    Parameters
    ----------
    dim : int
    n_heads : int
    n_blocks : int
        Nonlinear ResNet layers per unit.
    L : int
        Number of transformer units.
    add_connection : bool
        Add the input to the attention output.
    seq_len : int
        Window length (= pred_window).
    form : {"gml", "standard"}
        Attention form, see [`MultiHeadAttention`][vpintegrator.nn.MultiHeadAttention].
    stiefel : bool
        Orthonormal attention projections (gml form).
    activation : str
        ResNet nonlinearity.
    transformer_dim : int, optional
        Width D of the attention and ResNet units (GML's ``transformer_dim``); None means ``dim``.
    upscaling_activation : str
        σ_up of the upscaling layer (GML's default: identity); unused when D = dim.
    softmax : {"vector", "matrix"}
        Score normalisation of the attention (GML's ``attention_activation``: ``VectorSoftmax`` or
        ``MatrixSoftmax``), see [`MultiHeadAttention`][vpintegrator.nn.MultiHeadAttention].
    """

    model_name = "st"
    preserves: tuple[str, ...] = ()  # softmax attention and ResNet layers keep nothing by construction

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    config: dict[str, Any]
    upscale: nn.Module
    blocks: nn.Sequential
    downscale: nn.Module

    def __init__(
        self,
        dim: int,
        n_heads: int = 1,
        n_blocks: int = 2,
        L: int = 3,
        add_connection: bool = False,
        seq_len: int = 3,
        form: str = "gml",
        stiefel: bool = False,
        activation: str = "tanh",
        transformer_dim: int | None = None,
        upscaling_activation: str = "identity",
        softmax: str = "vector",
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        check_positive_int(L, "L")
        check_positive_int(n_blocks, "n_blocks", minimum=0)
        get_activation(activation)
        get_activation(upscaling_activation, "upscaling_activation")
        if form not in MHA_FORMS:
            raise VPIntegratorError(f"form: expected one of {', '.join(MHA_FORMS)}, got {form!r}")
        if softmax not in MHA_SOFTMAXES:
            raise VPIntegratorError(f"softmax: expected one of {', '.join(MHA_SOFTMAXES)}, got {softmax!r}")
        width = dim if transformer_dim is None else check_positive_int(transformer_dim, "transformer_dim")
        self.transformer_dim = width
        self.config = _record_config(self, self.model_name, locals())
        if width != dim:  # only then: the default model's modules and state_dict keys stay as they were
            self.upscale = _Dense(dim, width, upscaling_activation)
        self.blocks = nn.Sequential(
            *(
                _STBlock(
                    MultiHeadAttention(width, n_heads, form=form, add_connection=add_connection, stiefel=stiefel,
                                       softmax=softmax),
                    nn.Sequential(
                        *(ResNetLayer(width, activation) for _ in range(n_blocks)),
                        ResNetLayer(width, "identity"),
                    ),
                )
                for _ in range(L)
            )
        )
        if width != dim:
            self.downscale = _Dense(width, dim, "identity")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim); one window (seq_len, dim) -> (seq_len, dim)."""
        check_input(x, type(self).__name__, self.dim, self.seq_len, like=_first_parameter(self), unbatched=True)
        if x.ndim == 2:  # one window (seq_len, dim) -> (1, seq_len, dim) -> (seq_len, dim)
            return self.forward(x.unsqueeze(0)).squeeze(0)
        scaled = self.transformer_dim != self.dim
        if scaled:
            x = self.upscale(x)  # (batch, seq_len, transformer_dim)
        xp = to_planes(x)  # (width, seq_len, batch) between the layers
        for block in self.blocks:
            xp = block._forward_planes(xp)
        out = from_planes(xp)
        return self.downscale(out) if scaled else out

    def window_chain(self) -> list[nn.Module]:
        """The units whose composition is ``forward`` (for [`vpintegrator.testing`][vpintegrator.testing])."""
        if self.transformer_dim != self.dim:
            return [self.upscale, *self.blocks, self.downscale]
        return list(self.blocks)
