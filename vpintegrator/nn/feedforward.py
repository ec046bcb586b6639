"""Feed-forward layers that act on each state of a sequence independently (position-wise).

Seed/GML formulas act on a column z ∈ ℝ^dim; our rows are x = zᵀ, so z ↦ z + σ(L z + b) becomes
x ↦ x + σ(x Lᵀ + b) on (batch, seq, dim) tensors. Internally the triangular layers compute in the
(dim, seq, batch) "planes" layout, where it is literally z ↦ z + σ(L z + b) on all columns at once
(``_forward_planes``; the models keep that layout between layers).
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import check_input, check_positive_int, from_planes, get_activation, glorot_uniform_, to_planes

__all__ = ["VolumePreservingLowerLayer", "VolumePreservingUpperLayer", "ResNetLayer", "triangular_chain_planes",
           "chain_index"]

#: activations the fused chain (:class:`_TriangularChain`) differentiates by hand; others use autograd per layer
_CHAIN_ACTIVATIONS = ("tanh", "identity")


class _TriangularLayer(nn.Module):
    """x ↦ x + σ(x Lᵀ + b) with L strictly triangular: the Jacobian is unit triangular, det J = 1."""

    _lower: bool

    def __init__(self, dim: int, activation: str = "identity", bias: bool = True) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.activation = activation
        self._sigma = get_activation(activation)
        n_free = dim * (dim - 1) // 2
        # only the dim(dim−1)/2 free entries are parameters; the index pair scatters them into L
        rows, cols = torch.tril_indices(dim, dim, offset=-1)
        if not self._lower:
            rows, cols = cols, rows
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        # the same positions in the flattened (dim·dim,) matrix: L.view(-1)[_flat] = weight
        self.register_buffer("_flat", rows * dim + cols, persistent=False)
        self.weight = nn.Parameter(torch.empty(n_free))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
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
        """L built entry by entry in Python: the slow, obviously correct reference of :meth:`matrix`."""
        L = torch.zeros(self.dim, self.dim, dtype=self.weight.dtype)
        k = 0
        for i in range(self.dim):
            for j in range(i):
                r, c = (i, j) if self._lower else (j, i)
                L[r, c] = self.weight[k].detach().cpu()
                k += 1
        return L

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        x : Tensor, shape (batch, seq, dim)

        Returns
        -------
        Tensor, shape (batch, seq, dim)
        """
        check_input(x, type(self).__name__, self.dim)
        return from_planes(self._forward_planes(to_planes(x)))

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:
        """The layer on contiguous xp of shape (dim, seq, batch) (columns z): z ↦ z + σ(L z + b)."""
        if chain_supported([self], xp):
            return triangular_chain_planes([self], self._flat, xp)
        return self._forward_planes_autograd(xp)

    def _forward_planes_autograd(self, xp: torch.Tensor) -> torch.Tensor:
        """:meth:`_forward_planes` differentiated by autograd (any activation, ``torch.func`` transforms)."""
        flat = xp.reshape(self.dim, -1)  # (dim, seq, batch) -> (dim, seq·batch), a view
        if self.bias is None:
            y = self.matrix() @ flat  # (dim, seq·batch)
        else:
            y = torch.addmm(self.bias[:, None], self.matrix(), flat)  # (dim, seq·batch): L z + b
        return xp + self._sigma(y).view_as(xp)  # (dim, seq·batch) -> (dim, seq, batch)

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

    Parameters held: ``weight`` (dim(dim−1)/2,) free entries of L in ``torch.tril_indices`` order, ``bias``.
    """

    _lower = True


class VolumePreservingUpperLayer(_TriangularLayer):
    """x ↦ x + σ(x Uᵀ + b), U strictly upper triangular (GML ``VolumePreservingUpperLayer``).

    Same arguments as :class:`VolumePreservingLowerLayer`; det J = 1 exactly.
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

    Init: W Glorot U(±√(6/(2 dim))), b = 0.
    """

    def __init__(self, dim: int, activation: str = "tanh", bias: bool = True) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.activation = activation
        self._sigma = get_activation(activation)
        self.weight = nn.Parameter(glorot_uniform_(torch.empty(dim, dim), 2 * dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

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


# ---------------------------------------------------------------------------------------------------
# A chain of triangular layers as one autograd node (few ops per training step)


def chain_index(layers) -> torch.Tensor:
    """Positions of the layers' free entries in the stacked (n·dim·dim,) matrices, in ``cat(weights)`` order."""
    return torch.cat([i * layer.dim * layer.dim + layer._flat for i, layer in enumerate(layers)])


