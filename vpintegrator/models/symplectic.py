"""The symplectic architectures (GML): LA-SympNet, G-SympNet and the symplectic transformer.

States are x = (q, p) = (x[..., :n], x[..., n:]), dim = 2n. Every layer is a symplectic shear
(``vpintegrator.nn.sympnet``, ``vpintegrator.nn.symplectic_attention``), so each network is
symplectic: per state for the SympNets, on the product space ℝ^{T·dim} (Ω block-diagonal over the T
states) for the transformer — except with ``attention_activation="vector_softmax"`` and ``symmetric=True``,
GML's combination that is not (see ``vpintegrator.nn.symplectic_attention``).

Layer orders and defaults follow GML ``src/architectures/sympnet.jl`` and ``symplectic_transformer.jl``.

Conjugations they admit: a shift and conformally symplectic per-pair scales, q_i ↦ a_i q_i, p_i ↦ c_i p_i with
a_i c_i the same for every pair (Aᵀ J A = λ J, so A⁻¹ DΦ A stays symplectic); training's normalisation
(``vpintegrator.models.normalise``, rule ``symplectic``) fits those, outside the network, which has no
normalisation layer. Independent per-component scales would break symplecticity.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn import componentwise
from ..nn.common import check_bool, check_input, check_positive_int, get_activation
from ..nn.symplectic_attention import SymplecticAttentionP, SymplecticAttentionQ, check_attention_activation
from ..nn.sympnet import (
    ActivationLayerP,
    ActivationLayerQ,
    BiasLayer,
    GradientLayerP,
    GradientLayerQ,
    LinearLayerP,
    LinearLayerQ,
    check_symplectic_dim,
    check_upscaling_dimension,
)
from .registry import _first_parameter, _record_config
from .registry import register_model

__all__ = ["LASympNet", "GSympNet", "SymplecticTransformer"]

#: GML's LASympNet uses min(depth, 5) linear layers per block
LA_MAX_DEPTH = 5


class _LayerChain(nn.Module):
    """A chain of symplectic layers on windows: the SympNets map each state of the window independently (any
    window length), the transformer (``_check_seq``: its ``seq_len``) the whole window."""

    #: set by the subclasses' __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    config: dict[str, Any]
    layers: nn.Sequential
    #: the window length the input must have (None: any, each state mapped by itself)
    _check_seq: int | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim) -> (batch, seq, dim) (seq = ``seq_len`` for the transformer); one window
        (seq, dim) -> (seq, dim)."""
        check_input(x, type(self).__name__, self.dim, self._check_seq, like=_first_parameter(self), unbatched=True)
        if x.ndim == 2:  # one window (seq, dim) -> (1, seq, dim) -> (seq, dim)
            return self.forward(x.unsqueeze(0)).squeeze(0)
        layers = list(self.layers)
        if torch.compiler.is_compiling() and componentwise.supported(layers, x.shape[1]):
            return componentwise.chain_components(layers, x)  # what inductor fuses into few loops
        return self.layers(x)

    def window_chain(self) -> list[nn.Module]:
        """The layers whose composition is ``forward`` (for [`vpintegrator.testing`][vpintegrator.testing])."""
        return list(self.layers)


# GML's constructor defaults (no paper configuration; upscaling 2·dim when left out)
@register_model(defaults=dict(seq_len=1, depth=5, nhidden=1, activation="tanh", init_upper_linear=True,
                             init_upper_act=True))
