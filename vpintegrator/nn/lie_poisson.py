"""Lie–Poisson layers on so(3)*: exact flows of Hamiltonians that keep every Casimir.

The rigid body's state z ∈ ℝ³ ≅ so(3)* evolves by ż = z × ∇H(z) (the Lie–Poisson bracket with structure
matrix B(z) = ẑ, ẑ v = z × v); its Casimir is C(z) = ‖z‖², and every Lie–Poisson flow keeps it. The layers
here are time-1 flows of Hamiltonians whose flow is known in closed form (the LPNet idea of Eldred,
Gay-Balmaz, Huraka and Putkaradze, 2023–24; the formulas below are ours):

- [`LiePoissonLayer`][vpintegrator.nn.LiePoissonLayer], H(z) = Ψ(k·z) with a learned unit axis k and a learned scalar function
  ψ = Ψ'. Then ż = ψ(k·z) z × k, k·z is constant along the flow, and the flow is the rotation of z about k
  by the angle −ψ(k·z) t. So the layer z ↦ R(k, −ψ(k·z)) z is a Poisson map (the flow of a Hamiltonian),
  keeps ‖z‖ exactly (a rotation), and preserves volume in ℝ³ (the vector field ψ(k·z) z × k is
  divergence-free).
- [`LiePoissonCoupling`][vpintegrator.nn.LiePoissonCoupling], on a window Z = (z_1, …, z_T) ∈ (so(3)*)^T with the product structure:
  H(Z) = Ψ(s), s = Σ_j α_j k·z_j. Then ż_i = α_i ψ(s) z_i × k; every k·z_j, hence s, is constant, and state i
  rotates about k by −α_i ψ(s). The angle of each state depends on all states of the window (the
  cross-state information an attention carries), and the map is still the exact flow of a Hamiltonian on
  the product: Poisson, each ‖z_i‖ exact, volume preserving in ℝ^{3T}.

Both layers are flows, so ``layer(x, tau)`` is the flow for time τ and its inverse is the flow for −τ
(``inverse``). ψ(s) = d + Σ_m w_m tanh(b_m s + c_m) (``width`` units). The rotation is Rodrigues' formula
R(k, θ) z = z cos θ + (k × z) sin θ + k (k·z)(1 − cos θ). All shapes are (batch, seq, 3).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .common import check_positive_int

__all__ = ["rotate_about", "LiePoissonLayer", "LiePoissonCoupling", "ScalarFunction", "unit_axis"]


def rotate_about(z: torch.Tensor, k: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """R(k, θ) z by Rodrigues' formula; z (..., 3), k unit (3,), θ (...) broadcast against z[..., 0]."""
    k = k.to(z.dtype)
    c, s = torch.cos(theta).unsqueeze(-1), torch.sin(theta).unsqueeze(-1)
    kz = (z * k).sum(-1, keepdim=True)  # (..., 1): k·z
    return z * c + torch.cross(k.expand_as(z), z, dim=-1) * s + k * kz * (1.0 - c)


class ScalarFunction(nn.Module):
    """ψ(s) = d + Σ_m w_m tanh(b_m s + c_m), a learned scalar function of a scalar (``width`` units)."""

    #: set by __init__ (declared for type checkers)
    width: int
    b: nn.Parameter
    c: nn.Parameter
    w: nn.Parameter
    d: nn.Parameter
    init_scale: float

    def __init__(self, width: int, init_scale: float = 0.1) -> None:
        super().__init__()
        self.width = check_positive_int(width, "width")
        self.b = nn.Parameter(torch.empty(width))
        self.c = nn.Parameter(torch.empty(width))
        self.w = nn.Parameter(torch.empty(width))
        self.d = nn.Parameter(torch.zeros(()))
        self.init_scale = float(init_scale)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """b, c ~ U(±1); w ~ U(±init_scale) (a near-identity map at the start); d = 0."""
        with torch.no_grad():
            self.b.uniform_(-1.0, 1.0)
            self.c.uniform_(-1.0, 1.0)
            self.w.uniform_(-self.init_scale, self.init_scale)
            self.d.zero_()

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return self.d + (self.w * torch.tanh(s.unsqueeze(-1) * self.b + self.c)).sum(-1)

    def extra_repr(self) -> str:
        return f"width={self.width}"


def unit_axis(a: torch.Tensor) -> torch.Tensor:
    """a / ‖a‖ (3,): a layer's unit axis k from its ``axis`` parameter (the compiled runner stores it once)."""
    return a / torch.linalg.vector_norm(a).clamp_min(torch.finfo(a.dtype).tiny)


def _random_axis() -> torch.Tensor:
    v = torch.randn(3)
    return v / v.norm()


class LiePoissonLayer(nn.Module):
    """z ↦ R(k, −ψ(k·z)) z on every state of the window: the time-1 flow of H = Ψ(k·z) (module docstring).

    Learnable: ``axis`` (3,) (k = axis/‖axis‖), and ψ's ``psi.b``, ``psi.c``, ``psi.w`` (width,) and
    ``psi.d`` (), 3 + 3·width + 1 scalars.

    Parameters
    ----------
    width : int
        Units of ψ.
    """

    #: set by __init__ (declared for type checkers)
    axis: nn.Parameter
    psi: ScalarFunction

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.dim = 3
        self.axis = nn.Parameter(_random_axis())
        self.psi = ScalarFunction(width)

    def forward(self, x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The flow for time ``tau`` (1: the layer), x : (batch, seq, 3) -> (batch, seq, 3)."""
        k = unit_axis(self.axis)
        return rotate_about(x, k, -tau * self.psi(x @ k))

    def inverse(self, y: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The exact inverse: k·z is kept, so R(k, +τψ(k·y)) y, the flow for time −τ."""
        return self.forward(y, -tau)


class LiePoissonCoupling(nn.Module):
    """z_i ↦ R(k, −α_i ψ(s)) z_i with s = Σ_j α_j k·z_j: the time-1 flow of H(Z) = Ψ(s) on (so(3)*)^T.

    The structure-preserving "attention" of [`LiePoissonTransformer`][vpintegrator.models.LiePoissonTransformer]: every state's
    rotation angle depends on all states of the window (module docstring).

    Parameters
    ----------
    seq_len : int
        T (one weight α_i per position).
    width : int
        Units of ψ.
    """

    #: set by __init__ (declared for type checkers)
    seq_len: int
    axis: nn.Parameter
    alpha: nn.Parameter
    psi: ScalarFunction

    def __init__(self, seq_len: int, width: int = 4) -> None:
        super().__init__()
        self.dim = 3
        self.seq_len = check_positive_int(seq_len, "seq_len")
        self.axis = nn.Parameter(_random_axis())
        self.alpha = nn.Parameter(torch.empty(seq_len).uniform_(-1.0, 1.0) / math.sqrt(seq_len))
        self.psi = ScalarFunction(width)

    def _angles(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = (x @ k) @ self.alpha  # (batch, seq) @ (seq,) -> (batch,): Σ_j α_j k·z_j
        return self.alpha * self.psi(s).unsqueeze(-1)  # (batch, seq): α_i ψ(s)

    def forward(self, x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The flow for time ``tau`` (1: the layer), x : (batch, seq_len, 3) -> (batch, seq_len, 3)."""
        k = unit_axis(self.axis)
        return rotate_about(x, k, -tau * self._angles(x, k))

    def inverse(self, y: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The exact inverse: every k·z_j, hence s, is kept, so the flow for time −τ."""
        return self.forward(y, -tau)

    def extra_repr(self) -> str:
        return f"seq_len={self.seq_len}"
