"""The symmetric (time-reversible) composition of a model's layers, shared by every family that offers it.

A model made of layers ψ⁽ᵏ⁾_τ (each a one-parameter family with ψ_0 = id and an explicit inverse) is the
composition ψ_τ = ψ⁽ⁿ⁾_τ ∘ … ∘ ψ⁽¹⁾_τ. Its adjoint is ψ*_τ = (ψ_{−τ})⁻¹ = (ψ⁽¹⁾_{−τ})⁻¹ ∘ … ∘ (ψ⁽ⁿ⁾_{−τ})⁻¹
(layer n's inverse first), and the palindrome

    Φ_τ = ψ_{τ/2} ∘ ψ*_{τ/2}

is symmetric: Φ_{−τ} = ψ_{−τ/2} ∘ (ψ_{τ/2})⁻¹ = Φ_τ⁻¹ (Hairer–Lubich–Wanner II.3, V.1). It has the same
parameters; every layer is applied twice, once inverted. For a layer that is a flow (the Lie–Poisson layers)
or whose negative-time map is its inverse (the skew volume-preserving attention), (ψ_{−τ})⁻¹ = ψ_τ and the
palindrome reads L_n(τ/2) ∘ … ∘ L_1(τ/2) ∘ L_1(τ/2) ∘ … ∘ L_n(τ/2).

A layer takes part through ``layer(x, tau)`` and ``layer.inverse(y, tau)`` (rows (batch, seq, dim)); a model
may run the schedule in another layout by overriding ``SymmetricComposition._run_steps``.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..nn.common import check_input
from .registry import _first_parameter

#: one step of a schedule: (layer, flow time, apply the layer's inverse instead of the layer)
Step = tuple[nn.Module, float, bool]


class SymmetricComposition:
    """Mixin for an ``nn.Module`` model whose ``config["symmetric"]`` selects the palindrome (module docstring).

    The model provides ``_flow_layers()`` (its layers in the order ``forward`` applies them), ``_kept()``
    (what it preserves besides symmetry), ``dim``, ``config`` and ``_check_seq`` (the fixed window length its
    input must have, or ``None``). It gets ``preserves``, ``evolve(x, tau)``, ``inverse(y)`` and the steps of
    ``window_chain()`` for a symmetric map.
    """

    dim: int
    config: dict[str, Any]
    _check_seq: int | None

    def _flow_layers(self) -> list[nn.Module]:
        raise NotImplementedError

    def _kept(self) -> tuple[str, ...]:
        return ()

    @property
    def symmetric(self) -> bool:
        return bool(self.config.get("symmetric"))

    @property
    def preserves(self) -> tuple[str, ...]:
        """What the model keeps by construction; ``"symmetric"`` for the palindrome."""
        return self._kept() + (("symmetric",) if self.symmetric else ())

    def _schedule(self, tau: float) -> list[Step]:
        """(layer, flow time, inverted) in the order applied: the one description of the map that ``evolve``,
        ``inverse`` and ``window_chain`` read."""
        layers = self._flow_layers()
        if self.symmetric:  # ψ*_{τ/2} = (ψ_{−τ/2})⁻¹ (layer n's inverse first), then ψ_{τ/2}
            return [(layer, -tau / 2, True) for layer in reversed(layers)] + [(layer, tau / 2, False) for layer in layers]
        return [(layer, tau, False) for layer in layers]

    def _run_steps(self, x: torch.Tensor, steps: list[Step]) -> torch.Tensor:
        """Apply ``steps`` to a batch x (batch, seq, dim)."""
        for layer, t, inverted in steps:
            x = _step(layer, x, t, inverted)
        return x

    def _windows(self, x: torch.Tensor, fn) -> torch.Tensor:
        check_input(x, type(self).__name__, self.dim, self._check_seq, like=_first_parameter(cast(nn.Module, self)),
                    unbatched=True)
        return fn(x.unsqueeze(0)).squeeze(0) if x.ndim == 2 else fn(x)

    def evolve(self, x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The map for the step scaled by ``tau`` (every layer's flow time × τ); ``evolve(x, 1)`` is ``forward(x)``
        (to round-off). x : (batch, seq, dim) or one window (seq, dim)."""
        return self._windows(x, lambda x: self._run_steps(x, self._schedule(tau)))

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """The exact inverse of ``forward``: every step undone, last first (each layer's explicit inverse)."""
        undo = [(layer, t, not inverted) for layer, t, inverted in reversed(self._schedule(1.0))]
        return self._windows(y, lambda y: self._run_steps(y, undo))

    def _symmetric_chain(self) -> list[nn.Module]:
        """The steps of the palindrome as modules (for ``window_chain`` and [`vpintegrator.testing`][vpintegrator.testing])."""
        return [TimedStep(layer, t, inverted) for layer, t, inverted in self._schedule(1.0)]


def _step(layer: nn.Module, x: torch.Tensor, tau: float, inverted: bool) -> torch.Tensor:
    """``layer`` run for flow time ``tau`` on x, or its explicit inverse (every flow layer has ``inverse(y, tau)``)."""
    return cast(torch.Tensor, layer.inverse(x, tau) if inverted else layer(x, tau))  # type: ignore[operator]


class TimedStep(nn.Module):
    """One step of a schedule as a module: ``layer`` (or its inverse) run for time ``tau``."""

    def __init__(self, layer: nn.Module, tau: float, inverted: bool = False) -> None:
        super().__init__()
        self.layer, self.tau, self.inverted = layer, tau, inverted
        self.dim = getattr(layer, "dim", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _step(self.layer, x, self.tau, self.inverted)

    def extra_repr(self) -> str:
        return f"tau={self.tau:g}, inverted={self.inverted}"
