"""The paper architectures (VPFF, VPT, standard transformer; the VPFF/VPT plain or symmetric), the Lie–Poisson
networks (``lpnet``, ``lp_transformer``, plain or symmetric), the symplectic ones (LA-SympNet, G-SympNet,
symplectic transformer) and the memory study's window models (``gru``, ``lru``, ``delay_mlp``, ``delay_vpff``,
and ``vpt_mix``, the VPT's positional mixing) as one numba kernel with the weights as arrays.

At batch 1 a forward pass of the paper models is a few hundred flops on a (seq 3, dim 3) window: torch's
per-operation overhead (≈ 5 µs per op) is the whole cost. Here a model is *packed* into

- ``params``: one flat float64 vector holding every weight matrix and bias (the skew and triangular
  matrices materialised once as dense dim×dim blocks, the attention projections stacked, the Lie–Poisson
  unit axes k = axis/‖axis‖ computed once, and one flow time τ per Lie–Poisson step), and
- ``ops``: an int64 program, one row of ``OP_WIDTH`` integers per layer (its kind, the offsets of its
  weights in ``params``, activation, flags),

and run by a single ``@njit(cache=True)`` interpreter, ``vpintegrator.rollout.numba_kernel._rollout_rows``
(in ``vpintegrator.rollout.numba_kernel``; this module packs and calls it), that iterates the model for
many calls without returning to Python (one function body: numba increfs every array handed to a helper,
which cost a third of the time at ~1 µs per call). Because the weights and the layer layout are arguments, not
constants, the one compiled kernel serves every weight set and every configuration of the twelve
architectures (any dim, seq_len, n_blocks, n_linear, L, heads, activations, skew or arbitrary
attention, both multi-head forms, ``symmetric`` of the VPFF/VPT; any n_layers, width, L, seq_len and
``symmetric`` of the Lie–Poisson networks; any depth, nhidden, n_layers, upscaling, L, n_sympnet,
activations, ``init_upper*``, symmetric or arbitrary A and either softmax of the symplectic ones; any
seq_len, width, state, layers, depth, activation and increment of the window models), and
numba's on-disk cache (``cache=True``) keeps it across processes: a new model never compiles
anything.

Which module becomes which ops is a registry, not a list of types: ``register_packer(LayerCls, fn)`` (the
package's layers and model families register theirs on first use), and a module without a packer is
walked as a container (``nn.Sequential``, ``window_chain()``), so a model of your own made of these layers
is packed as it is; a layer of your own gets a packer ``fn(pk, layer, dim)`` that appends its weights
(``Packer.add``) and op rows (``Packer.op``) or raises ``Unsupported`` (the model then runs in torch).

Layers (one op each; z a state, a row of the window X (seq, dim)):

``OP_RESIDUAL``
    z ↦ z + σ(W z + b) on every state: the triangular layers of the VPFF/VPT (W strictly lower or upper;
    the zero triangle is skipped) and the ResNet layers of the ST (W dense). σ ∈ identity, tanh,
    sigmoid, silu. Timed (fields 5, 6): the member z ↦ z + τ σ(W z + b), or its explicit inverse
    (triangular W) by back-substitution z_i = y_i − τ σ(W_i z + b_i), component after component.
``OP_VP_ATTENTION``
    X ↦ Λᵀ X, Λ = Cayley(C), C the skew matrix with lower entries C_ij = z_i·(A z_j) (``skew_sym``) or
    z_i·(A z_j)/√dim (arbitrary weighting). seq 1: identity; seq 3: the closed form of
    ``vpintegrator.nn.cayley.cayley3_transpose_apply`` (the layer's own fast path, same formula);
    any other seq: (I + S)⁻¹ by Gauss–Jordan elimination with partial pivoting (I + S, S skew, has
    singular values ≥ 1, so this is as accurate as the closed forms torch uses for seq ≤ 5). Timed
    (fields 3, 4): Cayley(τ C) (the skew layer's inverse is the layer at −τ).
``OP_MH_ATTENTION``
    [`MultiHeadAttention`][vpintegrator.nn.MultiHeadAttention], GML form (qkv = X P, scale 1/√dim, no output
    projection) or standard form (biases, scale 1/√d_head, output projection), softmax over the keys as
    ``torch.softmax`` (max subtracted), optional add connection.
``OP_POSITION_MIXING``
    The VPT's ``positional = "mixing"`` shear across positions (``vpt_mix``), x_t ↦ x_t + Σ_s W_ts x_s, the
    (T, T, dim, dim) blocks stored dense.
``OP_LP_LAYER``
    [`LiePoissonLayer`][vpintegrator.nn.LiePoissonLayer] for flow time τ: z ↦ R(k, −τψ(k·z)) z on every state
    (Rodrigues' formula, ψ(s) = d + Σ_m w_m tanh(b_m s + c_m)).
``OP_LP_COUPLING``
    [`LiePoissonCoupling`][vpintegrator.nn.LiePoissonCoupling] for flow time τ: s = Σ_j α_j k·z_j over the window, state i
    rotated about k by −τ α_i ψ(s).

``OP_SYMP_LINEAR``, ``OP_SYMP_ACTIVATION``, ``OP_SYMP_GRADIENT``
    The SympNet shears on z = (q, p), q ← q + f(p) (Q layers) or p ← p + f(q) (P layers):
    f(p) = S p (S symmetric, then optionally + b on the whole state; S absent: GML's ``BiasLayer``),
    a ⊙ σ(p), Kᵀ (a ⊙ σ(K p + b)) (K ∈ ℝ^{h×n}); σ as for OP_RESIDUAL.
``OP_SYMP_ATTENTION``
    Symplectic attention (``vpintegrator.nn.symplectic_attention``): C = Xp A Xpᵀ (T×T), σ(C) the softmax
    over all T² entries (GML ``MatrixSoftmax``) or over each column (``VectorSoftmax``), max subtracted;
    Xq ← Xq + 2 σᵀ Xp A (symmetric A) or σ Xp Aᵀ + σᵀ Xp A (arbitrary A); the P layer with q and p swapped.

The one-step window models (``pred_window = 1``: [`GRUWindow`][vpintegrator.models.GRUWindow],
[`LRUWindow`][vpintegrator.models.LRUWindow], [`DelayMLP`][vpintegrator.models.DelayMLP], so also ``delay_mlp2``,
its ``increment = "second"``) compute on a flat *feature vector* (its slots reserved by ``Packer.features``) and
leave the next state in the window's first row, which the kernel's overlapping-window path (advance 1) keeps;
[`DelayVolumeNet`][vpintegrator.models.DelayVolumeNet] (``delay_vpff``, the VPFF on the delay vector) runs its
triangular layers in place on the window's features and writes them back as the next window:

``OP_FEATURES``
    The window, row after row, into the feature vector (first op; field 1 is the vector's length).
``OP_DENSE``
    An ``nn.Linear`` and σ on features, h ↦ σ(W h + b), written to new features or (σ code + ``ADD``) added
    into existing ones (the LRU blocks' skip connection u ← u + W σ(y) + b); σ code + ``ADD`` + 8·``LOWER``
    (``UPPER``): z ↦ z + σ(W z + b) in place, W strictly lower (upper), the rows in the order that reads
    no updated component (``delay_vpff``'s layers).
``OP_GRU``
    One GRU layer (``vpintegrator.nn.recurrent.GRULayer``, ``torch.nn.GRU``'s equations) over the T
    positions from h = 0, every hidden state kept (the next layer's inputs).
``OP_LRU``
    One LRU layer (``vpintegrator.nn.recurrent.LRULayer``) and σ of its outputs: h_t = Σ_{s≤t} γ λ^{t−s} B u_s
    with the powers γ λ^j (j < T) computed once by the layer's own ``_powers``, y_t = Re(C h_t) + D ⊙ u_t; every
    position, or the last only (the last block).
``OP_INCREMENT``
    The next state: the readout's output added to x_{T−1} or to 2 x_{T−1} − x_{T−2}; or (mode 2) the T·dim
    features as the next window.

Each window is read afresh from a zero hidden state, as the torch model does (the recurrence is inside a call,
not carried between calls). A subclass of these models, a symmetric ``delay_vpff`` and the VPT's
``positional = "feedforward"`` have no packed form: they run in torch, and ``ModelStep.describe()["runner"]``
says so (``"eager"``). Measured at batch 1, thread CPU per step, one run on a loaded 2-core machine
(``scripts/bench_model_runners.py --models '' --rounds 9``: dim 2, the studies' configurations at T = 4, random
weights): the GRU 2.9 µs against 132 µs eager and 2.6 µs for a lean numba loop of the same weights written in the
benchmark (1.12×; 1.03–1.12× in six runs), the LRU 2.4 µs against 187 µs, ``delay_mlp`` 1.6 µs against 49 µs,
``vpt_mix`` 1.1 µs against 558 µs, ``delay_vpff`` 0.5 µs against 58 µs.

A Lie–Poisson network is packed as its schedule
(``vpintegrator.models._symmetric.SymmetricComposition._schedule``: what ``forward`` applies): one op
per step, so ``symmetric=True`` gives the palindrome of half-time flows (an inverse step at time t is the
flow at −t; each layer's weights are stored once). So is a symmetric VPFF/VPT
(``vpintegrator.models._symmetric``): the adjoint half ψ*_{1/2} as the layers' inverses at −1/2, last layer
first (triangular: back-substitution; attention: the layer at +1/2), then every layer at +1/2.

The arithmetic is float64 and follows the layers' formulas; only roundings differ from torch (tanh is
computed as t / (t + 2), t = expm1(2v), within ~2 ulp of torch's, about twice as fast as libm's tanh), so a
call agrees with ``model.forward`` of a float64 model to ~1e-15 relative (tests: ≤ 1e-12); a model with
large weights amplifies the roundings of its intermediates, in torch as here, and is held to its own round-off
(``vpintegrator.rollout.steps.compiled_model``). Measured at
batch 1 on the paper's trajectory 1 (``scripts/bench_rollout.py``, one thread): VPFF 0.5 µs, VPT 1.5 µs,
ST 1.0 µs per call, i.e. 0.12 s, 0.12 s and 0.09 s for 250 000 steps. The symplectic models at batch 1 on
the coupled oscillator (``scripts/bench_rollout.py --skip a,a2,b,c,d``, part (a''), one run, loaded machine):
the shipped G-SympNet 2.9 µs per call against 550 µs eager, the shipped symplectic transformer (L 4) 9.1 µs
against 2.4 ms; in another run LA-SympNet (GML defaults, weights ×0.1) 0.24 µs against 0.71 ms, and the
symmetric VPT (paper config) 4.8 µs against 12.7 ms.
lpnet (8 layers, width 4, seq_len 1) takes 1.6 µs per call against 4.1 µs for the VPT and ~2 ms for torch
eager, in one run on a loaded machine (``rollout_block``, 10⁵ calls, one thread). A float32 model is computed
in float64 from its weights. A packed model is a snapshot: later changes of the torch weights are not seen.

Without numba (``AVAILABLE`` is False) ``pack`` returns None and callers run torch.

Example
-------
>>> cm = pack(load_model("pretrained:rigid_body_vpt"))
>>> cm.forward(window)                   # (3, 3) -> (3, 3)
>>> out = np.empty((1, 3 * 1000, 3)); cm.rollout_block(window, 1000, out)   # 1000 calls, in numba
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from ..protocols import PackerProtocol
from .numba_kernel import (
    ACTIVATIONS,
    ADD,
    AVAILABLE,
    DENSE,
    LOWER,
    OP_DENSE,
    OP_FEATURES,
    OP_GRU,
    OP_INCREMENT,
    OP_LRU,
    OP_POSITION_MIXING,
    OP_LP_COUPLING,
    OP_LP_LAYER,
    OP_MH_ATTENTION,
    OP_RESIDUAL,
    OP_SYMP_ACTIVATION,
    OP_SYMP_ATTENTION,
    OP_SYMP_GRADIENT,
    OP_SYMP_LINEAR,
    OP_VP_ATTENTION,
    OP_WIDTH,
    SOFTMAXES,
    UPPER,
    _rollout_rows,
)

__all__ = ["AVAILABLE", "CompiledModel", "pack", "compile_kernels", "Packer", "Unsupported", "register_packer",
           "ACTIVATIONS", "SOFTMAXES", "DENSE", "LOWER", "UPPER", "OP_WIDTH",
           "packer_for", "pack_module", "OP_RESIDUAL", "OP_VP_ATTENTION", "OP_MH_ATTENTION",
           "OP_LP_LAYER", "OP_LP_COUPLING", "OP_SYMP_LINEAR", "OP_SYMP_ACTIVATION", "OP_SYMP_GRADIENT",
           "OP_SYMP_ATTENTION", "OP_FEATURES", "OP_DENSE", "OP_GRU", "OP_LRU", "OP_INCREMENT",
           "OP_POSITION_MIXING"]

# --------------------------------------------------------------------------------------------- packing


class CompiledModel:
    """A packed model (``pack``): its weights as ``params`` (float64) and its layers as ``ops`` (int64).

    Attributes
    ----------
    params : ndarray, float64 (n,)
    ops : ndarray, int64 (n_layers, OP_WIDTH)
    dim, seq_len, pred_window : int
    name : str
    """

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    name: str

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
        out = np.empty((w.shape[0], self.pred_window, self.dim))
        _rollout_rows(w, 1, self.pred_window, self.params, self.ops, out)
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


class Packer:
    """What a packer fills: ``params`` (float64 chunks) and ``ops`` (rows of ``OP_WIDTH`` int64).

    A packer ``fn(pk, module, dim)`` (``register_packer``) appends its module's weights with ``add`` /
    ``scalar`` (each returns the offset) and its op rows with ``op(kind, *fields)``; it raises
    ``Unsupported`` for what the kernel cannot compute (the model then runs in torch).
    """

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.size = 0
        self.ops: list[list[int]] = []
        self.n_features = 0  # the feature vector's length (``features``)

    def add(self, t) -> int:
        """Append a tensor's values (float64, row-major); return their offset."""
        a = np.ascontiguousarray(t.detach().to(device="cpu").double().numpy()).ravel()
        off = self.size
        self.chunks.append(a)
        self.size += a.size
        return off

    def op(self, *fields: int) -> None:
        self.ops.append(list(fields) + [0] * (OP_WIDTH - len(fields)))

    def scalar(self, v: float) -> int:
        """Append one float; return its offset."""
        off = self.size
        self.chunks.append(np.array([float(v)]))
        self.size += 1
        return off

    def features(self, n: int) -> int:
        """Reserve ``n`` floats of the feature vector the feature ops (``OP_FEATURES`` …) work on; their offset."""
        off = self.n_features
        self.n_features += int(n)
        return off


