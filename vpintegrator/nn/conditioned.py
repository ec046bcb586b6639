"""Layers conditioned on a context vector c: structure-preserving for every fixed c.

A context-conditioned integrator reads a prefix of observed states once, turns it into c (shape
(batch, context_dim) or (context_dim,)), and steps with maps whose parameters depend on c. Each layer here
keeps its structure **for every fixed c**, because c enters only where the unconditioned layer has a free
parameter that the structure argument does not involve:

- ``ConditionedLiePoissonLayer``: z ↦ R(k, −ψ(k·z, c)) z on so(3)*, the time-1 flow of
  H = Ψ(k·z; c) (``vpintegrator.nn.lie_poisson``): for fixed c a rotation of each state, so the Casimir
  ‖z‖² is kept exactly, the map is Poisson and volume preserving.
- ``ConditionedGradientLayer``: a SympNet gradient shear (q, p) ↦ (q, p + Kᵀ (a(c) ⊙ σ(K q + β(c))))
  (or the q-shear): p ← p + ∇_q V(q; c) with V = Σ_m a_m(c) Σ(K q + β(c))_m, symplectic for fixed c.
- ``ConditionedShear``: x ↦ x + a(c) ⊙ σ(L x + β(c)) with L strictly lower (or upper)
  triangular: for fixed c the Jacobian is unit triangular, det J = 1.

The dependence on c is affine in the coefficients: a(c) = a + c A, β(c) = β + c B (A, B shaped
(context_dim, width)). Every layer is ``layer(x, c)``, x (batch, seq, dim) or (seq, dim), c (batch,
context_dim) or (context_dim,) (one context for all); c is broadcast over the window's states.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import VPIntegratorError
from .common import check_bool, check_positive_int, get_activation
from .lie_poisson import rotate_about

__all__ = ["ConditionedScalarFunction", "ConditionedLiePoissonLayer", "ConditionedGradientLayer",
           "ConditionedShear", "broadcast_context"]


def broadcast_context(c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """c (..., context_dim) viewed against the states of x (..., seq, dim): (..., 1, context_dim).

    c with one dimension fewer than x (a context per window) gains the ``seq`` axis; c (context_dim,) with
    x (seq, dim) too (an unbatched window)."""
    if c.ndim == x.ndim - 1:
        return c.unsqueeze(-2)
    if c.ndim == 1:
        return c
    raise VPIntegratorError(f"context: shape {tuple(c.shape)} does not fit states {tuple(x.shape)}; give "
                            "(batch, context_dim) for (batch, seq, dim) states or (context_dim,) for one context")


class ConditionedScalarFunction(nn.Module):
    """ψ(s; c) = d + e·c + Σ_m (w_m + c·V_m) tanh(b_m s + c·U_m + g_m), a scalar function of a scalar s
    whose shape depends on the context c (``width`` units; s (...), c (..., context_dim) -> (...)).

    The product (w_m + c·V_m) tanh(b_m s) lets ψ be, e.g., s times a linear function of c: the rigid body's
    H = Σ z_i² / 2I_i is a sum of such Ψ with ψ_i(s) = s / I_i, the 1/I_i linear in (a, b, c)."""

    def __init__(self, width: int, context_dim: int, init_scale: float = 0.1) -> None:
        super().__init__()
        self.width: int = check_positive_int(width, "width")
        self.context_dim: int = check_positive_int(context_dim, "context_dim")
        self.b: nn.Parameter = nn.Parameter(torch.empty(width).uniform_(-1.0, 1.0))
        self.g: nn.Parameter = nn.Parameter(torch.empty(width).uniform_(-1.0, 1.0))
        self.w: nn.Parameter = nn.Parameter(torch.empty(width).uniform_(-init_scale, init_scale))
        self.d: nn.Parameter = nn.Parameter(torch.zeros(()))
        bound = 1.0 / math.sqrt(context_dim)
        self.U = nn.Parameter(torch.empty(context_dim, width).uniform_(-bound, bound))
        self.V = nn.Parameter(torch.empty(context_dim, width).uniform_(-init_scale * bound, init_scale * bound))
        self.e: nn.Parameter = nn.Parameter(torch.zeros(context_dim))

    def forward(self, s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        cu = c @ self.U  # (..., width)
        cv = c @ self.V  # (..., width)
        hidden = torch.tanh(s.unsqueeze(-1) * self.b + cu + self.g)  # (..., width)
        return self.d + c @ self.e + ((self.w + cv) * hidden).sum(-1)

    def extra_repr(self) -> str:
        return f"width={self.width}, context_dim={self.context_dim}"


class ConditionedLiePoissonLayer(nn.Module):
    """z ↦ R(k, −τ ψ(k·z; c)) z on every state: the time-τ flow of H = Ψ(k·z; c) (module docstring).

    Learnable: ``axis`` (3,) (k = axis/‖axis‖) and ψ's parameters (``ConditionedScalarFunction``).

    Parameters
    ----------
    width : int
    context_dim : int
    """

    def __init__(self, width: int = 4, context_dim: int = 3) -> None:
        super().__init__()
        self.dim = 3
        v = torch.randn(3)
        self.axis: nn.Parameter = nn.Parameter(v / v.norm())
        self.psi: ConditionedScalarFunction = ConditionedScalarFunction(width, context_dim)

    def forward(self, x: torch.Tensor, c: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """x (batch, seq, 3), c (batch, context_dim) or (context_dim,) -> (batch, seq, 3)."""
        k = self.axis / torch.linalg.vector_norm(self.axis)
        s = x @ k  # (batch, seq): k·z, kept by the flow
        return rotate_about(x, k, -tau * self.psi(s, broadcast_context(c, x)))

    def inverse(self, y: torch.Tensor, c: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The exact inverse for the same c: k·z is kept, so the flow for time −τ."""
        return self.forward(y, c, -tau)