def chain_supported(layers, xp: torch.Tensor) -> bool:
    """Whether :func:`triangular_chain_planes` applies: tanh/identity layers with free entries, no
    ``torch.func`` transform active (vmap/jacrev trace the per-layer autograd path instead), contiguous xp."""
    return (
        len(layers) > 0
        and all(isinstance(m, _TriangularLayer) and m.activation in _CHAIN_ACTIVATIONS and m.dim > 1 for m in layers)
        and xp.is_contiguous()
        and not torch._C._are_functorch_transforms_active()
    )


def triangular_chain_planes(layers, index: torch.Tensor, xp: torch.Tensor) -> torch.Tensor:
    """Apply triangular layers one after another on contiguous xp (dim, seq, batch), as one autograd node.

    Bitwise the forward of the layers one by one (the same ``addmm``/``mm``, ``tanh`` and ``add`` on the same
    operands); all strictly triangular matrices are built at once (one ``index_put_`` of the concatenated
    weights into stacked zeros) and the backward is written out (per layer: ``tanh_backward``, one ``mm``
    for the matrix gradient, one ``addmm`` for the input gradient, one ``sum`` for the bias). ``index``:
    :func:`chain_index` of ``layers``.
    """
    spec = tuple((m.activation == "tanh", m.bias is not None) for m in layers)
    biases = [m.bias for m in layers if m.bias is not None]
    return _TriangularChain.apply(spec, index, xp, *[m.weight for m in layers], *biases)


class _TriangularChain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, index, xp, *params):
        n, d = len(spec), xp.shape[0]
        weights, biases = params[:n], params[n:]
        mats = weights[0].new_zeros(n * d * d).index_put_((index,), torch.cat(weights)).view(n, d, d)
        cols = torch.cat(biases).view(-1, d, 1).unbind(0) if biases else ()  # each (d, 1): bias[:, None]
        h = xp.view(d, -1)  # (dim, seq·batch)
        saved, k = [], 0
        for (tanh, has_bias), L in zip(spec, mats.unbind(0)):
            saved.append(h)
            if has_bias:
                y = torch.addmm(cols[k], L, h)  # L z + b
                k += 1
            else:
                y = torch.mm(L, h)
            if tanh:
                y = torch.tanh(y)
                saved.append(y)
            h = h + y
        ctx.spec, ctx.n_bias, ctx.m = spec, len(biases), weights[0].numel()
        ctx.save_for_backward(index, mats, *saved)
        return h.view(xp.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        index, mats, *saved = ctx.saved_tensors
        spec, n = ctx.spec, len(ctx.spec)
        d = mats.shape[-1]
        shape = grad.shape
        g = grad.reshape(d, -1)
        matsT = mats.mT.unbind(0)
        grad_mats: list[torch.Tensor | None] = [None] * n
        grad_bias: list[torch.Tensor] = []
        need_x = ctx.needs_input_grad[2]
        for i in range(n - 1, -1, -1):
            tanh, has_bias = spec[i]
            s = saved.pop() if tanh else None
            h = saved.pop()
            gy = torch.ops.aten.tanh_backward(g, s) if tanh else g  # d/dy of σ(y), σ' = 1 − tanh²
            if has_bias:
                grad_bias.append(gy.sum(dim=1))
            grad_mats[i] = torch.mm(gy, h.t())  # (dim, dim); only the free entries are read
            if i > 0 or need_x:
                g = torch.addmm(g, matsT[i], gy)  # z + σ(L z + b): g + Lᵀ gy
        grad_w = torch.stack(grad_mats).view(-1)[index].split(ctx.m)
        grad_x = g.view(shape) if need_x else None
        return (None, None, grad_x, *grad_w, *reversed(grad_bias))
