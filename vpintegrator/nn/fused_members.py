"""The fused chain of ``vpintegrator.nn.fused_attention`` for K stacked members at once: one autograd node.

A seed ensemble (``vpintegrator.training.ensemble``) holds K models of one architecture as stacked parameters
(each (K, *shape)). ``torch.func.vmap`` over the model runs the layers' unfused autograd path (the fused node
is a plain ``autograd.Function`` with no batching rule), about 30 small operations per layer, each dispatched
through vmap: for 8 paper VPTs at batch 256 that step took as long as 6 single fused steps. ``members_chain``
is the same chain, the same algebra (the module docstring of ``fused_attention``), with a member axis in
front of every tensor: every ``mm`` a ``bmm`` over the members, every elementwise operation broadcast over
them, the parameter gradients of all members from one batched product ``G Hᵀ`` again. So the ensemble's
forward and backward dispatch the operations of one single run, whatever K.

The forward is each member's own forward bit for bit at dim ≤ 4 (the same products and the same length-3 and
length-dim sums; above, the attention's sums over dim are plain sums where the single chain keeps the unfused
path's order, so to rounding); the gradients equal autograd's of each member alone to rounding (the bias
gradients are sums over the batch here, a product with a row of ones there): tests/test_fused_members.py.
Measured (8 paper VPTs, batch 256, float32, one thread): the vmapped forward and backward 13.8 ms a step, this
node 4.1-4.5 ms, one model on the 8 members' 2048 windows 3.6 ms.

``members_layers`` says whether a template model can run this way and names its stacked parameters;
``members_chain`` runs it. Models that cannot (no fused chain, a symmetric composition, ``torch.func``
transforms or ``torch.compile`` tracing active, seq ≠ 3 with attention) keep the vmapped path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .fused_attention import _TANH_BACKWARD, ATTENTION, _plan, fused_spec

__all__ = ["MembersLayers", "members_layers", "members_chain"]

_X_ARG = 10  # position of x among the arguments of _MembersChain.forward (after ctx)


class MembersLayers(NamedTuple):
    """A template model's fused chain: its layers, and the names of their weights and biases in the model's
    ``named_parameters`` (the keys of the ensemble's stacked parameters), in the chain's order."""

    owner: torch.nn.Module
    layers: tuple[Any, ...]
    weights: tuple[str, ...]
    biases: tuple[str, ...]


def members_layers(template: torch.nn.Module) -> MembersLayers | None:
    """The fused chain of ``template`` (a model that registered ``fused_attention``'s buffers for its whole
    forward: the skew VPT without positional parts, the VPFF), or None when it has none."""
    if getattr(template, "_fused_mat_base", None) is None or getattr(template, "symmetric", False):
        return None
    flow = getattr(template, "_flow_layers", None)
    if flow is None:
        return None
    layers = tuple(flow())
    if not layers or any(getattr(m, "_fused_spec", lambda: None)() is None for m in layers):
        return None
    names = {id(m): name for name, m in template.named_modules()}
    weights = tuple(f"{names[id(m)]}.weight" for m in layers)
    biases = tuple(f"{names[id(m)]}.bias" for m in layers
                   if m._fused_spec() != ATTENTION and m._fused_spec()[1])
    return MembersLayers(template, layers, weights, biases)


def members_chain(chain: MembersLayers, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor | None:
    """Every member's model on its rows ``x`` (K, batch, seq, dim), from the stacked ``params`` (name ->
    (K, *shape)): (K, batch, seq, dim); None where the fused chain does not apply to ``x`` (``fused_spec``:
    dtype, seq, transforms or compilation active), for the caller's unfused path."""
    if x.dim() != 4:
        return None
    spec = fused_spec(chain.layers, x[0])
    if spec is None:
        return None
    owner = chain.owner
    weights = [params[k] for k in chain.weights]
    biases = [params[k] for k in chain.biases]
    consts: tuple[Any, ...] = (None,) * 4
    if ATTENTION in spec:
        att = chain.layers[spec.index(ATTENTION)]
        consts = (att._c_index, att._c_coef, att._c_shift, att._c_neg_eye)
    save = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in weights + biases))
    index = (owner._fused_mat_base, owner._fused_mat_index, owner._fused_mat_sign, owner._fused_grad_index)
    return _MembersChain.apply(spec, save, *index, *consts, x, *weights, *biases)