class Unsupported(Exception):
    """Raised by a packer for a module (or setting) the kernel does not compute: ``pack`` returns None."""


# class -> (packer, whether subclasses use it too); the shipped ones are added on first use (_shipped)
_PACKERS: dict[type, tuple[PackerProtocol, bool]] = {}
_SHIPPED = False


def register_packer(cls: type, fn: PackerProtocol | None = None, *, subclasses: bool = False) -> Any:
    """Pack modules of class ``cls`` with ``fn(pk, module, dim)`` (a [`Packer`][vpintegrator.rollout.numba_model.Packer],
    the module, the model's state dimension). Also a decorator: ``@register_packer(MyLayer)``.

    ``cls`` is a layer (its ops), a container or a whole model (a model class's packer replaces the walk
    over its ``window_chain()``). Only modules of exactly ``cls`` use it unless ``subclasses`` (a subclass
    may change the formula). The last registration for a class wins. Returns ``fn``.
    """
    if not isinstance(cls, type):
        raise VPIntegratorError(f"register_packer: cls must be a class (a layer, container or model class, e.g. "
                                f"register_packer(MyLayer, fn)); got {type(cls).__name__} {cls!r:.60}", key="cls")
    if fn is None:
        return lambda f: register_packer(cls, f, subclasses=subclasses)
    if not callable(fn):
        raise VPIntegratorError(f"register_packer({cls.__name__}, fn): fn must be callable as fn(pk, module, dim); "
                                f"got {type(fn).__name__} {fn!r:.60}", key="fn")
    _PACKERS[cls] = (fn, bool(subclasses))
    return fn


