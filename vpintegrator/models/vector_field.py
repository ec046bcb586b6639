"""Learned vector fields integrated by a classical method: the window map is k steps of the method on f_θ.

Four families, each an ``nn.Module`` window map (``seq_len`` states to the next ``seq_len``, each state by
itself) that the trainers fit like any other model, and whose field ``f_θ`` the rollout integrates with any
registered integrator at any step (``vpintegrator.rollout.field.LearnedField``):

==========  =====================================================  ====================================
name        field f_θ                                              the field keeps
==========  =====================================================  ====================================
``hnn``     J∇H_θ(q, p), state (q, p), H_θ a tanh MLP              H_θ, volume (divergence 0)
``lphnn``   z × ∇H_θ(z) on so(3)* (dim 3)                         H_θ, the Casimir ‖z‖², volume
``divfree`` f_i(z) = g_i(z without z_i), g_i a tanh MLP per i      volume (∂f_i/∂z_i = 0 for each i)
``node``    a tanh MLP ℝ^dim → ℝ^dim (the unstructured control)    nothing
==========  =====================================================  ====================================

``divfree`` is the "shear" form: every component ignores its own coordinate, so the divergence Σ ∂f_i/∂z_i
is 0 term by term, and the field is ``shear_splittable``: the package's exactly volume-preserving
``splitting`` integrator (Strang composition of the shear flows) runs it.

The window map (training) is ``substeps`` steps of ``method`` with h = dt / substeps, written here in torch
(differentiable): ``rk4``, ``implicit_midpoint``, ``gauss_legendre4``, ``gauss_legendre6``. The implicit
(collocation) methods solve their stages by Newton's method (the field's Jacobian in closed form, one batched
solve of s·dim unknowns per state) from K_i = f(z) until the update is below ``tol``·(1 + max|z|) (``tol`` at
least 10 float eps of the dtype), at most ``max_iter`` iterations: in float64 the map is the method's to
~1e-14. Under ``torch.func`` transforms (``vmap`` of the
Levenberg–Marquardt Jacobians and of ensembles) a data-dependent stop is impossible: the iteration then runs
the count the last plain call needed plus 2 (``max_iter`` before any plain call). A plain call that does not
converge in ``max_iter`` returns the last iterate, whose error the loss then shows.

What the window map keeps (``preserves``): ``hnn`` with a Gauss–Legendre method (implicit midpoint is
Gauss–Legendre 2) is symplectic, hence volume preserving; ``lphnn`` with one keeps the Casimir (a quadratic
invariant of the field); nothing with ``rk4``, and nothing for ``divfree`` and ``node`` (a collocation method is
not volume preserving in dim ≥ 3; roll ``divfree`` out with ``splitting`` for that). What the field keeps
is ``field_preserves`` (``"divergence_free"``, ``"energy"``: H_θ is a first integral, ``"casimir"``), audited
by [`assert_field_preserves`][vpintegrator.testing.assert_field_preserves].
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import VPIntegratorError
from ..integrators.coefficients import RK4, gauss_legendre
from ..integrators.explicit import explicit_rk_step
from ..nn.common import check_positive_int
from ..nn.mlp_bank import MLPBank
from .registry import _record_config, register_model

__all__ = ["VectorFieldModel", "HamiltonianNet", "LiePoissonHamiltonianNet", "DivergenceFreeField", "NeuralODE",
           "FIELD_METHODS", "gauss_legendre_tableau"]

#: the classical methods of the training window map (torch); the rollout takes any registered integrator
FIELD_METHODS = ("rk4", "implicit_midpoint", "gauss_legendre4", "gauss_legendre6")
#: Gauss–Legendre stages of each collocation method
_STAGES = {"implicit_midpoint": 1, "gauss_legendre4": 2, "gauss_legendre6": 3}


def gauss_legendre_tableau(s: int) -> tuple[np.ndarray, np.ndarray]:
    """``(A (s, s), b (s,))`` of the s-stage Gauss–Legendre method (order 2s), from
    ``vpintegrator.integrators.coefficients`` (the tableau every path reads)."""
    A, b, _ = gauss_legendre(s)
    return A, b


def _check_method(method: Any) -> str:
    if method not in FIELD_METHODS:
        raise VPIntegratorError(f"method: the training step of a vector-field model is one of "
                                f"{', '.join(FIELD_METHODS)}; got {method!r}")
    return str(method)


def _converged(delta: torch.Tensor, bound: torch.Tensor) -> bool | None:
    """``delta <= bound`` as a Python bool, or None under a ``torch.func`` transform (no data-dependent stop)."""
    try:
        return bool(delta <= bound)
    except RuntimeError:
        return None


class VectorFieldModel(nn.Module):
    """A learned field f_θ and its window map, ``substeps`` steps of ``method`` (module docstring).

    Subclasses set ``model_name``, the bank of networks (``self.net``, an `MLPBank`), ``field_order``
    (the derivative order of the bank the field needs) and define ``assemble(z, out, G)`` and
    ``assemble_jacobian(z, out, G, H)``, written with array methods and ``xp`` functions only, so the same
    formulas give the torch field (training) and the NumPy float64 field and Jacobian (rollout).

    Parameters (every family)
    -------------------------
    dim : int
    dt : float or None
        The data's step: ``vp-train`` and ``fit`` fill it from the data when the ``[model]`` table gives none
        (0.1 only for windows without a step); None: the field only (``forward`` refuses).
    method : str
        One of ``FIELD_METHODS``: the training window map.
    substeps : int
        Steps of ``method`` per data step.
    width, depth : int
        Hidden units and hidden layers of the networks.
    seq_len : int
        Window length (``pred_window`` equals it): the window's next seq_len states, each state advanced by
        itself over seq_len data steps (1: one step z_n -> z_{n+1}).
    tol, max_iter : float, int
        Stopping rule of the implicit methods' fixed-point iteration.
    """

    model_name = ""
    field_order = 0
    field_preserves: tuple[str, ...] = ()
    shear_splittable = False
    invariant_names: tuple[str, ...] = ()

    #: set by __init__ (declared for type checkers)
    dim: int
    seq_len: int
    pred_window: int
    config: dict[str, Any]
    net: MLPBank

    def _setup(self, dim: int, dt: float | None, method: str, substeps: int, width: int, depth: int, seq_len: int,
               tol: float, max_iter: int) -> None:
        self.dim = check_positive_int(dim, "dim")
        if dt is not None:
            if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not (np.isfinite(dt) and dt > 0):
                raise VPIntegratorError(f"dt: expected a positive finite step (the data's), got {dt!r}")
            dt = float(dt)
        self.dt = dt
        self.method: str = _check_method(method)
        self.substeps: int = check_positive_int(substeps, "substeps")
        check_positive_int(width, "width")
        check_positive_int(depth, "depth")
        self.seq_len: int = check_positive_int(seq_len, "seq_len")
        self.pred_window: int = self.seq_len
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (np.isfinite(tol) and tol > 0):
            raise VPIntegratorError(f"tol: expected a positive number (the fixed-point tolerance), got {tol!r}")
        self.tol: float = float(tol)
        self.max_iter: int = check_positive_int(max_iter, "max_iter")
        self._iterations: int | None = None  # what the last plain call of an implicit method needed
        if self.method != "rk4":
            A, b = gauss_legendre_tableau(_STAGES[self.method])
            self._A = [[float(v) for v in row] for row in A]
            self._b = [float(v) for v in b]

    @property
    def preserves(self) -> tuple[str, ...]:
        """What the window map keeps (the field's structure and the method together; module docstring)."""
        return ()

    # -- the field ----------------------------------------------------------------------------------
    def field(self, z: torch.Tensor) -> torch.Tensor:
        """f_θ(z); z (n, dim) -> (n, dim), in torch (differentiable)."""
        out, G, _ = self.net(z, self.field_order)
        return self.assemble(z, out, G, torch)

    @staticmethod
    def assemble(z: Any, out: Any, G: Any, xp: Any) -> Any:
        """The field from the bank's values ``out`` (n, K, m) and input Jacobian ``G`` (n, K, m, dim)."""
        raise NotImplementedError

    @staticmethod
    def assemble_jacobian(z: Any, out: Any, G: Any, H: Any, xp: Any) -> Any:
        """The field's Jacobian (n, dim, dim) from the bank's derivatives up to ``field_order + 1``."""
        raise NotImplementedError

    def invariant_values(self, z: Any, out: Any) -> dict[str, Any]:
        """The field's own first integrals at z (n, dim) from the bank's values ``out``: {name: (n,)}."""
        return {}

    # -- the window map -------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x : (batch, seq_len, dim) -> (batch, seq_len, dim), every state advanced by seq_len data steps
        (``substeps`` steps of ``method`` per data step dt); one window (seq_len, dim) -> (seq_len, dim)."""
        if self.dt is None:
            raise VPIntegratorError(f"{self.model_name}: no step dt; give the model's dt (vp-train fills it from "
                                    "the data's)")
        if x.ndim not in (2, 3) or x.shape[-1] != self.dim:
            raise VPIntegratorError(f"{self.model_name}: expected input (batch, seq, {self.dim}) or (seq, "
                                    f"{self.dim}); got shape {tuple(x.shape)}")
        shape = x.shape
        z = x.reshape(-1, self.dim)  # (batch·seq, dim): each state by itself
        # the window's next seq_len states: each state advanced by seq_len data steps
        h = self.dt / self.substeps
        for _ in range(self.substeps * self.pred_window):
            z = self._rk4(z, h) if self.method == "rk4" else self._collocation(z, h)
        return z.reshape(shape)

    def _rk4(self, z: torch.Tensor, h: float) -> torch.Tensor:
        return explicit_rk_step(self.field, z, h, RK4)

    def field_and_jacobian(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """f_θ(z) (n, dim) and its Jacobian (n, dim, dim), in torch (differentiable)."""
        out, G, H = self.net(z, self.field_order + 1)
        return self.assemble(z, out, G, torch), self.assemble_jacobian(z, out, G, H, torch)

    def _collocation(self, z: torch.Tensor, h: float) -> torch.Tensor:
        """One Gauss–Legendre step: the stages K (n, s·dim) by Newton's method on K_i = f(z + h Σ_j A_ij K_j)."""
        A, b, s = self._A, self._b, len(self._b)
        n, d = z.shape
        K = self.field(z).repeat(1, s)  # (n, s·dim), the stages side by side
        eye = torch.eye(s * d, dtype=z.dtype, device=z.device)
        bound = max(self.tol, 10.0 * float(torch.finfo(z.dtype).eps)) * (1.0 + z.detach().abs().max())
        budget = self.max_iter if self._iterations is None else min(self.max_iter, self._iterations + 2)
        done: bool | None = False
        used = 0
        for used in range(1, self.max_iter + 1):
            Ks = [K[:, j * d:(j + 1) * d] for j in range(s)]
            Z = torch.cat([z + h * sum(A[i][j] * Ks[j] for j in range(s)) for i in range(s)])  # (s·n, dim)
            F, J = self.field_and_jacobian(Z)  # (s·n, dim), (s·n, dim, dim)
            R = K - torch.cat([F[i * n:(i + 1) * n] for i in range(s)], dim=1)  # (n, s·dim)
            # ∂R_i/∂K_j = δ_ij I − h A_ij Df(Z_i)
            M = eye - torch.cat([torch.cat([h * A[i][j] * J[i * n:(i + 1) * n] for j in range(s)], dim=2)
                                 for i in range(s)], dim=1)  # (n, s·dim, s·dim)
            step = torch.linalg.solve(M, R.unsqueeze(-1)).squeeze(-1)
            K = K - step
            done = _converged(h * step.detach().abs().max(), bound)
            if done or (done is None and used >= budget):
                break
        if done:
            self._iterations = used
        return z + h * sum(b[i] * K[:, i * d:(i + 1) * d] for i in range(s))


# -------------------------------------------------------------------------------------------- families


@register_model(defaults=dict(method="implicit_midpoint", substeps=1, width=32, depth=2))
class HamiltonianNet(VectorFieldModel):
    """Hamiltonian neural network: f = J∇H_θ, state (q, p) = (z[:n], z[n:]), dim = 2n.

    Learnable scalars (H_θ one MLP of ``depth`` hidden layers of ``width``): width·(dim + 1) + (depth − 1)·
    width·(width + 1) + width + 1; dim 4, width 32, depth 2: 1 249. Parameters as
    [`VectorFieldModel`][vpintegrator.models.VectorFieldModel].
    """

    model_name = "hnn"
    example_dim = 4
    field_order = 1
    field_preserves: tuple[str, ...] = ("energy", "divergence_free")
    invariant_names: tuple[str, ...] = ("energy",)

    def __init__(self, dim: int, dt: float | None = 0.1, method: str = "implicit_midpoint", substeps: int = 1,
                 width: int = 32, depth: int = 2, seq_len: int = 1, tol: float = 1e-14, max_iter: int = 20) -> None:
        super().__init__()
        if isinstance(dim, int) and not isinstance(dim, bool) and dim % 2:
            raise VPIntegratorError(f"dim: a Hamiltonian network acts on (q, p) states: dim must be even, got {dim}")
        self._setup(dim, dt, method, substeps, width, depth, seq_len, tol, max_iter)
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.net: MLPBank = MLPBank(dim, 1, 1, width, depth, out_bias=False)

    @property
    def preserves(self) -> tuple[str, ...]:
        return ("symplectic", "volume") if self.method in _STAGES else ()

    @staticmethod
    def assemble(z: Any, out: Any, G: Any, xp: Any) -> Any:
        g = G[:, 0, 0, :]  # ∇H (n, dim)
        n = g.shape[-1] // 2
        return xp.concatenate([g[:, n:], -g[:, :n]], axis=-1)  # (∂H/∂p, −∂H/∂q)

    @staticmethod
    def assemble_jacobian(z: Any, out: Any, G: Any, H: Any, xp: Any) -> Any:
        hess = H[:, 0, 0]  # (n, dim, dim)
        n = hess.shape[-1] // 2
        return xp.concatenate([hess[:, n:, :], -hess[:, :n, :]], axis=-2)

    def invariant_values(self, z: Any, out: Any) -> dict[str, Any]:
        return {"energy": out[:, 0, 0]}


@register_model(defaults=dict(method="implicit_midpoint", substeps=1, width=32, depth=2))
class LiePoissonHamiltonianNet(VectorFieldModel):
    """Lie–Poisson Hamiltonian network on so(3)*: f = z × ∇H_θ(z), dim 3.

    z·f = 0 (the Casimir ‖z‖² is a first integral) and ∇H_θ·f = 0 (so is H_θ); the field is divergence free.
    A Gauss–Legendre step keeps ‖z‖² to round-off (a quadratic invariant). Learnable scalars as
    [`HamiltonianNet`][vpintegrator.models.HamiltonianNet] at dim 3: width 32, depth 2 give 1 217.
    """

    model_name = "lphnn"
    field_order = 1
    field_preserves: tuple[str, ...] = ("casimir", "energy", "divergence_free")
    invariant_names: tuple[str, ...] = ("casimir", "energy")

    def __init__(self, dim: int, dt: float | None = 0.1, method: str = "implicit_midpoint", substeps: int = 1,
                 width: int = 32, depth: int = 2, seq_len: int = 1, tol: float = 1e-14, max_iter: int = 20) -> None:
        super().__init__()
        if isinstance(dim, int) and not isinstance(dim, bool) and dim != 3:
            raise VPIntegratorError(f"dim: the Lie–Poisson Hamiltonian network acts on so(3)* (the rigid body): dim "
                                    f"must be 3, got {dim}")
        self._setup(dim, dt, method, substeps, width, depth, seq_len, tol, max_iter)
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.net: MLPBank = MLPBank(dim, 1, 1, width, depth, out_bias=False)

    @property
    def preserves(self) -> tuple[str, ...]:
        return ("casimir",) if self.method in _STAGES else ()

    @staticmethod
    def assemble(z: Any, out: Any, G: Any, xp: Any) -> Any:
        g = G[:, 0, 0, :]  # ∇H (n, 3)
        return z[:, [1, 2, 0]] * g[:, [2, 0, 1]] - z[:, [2, 0, 1]] * g[:, [1, 2, 0]]  # z × ∇H

    @staticmethod
    def assemble_jacobian(z: Any, out: Any, G: Any, H: Any, xp: Any) -> Any:
        g, hess = G[:, 0, 0, :], H[:, 0, 0]  # (n, 3), (n, 3, 3)
        # d(z × g) = dz × g + z × (Hess dz): column l of the first term is e_l × g
        zx = z[:, [1, 2, 0], None] * hess[:, [2, 0, 1], :] - z[:, [2, 0, 1], None] * hess[:, [1, 2, 0], :]
        zero = 0.0 * g[:, 0]
        gx = xp.stack([xp.stack([zero, g[:, 2], -g[:, 1]], axis=-1),
                       xp.stack([-g[:, 2], zero, g[:, 0]], axis=-1),
                       xp.stack([g[:, 1], -g[:, 0], zero], axis=-1)], axis=-2)  # [i, l] = (e_l × g)_i
        return zx + gx

    def invariant_values(self, z: Any, out: Any) -> dict[str, Any]:
        return {"casimir": (z * z).sum(-1), "energy": out[:, 0, 0]}


@register_model(defaults=dict(method="rk4", substeps=1, width=16, depth=2))
class DivergenceFreeField(VectorFieldModel):
    """Divergence-free field in shear form: f_i(z) = g_i(z_1, …, z_{i−1}, z_{i+1}, …, z_dim), any dim ≥ 2.

    Each g_i is its own tanh MLP whose input weight on z_i is masked to 0, so ∂f_i/∂z_i = 0 and div f = 0
    exactly; the field is ``shear_splittable`` (each shear flow z_i ← z_i + t f_i(z) is exact), so the
    ``splitting`` integrator rolls it out exactly volume preserving. Learnable scalars: dim·(width·(dim + 1) +
    (depth − 1)·width·(width + 1) + width + 1) (the masked weights stored, never used); dim 3, width 16,
    depth 2: 1 059.
    """

    model_name = "divfree"
    field_order = 0
    field_preserves: tuple[str, ...] = ("divergence_free",)
    shear_splittable = True

    def __init__(self, dim: int, dt: float | None = 0.1, method: str = "rk4", substeps: int = 1,
                 width: int = 16, depth: int = 2, seq_len: int = 1, tol: float = 1e-14, max_iter: int = 20) -> None:
        super().__init__()
        check_positive_int(dim, "dim", minimum=2)
        self._setup(dim, dt, method, substeps, width, depth, seq_len, tol, max_iter)
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.net: MLPBank = MLPBank(dim, dim, 1, width, depth, mask=1.0 - torch.eye(dim))

    @staticmethod
    def assemble(z: Any, out: Any, G: Any, xp: Any) -> Any:
        return out[:, :, 0]  # (n, dim): component i from network i

    @staticmethod
    def assemble_jacobian(z: Any, out: Any, G: Any, H: Any, xp: Any) -> Any:
        return G[:, :, 0, :]  # [i, j] = ∂g_i/∂z_j, 0 on the diagonal


@register_model(defaults=dict(method="rk4", substeps=1, width=32, depth=2))
class NeuralODE(VectorFieldModel):
    """Unstructured neural ODE: f_θ a tanh MLP ℝ^dim → ℝ^dim (the control; it keeps nothing).

    Learnable scalars: width·(dim + 1) + (depth − 1)·width·(width + 1) + dim·(width + 1); dim 3, width 32,
    depth 2: 1 283.
    """

    model_name = "node"
    field_order = 0

    def __init__(self, dim: int, dt: float | None = 0.1, method: str = "rk4", substeps: int = 1,
                 width: int = 32, depth: int = 2, seq_len: int = 1, tol: float = 1e-14, max_iter: int = 20) -> None:
        super().__init__()
        self._setup(dim, dt, method, substeps, width, depth, seq_len, tol, max_iter)
        self.config: dict[str, Any] = _record_config(self, self.model_name, locals())
        self.net: MLPBank = MLPBank(dim, 1, dim, width, depth)

    @staticmethod
    def assemble(z: Any, out: Any, G: Any, xp: Any) -> Any:
        return out[:, 0, :]

    @staticmethod
    def assemble_jacobian(z: Any, out: Any, G: Any, H: Any, xp: Any) -> Any:
        return G[:, 0]
