"""Recurrent window models: the window of T observed states read in order by a recurrent network.

The recurrent rung of the memory ladder, beside the delay-vector maps of ``vpintegrator.models.delay``: the
same window of T states (training and rollout see the same sliding windows), read state after state from a
hidden state of zero at the window's start, the last hidden output mapped by a readout MLP to the next
state as an increment of the last one (one step, ``pred_window = 1``):

- ``gru`` ([`GRUWindow`][vpintegrator.models.recurrent.GRUWindow]): stacked gated recurrent units
  (``vpintegrator.nn.recurrent.GRULayer``, ``torch.nn.GRU``'s equations); under ``torch.inference_mode`` (a
  rollout) the window goes through torch's fused GRU kernel in one call (``fused_gru_last``, the same numbers to
  rounding, ~1.7× cheaper per call at batch 1), and through the layers' loop wherever autograd or ``torch.func``
  is at work (training, Jacobians, ensembles);
- ``lru`` ([`LRUWindow`][vpintegrator.models.recurrent.LRUWindow]): the linear recurrent unit of Orvieto et
  al. (2023) (``vpintegrator.nn.recurrent.LRULayer``: a diagonal complex linear recurrence with
  exponentially parametrised eigenvalues and the normalisation γ), the features encoded linearly, each layer
  followed by a position-wise nonlinear map with a skip connection, as in the paper's blocks.

Both keep nothing by construction (``preserves = ()``); their readout's output layer starts at zero, so an
untrained model is the identity on the last state (``increment = "first"``) or the linear extrapolation
of the last two (``increment = "second"``, the form of Störmer–Verlet's position recursion, as
``delay_mlp``'s). A hidden state carried across windows (a streaming rollout) is not what these are: each
window is read afresh, so the model is a map of the window like every other window model. Keeping nothing,
they admit any conjugation: training's normalisation (``vpintegrator.models.normalise``) scales and shifts
each component (rule ``affine``).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from ..nn.common import check_input, check_positive_int, get_activation
from ..nn.recurrent import GRULayer, LRULayer, check_ring, fused_gru_last
from .delay import check_increment, increment_base
from .registry import _record_config, register_model

__all__ = ["GRUWindow", "LRUWindow"]


class _Readout(nn.Module):
    """``depth`` hidden layers of ``width`` (σ) and a linear output of ``dim`` that starts at zero."""

    def __init__(self, n_in: int, width: int, depth: int, dim: int, activation: str) -> None:
        super().__init__()
        self._sigma = get_activation(activation)
        sizes = [n_in] + [width] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.out = nn.Linear(sizes[-1], dim)
        with torch.no_grad():
            self.out.weight.zero_()
            self.out.bias.zero_()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            h = self._sigma(layer(h))
        return self.out(h)


class _WindowModel(nn.Module):
    """What both recurrent window models share: the window check, the readout and the increment."""

    model_name = ""
    preserves: tuple[str, ...] = ()

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    increment: str
    config: dict[str, Any]
    readout: _Readout

    def features(self, xb: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, dim) windows -> the last hidden output (batch, ·) the readout reads."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, dim) -> (batch, 1, dim); one window (seq_len, dim) -> (1, dim)."""
        check_input(x, type(self).__name__, self.dim, self.seq_len, unbatched=True)
        one = x.ndim == 2
        xb = x.unsqueeze(0) if one else x
        y = (increment_base(xb, self.increment) + self.readout(self.features(xb))).unsqueeze(1)
        return y[0] if one else y