class ConditionedGradientLayer(nn.Module):
    """SympNet gradient shear with a context: (q, p) ↦ (q, p + Kᵀ(a(c) ⊙ σ(K q + β(c)))) (``side="p"``) or
    (q + Kᵀ(a(c) ⊙ σ(K p + β(c))), p) (``side="q"``); symplectic for every fixed c (module docstring).

    Parameters
    ----------
    dim : int
        2n (even): states (q, p).
    width : int
        Hidden units h (K is (h, n)).
    context_dim : int
    side : {"q", "p"}
        Which half changes.
    activation : str
    """

    def __init__(self, dim: int, width: int, context_dim: int, side: str = "p", activation: str = "tanh") -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        if dim % 2:
            raise VPIntegratorError(f"dim must be even (q, p) for a symplectic layer; got {dim}")
        if side not in ("q", "p"):
            raise VPIntegratorError(f"side: expected 'q' or 'p', got {side!r}")
        self.n: int = dim // 2
        self.side: str = side
        self.activation: str = activation
        self._sigma = get_activation(activation)
        width = check_positive_int(width, "width")
        bound = math.sqrt(6.0 / (width + self.n))
        self.weight: nn.Parameter = nn.Parameter(torch.empty(width, self.n).uniform_(-bound, bound))  # K (h, n)
        self.bias: nn.Parameter = nn.Parameter(torch.zeros(width))
        self.scale: nn.Parameter = nn.Parameter(torch.empty(width).uniform_(-0.1, 0.1))
        cb = 1.0 / math.sqrt(context_dim)
        self.bias_c: nn.Parameter = nn.Parameter(torch.empty(context_dim, width).uniform_(-cb, cb))  # B
        self.scale_c: nn.Parameter = nn.Parameter(torch.empty(context_dim, width).uniform_(-0.1 * cb, 0.1 * cb))  # A

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """x (batch, seq, 2n), c (batch, context_dim) or (context_dim,) -> (batch, seq, 2n)."""
        c = broadcast_context(c, x)
        q, p = x[..., : self.n], x[..., self.n :]
        source = q if self.side == "p" else p
        hidden = self._sigma(source @ self.weight.mT + self.bias + c @ self.bias_c)  # (..., h)
        inc = ((self.scale + c @ self.scale_c) * hidden) @ self.weight  # (..., n): Kᵀ(a(c) ⊙ σ)
        return torch.cat((q, p + inc), -1) if self.side == "p" else torch.cat((q + inc, p), -1)


class ConditionedShear(nn.Module):
    """x ↦ x + a(c) ⊙ σ(L x + β(c)), L strictly lower (``lower=True``) or upper triangular: det J = 1 for
    every fixed c (module docstring).

    Parameters
    ----------
    dim : int
    context_dim : int
    lower : bool
    activation : str
    """

    def __init__(self, dim: int, context_dim: int, lower: bool = True, activation: str = "tanh") -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.lower: bool = check_bool(lower, "lower")
        self.activation = activation
        self._sigma = get_activation(activation)
        mask = torch.ones(dim, dim).tril(-1) if lower else torch.ones(dim, dim).triu(1)
        self.register_buffer("mask", mask)
        bound = math.sqrt(6.0 / (2 * dim))
        self.weight: nn.Parameter = nn.Parameter(torch.empty(dim, dim).uniform_(-bound, bound))
        self.bias: nn.Parameter = nn.Parameter(torch.zeros(dim))
        self.scale: nn.Parameter = nn.Parameter(torch.ones(dim))
        cb = 1.0 / math.sqrt(context_dim)
        self.bias_c: nn.Parameter = nn.Parameter(torch.empty(context_dim, dim).uniform_(-cb, cb))
        self.scale_c: nn.Parameter = nn.Parameter(torch.empty(context_dim, dim).uniform_(-0.1 * cb, 0.1 * cb))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """x (batch, seq, dim), c (batch, context_dim) or (context_dim,) -> (batch, seq, dim)."""
        c = broadcast_context(c, x)
        L = self.weight * self.get_buffer("mask")  # strictly triangular: component i reads only x_j, j < i (or > i)
        hidden = self._sigma(x @ L.mT + self.bias + c @ self.bias_c)  # (..., dim)
        return x + (self.scale + c @ self.scale_c) * hidden
