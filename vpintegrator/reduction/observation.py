"""A reduction as an observation: ``observe = "psd:K"`` or ``observe = "file:PATH"`` of vp-train and vp-rollout.

A reduction maps full states to reduced coordinates and back; the package's observation machinery
(``vpintegrator.data.observation``) carries it: training sees the reduced coordinates of the training split,
the model records the reduction (``Observation.record()``, with a ``reduction`` entry), a rollout on another
reduction is refused in one line (``check_same``), and ``Observation.decode`` maps reduced states back to full
ones. The specs:

- ``psd:K``: the cotangent-lift PSD basis of K = 2n components fitted on the training split's states
  (``fit_psd``); linear: the observation matrix is ``A^T`` and the decoder ``A``; ``psd_balanced:K`` likewise
  with the balanced cotangent lift (``method="balanced_cotangent_lift"``);
- ``file:PATH``: a reduction file (``save_reduction``): a PSD basis (linear, as above) or a symplectic
  autoencoder (nonlinear: ``apply`` encodes by it, ``decode`` decodes; the record names the file and its
  sha256, and a rollout reloads it from there, refusing a file whose content changed).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..data.observation import PSD_PREFIXES, Observation, is_reduction_spec
from ..errors import VPIntegratorError
from .files import load_reduction
from .psd import PSDBasis, fit_psd

__all__ = ["reduction_observation", "attach_reduction", "is_reduction_spec"]

#: the PSD method of each ``PSD_PREFIXES`` spec
_PSD_METHOD = dict(zip(PSD_PREFIXES, ("cotangent_lift", "balanced_cotangent_lift")))


def _names(k: int) -> tuple[str, ...]:
    """Reduced coordinates (xi, eta): ``xi1 .. xin, eta1 .. etan``."""
    return tuple(f"xi{i + 1}" for i in range(k // 2)) + tuple(f"eta{i + 1}" for i in range(k // 2))


def _linear_part(model: Any) -> np.ndarray:
    """A symplectic autoencoder's encoder's PSD-like layer as a (2n, 2N) matrix (its last layer)."""
    phi = model.psd_layers()[0].phi.detach().double().numpy()  # (N, n)
    zero = np.zeros_like(phi.T)
    return np.block([[phi.T, zero], [zero, phi.T]])


def reduction_observation(spec: str, full_dim: int, system: str | None = None,
                          train_states: np.ndarray | None = None) -> Observation:
    """The ``Observation`` of a reduction spec (module docstring) for states of ``full_dim`` components.
    ``psd:K`` (``psd_balanced:K``) is fitted on ``train_states`` (the training split's states, (..., full_dim)). One-line errors (key
    ``observe``): an odd state dimension, K above twice the snapshots' rank, a file of another lattice size."""
    if not is_reduction_spec(spec):
        raise VPIntegratorError(f"observe {spec!r} is not a reduction (psd:K, psd_balanced:K, file:PATH)",
                                key="observe")
    if full_dim % 2:
        raise VPIntegratorError(f"observe {spec!r}: a reduction needs canonical states (q, p) of an even dimension; "
                                f"the data's have {full_dim} components", key="observe")
    if spec.startswith(PSD_PREFIXES):
        prefix, k_text = spec.split(":", 1)
        k = int(k_text)
        if train_states is None:
            raise VPIntegratorError(f"observe {spec!r}: a PSD basis is fitted on the training split; give a model "
                                    "trained with it (its recorded basis is used) or file:PATH", key="observe")
        try:
            basis = fit_psd(np.asarray(train_states, dtype=np.float64).reshape(-1, full_dim), k,
                            _PSD_METHOD[prefix + ":"])
        except VPIntegratorError as err:
            raise VPIntegratorError(f"observe {spec!r}: {err}", key="observe") from None
        record = {"kind": "psd", "method": basis.method, "linear": True, "n_sites": basis.n_sites,
                  "reduced_dim": k, "fitted_on": "the training split"}
        return Observation(spec, basis.matrix().T, None, _names(k), system, reduction_record=record)
    path = spec[len("file:"):]
    reduction = load_reduction(path, n_sites=full_dim // 2)
    from ..provenance import file_sha256

    record = {"kind": "psd" if isinstance(reduction, PSDBasis) else "symplectic_autoencoder",
              "linear": isinstance(reduction, PSDBasis), "file": os.path.abspath(path), "sha256": file_sha256(path),
              "n_sites": int(reduction.n_sites), "reduced_dim": int(reduction.reduced_dim)}
    k = int(reduction.reduced_dim)
    if isinstance(reduction, PSDBasis):
        return Observation(spec, reduction.matrix().T, None, _names(k), system, reduction_record=record)
    return Observation(spec, _linear_part(reduction), None, _names(k), system, reduction=reduction,
                       reduction_record=record)


def attach_reduction(observation: Observation | None, where: str = "the model") -> Observation | None:
    """``observation`` (read from a record, ``observation_from_record``) with its nonlinear reduction loaded
    from the recorded file; the file must still hold what was recorded (its sha256), else one line. Linear
    reductions and other observations are returned as they are."""
    if observation is None or observation.reduction is not None:
        return observation
    record = observation.reduction_record
    if not record or record.get("linear", True):
        return observation
    path = str(record.get("file") or "")
    from dataclasses import replace

    from ..provenance import file_sha256

    if not os.path.isfile(path):
        raise VPIntegratorError(f"{where} was trained on the reduction file {path}, which is gone; put it back (or "
                                "train again)", key="observe")
    if record.get("sha256") and file_sha256(path) != record["sha256"]:
        raise VPIntegratorError(f"{where} was trained on the reduction file {path}, which has changed since "
                                "(another sha256); put the original back (or train again)", key="observe")
    return replace(observation, reduction=load_reduction(path, n_sites=observation.full_dim // 2))