@register_model(defaults=dict(seq_len=4, width=16, layers=1, depth=1, activation="tanh", increment="first"))
class GRUWindow(_WindowModel):
    """``x_{n+1} = x_n + MLP(h_T)``, ``h_T`` the last hidden state of ``layers`` stacked GRUs of ``width`` units
    run over the window ``x_{n−T+1}, …, x_n`` from ``h = 0``.

    Parameters: ``3·width·(dim + width + 2) + (layers − 1)·3·width·(2·width + 2)`` in the GRUs, the readout
    ``depth`` hidden layers of ``width`` (σ = ``activation``) and a zero-initialised linear output of ``dim``.

    Parameters
    ----------
    dim, seq_len : int
        The state's (observed) dimension and the window length T.
    width, layers : int
        Hidden units per GRU layer and the number of stacked layers.
    depth : int
        Hidden layers of the readout MLP (0: a linear readout).
    activation : str
        The readout's activation (the GRU's gates are σ and tanh).
    increment : "first" or "second"
        What the readout's output is added to: the last state, or ``2 x_n − x_{n−1}`` (T ≥ 2).
    """

    model_name = "gru"

    def __init__(self, dim: int, seq_len: int = 4, width: int = 16, layers: int = 1, depth: int = 1,
                 activation: str = "tanh", increment: str = "first") -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        check_positive_int(width, "width")
        check_positive_int(layers, "layers")
        check_positive_int(depth, "depth", minimum=0)
        get_activation(activation)
        self.increment: str = check_increment(self.model_name, increment, self.seq_len)
        self.pred_window = 1
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.grus = nn.ModuleList(GRULayer(self.dim if i == 0 else width, width) for i in range(layers))
        self.readout = _Readout(width, width, depth, self.dim, activation)

    def features(self, xb: torch.Tensor) -> torch.Tensor:
        if torch.is_inference_mode_enabled():  # a rollout: torch's fused kernel, one call for the window
            try:
                return fused_gru_last(cast("list[GRULayer]", list(self.grus)), xb)
            except RuntimeError:  # under a torch.func transform (no batching rule): the layers' own loop
                pass
        h = xb
        for gru in self.grus[:-1]:
            h = gru(h)
        return self.grus[-1](h, last=True)


@register_model(defaults=dict(seq_len=4, width=16, state=16, layers=1, depth=1, r_min=0.0, r_max=0.99,
                              max_phase=2.0 * math.pi, activation="tanh", increment="first"))
class LRUWindow(_WindowModel):
    """``x_{n+1} = x_n + MLP(y_T)``: the window encoded linearly to ``width`` features, ``layers`` blocks of
    ``u ← u + W σ(LRU(u)) + b`` (an ``LRULayer`` of ``state`` complex
    eigenvalues, then a position-wise nonlinear map with a skip connection), the last position's features read
    by the readout MLP.

    Parameters
    ----------
    dim, seq_len : int
        The state's (observed) dimension and the window length T.
    width, state : int
        Features per position, and complex eigenvalues per LRU layer.
    layers : int
        LRU blocks.
    depth : int
        Hidden layers of ``width`` in the readout MLP (0: a linear readout).
    r_min, r_max : float
        The ring ``0 ≤ r_min < r_max ≤ 1`` the eigenvalues' moduli are drawn on.
    max_phase : float
        The eigenvalues' phases are drawn on [0, max_phase] (≤ 2π).
    activation : str
        σ of the blocks and the readout.
    increment : "first" or "second"
        What the readout's output is added to: the last state, or ``2 x_n − x_{n−1}`` (T ≥ 2).
    """

    model_name = "lru"

    def __init__(self, dim: int, seq_len: int = 4, width: int = 16, state: int = 16, layers: int = 1,
                 depth: int = 1, r_min: float = 0.0, r_max: float = 0.99, max_phase: float = 2.0 * math.pi,
                 activation: str = "tanh", increment: str = "first") -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        check_positive_int(width, "width")
        check_positive_int(state, "state")
        check_positive_int(layers, "layers")
        check_positive_int(depth, "depth", minimum=0)
        check_ring(r_min, r_max, max_phase, self.model_name)
        self._sigma = get_activation(activation)
        self.increment: str = check_increment(self.model_name, increment, self.seq_len)
        self.pred_window = 1
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.encoder = nn.Linear(self.dim, width)
        self.lrus = nn.ModuleList(LRULayer(width, state, r_min, r_max, max_phase) for _ in range(layers))
        self.mix = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.readout = _Readout(width, width, depth, self.dim, activation)

    def features(self, xb: torch.Tensor) -> torch.Tensor:
        u = self.encoder(xb)
        for lru, mix in zip(self.lrus[:-1], self.mix[:-1]):
            u = u + mix(self._sigma(lru(u)))
        # the last block: only the final position is read
        return u[:, -1] + self.mix[-1](self._sigma(self.lrus[-1](u, last=True)))
