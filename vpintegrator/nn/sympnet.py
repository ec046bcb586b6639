"""SympNet layers (GML ``LinearLayerQ/P``, ``ActivationLayerQ/P``, ``GradientLayerQ/P``, ``BiasLayer``).

Every layer acts on (batch, seq, dim) tensors, each state x = (q, p) = (x[..., :n], x[..., n:]) (dim = 2n)
independently. A "Q" layer changes q by a function of p only, a "P" layer changes p by a function of q only,
and that function is a gradient (of ½ pᵀSp, of Σ a_i Σ(p_i), of Σ a_i Σ(K p + b)_i with Σ' = σ): the layers
are shears q ← q + ∇V(p), symplectic by construction (Jin et al. 2020; GML ``src/layers/sympnets.jl``).

GML writes states as columns z; our rows are x = zᵀ, so ``q + K' diag(a) σ(K p + b)`` becomes
``q + (a ⊙ σ(p Kᵀ + b)) K`` on rows. Parameter names and shapes are GML's (``weight``, ``bias``, ``scale``;
K is (h, n) as in Julia), and so are the initialisations: GML's ``GlorotUniform`` fills an array with
U(±√(6/Σ size)) (a vector of length m: ±√(6/m); an h×n matrix: ±√(6/(h+n))); biases of gradient layers 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from .common import check_bool, check_input, check_positive_int, get_activation, glorot_uniform_

__all__ = [
    "check_symplectic_dim",
    "check_upscaling_dimension",
    "symmetric_embedding",
    "LinearLayerQ",
    "LinearLayerP",
    "ActivationLayerQ",
    "ActivationLayerP",
    "GradientLayerQ",
    "GradientLayerP",
    "BiasLayer",
]


def check_symplectic_dim(dim: Any, what: str = "model") -> int:
    """Validate ``dim`` of a symplectic layer or model: a positive even integer (states (q, p))."""
    dim = check_positive_int(dim, "dim")
    if dim % 2:
        raise VPIntegratorError(f"dim must be even (q, p) for a symplectic {what}; got {dim}")
    return dim


def check_upscaling_dimension(dim: int, upscaling_dimension: int | None) -> int:
    """GML's default upscaling dimension 2·dim for ``None``; otherwise a positive even integer (h = M/2)."""
    if upscaling_dimension is None:
        return 2 * dim
    check_positive_int(upscaling_dimension, "upscaling_dimension", minimum=2)
    if upscaling_dimension % 2:
        raise VPIntegratorError(
            f"upscaling_dimension must be even (GML uses h = upscaling_dimension / 2); got {upscaling_dimension}"
        )
    return upscaling_dimension


def symmetric_embedding(n: int) -> torch.Tensor:
    """The (n·n, n(n+1)/2) 0/1 matrix E with ``(E @ S).view(n, n)`` GML's ``SymmetricMatrix(S, n)``.

    GML stores the lower triangle with the diagonal row by row, S = [a_11, a_21, a_22, a_31, ...]: the
    order of ``torch.tril_indices(n, n)``. Entry k of S goes to (i, j) and (j, i), so the matrix is exactly
    symmetric (each entry is one weight times 1 plus exact zeros).
    """
    rows, cols = torch.tril_indices(n, n)
    embed = torch.zeros(n * n, rows.numel())
    k = torch.arange(rows.numel())
    embed[rows * n + cols, k] = 1.0
    embed[cols * n + rows, k] = 1.0
    return embed


class _SympNetLayer(nn.Module):
    """A shear on x = (q, p): Q layers q ← q + f(p), P layers p ← p + f(q); subclasses define f."""

    _changes_q: bool

    def _init_dim(self, dim: int) -> None:
        self.dim: int = check_symplectic_dim(dim, "layer")
        self.n: int = dim // 2

    def increment(self, source: torch.Tensor) -> torch.Tensor:
        """f(source), shape (..., n) -> (..., n): the added term."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to each state.

        Parameters
        ----------
        x : Tensor, shape (batch, seq, dim)

        Returns
        -------
        Tensor, shape (batch, seq, dim)
        """
        check_input(x, type(self).__name__, self.dim)
        q, p = x[..., : self.n], x[..., self.n :]  # (batch, seq, n) each
        if self._changes_q:
            return torch.cat([q + self.increment(p), p], dim=-1)
        return torch.cat([q, p + self.increment(q)], dim=-1)


