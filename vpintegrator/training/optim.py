"""The loss, the optimisers (torch's by name and Levenberg–Marquardt), and the learning-rate schedules.

``relative_loss`` is the reference loss ``‖prediction − target‖_F / ‖target‖_F`` over a whole batch.
[`make_optimizer`][vpintegrator.training.make_optimizer] builds a torch optimiser by name with the reference defaults (Adam: betas
(0.9, 0.99), eps 1e-8); [`make_scheduler`][vpintegrator.training.make_scheduler] a closed-form ``LambdaLR`` (a resumed run reproduces it
bit for bit). [`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] is a ``torch.optim.Optimizer`` whose closure returns residuals
instead of a loss; ``LMSubsample`` drives it on random subsamples of training windows
(``optimizer = "lm"``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch

from ..arrays import relative_loss, squared_norm
from ..errors import VPIntegratorError
from .config import OPTIMIZERS as _OPTIMIZERS
from .config import list_optimizers, list_schedulers

__all__ = [
    "relative_loss",
    "list_optimizers",
    "make_optimizer",
    "list_schedulers",
    "make_scheduler",
    "window_residuals",
    "trainable",
    "lm_update",
    "restart_damping",
    "draw_subsample",
    "LevenbergMarquardt",
    "LMSubsample",
]


#: ``label(name)``: a ``torch.profiler`` region naming a phase in profiles (near-free when no profiler runs)
label: Callable[[str], contextlib.AbstractContextManager[Any]] = torch.profiler.record_function


# ---------------------------------------------------------------------------------------------------
# torch optimisers and schedules

#: optimisers built fused (torch's one-kernel implementation, CPU and CUDA) unless the config sets
#: ``foreach`` or ``fused`` in ``optimizer_kwargs``
_FUSED = ("adam", "adamw")


def _fusable(params) -> bool:
    """Whether torch's fused Adam takes these parameters (floating, all on the CPU or all on one CUDA device)."""
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    devices = {p.device for p in tensors}
    return bool(tensors) and len(devices) == 1 and next(iter(devices)).type in ("cpu", "cuda") and all(
        p.is_floating_point() and not p.is_complex() for p in tensors)


def make_optimizer(name: str, params, lr: float, **kwargs: Any) -> torch.optim.Optimizer:
    """A torch optimiser by name; ``kwargs`` go over our defaults (Adam: betas (0.9, 0.99), eps 1e-8).

    Adam and AdamW are torch's fused implementation (``fused=True``: 2 ops per step for all parameters
    instead of ~9 per parameter tensor) unless ``kwargs`` set ``foreach`` or ``fused``.
    """
    if name == "lm":
        raise VPIntegratorError(
            "optimizer 'lm' (Levenberg–Marquardt) is not a torch optimiser of the loss: use fit(..., "
            f"optimizer='lm') or LevenbergMarquardt; make_optimizer takes {', '.join(sorted(_OPTIMIZERS))}",
            key="optimizer",
        )
    if name not in _OPTIMIZERS:
        raise VPIntegratorError(
            f"optimizer: unknown optimizer {name!r}; valid: {', '.join(list_optimizers())}", key="optimizer"
        )
    cls_name, defaults = _OPTIMIZERS[name]
    options = {**defaults, **kwargs}
    if "betas" in options:
        options["betas"] = tuple(options["betas"])
    cls = getattr(torch.optim, cls_name)
    params = list(params)
    if name in _FUSED and not {"foreach", "fused"} & set(options) and _fusable(params):
        options["fused"] = True  # one kernel for all parameters instead of ~9 ops per parameter tensor
    try:
        return cls(params, lr=lr, **options)
    except (TypeError, ValueError) as err:
        raise VPIntegratorError(
            f"optimizer_kwargs for {name!r} (torch.optim.{cls_name}): {' '.join(str(err).split())}",
            key="optimizer_kwargs",
        ) from None


def _exponential(ratio: float, horizon: float) -> Callable[[int], float]:
    log_ratio = math.log(ratio)

    def factor(k: int) -> float:  # closed form: no drift from repeated multiplication
        return math.exp(log_ratio * min(k / horizon, 1.0))

    return factor


def _cosine(ratio: float, horizon: float) -> Callable[[int], float]:
    def factor(k: int) -> float:
        return ratio + (1.0 - ratio) * 0.5 * (1.0 + math.cos(math.pi * min(k / horizon, 1.0)))

    return factor


def _constant(ratio: float, horizon: float) -> Callable[[int], float]:
    def factor(k: int) -> float:
        return 1.0

    return factor


