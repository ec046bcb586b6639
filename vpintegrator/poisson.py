"""Structure audits for Lie–Poisson systems (so(3)*: the rigid body) and for symmetric learned maps.

Re-exported by [`vpintegrator.testing`][vpintegrator.testing] (use them from there): [`audit_casimir`][vpintegrator.testing.audit_casimir] (the Casimir of
each state kept), [`audit_poisson`][vpintegrator.testing.audit_poisson] (J B(x) Jᵀ = B(f(x)): a Poisson map), [`assert_symmetric`][vpintegrator.testing.assert_symmetric]
(ψ(−h) ∘ ψ(h) = id).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch import nn

from .arrays import relative_drift
from .errors import VPIntegratorError
from .jacobians import callable_name, window_jacobian

__all__ = ["ErrorSummary", "CasimirAudit", "audit_casimir", "PoissonAudit", "audit_poisson", "assert_symmetric"]


def _prepared(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise VPIntegratorError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    return model if dtype is None else copy.deepcopy(model).to(dtype=dtype)


def _random_windows(model: nn.Module, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    seq = getattr(model, "seq_len", None) or 3
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, int(seq), int(model.dim), generator=g, dtype=dtype)  # type: ignore[arg-type]


class ErrorSummary:
    """Summaries of an audit's per-input ``error`` (batch,) over its ``inputs`` (batch, seq, dim) (every
    audit's result: these and [`vpintegrator.testing`][vpintegrator.testing]'s)."""

    error: torch.Tensor
    inputs: torch.Tensor

    @property
    def median_error(self) -> float:
        return float(self.error.median())

    @property
    def max_error(self) -> float:
        return float(self.error.max())

    @property
    def worst_input(self) -> torch.Tensor:
        """The input window with the largest error, shape (seq, dim)."""
        return self.inputs[int(self.error.argmax())]


@dataclasses.dataclass(frozen=True)
class CasimirAudit(ErrorSummary):
    """Result of [`audit_casimir`][vpintegrator.testing.audit_casimir]: ``error`` (batch,) = max over the window's states of
    |C(y_i) − C(x_i)| / |C(x_i)|, the Casimir of each output state against that of the state it advances."""

    error: torch.Tensor
    inputs: torch.Tensor


def audit_casimir(model: nn.Module, system: Any = "rigid_body", inputs: torch.Tensor | None = None, n: int = 256,
                  dtype: torch.dtype | None = torch.float64, seed: int = 0) -> CasimirAudit:
    """The relative change of the system's Casimir under the window map (0 for a Casimir-exact model).

    Parameters
    ----------
    model : nn.Module
        A window model with pred_window = seq_len (output state i advances input state i).
    system : System or str
        A system with an invariant named ``"casimir"`` (the rigid body: ‖z‖²).
    inputs : Tensor (batch, seq, dim), optional
        Default: ``n`` windows N(0, 1) (``seed``).
    """
    from .systems import get_system

    system = get_system(system)
    if "casimir" not in system.invariant_names:
        raise VPIntegratorError(f"system: {system.name} has no invariant named 'casimir' (it is not Lie–Poisson "
                                "with a known Casimir); audit_casimir needs one")
    work = _prepared(model, dtype)
    if inputs is None:
        inputs = _random_windows(work, n, dtype or torch.float64, seed)
    with torch.no_grad():
        out = work(inputs)
    if out.shape != inputs.shape:
        raise VPIntegratorError(f"{callable_name(model)}: audit_casimir needs pred_window = seq_len; got {tuple(out.shape)} "
                                f"from {tuple(inputs.shape)}")
    c_in = torch.as_tensor(system.invariant("casimir", inputs.detach().cpu().numpy()))
    c_out = torch.as_tensor(system.invariant("casimir", out.detach().cpu().numpy()))
    error = relative_drift(c_out, c_in, floor=0.0).abs().amax(dim=-1)
    return CasimirAudit(error=error, inputs=inputs.detach())


def _hat(z: torch.Tensor) -> torch.Tensor:
    """Structure matrix of so(3)*: ẑ with ẑ v = z × v, shape (..., 3, 3)."""
    zero = torch.zeros_like(z[..., 0])
    return torch.stack([torch.stack([zero, -z[..., 2], z[..., 1]], -1),
                        torch.stack([z[..., 2], zero, -z[..., 0]], -1),
                        torch.stack([-z[..., 1], z[..., 0], zero], -1)], -2)


@dataclasses.dataclass(frozen=True)
class PoissonAudit(ErrorSummary):
    """Result of [`audit_poisson`][vpintegrator.testing.audit_poisson]: ``error`` (batch,) = ‖J B(x) Jᵀ − B(f(x))‖_F / ‖B(f(x))‖_F with B the
    block-diagonal so(3)* structure over the window's states."""

    error: torch.Tensor
    inputs: torch.Tensor


