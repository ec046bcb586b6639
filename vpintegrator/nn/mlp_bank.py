"""A bank of K small tanh MLPs ℝ^dim → ℝ^m with their input derivatives in closed form.

The learned vector fields (``vpintegrator.models.vector_field``) are built from such networks: a scalar
Hamiltonian H_θ (K = 1, m = 1), one scalar function per component that ignores its own coordinate (K = dim,
m = 1, input mask) or an unstructured field (K = 1, m = dim). The field needs the networks' values or their
input gradients, and the field's Jacobian (for Newton's method in the implicit integrators) their second
derivatives.

`mlp_bank` computes all three by forward-mode differentiation written out
layer by layer, with ``einsum`` and ``tanh`` only, so the one formula runs on torch tensors (training: it
composes with autograd, ``vmap`` and ``jacrev``, where ``torch.autograd.grad`` inside the forward would not) and
on NumPy float64 arrays (the rollout's ``LearnedField``, ``vpintegrator.rollout.field``). Per network k, with
the input mask M_k (1: the input is seen), σ = tanh::

    a_0 = (W_0 ∘ M) z + b_0,   h_l = σ(a_l),   a_l = W_l h_{l-1} + b_l,   out = C h_L + c
    dh_l = σ'(a_l) ⊙ T_l,          T_l = W_l dh_{l-1}   (T_0 = W_0 ∘ M)
    d²h_l = σ''(a_l) ⊙ T_l ⊗ T_l + σ'(a_l) ⊙ W_l d²h_{l-1}
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from ..errors import VPIntegratorError
from .common import check_positive_int

__all__ = ["MLPBank", "mlp_bank"]


def mlp_bank(z: Any, weights: Sequence[Any], order: int, xp: Any) -> tuple[Any, Any, Any]:
    """Values and input derivatives of a bank of K tanh MLPs at states ``z``.

    Parameters
    ----------
    z : array, shape (n, dim)
    weights : sequence of arrays
        ``(W_0, b_0, W_1, b_1, ..., W_L, b_L, C, c)`` (``MLPBank.weights()``): W_0 (K, width, dim) with
        the mask applied, b_l (K, width), W_l (K, width, width), C (K, m, width), c (K, m).
    order : {0, 1, 2}
        0: values only; 1: and the input Jacobian; 2: and the second derivatives.
    xp : module
        ``numpy`` or ``torch`` (the namespace of ``z`` and ``weights``).

    Returns
    -------
    (out, G, H)
        out (n, K, m); G (n, K, m, dim) with ``G[n, k, i, j] = ∂out_{k,i}/∂z_j`` (None when order < 1);
        H (n, K, m, dim, dim) the second derivatives (None when order < 2).
    """
    *layers, C, c = weights
    a = xp.einsum("kuj,nj->nku", layers[0], z) + layers[1]  # (n, K, width)
    h = xp.tanh(a)
    T = dh = d2h = None
    if order >= 1:
        s1 = 1.0 - h * h  # σ'(a)
        T = layers[0]  # (K, width, dim), the same for every state
        dh = s1[..., None] * T  # (n, K, width, dim)
        if order >= 2:
            d2h = (-2.0 * h * s1)[..., None, None] * (T[:, :, :, None] * T[:, :, None, :])  # (n, K, width, dim, dim)
    for i in range(2, len(layers), 2):
        W, b = layers[i], layers[i + 1]
        a = xp.einsum("kuv,nkv->nku", W, h) + b
        h = xp.tanh(a)
        if order >= 1:
            s1 = 1.0 - h * h
            T = xp.einsum("kuv,nkvj->nkuj", W, dh)  # (n, K, width, dim)
            if order >= 2:
                S = xp.einsum("kuv,nkvij->nkuij", W, d2h)
                d2h = (-2.0 * h * s1)[..., None, None] * (T[..., :, None] * T[..., None, :]) + s1[..., None, None] * S
            dh = s1[..., None] * T
    out = xp.einsum("kmu,nku->nkm", C, h) + c  # (n, K, m)
    G = xp.einsum("kmu,nkuj->nkmj", C, dh) if order >= 1 else None
    H = xp.einsum("kmu,nkuij->nkmij", C, d2h) if order >= 2 else None
    return out, G, H


class MLPBank(nn.Module):
    """K tanh MLPs ℝ^dim → ℝ^m of ``depth`` hidden layers of ``width`` units, evaluated together.

    Learnable scalars: K·(width·(d + 1) + (depth − 1)·width·(width + 1) + m·width (+ m with ``out_bias``)), d
    the inputs each network sees (dim, or dim − 1 with the mask of the shear fields). Every parameter moves the
    outputs (no masked-out weight is stored, and a potential whose constant does not matter has no output
    bias): Levenberg–Marquardt's damping diag(JᵀJ) then has no zero entry.

    Parameters
    ----------
    dim : int
        Input size.
    n_nets : int
        K.
    n_out : int
        m, outputs per network.
    width, depth : int
        Hidden units and hidden layers of each network.
    mask : tensor (K, dim) or None
        1 where network k sees input j (None: every input); every network must see as many inputs.
    out_bias : bool
        A learnable output bias c (False: c = 0, for a potential whose constant does not matter).
    """

    #: set by __init__ (declared for type checkers)
    cols: torch.Tensor
    mask: torch.Tensor
    c: torch.Tensor

    def __init__(self, dim: int, n_nets: int, n_out: int, width: int, depth: int, mask: torch.Tensor | None = None,
                 out_bias: bool = True) -> None:
        super().__init__()
        self.dim: int = check_positive_int(dim, "dim")
        K = check_positive_int(n_nets, "n_nets")
        m = check_positive_int(n_out, "n_out")
        width = check_positive_int(width, "width")
        depth = check_positive_int(depth, "depth")
        if mask is None:
            mask = torch.ones(K, dim)
        mask = mask.reshape(K, dim).to(torch.get_default_dtype())
        seen = [torch.nonzero(row).flatten() for row in mask]
        n_in = len(seen[0])
        if any(len(cols) != n_in for cols in seen) or n_in == 0:
            raise VPIntegratorError("MLPBank: every network must see the same number (>= 1) of inputs")
        # cols[k, j]: the column of network k's own weight that input j uses (0 where masked, times 0)
        cols = torch.zeros(K, dim, dtype=torch.long)
        for k, c in enumerate(seen):
            cols[k, c] = torch.arange(n_in)
        self.register_buffer("cols", cols, persistent=False)
        self.register_buffer("mask", mask.reshape(K, 1, dim), persistent=False)
        self.hidden: nn.ParameterList = nn.ParameterList()
        fan_in = n_in
        for _ in range(depth):
            bound = 1.0 / math.sqrt(fan_in)  # torch.nn.Linear's default initialisation
            self.hidden.append(nn.Parameter(torch.empty(K, width, fan_in).uniform_(-bound, bound)))
            self.hidden.append(nn.Parameter(torch.empty(K, width).uniform_(-bound, bound)))
            fan_in = width
        bound = 1.0 / math.sqrt(width)
        self.C = nn.Parameter(torch.empty(K, m, width).uniform_(-bound, bound))
        if out_bias:
            self.c = nn.Parameter(torch.zeros(K, m))
        else:
            self.register_buffer("c", torch.zeros(K, m))

    def weights(self) -> list[torch.Tensor]:
        """``(W_0 ∘ M, b_0, ..., W_L, b_L, C, c)``: the argument of `mlp_bank`."""
        hidden = list(self.hidden)
        W0 = hidden[0]  # (K, width, inputs seen)
        if W0.shape[-1] != self.dim:
            W0 = W0.gather(2, self.cols[:, None, :].expand(W0.shape[0], W0.shape[1], self.dim)) * self.mask
        return [W0, *hidden[1:], self.C, self.c]

    def forward(self, z: torch.Tensor, order: int = 0) -> tuple[Any, Any, Any]:
        """z (n, dim) -> ``mlp_bank(z, self.weights(), order, torch)``."""
        return mlp_bank(z, self.weights(), order, torch)