_SCHEDULERS = {"exponential": _exponential, "cosine": _cosine, "constant": _constant}


def make_scheduler(
    name: str, optimizer: torch.optim.Optimizer, lr_min_ratio: float, horizon: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` taking lr to ``lr_min_ratio · lr`` over ``horizon`` scheduler steps, then holding.

    ``exponential``: lr · ratio^(k/horizon); ``cosine``: lr_min + (lr − lr_min)(1 + cos(π k/horizon))/2;
    ``constant``: lr. Closed forms of step ``k``, so a resumed run reproduces them bit for bit.
    """
    if name not in _SCHEDULERS:
        raise VPIntegratorError(
            f"scheduler: unknown scheduler {name!r}; valid: {', '.join(list_schedulers())}", key="scheduler"
        )
    factor = _SCHEDULERS[name](lr_min_ratio, max(float(horizon), 1.0))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ---------------------------------------------------------------------------------------------------
# Levenberg–Marquardt


def window_residuals(model: torch.nn.Module, own_buffers: bool = False) -> tuple[Callable, Callable]:
    """The model's window residuals as functions of a flat parameter vector (for Gauss–Newton methods).

    Returns ``(residual, jacobian)``: ``residual(theta, x, target)`` with x (n, seq_len, dim) and target
    (n, pred_window, dim) gives ``model_theta(x) − target`` flattened to (n, pred_window·dim);
    ``jacobian(theta, x, target)`` gives its Jacobian per window, (n, pred_window·dim, n_params)
    (``vmap`` of ``jacrev``). ``theta`` holds the *trainable* parameters (``requires_grad``) in
    ``parameters_to_vector`` order (``trainable``); frozen parameters are constants, like the buffers.
    Buffers and frozen parameters are taken from the model as they are, or with ``own_buffers`` given as
    the second argument (``residual(theta, buffers, x, target)``, a dict of the model's buffers and frozen
    parameters by name: the form an ensemble ``vmap``s over its members).
    """
    from torch.func import functional_call, jacrev, vmap

    named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    model_buffers = {**dict(model.named_buffers()),
                     **{k: p.detach() for k, p in model.named_parameters() if not p.requires_grad}}

    def unflatten(theta: torch.Tensor) -> dict[str, torch.Tensor]:
        out, i = {}, 0
        for k, p in named:
            out[k] = theta[i : i + p.numel()].view(p.shape)
            i += p.numel()
        return out

    def residual_p(params, buffers, x, target):  # (n, P*dim)
        return (functional_call(model, {**params, **buffers}, (x,)) - target).flatten(1)

    def residual_b(theta, buffers, x, target):
        return residual_p(unflatten(theta), buffers, x, target)

    def residual1(params, buffers, x1, t1):  # one window: (P*dim,)
        return residual_p(params, buffers, x1[None], t1[None])[0]

    def jacobian1(theta, buffers, x1, t1):  # (P*dim, n_params)
        # by parameter tensor, not through slices of theta: their backward would fill a zero (P*dim, n_params)
        # per parameter tensor and window, which dominated the cost (and grows with an ensemble's members)
        J = jacrev(residual1)(unflatten(theta), buffers, x1, t1)
        # J[k]: (P*dim, *p.shape); a 0-d parameter (a scalar bias, e.g. the Lie–Poisson ψ's d) gives (P*dim,)
        return torch.cat([J[k].reshape(J[k].shape[0], -1) for k, _ in named], 1)

    jacobian_b = vmap(jacobian1, in_dims=(None, None, 0, 0))
    if own_buffers:
        return residual_b, jacobian_b
    return (lambda theta, x, target: residual_b(theta, model_buffers, x, target),
            lambda theta, x, target: jacobian_b(theta, model_buffers, x, target))


def trainable(params) -> list[torch.Tensor]:
    """The parameters LM moves: those with ``requires_grad`` (frozen ones never change, as with torch's
    optimisers)."""
    return [p for p in params if p.requires_grad]


def lm_update(theta: torch.Tensor, J: torch.Tensor, r: torch.Tensor, lam: torch.Tensor,
              cost: Callable[[torch.Tensor], torch.Tensor],
              accept: Callable[[torch.Tensor], torch.Tensor] | None = None, max_tries: int = 10,
              active: torch.Tensor | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Levenberg–Marquardt iteration of N independent least-squares problems (a member axis; N = 1 for
    one model): the arithmetic of [`LevenbergMarquardt`][vpintegrator.training.LevenbergMarquardt] and of an ensemble's LM alike.

    Problem ``k`` solves ``(J_kᵀJ_k + λ_k diag(J_kᵀJ_k)) δ = −J_kᵀr_k`` in float64 (batched over k) and
    accepts ``θ_k + δ`` if ``cost`` (``‖r‖²`` at the candidate) is finite and lower than ``‖r_k‖²`` and
    ``accept`` holds: λ_k ← max(λ_k/3, 1e-12); else (a singular system included) λ_k ← min(2λ_k, 1e12) and
    it solves again, ``max_tries`` solves in all. Each problem decides for itself (a masked update); the
    ones still trying are solved together.

    Parameters
    ----------
    theta : Tensor (N, n_params)
        The parameters (any floating dtype; candidates are made in it).
    J : Tensor (N, n_residuals, n_params)
    r : Tensor (N, n_residuals)
        Residuals at ``theta`` and their Jacobian.
    lam : Tensor (N,) float64
        The dampings λ.
    cost : callable
        ``cost(candidates (N, n_params))``: the squared residual norms there, (N,) float64.
    accept : callable, optional
        ``accept(candidates)``: (N,) bool, an extra condition a candidate must meet.
    active : Tensor (N,) bool, optional
        The problems that try a step (default all); the others keep their parameters and λ (a stuck one).

    Returns
    -------
    (theta, lam, accepted, cost0): the new parameters (the old ones where not accepted), the new λ,
    whether each problem moved (N,) bool, and ``‖r‖²`` before the step (N,) float64.
    """
    J, r = J.double(), r.double()
    cost0 = r.square().sum(1)
    H = J.mT @ J  # (N, n_params, n_params), float64 whatever the model dtype
    g = J.mT @ r.unsqueeze(-1)
    D = torch.diag_embed(torch.diagonal(H, dim1=-2, dim2=-1).clamp_min(1e-12))
    lam = lam.to(device=H.device, dtype=torch.float64).clone()  # the dampings live where H does (CUDA)
    trying = torch.ones_like(cost0, dtype=torch.bool) if active is None else active.to(cost0.device).clone()
    accepted = torch.zeros_like(trying)
    out = theta.clone()
    for _ in range(int(max_tries) if active is None or bool(trying.any()) else 0):  # none trying: no solve
        delta, info = torch.linalg.solve_ex(H + lam[:, None, None] * D, -g)
        new = theta + delta.squeeze(-1).to(theta.dtype)
        new_cost = cost(new)
        good = trying & (info == 0) & torch.isfinite(new_cost) & (new_cost < cost0)
        if accept is not None and bool(good.any()):  # only where a candidate lowers its cost
            good &= accept(new)
        out = torch.where(good[:, None], new, out)
        lam = torch.where(good, (lam / LevenbergMarquardt.DOWN).clamp_min(LevenbergMarquardt.LAM_MIN),
                          torch.where(trying, (lam * LevenbergMarquardt.UP).clamp_max(LevenbergMarquardt.LAM_MAX),
                                      lam))
        accepted |= good
        trying &= ~good
        if not bool(trying.any()):  # the step's host sync: every problem has moved
            break
    return out, lam, accepted, cost0


def restart_damping(lam: torch.Tensor, accepted: torch.Tensor, lam0: float, restarts: torch.Tensor,
                    stuck: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LM's damping at its cap, per problem (N,): a step that was not accepted and left λ at ``LAM_MAX``
    (every solve of it rejected, the last at the cap, where steps are ~1e-12 of a gradient step) restarts λ
    from ``lam0`` (``lm_lambda``) while the problem has restarted fewer than ``LevenbergMarquardt.RESTARTS``
    times; the next time at the cap it is ``stuck`` (a run stops: ``stopped = "lm_stuck"``, never a plateau).
    Returns the new (λ, restarts, stuck)."""
    restarts, stuck = restarts.to(lam.device), stuck.to(lam.device)
    capped = ~accepted.to(lam.device) & (lam >= LevenbergMarquardt.LAM_MAX) & ~stuck
    again = capped & (restarts < LevenbergMarquardt.RESTARTS)
    lam = torch.where(again, torch.full_like(lam, float(lam0)), lam)
    return lam, restarts + again.to(restarts.dtype), stuck | (capped & ~again)


def draw_subsample(generator: torch.Generator, n: int, n_windows: int, check_windows: int
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LM's random subsample of ``n_windows`` of ``n`` windows from ``generator`` (one permutation), and
    ``check_windows`` others (disjoint from it where the data allow; None for 0)."""
    perm = torch.randperm(n, generator=generator)
    index = perm[: min(n_windows, n)]
    check = None
    if check_windows > 0:
        rest = perm[index.numel():]
        check = (rest if rest.numel() else perm)[:check_windows]
    return index, check


class LevenbergMarquardt(torch.optim.Optimizer):
    """Levenberg–Marquardt behind the ``torch.optim.Optimizer`` interface.

    [`step`][vpintegrator.training.LevenbergMarquardt.step] takes a closure that returns *residuals*: ``closure(theta)`` is the residual vector
    ``r(θ)`` (any shape; flattened) at the flat parameter vector ``theta``
    (``parameters_to_vector`` order of the parameters with ``requires_grad``: frozen ones are not in θ and
    never change) and must not change the parameters. Optional attributes of
    the closure: ``closure.jacobian(theta)``, the Jacobian (n_residuals, n_params) (default
    ``torch.func.jacrev(closure)``), and ``closure.accept(theta)``, an extra condition a candidate must
    meet. One step solves ``(JᵀJ + λ diag(JᵀJ)) δ = −Jᵀr`` in float64 and accepts ``θ + δ`` if ``‖r‖²``
    decreases (λ ← λ/3), else λ ← 2λ and it retries (``max_tries`` solves in all). λ lives in the param
    group (``param_groups[0]["lam"]``), so ``state_dict``/``load_state_dict`` carry it. A step rejected with
    λ at its cap (``LAM_MAX``) restarts λ from its initial value, at most ``RESTARTS`` times; the next time
    the optimiser is ``stuck`` and takes no more steps (``restart_damping``; ``fit`` stops the run with
    ``stopped = "lm_stuck"``).

    Parameters
    ----------
    params : iterable of parameters (one param group)
    lam : float
        Initial damping λ.
    max_tries : int
        Solves per step before giving up (the parameters then stay).
    """

    UP, DOWN, LAM_MIN, LAM_MAX = 2.0, 3.0, 1e-12, 1e12
    #: how many times a run's damping restarts from its initial value after reaching LAM_MAX on a rejected
    #: step; the next time at the cap it is stuck
    RESTARTS = 2

    #: set by __init__ (declared for type checkers)
    accepted: bool

    def __init__(self, params, lam: float = 1e-3, max_tries: int = 10) -> None:
        if not (isinstance(lam, (int, float)) and 0 < lam < math.inf):
            raise VPIntegratorError(f"lm_lambda must be a positive number; got {lam!r}", key="lm_lambda")
        params = trainable(params)
        if not params:
            raise VPIntegratorError("LevenbergMarquardt: no parameter has requires_grad; nothing to train")
        super().__init__(params, dict(lam=float(lam), max_tries=int(max_tries), lam0=float(lam), restarts=0,
                                      stuck=False))
        if len(self.param_groups) != 1:
            raise VPIntegratorError("LevenbergMarquardt takes one parameter group")
        self.accepted = False  # whether the last step was accepted

    @property
    def lam(self) -> float:
        """The damping λ now."""
        return float(self.param_groups[0]["lam"])

    @lam.setter
    def lam(self, value: float) -> None:
        self.param_groups[0]["lam"] = float(value)

    @property
    def restarts(self) -> int:
        """How many times λ restarted from its initial value after reaching its cap (``restart_damping``)."""
        return int(self.param_groups[0].get("restarts", 0))

    @property
    def stuck(self) -> bool:
        """Whether λ reached its cap again after its last restart: the optimiser takes no more steps."""
        return bool(self.param_groups[0].get("stuck", False))

    def step(self, closure: Callable[[torch.Tensor], torch.Tensor]) -> float:  # type: ignore[override]
        """One LM iteration (``lm_update`` with one problem, then ``restart_damping``); returns the loss
        ``‖r‖`` before it (``self.accepted`` tells whether it moved; a ``stuck`` optimiser does not try)."""
        group = self.param_groups[0]
        params = group["params"]
        theta = torch.nn.utils.parameters_to_vector(params).detach()
        if self.stuck:
            self.accepted = False
            with torch.no_grad():
                return math.sqrt(float(closure(theta).double().square().sum()))
        jacobian = getattr(closure, "jacobian", None)
        with label("vp/lm_jacobian"):
            if jacobian is None:
                from torch.func import jacrev

                J = jacrev(lambda th: closure(th).flatten())(theta)
            else:
                J = jacobian(theta)
        check = getattr(closure, "accept", None)
        accept = None if check is None else lambda new: torch.tensor([bool(check(new[0]))])
        with torch.no_grad():
            r = closure(theta).flatten()
            new, lam, accepted, cost0 = lm_update(
                theta[None], J[None], r[None], torch.tensor([self.lam], dtype=torch.float64),
                lambda new: closure(new[0]).double().square().sum()[None], accept, group["max_tries"])
            lam, restarts, stuck = restart_damping(lam, accepted, group.get("lam0", self.lam),
                                                   torch.tensor([self.restarts]), torch.tensor([self.stuck]))
            group["restarts"], group["stuck"] = int(restarts[0]), bool(stuck[0])
            self.lam, self.accepted = float(lam[0]), bool(accepted[0])
            if self.accepted:
                torch.nn.utils.vector_to_parameters(new[0], params)
        return math.sqrt(float(cost0[0]))


class LMSubsample:
    """Levenberg–Marquardt on random subsamples of training windows (``optimizer = "lm"``).

    Each ``step`` draws ``n_windows`` windows from ``generator`` (only every ``resample_every``-th
    iteration; in between it reuses them) and gives the optimiser the residual
    ``r = (pred − target) / ‖target‖_F`` of that subsample (flattened, so ``‖r‖`` is its reference loss)
    with its Jacobian per window (``torch.func``, in chunks). With ``check_windows`` it also draws that
    many other windows, and a step must not raise their loss. λ, the iteration count, the subsample and
    the generator state are the state (``state_dict``), so a resumed run continues exactly.
    """

    #: set by __init__ (declared for type checkers)
    n_windows: int
    resample_every: int
    chunk: int
    check_windows: int
    iteration: int

    def __init__(self, optimizer: LevenbergMarquardt, model: torch.nn.Module, dataset, generator: torch.Generator,
                 n_windows: int, resample_every: int, check_windows: int = 0, chunk: int = 2048) -> None:
        self.optimizer, self.dataset, self.generator = optimizer, dataset, generator
        self.n_windows, self.resample_every, self.chunk = int(n_windows), int(resample_every), int(chunk)
        self.check_windows = int(check_windows)
        self.iteration = 0
        self.index: torch.Tensor | None = None  # (n_windows,) the current subsample
        self.check: torch.Tensor | None = None  # (check_windows,) windows a step must not make worse
        self.params = trainable(model.parameters())
        self._residual, self._jac1 = window_residuals(model)

    def _jacobian(self, theta, x, target) -> torch.Tensor:  # (n*P*dim, n_params)
        parts = [self._jac1(theta, x[i : i + self.chunk], target[i : i + self.chunk])
                 for i in range(0, len(x), self.chunk)]
        return torch.cat(parts, 0).flatten(0, 1)

    def step(self) -> float:
        """One LM iteration on the current subsample; returns its loss before the step."""
        if self.index is None or self.iteration % self.resample_every == 0:
            self.index, self.check = draw_subsample(self.generator, len(self.dataset), self.n_windows,
                                                    self.check_windows)
        x, target = self.dataset.batch(self.index)
        scale = 1.0 / torch.sqrt(squared_norm(target))
        check_cost = self._check_cost(None)

        def closure(theta: torch.Tensor) -> torch.Tensor:
            return self._residual(theta, x, target) * scale

        closure.jacobian = lambda theta: self._jacobian(theta, x, target) * scale
        if self.check is not None:
            closure.accept = lambda theta: self._check_cost(theta) <= check_cost
        loss = self.optimizer.step(closure)
        self.iteration += 1
        return loss

    def _check_cost(self, theta: torch.Tensor | None) -> float:
        """Squared relative loss of the check windows at ``theta`` (None: the current weights); 0 if none."""
        if self.check is None:
            return 0.0
        if theta is None:
            theta = torch.nn.utils.parameters_to_vector(self.params).detach()
        with torch.no_grad():
            x, target = self.dataset.batch(self.check)
            r = self._residual(theta, x, target).double()
            value = float(squared_norm(r) / squared_norm(target.double()))
        return value if math.isfinite(value) else math.inf

    def state_dict(self) -> dict[str, Any]:
        empty = torch.zeros(0, dtype=torch.long)
        index = self.index if self.index is not None else empty
        check = self.check if self.check is not None else empty
        return {"lambda": self.optimizer.lam, "iteration": self.iteration, "index": index.cpu().clone(),
                "check": check.cpu().clone(), "generator": self.generator.get_state(),
                "restarts": self.optimizer.restarts, "stuck": self.optimizer.stuck}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.lam, self.iteration = float(state["lambda"]), int(state["iteration"])
        group = self.optimizer.param_groups[0]  # a state from before the restarts: none yet
        group["restarts"], group["stuck"] = int(state.get("restarts", 0)), bool(state.get("stuck", False))
        self.index = state["index"] if state["index"].numel() else None
        check = state.get("check")
        self.check = check if check is not None and check.numel() else None
        self.generator.set_state(state["generator"])
