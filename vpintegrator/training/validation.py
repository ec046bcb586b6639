"""Validation by rollout: the score of ``monitor = "val_rollout"`` (the loss over a whole window set is
``vpintegrator.training.single.window_loss``, beside its one caller)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ..arrays import relative_drift, wrap
from ..data.trajectories import Trajectories, state_periods
from ..errors import VPIntegratorError
from ..stepping import iterate_windows
from ..systems.family import SystemFamily

__all__ = ["RolloutValidator"]


class RolloutValidator:
    """``monitor = "val_rollout"``: how well a model rolls out the validation trajectories.

    From each trajectory's first ``seq_len`` states the model is iterated on non-overlapping windows
    over ``n_steps`` steps; the reference is the data, continued beyond its horizon with the data's own
    generator through the rollout engine ([`vpintegrator.rollout.reference_step_map`][vpintegrator.rollout.steps.reference_step_map], as
    ``vp-rollout`` does). The score (``score``) is the relative error ‖ŷ − y‖/‖y‖, each error capped
    at ``CAP`` (a blown-up rollout scores CAP), averaged over the predicted steps (``error = "mean"``) or
    taken at the last one (``"final"``), then over the trajectories (periodic components wrapped, as in
    ``vpintegrator.metrics``; not for an observed run's channels); plus ``drift_weight`` times the
    largest maximum relative invariant drift per trajectory (capped at ``CAP``), averaged over them.

    The model's rollout is a plain torch loop on the training device rather than the engine's
    ``ModelStep``: it runs after every epoch, needs no NumPy round trip per step, and keeps the score
    the same function of the weights on every device and dtype.

    Parameters
    ----------
    val : Trajectories
        The validation trajectories as stored (``meta`` names the system, its parameters, dt, method).
    n_steps : int
        Steps of the rollout.
    seq_len, pred_window : int
        The model's window lengths.
    error : "mean" or "final"
        The error term (config key ``val_rollout_error``).
    drift_weight : float
        The weight of the invariant drift (config key ``val_rollout_drift_weight``; 0: none).
    observe : callable, optional
        The observation of an observed run (``Observation.apply``): ``val`` holds the full state, continued
        beyond its horizon in the full state, and the model is scored on the observed channels.
    """

    CAP = 10.0

    #: set by __init__ (declared for type checkers)
    ref: torch.Tensor
    seq_len: int
    pred_window: int
    error: str
    drift_weight: float
    initial: torch.Tensor

    def __init__(self, val: Trajectories, n_steps: int, seq_len: int, pred_window: int, error: str = "mean",
                 drift_weight: float = 0.0, observe: Callable[[np.ndarray], np.ndarray] | None = None,
                 call: Callable[[Any], Any] | None = None) -> None:
        if observe is not None and drift_weight > 0:
            raise VPIntegratorError(
                f"val_rollout_drift_weight = {drift_weight!r} with observe: the invariants need the full state, which "
                "an observed rollout does not predict; set val_rollout_drift_weight = 0", key="val_rollout_drift_weight")
        ref = np.asarray(val.y, dtype=np.float64)
        if n_steps > val.n_steps:
            from ..rollout import reference_step_map, rollout
            from ..rollout.family import step_for

            dt = val.dt  # a parametric file: each trajectory continued with its own parameters
            generator = step_for(val.system, lambda system: reference_step_map(val.meta, system, dt))
            cont = rollout(generator, ref[:, -1], dt, n_steps - val.n_steps)
            ref = np.concatenate([ref, cont.y[:, 1:]], axis=1)
        if observe is not None:  # (the full state continued, then observed: ``vpintegrator.data.observation``)
            ref = np.ascontiguousarray(observe(ref))
        self.ref = torch.as_tensor(ref[:, : n_steps + 1])  # (n_traj, n_steps + 1, dim), float64 on the CPU
        self.seq_len, self.pred_window = int(seq_len), int(pred_window)
        # how the model is called: itself, or a periodic normalisation's wrapped call (Normalisation.call)
        self.call = call or (lambda model: model)
        self.error, self.drift_weight = error, float(drift_weight)
        self.system = val.system
        self.period = None if observe is not None else state_periods(val.system, ref.shape[-1], val.meta)
        if self.drift_weight > 0:
            if not self.system.invariant_names or not self.system.torch_invariants:
                why = ("has no invariants" if not self.system.invariant_names
                       else "evaluates its invariants on NumPy arrays only (torch_invariants is False)")
                raise VPIntegratorError(
                    f"val_rollout_drift_weight = {drift_weight!r}: system {self.system.name!r} {why}; "
                    "set val_rollout_drift_weight = 0", key="val_rollout_drift_weight")
            # each invariant at each trajectory's first state: (n_invariants, n_traj)
            self.initial = torch.stack(list(self.system.invariants(self.ref[:, 0]).values()))
        self._cache: dict[tuple, torch.Tensor] = {}

    def _ref(self, param: torch.Tensor) -> torch.Tensor:
        key = (param.device, param.dtype)
        if key not in self._cache:
            self._cache = {key: self.ref.to(device=param.device, dtype=param.dtype)}
        return self._cache[key]

    def score(self, pred: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        """The score of predicted states ``pred`` (..., n_traj, n_steps + 1 − seq_len, dim), float64, for
        each leading index (a member axis, or none), against ``ref`` (the reference in the model's dtype,
        ``_ref``)."""
        lead = pred.shape[:-3]
        target = ref[:, self.seq_len:].double()
        # torch's vector_norm, not arrays.relative_error's sum of squares: a different reduction (last-ulp
        # differences), and the score is in training logs, which must not change
        err = (torch.linalg.vector_norm(wrap(pred - target, self.period), dim=-1)
               / torch.linalg.vector_norm(wrap(target, self.period), dim=-1))
        err = torch.nan_to_num(err, nan=self.CAP, posinf=self.CAP).clamp(max=self.CAP)
        if self.error == "final":
            score = err[..., -1].mean(-1)
        else:
            score = err.reshape(*lead, -1).mean(-1)
        if self.drift_weight > 0:
            initial = self.initial.to(pred.device)[..., None]  # (n_invariants, n_traj, 1)
            if isinstance(self.system, SystemFamily):  # row by row: the trajectory axis first, then back
                values = torch.stack([v.movedim(0, -2) for v in self.system.invariants(pred.movedim(-3, 0)).values()],
                                     dim=-3)
            else:
                values = torch.stack(list(self.system.invariants(pred).values()), dim=-3)  # (..., n_inv, n_traj, n)
            drift = relative_drift(values, initial, floor=0.0).abs().amax(dim=-1)  # no guard: I₀ = 0 scores CAP
            drift = torch.nan_to_num(drift, nan=self.CAP, posinf=self.CAP).clamp(max=self.CAP).amax(dim=-2)
            score = score + self.drift_weight * drift.mean(-1)
        return score

    def identity(self) -> float:
        """The score of the identity (do-nothing) map: every predicted state the last of the first window."""
        T, total = self.seq_len, self.ref.shape[1]
        return float(self.score(self.ref[:, T - 1 : T].expand(-1, total - T, -1).double(), self.ref))

    def __call__(self, model: torch.nn.Module) -> float:
        ref = self._ref(next(iter(model.parameters())))
        T, P, total = self.seq_len, self.pred_window, ref.shape[1]
        was_training = model.training
        model.eval()
        with torch.no_grad():
            parts = iterate_windows(self.call(model), ref[:, :T], -(-(total - T) // P))  # the rollout core's advance
            pred = torch.cat(parts, 1)[:, : total - T].double()
        model.train(was_training)
        return float(self.score(pred, ref))