class _LinearLayer(_SympNetLayer):
    def __init__(self, dim: int, bias: bool = False) -> None:
        super().__init__()
        self._init_dim(dim)
        check_bool(bias, "bias")
        n = self.n
        self.register_buffer("_embed", symmetric_embedding(n), persistent=False)
        self.weight: nn.Parameter = nn.Parameter(torch.empty(n * (n + 1) // 2))
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """S: U(±√(6/m)) over its m = n(n+1)/2 entries; bias: each half U(±√(6/n)) (GML ``BiasLayer``)."""
        glorot_uniform_(self.weight, self.weight.numel())
        if self.bias is not None:
            glorot_uniform_(self.bias, self.n)

    def matrix(self) -> torch.Tensor:
        """The symmetric matrix S, shape (n, n)."""
        return torch.mv(self._embed.to(self.weight.dtype), self.weight).view(self.n, self.n)

    def increment(self, source: torch.Tensor) -> torch.Tensor:
        return source @ self.matrix()  # (..., n)(n, n) -> (..., n): row form of S p (S = Sᵀ)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"dim={self.dim}, bias={self.bias is not None}"


class LinearLayerQ(_LinearLayer):
    """Linear q-shear (GML ``LinearLayerQ``): (q, p) ↦ (q + S p, p), S = Sᵀ ∈ ℝ^{n×n}.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    bias : bool
        Also add b ∈ ℝ^{dim} to the whole state afterwards: x ↦ (q + S p, p) + b, i.e. GML's
        ``LinearLayerQ`` followed by its ``BiasLayer`` (GML's own linear layer has no bias).

    Notes
    -----
    Parameters held: ``weight`` (n(n+1)/2,) GML ``SymmetricMatrix`` vector (lower triangle with diagonal,
    row by row), init U(±√(6/(n(n+1)/2))); ``bias`` (dim,) when asked, each half U(±√(6/n)).
    Jacobian [[I, S], [0, I]]: symplectic because S is symmetric.
    """

    _changes_q = True


class LinearLayerP(_LinearLayer):
    """Linear p-shear (GML ``LinearLayerP``): (q, p) ↦ (q, p + S q), S = Sᵀ ∈ ℝ^{n×n}.

    Arguments and parameters as [`LinearLayerQ`][vpintegrator.nn.LinearLayerQ].
    """

    _changes_q = False


class _ActivationLayer(_SympNetLayer):
    def __init__(self, dim: int, activation: str = "tanh") -> None:
        super().__init__()
        self._init_dim(dim)
        self.activation: str = activation
        self._sigma = get_activation(activation)
        self.scale: nn.Parameter = nn.Parameter(torch.empty(self.n))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """a: U(±√(6/n)) (GML ``GlorotUniform`` on a vector of length n)."""
        glorot_uniform_(self.scale, self.n)

    def increment(self, source: torch.Tensor) -> torch.Tensor:
        return self.scale * self._sigma(source)  # (..., n)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, activation={self.activation!r}"


class ActivationLayerQ(_ActivationLayer):
    """Activation q-shear (GML ``ActivationLayerQ``): (q, p) ↦ (q + diag(a) σ(p), p).

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    activation : str
        σ (``"tanh"``, ``"sigmoid"``, ``"silu"``, ``"identity"``).

    Notes
    -----
    Parameters held: ``scale`` a (n,), init U(±√(6/n)). Jacobian [[I, diag(a σ'(p))], [0, I]]: symplectic.
    """

    _changes_q = True


class ActivationLayerP(_ActivationLayer):
    """Activation p-shear (GML ``ActivationLayerP``): (q, p) ↦ (q, p + diag(a) σ(q)).

    Arguments and parameters as [`ActivationLayerQ`][vpintegrator.nn.ActivationLayerQ].
    """

    _changes_q = False


class _GradientLayer(_SympNetLayer):
    def __init__(self, dim: int, upscaling_dimension: int | None = None, activation: str = "tanh") -> None:
        super().__init__()
        self._init_dim(dim)
        upscaling_dimension = check_upscaling_dimension(dim, upscaling_dimension)
        self.upscaling_dimension: int = upscaling_dimension
        self.h: int = upscaling_dimension // 2
        self.activation: str = activation
        self._sigma = get_activation(activation)
        self.weight: nn.Parameter = nn.Parameter(torch.empty(self.h, self.n))
        self.bias: nn.Parameter = nn.Parameter(torch.empty(self.h))
        self.scale: nn.Parameter = nn.Parameter(torch.empty(self.h))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """K: U(±√(6/(h+n))); b = 0; a: U(±√(6/h)) (GML: GlorotUniform, ZeroInitializer, GlorotUniform)."""
        glorot_uniform_(self.weight, self.h + self.n)
        with torch.no_grad():
            self.bias.zero_()
        glorot_uniform_(self.scale, self.h)

    def increment(self, source: torch.Tensor) -> torch.Tensor:
        hidden = self._sigma(source @ self.weight.mT + self.bias)  # (..., n)(n, h) -> (..., h): σ(K p + b)
        return (self.scale * hidden) @ self.weight  # (..., h)(h, n) -> (..., n): Kᵀ diag(a) σ(K p + b)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, upscaling_dimension={self.upscaling_dimension}, activation={self.activation!r}"


class GradientLayerQ(_GradientLayer):
    """Gradient q-shear (GML ``GradientLayerQ``): (q, p) ↦ (q + Kᵀ diag(a) σ(K p + b), p).

    The increment is ∇V(p) with V(p) = Σ_i a_i Σ((K p + b)_i), Σ' = σ, so the Jacobian
    [[I, Kᵀ diag(a σ'(K p + b)) K], [0, I]] has a symmetric upper-right block: symplectic.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    upscaling_dimension : int, optional
        GML's second size M (even); the hidden width is h = M/2. Default 2·dim.
    activation : str
        σ (``"tanh"``, ``"sigmoid"``, ``"silu"``, ``"identity"``).

    Notes
    -----
    Parameters held (GML's names and shapes): ``weight`` K (h, n), init U(±√(6/(h+n))); ``bias`` b (h,),
    init 0; ``scale`` a (h,), init U(±√(6/h)). Count h·(n + 2) (GML ``parameterlength``).
    """

    _changes_q = True


class GradientLayerP(_GradientLayer):
    """Gradient p-shear (GML ``GradientLayerP``): (q, p) ↦ (q, p + Kᵀ diag(a) σ(K q + b)).

    Arguments and parameters as [`GradientLayerQ`][vpintegrator.nn.GradientLayerQ].
    """

    _changes_q = False


class BiasLayer(nn.Module):
    """Translation (GML ``BiasLayer``, used by LA-SympNets): x ↦ x + b, b = (b_q, b_p) ∈ ℝ^{dim}.

    Parameters
    ----------
    dim : int
        State dimension 2n (even).

    Notes
    -----
    Parameters held: ``bias`` (dim,) = (b_q, b_p), each half U(±√(6/n)) as GML initialises its q and p
    parts. Jacobian I: symplectic.
    """

    #: set by __init__ (declared for type checkers)
    dim: int
    n: int
    bias: nn.Parameter

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim: int = check_symplectic_dim(dim, "layer")
        self.n: int = dim // 2
        self.bias: nn.Parameter = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot_uniform_(self.bias, self.n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, dim) -> (batch, seq, dim)."""
        check_input(x, type(self).__name__, self.dim)
        return x + self.bias

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