def packer_for(module: Any) -> PackerProtocol | None:
    """The registered packer of ``module``'s class (exact, else the nearest base registered with
    ``subclasses=True``), or None."""
    _shipped()
    entry = _PACKERS.get(type(module))
    if entry is not None:
        return entry[0]
    for base in type(module).__mro__[1:]:
        entry = _PACKERS.get(base)
        if entry is not None and entry[1]:
            return entry[0]
    return None


def pack_module(pk: Packer, m: Any, dim: int) -> None:
    """Append the ops of module ``m``: its registered packer; else, for a container (``nn.Sequential``, or a
    module with ``window_chain()``), its parts in order; anything else is ``Unsupported``."""
    from torch import nn

    fn = packer_for(m)
    if fn is not None:
        fn(pk, m, dim)
        return
    if isinstance(m, nn.Sequential):
        parts = list(m)
    elif callable(getattr(m, "window_chain", None)):
        parts = list(m.window_chain())
    else:
        raise Unsupported(type(m).__name__)
    for child in parts:
        pack_module(pk, child, dim)


def _chain(pk: Packer, model: Any, dim: int) -> None:
    """A model as the composition of its ``window_chain()``, every part packed by ``pack_module``."""
    for m in model.window_chain():
        pack_module(pk, m, dim)


