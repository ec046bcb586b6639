"""Rolling out a context-conditioned model: c read once from the first ``context_len`` states,
then frozen for the whole rollout.

[`ContextStep`][vpintegrator.rollout.context.ContextStep] is the step map: its ``seq_len`` is the model's ``context_len``, so the engine's first
window is the prefix (steps 0 .. k − 1, from the reference as for any window model); the first
``generate`` call computes c (timed with the steps: the context is part of the cost) and every step after
is ``model.step(z, c)`` from the prefix's last state. ``context="oracle"`` puts c = hθ from each row's true
parameters in place of the estimate (models whose encoder gives hθ: ``oracle_ready``).
[`model_step`][vpintegrator.rollout.methods.model_step] picks ``ContextStep`` for a context model and [`ModelStep`][vpintegrator.rollout.steps.ModelStep] for any other, for
``vp-rollout`` and the work–precision table alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from .engine import StepMap
from .steps import is_context_model
from .identify import add_noise, theta_of

__all__ = ["ContextStep", "oracle_theta"]


def oracle_theta(system) -> np.ndarray:
    """θ of the true system: (n_rows, p) for a ``SystemFamily`` (row by row), (p,) for a plain system (every
    row)."""
    from ..systems.family import SystemFamily

    if isinstance(system, SystemFamily):
        return np.stack([theta_of(s) for s in system.systems])
    return theta_of(system)


class ContextStep(StepMap):
    """A context model as a step map (module docstring); float64 states in and out, the model's dtype inside.

    Parameters
    ----------
    model : ContextModel
    device : str
    context : {"prefix", "oracle"}
        c from the model's encoder on the prefix, or hθ from ``theta`` (and ``dt``).
    theta : ndarray, shape (n_traj, p) or (p,), optional
        The rows' true θ (``oracle_theta``), for ``context="oracle"``.
    dt : float, optional
        h, for ``context="oracle"``.
    noise : float
        σ of observation noise on the prefix (``add_noise`` with ``seed``: the draw the
        identification rows see).
    """

    kind = "model"
    by_rows = True  # the volume of row i's map depends on row i's context

    def __init__(self, model, device: str = "cpu", context: str = "prefix", theta=None, dt: float | None = None,
                 noise: float = 0.0, seed: int = 0) -> None:
        import torch

        from ..device import resolve_device

        if not is_context_model(model):
            raise VPIntegratorError(f"ContextStep: {type(model).__name__} is not a context model (no context_len/step)")
        if context not in ("prefix", "oracle"):
            raise VPIntegratorError(f"context must be 'prefix' or 'oracle'; got {context!r}")
        if context == "oracle":
            if not getattr(model, "oracle_ready", False):
                raise VPIntegratorError(f"{model.config.get('name')}: its context is a learned vector, not hθ; the "
                                        "oracle needs the finite_difference encoder", key="models")
            if theta is None or dt is None:
                raise VPIntegratorError("context 'oracle' needs theta (the rows' true θ) and dt")
        self.model = model
        self.device = resolve_device(device)
        self.model.to(self.device).eval()
        param = next(iter(model.parameters()), None)
        self.dtype = param.dtype if param is not None else torch.float32
        self.dim: int = int(model.dim)
        self.seq_len: int = int(model.context_len)
        self.pred_window: int = 1
        self.context, self.theta, self.dt = context, theta, dt
        self.noise, self.seed = float(noise), int(seed)
        self.name: str = str(getattr(model, "config", {}).get("name", type(model).__name__.lower()))
        self._c: Any = None

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        self._window0 = np.asarray(window0, dtype=np.float64)
        self._c = None

    def _encode(self) -> None:
        import torch

        prefix = torch.as_tensor(add_noise(self._window0, self.noise, self.seed), device=self.device, dtype=self.dtype)
        with torch.inference_mode():
            if self.context == "oracle":
                theta = np.asarray(self.theta, dtype=np.float64)
                if theta.ndim == 1:
                    theta = np.broadcast_to(theta, (prefix.shape[0], theta.shape[0]))
                if theta.shape != (prefix.shape[0], self.model.context_dim):
                    raise VPIntegratorError(f"oracle θ has shape {theta.shape}; expected "
                                            f"({prefix.shape[0]}, {self.model.context_dim})")
                self._c = torch.as_tensor(float(self.dt or 0.0) * theta, device=self.device, dtype=self.dtype)
            else:
                self._c = self.model.encode(prefix)  # (n_traj, context_dim)
        self._z0 = prefix[:, -1:].clone()  # (n_traj, 1, dim)
        self._z = self._z0.clone()

    def generate(self, n: int) -> np.ndarray:
        import torch

        if self._c is None:
            self._encode()
        out = torch.empty((self._z.shape[0], n, self.dim), device=self.device, dtype=self.dtype)
        z, c = self._z, self._c
        with torch.inference_mode():
            for j in range(n):
                z = self.model.step(z, c)
                out[:, j : j + 1] = z
        self._z = z
        return out.to(device="cpu", dtype=torch.float64).numpy()

    def reset(self, rows: np.ndarray) -> None:
        import torch

        with torch.inference_mode():
            idx = torch.as_tensor(np.asarray(rows), device=self.device)
            self._z[idx] = self._z0[idx]

    def log_abs_det_jacobian(self, windows: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """``log|det J|`` of one step at the windows' last states (n, seq_len, dim), window j with row
        ``rows[j]``'s context, in float64."""
        import copy

        import torch
        from torch.func import jacrev, vmap

        if self._c is None:
            self._encode()
        if rows is None:
            raise VPIntegratorError(f"{self.name}: the volume of a context model needs each window's row")
        if getattr(self, "_volume_model", None) is None:
            self._volume_model = copy.deepcopy(self.model).to(dtype=torch.float64).requires_grad_(False)
        model = self._volume_model
        z = torch.as_tensor(np.asarray(windows, dtype=np.float64)[:, -1], device=self.device)  # (n, dim)
        c = self._c.clone().to(torch.float64)[torch.as_tensor(np.asarray(rows, dtype=np.int64), device=self.device)]

        def one(zi, ci):  # (dim,), (context_dim,) -> (dim,)
            return model.step(zi[None, None], ci[None])[0, 0]

        J = vmap(jacrev(one))(z, c)  # (n, dim, dim)
        return torch.linalg.slogdet(J)[1].cpu().numpy()

    def describe(self) -> dict[str, Any]:
        import torch

        return {**super().describe(), "model": self.name, "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device), "n_params": int(sum(p.numel() for p in self.model.parameters())),
                "runner": "eager", "context": self.context, "context_len": self.seq_len,
                "context_noise": self.noise, "torch_version": torch.__version__}