class LASympNet(_LayerChain):
    """LA-SympNet (GML ``LASympNet``): linear shears, biases and activation shears, position-wise.

    Layer order (GML ``Chain(::LASympNet)``), with "first/second" = Q/P when ``init_upper_linear`` (else P/Q)
    and the activation pair Q, P when ``init_upper_act`` (else P, Q)::

        nhidden × [depth linear layers alternating first, second, first, ...; BiasLayer; activation pair]
        then      [depth linear layers alternating first, second, ...;        BiasLayer]

    Each linear layer is (q, p) ↦ (q + S p, p) or (q, p + S q), S symmetric (n(n+1)/2 parameters), the
    activation layers (q + diag(a) σ(p), p) or (q, p + diag(a) σ(q)) (n), the bias layers x + b (dim).
    Parameters for dim = 2n, m = n(n+1)/2: ``nhidden·(depth·m + dim + 2n) + depth·m + dim``;
    dim 4 with the defaults → 1·(15 + 4 + 4) + 15 + 4 = 42.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    depth : int
        Linear layers per block, 1 to 5 (GML silently uses min(depth, 5); larger values are refused here).
    nhidden : int
        Number of hidden blocks (with activation layers); 0 gives one linear block and a bias.
    activation : str
        σ of the activation layers.
    init_upper_linear, init_upper_act : bool
        Whether the linear blocks / activation pairs start with the q-changing layer.
    seq_len : int
        Window length used as an integrator (1: one step z_n -> z_{n+1}); ``pred_window`` equals it. The
        network acts on each state independently, so ``forward`` accepts any seq.

    Notes
    -----
    Defaults are GML's (depth 5, nhidden 1, tanh, both ``init_upper`` true).
    """

    model_name = "la_sympnet"
    example_dim = 4  # (q, p): model_preserves builds it at an even dim
    preserves: tuple[str, ...] = ("symplectic", "volume")

    def __init__(
        self,
        dim: int,
        depth: int = 5,
        nhidden: int = 1,
        activation: str = "tanh",
        init_upper_linear: bool = True,
        init_upper_act: bool = True,
        seq_len: int = 1,
    ) -> None:
        super().__init__()
        self.dim: int = check_symplectic_dim(dim)
        check_positive_int(depth, "depth")
        if depth > LA_MAX_DEPTH:
            raise VPIntegratorError(
                f"depth: expected an integer from 1 to {LA_MAX_DEPTH} (GML's LASympNet uses min(depth, 5)); got {depth}"
            )
        check_positive_int(nhidden, "nhidden", minimum=0)
        get_activation(activation)
        check_bool(init_upper_linear, "init_upper_linear")
        check_bool(init_upper_act, "init_upper_act")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        linear = (LinearLayerQ, LinearLayerP) if init_upper_linear else (LinearLayerP, LinearLayerQ)
        act = (ActivationLayerQ, ActivationLayerP) if init_upper_act else (ActivationLayerP, ActivationLayerQ)

        def linear_block() -> list[nn.Module]:
            return [linear[j % 2](dim) for j in range(depth)] + [BiasLayer(dim)]

        layers: list[nn.Module] = []
        for _ in range(nhidden):
            layers += linear_block() + [act[0](dim, activation), act[1](dim, activation)]
        layers += linear_block()
        self.layers = nn.Sequential(*layers)


@register_model(defaults=dict(seq_len=1, n_layers=2, activation="tanh", init_upper=True))
class GSympNet(_LayerChain):
    """G-SympNet (GML ``GSympNet``): ``n_layers`` gradient shears alternating Q and P, position-wise.

    Layer i (1-based) is ``GradientLayerQ`` when i is odd and ``init_upper`` (even and not ``init_upper``),
    else ``GradientLayerP``; each (q, p) ↦ (q + Kᵀ diag(a) σ(K p + b), p) or the P analogue, K ∈ ℝ^{h×n},
    h = upscaling_dimension / 2. Parameters: ``n_layers·h·(n + 2)``; dim 4 with the defaults (upscaling 8,
    2 layers) → 2·4·4 = 32.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    upscaling_dimension : int, optional
        GML's upscaling dimension (even); default 2·dim (recorded resolved in ``config``).
    n_layers : int
        Total number of gradient layers.
    activation : str
    init_upper : bool
        Start with the q-changing layer.
    seq_len : int
        As [`LASympNet`][vpintegrator.models.LASympNet].

    Notes
    -----
    Defaults are GML's (upscaling 2·dim, 2 layers, tanh, ``init_upper`` true).
    """

    model_name = "g_sympnet"
    example_dim = 4  # (q, p): model_preserves builds it at an even dim
    preserves: tuple[str, ...] = ("symplectic", "volume")

    def __init__(
        self,
        dim: int,
        upscaling_dimension: int | None = None,
        n_layers: int = 2,
        activation: str = "tanh",
        init_upper: bool = True,
        seq_len: int = 1,
    ) -> None:
        super().__init__()
        self.dim: int = check_symplectic_dim(dim)
        upscaling_dimension = check_upscaling_dimension(dim, upscaling_dimension)
        check_positive_int(n_layers, "n_layers")
        get_activation(activation)
        check_bool(init_upper, "init_upper")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.layers = nn.Sequential(*_gradient_block(dim, n_layers, upscaling_dimension, activation, init_upper))


def _gradient_block(dim: int, n: int, upscaling: int, activation: str, init_upper: bool) -> list[nn.Module]:
    kinds = (GradientLayerQ, GradientLayerP) if init_upper else (GradientLayerP, GradientLayerQ)
    return [kinds[i % 2](dim, upscaling, activation) for i in range(n)]


