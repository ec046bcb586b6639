"""Attention layers on (batch, seq, dim) tensors.

The seeds (000, 004) write a sequence as the columns of Z ∈ ℝ^{dim×T}. We store X = Zᵀ ∈ ℝ^{T×dim} per
sample, so

    ZᵀAZ  ↦  X A Xᵀ   (T×T)        Z Λ  ↦  Λᵀ X        V softmax_col(M)  ↦  softmax_row(Mᵀ) Vᵀ
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import VPIntegratorError
from .common import check_bool, check_input, check_positive_int, from_planes, glorot_uniform_, to_planes
from .cayley import cayley, cayley3_transpose_apply, resolve_cayley_method
from .fused_attention import ATTENTION, fused_chain, fused_spec, register_fused_buffers, seq3_constants

__all__ = ["VolumePreservingAttention", "MultiHeadAttention", "MHA_FORMS", "MHA_SOFTMAXES"]

MHA_FORMS = ("gml", "standard")
#: how the attention scores are normalised: GML's ``VectorSoftmax`` (per query, the usual softmax) and
#: ``MatrixSoftmax`` (over the whole seq×seq score matrix of each head and sample)
MHA_SOFTMAXES = ("vector", "matrix")


class VolumePreservingAttention(nn.Module):
    """Volume-preserving attention: X ↦ Λ(X)ᵀ X with Λ = Cayley(C(X)) (seed 004: Z ↦ Z Λ).

    Cayley(C) = (I − C)(I + C)⁻¹ (no ½). No residual connection, no scaling in the skew variant.

    ``skew_sym=True``:  C = X A Xᵀ  (seed: C = ZᵀAZ), A = −Aᵀ ∈ ℝ^{dim×dim} learnable
    (``weight``: its dim(dim−1)/2 strictly-lower entries). C is skew, Λ orthogonal, and the map
    ℝ^{T·dim} → ℝ^{T·dim} preserves volume (det J = 1).

    ``skew_sym=False`` (GML's default, "arbitrary weighting"): A ∈ ℝ^{dim×dim} arbitrary (``weight``),
    L = tril(X A Xᵀ, −1) / √dim (strictly lower triangle), C = L − Lᵀ. Λ is still orthogonal, but the
    map is NOT volume preserving (see [`vpintegrator.testing`][vpintegrator.testing]).

    Parameters
    ----------
    dim : int
        State dimension.
    skew_sym : bool
        Skew-symmetric weighting (volume preserving) or arbitrary weighting.
    cayley_method : str, optional
        Fixed Cayley implementation for this layer (``"closed"``, ``"solve"``, ``"inv"``, ``"auto"``);
        ``None`` follows [`vpintegrator.nn.cayley_method`][vpintegrator.nn.cayley_method]. With the closed form and seq = 3 the
        forward pass never inverts: it computes the three lower entries w of C and
        Λᵀ X = 2 (X + w × X + w (wᵀ X)) / (1 + |w|²) − X  (``vpintegrator.nn.cayley.cayley3_transpose_apply``).

    Notes
    -----
    With the skew variant at seq = 3 (closed form) the layer runs as one autograd node with a hand-written
    backward (``vpintegrator.nn.fused_attention``; bitwise the same forward), except under ``torch.func``
    transforms and for dtypes other than float32/float64, which take the autograd path.

    Notes
    -----
    Permuting the rows of X (P X) gives C(P X) = P C Pᵀ in the skew variant, hence Λ(PX) = P Λ Pᵀ and
    output P Λᵀ X: the skew layer is permutation-equivariant along seq. The arbitrary variant is not
    (its strictly-lower triangle depends on the order).
    """

    #: set by __init__ (declared for type checkers)
    dim: int
    skew_sym: bool
    weight: nn.Parameter

    def __init__(self, dim: int, skew_sym: bool = True, cayley_method: str | None = None) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.skew_sym = check_bool(skew_sym, "skew_sym")
        self.cayley_method = cayley_method
        if skew_sym:
            rows, cols = torch.tril_indices(dim, dim, offset=-1)
            self.register_buffer("_rows", rows, persistent=False)
            self.register_buffer("_cols", cols, persistent=False)
            # A.view(-1) = embed @ weight: +1 at the lower entry (i, j), −1 at (j, i); one matrix-vector
            # product builds the skew A (each entry is ±one weight plus exact zeros: bitwise lower − lowerᵀ)
            embed = torch.zeros(dim * dim, dim * (dim - 1) // 2)
            k = torch.arange(rows.numel())
            embed[rows * dim + cols, k] = 1.0
            embed[cols * dim + rows, k] = -1.0
            self.register_buffer("_embed", embed, persistent=False)
            for name, value in seq3_constants().items():  # the fused seq-3 node's constants
                self.register_buffer(f"_c_{name}", value, persistent=False)
            self.weight = nn.Parameter(torch.empty(dim * (dim - 1) // 2))
            register_fused_buffers(self, [self])
        else:
            self.weight = nn.Parameter(torch.empty(dim, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot uniform: U(±√(6/n)) over the n free skew entries, U(±√(6/(2 dim))) for arbitrary A."""
        if self.weight.numel():
            fan = self.weight.numel() if self.skew_sym else 2 * self.dim
            glorot_uniform_(self.weight, fan)

    def weight_matrix(self) -> torch.Tensor:
        """A, shape (dim, dim) (skew-symmetric when ``skew_sym``)."""
        if not self.skew_sym:
            return self.weight
        if self.weight.numel() == 0:
            return self.weight.new_zeros(self.dim, self.dim)
        return torch.mv(self._embed, self.weight).view(self.dim, self.dim)

    def reference_weight_matrix(self) -> torch.Tensor:
        """A built entry by entry in Python: the slow, obviously correct reference of [`weight_matrix`][vpintegrator.nn.VolumePreservingAttention.weight_matrix]."""
        if not self.skew_sym:
            return self.weight.detach().cpu().clone()
        A = torch.zeros(self.dim, self.dim, dtype=self.weight.dtype)
        k = 0
        for i in range(self.dim):
            for j in range(i):
                A[i, j], A[j, i] = self.weight[k].detach().cpu(), -self.weight[k].detach().cpu()
                k += 1
        return A

    def correlation(self, x: torch.Tensor) -> torch.Tensor:
        """The skew matrix C(X), shape (batch, seq, seq), for x of shape (batch, seq, dim)."""
        A = self.weight_matrix()
        xax = x @ A @ x.mT  # (batch, seq, dim)(dim, dim)(batch, dim, seq) -> (batch, seq, seq): X A Xᵀ
        if self.skew_sym:
            return xax
        lower = torch.tril(xax, diagonal=-1) / math.sqrt(self.dim)  # (batch, seq, seq)
        return lower - lower.mT

    def orthogonal_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """Λ(X) = Cayley(C(X)), shape (batch, seq, seq), for x of shape (batch, seq, dim)."""
        check_input(x, type(self).__name__, self.dim)
        return cayley(self.correlation(x), self.cayley_method)

    def forward(self, x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """Apply X ↦ Λ(X)ᵀ X, or its member ψ_τ: X ↦ Cayley(τ C(X))ᵀ X of the family with ψ_0 = id.

        Parameters
        ----------
        x : Tensor, shape (batch, seq, dim)
        tau : float
            Flow time (1: the layer); it scales C. For the skew variant ψ_{−τ} = ψ_τ⁻¹ ([`inverse`][vpintegrator.nn.VolumePreservingAttention.inverse]).

        Returns
        -------
        Tensor, shape (batch, seq, dim)
        """
        check_input(x, type(self).__name__, self.dim)
        if self._seq3_fast_path(x.shape[1]):
            if tau == 1.0:
                spec = fused_spec([self], x)
                if spec is not None:  # one autograd node, the layout swaps inside
                    return fused_chain(self, [self], spec, x, rows=True)
            return from_planes(self._forward_seq3_planes(to_planes(x), tau))
        lam = cayley(self._scaled_correlation(x, tau), self.cayley_method)  # (batch, seq, seq)
        return lam.mT @ x  # (batch, seq, seq)(batch, seq, dim) -> (batch, seq, dim): row form of Z Λ

    def inverse(self, z: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The explicit inverse of ψ_τ (skew variant only): X = Λ Z with Λ = Cayley(τ C(Z)), i.e. ψ_{−τ}(Z).

        Why it is explicit: Λ = Cayley(τC) is a rational function of the skew C, so it commutes with C and is
        orthogonal, and Z = Λᵀ X gives C(Z) = Z A Zᵀ = Λᵀ (X A Xᵀ) Λ = Λᵀ C Λ = C: the output has the input's
        C and Λ. Then X = Λ Z, and Λ = Cayley(τC)⁻ᵀ = Cayley(−τC)ᵀ, so the inverse is the layer at time −τ.
        The arbitrary variant (``skew_sym=False``) does not keep C and has no such inverse: refused.
        """
        self._check_invertible()
        return self.forward(z, -tau)

    def _check_invertible(self) -> None:
        if not self.skew_sym:
            raise VPIntegratorError(
                "VolumePreservingAttention.inverse: only the skew variant (skew_sym=True) keeps C(X) and has an "
                "explicit inverse; the arbitrary weighting (skew_sym=False) has none"
            )

    def _scaled_correlation(self, x: torch.Tensor, tau: float) -> torch.Tensor:
        c = self.correlation(x)
        return c if tau == 1.0 else tau * c

    def _seq3_fast_path(self, seq: int) -> bool:
        return seq == 3 and resolve_cayley_method(self.cayley_method, 3) == "closed"

    def _fused_spec(self) -> str | None:
        """How ``vpintegrator.nn.fused_attention`` fuses this layer: ``ATTENTION`` when it can (skew, dim > 1,
        closed-form Cayley at seq 3), else ``None`` (it does not)."""
        fusable = self.skew_sym and self.dim > 1 and resolve_cayley_method(self.cayley_method, 3) == "closed"
        return ATTENTION if fusable else None

    def _forward_planes(self, xp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """The layer (flow time ``tau``) on contiguous xp of shape (dim, seq, batch) (the models' internal layout)."""
        if self._seq3_fast_path(xp.shape[1]):
            if tau == 1.0:
                spec = fused_spec([self], xp)
                if spec is not None:  # one autograd node, bitwise the same forward as _forward_seq3_planes
                    return fused_chain(self, [self], spec, xp)
            return self._forward_seq3_planes(xp, tau)
        x = from_planes(xp)  # (batch, seq, dim)
        return to_planes(cayley(self._scaled_correlation(x, tau), self.cayley_method).mT @ x)

    def _inverse_planes(self, zp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """[`inverse`][vpintegrator.nn.VolumePreservingAttention.inverse] on contiguous zp (dim, seq, batch)."""
        self._check_invertible()
        return self._forward_planes(zp, -tau)

    def _forward_seq3_planes(self, xp: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        """Fast path for seq = 3: the three lower entries of C only, and Λᵀ X from them without an inverse.

        Differentiated by autograd: the arbitrary variant, ``torch.func`` transforms, flow times τ ≠ 1 and the
        reference of the fused node.
        """
        d, _, batch = xp.shape
        # columns v_j = A z_j for j = 0, 1 only (z_2 is never on the right of a lower entry); the slice
        # xp[:, :2] is a strided (dim, 2·batch) view, no copy
        v = (self.weight_matrix() @ xp[:, :2].reshape(d, -1)).view(d, 2, batch)
        # C_ij = z_i · (A z_j); lower entries (C₂₁, C₂₀, C₁₀), w = (C₂₁, C₀₂, C₁₀) = (C₂₁, −C₂₀, C₁₀)
        c20_c21 = (xp[:, 2:3] * v).sum(dim=0)  # (2, batch)
        c10 = (xp[:, 1] * v[:, 0]).sum(dim=0)  # (batch,)
        w = torch.stack((c20_c21[1], -c20_c21[0], c10))  # (3, batch)
        if not self.skew_sym:
            w = w / math.sqrt(self.dim)
        if tau != 1.0:  # the entries of τ C
            w = tau * w
        return cayley3_transpose_apply(w, xp)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, skew_sym={self.skew_sym}"


class _Projection(nn.Module):
    """One head's projection P ∈ ℝ^{dim×d_head} (``weight``), so that Q = X P (row form of Pᵀ Z)."""

    def __init__(self, dim: int, d_head: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(glorot_uniform_(torch.empty(dim, d_head), dim + d_head))


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention in the GeometricMachineLearning form or the standard (Vaswani) form.

    ``form="gml"`` (seeds 000/002), per head i with P^Q_i, P^K_i, P^V_i ∈ ℝ^{dim×d_head}
    (d_head = dim / n_heads; ``query``, ``key``, ``value``), seed in columns
    ``V_i softmax_col(K_iᵀ Q_i / √dim)``. In rows (Q_i = X P^Q_i etc., shape (seq, d_head))::

        S_i = Q_i K_iᵀ / √dim            (seq_query, seq_key); [S_i]_{nm} = q⁽ⁿ⁾·k⁽ᵐ⁾ = [K_iᵀQ_i]_{mn}
        head_i = softmax(S_i, over the key index m, i.e. the last axis) V_i       (seq, d_head)
        out = concat_i(head_i)  (+ X if add_connection)                          (seq, dim)

    The seed's column softmax (normalising each column n of K_iᵀQ_i over m) is this softmax over the key
    axis. The scale is √dim, the full dimension, as in GML. No output projection, no biases.

    GML's own code (``src/layers/multi_head_attention.jl``) computes the same map with the labels
    swapped: ``PV_i' Z softmax((PQ_i' Z)' (PK_i' Z) / √dim)``, i.e. V softmax_col(QᵀK) with Q = PQᵀZ and
    K = PKᵀZ, so column n (the output state n) is weighted by PK_iᵀz⁽ⁿ⁾ · PQ_iᵀz⁽ᵐ⁾ normalised over m:
    **GML's P^K is our query (``query``) and GML's P^Q our key (``key``)**; P^V is ``value``. (Its
    Julia matrices are (dim, d_head) like ours; read from HDF5 they appear transposed.) GML versions
    before the √dim scaling existed computed the same without the 1/√dim.

    ``softmax="matrix"`` normalises each head's whole score matrix S_i at once (GML's ``MatrixSoftmax``,
    the ``activation`` keyword of its ``MultiHeadAttention``): head_i = (exp S_i / Σ_{n,m} exp [S_i]_{nm})
    V_i, so the weights of all states together sum to 1, not each state's. ``"vector"`` (the default,
    GML's ``VectorSoftmax``) is the usual softmax above.

    ``stiefel=True`` keeps every P on the Stiefel manifold (orthonormal columns, Pᵀ P = I) with
    ``torch.nn.utils.parametrizations.orthogonal(..., use_trivialization=False)`` (Householder map): the
    parameter is unconstrained and P is computed from it at every use, so Pᵀ P = I holds after any optimiser
    step, with no retraction to call.

    ``form="standard"`` (seeds 001/003; what ``torch.nn.MultiheadAttention`` computes): Q = X W_qᵀ + b_q,
    K, V likewise (``in_proj_weight`` (3 dim, dim), ``in_proj_bias`` (3 dim,)), per head softmax(Q_i K_iᵀ /
    √d_head) V_i, concatenated and projected: out = H W_oᵀ + b_o (``out_proj``), + X if add_connection.

    Parameters
    ----------
    dim : int
    n_heads : int
        Must divide ``dim``.
    form : {"gml", "standard"}
    add_connection : bool
        Add the input to the output (GML's layer defaults to True; the paper's ST uses False).
    stiefel : bool
        Orthonormal projections (``form="gml"`` only).
    softmax : {"vector", "matrix"}
        Normalisation of the scores (both forms): per query (``"vector"``) or over each head's whole
        score matrix (``"matrix"``, GML's ``MatrixSoftmax``).

    Notes
    -----
    Parameter counts: gml 3 dim² ; standard 4 dim² + 4 dim.
    """

    #: set by __init__ (declared for type checkers)
    dim: int
    n_heads: int
    add_connection: bool
    stiefel: bool
    d_head: int
    query: nn.ModuleList
    key: nn.ModuleList
    value: nn.ModuleList
    in_proj_weight: nn.Parameter
    in_proj_bias: nn.Parameter
    out_proj: nn.Linear

    def __init__(
        self,
        dim: int,
        n_heads: int = 1,
        form: str = "gml",
        add_connection: bool = False,
        stiefel: bool = False,
        softmax: str = "vector",
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.n_heads = check_positive_int(n_heads, "n_heads")
        if softmax not in MHA_SOFTMAXES:
            raise VPIntegratorError(f"softmax: expected one of {', '.join(MHA_SOFTMAXES)}, got {softmax!r}")
        self.softmax = softmax
        if dim % n_heads:
            raise VPIntegratorError(
                f"n_heads: must divide dim = {dim}, got n_heads = {n_heads}; "
                f"use one of {[h for h in range(1, dim + 1) if dim % h == 0]}"
            )
        if form not in MHA_FORMS:
            raise VPIntegratorError(f"form: expected one of {', '.join(MHA_FORMS)}, got {form!r}")
        if check_bool(stiefel, "stiefel") and form != "gml":
            raise VPIntegratorError("stiefel: orthonormal projections exist only for form='gml'; set stiefel=False")
        self.form = form
        self.add_connection = check_bool(add_connection, "add_connection")
        self.stiefel = check_bool(stiefel, "stiefel")
        self.d_head = dim // n_heads
        if form == "gml":
            self.query = nn.ModuleList(_Projection(dim, self.d_head) for _ in range(n_heads))
            self.key = nn.ModuleList(_Projection(dim, self.d_head) for _ in range(n_heads))
            self.value = nn.ModuleList(_Projection(dim, self.d_head) for _ in range(n_heads))
            if stiefel:
                for proj in (*self.query, *self.key, *self.value):
                    # without trivialization P is recomputed from the free parameter in the current dtype,
                    # so it is orthonormal to that dtype's rounding (also after .double())
                    nn.utils.parametrizations.orthogonal(proj, "weight", use_trivialization=False)
        else:
            self.in_proj_weight = nn.Parameter(glorot_uniform_(torch.empty(3 * dim, dim), 4 * dim))
            self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
            self.out_proj = nn.Linear(dim, dim)
            with torch.no_grad():
                self.out_proj.bias.zero_()

    def projections(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """GML form: stacked (P^Q, P^K, P^V), each of shape (n_heads, dim, d_head)."""
        if self.form != "gml":
            raise VPIntegratorError("projections(): only defined for form='gml'")
        return tuple(torch.stack([p.weight for p in group]) for group in (self.query, self.key, self.value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the attention.

        Parameters
        ----------
        x : Tensor, shape (batch, seq, dim)

        Returns
        -------
        Tensor, shape (batch, seq, dim)
        """
        check_input(x, type(self).__name__, self.dim)
        batch, seq, _ = x.shape
        if self.form == "gml":
            # all projections in one product: columns [P^Q_1 … P^Q_h | P^K_1 … | P^V_1 …]
            P = torch.cat([p.weight for group in (self.query, self.key, self.value) for p in group], dim=1)
            qkv = x @ P  # (batch, seq, dim) @ (dim, 3 dim) -> (batch, seq, 3 dim)
            scale = 1.0 / math.sqrt(self.dim)
        else:
            qkv = x @ self.in_proj_weight.mT + self.in_proj_bias  # (batch, seq, 3 dim)
            scale = 1.0 / math.sqrt(self.d_head)
        qkv = qkv.reshape(batch, seq, 3, self.n_heads, self.d_head)  # (batch, seq, 3, heads, d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 × (batch, heads, seq, d_head)
        scores = (q @ k.mT) * scale  # (batch, heads, seq_query, seq_key)
        if self.softmax == "vector":
            weights = torch.softmax(scores, dim=-1)  # normalise over keys
        else:  # over the whole (seq, seq) matrix of each head and sample
            weights = torch.softmax(scores.flatten(-2), dim=-1).view_as(scores)
        heads = weights @ v  # (batch, heads, seq, d_head)
        out = heads.transpose(1, 2).reshape(batch, seq, self.dim)  # (batch, seq, heads·d_head): concat
        if self.form == "standard":
            out = self.out_proj(out)  # (batch, seq, dim)
        return x + out if self.add_connection else out

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, n_heads={self.n_heads}, form={self.form!r}, "
            f"add_connection={self.add_connection}, stiefel={self.stiefel}"
            + (f", softmax={self.softmax!r}" if self.softmax != "vector" else "")
        )