def _attention(h: torch.Tensor, A: torch.Tensor, consts, batch: int, dst: torch.Tensor | None):
    """Λᵀ Z of every member (``fused_attention._attention_forward`` with a member axis): planes h (K, dim,
    3·batch), A (K, dim, dim); returns (out, Z as (K, dim, 1, 3, batch), R as (K, 1, 3, 3, batch)); out is
    written into ``dst`` when given."""
    index, coef, shift, neg_eye = consts
    k, d, _ = h.shape
    v = torch.bmm(A, h[:, :, : 2 * batch])  # (K, d, 2·batch): v_j = A z_j, j = 0, 1
    z13 = h.view(k, d, 1, 3, batch)  # [m, c, 0, j] = z_j[c]
    ct = (v.view(k, d, 2, 1, batch) * z13).sum(1).view(k, 6, batch)  # ct[3i + j] = v_i · z_j
    entries = torch.index_select(ct, 1, index).mul_(coef).add_(shift)  # (K, 36, batch)
    cross, left, right = entries.view(k, 1, 12, 3, batch).split(4, dim=2)
    t, squares = (cross + left * right).split((3, 1), dim=2)  # I + [w]× + w wᵀ (K, 1, 3, 3, batch); w_k²
    r = torch.reciprocal(squares.sum(3, keepdim=True) + 1)  # (K, 1, 1, 1, batch)
    R = t * r  # (I − S)⁻¹
    K = torch.add(neg_eye, R, alpha=2)  # Λᵀ = 2R − I
    if dst is None:
        return (K * z13).sum(3).view(k, d, 3 * batch), z13, R  # out_i = Σ_j K_ij z_j
    torch.sum(K * z13, 3, out=dst.view(k, d, 3, batch))
    return dst, z13, R


