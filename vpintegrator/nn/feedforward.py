"""Feed-forward layers that act on each state of a sequence independently (position-wise).

Seed/GML formulas act on a column z ∈ ℝ^dim; our rows are x = zᵀ, so z ↦ z + σ(L z + b) becomes
x ↦ x + σ(x Lᵀ + b) on (batch, seq, dim) tensors. Internally the triangular layers compute in the
(dim, seq, batch) "planes" layout, where it is literally z ↦ z + σ(L z + b) on all columns at once
(``_forward_planes``; the models keep that layout between layers).
"""

from __future__ import annotations

import torch
from torch import nn

from .common import check_input, check_positive_int, from_planes, get_activation, glorot_uniform_, to_planes
from .fused_attention import fused_chain, fused_spec, register_fused_buffers

__all__ = ["VolumePreservingLowerLayer", "VolumePreservingUpperLayer", "ResNetLayer"]

#: activations the fused chain (``vpintegrator.nn.fused_attention``) differentiates by hand; others use
#: autograd per layer
_CHAIN_ACTIVATIONS = ("tanh", "identity")


class _TriangularLayer(nn.Module):
    """x ↦ x + σ(x Lᵀ + b) with L strictly triangular: the Jacobian is unit triangular, det J = 1."""

    _lower: bool

    def __init__(self, dim: int, activation: str = "identity", bias: bool = True) -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.activation: str = activation
        self._sigma = get_activation(activation)
        n_free = dim * (dim - 1) // 2
        # only the dim(dim−1)/2 free entries are parameters; the index pair scatters them into L
        rows, cols = torch.tril_indices(dim, dim, offset=-1)
        if not self._lower:
            rows, cols = cols, rows
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        self.weight: nn.Parameter = nn.Parameter(torch.empty(n_free))
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(dim)) if bias else None
        fusable = activation in _CHAIN_ACTIVATIONS and dim > 1
        self._fused = (activation == "tanh", self.bias is not None) if fusable else None
        register_fused_buffers(self, [self])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot uniform U(±√(6/n)) over the n free entries; bias 0."""
        if self.weight.numel():
            glorot_uniform_(self.weight, self.weight.numel())
        if self.bias is not None:
            with torch.no_grad():
                self.bias.zero_()

    def matrix(self) -> torch.Tensor:
        """The strictly triangular matrix L, shape (dim, dim) (differentiable in ``weight``)."""
        L = self.weight.new_zeros(self.dim, self.dim)
        return L.index_put((self._rows, self._cols), self.weight)

    def reference_matrix(self) -> torch.Tensor:
        """L built entry by entry in Python: the slow, obviously correct reference of ``matrix``."""
        L = torch.zeros(self.dim, self.dim, dtype=self.weight.dtype)
        k = 0
        for i in range(self.dim):
            for j in range(i):
                r, c = (i, j) if self._lower else (j, i)
                L[r, c] = self.weight[k].detach().cpu()
                k += 1
        return L

    def forward(self, x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """Apply the layer, or its member ψ_τ: x ↦ x + τ σ(x Lᵀ + b) of the family with ψ_0 = id.

        Parameters
        ----------
        x : Tensor, shape (batch, seq, dim)
        tau : float
            Flow time (1: the layer). Every ψ_τ is a triangular shear: det J = 1.

        Returns
        -------
        Tensor, shape (batch, seq, dim)
        """
        check_input(x, type(self).__name__, self.dim)
        if tau != 1.0:
            return from_planes(self._forward_planes_autograd(to_planes(x), tau))
        spec = fused_spec([self], x)
        if spec is not None:  # one autograd node, the layout swaps inside
            return fused_chain(self, [self], spec, x, rows=True)
        return from_planes(self._forward_planes_autograd(to_planes(x)))

    def inverse(self, y: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The explicit inverse of ψ_τ (``_inverse_planes``): y : (batch, seq, dim) -> x with ψ_τ(x) = y."""
        check_input(y, type(self).__name__, self.dim)
        return from_planes(self._inverse_planes(to_planes(y), tau))

    def _fused_spec(self) -> tuple[bool, bool] | None:
        """(tanh, has bias) for ``vpintegrator.nn.fused_attention``; ``None`` when it cannot fuse the layer."""
        return self._fused

    def _forward_planes(self, xp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The layer on contiguous xp of shape (dim, seq, batch) (columns z): z ↦ z + τ σ(L z + b)."""
        if tau != 1.0:
            return self._forward_planes_autograd(xp, tau)
        spec = fused_spec([self], xp)
        if spec is not None:
            return fused_chain(self, [self], spec, xp)
        return self._forward_planes_autograd(xp)

    def _increment(self, xp: torch.Tensor) -> torch.Tensor:
        """σ(L z + b) on every column of xp (dim, seq, batch), same shape."""
        flat = xp.reshape(self.dim, -1)  # (dim, seq, batch) -> (dim, seq·batch), a view
        if self.bias is None:
            y = self.matrix() @ flat  # (dim, seq·batch)
        else:
            y = torch.addmm(self.bias[:, None], self.matrix(), flat)  # (dim, seq·batch): L z + b
        return self._sigma(y).view_as(xp)  # (dim, seq·batch) -> (dim, seq, batch)

    def _forward_planes_autograd(self, xp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """``_forward_planes`` differentiated by autograd (any activation, ``torch.func`` transforms)."""
        increment = self._increment(xp)
        return xp + increment if tau == 1.0 else xp + tau * increment

    def _inverse_planes(self, yp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The explicit inverse of z ↦ z + τ σ(L z + b) on yp (dim, seq, batch).

        Component i of the increment reads only the components L's row i reaches (j < i for lower, j > i for
        upper), so x_i = y_i − τ σ(L_i x + b_i) is back-substitution in the order of the components (first to
        last for lower, last to first for upper). Done as dim sweeps of x ← y − τ σ(L x + b) from x = y: L is
        nilpotent, so after sweep k the first k components in that order are exact and no longer change; each
        sweep is one matrix product on the whole batch, differentiable and ``torch.func``-friendly (no
        in-place writes). After the last sweep the increment is the forward's, evaluated at the recovered x.
        """
        x = yp
        for _ in range(self.dim):
            increment = self._increment(x)
            x = yp - increment if tau == 1.0 else yp - tau * increment
        return x

    def extra_repr(self) -> str:
        return f"dim={self.dim}, activation={self.activation!r}, bias={self.bias is not None}"


class VolumePreservingLowerLayer(_TriangularLayer):
    """x ↦ x + σ(x Lᵀ + b), L strictly lower triangular (GML ``VolumePreservingLowerLayer``).

    Component i of the update depends only on components j < i, so det J = 1 exactly.

    Parameters
    ----------
    dim : int
        State dimension.
    activation : str
        ``"identity"`` (linear layer) or a nonlinearity such as ``"tanh"``.
    bias : bool
        Learn b (dim,); without it b = 0.

    Notes
    -----
    Parameters held: ``weight`` (dim(dim−1)/2,) free entries of L in ``torch.tril_indices`` order, ``bias``.
    """

    _lower = True


class VolumePreservingUpperLayer(_TriangularLayer):
    """x ↦ x + σ(x Uᵀ + b), U strictly upper triangular (GML ``VolumePreservingUpperLayer``).

    Same arguments as [`VolumePreservingLowerLayer`][vpintegrator.nn.VolumePreservingLowerLayer]; det J = 1 exactly.
    """

    _lower = False


class ResNetLayer(nn.Module):
    """x ↦ x + σ(x Wᵀ + b), W ∈ ℝ^{dim×dim} dense (GML ``ResNetLayer``); not volume preserving.

    Parameters
    ----------
    dim : int
    activation : str
        ``"tanh"`` or ``"identity"`` (the last layer of GML's ResNet).
    bias : bool

    Notes
    -----
    Init: W Glorot U(±√(6/(2 dim))), b = 0.
    """

    #: set by __init__ (declared for type checkers)
    dim: int
    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(self, dim: int, activation: str = "tanh", bias: bool = True) -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.activation: str = activation
        self._sigma = get_activation(activation)
        self.weight: nn.Parameter = nn.Parameter(glorot_uniform_(torch.empty(dim, dim), 2 * dim))
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim) -> (batch, seq, dim)."""
        check_input(x, type(self).__name__, self.dim)
        return from_planes(self._forward_planes(to_planes(x)))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """The layer on contiguous xp of shape (dim, seq, batch) (columns z): z ↦ z + σ(W z + b)."""
        flat = xp.reshape(self.dim, -1)  # (dim, seq, batch) -> (dim, seq·batch), a view
        if self.bias is None:
            y = self.weight @ flat  # (dim, seq·batch)
        else:
            y = torch.addmm(self.bias[:, None], self.weight, flat)  # (dim, seq·batch): W z + b
        return xp + self._sigma(y).view_as(xp)  # (dim, seq·batch) -> (dim, seq, batch)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, activation={self.activation!r}, bias={self.bias is not None}"
