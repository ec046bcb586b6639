"""Multi-window (unrolled) training targets: the model iterated on its own predictions.

With ``unroll = k`` the training objective of a window is the model's free rollout over ``k`` windows,
compared with the data's next ``k·pred_window`` states, instead of one window from the true states. The
loss then sees how a window's error propagates into the next ones (phase drift, drift of invariants),
which the one-window loss barely constrains. ``k = 1`` is the plain one-window objective.
"""

from __future__ import annotations

import torch
from torch import nn

from ..stepping import iterate_windows

__all__ = ["Unrolled", "unrolled"]


class Unrolled(nn.Module):
    """``model`` applied ``k`` times on its own output: (batch, seq_len, dim) → (batch, k·pred_window, dim).

    The input of iteration j + 1 is the last ``seq_len`` states of the input and the predictions so far
    (for pred_window = seq_len: the previous prediction, the non-overlapping windows of a rollout). The
    parameters are the model's own (``Unrolled(m, k).model is m``), so optimisers, ``torch.func`` and DDP
    see the same tensors.
    """

    #: set by __init__ (declared for type checkers)
    k: int
    dim: torch.Tensor | nn.Module
    seq_len: int
    pred_window: int

    def __init__(self, model: nn.Module, k: int) -> None:
        super().__init__()
        self.model = model
        self.k = int(k)
        self.dim = model.dim
        self.seq_len = int(model.seq_len)
        self.pred_window = self.k * int(model.pred_window)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = iterate_windows(self.model, x, self.k)  # the rollout core's window advance
        return outs[0] if self.k == 1 else torch.cat(outs, 1)


def unrolled(model: nn.Module, k: int) -> nn.Module:
    """``model`` itself for ``k = 1``, else ``Unrolled`` ``(model, k)``."""
    return model if int(k) == 1 else Unrolled(model, k)
