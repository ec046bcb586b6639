"""Model runners for :class:`~vpintegrator.rollout.ModelStep`: a model compiled to straight-line Python on floats.

ModelStep runs a model by the fastest runner that reproduces it: this generated scalar code (small
batches of float64 models on the CPU), a frozen TorchScript trace, or eager torch.

At batch 1 the cost of a forward pass of the paper models is torch's per-operation overhead (≈ 5 µs per
op, hundreds of ops per call), not arithmetic: a (seq 3, dim 3) window holds 9 numbers. :func:`compile_scalar`
writes the model out as one Python function of those numbers, with the trained weights as literal
constants (``repr`` of a float64 round-trips exactly), zero entries of the triangular and skew matrices
dropped, and the matrices (skew A, triangular L, Stiefel projections) materialised once. Per call at
batch 1 this is 30-65× cheaper than the traced torch model (paper VPFF 6 µs, VPT 21 µs, ST 41 µs per call,
``scripts/bench_rollout.py``).

The arithmetic is float64 (Python floats) and follows the layers' formulas; only the roundings differ from
torch (``math.tanh`` is not ``torch.tanh`` to the last bit), so outputs agree with ``model.forward`` of a
float64 model to ~1e-15 relative (tests: ≤ 1e-12); a float32 model is computed in float64 from its weights. The compiled function is a snapshot: it does not see later changes of the weights.

Supported: :class:`~vpintegrator.models.VolumePreservingFeedForward` (any dim, any seq),
:class:`~vpintegrator.models.VolumePreservingTransformer` (seq_len 1 or 3, skew or arbitrary weighting),
:class:`~vpintegrator.models.StandardTransformerIntegrator` (both attention forms, any seq, Stiefel or
not). Anything else raises :class:`ScalarUnsupported` (callers fall back to torch).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn.attention import MultiHeadAttention, VolumePreservingAttention
from ..nn.feedforward import ResNetLayer, _TriangularLayer

__all__ = ["ScalarForward", "ScalarUnsupported", "compile_scalar"]


class ScalarUnsupported(VPIntegratorError):
    """The model (or one of its layers) has no scalar inference path; use its torch forward."""


def _sigmoid(v: float) -> float:
    # 1 / (1 + exp(−v)) without math.exp's OverflowError for v < −709
    if v >= 0.0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def _silu(v: float) -> float:
    return v * _sigmoid(v)


# activation name -> (function name in the generated code or None for identity, Python function)
_ACTIVATION_CODE = {"identity": None, "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu"}
_NAMESPACE = {
    "tanh": math.tanh,
    "exp": math.exp,
    "sigmoid": _sigmoid,
    "silu": _silu,
    "inf": math.inf,
    "nan": math.nan,
}


def _lit(value: float) -> str:
    """A float64 as source text that evaluates to exactly that float (``inf``/``nan`` are names)."""
    text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


def _matrix(t: torch.Tensor) -> list[list[float]]:
    return t.detach().to(device="cpu", dtype=torch.float64).tolist()


class _Emitter:
    """Builds the source: ``state`` is a (seq, dim) grid of variable names (or float literals)."""

    def __init__(self, seq: int, dim: int) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.state = [[f"x{t}_{i}" for i in range(dim)] for t in range(seq)]

    def new(self, expr: str) -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"    {name} = {expr}")
        return name

    @staticmethod
    def dot(row: Sequence[float], names: Sequence[str], bias: float | None = None) -> str | None:
        """Source of Σ_j row_j names_j + b, zero weights dropped; None if nothing is left.

        Bit-for-bit equality with torch is out of reach anyway (``math.tanh`` and ``torch.tanh`` differ in
        the last bit for ~20% of arguments): the order of the sums is not tuned to torch's kernels.
        """
        terms = [f"{_lit(w)} * {n}" for w, n in zip(row, names) if w != 0.0]
        if bias is not None and bias != 0.0:
            terms.append(_lit(bias))
        return " + ".join(terms) if terms else None

    # ---- layers

    def residual(self, W: list[list[float]], bias: list[float] | None, activation: str) -> None:
        """z ↦ z + σ(W z + b) on every state (triangular and ResNet layers)."""
        if activation not in _ACTIVATION_CODE:
            raise ScalarUnsupported(f"activation {activation!r} has no scalar code")
        fn = _ACTIVATION_CODE[activation]
        dim = len(W)
        for t, z in enumerate(self.state):
            out = []
            for i in range(dim):
                b = 0.0 if bias is None else bias[i]
                pre = self.dot(W[i], z, b)
                if pre is None or all(w == 0.0 for w in W[i]):  # σ(b): a constant, evaluated here by torch
                    const = float(_ACTIVATION_TORCH[activation](torch.tensor(b, dtype=torch.float64)))
                    out.append(z[i] if const == 0.0 else self.new(f"{z[i]} + {_lit(const)}"))
                else:
                    out.append(self.new(f"{z[i]} + {pre}" if fn is None else f"{z[i]} + {fn}({pre})"))
            self.state[t] = out

    def vp_attention(self, A: list[list[float]], skew_sym: bool) -> None:
        """X ↦ Λᵀ X, Λ = Cayley(C), seq 3 closed form (see ``cayley3_transpose_apply``); seq 1: identity."""
        seq, dim = len(self.state), len(A)
        if seq == 1:  # C is the 1×1 zero matrix, Λ = 1
            return
        if seq != 3:
            raise ScalarUnsupported(f"VolumePreservingAttention: scalar code for seq 1 and 3 only, got seq {seq}")
        z0, z1, z2 = self.state
        # C_ij = z_i · (A z_j); lower entries C₂₁, C₂₀, C₁₀; w = (C₂₁, −C₂₀, C₁₀)
        v0 = [self.new(self.dot(A[k], z0) or "0.0") for k in range(dim)]
        v1 = [self.new(self.dot(A[k], z1) or "0.0") for k in range(dim)]
        c20 = " + ".join(f"{a} * {b}" for a, b in zip(z2, v0))
        c21 = " + ".join(f"{a} * {b}" for a, b in zip(z2, v1))
        c10 = " + ".join(f"{a} * {b}" for a, b in zip(z1, v0))
        root = 1.0 if skew_sym else math.sqrt(dim)
        w0 = self.new(f"{c21}" if skew_sym else f"({c21}) / {_lit(root)}")
        w1 = self.new(f"-({c20})" if skew_sym else f"-({c20}) / {_lit(root)}")
        w2 = self.new(f"{c10}" if skew_sym else f"({c10}) / {_lit(root)}")
        s = self.new(f"2 / (1 + ({w0} * {w0} + {w1} * {w1} + {w2} * {w2}))")
        # Λᵀ = (I + [w]× + w wᵀ) s − I;  [w]× = [[0, −w2, w1], [w2, 0, −w0], [−w1, w0, 0]]
        w = (w0, w1, w2)
        cross = {(0, 1): f"-{w2}", (0, 2): w1, (1, 0): w2, (1, 2): f"-{w0}", (2, 0): f"-{w1}", (2, 1): w0}
        K = [[None] * 3 for _ in range(3)]
        for i in range(3):
            for j in range(3):
                if i == j:
                    K[i][j] = self.new(f"(1 + {w[i]} * {w[i]}) * {s} - 1")
                else:
                    K[i][j] = self.new(f"({cross[i, j]} + {w[i]} * {w[j]}) * {s}")
        zs = (z0, z1, z2)
        self.state = [
            [self.new(" + ".join(f"{K[i][j]} * {zs[j][c]}" for j in range(3))) for c in range(dim)]
            for i in range(3)
        ]

    def mh_attention(self, layer: MultiHeadAttention) -> None:
        """Softmax attention (GML or standard form), see :class:`~vpintegrator.nn.MultiHeadAttention`."""
        seq, dim, h, dh = len(self.state), layer.dim, layer.n_heads, layer.d_head
        with torch.no_grad():
            if layer.form == "gml":
                P = torch.cat([p.weight for g in (layer.query, layer.key, layer.value) for p in g], dim=1)
                Wt, b, scale = _matrix(P.mT), None, 1.0 / math.sqrt(dim)  # qkv = x P: row c of Pᵀ
            else:
                Wt, b, scale = _matrix(layer.in_proj_weight), _matrix(layer.in_proj_bias), 1.0 / math.sqrt(dh)
        qkv = [
            [self.new(self.dot(Wt[c], z, None if b is None else b[c]) or "0.0") for c in range(3 * dim)]
            for z in self.state
        ]
        heads = [[None] * dim for _ in range(seq)]
        for hd in range(h):
            q = [row[hd * dh : (hd + 1) * dh] for row in qkv]
            k = [row[dim + hd * dh : dim + (hd + 1) * dh] for row in qkv]
            v = [row[2 * dim + hd * dh : 2 * dim + (hd + 1) * dh] for row in qkv]
            for n in range(seq):
                scores = [
                    self.new(f"({' + '.join(f'{a} * {c}' for a, c in zip(q[n], k[m]))}) * {_lit(scale)}")
                    for m in range(seq)
                ]
                top = self.new(f"max({', '.join(scores)})") if seq > 1 else scores[0]
                e = [self.new(f"exp({sc} - {top})") for sc in scores]
                total = self.new(" + ".join(e))
                p = [self.new(f"{ei} / {total}") for ei in e]
                for c in range(dh):
                    heads[n][hd * dh + c] = self.new(" + ".join(f"{p[m]} * {v[m][c]}" for m in range(seq)))
        if layer.form == "standard":
            Wo, bo = _matrix(layer.out_proj.weight), _matrix(layer.out_proj.bias)
            heads = [[self.new(self.dot(Wo[i], row, bo[i]) or "0.0") for i in range(dim)] for row in heads]
        if layer.add_connection:
            heads = [[self.new(f"{x} + {y}") for x, y in zip(xs, ys)] for xs, ys in zip(self.state, heads)]
        self.state = heads

    # ---- dispatch

    def module(self, m: nn.Module) -> None:
        with torch.no_grad():
            if isinstance(m, _TriangularLayer):
                self.residual(_matrix(m.matrix()), None if m.bias is None else _matrix(m.bias), m.activation)
            elif isinstance(m, ResNetLayer):
                self.residual(_matrix(m.weight), None if m.bias is None else _matrix(m.bias), m.activation)
            elif isinstance(m, VolumePreservingAttention):
                self.vp_attention(_matrix(m.weight_matrix()), m.skew_sym)
            elif isinstance(m, MultiHeadAttention):
                self.mh_attention(m)
            elif isinstance(m, nn.Sequential):
                for child in m:
                    self.module(child)
            elif type(m).__name__ in ("_VPTBlock", "_STBlock", "VolumePreservingFeedForward"):
                for child in m.window_chain():
                    self.module(child)
            else:
                raise ScalarUnsupported(f"no scalar code for module {type(m).__name__}")


_ACTIVATION_TORCH = {"identity": lambda x: x, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu}


class ScalarForward:
    """A model's forward pass as generated Python on float64 scalars (from :func:`compile_scalar`).

    Attributes
    ----------
    fn : callable
        ``fn(window)``: window a flat sequence of seq_len·dim floats (row-major (seq_len, dim)) -> tuple of
        pred_window·dim floats.
    source : str
        The generated code.
    dim, seq_len, pred_window : int
    """

    def __init__(self, fn: Callable[[Sequence[float]], tuple], source: str, dim: int, seq_len: int, pred_window: int):
        self.fn, self.source = fn, source
        self.dim, self.seq_len, self.pred_window = dim, seq_len, pred_window

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Row by row on x of shape (batch, seq_len, dim) -> (batch, pred_window, dim), float64 on the CPU."""
        if x.ndim != 3 or tuple(x.shape[1:]) != (self.seq_len, self.dim):
            raise VPIntegratorError(
                f"ScalarForward: expected input of shape (batch, {self.seq_len}, {self.dim}), got {tuple(x.shape)}"
            )
        rows = x.detach().to(device="cpu", dtype=torch.float64).reshape(x.shape[0], -1).tolist()
        out = [self.fn(r) for r in rows]
        return torch.tensor(out, dtype=torch.float64).reshape(x.shape[0], self.pred_window, self.dim)