def _residual(pk: Packer, m: Any, dim: int) -> None:
    """``OP_RESIDUAL`` of a triangular layer (VPFF/VPT) or a ResNet layer (ST)."""
    from ..nn.feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer

    if m.activation not in ACTIVATIONS:
        raise Unsupported(f"activation {m.activation!r}")
    if isinstance(m, VolumePreservingLowerLayer):
        kind, W = LOWER, m.matrix()
    elif isinstance(m, VolumePreservingUpperLayer):
        kind, W = UPPER, m.matrix()
    elif isinstance(m, ResNetLayer):
        kind, W = DENSE, m.weight
    else:
        raise Unsupported(type(m).__name__)
    w_off = pk.add(W)
    b_off = -1 if m.bias is None else pk.add(m.bias)
    pk.op(OP_RESIDUAL, kind, w_off, b_off, ACTIVATIONS[m.activation])
    _same_dim(m, dim)


def _same_dim(m: Any, dim: int) -> None:
    if getattr(m, "dim", dim) != dim:
        raise Unsupported("layer dim differs from the model's")


def _vp_attention(pk: Packer, m: Any, dim: int) -> None:
    pk.op(OP_VP_ATTENTION, pk.add(m.weight_matrix()), int(bool(m.skew_sym)))
    _same_dim(m, dim)


