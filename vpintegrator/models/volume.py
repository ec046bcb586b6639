"""The volume-preserving architectures: the VP feed-forward network and the VP transformer (GML).

Conjugations they admit: any invertible affine map y = A (x − b) keeps volume preservation (the Jacobian
A⁻¹ DΦ A has det DΦ), so training's normalisation (``vpintegrator.models.normalise``, rule ``affine``)
scales and shifts each component; it is applied outside the network, which has no normalisation layer.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn import componentwise
from ..nn.common import check_bool, check_input, check_positive_int, from_planes, get_activation, to_planes
from ..nn.attention import VolumePreservingAttention
from ..nn.feedforward import VolumePreservingLowerLayer, VolumePreservingUpperLayer
from ..nn.fused_attention import fused_chain, fused_spec, register_fused_buffers
from .registry import _first_parameter, _record_config
from ._symmetric import Step, SymmetricComposition
from .registry import register_model

__all__ = ["VolumePreservingFeedForward", "VolumePreservingTransformer"]


class _SymmetricPlanes(SymmetricComposition):
    """``SymmetricComposition`` run in the (dim, seq, batch) planes layout of the VP layers (one layout swap
    each way, not one per layer). The palindrome's steps have flow times ±1/2, so they take the layers'
    autograd path, never the fused node of ``vpintegrator.nn.fused_attention`` (which has no flow time)."""

    seq_len: int
    pred_window: int

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim) -> (batch, seq, dim) (seq = ``seq_len`` for the VPT; the VPFF maps each state
        independently); one window (seq, dim) -> (seq, dim)."""
        if self.symmetric:
            return self.evolve(x, 1.0)
        check_input(x, type(self).__name__, self.dim, self._check_seq, like=_first_parameter(cast(nn.Module, self)),
                    unbatched=True)
        if x.ndim == 2:  # one window (seq, dim) -> (1, seq, dim) -> (seq, dim)
            return self.forward(x.unsqueeze(0)).squeeze(0)
        layers = self._flow_layers()
        if torch.compiler.is_compiling() and componentwise.supported(layers, x.shape[1]):
            return componentwise.chain_components(layers, x)  # what inductor fuses into few loops
        spec = fused_spec(layers, x)
        if spec is not None:  # the whole network as one autograd node, bitwise the same forward
            return fused_chain(cast(nn.Module, self), layers, spec, x, rows=True)
        return from_planes(self._forward_planes(to_planes(x)))  # (dim, seq, batch) between the layers

    def _run_steps(self, x: torch.Tensor, steps: list[Step]) -> torch.Tensor:
        return from_planes(self._run_planes(to_planes(x), steps))

    @staticmethod
    def _run_planes(xp: torch.Tensor, steps: list[Step]) -> torch.Tensor:
        for layer, t, inverted in steps:
            xp = layer._inverse_planes(xp, t) if inverted else layer._forward_planes(xp, t)  # type: ignore[operator]
        return xp


