"""Levenberg–Marquardt for a seed ensemble (``optimizer = "lm"`` with ``ensemble``/``seeds``): every member
takes the iterations its own single LM run (``vpintegrator.training.optim.LMSubsample``) would.

Member ``k`` draws its subsamples (and check windows) from its own generator, seeded with ``s_k`` as
``fit(seed=s_k)`` seeds the one it draws them from, so it sees the same sequence of windows; it has its own
residual ``(pred_k − target_k) / ‖target_k‖_F``, its own Jacobian and its own damping λ_k, adapted by its
own accept/reject decisions, restarted from ``lm_lambda`` at its cap and stuck (its parameters and λ then stay)
as its single run's (``vpintegrator.training.optim.restart_damping``). The work is batched over the members: the residuals and the per-window
Jacobians are ``vmap`` over the members of the single run's functions (``vpintegrator.training.optim.window_residuals``,
``jacrev`` of a ``functional_call``), and the damped normal equations of all members are solved together
by ``vpintegrator.training.optim.lm_update``, the arithmetic [`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] runs for one model; each
member's candidate is accepted or rejected on its own (a masked update). Parameters the template marks
``requires_grad=False`` are not in the members' vectors θ_k: they are constants of the residual, passed
with the buffers, and stay bit-identical.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ..arrays import squared_norm
from .optim import draw_subsample, label, lm_update, restart_damping, window_residuals

if TYPE_CHECKING:
    from .plan import LMPlan

__all__ = ["EnsembleLM"]


class EnsembleLM:
    """LM on random window subsamples for the stacked members of ``vpintegrator.training.ensemble.EnsembleSteps``.

    ``params`` are the stacked parameters (name → (N, *shape) leaf tensors, updated in place; those the
    ``template`` marks ``requires_grad=False`` are never changed), ``buffers`` the buffers (stacked along
    dim 0 for ``buffer_dim = 0``, shared for None), ``template`` the module they are evaluated with and
    ``generators`` the members' generators (seeded ``s_k``).
    """

    #: set by __init__ (declared for type checkers)
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    names: list[str]
    n: int
    n_windows: int
    resample_every: int
    check_windows: int
    chunk: int
    max_tries: int
    lam: torch.Tensor
    lam0: float
    restarts: torch.Tensor
    stuck: torch.Tensor
    iteration: int

    def __init__(self, template: torch.nn.Module, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                 buffer_dim: int | None, dataset, generators: list[torch.Generator], lm: LMPlan, chunk: int = 2048) -> None:
        from torch.func import vmap

        self.params, self.dataset, self.generators = params, dataset, generators
        # the flat vector's order: the trainable parameters; the frozen ones go with the buffers (per member)
        self.names = [name for name, p in template.named_parameters() if p.requires_grad]
        frozen = [name for name, p in template.named_parameters() if not p.requires_grad]
        self.buffers = {**buffers, **{k: params[k].detach() for k in frozen}}
        self.n = len(generators)
        self.n_windows, self.resample_every = int(lm.windows), int(lm.resample_every)
        self.check_windows, self.chunk, self.max_tries = int(lm.check_windows), int(chunk), 10
        first = next(iter(params.values()))
        self.lam0 = float(lm.lam)
        self.lam = torch.full((self.n,), self.lam0, dtype=torch.float64, device=first.device)
        self.restarts = torch.zeros(self.n, dtype=torch.long)  # per member: λ's restarts from lam0 at its cap
        self.stuck = torch.zeros(self.n, dtype=torch.bool)  # per member: at the cap again; it takes no more steps
        self.iteration = 0
        self.index: torch.Tensor | None = None  # (N, n_windows) the members' current subsamples
        self.check: torch.Tensor | None = None  # (N, check_windows) windows a member's step must not make worse
        residual, jacobian = window_residuals(template, own_buffers=True)
        dims = (0, {**{k: buffer_dim for k in buffers}, **{k: 0 for k in frozen}}, 0, 0)
        self._residual = vmap(residual, in_dims=dims)  # (N, n, P*dim)
        self._jac = vmap(jacobian, in_dims=dims)  # (N, n, P*dim, n_params)

    # -- the members' flat parameter vectors -------------------------------------------------------

    def theta(self) -> torch.Tensor:
        """(N, n_params): each member's parameters in ``parameters_to_vector`` order."""
        return torch.cat([self.params[k].detach().reshape(self.n, -1) for k in self.names], 1)

    def _set(self, theta: torch.Tensor) -> None:
        i = 0
        with torch.no_grad():
            for k in self.names:
                p = self.params[k]
                size = p[0].numel()
                p.copy_(theta[:, i : i + size].view(p.shape))
                i += size

    # -- one iteration ------------------------------------------------------------------------------

    def _windows(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The members' windows ``index`` (N, n): x (N, n, seq_len, dim), target (N, n, P, dim)."""
        n, b = index.shape
        x, target = self.dataset.batch(index.reshape(-1).to(self.lam.device))
        return x.reshape(n, b, *x.shape[1:]), target.reshape(n, b, *target.shape[1:])

    def _check_cost(self, theta: torch.Tensor, xc: torch.Tensor, tc: torch.Tensor) -> torch.Tensor:
        """(N,) squared relative loss of the members' check windows at ``theta`` (inf where not finite)."""
        r = self._residual(theta, self.buffers, xc, tc).double()
        value = squared_norm(r, start=1) / squared_norm(tc.double(), start=1)
        return torch.where(torch.isfinite(value), value, torch.full_like(value, math.inf))

    def step(self) -> torch.Tensor:
        """One LM iteration of every member on its current subsample: the members' losses before it (N,)."""
        if self.index is None or self.iteration % self.resample_every == 0:
            draws = [draw_subsample(g, len(self.dataset), self.n_windows, self.check_windows)
                     for g in self.generators]
            self.index = torch.stack([d[0] for d in draws])
            self.check = None if self.check_windows == 0 else torch.stack([d[1] for d in draws])  # type: ignore[misc]
        x, target = self._windows(self.index)
        scale = 1.0 / torch.sqrt(squared_norm(target, start=1))  # (N,)
        theta = self.theta()
        with label("vp/lm_jacobian"):
            parts = [self._jac(theta, self.buffers, x[:, i : i + self.chunk], target[:, i : i + self.chunk])
                     for i in range(0, x.shape[1], self.chunk)]
            J = torch.cat(parts, 1).flatten(1, 2) * scale[:, None, None]
        accept = None
        with torch.no_grad():
            r = self._residual(theta, self.buffers, x, target).flatten(1) * scale[:, None]
            if self.check is not None:
                xc, tc = self._windows(self.check)
                before = self._check_cost(theta, xc, tc)

                def accept(new: torch.Tensor) -> torch.Tensor:
                    return self._check_cost(new, xc, tc) <= before

            def cost(new: torch.Tensor) -> torch.Tensor:
                res = self._residual(new, self.buffers, x, target).flatten(1) * scale[:, None]
                return res.double().square().sum(1)

            new, lam, accepted, cost0 = lm_update(theta, J, r, self.lam, cost, accept, self.max_tries, ~self.stuck)
            lam, restarts, stuck = restart_damping(lam, accepted, self.lam0, self.restarts, self.stuck)
            self.lam, self.restarts, self.stuck = lam, restarts.cpu(), stuck.cpu()
            self._set(new)
        self.iteration += 1
        return cost0.sqrt()
