"""Lie–Poisson networks for so(3)* (the rigid body): Casimir-exact, Poisson maps by construction.

- [`LiePoissonNet`][vpintegrator.models.LiePoissonNet] (``lpnet``): position-wise, a composition of [`LiePoissonLayer`][vpintegrator.nn.LiePoissonLayer]
  (exact flows of H = Ψ(k·z)); one step z_n -> z_{n+1} (``seq_len`` 1) or each state of a window advanced by
  itself.
- [`LiePoissonTransformer`][vpintegrator.models.LiePoissonTransformer] (``lp_transformer``): a window model (seq_len T states to the next T):
  L units of [[`LiePoissonCoupling`][vpintegrator.nn.LiePoissonCoupling] (every state rotated by an angle that depends on
  all states: the structure-preserving attention), n_layers LiePoissonLayer].

Every layer is the time-1 flow of a Hamiltonian for the Lie–Poisson structure (per state, or of the product
(so(3)*)^T), so the network is a Poisson map, keeps every state's Casimir ‖z‖² to round-off (each layer is a
rotation of each state) and preserves volume in ℝ^{3T}. ``preserves`` says so; the audits of
[`vpintegrator.testing`][vpintegrator.testing] check it. Every model also has the exact inverse (``inverse``: the layers'
flows backwards, in reverse order).

The conjugation they admit is one uniform scale z ↦ a z without a shift (``vpintegrator.models.normalise``,
rule ``uniform``): it keeps the Casimir's level sets and the linear bracket up to the factor a.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn.common import check_bool, check_positive_int
from ..nn.lie_poisson import LiePoissonCoupling, LiePoissonLayer
from .registry import _record_config
from ._symmetric import SymmetricComposition
from .registry import register_model

__all__ = ["LiePoissonNet", "LiePoissonTransformer"]

PRESERVES = ("volume", "casimir", "poisson")


def _check_dim(dim) -> int:
    dim = check_positive_int(dim, "dim")
    if dim != 3:
        raise VPIntegratorError(f"dim: the Lie–Poisson networks act on so(3)* (the rigid body): dim must be 3, got {dim}")
    return dim


class _LiePoissonBase(SymmetricComposition, nn.Module):
    """Shared forward/inverse (``vpintegrator.models._symmetric.SymmetricComposition``). With ``symmetric``
    the map is the palindrome ψ_{τ/2} ∘ ψ*_{τ/2} = L_n(τ/2) ∘ … ∘ L_1(τ/2) ∘ L_1(τ/2) ∘ … ∘ L_n(τ/2) (every layer
    is a flow, so its adjoint (L_{−τ})⁻¹ is L_τ), hence Φ_{−τ} = Φ_τ⁻¹: a symmetric (time-reversible) learned
    map. ``evolve(x, tau)`` is the map for the scaled step τ (1: ``forward``)."""

    dim: int
    seq_len: int
    pred_window: int
    config: dict[str, Any]
    layers: nn.Sequential
    _check_seq: int | None

    def _flow_layers(self) -> list[nn.Module]:
        return list(self.layers)

    def _kept(self) -> tuple[str, ...]:
        return PRESERVES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq, 3) -> (batch, seq, 3); one window (seq, 3) -> (seq, 3)."""
        return self.evolve(x, 1.0)

    def window_chain(self) -> list[nn.Module]:
        """The layers whose composition is ``forward`` (for [`vpintegrator.testing`][vpintegrator.testing]); for a symmetric
        map the palindrome of half-time flows."""
        return self._symmetric_chain() if self.symmetric else list(self.layers)


# Lie–Poisson networks for so(3)* (issue 21; no paper configuration: sized like the paper's VPT)
@register_model(defaults=dict(seq_len=1, n_layers=8, width=4))
class LiePoissonNet(_LiePoissonBase):
    """Position-wise Lie–Poisson network: ``n_layers`` exact flows of H_l = Ψ_l(k_l·z) (module docstring).

    Learnable scalars: n_layers·(3 + 3·width + 1); 8 layers of width 4 give 128.

    Parameters
    ----------
    dim : int
        3 (so(3)*).
    n_layers : int
    width : int
        Units of each layer's scalar function ψ_l.
    seq_len : int
        Window length it is used with (1: one step); the network acts on each state by itself.
    symmetric : bool
        The palindromic (time-reversible) composition of the layers (``_LiePoissonBase``): the same
        parameters, each layer applied twice for half the time.
    """

    model_name = "lpnet"

    def __init__(self, dim: int, n_layers: int = 8, width: int = 4, seq_len: int = 1, symmetric: bool = False) -> None:
        super().__init__()
        self.dim: int = _check_dim(dim)
        check_positive_int(n_layers, "n_layers")
        check_positive_int(width, "width")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        check_bool(symmetric, "symmetric")
        self._check_seq = None  # position-wise: any window length
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.layers = nn.Sequential(*[LiePoissonLayer(width) for _ in range(n_layers)])


@register_model(defaults=dict(seq_len=3, L=2, n_layers=4, width=4))
class LiePoissonTransformer(_LiePoissonBase):
    """Window Lie–Poisson network: L units of [coupling across the window, ``n_layers`` LiePoissonLayer].

    Learnable scalars: L·((3 + T + 3·width + 1) + n_layers·(3 + 3·width + 1)); seq_len 3, L 2, n_layers 4,
    width 4 give 2·(19 + 64) = 166.

    Parameters
    ----------
    dim : int
        3 (so(3)*).
    seq_len : int
        T, the window (``pred_window`` equals it).
    L : int
        Units.
    n_layers : int
        Position-wise layers per unit.
    width : int
        Units of every scalar function ψ.
    symmetric : bool
        The palindromic (time-reversible) composition, as for [`LiePoissonNet`][vpintegrator.models.LiePoissonNet].
    """

    model_name = "lp_transformer"

    def __init__(self, dim: int, seq_len: int = 3, L: int = 2, n_layers: int = 4, width: int = 4,
                 symmetric: bool = False) -> None:
        super().__init__()
        self.dim: int = _check_dim(dim)
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        check_positive_int(L, "L")
        check_positive_int(n_layers, "n_layers", minimum=0)
        check_positive_int(width, "width")
        check_bool(symmetric, "symmetric")
        self._check_seq = seq_len
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        layers: list[nn.Module] = []
        for _ in range(L):
            layers.append(LiePoissonCoupling(seq_len, width))
            layers += [LiePoissonLayer(width) for _ in range(n_layers)]
        self.layers = nn.Sequential(*layers)
