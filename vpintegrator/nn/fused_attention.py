"""The skew volume-preserving attention (seq = 3) and triangular layers fused into one autograd node.

``fused_chain`` applies a chain of layers, each a skew [`VolumePreservingAttention`][vpintegrator.nn.VolumePreservingAttention]
or a tanh/identity triangular layer (h ↦ h + σ(L h + b)), as **one** ``torch.autograd.Function`` with a
hand-written backward. It computes in the (dim, seq, batch) planes layout; its input and output are planes or
(batch, seq, dim) rows (the layout swaps then happen inside the node). The models run whole stacks through it
(the paper VPT: 3 attentions and 30 triangular layers, one node); a single layer uses it too. The forward is
bitwise the layers' unfused forward (the same elementwise operations on the same operands, the same matrix
products, reductions over length-3 axes in the same order); the gradients agree with autograd's to rounding.
The backward is not itself differentiable (``once_differentiable``), and ``torch.func`` transforms (vmap,
jacrev, grad) take the layers' unfused autograd path (``fused_spec`` returns ``None`` under them); traced by
``torch.compile`` the models run the component form of ``vpintegrator.nn.componentwise`` instead, which
inductor fuses (measured faster than compiling around this node or the unfused path).

Notation: in the planes layout one sample's window is Z ∈ ℝ^{dim×3} with columns z_j (the seeds' Z ↦ Z Λ).

**Attention forward** (A = −Aᵀ): V = A Z (one ``mm`` for the whole batch), C_ij = z_i · v_j = z_iᵀ A z_j,
w = (C₂₁, −C₂₀, C₁₀) (S = tril(C, −1) − tril(C, −1)ᵀ acts as S u = w × u),
R = (I − S)⁻¹ = (I + [w]× + w wᵀ) / (1 + |w|²), K = Λᵀ = 2R − I, out = Z Kᵀ (out_i = Σ_j K_ij z_j).

**Attention backward.** G = ∂ℒ/∂out. Since out = Z Kᵀ, ∂ℒ/∂K = M = Gᵀ Z (M_ij = g_i · z_j), and
dK = 2 dR = 2 R dS R, so the gradient with respect to all nine entries of S is

    E = 2 Rᵀ M Rᵀ = (G R)ᵀ (2 Z Rᵀ) = (G R)ᵀ (out + Z)        (2 Z Rᵀ = Z (K + I)ᵀ = out + Z).

S depends on the three lower entries of C (S_ij = C_ij, S_ji = −C_ij for i > j), so ∂ℒ/∂C_ij = Ŝ_ij for
i > j with Ŝ = E − Eᵀ. Through C = Zᵀ A Z with A skew (∂C_ij/∂z_i = v_j, ∂C_ij/∂z_j = −v_i):

    ∂ℒ/∂Z = G K + V Ŝᵀ = 2 G R − G + Aᵀ Y,     ∂ℒ/∂a_pq = Σ_batch (Y Zᵀ)_pq  (p > q),     Y = Z Ŝ,

a_pq the free entry (A_pq = a_pq, A_qp = −a_pq) of the skew weight (V Ŝᵀ = −A Z Ŝ = Aᵀ Y as Ŝ and A are skew).

**Triangular layers** h ↦ h + σ(y), y = L h + b: g ↦ g + Lᵀ ḡ with ḡ = σ'(y) ⊙ g; ∂ℒ/∂L = Σ_batch ḡ hᵀ,
∂ℒ/∂b = Σ_batch ḡ. For tanh ḡ = (1 − tanh²(y)) ⊙ g (``tanh_backward`` from the saved tanh) and g + Lᵀ ḡ is
one in-place ``addmm_``; for identity ḡ = g and g ↦ (I + L)ᵀ g is one ``mm``.

**All parameter gradients from one** ``bmm``: the forward keeps every layer's input (Z or h) in a buffer
H (n, dim + 1, N) whose last row is ones, the backward writes every layer's ḡ (attention: Y = Z Ŝ) into
G (n, dim, N), and G Hᵀ (n, dim, dim + 1) holds ∂ℒ/∂L (attention: Σ Y Zᵀ) in its first dim columns and
∂ℒ/∂b in the last one; one ``take`` reads the free entries.

Layers take part through ``_fused_spec()`` (``ATTENTION``, ``(tanh, has_bias)`` for a triangular layer, or
``None`` when the layer cannot be fused), ``_rows``/``_cols`` (where the free entries of ``weight`` sit in its
dim×dim matrix) and, for the attention, the buffers ``_c_*`` of ``seq3_constants``. The owner of a chain
registers its index buffers with ``register_fused_buffers``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import torch

__all__ = ["ATTENTION", "fused_spec", "fused_chain", "register_fused_buffers", "seq3_constants"]

#: the ``_fused_spec()`` of a fusable attention layer (a triangular layer's is ``(tanh, has_bias)``)
ATTENTION = "attention"
_DTYPES = (torch.float32, torch.float64)
_BUFFERS = ("_fused_mat_base", "_fused_mat_index", "_fused_mat_sign", "_fused_grad_index")
_X_ARG = 11  # position of x among the arguments of _FusedChain.forward (after ctx)
_TANH_BACKWARD = torch.ops.aten.tanh_backward.grad_input  # σ' ⊙ g for σ = tanh, from σ's output, into a buffer


def seq3_constants() -> dict[str, torch.Tensor]:
    """Constant tensors of the seq-3 attention (registered as buffers of each skew attention layer).

    ``index`` (36,), ``coef`` and ``shift`` (36, 1): ``Cᵀ[index] · coef + shift`` (Cᵀ's first two rows flattened,
    (6, batch)) gives, exactly (coefficients ±1 and 0, shifts 1 and 0), 12 rows of I + [w]× (row-major, then
    three zeros), 12 rows (w_i for the entries (i, j) of w wᵀ, then w) and 12 rows (w_j, then w): the product
    of the last two blocks is w wᵀ followed by the squares w_k². ``neg_eye`` (3, 3, 1): −I.
    """
    # Cᵀ[1, 2] = C₂₁ = w₀, Cᵀ[0, 2] = C₂₀ = −w₁, Cᵀ[0, 1] = C₁₀ = w₂: (position in Cᵀ[:2].flatten(), sign)
    w = [(5, 1.0), (2, -1.0), (1, 1.0)]
    neg = [(k, -c) for k, c in w]
    zero = (0, 0.0)
    cross = [zero, neg[2], w[1], w[2], zero, neg[0], neg[1], w[0], zero, zero, zero, zero]
    left = [w[i] for i in range(3) for _ in range(3)] + w  # w_i of w_i w_j, then w_k
    right = [w[j] for _ in range(3) for j in range(3)] + w  # w_j, then w_k
    entries = cross + left + right
    shift = torch.zeros(36, 1)
    shift[[0, 4, 8]] = 1.0
    return {
        "index": torch.tensor([k for k, _ in entries]),
        "coef": torch.tensor([c for _, c in entries]).view(36, 1),
        "shift": shift,
        "neg_eye": -torch.eye(3).view(3, 3, 1),
    }


def fused_spec(layers: Sequence[Any], xp: torch.Tensor) -> tuple[Any, ...] | None:
    """The chain's spec (one ``_fused_spec()`` per layer), or ``None`` when ``fused_chain`` does not apply.

    It applies to float32/float64 input (rows or planes: seq is axis 1 of both), seq = 3 when the chain has an
    attention layer, and no ``torch.func`` transform active and no ``torch.compile`` tracing (these trace the
    layers' autograd path instead).
    """
    if not layers or xp.dtype not in _DTYPES:
        return None
    if torch._C._are_functorch_transforms_active() or torch.compiler.is_compiling():
        return None
    spec = tuple([m._fused_spec() for m in layers])  # a list: the layers asked in a row, not from a generator
    if None in spec or (ATTENTION in spec and xp.shape[1] != 3):
        return None
    return spec


def register_fused_buffers(owner: torch.nn.Module, layers: Sequence[Any]) -> None:
    """Register the index buffers of the chain ``layers`` on ``owner`` (not saved with the state).

    The node builds 2n stacked dim×dim matrices at once, ``_fused_mat_base.index_put(_fused_mat_index, values)``
    with ``values = cat(weights, attention weights, triangular weights) · _fused_mat_sign``: the n layers'
    matrices (L, or the skew A: +a_pq at (p, q), −a_pq at (q, p)), then I + L per triangular layer (the backward
    of a linear layer is one product with (I + L)ᵀ). ``_fused_mat_base`` holds the zeros and the ones of the
    identities, ``_fused_mat_sign`` is ``None`` without attention. ``_fused_grad_index``: where each parameter's
    gradient sits in the flattened (n, dim, dim + 1) product G Hᵀ (weights, then biases, in layer order).
    """
    n, d = len(layers), layers[0].dim
    mat, neg, plus_eye, grad, bias = [], [], [], [], []
    base = torch.zeros(2 * n, d, d)
    for i, m in enumerate(layers):
        rows, cols = m._rows, m._cols
        mat.append(i * d * d + rows * d + cols)
        grad.append(i * d * (d + 1) + rows * (d + 1) + cols)
        if getattr(m, "skew_sym", False):
            neg.append(i * d * d + cols * d + rows)
        else:
            plus_eye.append((n + i) * d * d + rows * d + cols)
            base[n + i].fill_diagonal_(1.0)
            if m.bias is not None:
                bias.append(i * d * (d + 1) + torch.arange(d) * (d + 1) + d)
    sizes = [sum(t.numel() for t in part) for part in (mat, neg, plus_eye)]
    sign = torch.cat([torch.ones(sizes[0]), -torch.ones(sizes[1]), torch.ones(sizes[2])]) if neg else None
    owner.register_buffer("_fused_mat_base", base.view(-1), persistent=False)
    owner.register_buffer("_fused_mat_index", torch.cat(mat + neg + plus_eye), persistent=False)
    owner.register_buffer("_fused_mat_sign", sign, persistent=False)
    owner.register_buffer("_fused_grad_index", torch.cat(grad + bias), persistent=False)


def fused_chain(owner: torch.nn.Module, layers: Sequence[Any], spec: tuple[Any, ...], x: torch.Tensor,
                rows: bool = False) -> torch.Tensor:
    """Apply ``layers`` (spec from ``fused_spec``) as one autograd node.

    x: planes (dim, seq, batch), or rows (batch, seq, dim) with ``rows=True``; the output has the layout of x.
    ``owner`` holds the buffers of ``register_fused_buffers`` for exactly these layers. Without gradients
    (``no_grad``, or nothing requiring grad) nothing is kept for a backward pass.
    """
    weights = [m.weight for m in layers]
    biases = [m.bias for m, s in zip(layers, spec) if s != ATTENTION and s[1]]
    consts = (None,) * 4
    if ATTENTION in spec:
        att = layers[spec.index(ATTENTION)]
        consts = (att._c_index, att._c_coef, att._c_shift, att._c_neg_eye)
    save = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in weights + biases))
    index = [getattr(owner, name) for name in _BUFFERS]
    # every tensor a top-level argument (autograd and graph tracers record the node's inputs from these)
    return _FusedChain.apply(spec, rows, save, *index, *consts, x, *weights, *biases)


class _Plan(NamedTuple):
    kinds: str  # per layer: "a" attention, "t" tanh, "l" linear (identity activation)
    attention: tuple[int, ...]
    triangular: tuple[int, ...]
    n_tanh: int
    tanh_slot: tuple[int, ...]  # per layer: its slot in the buffer of σ(y) (tanh layers)
    target: tuple[int, ...]  # slot of G holding the gradient at layer i's input (-1: a tensor of its own)


@functools.lru_cache(maxsize=None)
def _plan(spec: tuple) -> _Plan:
    """Static facts of a chain. The gradient at a linear layer's output is that layer's ḡ, so it is computed
    straight into the layer's slot of G; tanh layers accumulate g + Lᵀ ḡ in place, so the gradient at layer i's
    input lives in the slot of the first linear layer below i past any tanh layers."""
    kinds = "".join("a" if s == ATTENTION else ("t" if s[0] else "l") for s in spec)
    target = []
    for i in range(len(spec)):
        m = i - 1
        while m >= 0 and kinds[m] == "t":
            m -= 1
        target.append(m if m >= 0 and kinds[m] == "l" else -1)
    tanh_slot = tuple(kinds[:i].count("t") for i in range(len(kinds)))
    return _Plan(kinds, tuple(i for i, k in enumerate(kinds) if k == "a"),
                 tuple(i for i, k in enumerate(kinds) if k != "a"), kinds.count("t"), tanh_slot, tuple(target))


def _attention_forward(h, A, consts, batch: int, dst):
    """Λᵀ Z for planes h (dim, 3·batch) and the skew A; returns (out, Z, R, out) with Z as (dim, 1, 3, batch) and
    R as (1, 3, 3, batch) (the last three are what the backward needs).

    Bitwise the unfused seq-3 path (``VolumePreservingAttention._forward_seq3_planes``): the same ``mm``
    call, C_ij as the same length-dim sums (``_correlations``), K = (I + [w]× + w wᵀ)·(2 / (1 + |w|²)) − I
    with 2 (t · r) = t · (2 r) (scaling by 2 is exact), and out_i = (K_i0 z_0 + K_i1 z_1) + K_i2 z_2 as a
    length-3 sum.
    """
    d = h.shape[0]
    index, coef, shift, neg_eye = consts
    v = torch.mm(A, h[:, : 2 * batch])  # (d, 2·batch): v_j = A z_j for j = 0, 1 (z_2 only enters as z_2 · v_j)
    z13 = h.view(d, 1, 3, batch)  # [k, 0, j] = z_j[k]
    ct = _correlations(h, v, z13, batch)  # (6, batch): ct[3i + j] = v_i · z_j = C_ji where read
    entries = torch.index_select(ct, 0, index).mul_(coef).add_(shift)  # (36, batch), see seq3_constants
    cross, left, right = entries.view(1, 12, 3, batch).split(4, dim=1)  # each (1, 4, 3, batch)
    t, squares = (cross + left * right).split((3, 1), dim=1)  # I + [w]× + w wᵀ (1, 3, 3, batch); w_k²
    r = torch.reciprocal(squares.sum(2) + 1)  # (1, 1, batch): 1 / (1 + |w|²)
    R = t * r  # (1, 3, 3, batch): (I − S)⁻¹
    K = torch.add(neg_eye, R, alpha=2)  # Λᵀ = 2R − I
    prod = K * z13  # (d, 3, 3, batch): [k, i, j] = K_ij z_j[k]
    if dst is None:
        out = prod.sum(2).view(d, -1)  # (d, 3·batch)
        return out, z13, R, out
    torch.sum(prod, 2, out=dst.view(d, 3, batch))
    return dst, z13, R, dst


def _correlations(h, v, z13, batch: int) -> torch.Tensor:
    """ct (6, batch) with ct[3i + j] = v_i · z_j = C_ji at the entries that are read (1, 2, 5: C₁₀, C₂₀, C₂₁).

    For dim ≤ 4 one product and one sum over dim (measured: a sum of ≤ 4 terms gives the same bits whatever
    the output's shape). Above, the order of a sum over dim depends on the output's shape (vectorised partial
    sums), so these are the unfused path's own: (z_2 ⊙ V).sum for (C₂₀, C₂₁), (z_1 ⊙ v_0).sum for C₁₀.
    """
    d = h.shape[0]
    if d <= 4:
        return (v.view(d, 2, 1, batch) * z13).sum(0).view(6, batch)
    h3, v3 = h.view(d, 3, batch), v.view(d, 2, batch)
    c20, c21 = (h3[:, 2:3] * v3).sum(dim=0)
    c10 = (h3[:, 1] * v3[:, 0]).sum(dim=0)
    return torch.stack((c10, c10, c20, c10, c10, c21))  # only rows 1, 2, 5 are read


def _attention_backward(g, z13, R, out, At, y_dst, dst, need_input: bool):
    """Write Y = Z Ŝ into y_dst (dim, 3·batch) and return ∂ℒ/∂Z = 2 G R − G + V Ŝᵀ (into dst when given).

    g: ∂ℒ/∂out (dim, 3·batch); z13, R: from the forward; out: the layer's output; At = Aᵀ = −A. Since Ŝ is
    skew, V Ŝᵀ = A Z Ŝᵀ = −A Y = Aᵀ Y: one ``addmm``.
    """
    d, batch = g.shape[0], R.shape[-1]
    gr = (g.view(d, 3, 1, batch) * R).sum(1, keepdim=True)  # (d, 1, 3, batch): (G R)_j = Σ_i g_i R_ij
    zhat = out.view(d, 1, 3, batch) + z13  # 2 Z Rᵀ
    E = (gr.transpose(1, 2) * zhat).sum(0, keepdim=True)  # (1, 3, 3, batch): E_ij = (G R)_i · ẑ_j
    st = E.transpose(1, 2) - E  # Ŝᵀ: st[i, j] = Ŝ_ji
    torch.sum(z13 * st, 2, out=y_dst.view(d, 3, batch))  # Y_j = (Z Ŝ)_j = Σ_m z_m Ŝ_mj
    if not need_input:
        return None
    minus_g = torch.addmm(g, At, y_dst, beta=-1)  # V Ŝᵀ − G
    if dst is None:
        return torch.add(minus_g, gr.view(d, -1), alpha=2)
    return torch.add(minus_g, gr.view(d, -1), alpha=2, out=dst)


class _FusedChain(torch.autograd.Function):
    """The chain as one node; see the module docstring for the maths of the backward."""

    @staticmethod
    def forward(ctx, layers, rows, save, base, mat_index, mat_sign, grad_index, *tensors):
        consts, x, params = tensors[:4], tensors[4], tensors[5:]
        plan = _plan(layers)
        n = len(layers)
        xp = x.permute(2, 1, 0) if rows else x  # (d, seq, batch), strided for rows
        d, seq, batch = xp.shape
        N = seq * batch
        weights, biases = params[:n], params[n:]
        values = torch.cat([*weights, *(weights[i] for i in plan.attention), *(weights[i] for i in plan.triangular)])
        if mat_sign is not None:
            values = values * mat_sign
        mats = base.index_put((mat_index,), values).view(2 * n, d, d)  # L or A per layer, then I + L
        Ls = mats.unbind(0)
        cols = torch.cat(biases).view(-1, d, 1).unbind(0) if biases else ()  # each (d, 1): bias[:, None]
        if save:
            hbuf = xp.new_empty(n, d + 1, N)  # every layer's input, and a row of ones (bias gradients)
            hbuf.select(1, d).fill_(1)
            hs = hbuf[:, :d].unbind(0)
            tanhs = xp.new_empty(plan.n_tanh, d, N).unbind(0) if plan.n_tanh else ()  # σ(y) of the tanh layers
            h = hs[0]
            h.view(d, seq, batch).copy_(xp)
        else:
            h = xp.contiguous().view(d, N)  # a copy for rows (contiguous: the unfused path's BLAS calls)
        attention, k = [], 0
        for i, s in enumerate(layers):
            dst = hs[i + 1] if save and i + 1 < n else None
            if s == ATTENTION:
                h, *kept = _attention_forward(h, Ls[i], consts, batch, dst)
                attention += kept
                continue
            tanh, has_bias = s
            if has_bias:
                y = torch.addmm(cols[k], Ls[i], h)  # L z + b
                k += 1
            else:
                y = torch.mm(Ls[i], h)
            if tanh:
                y = torch.tanh(y, out=tanhs[plan.tanh_slot[i]]) if save else torch.tanh(y)
            h = torch.add(h, y) if dst is None else torch.add(h, y, out=dst)
        out = h.view(d, seq, batch)
        if rows:
            out = out.permute(2, 1, 0).contiguous()
        if save:
            ctx.spec, ctx.rows, ctx.sizes = layers, rows, [p.numel() for p in params]
            ctx.save_for_backward(grad_index, mats, hbuf, *tanhs, *attention)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        grad_index, mats, hbuf, *saved = ctx.saved_tensors
        plan = _plan(ctx.spec)
        kinds, n = plan.kinds, len(plan.kinds)
        d, N = hbuf.shape[1] - 1, hbuf.shape[2]
        mT = mats.mT.unbind(0)  # Lᵀ (or Aᵀ) per layer, then (I + L)ᵀ
        tanhs, attention = saved[: plan.n_tanh], saved[plan.n_tanh :]
        gbuf = hbuf.new_empty(n, d, N)  # every layer's ḡ (attention: Y = Z Ŝ)
        gs = gbuf.unbind(0)
        need_x = ctx.needs_input_grad[_X_ARG]
        gp = grad.permute(2, 1, 0) if ctx.rows else grad  # (d, seq, batch)
        if kinds[-1] == "l":  # its ḡ is the incoming gradient
            g, owned = gs[-1], True
            g.view(gp.shape).copy_(gp)
        else:
            g, owned = gp.contiguous().view(d, N), False  # owned: g may be overwritten
        a = len(attention)
        for i in range(n - 1, -1, -1):
            need = i > 0 or need_x
            dst = gs[plan.target[i]] if plan.target[i] >= 0 else None
            if kinds[i] == "a":
                a -= 3
                z13, R, out = attention[a : a + 3]
                g = _attention_backward(g, z13, R, out, mT[i], gs[i], dst, need)
            elif kinds[i] == "l":  # g is gs[i]: g ↦ (I + L)ᵀ g
                if need:
                    g = torch.mm(mT[n + i], g) if dst is None else torch.mm(mT[n + i], g, out=dst)
            else:
                gy = _TANH_BACKWARD(g, tanhs[plan.tanh_slot[i]], grad_input=gs[i])  # ḡ = (1 − tanh²) ⊙ g
                if need and owned:  # g already sits where g + Lᵀ ḡ belongs
                    g.addmm_(mT[i], gy)
                elif need:
                    g = torch.addmm(g, mT[i], gy) if dst is None else torch.addmm(g, mT[i], gy, out=dst)
            owned = True
        grads = torch.take(torch.bmm(gbuf, hbuf.transpose(1, 2)), grad_index).split(ctx.sizes)
        gx = None
        if need_x:
            gx = g.view(gp.shape)
            if ctx.rows:
                gx = gx.permute(2, 1, 0).contiguous()
        return (*(None,) * _X_ARG, gx, *grads)
