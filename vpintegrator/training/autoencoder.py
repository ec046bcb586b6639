"""The symplectic autoencoder (``vpintegrator.reduction.autoencoder``) trained by [`fit`][vpintegrator.training.fit]:
its reconstruction as a run of the one training loop, with its run directory, resume, budgets and sinks."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ..models import load_checkpoint
from ..reduction.autoencoder import SymplecticAutoencoder, autoencoder_at_psd
from ..reduction.fileformat import data_record
from .run import fit

__all__ = ["fit_symplectic_autoencoder"]


def fit_symplectic_autoencoder(states: Any, reduced_dim: int, *, seed: int = 0, max_steps: int | None = None,
                               patience: int = 20, min_rel_delta: float = 0.01, max_epochs: int = 400,
                               batch_size: int = 256, lr: float = 1e-3, max_snapshots: int | None = 4096,
                               n_encoder_layers: int = 4, n_decoder_layers: int = 1, n_decoder_blocks: int = 3,
                               sympnet_upscale: int = 1, activation: str = "tanh", dtype: torch.dtype = torch.float64,
                               out: Any = None, resume: Any = None, **train: Any) -> SymplecticAutoencoder:
    """Fit a symplectic autoencoder of ``reduced_dim`` = 2n components on ``states``
    (``vpintegrator.reduction.autoencoder``).

    Parameters
    ----------
    states : ndarray (n_snapshots, 2N) or Trajectories
        The training split's full states, q then p (every state of a Trajectories).
    reduced_dim : int
        2n, even, at most twice the rank of the snapshots' cotangent-lift matrix (one line names the rank).
    seed : int
        Seeds the minibatch order and the gradient layers' initial weights.
    max_epochs, max_steps, patience, min_rel_delta, batch_size, lr
        ``fit``'s ``epochs``, ``max_steps`` (a budget no load changes, at the end of the epoch it is reached in),
        the plateau rule (``patience`` epochs without a fall of ``min_rel_delta`` of the loss, as ``vp-train``),
        Adam's minibatch and learning rate (torch's Adam: betas (0.9, 0.999)). The best epoch's weights are kept.
    max_snapshots : int, optional
        Train on at most this many snapshots, evenly spaced (None: all); the PSD initialisation uses all of them.
    n_encoder_layers, n_decoder_layers, n_decoder_blocks, sympnet_upscale, activation, dtype
        The architecture (``SymplecticAutoencoder``) and the training dtype (float64 default: the symplectic
        identities then hold to ~1e-14).
    out, resume : path, optional
        ``fit``'s run directory (``log.csv``'s epoch 0 the PSD start) to write, or to continue: given the same
        arguments again, the continuation is the uninterrupted fit (only ``fit``'s resumable keys may change).
    **train
        ``fit``'s other settings: ``time_limit``, ``cpu_time_limit``, ``logger``, ``callback``, ``device`` (cpu)...
    """
    start = time.process_time()
    model, y = autoencoder_at_psd(states, reduced_dim, seed, dtype, n_encoder_layers=n_encoder_layers,
                                  n_decoder_layers=n_decoder_layers, n_decoder_blocks=n_decoder_blocks,
                                  sympnet_upscale=sympnet_upscale, activation=activation)
    if max_snapshots is not None and y.shape[0] > max_snapshots:
        y = y[np.linspace(0, y.shape[0] - 1, max_snapshots).round().astype(np.int64)]
    x = torch.as_tensor(y, dtype=dtype)[:, None, :]  # (m, 1, 2N): windows of one state, their own targets
    keys = {"epochs": max_epochs, "max_steps": max_steps, "patience": patience, "min_rel_delta": min_rel_delta,
            "device": "cpu", **train}
    if resume is None:  # a new run: the autoencoder's training (a resumed one keeps its config.toml's)
        keys = {"batch_size": batch_size, "lr": lr, "seed": seed, "out": out, "loss": "relative_squared",
                "judge_start": True, "optimizer": "adam", "scheduler": "constant", "dtype": str(dtype)[6:],
                "optimizer_kwargs": {"betas": [0.9, 0.999], "foreach": False}, **keys}
    result = fit(model=model, train=(x, x), val=(x, x), resume=resume, **keys)
    best = result.best_state  # None when resumed: the best weights are then the run directory's best.pt
    model.load_state_dict(best if best is not None else load_checkpoint(f"{result.run_dir}/best.pt")["state_dict"])
    model.history = [float(row["val_loss"]) for row in result.history]
    model.fitted_on = {**data_record(states), "n_snapshots_trained": int(x.shape[0]), "steps": int(result.steps),
                       "best_epoch": int(result.best_epoch), "seed": int(seed)}
    model.fit_seconds = time.process_time() - start
    return model