# the paper's configuration (Brantner et al. 2025; configs/rigid_body_*.toml)
@register_model(defaults=dict(seq_len=1, n_blocks=6, n_linear=1, activation="tanh"))
class VolumePreservingFeedForward(_SymmetricPlanes, nn.Module):
    """Volume-preserving feed-forward network (GML ``VolumePreservingFeedForward``), position-wise.

    Layer order (GML, ``init_upper=False``), each layer x ↦ x + σ(x Lᵀ + b) with L strictly lower
    ("lower") or strictly upper ("upper") triangular::

        for each of n_blocks blocks:
            (n_linear − 1) × [lower linear, no bias; upper linear, no bias]
            lower linear, no bias; upper linear + bias
            lower σ + bias;        upper σ + bias
        final: lower linear, no bias; upper linear + bias

    ``init_upper=True`` swaps lower and upper everywhere. Every layer has det J = 1, so the network does.

    ``symmetric=True``: the same layers composed as the palindrome Φ = ψ_{1/2} ∘ ψ*_{1/2}
    (``vpintegrator.models._symmetric``): each layer's member ψ_τ: x ↦ x + τ σ(x Lᵀ + b) at τ = 1/2, the
    adjoint half made of the layers' explicit inverses at τ = −1/2 in reverse order. Φ_{−1} = Φ_1⁻¹ (a
    symmetric, time-reversible map; ``evolve(x, tau)``, ``inverse(y)``), det J = 1 still; every layer is
    applied twice (the inverse costs dim matrix products), and the fused node is not used.

    Parameters for dim d, m = d(d−1)/2: ``n_blocks·((2 n_linear + 2)·m + 3 d) + d²``;
    d = 3, n_blocks = 6, n_linear = 1 → 6·21 + 9 = 135.

    Parameters
    ----------
    dim : int
    n_blocks : int
    n_linear : int
    activation : str
        Nonlinearity σ of the nonlinear layers (``"tanh"``).
    init_upper : bool
        Start every pair with the upper layer.
    seq_len : int
        Window length it is used with as an integrator (1: one step z_n -> z_{n+1}); ``pred_window`` equals
        it. The network acts on each state independently, so ``forward`` accepts any seq.
    symmetric : bool
        The palindromic (time-reversible) composition of the layers (above); ``preserves`` then also has
        ``"symmetric"``.
    """

    model_name = "vpff"

    #: set by __init__ (declared for type checkers; dim, config and the window lengths on _SymmetricPlanes)
    layers: nn.Sequential

    def __init__(
        self,
        dim: int,
        n_blocks: int = 1,
        n_linear: int = 1,
        activation: str = "tanh",
        init_upper: bool = False,
        seq_len: int = 1,
        symmetric: bool = False,
    ) -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        check_positive_int(n_blocks, "n_blocks", minimum=0)
        check_positive_int(n_linear, "n_linear")
        get_activation(activation)
        check_bool(init_upper, "init_upper")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        check_bool(symmetric, "symmetric")
        self._check_seq = None  # position-wise: any window length
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        first, second = (
            (VolumePreservingUpperLayer, VolumePreservingLowerLayer)
            if init_upper
            else (VolumePreservingLowerLayer, VolumePreservingUpperLayer)
        )
        layers: list[nn.Module] = []
        for _ in range(n_blocks):
            for _ in range(n_linear - 1):
                layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=False)]
            layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=True)]
            layers += [first(dim, activation, bias=True), second(dim, activation, bias=True)]
        layers += [first(dim, "identity", bias=False), second(dim, "identity", bias=True)]
        self.layers = nn.Sequential(*layers)
        register_fused_buffers(self, layers)  # index buffers of the fused chain (not saved)

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """On contiguous xp (dim, seq, batch), layer after layer without changing layout."""
        if self.symmetric:
            return self._run_planes(xp, self._schedule(1.0))
        layers = list(self.layers)
        spec = fused_spec(layers, xp)
        if spec is not None:  # the whole stack as one autograd node, bitwise the same forward
            return fused_chain(self, layers, spec, xp)
        for layer in layers:
            xp = layer._forward_planes(xp)
        return xp

    def _flow_layers(self) -> list[nn.Module]:
        return list(self.layers)

    def _kept(self) -> tuple[str, ...]:
        return ("volume",)

    def window_chain(self) -> list[nn.Module]:
        """The layers whose composition is ``forward`` (for [`vpintegrator.testing`][vpintegrator.testing]); for a symmetric
        network the steps of the palindrome."""
        return self._symmetric_chain() if self.symmetric else list(self.layers)


#: values of the VPT's ``positional`` option: how the transformer tells the positions of its window apart
_POSITIONAL = ("none", "feedforward", "mixing")


class _PerPositionFeedForward(nn.Module):
    """One VPFF per window position: x_t ↦ f_t(x_t) for t = 0, …, seq_len − 1 (the VPT's
    ``positional="feedforward"``). Block diagonal on the window with det J = Π_t det J_t = 1; not equivariant
    under reorderings of the window (each position has its own map).

    Deliberately without ``window_chain()``: its parts act side by side, not one after the other, so the chain
    walkers (the compiled kernel's packer, ``vpintegrator.testing``'s ``method="chain"``) treat it as one unit.
    """

    def __init__(self, seq_len: int, dim: int, n_blocks: int, n_linear: int, activation: str, init_upper: bool
                 ) -> None:
        super().__init__()
        self.positions = nn.ModuleList(
            VolumePreservingFeedForward(dim, n_blocks, n_linear, activation, init_upper=init_upper)
            for _ in range(seq_len)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim), state t by the VPFF of position t."""
        return torch.cat([ff(x[:, t:t + 1]) for t, ff in enumerate(self.positions)], dim=1)

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """On contiguous xp (dim, seq_len, batch): plane t by the VPFF of position t."""
        positions = cast("list[VolumePreservingFeedForward]", list(self.positions))
        return torch.cat([ff._forward_planes(xp[:, t:t + 1].contiguous()) for t, ff in enumerate(positions)], dim=1)

    def _fused_spec(self) -> None:
        """Not fused (``vpintegrator.nn.fused_attention``): the transformer then runs its units one by one."""
        return None


class _PositionMixing(nn.Module):
    """A learned linear shear across the window's positions (the VPT's ``positional="mixing"``):
    x_t ↦ x_t + Σ_{s<t} W_ts x_s (``lower``) or Σ_{s>t} (upper), W_ts a (dim, dim) matrix per pair of positions.
    The window's Jacobian is block unit-triangular: det J = 1. Zero at the start (the identity), so the
    transformer starts as the plain one and training decides how much the order of the window matters."""

    _rows: torch.Tensor
    _cols: torch.Tensor

    def __init__(self, seq_len: int, dim: int, lower: bool) -> None:
        super().__init__()
        rows, cols = torch.tril_indices(seq_len, seq_len, offset=-1)
        if not lower:
            rows, cols = cols, rows
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        self.seq_len: int = seq_len
        self.dim: int = dim
        self.lower = lower
        self.weight = nn.Parameter(torch.zeros(len(rows), dim, dim))

    def matrix(self) -> torch.Tensor:
        """The (seq_len, seq_len, dim, dim) blocks W_ts, zero on and on the other side of the diagonal."""
        W = self.weight.new_zeros(self.seq_len, self.seq_len, self.dim, self.dim)
        return W.index_put((self._rows, self._cols), self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim)."""
        return x + torch.einsum("tsij,bsj->bti", self.matrix(), x)

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """On contiguous xp (dim, seq_len, batch)."""
        return (xp + torch.einsum("tsij,jsb->itb", self.matrix(), xp)).contiguous()

    def _fused_spec(self) -> None:
        """Not fused (``vpintegrator.nn.fused_attention``)."""
        return None

    def extra_repr(self) -> str:
        return f"seq_len={self.seq_len}, dim={self.dim}, lower={self.lower}"


