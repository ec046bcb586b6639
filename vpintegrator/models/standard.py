"""The paper's standard-transformer baseline (GML ``StandardTransformerIntegrator``)."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn._common import check_input, check_positive_int, from_planes, get_activation, to_planes
from ..nn.attention import MHA_FORMS, MultiHeadAttention
from ..nn.feedforward import ResNetLayer
from ._common import _first_parameter, _record_config

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


class StandardTransformerIntegrator(nn.Module):
    """The paper's standard-transformer baseline (GML ``StandardTransformerIntegrator``, transformer_dim = dim).

    L × [MultiHeadAttention(dim, n_heads, form, add_connection, stiefel),
    ResNet: n_blocks × (x ↦ x + σ(x Wᵀ + b)), then x ↦ x + (x Wᵀ + b)]. No positional encoding.
    Paper config (dim 3, n_heads 1, n_blocks 2, L 3, no add connection, gml form) → 189 parameters.

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
        Attention form, see :class:`~vpintegrator.nn.MultiHeadAttention`.
    stiefel : bool
        Orthonormal attention projections (gml form).
    activation : str
        ResNet nonlinearity.
    """

    model_name = "st"

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
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len = self.pred_window = check_positive_int(seq_len, "seq_len")
        check_positive_int(L, "L")
        check_positive_int(n_blocks, "n_blocks", minimum=0)
        get_activation(activation)
        if form not in MHA_FORMS:
            raise VPIntegratorError(f"form: expected one of {', '.join(MHA_FORMS)}, got {form!r}")
        self.config = _record_config(self, self.model_name, locals())
        self.blocks = nn.Sequential(
            *(
                _STBlock(
                    MultiHeadAttention(dim, n_heads, form=form, add_connection=add_connection, stiefel=stiefel),
                    nn.Sequential(
                        *(ResNetLayer(dim, activation) for _ in range(n_blocks)),
                        ResNetLayer(dim, "identity"),
                    ),
                )
                for _ in range(L)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim)."""
        check_input(x, type(self).__name__, self.dim, self.seq_len, like=_first_parameter(self))
        xp = to_planes(x)  # (dim, seq_len, batch) between the layers
        for block in self.blocks:
            xp = block._forward_planes(xp)
        return from_planes(xp)

    def window_chain(self) -> list[nn.Module]:
        """The units whose composition is ``forward`` (for :mod:`vpintegrator.testing`)."""
        return list(self.blocks)
