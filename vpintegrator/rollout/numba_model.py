"""The three architectures (VPFF, VPT, standard transformer) as one numba kernel with the weights as arrays.

At batch 1 a forward pass of the paper models is a few hundred flops on a (seq 3, dim 3) window: torch's
per-operation overhead (≈ 5 µs per op) is the whole cost. Here a model is *packed* into

- ``params``: one flat float64 vector holding every weight matrix and bias (the skew and triangular
  matrices materialised once as dense dim×dim blocks, the attention projections stacked), and
- ``ops``: an int64 program, one row of :data:`OP_WIDTH` integers per layer (its kind, the offsets of its
  weights in ``params``, activation, flags),

and run by a single ``@njit(cache=True)`` interpreter, :func:`_rollout_rows`, that iterates the model for
many calls without returning to Python (one function body: numba increfs every array handed to a helper,
which cost a third of the time at ~1 µs per call). Because the weights and the layer layout are arguments, not
constants, the one compiled kernel serves every weight set and every configuration of the three
architectures (any dim, seq_len, n_blocks, n_linear, L, heads, activations, skew or arbitrary
attention, both multi-head forms), and numba's on-disk cache (``cache=True``) keeps it across processes:
a new model never compiles anything.

Layers (one op each; z a state, a row of the window X (seq, dim)):

``OP_RESIDUAL``
    z ↦ z + σ(W z + b) on every state: the triangular layers of the VPFF/VPT (W strictly lower or upper;
    the zero triangle is skipped) and the ResNet layers of the ST (W dense). σ ∈ identity, tanh,
    sigmoid, silu.
``OP_VP_ATTENTION``
    X ↦ Λᵀ X, Λ = Cayley(C), C the skew matrix with lower entries C_ij = z_i·(A z_j) (``skew_sym``) or
    z_i·(A z_j)/√dim (arbitrary weighting). seq 1: identity; seq 3: the closed form of
    :func:`vpintegrator.nn.cayley.cayley3_transpose_apply` (the layer's own fast path, same formula);
    any other seq: (I + S)⁻¹ by Gauss–Jordan elimination with partial pivoting (I + S, S skew, has
    singular values ≥ 1, so this is as accurate as the closed forms torch uses for seq ≤ 5).
``OP_MH_ATTENTION``
    :class:`~vpintegrator.nn.MultiHeadAttention`, GML form (qkv = X P, scale 1/√dim, no output
    projection) or standard form (biases, scale 1/√d_head, output projection), softmax over the keys as
    ``torch.softmax`` (max subtracted), optional add connection.

The arithmetic is float64 and follows the layers' formulas; only roundings differ from torch (tanh is
computed as t / (t + 2), t = expm1(2v), within ~2 ulp of torch's, about twice as fast as libm's tanh), so a
call agrees with ``model.forward`` of a float64 model to ~1e-15 relative (tests: ≤ 1e-12). Measured at
batch 1 on the paper's trajectory 1 (``scripts/bench_rollout.py``, one thread): VPFF 0.5 µs, VPT 1.5 µs,
ST 1.0 µs per call, i.e. 0.12 s, 0.12 s and 0.09 s for 250 000 steps. A float32 model is computed in float64 from its weights. A packed model is a
snapshot: later changes of the torch weights are not seen.

Without numba (``AVAILABLE`` is False) :func:`pack` returns None and callers run torch.

Example
-------
>>> cm = pack(load_model("pretrained:rigid_body_vpt"))
>>> cm.forward(window)                   # (3, 3) -> (3, 3)
>>> out = np.empty((1, 3 * 1000, 3)); cm.rollout_block(window, 1000, out)   # 1000 calls, in numba
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

try:  # numba is a dependency, but the package keeps working without it (torch runs the models then)
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "CompiledModel", "pack", "compile_kernels", "OP_RESIDUAL", "OP_VP_ATTENTION", "OP_MH_ATTENTION"]

OP_RESIDUAL, OP_VP_ATTENTION, OP_MH_ATTENTION = 0, 1, 2
OP_WIDTH = 8
#: activation name -> code in the kernel
ACTIVATIONS = {"identity": 0, "tanh": 1, "sigmoid": 2, "silu": 3}
#: OP_RESIDUAL matrix kinds: dense, strictly lower, strictly upper (the zero triangle is skipped)
DENSE, LOWER, UPPER = 0, 1, 2


def _njit(fn=None, **options):
    if fn is None:
        return lambda f: _njit(f, **options)
    if not AVAILABLE:
        return fn
    return numba.njit(cache=True, nogil=True, **options)(fn)


# ---------------------------------------------------------------------------------------------- kernel
#
# One function body on purpose: numba increfs/decrefs every array handed to a helper (or rebound by an
# inlined one) at each call, ~5 ns apiece, which at ~1 µs per model call was a third of the time. Only
# scalar helpers remain.


@_njit
def _sigma(v, act):
    if act == 1:  # tanh(v) = t / (t + 2), t = expm1(2 v): 2 ulp, ~2x cheaper than libm's tanh here
        if v > 20.0:
            return 1.0
        if v < -20.0:
            return -1.0
        t = math.expm1(2.0 * v)
        return t / (t + 2.0)
    if act == 0:
        return v
    # sigmoid 1 / (1 + exp(−v)) as torch.sigmoid (exp overflow gives inf, 1/inf = 0: no exception)
    s = 1.0 / (1.0 + math.exp(-v))
    if act == 2:
        return s
    return v * s  # silu


@_njit
def _rollout_rows(ctx, n_calls, adv, params, ops, out):
    """Iterate the model ``n_calls`` times from each window ``ctx[r]`` (R, T, D), in numba.

    Each call maps the window to the prediction (T, D) (pred_window = seq_len) and keeps its first
    ``adv`` states (``adv = T``: non-overlapping windows, the prediction is the next window; ``adv = 1``:
    overlapping windows, the window advances by one state). ``out`` (R, ≥ n_calls·adv, D) receives the
    kept states; ``ctx`` is left holding each row's last window.
    """
    R, T, D = ctx.shape
    n_ops = ops.shape[0]
    x = np.empty((T, D))  # the window, transformed in place layer by layer
    win = np.empty((T, D))
    y = np.empty((T, D))
    tmp = np.empty(D)
    av = np.empty((T, D))
    lam = np.empty((T, T))
    gj = np.empty((T, 2 * T))
    qkv = np.empty((T, 3 * D))
    sc = np.empty(T)
    root_d = math.sqrt(D)
    for r in range(R):
        for t in range(T):
            for c in range(D):
                x[t, c] = ctx[r, t, c]
        pos = 0
        for _ in range(n_calls):
            if adv != T:
                for t in range(T):
                    for c in range(D):
                        win[t, c] = x[t, c]
            for k in range(n_ops):
                code = ops[k, 0]
                if code == 0:
                    # ---- OP_RESIDUAL: x_t ↦ x_t + σ(W x_t + b); kind 1/2: W strictly lower/upper
                    kind = ops[k, 1]
                    w_off = ops[k, 2]
                    b_off = ops[k, 3]
                    act = ops[k, 4]
                    for t in range(T):
                        for i in range(D):
                            lo = 0
                            hi = D
                            if kind == 1:
                                hi = i
                            elif kind == 2:
                                lo = i + 1
                            acc = 0.0
                            row = w_off + i * D
                            for j in range(lo, hi):
                                acc += params[row + j] * x[t, j]
                            if b_off >= 0:
                                acc += params[b_off + i]
                            tmp[i] = acc
                        for i in range(D):
                            x[t, i] += _sigma(tmp[i], act)
                elif code == 1:
                    # ---- OP_VP_ATTENTION: x ↦ Λᵀ x, Λ = Cayley(C(x))
                    if T == 1:  # C is the 1×1 zero matrix, Λ = 1
                        continue
                    a_off = ops[k, 1]
                    skew = ops[k, 2] != 0
                    # av[j] = A x_j for j < T − 1 (x_{T−1} is never on the right of a lower entry)
                    for j in range(T - 1):
                        for i in range(D):
                            acc = 0.0
                            row = a_off + i * D
                            for c in range(D):
                                acc += params[row + c] * x[j, c]
                            av[j, i] = acc
                    if T == 3:
                        c20 = 0.0
                        c21 = 0.0
                        c10 = 0.0
                        for i in range(D):
                            c20 += x[2, i] * av[0, i]
                            c21 += x[2, i] * av[1, i]
                            c10 += x[1, i] * av[0, i]
                        w0 = c21
                        w1 = -c20
                        w2 = c10
                        if not skew:
                            w0 = w0 / root_d
                            w1 = w1 / root_d
                            w2 = w2 / root_d
                        s = 2.0 / (1.0 + (w0 * w0 + w1 * w1 + w2 * w2))
                        # Λᵀ = (I + [w]× + w wᵀ) s − I, [w]× = [[0, −w2, w1], [w2, 0, −w0], [−w1, w0, 0]]
                        k00 = (1.0 + w0 * w0) * s - 1.0
                        k01 = (-w2 + w0 * w1) * s
                        k02 = (w1 + w0 * w2) * s
                        k10 = (w2 + w1 * w0) * s
                        k11 = (1.0 + w1 * w1) * s - 1.0
                        k12 = (-w0 + w1 * w2) * s
                        k20 = (-w1 + w2 * w0) * s
                        k21 = (w0 + w2 * w1) * s
                        k22 = (1.0 + w2 * w2) * s - 1.0
                        for c in range(D):
                            z0 = x[0, c]
                            z1 = x[1, c]
                            z2 = x[2, c]
                            x[0, c] = k00 * z0 + k01 * z1 + k02 * z2
                            x[1, c] = k10 * z0 + k11 * z1 + k12 * z2
                            x[2, c] = k20 * z0 + k21 * z1 + k22 * z2
                    else:
                        # [I + S | I], S_ij = C_ij (i > j), S_ji = −C_ij; Gauss–Jordan -> [I | (I + S)⁻¹]
                        for i in range(T):
                            for j in range(2 * T):
                                gj[i, j] = 0.0
                            gj[i, i] = 1.0
                            gj[i, T + i] = 1.0
                        for i in range(1, T):
                            for j in range(i):
                                acc = 0.0
                                for c in range(D):
                                    acc += x[i, c] * av[j, c]
                                if not skew:
                                    acc = acc / root_d
                                gj[i, j] = acc
                                gj[j, i] = -acc
                        for col in range(T):
                            piv = col
                            best = abs(gj[col, col])
                            for i in range(col + 1, T):
                                if abs(gj[i, col]) > best:
                                    best = abs(gj[i, col])
                                    piv = i
                            if piv != col:
                                for j in range(2 * T):
                                    v = gj[col, j]
                                    gj[col, j] = gj[piv, j]
                                    gj[piv, j] = v
                            p = gj[col, col]
                            for j in range(2 * T):
                                gj[col, j] = gj[col, j] / p
                            for i in range(T):
                                if i != col:
                                    f = gj[i, col]
                                    if f != 0.0:
                                        for j in range(2 * T):
                                            gj[i, j] -= f * gj[col, j]
                        # Λ = 2 (I + S)⁻¹ − I; out_i = Σ_j Λ_ji x_j
                        for i in range(T):
                            for j in range(T):
                                lam[j, i] = 2.0 * gj[j, T + i] - (1.0 if i == j else 0.0)
                        for i in range(T):
                            for c in range(D):
                                acc = 0.0
                                for j in range(T):
                                    acc += lam[j, i] * x[j, c]
                                y[i, c] = acc
                        for i in range(T):
                            for c in range(D):
                                x[i, c] = y[i, c]
                else:
                    # ---- OP_MH_ATTENTION: per head softmax(Q Kᵀ · scale) V, concat, (out proj), (+ x)
                    standard = ops[k, 1] != 0
                    n_heads = ops[k, 2]
                    w_off = ops[k, 3]
                    b_off = ops[k, 4]
                    o_off = ops[k, 5]
                    ob_off = ops[k, 6]
                    add_connection = ops[k, 7] != 0
                    dh = D // n_heads
                    scale = 1.0 / math.sqrt(dh if standard else D)
                    for t in range(T):  # qkv[t] = Wt x_t (+ b), Wt (3 D, D)
                        for i in range(3 * D):
                            acc = 0.0
                            row = w_off + i * D
                            for c in range(D):
                                acc += params[row + c] * x[t, c]
                            if b_off >= 0:
                                acc += params[b_off + i]
                            qkv[t, i] = acc
                    for h in range(n_heads):
                        q0 = h * dh
                        k0 = D + h * dh
                        v0 = 2 * D + h * dh
                        for n in range(T):
                            top = -math.inf
                            for m in range(T):
                                acc = 0.0
                                for c in range(dh):
                                    acc += qkv[n, q0 + c] * qkv[m, k0 + c]
                                acc = acc * scale
                                sc[m] = acc
                                if acc > top:
                                    top = acc
                            total = 0.0
                            for m in range(T):
                                e = math.exp(sc[m] - top)
                                sc[m] = e
                                total += e
                            for m in range(T):
                                sc[m] = sc[m] / total
                            for c in range(dh):
                                acc = 0.0
                                for m in range(T):
                                    acc += sc[m] * qkv[m, v0 + c]
                                y[n, q0 + c] = acc
                    if standard:  # out = H Woᵀ + bo
                        for t in range(T):
                            for i in range(D):
                                acc = 0.0
                                row = o_off + i * D
                                for c in range(D):
                                    acc += params[row + c] * y[t, c]
                                tmp[i] = acc + params[ob_off + i]
                            for i in range(D):
                                y[t, i] = tmp[i]
                    for t in range(T):
                        for i in range(D):
                            if add_connection:
                                x[t, i] = x[t, i] + y[t, i]
                            else:
                                x[t, i] = y[t, i]
            for t in range(adv):
                for c in range(D):
                    out[r, pos + t, c] = x[t, c]
            pos += adv
            if adv != T:  # next window: the last T of [window, kept states]
                for t in range(T):
                    for c in range(D):
                        y[t, c] = x[t, c]
                for t in range(T):
                    for c in range(D):
                        if t + adv < T:
                            x[t, c] = win[t + adv, c]
                        else:
                            x[t, c] = y[t + adv - T, c]
        for t in range(T):
            for c in range(D):
                ctx[r, t, c] = x[t, c]


# --------------------------------------------------------------------------------------------- packing


class CompiledModel:
    """A packed model (:func:`pack`): its weights as ``params`` (float64) and its layers as ``ops`` (int64).

    Attributes
    ----------
    params : ndarray, float64 (n,)
    ops : ndarray, int64 (n_layers, OP_WIDTH)
    dim, seq_len, pred_window : int
    name : str
    """

    def __init__(self, params: np.ndarray, ops: np.ndarray, dim: int, seq_len: int, pred_window: int, name: str = ""):
        self.params = np.ascontiguousarray(params, dtype=np.float64)
        self.ops = np.ascontiguousarray(ops, dtype=np.int64).reshape(-1, OP_WIDTH)
        self.dim, self.seq_len, self.pred_window, self.name = int(dim), int(seq_len), int(pred_window), name

    def _windows(self, windows: Any, what: str) -> np.ndarray:
        w = np.array(windows, dtype=np.float64, order="C", copy=True)
        squeeze = w.ndim == 2
        if squeeze:
            w = w[None]
        if w.ndim != 3 or w.shape[1:] != (self.seq_len, self.dim):
            raise ValueError(f"CompiledModel.{what}: expected a window of shape ({self.seq_len}, {self.dim}) or "
                             f"(batch, {self.seq_len}, {self.dim}), got {np.shape(windows)}")
        return w

    def forward(self, window: Any) -> np.ndarray:
        """One call: window (seq_len, dim) -> (pred_window, dim); also (batch, seq_len, dim) -> (batch, ...)."""
        w = self._windows(window, "forward")
        squeeze = np.ndim(window) == 2
        out = np.empty_like(w)
        _rollout_rows(w, 1, self.seq_len, self.params, self.ops, out)
        return out[0] if squeeze else out

    def rollout_block(self, window0: np.ndarray, n_calls: int, out: np.ndarray, overlap: bool = False) -> np.ndarray:
        """``n_calls`` calls from ``window0`` without returning to Python; returns the last window.

        Parameters
        ----------
        window0 : ndarray (seq_len, dim) or (n_rows, seq_len, dim)
            Not modified.
        n_calls : int
        out : ndarray float64, C-contiguous, (n_calls·adv, dim) or (n_rows, n_calls·adv, dim)
            Receives the kept states; adv = pred_window (non-overlapping windows, as ModelStep) or 1
            (``overlap=True``: keep the first predicted state, advance the window by one).
        """
        w = self._windows(window0, "rollout_block")
        adv = 1 if overlap else self.pred_window
        o = out[None] if out.ndim == 2 else out
        if (o.dtype != np.float64 or not o.flags.c_contiguous or o.ndim != 3 or o.shape[0] != w.shape[0]
                or o.shape[1] < n_calls * adv or o.shape[2] != self.dim):
            raise ValueError(f"CompiledModel.rollout_block: out must be C-contiguous float64 of shape "
                             f"({w.shape[0]}, >= {n_calls * adv}, {self.dim}), got {out.dtype} {out.shape}")
        self.run_rows(w, int(n_calls), overlap, o)
        return w[0] if np.ndim(window0) == 2 else w

    def run_rows(self, ctx: np.ndarray, n_calls: int, overlap: bool, out: np.ndarray) -> None:
        """The raw kernel: ``ctx`` (R, seq_len, dim) C-contiguous float64 is advanced in place, states to ``out``."""
        _rollout_rows(ctx, n_calls, 1 if overlap else self.pred_window, self.params, self.ops, out)

    def __repr__(self) -> str:
        return (f"CompiledModel({self.name or 'model'}: dim {self.dim}, seq_len {self.seq_len}, "
                f"{len(self.ops)} ops, {self.params.size} params)")


class _Packer:
    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.size = 0
        self.ops: list[list[int]] = []

    def add(self, t) -> int:
        """Append a tensor's values (float64, row-major); return their offset."""
        a = np.ascontiguousarray(t.detach().to(device="cpu").double().numpy()).ravel()
        off = self.size
        self.chunks.append(a)
        self.size += a.size
        return off

    def op(self, *fields: int) -> None:
        self.ops.append(list(fields) + [0] * (OP_WIDTH - len(fields)))


