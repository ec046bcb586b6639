"""Symplectic attention (GML ``SymplecticAttentionQ/P``, ``src/layers/symplectic_attention.jl``).

GML writes a window as Z ∈ ℝ^{2n×T} with q- and p-parts Q, P ∈ ℝ^{n×T}, and the Q-layer as

    symmetric A:  Q ← Q + A P · 2σ(PᵀAP)
    arbitrary A:  Q ← Q + A P σ(PᵀAP)ᵀ + Aᵀ P σ(PᵀAP)

(the P-layer: P ← P + (the same with Q in place of P)). We store X = Zᵀ ∈ ℝ^{T×2n}, Xq = Qᵀ, Xp = Pᵀ, so
C = PᵀAP = Xp A Xpᵀ (T×T) and the increments of Xq are the transposes:

    symmetric A:  Xq ← Xq + 2 σ(C)ᵀ Xp A
    arbitrary A:  Xq ← Xq + σ(C) Xp Aᵀ + σ(C)ᵀ Xp A

σ is GML's ``MatrixSoftmax`` (exp(C_ij) / Σ_{i'j'} exp(C_i'j'), over all T² entries; the default) or
``VectorSoftmax`` (NNlib ``softmax`` on dims = 1: each column j normalised over i, exp(C_ij)/Σ_i' exp(C_i'j),
``torch.softmax(C, dim=-2)`` here).

When is it symplectic? The layer is a shear Q ← Q + G(P); it is symplectic iff G is a gradient. With
F(P) = logsumexp over all entries of C (matrix softmax) or Σ_j logsumexp_i C_ij (vector softmax),
∂F/∂C = σ(C) and ∇_P F = A P σᵀ + Aᵀ P σ: the arbitrary formula, symplectic for either σ. For symmetric A
the matrix softmax of the symmetric C is symmetric and 2 A P σ equals that gradient; the column softmax is
not symmetric, and 2 A P σ is then no gradient: **vector softmax with symmetric A is not symplectic**
([`vpintegrator.testing.audit_symplectic`][vpintegrator.testing.audit_symplectic] at GML's initialisation, N(0, 1) windows, dim 4-6,
T 3-5: ‖JᵀΩJ − Ω‖_F/‖Ω‖_F up to 0.4-4.6 per layer, median 0.1-1.3; the other three combinations ≤ 1e-14).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from .common import check_bool, glorot_uniform_
from .sympnet import _SympNetLayer, symmetric_embedding

__all__ = ["SymplecticAttention", "SymplecticAttentionQ", "SymplecticAttentionP", "ATTENTION_ACTIVATIONS", "symplectic_softmax"]

#: GML ``MatrixSoftmax`` and ``VectorSoftmax``
ATTENTION_ACTIVATIONS = ("matrix_softmax", "vector_softmax")


def check_attention_activation(activation: Any, argument: str = "activation") -> str:
    """Validate the name of a symplectic-attention softmax and return it."""
    if activation not in ATTENTION_ACTIVATIONS:
        raise VPIntegratorError(
            f"{argument}: expected one of {', '.join(ATTENTION_ACTIVATIONS)}, got {activation!r}"
        )
    return activation


def symplectic_softmax(c: torch.Tensor, activation: str = "matrix_softmax") -> torch.Tensor:
    """σ(C) for C of shape (batch, T, T): over all T² entries, or over i in each column j (GML's two softmaxes)."""
    if activation == "matrix_softmax":
        return torch.softmax(c.flatten(-2), dim=-1).view_as(c)  # (batch, T·T) -> (batch, T, T)
    return torch.softmax(c, dim=-2)  # column j: exp(C_ij) / Σ_i' exp(C_i'j)


class SymplecticAttention(_SympNetLayer):
    """The base of ``SymplecticAttentionQ`` and ``SymplecticAttentionP``: the shear of
    ``vpintegrator.nn.sympnet._SympNetLayer`` with a window-wide increment (it mixes the T states)."""

    def __init__(self, dim: int, symmetric: bool = True, activation: str = "matrix_softmax") -> None:
        super().__init__()
        self._init_dim(dim)
        n = self.n
        self.symmetric: bool = check_bool(symmetric, "symmetric")
        self.activation: str = check_attention_activation(activation)
        if symmetric:
            self.register_buffer("_embed", symmetric_embedding(n), persistent=False)
            self.weight: nn.Parameter = nn.Parameter(torch.empty(n * (n + 1) // 2))
        else:
            self.weight = nn.Parameter(torch.empty(n, n))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GML ``GlorotUniform``: U(±√(6/m)) over the m = n(n+1)/2 entries of S, U(±√(6/(2n))) for arbitrary A."""
        glorot_uniform_(self.weight, self.weight.numel() if self.symmetric else 2 * self.n)

    def weight_matrix(self) -> torch.Tensor:
        """A, shape (n, n) (exactly symmetric when ``symmetric``)."""
        if not self.symmetric:
            return self.weight
        return torch.mv(self._embed.to(self.weight.dtype), self.weight).view(self.n, self.n)

    def increment(self, source: torch.Tensor) -> torch.Tensor:
        """The added term for the source part (Xp for the Q-layer), shape (batch, T, n) -> (batch, T, n)."""
        A = self.weight_matrix()
        xa = source @ A  # (batch, T, n)(n, n) -> (batch, T, n): Xp A
        sigma = symplectic_softmax(xa @ source.mT, self.activation)  # (batch, T, T): σ(Xp A Xpᵀ) = σ(PᵀAP)
        if self.symmetric:
            return 2.0 * (sigma.mT @ xa)  # (batch, T, T)(batch, T, n): 2 σᵀ Xp A = (A P · 2σ)ᵀ
        return sigma @ (source @ A.mT) + sigma.mT @ xa  # σ Xp Aᵀ + σᵀ Xp A = (A P σᵀ + Aᵀ P σ)ᵀ

    @property
    def is_symplectic(self) -> bool:
        """False only for the vector softmax with symmetric A (module docstring)."""
        return not (self.symmetric and self.activation == "vector_softmax")

    def extra_repr(self) -> str:
        return f"dim={self.dim}, symmetric={self.symmetric}, activation={self.activation!r}"


class SymplecticAttentionQ(SymplecticAttention):
    """Symplectic attention on the q-part (GML ``SymplecticAttentionQ``), p unchanged.

    With Q, P ∈ ℝ^{n×T} the q- and p-parts of the window (our rows: Xq = Qᵀ, Xp = Pᵀ) and C = PᵀAP:

    - ``symmetric=True`` (A = Aᵀ, n(n+1)/2 parameters): Q ← Q + A P · 2σ(C), rows Xq ← Xq + 2 σ(C)ᵀ Xp A;
    - ``symmetric=False`` (A ∈ ℝ^{n×n}, n² parameters): Q ← Q + A P σ(C)ᵀ + Aᵀ P σ(C),
      rows Xq ← Xq + σ(C) Xp Aᵀ + σ(C)ᵀ Xp A.

    Symplectic on ℝ^{T·dim} (the increment is ∇_P of logsumexp-type potential) for the matrix softmax with
    either A and for the vector softmax with arbitrary A. **Vector softmax with symmetric A is not
    symplectic; offered because GML's scripts train it** (GML's layer allows the combination).

    Parameters
    ----------
    dim : int
        State dimension 2n (even).
    symmetric : bool
        Symmetric A (GML ``SymmetricMatrix``, default) or arbitrary A.
    activation : {"matrix_softmax", "vector_softmax"}
        σ: softmax over all T² entries of C (GML ``MatrixSoftmax``, default) or over each column
        (GML ``VectorSoftmax``).

    Notes
    -----
    Parameters held: ``weight``, the GML ``SymmetricMatrix`` vector (n(n+1)/2,) (lower triangle with the
    diagonal, row by row), init U(±√(6/(n(n+1)/2))); or A (n, n), init U(±√(6/(2n))).
    """

    _changes_q = True


class SymplecticAttentionP(SymplecticAttention):
    """Symplectic attention on the p-part (GML ``SymplecticAttentionP``), q unchanged.

    As [`SymplecticAttentionQ`][vpintegrator.nn.SymplecticAttentionQ] with the roles swapped, C = QᵀAQ:
    symmetric P ← P + A Q · 2σ(C) (rows Xp ← Xp + 2 σ(C)ᵀ Xq A); arbitrary
    P ← P + A Q σ(C)ᵀ + Aᵀ Q σ(C). Not symplectic for the vector softmax with symmetric A (offered because
    GML's scripts train it).
    """

    _changes_q = False