def audit_poisson(model: nn.Module, inputs: torch.Tensor | None = None, n: int = 64,
                  dtype: torch.dtype | None = torch.float64, seed: int = 0) -> PoissonAudit:
    """Is the window map a Poisson map of (so(3)*)^T? J B(x) Jᵀ = B(f(x)) at every input (dim 3 states).

    A Poisson map carries the bracket of any two functions to the bracket of their compositions; for the
    Lie–Poisson structure B(z) = ẑ of the rigid body this is the condition above (per window, with B
    block-diagonal over the T states). Volume preservation in ℝ³ alone does not imply it.
    """
    work = _prepared(model, dtype)
    if inputs is None:
        inputs = _random_windows(work, n, dtype or torch.float64, seed)
    batch, seq, dim = inputs.shape
    if dim != 3:
        raise VPIntegratorError(f"{callable_name(model)}: audit_poisson is for so(3)* states (dim 3), got dim {dim}")
    J = window_jacobian(work, inputs)  # (batch, 3T, 3T)
    with torch.no_grad():
        out = work(inputs)

    def structure(x: torch.Tensor) -> torch.Tensor:
        return torch.func.vmap(lambda w: torch.block_diag(*_hat(w).unbind(0)))(x)  # (batch, 3T, 3T)

    target = structure(out)
    error = torch.linalg.matrix_norm(J @ structure(inputs) @ J.mT - target) / torch.linalg.matrix_norm(target)
    return PoissonAudit(error=error.detach(), inputs=inputs.detach())


def assert_symmetric(model: nn.Module, atol: float = 1e-10, n: int = 32, seed: int = 0) -> float:
    """Assert that the learned map is symmetric (time-reversible): ψ(−h) ∘ ψ(h) = id.

    ``model.evolve(x, tau)`` is the map for the step scaled by τ (lpnet, lp_transformer, vpff, vpt have it); the
    check is max |evolve(evolve(x, 1), −1) − x| / max(1, |x|) over random inputs in float64. Returns that
    error; raises ``AssertionError`` above ``atol`` (a one-line error for a model without ``evolve``).
    """
    if not callable(getattr(model, "evolve", None)):
        raise VPIntegratorError(f"{callable_name(model)}: has no evolve(x, tau) (the map at a scaled step), so ψ(−h) "
                                "cannot be formed; lpnet, lp_transformer, vpff and vpt have it")
    work = _prepared(model, torch.float64)
    x = _random_windows(work, n, torch.float64, seed)
    with torch.no_grad():
        evolve = getattr(work, "evolve")
        back = evolve(evolve(x, 1.0), -1.0)
    err = float(((back - x).abs() / x.abs().clamp_min(1.0)).max())
    if not err <= atol:
        raise AssertionError(f"{callable_name(model)} is not symmetric: max |ψ(−h)(ψ(h)(x)) − x| = {err:.3e} (atol {atol:g})")
    return err
