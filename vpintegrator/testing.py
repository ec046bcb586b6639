"""Structure checks shipped as public helpers (e3nn's ``assert_equivariant`` style).

The *window map* of a model or layer is x ↦ f(x) viewed as ℝ^{seq·dim} → ℝ^{seq·dim} (the input window
flattened row by row; it needs pred_window = seq). It preserves volume iff det J(x) = 1 for all x. Jacobians
are computed per sample with ``torch.func.jacrev`` and batched with ``torch.func.vmap``;
log|det J| and sign come from ``torch.linalg.slogdet``.

Two ways to get det J:

``method="full"``
    The Jacobian of the whole window map (black box). Its rounding error grows like eps·cond(J): a deep
    randomly initialised VPT can have cond(J) ~ 1e7 at some inputs, and then |det J − 1| ~ 1e-9 in float64
    although every layer is exactly volume preserving.
``method="chain"``
    For a model that is a composition of layers (``nn.Sequential``, or a module with ``window_chain()``
    returning its parts in order), det J = Π_k det J_k(x_k) with x_k the input of layer k: each layer's
    Jacobian is computed at its actual input and log|det| summed. The composition is checked against
    ``model(inputs)`` so a wrong chain is reported, never silently audited.

Symplecticity ([`audit_symplectic`][vpintegrator.testing.audit_symplectic], [`assert_symplectic`][vpintegrator.testing.assert_symplectic]): with states x = (q, p), dim = 2n, the
window map is symplectic on ℝ^{T·dim} iff JᵀΩJ = Ω, Ω = blockdiag over the T states of [[0, I_n], [−I_n, 0]]
(the same row-by-row flattening). The error reported is ‖JᵀΩJ − Ω‖_F / ‖Ω‖_F per input
(‖Ω‖_F = √(T·dim)); its rounding floor grows like eps·‖J‖², so prefer ``"chain"`` for deep models.
``"chain"`` checks every layer of ``window_chain()`` at its actual input (a composition of symplectic maps is
symplectic) and reports the worst layer. Any callable (batch, T, dim) -> (batch, T, dim) can be audited,
e.g. one step of a classical integrator (T = 1); when autograd cannot go through it (NumPy inside), J comes
from fourth-order central differences ([`fd_jacobian`][vpintegrator.testing.fd_jacobian]; on one step of the classical integrators of the
coupled oscillator they agree with the analytic Jacobians to ~5e-13 in float64).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch
from torch import nn

from .errors import VPIntegratorError
from .jacobians import METHODS, callable_name, chain_inputs, fd_jacobian, jacobian_slogdet, window_chain, window_jacobian
from .poisson import CasimirAudit, PoissonAudit, ErrorSummary, assert_symmetric, audit_casimir, audit_poisson

__all__ = [
    "assert_field_preserves",
    "window_jacobian",
    "window_chain",
    "jacobian_slogdet",
    "random_inputs",
    "VolumeAudit",
    "audit_volume",
    "assert_volume_preserving",
    "symplectic_form",
    "fd_jacobian",
    "SymplecticAudit",
    "audit_symplectic",
    "assert_symplectic",
    "AttentionCoupling",
    "attention_coupling",
    "CasimirAudit",
    "audit_casimir",
    "PoissonAudit",
    "audit_poisson",
    "assert_preserves",
    "assert_symmetric",
]


def _window_shape(model: nn.Module, seq: int | None) -> tuple[int, int]:
    dim = getattr(model, "dim", None)
    if not isinstance(dim, int):
        raise VPIntegratorError(f"{type(model).__name__}: has no integer attribute 'dim'; cannot build inputs")
    if seq is None:
        seq = getattr(model, "seq_len", None) or 3
    return seq, dim


def random_inputs(
    model: nn.Module,
    n: int = 256,
    seq: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> torch.Tensor:
    """Random windows N(0, scale²) for ``model``.

    Parameters
    ----------
    model : nn.Module
        Has ``dim`` (and ``seq_len``; layers without it get seq = 3 unless ``seq`` is given).
    n : int
        Number of windows.
    seq : int, optional
        Window length; default ``model.seq_len`` (or 3).

    Returns
    -------
    Tensor, shape (n, seq, dim)
    """
    seq, dim = _window_shape(model, seq)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, seq, dim, generator=gen, dtype=torch.float64) * scale  # (n, seq, dim)
    return x.to(dtype=dtype, device=device)


@dataclasses.dataclass(frozen=True)
class VolumeAudit(ErrorSummary):
    """Result of [`audit_volume`][vpintegrator.testing.audit_volume]; ``det`` has shape (batch,), ``inputs`` (batch, seq, dim)."""

    det: torch.Tensor
    inputs: torch.Tensor
    method: str = "full"

    @property
    def error(self) -> torch.Tensor:
        """|det J − 1| per input, shape (batch,)."""
        return (self.det - 1).abs()


def _prepared(model: nn.Module, dtype: torch.dtype | None, device) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(
            f"model must be a torch.nn.Module (e.g. vpintegrator.build_model('vpt', ...)); got {type(model).__name__}"
        )
    if dtype is None and device is None:
        return model
    return copy.deepcopy(model).to(dtype=dtype, device=device)


def audit_volume(
    model: nn.Module,
    inputs: torch.Tensor | None = None,
    n: int = 256,
    dtype: torch.dtype | None = torch.float64,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
) -> VolumeAudit:
    """det J of the window map over a batch of inputs.

    Parameters
    ----------
    model : nn.Module
        Left unchanged; a copy is cast to ``dtype``/``device`` (``None`` keeps the model's).
    inputs : Tensor, shape (batch, seq, dim), optional
        Default [`random_inputs`][vpintegrator.testing.random_inputs] (``n``, ``seq``, ``scale``, ``seed``).
    method : {"full", "chain"}
        Whole-map Jacobian or product over the layer chain (module docstring).

    Returns
    -------
    VolumeAudit
    """
    work = _prepared(model, dtype, device)
    p = next(work.parameters(), None)
    if inputs is None:
        inputs = random_inputs(
            work, n, seq=seq, dtype=p.dtype if p is not None else torch.float64,
            device=p.device if p is not None else None, scale=scale, seed=seed,
        )
    elif p is not None:
        inputs = inputs.to(dtype=p.dtype, device=p.device)
    sign, logabsdet = jacobian_slogdet(work, inputs, method=method)
    return VolumeAudit(det=(sign * logabsdet.exp()).detach(), inputs=inputs.detach(), method=method)


def assert_volume_preserving(
    model: nn.Module,
    inputs: torch.Tensor | None = None,
    n: int = 64,
    dtype: torch.dtype | None = torch.float64,
    atol: float = 1e-10,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
) -> VolumeAudit:
    """Assert |det J − 1| ≤ atol for the window map of ``model`` at every input.

    Parameters as [`audit_volume`][vpintegrator.testing.audit_volume]. Raises ``AssertionError`` naming the worst |det J − 1| and the input
    that produced it; returns the [`VolumeAudit`][vpintegrator.testing.VolumeAudit] otherwise.
    """
    audit = audit_volume(
        model, inputs, n=n, dtype=dtype, device=device, scale=scale, seed=seed, method=method, seq=seq
    )
    if not audit.max_error <= atol:  # also catches NaN
        worst = int(audit.error.argmax())
        raise AssertionError(
            f"{type(model).__name__} is not volume preserving within atol={atol:g} (method={method!r}): "
            f"max |det J - 1| = {audit.max_error:.3e} (det J = {float(audit.det[worst]):.12g}) at input "
            f"{audit.inputs[worst].tolist()}; median |det J - 1| = {audit.median_error:.3e} over "
            f"{audit.det.numel()} inputs"
        )
    return audit


# --- symplecticity ---------------------------------------------------------------------------------

JACOBIANS = ("auto", "autograd", "fd")


def symplectic_form(dim: int, seq: int = 1, dtype: torch.dtype = torch.float64,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """Ω = blockdiag over ``seq`` states of [[0, I_n], [−I_n, 0]], shape (seq·dim, seq·dim), dim = 2n.

    Index = position·dim + component, as [`window_jacobian`][vpintegrator.testing.window_jacobian] flattens a window.
    """
    if not isinstance(dim, int) or dim < 2 or dim % 2:
        raise VPIntegratorError(f"dim must be even (q, p) for a symplectic map; got {dim}")
    n = dim // 2
    eye = torch.eye(n, dtype=dtype, device=device)
    zero = torch.zeros(n, n, dtype=dtype, device=device)
    block = torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)  # (dim, dim)
    return torch.block_diag(*([block] * seq))  # (seq·dim, seq·dim)


@dataclasses.dataclass(frozen=True)
class SymplecticAudit(ErrorSummary):
    """Result of [`audit_symplectic`][vpintegrator.testing.audit_symplectic].

    ``error`` (batch,): ‖JᵀΩJ − Ω‖_F / ‖Ω‖_F per input (``"chain"``: the largest over the layers);
    ``layer_errors`` (n_layers, batch) for ``"chain"``, else None; ``inputs`` (batch, seq, dim);
    ``jacobian``: ``"autograd"`` or ``"fd"``, how J was computed.
    """

    error: torch.Tensor
    inputs: torch.Tensor
    method: str = "full"
    jacobian: str = "autograd"
    layer_errors: torch.Tensor | None = None

    @property
    def worst_layer(self) -> int | None:
        """Index in ``window_chain()`` of the layer with the largest error (``"chain"`` only)."""
        if self.layer_errors is None:
            return None
        return int(self.layer_errors.max(dim=1).values.argmax())


def _symplectic_errors(fn, inputs: torch.Tensor, jacobian: str, step: float | None) -> tuple[torch.Tensor, str]:
    """‖JᵀΩJ − Ω‖_F / ‖Ω‖_F per input, and the Jacobian method used."""
    batch, seq, dim = inputs.shape
    used = jacobian
    if jacobian == "fd":
        jac = fd_jacobian(fn, inputs, step)
    else:
        try:
            jac = window_jacobian(fn, inputs)
            used = "autograd"
        except VPIntegratorError:
            raise
        except Exception:  # e.g. NumPy inside a plain callable: autograd cannot see through it
            if jacobian == "autograd" or isinstance(fn, nn.Module):
                raise
            jac, used = fd_jacobian(fn, inputs, step), "fd"
    omega = symplectic_form(dim, seq, dtype=jac.dtype, device=jac.device)
    defect = jac.mT @ omega @ jac - omega  # (batch, seq·dim, seq·dim)
    return torch.linalg.matrix_norm(defect) / omega.norm(), used


def audit_symplectic(
    model: Any,
    inputs: torch.Tensor | None = None,
    n: int = 64,
    dtype: torch.dtype | None = torch.float64,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
    jacobian: str = "auto",
    fd_step: float | None = None,
) -> SymplecticAudit:
    """‖JᵀΩJ − Ω‖_F / ‖Ω‖_F of the window map over a batch of inputs (module docstring).

    Parameters
    ----------
    model : nn.Module or callable
        A model or layer (left unchanged; a copy is cast to ``dtype``/``device``), or any callable mapping
        (batch, T, dim) -> (batch, T, dim) with dim even (e.g. one integrator step, T = 1).
    inputs : Tensor, shape (batch, seq, dim), optional
        Default [`random_inputs`][vpintegrator.testing.random_inputs] (``n``, ``seq``, ``scale``, ``seed``; needs ``model.dim``, so a plain
        callable without a ``dim`` attribute needs ``inputs``).
    method : {"full", "chain"}
        The whole window map, or each layer of ``window_chain()`` at its actual input (the composition is
        checked against ``model(inputs)``).
    jacobian : {"auto", "autograd", "fd"}
        ``"auto"``: autograd, and for a plain callable that autograd cannot differentiate, finite
        differences ([`fd_jacobian`][vpintegrator.testing.fd_jacobian], step ``fd_step``).

    Returns
    -------
    SymplecticAudit
    """
    if method not in METHODS:
        raise VPIntegratorError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if jacobian not in JACOBIANS:
        raise VPIntegratorError(f"jacobian: expected one of {', '.join(JACOBIANS)}, got {jacobian!r}")
    if isinstance(model, nn.Module):
        work = _prepared(model, dtype, device)
        p = next(work.parameters(), None)
        like = dict(dtype=p.dtype, device=p.device) if p is not None else dict(dtype=dtype or torch.float64)
    elif callable(model):
        work, like = model, dict(dtype=dtype or torch.float64, device=device)
    else:
        raise VPIntegratorError(f"model must be a torch.nn.Module or a callable; got {type(model).__name__}")
    if inputs is None:
        if not isinstance(getattr(work, "dim", None), int):
            raise VPIntegratorError(
                f"inputs: {callable_name(model)} has no integer attribute 'dim'; pass inputs (batch, T, dim)"
            )
        inputs = random_inputs(work, n, seq=seq, scale=scale, seed=seed, **like)
    elif not isinstance(inputs, torch.Tensor) or inputs.ndim != 3:
        raise VPIntegratorError(
            f"inputs: expected a tensor of shape (batch, seq, dim), got {getattr(inputs, 'shape', inputs)!r}"
        )
    else:
        inputs = inputs.to(**{k: v for k, v in like.items() if v is not None})
    symplectic_form(inputs.shape[-1])  # refuses an odd dim
    if method == "full":
        error, used = _symplectic_errors(work, inputs, jacobian, fd_step)
        return SymplecticAudit(error.detach(), inputs.detach(), method, used)
    per_layer, used_all = [], set()
    for layer, x in chain_inputs(work, inputs):
        err, used = _symplectic_errors(layer, x, jacobian, fd_step)
        per_layer.append(err.detach())
        used_all.add(used)
    layer_errors = torch.stack(per_layer)  # (n_layers, batch)
    used = "fd" if "fd" in used_all else "autograd"
    return SymplecticAudit(layer_errors.max(dim=0).values, inputs.detach(), method, used, layer_errors)


def assert_symplectic(
    model: Any,
    inputs: torch.Tensor | None = None,
    n: int = 64,
    dtype: torch.dtype | None = torch.float64,
    tol: float = 1e-12,
    device: torch.device | str | None = None,
    scale: float = 1.0,
    seed: int = 0,
    method: str = "full",
    seq: int | None = None,
    jacobian: str = "auto",
    fd_step: float | None = None,
) -> SymplecticAudit:
    """Assert ‖JᵀΩJ − Ω‖_F / ‖Ω‖_F ≤ tol for the window map of ``model`` at every input.

    Parameters as [`audit_symplectic`][vpintegrator.testing.audit_symplectic]. Raises ``AssertionError`` (one line) naming the worst error, the
    input that produced it and, for ``"chain"``, the worst layer; returns the [`SymplecticAudit`][vpintegrator.testing.SymplecticAudit].
    """
    audit = audit_symplectic(
        model, inputs, n=n, dtype=dtype, device=device, scale=scale, seed=seed, method=method, seq=seq,
        jacobian=jacobian, fd_step=fd_step,
    )
    if not audit.max_error <= tol:  # also catches NaN
        where = ""
        if audit.worst_layer is not None:
            where = f" in layer {audit.worst_layer} ({type(window_chain(model)[audit.worst_layer]).__name__})"
        raise AssertionError(
            f"{callable_name(model)} is not symplectic within tol={tol:g} (method={method!r}, jacobian={audit.jacobian!r}): "
            f"max ||J^T Omega J - Omega||_F / ||Omega||_F = {audit.max_error:.3e}{where} at input "
            f"{audit.worst_input.tolist()}; median {audit.median_error:.3e} over {audit.error.numel()} inputs"
        )
    return audit


@dataclasses.dataclass(frozen=True)
class AttentionCoupling:
    """How much each output state of a window map depends on the other states ([`attention_coupling`][vpintegrator.testing.attention_coupling]).

    ``per_window[b]`` = max over output states i of ‖J_{i,≠i}‖_F / ‖J_{i,i}‖_F at window b, where J_{i,j}
    = ∂y_i/∂x_j is the (dim × dim) block of output state i and input state j, "≠i" all input states but
    the one output i advances, and ‖·‖_F the Frobenius norm. 0 for a position-wise map (each state advanced
    by itself), O(1) when the other states matter as much as the state itself.
    """

    median: float
    max: float
    per_window: "torch.Tensor"

    def __repr__(self) -> str:  # one line, not the per-window tensor
        return f"AttentionCoupling(median={self.median:.3g}, max={self.max:.3g}, n_windows={self.per_window.numel()})"


def attention_coupling(model: nn.Module, windows: torch.Tensor) -> AttentionCoupling:
    """Cross-state coupling of a window model: does the attention carry information between the states?

    For each input window (seq_len, dim) the Jacobian of the output window (pred_window, dim) is split into
    (dim × dim) blocks J_{i,j} = ∂y_i/∂x_j. Output state i advances input state
    j(i) = seq_len − pred_window + i (the state pred_window places before it); the coupling of the window is
    max_i ‖[J_{i,j}]_{j≠j(i)}‖_F / ‖J_{i,j(i)}‖_F. The exact flow map of an autonomous system advances
    every state by itself (z_{k+T} = φ_{T h}(z_k)), so its window map has coupling 0: a model fitted to it
    needs its attention only where the network alone cannot represent φ (or the states are partial
    observations, as in a delay embedding).

    Parameters
    ----------
    model : nn.Module
        With ``dim``, ``seq_len`` and ``pred_window`` (every model of the registry); computed in the model's
        dtype and device.
    windows : Tensor or array, shape (n, seq_len, dim)
        The input windows, e.g. from held-out trajectories.

    Returns
    -------
    AttentionCoupling
        ``median`` and ``max`` over the windows, and ``per_window``. A model with seq_len 1 has no other
        state: coupling 0.
    """
    seq, dim = _window_shape(model, None)
    pred = getattr(model, "pred_window", seq)
    param = next(iter(model.parameters()), None)
    if param is None:
        param = next(iter(model.buffers()), None)
    dtype = param.dtype if param is not None else torch.get_default_dtype()
    device = param.device if param is not None else torch.device("cpu")
    x = torch.as_tensor(windows, dtype=dtype, device=device)
    if x.ndim != 3 or tuple(x.shape[1:]) != (seq, dim) or x.shape[0] == 0:
        raise VPIntegratorError(
            f"windows: expected shape (n, seq_len, dim) = (n, {seq}, {dim}) with n ≥ 1 for {callable_name(model)}, "
            f"got {tuple(x.shape)}"
        )
    if seq == 1:
        zero = torch.zeros(x.shape[0], dtype=dtype)
        return AttentionCoupling(0.0, 0.0, zero)

    def window_map(w: torch.Tensor) -> torch.Tensor:
        return model(w.unsqueeze(0)).squeeze(0)  # (seq, dim) -> (pred, dim)

    with torch.enable_grad():  # see jacobians.window_jacobian: never let an outer no_grad leak into jacrev
        J = torch.func.vmap(torch.func.jacrev(window_map))(x)  # (n, pred, dim, seq, dim)
    blocks = torch.linalg.matrix_norm(J.permute(0, 1, 3, 2, 4))  # (n, pred, seq): ‖J_{i,j}‖_F
    own = torch.arange(pred, device=J.device) + (seq - pred)  # j(i)
    diag = blocks[:, torch.arange(pred), own]  # (n, pred)
    total = torch.linalg.vector_norm(blocks, dim=-1)  # (n, pred): ‖J_{i,·}‖_F over all j
    cross = torch.sqrt(torch.clamp(total**2 - diag**2, min=0.0))
    ratio = (cross / diag).amax(dim=1).detach().cpu()  # (n,)
    return AttentionCoupling(float(ratio.median()), float(ratio.max()), ratio)


def assert_preserves(model: nn.Module, atol: float = 1e-10, system: Any = "rigid_body", n: int = 32, seed: int = 0,
                     context: Any = None) -> dict[str, float]:
    """Check every claim of ``model.preserves`` with its audit in float64; returns {claim: max error}.

    ``"volume"`` → [`audit_volume`][vpintegrator.testing.audit_volume] (chain), ``"symplectic"`` → [`audit_symplectic`][vpintegrator.testing.audit_symplectic] (chain),
    ``"casimir"`` → [`audit_casimir`][vpintegrator.testing.audit_casimir], ``"poisson"`` → [`audit_poisson`][vpintegrator.testing.audit_poisson]. Raises ``AssertionError``
    naming the first claim whose error exceeds ``atol``.

    A context model (``ContextModel``: it has ``bind``) claims its structure for every fixed
    context c: its one-step map with c fixed is audited, c = ``context`` (context_dim,), or when ``context``
    is None, c from the model's encoder on a random prefix (``seed``).
    """
    if callable(getattr(model, "bind", None)) and hasattr(model, "context_len"):
        work = _prepared(model, torch.float64, None)
        if context is None:
            prefix = random_inputs(model, n=1, seq=int(getattr(model, "context_len")), seed=seed) * 0.5
            with torch.no_grad():
                context = work.encode(prefix)[0]  # type: ignore[operator]
        model = work.bind(torch.as_tensor(context, dtype=torch.float64))  # type: ignore[operator]
    elif context is not None:
        raise VPIntegratorError(f"{callable_name(model)}: context given, but the model is not a context model (no bind)")
    errors = {}
    for claim in getattr(model, "preserves", ()):
        if claim == "volume":
            err = audit_volume(model, n=n, seed=seed, method="chain").max_error
        elif claim == "symplectic":
            err = audit_symplectic(model, n=n, seed=seed, method="chain").max_error
        elif claim == "casimir":
            err = audit_casimir(model, system, n=n, seed=seed).max_error
        elif claim == "poisson":
            err = audit_poisson(model, n=n, seed=seed).max_error
        elif claim == "symmetric":
            err = assert_symmetric(model, atol=math.inf, n=n, seed=seed)
        else:
            raise VPIntegratorError(f"{callable_name(model)}: unknown claim {claim!r} in preserves (known: volume, "
                                    "symplectic, casimir, poisson, symmetric)")
        if not err <= atol:
            raise AssertionError(f"{callable_name(model)} claims {claim!r} but its audit gives a max error of {err:.3e} "
                                 f"(atol {atol:g})")
        errors[claim] = err
    return errors



def assert_field_preserves(model: nn.Module, atol: float = 1e-10, n: int = 32, seed: int = 0) -> dict[str, float]:
    """Check every claim of a learned vector field's ``field_preserves`` in float64 by autograd; returns {claim:
    max error}.

    ``"divergence_free"``: |tr Df_θ(z)| (the Jacobian by ``torch.func.jacrev``); ``"energy"``: |∇H_θ·f_θ| /
    (|∇H_θ|·|f_θ|), H_θ the field's own first integral; ``"casimir"``: |z·f_θ| / (|z|·|f_θ|) (‖z‖² a first
    integral). ``model`` is a [`VectorFieldModel`][vpintegrator.models.VectorFieldModel]; its window
    map (field + method) is audited by [`assert_preserves`][vpintegrator.testing.assert_preserves]. Raises
    ``AssertionError`` naming the first claim whose error exceeds ``atol``.
    """
    import copy

    from torch.func import jacrev, vmap

    work: Any = copy.deepcopy(model).to(torch.float64)
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, int(work.dim), generator=gen, dtype=torch.float64)
    f = work.field(z).detach()
    tiny = 1e-300
    errors = {}
    for claim in getattr(work, "field_preserves", ()):
        if claim == "divergence_free":
            J = vmap(jacrev(lambda v: work.field(v[None])[0]))(z)
            err = float(torch.diagonal(J, dim1=-2, dim2=-1).sum(-1).abs().max().detach())
        elif claim == "energy":
            zz = z.clone().requires_grad_(True)
            out, _, _ = work.net(zz, 0)
            (g,) = torch.autograd.grad(work.invariant_values(zz, out)["energy"].sum(), zz)
            err = float(((g * f).sum(-1).abs() / (g.norm(dim=-1) * f.norm(dim=-1) + tiny)).max())
        elif claim == "casimir":
            err = float(((z * f).sum(-1).abs() / (z.norm(dim=-1) * f.norm(dim=-1) + tiny)).max())
        else:
            raise VPIntegratorError(f"{callable_name(model)}: unknown field claim {claim!r} (known: divergence_free, "
                                    "energy, casimir)")
        if not err <= atol:
            raise AssertionError(f"{callable_name(model)}'s field claims {claim!r} but its audit gives a max error of "
                                 f"{err:.3e} (atol {atol:g})")
        errors[claim] = err
    return errors