def _mh_attention(pk: Packer, m: Any, dim: int) -> None:
    import torch

    if getattr(m, "softmax", "vector") != "vector":  # the kernel normalises per query only
        raise Unsupported(f"attention softmax {m.softmax!r}")
    if m.form == "gml":
        P = torch.cat([p.weight for g in (m.query, m.key, m.value) for p in g], dim=1)  # (dim, 3 dim)
        pk.op(OP_MH_ATTENTION, 0, m.n_heads, pk.add(P.mT), -1, -1, -1, int(m.add_connection))
    elif m.form == "standard":
        w_off, b_off = pk.add(m.in_proj_weight), pk.add(m.in_proj_bias)
        o_off, ob_off = pk.add(m.out_proj.weight), pk.add(m.out_proj.bias)
        pk.op(OP_MH_ATTENTION, 1, m.n_heads, w_off, b_off, o_off, ob_off, int(m.add_connection))
    else:
        raise Unsupported(f"attention form {m.form!r}")
    _same_dim(m, dim)


def _vp_model(pk: Packer, model: Any, dim: int) -> None:
    """A VPFF or VPT: its chain, (``symmetric``) its palindrome (``_vp_schedule``), or (``positional = "mixing"``)
    each unit's shear across positions (``OP_POSITION_MIXING``, read by the configuration: the shear's class is
    the VPT's own) and then its parts."""
    config = getattr(model, "config", {})
    if bool(config.get("symmetric")):
        _vp_schedule(pk, model, dim)
    elif config.get("positional") == "mixing":  # vpt_mix: each unit's first part is its shear across positions
        for unit in model.window_chain():
            mixing, *rest = unit.window_chain()
            pk.op(OP_POSITION_MIXING, pk.add(mixing.matrix()))  # its (T, T, dim, dim) blocks, dense
            _same_dim(mixing, dim)
            for part in rest:
                pack_module(pk, part, dim)
    else:
        _chain(pk, model, dim)
    _same_dim(model, dim)


def _st_model(pk: Packer, model: Any, dim: int) -> None:
    """The standard transformer: its chain (a ``symmetric`` config has no packed form)."""
    if bool(getattr(model, "config", {}).get("symmetric")):
        raise Unsupported("symmetric standard transformer")
    _chain(pk, model, dim)
    _same_dim(model, dim)


def _vp_schedule(pk: Packer, model, dim: int) -> None:
    """The schedule of a symmetric VPFF/VPT (``SymmetricComposition._schedule``: the palindrome of
    half-time members, the adjoint half made of the layers' explicit inverses), one op per step with its flow
    time in ``params``; each layer's weights are stored once."""
    from ..nn.attention import VolumePreservingAttention
    from ..nn.feedforward import VolumePreservingLowerLayer, VolumePreservingUpperLayer

    stored: dict[int, tuple[int, int]] = {}
    for layer, t, inverted in model._schedule(1.0):
        kind = type(layer)
        if getattr(layer, "dim", None) != dim:
            raise Unsupported("layer dim differs from the model's")
        if kind in (VolumePreservingLowerLayer, VolumePreservingUpperLayer):
            if layer.activation not in ACTIVATIONS:
                raise Unsupported(f"activation {layer.activation!r}")
            if id(layer) not in stored:
                stored[id(layer)] = (pk.add(layer.matrix()), -1 if layer.bias is None else pk.add(layer.bias))
            w_off, b_off = stored[id(layer)]
            tri = LOWER if kind is VolumePreservingLowerLayer else UPPER
            pk.op(OP_RESIDUAL, tri, w_off, b_off, ACTIVATIONS[layer.activation], 2 if inverted else 1, pk.scalar(t))
        elif kind is VolumePreservingAttention:
            if inverted and not layer.skew_sym:  # only the skew layer's inverse is the layer at −τ
                raise Unsupported("inverse of the arbitrary-weighting attention")
            if id(layer) not in stored:
                stored[id(layer)] = (pk.add(layer.weight_matrix()), -1)
            a_off = stored[id(layer)][0]
            pk.op(OP_VP_ATTENTION, a_off, int(bool(layer.skew_sym)), 1, pk.scalar(-t if inverted else t))
        else:
            raise Unsupported(kind.__name__)


