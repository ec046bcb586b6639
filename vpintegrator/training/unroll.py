"""Multi-window (unrolled) training targets: the model iterated on its own predictions.

With ``unroll = k`` the training objective of a window is the model's free rollout over ``k`` windows,
compared with the data's next ``k·pred_window`` states, instead of one window from the true states. The
loss then sees how a window's error propagates into the next ones (phase drift, drift of invariants),
which the one-window loss barely constrains. ``k = 1`` is the plain one-window objective. Written in
``vpintegrator.training.single`` (the single-model strategy, its only user); importable here too.
"""

from __future__ import annotations

from .single import Unrolled, unrolled

__all__ = ["Unrolled", "unrolled"]
