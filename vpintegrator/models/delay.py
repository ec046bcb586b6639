"""Memory without attention: maps of the delay vector, the control of the multi-step transformers.

A window of T observed states carries what the last state alone does not (the unobserved part of the
state). Whether a transformer's attention adds anything over the window is answered by the same window fed
to maps that have no attention:

- ``delay_mlp`` ([`DelayMLP`][vpintegrator.models.delay.DelayMLP]): the window's T·dim numbers concatenated
  (the delay vector) into a tanh MLP that gives the next state as an increment of the last one,
  ``x_{n+1} = x_n + MLP(x_{n−T+1}, …, x_n)`` (one step: ``pred_window = 1``); keeps nothing by construction;
- ``delay_vpff`` ([`DelayVolumeNet`][vpintegrator.models.delay.DelayVolumeNet]): a volume-preserving
  feed-forward network (the VPFF's triangular layers) on the delay vector of dimension T·dim, mapping the
  window to the next window as the VPT does (``pred_window = seq_len``): det J = 1 on ℝ^{T·dim}, the VPT
  without its attention but with its layers coupling the window's states. When the window holds more numbers
  than the full state (``T·dim > d``: T > 2 on q of the coupled oscillator) the windows fill a d-dimensional
  manifold of ℝ^{T·dim}; the data never constrain the map across it, and a volume-preserving map cannot contract
  every direction normal to it, so a trained ``delay_vpff`` can fit the window and still leave the manifold in a
  rollout (``scripts/vpt_observed_probe.py --models``). At ``T·dim = d`` it has no such direction.

Both admit training's per-component scale and shift (``vpintegrator.models.normalise``, rule ``affine``): an
affine map of each state is one of the delay vector, which keeps det J = 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..nn.common import check_positive_int, get_activation
from .registry import _record_config, register_model
from .volume import VolumePreservingFeedForward

__all__ = ["DelayMLP", "DelayVolumeNet", "INCREMENTS", "check_increment", "increment_base"]


def _batched(x: torch.Tensor, seq_len: int, dim: int, name: str) -> tuple[torch.Tensor, bool]:
    """``x`` as (batch, seq_len, dim) and whether it was one window (seq_len, dim)."""
    from ..errors import VPIntegratorError

    one = x.ndim == 2
    xb = x.unsqueeze(0) if one else x
    if xb.ndim != 3 or xb.shape[1] != seq_len or xb.shape[2] != dim:
        raise VPIntegratorError(f"{name}: expected windows (batch, {seq_len}, {dim}) or one window ({seq_len}, {dim}); "
                                f"got shape {tuple(x.shape)}")
    return xb, one


#: what the MLP of ``delay_mlp`` adds to: the last state, or the Verlet-like extrapolation of the last two
INCREMENTS = ("first", "second")


def check_increment(name: str, increment: Any, seq_len: int) -> str:
    """``increment`` of the window model ``name`` checked (one of ``INCREMENTS``; ``second`` needs T >= 2)."""
    from ..errors import VPIntegratorError

    if increment not in INCREMENTS:
        raise VPIntegratorError(f"{name}: increment must be one of {', '.join(INCREMENTS)}; got {increment!r}",
                                key="model.increment")
    if increment == "second" and seq_len < 2:
        raise VPIntegratorError(f"{name}: increment = 'second' needs seq_len >= 2 (it extrapolates the last two "
                                "states); set model.seq_len >= 2 or increment = 'first'", key="model.increment")
    return str(increment)


def increment_base(xb: torch.Tensor, increment: str) -> torch.Tensor:
    """What a window model's output is added to: the last state of the windows ``xb`` (batch, T, dim), or the
    extrapolation ``2 x_n − x_{n−1}`` of the last two (``increment = "second"``)."""
    return xb[:, -1] if increment == "first" else 2.0 * xb[:, -1] - xb[:, -2]


@register_model(defaults=dict(seq_len=2, width=32, depth=2, activation="tanh", increment="first"))
class DelayMLP(nn.Module):
    """One step from the delay vector: ``x_{n+1} = x_n + MLP(concat(x_{n−T+1}, …, x_n))``.

    ``depth`` hidden layers of ``width`` units (σ = ``activation``), a linear output of ``dim``; the output
    layer starts at zero (the map starts as the identity on the last state). Parameters:
    ``(T·dim + 1)·width + (depth − 1)(width + 1)·width + (width + 1)·dim``.

    With ``increment = "second"`` (T ≥ 2) the MLP gives the second difference instead,
    ``x_{n+1} = 2 x_n − x_{n−1} + MLP(…)``: the form of Störmer–Verlet's position recursion
    ``q_{n+1} = 2 q_n − q_{n−1} − h² M⁻¹∇V(q_n)``, so on positions the MLP has an O(h²) correction to learn
    where the first difference is O(h); the map starts as the linear extrapolation of the last two states.

    Parameters
    ----------
    dim, seq_len : int
        The state's (observed) dimension and the window length T.
    width, depth : int
    activation : str
    increment : "first" or "second"
        What the MLP's output is added to: the last state (``first``), or ``2 x_n − x_{n−1}`` (``second``,
        T ≥ 2).
    """

    model_name = "delay_mlp"
    preserves: tuple[str, ...] = ()

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    increment: str
    config: dict[str, Any]

    def __init__(self, dim: int, seq_len: int = 2, width: int = 32, depth: int = 2, activation: str = "tanh",
                 increment: str = "first") -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len = check_positive_int(seq_len, "seq_len")
        check_positive_int(width, "width")
        check_positive_int(depth, "depth")
        get_activation(activation)
        self.increment = check_increment(self.model_name, increment, self.seq_len)
        self.pred_window = 1
        self.config = _record_config(self, self.model_name, locals())
        self._sigma = get_activation(activation)
        sizes = [self.seq_len * self.dim] + [int(width)] * int(depth)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.out = nn.Linear(int(width), self.dim)
        with torch.no_grad():
            self.out.weight.zero_()
            self.out.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, dim) -> (batch, 1, dim); one window (seq_len, dim) -> (1, dim)."""
        xb, one = _batched(x, self.seq_len, self.dim, "DelayMLP")
        h = xb.reshape(xb.shape[0], -1)
        for layer in self.hidden:
            h = self._sigma(layer(h))
        y = (increment_base(xb, self.increment) + self.out(h)).unsqueeze(1)
        return y[0] if one else y