def _symplectic(pk: Packer, m, dim: int) -> None:
    """One SympNet layer or symplectic attention layer as its shear op (``vpintegrator.nn.sympnet``,
    ``vpintegrator.nn.symplectic_attention``); registered for exactly these classes."""
    from ..nn import symplectic_attention as SA, sympnet as S

    if getattr(m, "dim", None) != dim:
        raise Unsupported("layer dim differs from the model's")
    kind = type(m)  # exact classes: a subclass may change the formula
    q_side = int(kind in (S.LinearLayerQ, S.ActivationLayerQ, S.GradientLayerQ, SA.SymplecticAttentionQ))
    if kind is S.BiasLayer:
        pk.op(OP_SYMP_LINEAR, 0, -1, pk.add(m.bias))
    elif kind in (S.LinearLayerQ, S.LinearLayerP):
        s_off = pk.add(m.matrix())
        pk.op(OP_SYMP_LINEAR, q_side, s_off, -1 if m.bias is None else pk.add(m.bias))
    elif kind in (S.ActivationLayerQ, S.ActivationLayerP):
        if m.activation not in ACTIVATIONS:
            raise Unsupported(f"activation {m.activation!r}")
        pk.op(OP_SYMP_ACTIVATION, q_side, pk.add(m.scale), ACTIVATIONS[m.activation])
    elif kind in (S.GradientLayerQ, S.GradientLayerP):
        if m.activation not in ACTIVATIONS:
            raise Unsupported(f"activation {m.activation!r}")
        k_off, b_off, a_off = pk.add(m.weight), pk.add(m.bias), pk.add(m.scale)
        pk.op(OP_SYMP_GRADIENT, q_side, k_off, b_off, a_off, int(m.h), ACTIVATIONS[m.activation])
    elif kind in (SA.SymplecticAttentionQ, SA.SymplecticAttentionP):
        if m.activation not in SOFTMAXES:
            raise Unsupported(f"attention activation {m.activation!r}")
        pk.op(OP_SYMP_ATTENTION, q_side, pk.add(m.weight_matrix()), int(bool(m.symmetric)), SOFTMAXES[m.activation])
    else:
        raise Unsupported(type(m).__name__)


def _symplectic_model(pk: Packer, model: Any, dim: int) -> None:
    """A SympNet or symplectic transformer: its chain of shears, nothing else (the model's ``symmetric``
    is its attention matrix A, not a palindrome)."""
    for m in model.window_chain():
        _symplectic(pk, m, dim)


def _lie_poisson(pk: Packer, model, dim: int) -> None:
    """The schedule of a Lie–Poisson network (``SymmetricComposition._schedule``: plain or the palindrome),
    one op per step. Each layer's unit axis and ψ are stored once (a palindrome applies a layer twice); the
    step's flow time τ is a float in ``params`` (an inverse step at time t is the flow at −t)."""
    from ..nn.lie_poisson import LiePoissonCoupling, LiePoissonLayer, unit_axis

    if dim != 3:
        raise Unsupported("Lie–Poisson network of dim other than 3")
    stored: dict[int, tuple[int, int, int]] = {}
    for layer, t, inverted in model._schedule(1.0):
        if not isinstance(layer, (LiePoissonLayer, LiePoissonCoupling)):
            raise Unsupported(type(layer).__name__)
        if id(layer) not in stored:
            psi = layer.psi
            k_off = pk.add(unit_axis(layer.axis.double()))
            p_off = pk.add(psi.b)  # ψ as b, c, w (width each), d
            for part in (psi.c, psi.w, psi.d):
                pk.add(part)
            a_off = pk.add(layer.alpha) if isinstance(layer, LiePoissonCoupling) else -1
            stored[id(layer)] = (k_off, p_off, a_off)
        k_off, p_off, a_off = stored[id(layer)]
        tau_off = pk.scalar(-t if inverted else t)
        code = OP_LP_COUPLING if a_off >= 0 else OP_LP_LAYER
        pk.op(code, k_off, p_off, int(layer.psi.width), tau_off, a_off)


def _dense(pk: Packer, layer: Any, src: int, act: int, dst: int | None = None) -> int:
    """``OP_DENSE`` of an ``nn.Linear`` reading the features at ``src``; writes to new features (returned)
    or adds into ``dst``."""
    n_out, n_in = layer.weight.shape
    w_off = pk.add(layer.weight)
    b_off = -1 if layer.bias is None else pk.add(layer.bias)
    if dst is None:
        dst = pk.features(n_out)
    else:
        act += ADD
    pk.op(OP_DENSE, src, dst, int(n_in), int(n_out), w_off, b_off, act)
    return dst


