"""Ablations of trained models: the same network with a part switched off.

[`without_attention`][vpintegrator.models.without_attention] answers "does the attention carry information?" for any transformer of the
registry: every attention layer becomes the identity map on the window, and the rest of the network keeps
its trained weights. Compare the ablated model's rollout error with the original's
([`vpintegrator.testing.attention_coupling`][vpintegrator.testing.attention_coupling] measures the same question on the Jacobian).

[`mean_attention`][vpintegrator.models.mean_attention] keeps the VPT's mixing along the window but removes its
dependence on the states: every attention's Λ(X) = Cayley(C(X)) becomes the constant Cayley(C̄), C̄ the mean
of its skew C(X) over given windows (still skew, so Λ̄ is orthogonal and the map still volume preserving).

For the Lie–Poisson transformer the identity is not the right control: its coupling rotates state i by
α_i ψ(s), which is a position-wise rotation (α_i ψ̄) plus the cross-state part (ψ(s) − ψ̄). Zeroing ψ removes
both. [`constant_coupling`][vpintegrator.models.constant_coupling] removes only the cross-state part: every coupling's ψ becomes the constant ψ̄
(its mean over given windows), so no state's map depends on another state any more.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..errors import VPIntegratorError
from ..nn.attention import MultiHeadAttention, VolumePreservingAttention
from ..nn.lie_poisson import LiePoissonCoupling
from ..nn.symplectic_attention import SymplecticAttention

__all__ = ["without_attention", "constant_coupling", "mean_attention", "attention_layers", "NoAttention",
           "MeanAttention"]


class NoAttention(nn.Identity):
    """The identity on the window, standing where a multi-head attention was (``without_attention``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


_KINDS = (VolumePreservingAttention, SymplecticAttention, MultiHeadAttention, LiePoissonCoupling)


def attention_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, layer) of every attention layer of ``model``, in module order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, _KINDS)]