def compile_scalar(model: nn.Module) -> ScalarForward:
    """Compile a VPFF, VPT or ST model to straight-line Python on float64 scalars.

    Parameters
    ----------
    model : nn.Module
        Built by :func:`vpintegrator.build_model` (any dtype; the weights are read as float64).

    Returns
    -------
    ScalarForward
        Equal to ``model.forward`` to rounding (float64 models: ~1e-15).

    Raises
    ------
    ScalarUnsupported
        For other models, VPT with seq_len ∉ {1, 3}, or an activation without scalar code.
    """
    from ..models import StandardTransformerIntegrator, VolumePreservingFeedForward, VolumePreservingTransformer

    if type(model) not in (VolumePreservingFeedForward, VolumePreservingTransformer, StandardTransformerIntegrator):
        raise ScalarUnsupported(f"no scalar code for model {type(model).__name__}")
    dim, seq, pred = int(model.dim), int(model.seq_len), int(model.pred_window)
    em = _Emitter(seq, dim)
    for m in model.window_chain():
        em.module(m)
    args = ", ".join(name for row in _Emitter(seq, dim).state for name in row)
    result = ", ".join(name for row in em.state for name in row)
    # the helpers as default arguments: local-variable lookups in the body
    source = "\n".join(
        ["def forward(window, tanh=tanh, exp=exp, sigmoid=sigmoid, silu=silu, inf=inf, nan=nan):", f"    {args}, = window", *em.lines, f"    return ({result},)", ""]
    )
    namespace = dict(_NAMESPACE)
    exec(compile(source, f"<vpintegrator scalar {model.config.get('name', type(model).__name__)}>", "exec"), namespace)
    return ScalarForward(namespace["forward"], source, dim, seq, pred)