class _Unsupported(Exception):
    pass


def _module(pk: _Packer, m, dim: int) -> None:
    import torch
    from torch import nn

    from ..nn.attention import MultiHeadAttention, VolumePreservingAttention
    from ..models.standard import _STBlock
    from ..models.volume import VolumePreservingFeedForward, _VPTBlock
    from ..nn.feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer, _TriangularLayer

    if isinstance(m, (_TriangularLayer, ResNetLayer)):
        if m.activation not in ACTIVATIONS:
            raise _Unsupported(f"activation {m.activation!r}")
        if isinstance(m, VolumePreservingLowerLayer):
            kind, W = LOWER, m.matrix()
        elif isinstance(m, VolumePreservingUpperLayer):
            kind, W = UPPER, m.matrix()
        elif isinstance(m, ResNetLayer):
            kind, W = DENSE, m.weight
        else:
            raise _Unsupported(type(m).__name__)
        w_off = pk.add(W)
        b_off = -1 if m.bias is None else pk.add(m.bias)
        pk.op(OP_RESIDUAL, kind, w_off, b_off, ACTIVATIONS[m.activation])
    elif isinstance(m, VolumePreservingAttention):
        pk.op(OP_VP_ATTENTION, pk.add(m.weight_matrix()), int(bool(m.skew_sym)))
    elif isinstance(m, MultiHeadAttention):
        if getattr(m, "softmax", "vector") != "vector":  # the kernel normalises per query only
            raise _Unsupported(f"attention softmax {m.softmax!r}")
        if m.form == "gml":
            P = torch.cat([p.weight for g in (m.query, m.key, m.value) for p in g], dim=1)  # (dim, 3 dim)
            pk.op(OP_MH_ATTENTION, 0, m.n_heads, pk.add(P.mT), -1, -1, -1, int(m.add_connection))
        elif m.form == "standard":
            w_off, b_off = pk.add(m.in_proj_weight), pk.add(m.in_proj_bias)
            o_off, ob_off = pk.add(m.out_proj.weight), pk.add(m.out_proj.bias)
            pk.op(OP_MH_ATTENTION, 1, m.n_heads, w_off, b_off, o_off, ob_off, int(m.add_connection))
        else:
            raise _Unsupported(f"attention form {m.form!r}")
    elif isinstance(m, nn.Sequential):
        for child in m:
            _module(pk, child, dim)
    elif isinstance(m, (_VPTBlock, _STBlock, VolumePreservingFeedForward)):  # containers of layers
        for child in m.window_chain():
            _module(pk, child, dim)
    else:
        raise _Unsupported(type(m).__name__)
    if getattr(m, "dim", dim) != dim:
        raise _Unsupported("layer dim differs from the model's")