def without_attention(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose every attention layer is the identity map on the window.

    - volume-preserving attention X ↦ Cayley(C(X))ᵀ X: A = 0, so C = 0 and Cayley(0) = I (both weightings);
    - symplectic attention (Q and P): A = 0, so the shear's increment is 0;
    - Lie–Poisson coupling: ψ = 0 (w = d = 0), so every state's rotation angle is 0;
    - multi-head attention (the standard transformer): replaced by ``NoAttention`` (the identity);
      zero projections would not do: the paper's ST has no residual connection, so its attention would
      output 0, not the window.

    The zeroed weights are frozen (``requires_grad=False``), so training the copy further trains the rest of
    the network without attention. The original model is not changed. A model without attention layers
    (VPFF, SympNets) is refused: there is nothing to ablate.

    Returns
    -------
    nn.Module
        The copy, in eval mode if ``model`` was, with ``config`` and the attributes of ``model``.
    """
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    layers = attention_layers(model)
    if not layers:
        raise VPIntegratorError(
            f"model: {type(model).__name__} has no attention layer to remove (without_attention is for "
            "transformers: vpt, st, symplectic_transformer, lp_transformer)"
        )
    ablated = copy.deepcopy(model)
    for name, layer in attention_layers(ablated):
        if isinstance(layer, LiePoissonCoupling):  # ψ ≡ 0: every rotation angle is 0
            for p in (layer.psi.w, layer.psi.d):
                with torch.no_grad():
                    p.zero_()
                p.requires_grad_(False)
        elif isinstance(layer, MultiHeadAttention):
            parent_name, _, attr = name.rpartition(".")
            parent = ablated.get_submodule(parent_name) if parent_name else ablated
            setattr(parent, attr, NoAttention(layer.dim))
        else:
            with torch.no_grad():
                layer.weight.zero_()  # type: ignore[operator]
            layer.weight.requires_grad_(False)  # type: ignore[operator]
    return ablated


def constant_coupling(model: nn.Module, windows: torch.Tensor) -> nn.Module:
    """A copy of a Lie–Poisson transformer whose every coupling's ψ is a constant: no cross-state information.

    A coupling rotates state i by −α_i ψ(s), s = Σ_j α_j k·z_j. With ψ ≡ ψ̄ the rotation of state i depends on
    state i alone (a position-wise rotation about k by −α_i ψ̄): the map keeps everything it kept (Casimir,
    Poisson, volume) and loses exactly the cross-state information. ψ̄ of each coupling is the mean of ψ(s) over
    ``windows`` as that coupling sees them, the couplings fixed in order (a later coupling sees the earlier ones
    already constant). The constants are frozen (ψ's ``w = 0``, ``d = ψ̄``, ``requires_grad=False``).

    Parameters
    ----------
    model : nn.Module
        A model with [`LiePoissonCoupling`][vpintegrator.nn.LiePoissonCoupling] layers (``lp_transformer``).
    windows : Tensor, shape (n, seq_len, 3)
        Windows of the data (e.g. held-out exact-flow windows) on which ψ̄ is averaged.
    """
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    couplings = [m for _, m in attention_layers(model) if isinstance(m, LiePoissonCoupling)]
    if not couplings:
        raise VPIntegratorError(
            f"model: {type(model).__name__} has no Lie–Poisson coupling to make constant (constant_coupling is "
            "for lp_transformer; use without_attention for the other transformers)"
        )
    ablated = copy.deepcopy(model)
    param = next(ablated.parameters())
    x = torch.as_tensor(windows).to(dtype=param.dtype, device=param.device)
    if x.ndim != 3 or x.shape[0] == 0 or x.shape[2] != 3:
        raise VPIntegratorError(f"windows: expected shape (n, seq_len, 3) with n >= 1; got {tuple(x.shape)}")
    for layer in (m for _, m in attention_layers(ablated) if isinstance(m, LiePoissonCoupling)):
        seen: list[torch.Tensor] = []

        def grab(module, args, _seen=seen):  # the coupling's input windows (batch, seq, 3)
            _seen.append(args[0].detach())

        handle = layer.register_forward_pre_hook(grab)
        try:
            with torch.no_grad():
                ablated(x)
        finally:
            handle.remove()
        if not seen:
            raise VPIntegratorError(
                f"model: {type(model).__name__} never calls its coupling layers as modules; constant_coupling "
                "needs the plain (non-symmetric) lp_transformer"
            )
        with torch.no_grad():
            k = layer.axis / torch.linalg.vector_norm(layer.axis)
            s = (seen[0] @ k.to(seen[0].dtype)) @ layer.alpha  # (n,): Σ_j α_j k·z_j
            mean = layer.psi(s).mean()
            layer.psi.w.zero_()
            layer.psi.d.copy_(mean)
        for p in (layer.psi.w, layer.psi.d):
            p.requires_grad_(False)
    return ablated


class MeanAttention(nn.Module):
    """X ↦ Λ̄ᵀ X with a constant orthogonal (seq, seq) matrix Λ̄ (``mean_attention``): the window's states mixed
    the same way whatever they are."""

    lam: torch.Tensor

    def __init__(self, lam: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("lam", lam.detach().clone())
        self.dim = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lam.mT.to(x.dtype) @ x

    def _forward_planes(self, xp: torch.Tensor) -> torch.Tensor:  # (dim, seq, batch), the VP layers' layout
        return torch.einsum("st,dsb->dtb", self.lam.to(xp.dtype), xp).contiguous()

    def _fused_spec(self) -> None:
        """Not fused (``vpintegrator.nn.fused_attention``): the model runs its layers one after the other."""
        return None

    def extra_repr(self) -> str:
        return f"seq={self.lam.shape[0]}"


def mean_attention(model: nn.Module, windows: torch.Tensor) -> nn.Module:
    """A copy of a VPT (skew-symmetric attention) whose every attention is ``MeanAttention``: Λ̄ = Cayley(C̄),
    C̄ the mean over ``windows`` (n, seq_len, dim) of the skew C(X) that attention sees (the attentions fixed in
    order, a later one seeing the earlier ones already constant; with ``positional="mixing"`` the windows as the
    unit's mixing leaves them, the mixing kept). Volume preserving still (Λ̄ orthogonal); the
    states are mixed along the window but no state's map depends on the others' values any more."""
    from ..nn.cayley import cayley

    blocks = getattr(model, "blocks", None)
    if (not isinstance(model, nn.Module) or blocks is None or getattr(model, "symmetric", False)
            or not all(isinstance(getattr(b, "attention", None), VolumePreservingAttention) and b.attention.skew_sym
                       for b in blocks)):
        raise VPIntegratorError(f"model: mean_attention is for the VPT with skew-symmetric attention (not symmetric); "
                                f"got {type(model).__name__} (use without_attention for the other transformers)")
    ablated = copy.deepcopy(model)
    param = next(ablated.parameters())
    x = torch.as_tensor(windows).to(dtype=param.dtype, device=param.device)
    if x.ndim != 3 or x.shape[0] == 0 or tuple(x.shape[1:]) != (model.seq_len, model.dim):
        raise VPIntegratorError(f"windows: expected shape (n, {model.seq_len}, {model.dim}) with n >= 1; got "
                                f"{tuple(x.shape)}")
    with torch.no_grad():
        for block in ablated.blocks:  # type: ignore[union-attr]
            for part in block.window_chain():  # C over the attention's own inputs (after a positional mixing)
                if part is block.attention:
                    block.attention = part = MeanAttention(cayley(part.correlation(x).mean(0, keepdim=True))[0])
                x = part(x)
    return ablated
