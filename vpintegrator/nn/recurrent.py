"""Recurrent layers on (batch, seq, width) tensors: the gated recurrent unit written out, and the linear
recurrent unit (LRU) of Orvieto et al. (2023), "Resurrecting Recurrent Neural Networks for Long Sequences".

Both read a sequence from a hidden state of zero at its first element and return every hidden output
(batch, seq, ·). Both are plain tensor arithmetic on real parameters, so ``torch.func`` (``vmap``,
``jacrev``, ``functional_call``: the Levenberg–Marquardt Jacobian, the seed ensembles) and any real dtype and
device take them.

- ``GRULayer``: the equations of ``torch.nn.GRU`` (gates r, z, n in that
  order, the reset gate applied to the hidden product with its bias), with the same parameter layout
  (``input.weight`` is ``weight_ih_l0``, ``hidden.weight`` is ``weight_hh_l0``) and initialisation.
- ``LRULayer``: a diagonal complex linear recurrence
  ``h_t = λ ⊙ h_{t−1} + γ ⊙ (B u_t)``, ``y_t = Re(C h_t) + D ⊙ u_t``, the eigenvalues in the exponential
  parametrisation ``λ = exp(−exp(ν_log) + i exp(θ_log))`` (|λ| < 1 for every parameter value), drawn
  uniformly on the ring ``r_min ≤ |λ| ≤ r_max`` with phase in ``[0, max_phase]``, and the normalisation
  ``γ = exp(γ_log)``, ``γ_log`` initialised at ``log √(1 − |λ|²)``. The complex numbers are kept as their
  real and imaginary parts; the recurrence is evaluated in its convolution form ``h_t = Σ_{s ≤ t} λ^{t−s}
  γ ⊙ B u_s`` (one product of a (seq, seq, state) kernel, no loop over time).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from ..errors import VPIntegratorError, finite_float
from .common import check_positive_int

__all__ = ["GRULayer", "LRULayer", "fused_gru_last"]


class GRULayer(nn.Module):
    """One GRU layer, ``torch.nn.GRU``'s equations, hidden state zero at the sequence's start:

    ``r = σ(W_ir u + b_ir + W_hr h + b_hr)``, ``z = σ(W_iz u + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in u + b_in + r ⊙ (W_hn h + b_hn))``, ``h' = (1 − z) ⊙ n + z ⊙ h``.

    Parameters
    ----------
    n_in, width : int
        Input features and hidden units.
    """

    def __init__(self, n_in: int, width: int) -> None:
        super().__init__()
        self.n_in = check_positive_int(n_in, "n_in")
        self.width = check_positive_int(width, "width")
        self.input = nn.Linear(self.n_in, 3 * self.width)  # rows: r, z, n (torch.nn.GRU's weight_ih_l0, bias_ih_l0)
        self.hidden = nn.Linear(self.width, 3 * self.width)  # rows: r, z, n (weight_hh_l0, bias_hh_l0)
        bound = 1.0 / math.sqrt(self.width)  # torch.nn.GRU's initialisation
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-bound, bound)

    def forward(self, u: torch.Tensor, last: bool = False) -> torch.Tensor:
        """(batch, seq, n_in) -> every hidden state (batch, seq, width); with ``last`` only the final one
        (batch, width)."""
        w = self.width
        gi = self.input(u)  # (batch, seq, 3 width): the input side of every step at once
        b_h = self.hidden.bias
        # the first step from h = 0: the hidden product is its bias, and h' = (1 − z) ⊙ n
        rz = torch.sigmoid(gi[:, 0, : 2 * w] + b_h[: 2 * w])
        n = torch.tanh(gi[:, 0, 2 * w :] + rz[:, :w] * b_h[2 * w :])
        h = n - rz[:, w:] * n
        out = [h]
        for t in range(1, u.shape[1]):
            gh = self.hidden(h)
            g = gi[:, t]
            rz = torch.sigmoid(g[:, : 2 * w] + gh[:, : 2 * w])  # the reset and update gates together
            n = torch.tanh(g[:, 2 * w :] + rz[:, :w] * gh[:, 2 * w :])
            h = n + rz[:, w:] * (h - n)
            out.append(h)
        return h if last else torch.stack(out, dim=1)


def fused_gru_last(layers: Sequence[GRULayer], u: torch.Tensor) -> torch.Tensor:
    """The last hidden state (batch, width) of the stacked ``layers`` over ``u`` (batch, seq, n_in) from h = 0, by
    torch's own GRU kernel (``torch.gru``: one call for the whole window and every layer): the numbers of the
    layers' loop to rounding, several times cheaper per call at batch 1. Raises ``RuntimeError`` under a
    ``torch.func`` transform (no batching rule for ``aten::gru``); inference only."""
    params = [p for layer in layers for p in (layer.input.weight, layer.hidden.weight, layer.input.bias,
                                              layer.hidden.bias)]
    h0 = u.new_zeros(len(layers), u.shape[0], layers[-1].width)
    _, h = torch.gru(u, h0, params, True, len(layers), 0.0, False, False, True)
    return h[-1]


def check_ring(r_min: float, r_max: float, max_phase: float, owner: str = "lru") -> tuple[float, float, float]:
    """The LRU's eigenvalue ring as floats, ``0 ≤ r_min < r_max ≤ 1`` and ``0 < max_phase ≤ 2π``, else a
    one-line error naming the key."""
    lo = finite_float(r_min, f"{owner}: r_min", key="model.r_min")
    hi = finite_float(r_max, f"{owner}: r_max", key="model.r_max")
    if not 0.0 <= lo < hi <= 1.0:
        raise VPIntegratorError(f"{owner}: the eigenvalue ring needs 0 <= r_min < r_max <= 1; got r_min = {lo}, "
                                f"r_max = {hi}; set model.r_min below model.r_max", key="model.r_min")
    phase = finite_float(max_phase, f"{owner}: max_phase", positive=True, key="model.max_phase")
    if phase > 2.0 * math.pi:
        raise VPIntegratorError(f"{owner}: max_phase must be in (0, 2π]; got {phase}; set model.max_phase <= "
                                f"{2.0 * math.pi:.6f}", key="model.max_phase")
    return lo, hi, phase


class LRULayer(nn.Module):
    """The linear recurrent unit: ``h_t = λ ⊙ h_{t−1} + γ ⊙ (B u_t)`` (h ∈ ℂ^state, h_0 = 0),
    ``y_t = Re(C h_t) + D ⊙ u_t``, with ``λ = exp(−exp(ν_log) + i exp(θ_log))`` and ``γ = exp(γ_log)``.

    Initialisation (as in Orvieto et al. 2023): |λ|² uniform on ``[r_min², r_max²]``, arg λ uniform on
    ``[0, max_phase]``, ``γ = √(1 − |λ|²)``, ``B`` and ``C`` complex Gaussian with variances 1/width and
    1/state (real and imaginary parts each half), ``D`` standard normal.

    Parameters
    ----------
    width, state : int
        Features of u and y, and the number of complex eigenvalues.
    r_min, r_max : float
        The ring of the initial eigenvalues' moduli, ``0 ≤ r_min < r_max ≤ 1``.
    max_phase : float
        The initial phases' range, in (0, 2π].
    """

    def __init__(self, width: int, state: int, r_min: float = 0.0, r_max: float = 0.99,
                 max_phase: float = 2.0 * math.pi) -> None:
        super().__init__()
        self.width = check_positive_int(width, "width")
        self.state = check_positive_int(state, "state")
        self.r_min, self.r_max, self.max_phase = check_ring(r_min, r_max, max_phase)
        N, H = self.state, self.width
        self.nu_log = nn.Parameter(torch.empty(N))
        self.theta_log = nn.Parameter(torch.empty(N))
        self.gamma_log = nn.Parameter(torch.empty(N))
        self.B_re = nn.Parameter(torch.empty(N, H))
        self.B_im = nn.Parameter(torch.empty(N, H))
        self.C_re = nn.Parameter(torch.empty(H, N))
        self.C_im = nn.Parameter(torch.empty(H, N))
        self.D = nn.Parameter(torch.empty(H))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the parameters as the paper does (the class docstring), from torch's global generator."""
        with torch.no_grad():
            # |λ|² uniform on [r_min², r_max²]; u kept off 0 and 1 so that the logarithms stay finite
            u1 = torch.rand(self.state).clamp(1e-7, 1.0 - 1e-7)
            mod2 = u1 * (self.r_max**2 - self.r_min**2) + self.r_min**2
            nu = -0.5 * torch.log(mod2.clamp_min(1e-30))  # |λ| = exp(−ν)
            self.nu_log.copy_(torch.log(nu.clamp_min(1e-12)))
            u2 = torch.rand(self.state).clamp_min(1e-7)
            self.theta_log.copy_(torch.log(self.max_phase * u2))
            self.gamma_log.copy_(0.5 * torch.log((1.0 - torch.exp(-2.0 * torch.exp(self.nu_log))).clamp_min(1e-30)))
            self.B_re.normal_(0.0, 1.0 / math.sqrt(2 * self.width))
            self.B_im.normal_(0.0, 1.0 / math.sqrt(2 * self.width))
            self.C_re.normal_(0.0, 1.0 / math.sqrt(self.state))
            self.C_im.normal_(0.0, 1.0 / math.sqrt(self.state))
            self.D.normal_(0.0, 1.0)

    def eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(|λ|, arg λ)``, each (state,)."""
        return torch.exp(-torch.exp(self.nu_log)), torch.exp(self.theta_log)

    def _powers(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Real and imaginary parts of ``γ ⊙ λ^k`` for the exponents ``k`` (any shape) -> (*k.shape, state):
        ``exp(γ_log − k exp(ν_log)) (cos, sin)(k exp(θ_log))``."""
        kk = k.unsqueeze(-1)
        mod = torch.exp(self.gamma_log - kk * torch.exp(self.nu_log))
        angle = kk * torch.exp(self.theta_log)
        return mod * torch.cos(angle), mod * torch.sin(angle)

    def forward(self, u: torch.Tensor, last: bool = False) -> torch.Tensor:
        """(batch, seq, width) -> ``y`` (batch, seq, width); with ``last`` only the final output (batch, width)."""
        T = u.shape[1]
        v_re = u @ self.B_re.T  # B u: (batch, seq, state), real and imaginary parts
        v_im = u @ self.B_im.T
        if last:  # h_{T−1} = Σ_s γ λ^{T−1−s} B u_s, elementwise (cheaper than a product at batch 1)
            k_re, k_im = self._powers(torch.arange(T - 1, -1, -1, device=u.device, dtype=u.dtype))  # (seq, state)
            h_re = (k_re * v_re - k_im * v_im).sum(dim=1)
            h_im = (k_re * v_im + k_im * v_re).sum(dim=1)
            return h_re @ self.C_re.T - h_im @ self.C_im.T + self.D * u[:, -1]
        idx = torch.arange(T, device=u.device)
        lag = idx.unsqueeze(1) - idx.unsqueeze(0)  # t − s
        causal = (lag >= 0).to(u.dtype).unsqueeze(-1)
        k_re, k_im = self._powers(lag.clamp_min(0).to(u.dtype))  # (seq t, seq s, state)
        k_re, k_im = k_re * causal, k_im * causal
        h_re = torch.einsum("tsn,bsn->btn", k_re, v_re) - torch.einsum("tsn,bsn->btn", k_im, v_im)
        h_im = torch.einsum("tsn,bsn->btn", k_re, v_im) + torch.einsum("tsn,bsn->btn", k_im, v_re)
        return h_re @ self.C_re.T - h_im @ self.C_im.T + self.D * u