@register_model(defaults=dict(seq_len=2, n_blocks=4, n_linear=1, activation="tanh"))
class DelayVolumeNet(nn.Module):
    """A volume-preserving map of the whole window: the VPFF on the delay vector (dimension T·dim), window to
    next window (``pred_window = seq_len``, as the VPT); det J = 1 on ℝ^{T·dim}.

    Parameters
    ----------
    dim, seq_len : int
    n_blocks, n_linear : int
        Of the feed-forward network (``VolumePreservingFeedForward``) on dimension ``seq_len * dim``.
    activation : str
    """

    model_name = "delay_vpff"
    preserves: tuple[str, ...] = ("volume",)

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    config: dict[str, Any]

    def __init__(self, dim: int, seq_len: int = 2, n_blocks: int = 4, n_linear: int = 1,
                 activation: str = "tanh") -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        self.config = _record_config(self, self.model_name, locals())
        self.net = VolumePreservingFeedForward(self.seq_len * self.dim, n_blocks=n_blocks, n_linear=n_linear,
                                               activation=activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, dim) -> (batch, seq_len, dim): the next window; one window -> (seq_len, dim)."""
        xb, one = _batched(x, self.seq_len, self.dim, "DelayVolumeNet")
        y = self.net(xb.reshape(xb.shape[0], 1, -1)).reshape(xb.shape)
        return y[0] if one else y