def _window_model(pk: Packer, model: Any, dim: int) -> None:
    """A window model of one step (``pred_window = 1``: ``gru``, ``lru``, ``delay_mlp``) as feature ops: the
    window into the feature vector, the network (GRU layers, LRU blocks or the delay vector's MLP), the
    readout, and the increment (``vpintegrator.models.recurrent``, ``vpintegrator.models.delay``)."""
    import torch

    from ..models import DelayMLP, GRUWindow, LRUWindow

    act_name = str(model.config.get("activation", "tanh"))
    if act_name not in ACTIVATIONS or model.increment not in ("first", "second"):
        raise Unsupported(f"activation {act_name!r}, increment {model.increment!r}")
    act, T = ACTIVATIONS[act_name], model.seq_len
    x_off = pk.features(T * dim)
    pk.op(OP_FEATURES, 0, x_off)  # field 1: the vector's length, filled in by pack
    if type(model) is GRUWindow:
        src, n_in = x_off, dim
        grus: Any = model.grus  # (a ModuleList: its items are typed Module | Tensor)
        for gru in grus:
            w = int(gru.width)
            p_off = pk.add(gru.input.weight)
            for part in (gru.input.bias, gru.hidden.weight, gru.hidden.bias):
                pk.add(part)
            dst = pk.features(T * w)
            pk.op(OP_GRU, src, dst, n_in, w, p_off, pk.features(6 * w))
            src, n_in = dst, w
        feat = src + (T - 1) * n_in
        hidden, out = list(model.readout.hidden), model.readout.out
    elif type(model) is LRUWindow:
        width = int(model.encoder.out_features)
        u_off = pk.features(T * width)
        e_w, e_b = pk.add(model.encoder.weight), pk.add(model.encoder.bias)
        for t in range(T):
            pk.op(OP_DENSE, x_off + t * dim, u_off + t * width, dim, width, e_w, e_b, 0)
        lrus: Any = model.lrus
        for i, (lru, mix) in enumerate(zip(lrus, model.mix)):
            last, N = i == len(model.lrus) - 1, int(lru.state)
            k_re, k_im = lru._powers(torch.arange(T, dtype=torch.float64))  # γ λ^j, j = 0 … T − 1: (T, N)
            p_off = pk.add(k_re)
            for part in (k_im, lru.B_re, lru.B_im, lru.C_re, lru.C_im, lru.D):
                pk.add(part)
            n_y = 1 if last else T
            y_off = pk.features(n_y * width + 2 * T * N + 2 * N)
            pk.op(OP_LRU, u_off, y_off, width, N, p_off, int(last), act)
            m_w, m_b = pk.add(mix.weight), pk.add(mix.bias)
            for j in range(n_y):  # u_t += W σ(y_t) + b (the last block: the last position only)
                t = T - 1 if last else j
                pk.op(OP_DENSE, y_off + j * width, u_off + t * width, width, width, m_w, m_b, ADD)
        feat = u_off + (T - 1) * width
        hidden, out = list(model.readout.hidden), model.readout.out
    elif type(model) is DelayMLP:
        feat, hidden, out = x_off, list(model.hidden), model.out
    else:
        raise Unsupported(type(model).__name__)
    for layer in hidden:
        feat = _dense(pk, layer, feat, act)
    pk.op(OP_INCREMENT, _dense(pk, out, feat, ACTIVATIONS["identity"]), int(model.increment == "second"))
    _same_dim(model, dim)


def _delay_vpff(pk: Packer, model: Any, dim: int) -> None:
    """``delay_vpff`` (``vpintegrator.models.delay.DelayVolumeNet``): its VPFF on the delay vector (dimension
    T·dim) as in-place triangular ``OP_DENSE`` ops on the window's features, then the features as the next window."""
    from ..nn.feedforward import VolumePreservingLowerLayer, VolumePreservingUpperLayer

    net, T = model.net, model.seq_len
    n = T * dim
    if net.symmetric or net.dim != n:
        raise Unsupported("symmetric delay_vpff")
    x_off = pk.features(n)
    pk.op(OP_FEATURES, 0, x_off)
    for layer in net.window_chain():
        kind = type(layer)
        if kind not in (VolumePreservingLowerLayer, VolumePreservingUpperLayer) or layer.activation not in ACTIVATIONS:
            raise Unsupported(f"{kind.__name__} in delay_vpff")
        tri = LOWER if kind is VolumePreservingLowerLayer else UPPER
        w_off = pk.add(layer.matrix())
        b_off = -1 if layer.bias is None else pk.add(layer.bias)
        pk.op(OP_DENSE, x_off, x_off, n, n, w_off, b_off, ACTIVATIONS[layer.activation] + ADD + 8 * tri)
    pk.op(OP_INCREMENT, x_off, 2)
    _same_dim(model, dim)


