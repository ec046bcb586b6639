"""The reduction study's learned rows: a flow map trained on reduced coordinates (a PSD basis or a symplectic
autoencoder), rolled out by the compiled kernel and decoded."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..runner import StudyError
from .data import Case
from .measure import _errors, _min_cpu, _record
from .plan import FLOW_MAP_MODEL, FLOW_MAP_RECIPE, HORIZONS, T, ReductionPlan


@dataclass(frozen=True, eq=False)
class PSDEncoder:
    """A PSD basis as a reduced-coordinate encoder: ``encode``/``decode`` of NumPy arrays and ``fit_seconds``
    (process CPU of the fit), the interface ``flow_map_rows`` takes (an autoencoder offers the same)."""

    basis: Any
    fit_seconds: float

    def encode(self, y: np.ndarray) -> np.ndarray:
        """(..., 2N) -> (..., 2n)."""
        return self.basis.encode(y)

    def decode(self, z: np.ndarray) -> np.ndarray:
        """(..., 2n) -> (..., 2N)."""
        return self.basis.decode(z)


def fit_psd_encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> PSDEncoder:
    """The cotangent-lift PSD of ``states`` (..., 2N) as an encoder (``seed`` unused: the SVD is deterministic)."""
    from ...clock import process_cpu
    from ...reduction import fit_psd

    tic = process_cpu()
    basis = fit_psd(states, reduced_dim)
    return PSDEncoder(basis, process_cpu() - tic)


def _train_flow_map(z: np.ndarray, t: np.ndarray, seed: int, stop: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A G-SympNet flow map of one stride fitted (``vpintegrator.training.fit``, in memory) on reduced trajectories
    ``z`` (n_traj, n_states, 2n) sampled at ``t``, stopped by ``stop`` (``ReductionPlan.flow_map_stop``: no
    clock of its own); (the model, what its training recorded)."""
    import torch

    from ...clock import process_cpu
    from ...data import Trajectories
    from ...training import fit

    torch.set_num_threads(1)
    data = Trajectories(np.ascontiguousarray(z), np.asarray(t, dtype=np.float64), {"dt": float(t[1] - t[0])})
    best: dict[str, Any] = {"loss": math.inf, "state": None}

    def keep_best(epoch: Any) -> None:  # the best validation epoch's weights (fit's model holds the last ones)
        if math.isfinite(epoch.val_loss) and epoch.val_loss < best["loss"]:
            best["loss"] = float(epoch.val_loss)
            best["state"] = {k: v.detach().clone() for k, v in epoch.model.state_dict().items()}

    tic = process_cpu()
    result = fit(model=dict(FLOW_MAP_MODEL), train=data, seed=int(seed), callback=keep_best,
                 **{**FLOW_MAP_RECIPE, **stop})
    info = {"train_cpu": process_cpu() - tic, "stopped": result.stopped, "stop_clock": result.stop_clock,
            "epochs": int(result.epochs),
            "steps": int(result.steps), "max_steps": stop.get("max_steps"),
            "n_params": int(result.n_params), "best_val": float(result.best_loss)}
    model = result.model
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return model.double().eval(), info


def _compiled_flow_map(model: Any, z0: np.ndarray) -> Any:
    """The packed model (``numba_model.pack``), checked against torch on ``z0``; a one-line error otherwise."""
    import torch

    from ...rollout.numba_model import pack

    packed = pack(model)
    if packed is None:
        raise StudyError(f"the flow map {FLOW_MAP_MODEL['name']} has no compiled kernel here (numba missing?)")
    with torch.no_grad():
        want = model(torch.as_tensor(z0[:, None, :])).numpy()[:, 0]
    got = packed.forward(z0[:, None, :])[:, 0]
    if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
        raise StudyError("the compiled flow map disagrees with its torch model; rerun with numba's cache cleared")
    return packed


#: how a reduced-coordinate encoder's name is shown in a row's label
_SHOWN = {"psd": "PSD", "autoencoder": "symplectic autoencoder"}


def flow_map_rows(plan: ReductionPlan, case: Case, name: str,
                  fit_encoder: Callable[..., Any]) -> list[dict[str, Any]]:
    """Rows "``name`` + flow map": per 2n of ``reduced_dims`` and seed, ``fit_encoder(states, reduced_dim,
    seed=...)`` (an object with ``encode``/``decode`` of NumPy arrays and ``fit_seconds``) on the training split,
    a flow map of step ``stride`` trained on the encoded training trajectories, rolled out batch-1 by the
    compiled kernel and decoded every ``output_every``."""
    rows = []
    train = case.train
    k = plan.stride_steps
    calls = int(round(T / plan.stride))
    per_output = int(round(plan.output_every / plan.stride))
    for dim in plan.reduced_dims:
        for seed in plan.seeds:
            encoder = fit_encoder(np.asarray(train.y), dim, seed=seed)
            z = encoder.encode(np.asarray(train.y)[:, ::k])
            model, info = _train_flow_map(z, np.asarray(train.t)[::k], seed, plan.flow_map_stop(dim))
            z0 = np.asarray(encoder.encode(case.y0), dtype=np.float64)
            packed = _compiled_flow_map(model, z0)
            ends = [int(round(t / plan.stride)) for t in HORIZONS]
            out = np.empty((z0.shape[0], ends[-1], dim))
            packed.rollout_block(z0[:, None, :], ends[-1], out)
            y = encoder.decode(np.stack([out[:, e - 1] for e in ends], axis=1))
            one, buf = z0[:1, None, :], np.empty((1, calls, dim))

            def rollout_to_t() -> None:
                packed.rollout_block(one, calls, buf)
                encoder.decode(buf[0, per_output - 1::per_output])

            cost = _min_cpu(rollout_to_t, plan.repeats) / T
            offline = case.data_cpu + float(encoder.fit_seconds) + info["train_cpu"]
            rows.append(_record(case, f"{name}_flow_map", f"{_SHOWN.get(name, name)} + flow map, 2n = {dim}, "
                                f"Delta = {plan.stride:g}",
                                method=FLOW_MAP_MODEL["name"], h=plan.stride, reduced_dim=dim, seed=int(seed),
                                cost=cost, offline_cpu=offline, **info, **_errors(y, case)))
    return rows


def psd_flow_map_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """PSD + flow map (``flow_map_rows`` with the cotangent-lift PSD)."""
    def encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> PSDEncoder:  # the case's one SVD
        basis, cpu = case.psd_basis(reduced_dim)
        return PSDEncoder(basis, cpu)

    return flow_map_rows(plan, case, "psd", encoder)


def autoencoder_flow_map_rows(plan: ReductionPlan, case: Case) -> list[dict[str, Any]]:
    """Symplectic autoencoder + flow map (``flow_map_rows`` with ``fit_symplectic_autoencoder``, from the PSD
    start, ``autoencoder_steps`` optimiser steps (``max_steps``), a budget no load bends), at the sizes N of
    ``autoencoder_sizes`` only (``families``: its gradient layers act on the full 2N, so a CPU fit grows with N)."""
    from ...training import fit_symplectic_autoencoder

    def encoder(states: np.ndarray, reduced_dim: int, seed: int = 0) -> Any:
        return fit_symplectic_autoencoder(states.reshape(-1, states.shape[-1]), reduced_dim, seed=seed,
                                          max_steps=plan.autoencoder_steps)

    return flow_map_rows(plan, case, "autoencoder", encoder)