@register_model(defaults=dict(seq_len=3, n_sympnet=2, L=1, sympnet_activation="tanh",
                             attention_activation="matrix_softmax", init_upper=True, symmetric=True))
class SymplecticTransformer(_LayerChain):
    """The symplectic transformer (GML ``SymplecticTransformer``): maps a window of T states to the next T.

    Per unit (L units)::

        SymplecticAttentionQ; n_sympnet gradient layers; SymplecticAttentionP; n_sympnet gradient layers

    each block of gradient layers alternating Q, P, Q, ... (P, Q, ... when ``init_upper`` is false), all with
    hidden width h = upscaling_dimension / 2. No residual connection, no normalisation layer (training
    may normalise the states: ``vpintegrator.models.normalise``), no positional encoding. Symplectic on ℝ^{T·dim} except with ``attention_activation="vector_softmax"`` and
    ``symmetric=True`` (GML allows that combination; it is not symplectic).

    Parameters: ``L·(2 n_A + 2 n_sympnet·h·(n + 2))`` with n_A = n(n+1)/2 (symmetric) or n² (arbitrary);
    GML's tutorial configuration (dim 4, n_sympnet 2, L 4, upscaling 8) → 4·(6 + 64) = 280.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    seq_len : int
        Window length T (``pred_window`` equals it). Not a GML argument: GML's transformer accepts any T.
    transformer_dim : int, optional
        Must equal ``dim`` (the default). GML then wraps the network in PSD layers (x ↦ blockdiag(Φ, Φ) x
        with Φ on a Stiefel manifold, trained by its Riemannian optimisers); the composition
        PSDᵀ ∘ f ∘ PSD is not symplectic, so it is not offered.
    n_sympnet : int
        Gradient layers per block.
    upscaling_dimension : int, optional
        Default 2·dim (recorded resolved in ``config``).
    L : int
        Number of units.
    sympnet_activation : str
        σ of the gradient layers.
    attention_activation : {"matrix_softmax", "vector_softmax"}
    init_upper : bool
    symmetric : bool
        Symmetric (n(n+1)/2 parameters) or arbitrary (n²) attention weighting A.

    Notes
    -----
    Defaults are GML's (n_sympnet 2, upscaling 2·dim, L 1, tanh, matrix softmax, ``init_upper`` and
    ``symmetric`` true) plus seq_len 3.
    """

    model_name = "symplectic_transformer"
    example_dim = 4  # (q, p): model_preserves builds it at an even dim

    @property
    def preserves(self) -> tuple[str, ...]:
        """("symplectic", "volume"), or () for vector softmax with symmetric A (not symplectic; GML allows it)."""
        not_symplectic = self.config["symmetric"] and self.config["attention_activation"] == "vector_softmax"
        return () if not_symplectic else ("symplectic", "volume")

    def __init__(
        self,
        dim: int,
        seq_len: int = 3,
        transformer_dim: int | None = None,
        n_sympnet: int = 2,
        upscaling_dimension: int | None = None,
        L: int = 1,
        sympnet_activation: str = "tanh",
        attention_activation: str = "matrix_softmax",
        init_upper: bool = True,
        symmetric: bool = True,
    ) -> None:
        super().__init__()
        self.dim = check_symplectic_dim(dim)
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        self._check_seq = self.seq_len  # the whole window: its length fixed
        if transformer_dim is None:
            transformer_dim = dim
        if transformer_dim != dim:
            raise VPIntegratorError(
                f"transformer_dim: only transformer_dim = dim ({dim}) is supported (GML's PSD up/down "
                f"projection is not symplectic); got {transformer_dim!r}"
            )
        check_positive_int(n_sympnet, "n_sympnet", minimum=0)
        upscaling_dimension = check_upscaling_dimension(dim, upscaling_dimension)
        check_positive_int(L, "L")
        get_activation(sympnet_activation, "sympnet_activation")
        check_attention_activation(attention_activation, "attention_activation")
        check_bool(init_upper, "init_upper")
        check_bool(symmetric, "symmetric")
        self.config = _record_config(self, self.model_name, locals())
        layers: list[nn.Module] = []
        for _ in range(L):
            layers.append(SymplecticAttentionQ(dim, symmetric=symmetric, activation=attention_activation))
            layers += _gradient_block(dim, n_sympnet, upscaling_dimension, sympnet_activation, init_upper)
            layers.append(SymplecticAttentionP(dim, symmetric=symmetric, activation=attention_activation))
            layers += _gradient_block(dim, n_sympnet, upscaling_dimension, sympnet_activation, init_upper)
        self.layers = nn.Sequential(*layers)