class _VPTBlock(nn.Module):
    def __init__(self, attention: nn.Module, feedforward: nn.Module, mixing: nn.Module | None = None) -> None:
        super().__init__()
        if mixing is not None:  # registered first: the order of the unit's parts
            self.mixing = mixing
        self.attention = attention
        self.feedforward = feedforward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.window_chain():
            x = part(x)
        return x

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        for part in self.window_chain():
            xp = part._forward_planes(xp)
        return xp

    def window_chain(self) -> list[nn.Module]:
        mixing = self._modules.get("mixing")
        return [self.attention, self.feedforward] if mixing is None else [mixing, self.attention, self.feedforward]


@register_model(defaults=dict(seq_len=3, n_blocks=2, n_linear=1, L=3, activation="tanh", skew_sym=True))
class VolumePreservingTransformer(_SymmetricPlanes, nn.Module):
    """The volume-preserving transformer (GML ``VolumePreservingTransformer``).

    L × [VolumePreservingAttention(dim, skew_sym), VolumePreservingFeedForward(dim, n_blocks, n_linear)],
    each feed-forward part with its final linear pair (as GML's Chain); no upscaling, no normalisation layer
    (training may normalise the states: ``vpintegrator.models.normalise``), no residual around the attention. Maps a window X[i:i+T] to X[i+T:i+2T] (T = seq_len = pred_window).
    Volume preserving on ℝ^{T·dim} when ``skew_sym=True``.

    Parameters: L·(n_A + n_VPFF), n_A = d(d−1)/2 (skew) or d² (arbitrary); paper config (d 3, T 3,
    n_blocks 2, n_linear 1, L 3) → 162 (skew), 180 (arbitrary).

    Parameters
    ----------
    dim, seq_len : int
    n_blocks, n_linear : int
        Of each feed-forward part.
    L : int
        Number of transformer units.
    activation : str
    skew_sym : bool
        Skew-symmetric attention weighting (volume preserving) or GML's arbitrary weighting (not).
    init_upper : bool
        Passed to the feed-forward parts.
    symmetric : bool
        The palindrome Φ = ψ_{1/2} ∘ ψ*_{1/2} of all attention and triangular layers in order, as for
        [`VolumePreservingFeedForward`][vpintegrator.models.VolumePreservingFeedForward]: the attention's member ψ_τ is X ↦ Cayley(τ C(X))ᵀ X, whose inverse
        is explicit because C(output) = C(input) (so its adjoint is itself). Needs ``skew_sym=True`` (the
        arbitrary attention has no explicit inverse: refused). ``preserves`` then also has ``"symmetric"``.

    positional : {"none", "feedforward", "mixing"}
        How the transformer tells the positions of its window apart. ``"none"`` (default; GML): it does not
        (below). ``"feedforward"``: every unit's feed-forward part is one VPFF per window position, state t
        mapped by its own f_t (``seq_len`` times the feed-forward parameters); each f_t has det J = 1, so the
        block-diagonal map of the window does, and the transformer is still volume preserving on ℝ^{T·dim}
        (``skew_sym=True``) but no longer equivariant. ``"mixing"``: before each unit's attention a learned
        linear shear across the window's positions, x_t ↦ x_t + Σ_{s<t} W_ts x_s (units 1, 3, …; s > t in
        units 2, 4, …), W_ts a (dim, dim) matrix: block unit-triangular, det J = 1; zero at the start, so the
        model starts as the plain VPT (L·T(T−1)/2·dim² more parameters). Neither with ``symmetric=True``
        (refused); both run in torch (no fused node, no compiled kernel).

    Notes
    -----
    Defaults: L = 1 and ``skew_sym=True`` (GML's constructor defaults are L = 2 and ``skew_sym=false``).

    With ``positional="none"`` there is no positional encoding (as in GML): the attention's
    ``C(X P) = Pᵀ C(X) P`` and the position-wise feed-forward parts make the transformer equivariant under
    permutations ``P`` of the window's states, ``f(X P) = f(X) P`` (``tests/test_observed_windows.py``): it
    cannot tell which state of the window is the latest. On the full state the target ``x_j ↦ Φ_{T h}(x_j)`` is
    itself equivariant; on observed windows of a reversible system (the coupled oscillator in q) it is not, and
    every equivariant window map has an error floor, 0.33 at T = 2 and 0.62 at T = 4 on q of the coupled
    oscillator at h = 0.2 (``scripts/vpt_observed_probe.py``; docs/partial_observation.md).
    ``positional="feedforward"`` and ``"mixing"`` are not bound by that floor.
    """

    model_name = "vpt"

    def _kept(self) -> tuple[str, ...]:
        """("volume",) with skew-symmetric attention; () with arbitrary weighting (not volume preserving)."""
        # the attention layers themselves say it (a user's subclass may record a config without ``skew_sym``)
        return ("volume",) if all(getattr(block.attention, "skew_sym", False) for block in self.blocks) else ()

    #: set by __init__ (declared for type checkers; dim, config and the window lengths on _SymmetricPlanes)
    blocks: nn.Sequential

    def __init__(
        self,
        dim: int,
        seq_len: int,
        n_blocks: int = 1,
        n_linear: int = 1,
        L: int = 1,
        activation: str = "tanh",
        skew_sym: bool = True,
        init_upper: bool = False,
        symmetric: bool = False,
        positional: str = "none",
    ) -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        check_positive_int(L, "L")
        if check_bool(symmetric, "symmetric") and not check_bool(skew_sym, "skew_sym"):
            raise VPIntegratorError("symmetric: the palindrome needs each attention's explicit inverse, which only "
                                    "skew_sym=true has; set skew_sym=true or symmetric=false")
        if not isinstance(positional, str) or positional not in _POSITIONAL:
            raise VPIntegratorError(f"positional: expected one of {', '.join(map(repr, _POSITIONAL))}, got {positional!r}")
        if symmetric and positional != "none":
            raise VPIntegratorError(f"positional: {positional!r} has no symmetric (palindromic) form; set "
                                    "symmetric=false or positional='none'")
        self._check_seq = seq_len
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.blocks = nn.Sequential(
            *(
                _VPTBlock(
                    VolumePreservingAttention(dim, skew_sym=skew_sym),
                    VolumePreservingFeedForward(dim, n_blocks, n_linear, activation, init_upper=init_upper)
                    if positional != "feedforward"
                    else _PerPositionFeedForward(seq_len, dim, n_blocks, n_linear, activation, init_upper),
                    _PositionMixing(seq_len, dim, lower=k % 2 == 0) if positional == "mixing" else None,
                )
                for k in range(L)
            )
        )
        if skew_sym and positional == "none":  # all L units (attention and feed-forward layers) as one fused node
            register_fused_buffers(self, self._layers())

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """On contiguous xp (dim, seq_len, batch), block after block without changing layout (``forward``'s
        unfused path)."""
        for block in self.blocks:
            xp = block._forward_planes(xp)
        return xp

    def _layers(self) -> list[nn.Module]:
        """Every attention and triangular layer in order (a per-position feed-forward part as one unit)."""
        return [m for block in cast("list[_VPTBlock]", list(self.blocks)) for part in block.window_chain()
                for m in getattr(part, "layers", [part])]

    def _flow_layers(self) -> list[nn.Module]:
        return self._layers()

    def window_chain(self) -> list[nn.Module]:
        """The units whose composition is ``forward`` (for [`vpintegrator.testing`][vpintegrator.testing]); for a symmetric
        transformer the steps of the palindrome (every attention and triangular layer, twice)."""
        return self._symmetric_chain() if self.symmetric else list(self.blocks)