def pack(model) -> CompiledModel | None:
    """The model's weights and layers for the compiled kernel, or None where it does not apply.

    Parameters
    ----------
    model : torch.nn.Module
        A :class:`~vpintegrator.models.VolumePreservingFeedForward`,
        :class:`~vpintegrator.models.VolumePreservingTransformer` or
        :class:`~vpintegrator.models.StandardTransformerIntegrator` (any dtype: the weights are read as float64).

    Returns
    -------
    CompiledModel or None
        None without numba, for other model classes, symmetric (palindromic) VPFF/VPT (``symmetric=True``:
        the kernel has no flow time nor inverse layers; torch runs them), unknown activations or layer kinds
        (the ST's up/downscaling layers of ``transformer_dim ≠ dim``, matrix-softmax attention), or a
        pred_window other than seq_len. Nothing is compiled here (the kernel compiles, or loads from
        numba's cache, on the first call; :func:`compile_kernels` does it ahead).
    """
    if not AVAILABLE:
        return None
    import torch

    from ..models import StandardTransformerIntegrator, VolumePreservingFeedForward, VolumePreservingTransformer

    if type(model) not in (VolumePreservingFeedForward, VolumePreservingTransformer, StandardTransformerIntegrator):
        return None
    if getattr(model, "config", {}).get("symmetric"):  # the palindrome's half-time and inverse steps: torch runs it
        return None
    dim, seq, pred = int(model.dim), int(model.seq_len), int(model.pred_window)
    if pred != seq:
        return None
    pk = _Packer()
    try:
        with torch.no_grad():
            for m in model.window_chain():
                _module(pk, m, dim)
    except _Unsupported:
        return None
    params = np.concatenate(pk.chunks) if pk.chunks else np.zeros(0)
    ops = np.array(pk.ops, dtype=np.int64).reshape(-1, OP_WIDTH)
    name = str(getattr(model, "config", {}).get("name", type(model).__name__))
    return CompiledModel(params, ops, dim, seq, pred, name)


_COMPILED = False


def compile_kernels() -> float:
    """Compile the kernel (or load it from numba's cache) now; seconds it took (0 when already done or without numba)."""
    global _COMPILED
    if not AVAILABLE or _COMPILED:
        return 0.0
    tic = time.perf_counter()
    ctx = np.zeros((1, 3, 3))
    ops = np.array([[OP_RESIDUAL, DENSE, 0, -1, 1, 0, 0, 0]], dtype=np.int64)
    _rollout_rows(ctx, 1, 3, np.zeros(9), ops, np.empty((1, 3, 3)))
    _COMPILED = True
    return time.perf_counter() - tic