def _shipped() -> None:
    """Register the packers of the package's layers and model families (once, on first use: it imports
    torch). A new family made of these layers needs none (its ``window_chain()`` is walked)."""
    global _SHIPPED
    if _SHIPPED:
        return
    _SHIPPED = True
    from ..models import (
        DelayMLP,
        DelayVolumeNet,
        GRUWindow,
        GSympNet,
        LRUWindow,
        LASympNet,
        LiePoissonNet,
        LiePoissonTransformer,
        StandardTransformerIntegrator,
        SymplecticTransformer,
        VolumePreservingFeedForward,
        VolumePreservingTransformer,
    )
    from ..nn.attention import MultiHeadAttention, VolumePreservingAttention
    from ..nn.feedforward import ResNetLayer, VolumePreservingLowerLayer, VolumePreservingUpperLayer
    from ..nn import symplectic_attention as SA, sympnet as S

    shipped: list[tuple[type, PackerProtocol, bool]] = [
        (VolumePreservingLowerLayer, _residual, True),
        (VolumePreservingUpperLayer, _residual, True),
        (ResNetLayer, _residual, True),
        (VolumePreservingAttention, _vp_attention, True),
        (MultiHeadAttention, _mh_attention, True),
        *((cls, _symplectic, False) for cls in (S.BiasLayer, S.LinearLayerQ, S.LinearLayerP, S.ActivationLayerQ,
                                                S.ActivationLayerP, S.GradientLayerQ, S.GradientLayerP,
                                                SA.SymplecticAttentionQ, SA.SymplecticAttentionP)),
        (VolumePreservingFeedForward, _vp_model, False),
        (VolumePreservingTransformer, _vp_model, False),
        (StandardTransformerIntegrator, _st_model, False),
        (LASympNet, _symplectic_model, False),
        (GSympNet, _symplectic_model, False),
        (SymplecticTransformer, _symplectic_model, False),
        (LiePoissonNet, _lie_poisson, False),
        (LiePoissonTransformer, _lie_poisson, False),
        (GRUWindow, _window_model, False),
        (LRUWindow, _window_model, False),
        (DelayMLP, _window_model, False),
        (DelayVolumeNet, _delay_vpff, False),
    ]
    for cls, fn, subclasses in shipped:
        _PACKERS.setdefault(cls, (fn, subclasses))  # a user's registration made earlier wins


def pack(model) -> CompiledModel | None:
    """The model's weights and layers for the compiled kernel, or None where it does not apply.

    Parameters
    ----------
    model : torch.nn.Module
        A model with ``dim``, ``seq_len`` and ``pred_window``: the shipped families
        ([`VolumePreservingFeedForward`][vpintegrator.models.VolumePreservingFeedForward],
        [`VolumePreservingTransformer`][vpintegrator.models.VolumePreservingTransformer] (plain or symmetric),
        [`StandardTransformerIntegrator`][vpintegrator.models.StandardTransformerIntegrator], [`LiePoissonNet`][vpintegrator.models.LiePoissonNet]
        or [`LiePoissonTransformer`][vpintegrator.models.LiePoissonTransformer] (plain or symmetric),
        [`LASympNet`][vpintegrator.models.LASympNet], [`GSympNet`][vpintegrator.models.GSympNet] or
        [`SymplecticTransformer`][vpintegrator.models.SymplecticTransformer], the window models
        [`GRUWindow`][vpintegrator.models.GRUWindow], [`LRUWindow`][vpintegrator.models.LRUWindow],
        [`DelayMLP`][vpintegrator.models.DelayMLP], [`DelayVolumeNet`][vpintegrator.models.DelayVolumeNet]; any
        dtype: the weights are read
        as float64), any class with a packer (``register_packer``), or any model whose ``window_chain()``
        consists of modules with packers (a user's model made of the package's layers).

    Returns
    -------
    CompiledModel or None
        None without numba, for a model without a packer or ``window_chain()``, unknown activations,
        softmaxes or layer kinds (the ST's up/downscaling layers of ``transformer_dim ≠ dim``, the ST's
        matrix-softmax attention, a layer replaced by another module, a subclass of a symplectic layer or of a
        window model, a symmetric ``delay_vpff``), or a pred_window other than seq_len (except 1 for the window
        models ``gru``, ``lru``, ``delay_mlp``): the model then runs in torch, as its callers check the kernel
        against it anyway ([`compiled_model`][vpintegrator.rollout.steps.compiled_model]). Nothing is
        compiled here (the kernel compiles, or loads from numba's cache, on the first call;
        ``compile_kernels`` does it ahead).
    """
    if not AVAILABLE:
        return None
    import torch

    try:
        dim, seq, pred = int(model.dim), int(model.seq_len), int(model.pred_window)
    except (AttributeError, TypeError, ValueError):
        return None
    if pred not in (seq, 1):
        return None
    fn = packer_for(model)
    if fn is None and not callable(getattr(model, "window_chain", None)):
        return None
    pk = Packer()
    try:
        with torch.no_grad():
            (fn or _chain)(pk, model, dim)
    except Unsupported:
        return None
    ops = np.array(pk.ops, dtype=np.int64).reshape(-1, OP_WIDTH)
    if pred != seq and not (len(ops) and ops[-1, 0] == OP_INCREMENT):  # one step: only the window models
        return None
    ops[ops[:, 0] == OP_FEATURES, 1] = pk.n_features
    params = np.concatenate(pk.chunks) if pk.chunks else np.zeros(0)
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
