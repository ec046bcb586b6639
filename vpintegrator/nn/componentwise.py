"""The small layers written component by component: the form ``torch.compile`` fuses into few kernels.

A state of dimension d is held as its d components, each a tensor over the batch and the window
(``split``: (batch, seq, dim) -> d × (batch, seq)), and every layer is written with scalar weights times
those components: the 3×3 (or d×d) matrix products become multiply-adds. Eagerly that is many tiny
operations, slower than the layers' own paths (a few BLAS calls, or the fused autograd node of
``vpintegrator.nn.fused_attention``); under ``torch.compile`` it is all elementwise, and inductor fuses a
whole chain of layers (forward, and the backward autograd derives from it) into a few loops instead of one
kernel and one BLAS call per layer. The models take this form when they are traced by ``torch.compile``
(``fast_step = "compile"``, the compiled rollout engines); never eagerly.

Layers and their forms, in the seeds' column notation (z a state, h its components h_0 … h_{d−1}):

- triangular (VP feed-forward) z ↦ z + σ(L z + b): y_i = b_i + Σ_{(i, j) free} L_ij h_j, h_i ↦ h_i + σ(y_i)
  (a row of L with no free entry and no bias adds σ(0) = 0 for tanh and identity, nothing computed);
- VP attention at seq = 3 (closed-form Cayley): the three lower entries of C = Zᵀ A Z,
  C_ij = Σ_{p,q} A_pq z_i[p] z_j[q] (skew A: Σ_{p>q} a_pq (z_i[p] z_j[q] − z_i[q] z_j[p])), w = (C₂₁, −C₂₀, C₁₀)
  (÷ √d for the arbitrary weighting), K = Λᵀ = 2 (I + [w]× + w wᵀ) / (1 + |w|²) − I, out_i = Σ_j K_ij z_j;
- SympNet shears on x = (q, p), n = d/2: linear q_i += Σ_j S_ij p_j (+ bias on every component), activation
  q_i += a_i σ(p_i), gradient q_i += Σ_k K_ki a_k σ(Σ_j K_kj p_j + b_k) (P layers with q and p swapped);
  the bias layer x_i += b_i.

They are the same maths as the layers' forwards, summed in another order: equal to round-off
(tests/test_componentwise.py holds outputs and det J against the layers in float64). ``supported`` says
whether every layer of a chain has a form; the models fall back to their own paths otherwise.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from .attention import VolumePreservingAttention
from .cayley import resolve_cayley_method
from .feedforward import _TriangularLayer
from .sympnet import BiasLayer, _ActivationLayer, _GradientLayer, _LinearLayer

__all__ = ["Components", "split", "join", "lower_pairs", "supported", "layer_components", "chain_components"]

#: a state as its d components, each (batch, seq) (or any common shape)
Components = tuple[torch.Tensor, ...]


def split(x: torch.Tensor) -> Components:
    """(batch, seq, dim) -> dim tensors (batch, seq): component k of every state (views)."""
    return tuple(x.unbind(-1))


def join(hs: Sequence[torch.Tensor]) -> torch.Tensor:
    """dim tensors (batch, seq) -> (batch, seq, dim); inverse of ``split``."""
    return torch.stack(tuple(hs), dim=-1)


def _sum(terms: list[torch.Tensor]) -> Any:
    """The sum of ``terms`` as one chain of adds (None for no terms: the caller's empty case)."""
    out = None
    for t in terms:
        out = t if out is None else out + t
    return out


def lower_pairs(n: int, diagonal: bool = False) -> tuple[tuple[int, int], ...]:
    """(row, column) of the lower triangle of an n×n matrix (without the diagonal unless ``diagonal``) in
    ``torch.tril_indices`` order, the order of the layers' free weights; plain Python, so that
    ``torch.compile`` traces no tensor read for it."""
    return tuple((i, j) for i in range(n) for j in range(i + 1 if diagonal else i))


# -- volume preserving ----------------------------------------------------------------------------------


def _triangular(layer: Any, hs: Components) -> Components:
    pairs = lower_pairs(layer.dim)
    if not layer._lower:
        pairs = tuple((j, i) for i, j in pairs)
    w, b = layer.weight, layer.bias
    terms: list[list[torch.Tensor]] = [[] for _ in hs]
    for k, (i, j) in enumerate(pairs):
        terms[i].append(w[k] * hs[j])
    out = []
    for i, h in enumerate(hs):
        y = _sum(terms[i])
        if b is not None:
            y = b[i] + y if y is not None else b[i].expand_as(h)
        out.append(h if y is None else h + layer._sigma(y))
    return tuple(out)


def _attention(layer: Any, hs: Components) -> Components:
    """Seq-3 closed-form attention on components hs[k] (batch, 3)."""
    d = layer.dim
    z = [[h[..., j] for h in hs] for j in range(3)]  # z[j][p]: component p of state j, (batch,)
    if layer.skew_sym:
        pairs = lower_pairs(d)
        a = layer.weight

        def corr(i: int, j: int) -> torch.Tensor:  # z_iᵀ A z_j with A_pq = a, A_qp = −a
            return _sum([a[k] * (z[i][p] * z[j][q] - z[i][q] * z[j][p]) for k, (p, q) in enumerate(pairs)])
    else:
        A = layer.weight
        scale = 1.0 / math.sqrt(d)

        def corr(i: int, j: int) -> torch.Tensor:
            return _sum([A[p, q] * (z[i][p] * z[j][q]) for p in range(d) for q in range(d)]) * scale
    w0, w1, w2 = corr(2, 1), -corr(2, 0), corr(1, 0)
    s = 2.0 / (1.0 + (w0 * w0 + w1 * w1 + w2 * w2))
    # K = 2 (I + [w]× + w wᵀ) / (1 + |w|²) − I; [w]× v = w × v
    K = [
        [s * (1.0 + w0 * w0) - 1.0, s * (w0 * w1 - w2), s * (w0 * w2 + w1)],
        [s * (w1 * w0 + w2), s * (1.0 + w1 * w1) - 1.0, s * (w1 * w2 - w0)],
        [s * (w2 * w0 - w1), s * (w2 * w1 + w0), s * (1.0 + w2 * w2) - 1.0],
    ]
    return tuple(torch.stack([K[i][0] * z[0][p] + K[i][1] * z[1][p] + K[i][2] * z[2][p] for i in range(3)], dim=-1)
                 for p in range(d))


# -- symplectic -----------------------------------------------------------------------------------------


def _shear(layer: Any, hs: Components, increment) -> Components:
    n = layer.n
    q, p = hs[:n], hs[n:]
    if layer._changes_q:
        return tuple(a + da for a, da in zip(q, increment(p))) + tuple(p)
    return tuple(q) + tuple(a + da for a, da in zip(p, increment(q)))


def _sympnet_linear(layer: Any, hs: Components) -> Components:
    n = layer.n
    pairs = lower_pairs(n, diagonal=True)
    S: list[list[Any]] = [[None] * n for _ in range(n)]
    for k, (i, j) in enumerate(pairs):
        S[i][j] = S[j][i] = layer.weight[k]

    def increment(src: Components) -> list[torch.Tensor]:
        return [_sum([S[i][j] * src[j] for j in range(n)]) for i in range(n)]

    out = _shear(layer, hs, increment)
    if layer.bias is None:
        return out
    return tuple(h + layer.bias[i] for i, h in enumerate(out))


def _sympnet_activation(layer: Any, hs: Components) -> Components:
    return _shear(layer, hs, lambda src: [layer.scale[i] * layer._sigma(s) for i, s in enumerate(src)])


def _sympnet_gradient(layer: Any, hs: Components) -> Components:
    K, b, a = layer.weight, layer.bias, layer.scale  # K (h, n)

    def increment(src: Components) -> list[torch.Tensor]:
        hidden = [a[k] * layer._sigma(_sum([K[k, j] * src[j] for j in range(layer.n)]) + b[k])
                  for k in range(layer.h)]
        return [_sum([K[k, i] * hidden[k] for k in range(layer.h)]) for i in range(layer.n)]

    return _shear(layer, hs, increment)


def _bias(layer: Any, hs: Components) -> Components:
    return tuple(h + layer.bias[i] for i, h in enumerate(hs))


def layer_components(layer: Any):
    """The component form of ``layer`` (a function ``(layer, hs) -> hs``), or None when it has none (other
    layers, attention at another window length or Cayley method)."""
    if isinstance(layer, _TriangularLayer):
        return _triangular
    if isinstance(layer, VolumePreservingAttention):
        return _attention if resolve_cayley_method(layer.cayley_method, 3) == "closed" else None
    if isinstance(layer, _LinearLayer):
        return _sympnet_linear
    if isinstance(layer, _ActivationLayer):
        return _sympnet_activation
    if isinstance(layer, _GradientLayer):
        return _sympnet_gradient
    if isinstance(layer, BiasLayer):
        return _bias
    return None


def supported(layers: Sequence[Any], seq: int) -> bool:
    """Whether every layer of the chain has a component form for windows of ``seq`` states."""
    return bool(layers) and all(
        layer_components(m) is not None and (seq == 3 or not isinstance(m, VolumePreservingAttention))
        for m in layers)


def chain_components(layers: Sequence[Any], x: torch.Tensor) -> torch.Tensor:
    """The chain ``layers`` applied to x (batch, seq, dim) in component form (``supported`` must hold)."""
    hs = split(x)
    for m in layers:
        hs = layer_components(m)(m, hs)
    return join(hs)