class _MembersChain(torch.autograd.Function):
    """The chain of K members as one node (``fused_attention._FusedChain`` with a member axis). The buffers are
    laid out layer first, (n, K, dim, N), so that each layer's slice is contiguous and written in place."""

    @staticmethod
    def forward(ctx, layers, save, base, mat_index, mat_sign, grad_index, *tensors):
        consts, x, params = tensors[:4], tensors[4], tensors[5:]
        plan = _plan(layers)
        n = len(layers)
        k, batch, seq, d = x.shape
        N = seq * batch
        weights, biases = params[:n], params[n:]
        flat = [w.reshape(k, -1) for w in weights]
        values = torch.cat([*flat, *(flat[i] for i in plan.attention), *(flat[i] for i in plan.triangular)], 1)
        if mat_sign is not None:
            values = values * mat_sign
        mats = base.repeat(k, 1)
        mats[:, mat_index] = values  # per member: L or A per layer, then I + L
        # layer first, (2n, K, d, d): each layer's (K, d, d) contiguous, as bmm takes it without a copy
        mats = mats.view(k, 2 * n, d, d).transpose(0, 1).contiguous()
        cols = torch.cat(biases, 1).view(k, -1, d, 1).unbind(1) if biases else ()  # each (K, d, 1)
        if save:
            hbuf = x.new_empty(n, k, d, N)  # every layer's input
            hs = hbuf.unbind(0)
            tanhs = x.new_empty(plan.n_tanh, k, d, N).unbind(0) if plan.n_tanh else ()
            h = hs[0]
            h.view(k, d, seq, batch).copy_(x.permute(0, 3, 2, 1))
        else:
            h = x.permute(0, 3, 2, 1).reshape(k, d, N)  # planes (K, d, seq·batch)
        kept: list[torch.Tensor] = []
        j = 0
        for i, s in enumerate(layers):
            dst = hs[i + 1] if save and i + 1 < n else None
            if s == ATTENTION:
                h, z13, R = _attention(h, mats[i], consts, batch, dst)
                kept += [z13, R, h] if save else []
                continue
            tanh, has_bias = s
            if has_bias:
                y = torch.baddbmm(cols[j], mats[i], h)  # L z + b
                j += 1
            else:
                y = torch.bmm(mats[i], h)
            if tanh:
                y = torch.tanh(y, out=tanhs[plan.tanh_slot[i]]) if save else torch.tanh(y)
            h = torch.add(h, y) if dst is None else torch.add(h, y, out=dst)
        out = h.view(k, d, seq, batch).permute(0, 3, 2, 1).contiguous()
        if save:
            ctx.spec, ctx.shape, ctx.sizes = layers, (k, batch, seq, d), [p.shape for p in params]
            ctx.save_for_backward(grad_index, mats, hbuf, *tanhs, *kept)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        grad_index, mats, hbuf, *saved = ctx.saved_tensors
        plan = _plan(ctx.spec)
        kinds, n = plan.kinds, len(plan.kinds)
        k, batch, seq, d = ctx.shape
        N = seq * batch
        tanhs, kept = saved[: plan.n_tanh], saved[plan.n_tanh :]
        mT = mats.transpose(-1, -2)  # Lᵀ (or Aᵀ) per layer, then (I + L)ᵀ
        need_x = ctx.needs_input_grad[_X_ARG]
        gbuf = hbuf.new_empty(n, k, d, N)  # every layer's ḡ (attention: Y = Z Ŝ)
        gs = gbuf.unbind(0)
        gp = grad.permute(0, 3, 2, 1)  # (K, d, seq, batch)
        if kinds[-1] == "l":  # its ḡ is the incoming gradient
            g, owned = gs[-1], True
            g.view(gp.shape).copy_(gp)
        else:
            g, owned = gp.reshape(k, d, N), False  # owned: g may be overwritten
        a = len(kept)
        for i in range(n - 1, -1, -1):
            need = i > 0 or need_x
            dst = gs[plan.target[i]] if plan.target[i] >= 0 else None
            if kinds[i] == "a":
                a -= 3
                z13, R, out = kept[a : a + 3]
                gr = (g.view(k, d, 3, 1, batch) * R).sum(2, keepdim=True)  # (G R)_j: (K, d, 1, 3, batch)
                zhat = out.view(k, d, 1, 3, batch) + z13  # 2 Z Rᵀ
                E = (gr.transpose(2, 3) * zhat).sum(1, keepdim=True)  # E_ij = (G R)_i · ẑ_j
                st = E.transpose(2, 3) - E  # Ŝᵀ
                torch.sum(z13 * st, 3, out=gs[i].view(k, d, 3, batch))  # Y = Z Ŝ
                if need:  # 2 G R − G + Aᵀ Y
                    minus_g = torch.baddbmm(g, mT[i], gs[i], beta=-1)
                    g = (torch.add(minus_g, gr.view(k, d, N), alpha=2) if dst is None
                         else torch.add(minus_g, gr.view(k, d, N), alpha=2, out=dst))
            elif kinds[i] == "l":  # g is gs[i]: g ↦ (I + L)ᵀ g
                if need:
                    g = torch.bmm(mT[n + i], g) if dst is None else torch.bmm(mT[n + i], g, out=dst)
            else:
                gy = _TANH_BACKWARD(g, tanhs[plan.tanh_slot[i]], grad_input=gs[i])  # ḡ = (1 − tanh²) ⊙ g
                if need and owned:  # g already sits where g + Lᵀ ḡ belongs
                    g.baddbmm_(mT[i], gy)
                elif need:
                    g = (torch.baddbmm(g, mT[i], gy) if dst is None
                         else torch.baddbmm(g, mT[i], gy, out=dst))
            owned = True
        # ∂ℒ/∂L (attention: Σ Y Zᵀ) and ∂ℒ/∂b of every layer and member (n, K, d, d + 1), then member first
        full = torch.cat([torch.matmul(gbuf, hbuf.transpose(-1, -2)), gbuf.sum(-1, keepdim=True)], -1)
        flat = full.transpose(0, 1).reshape(k, -1)
        parts = flat.index_select(1, grad_index).split([s[1:].numel() for s in ctx.sizes], 1)
        grads = [p.reshape(s) for p, s in zip(parts, ctx.sizes)]
        gx = g.view(k, d, seq, batch).permute(0, 3, 2, 1).contiguous() if need_x else None
        return (*(None,) * _X_ARG, gx, *grads)
