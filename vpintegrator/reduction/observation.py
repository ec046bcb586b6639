"""A reduction as an observation: ``observe = "psd:K"`` or ``observe = "file:PATH"`` of vp-train and vp-rollout.

Three kinds of observation (subclasses of ``vpintegrator.data.observation.Observation``, registered by their
prefix when this module is imported, as ``vpintegrator.reduction`` does): ``PSDReduction`` (``psd:``),
``BalancedPSDReduction`` (``psd_balanced:``) and ``ReductionFile`` (``file:``).

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
from dataclasses import fields, replace
from typing import Any, ClassVar, Sequence

import numpy as np

from ..data.observation import Observation, kind_of
from ..errors import VPIntegratorError
from .files import load_reduction
from .psd import PSDBasis, fit_psd

__all__ = ["ReductionObservation", "PSDReduction", "BalancedPSDReduction", "ReductionFile", "reduction_observation", "attach_reduction",
           "is_reduction_spec"]


def _names(k: int) -> tuple[str, ...]:
    """Reduced coordinates (xi, eta): ``xi1 .. xin, eta1 .. etan``."""
    return tuple(f"xi{i + 1}" for i in range(k // 2)) + tuple(f"eta{i + 1}" for i in range(k // 2))


def _linear_part(model: Any) -> np.ndarray:
    """A symplectic autoencoder's encoder's PSD-like layer as a (2n, 2N) matrix (its last layer)."""
    phi = model.psd_layers()[0].phi.detach().double().numpy()  # (N, n)
    zero = np.zeros_like(phi.T)
    return np.block([[phi.T, zero], [zero, phi.T]])


class ReductionObservation(Observation):
    """What the reductions share: canonical states (q, p) of an even dimension, and a decoder."""

    @classmethod
    def _check_canonical(cls, spec: str, full_dim: int) -> None:
        if full_dim % 2:
            raise VPIntegratorError(f"observe {spec!r}: a reduction needs canonical states (q, p) of an even "
                                    f"dimension; the data's have {full_dim} components", key="observe")


class PSDReduction(ReductionObservation):
    """``psd:K``: the cotangent-lift PSD basis ``A`` of K = 2n components fitted on the training split's states
    (``fit_psd``); linear: the observation matrix is ``A^T`` and the decoder ``A``."""

    prefix = "psd:"
    fits_on_training_split = True
    #: the ``fit_psd`` method
    method: ClassVar[str] = "cotangent_lift"

    @classmethod
    def parse(cls, raw: str) -> str:
        text = super().parse(raw)
        prefix, k = text.split(":", 1)
        if not k.isdigit() or int(k) < 2 or int(k) % 2:
            raise VPIntegratorError(f"observe {raw!r}: give {prefix}:K with an even K >= 2 reduced components "
                                    f"(e.g. {prefix}:32)", key="observe")
        return text

    @classmethod
    def fit(cls, spec: str, full_dim: int, names: Sequence[str] = (), system: str | None = None,
            train_states: np.ndarray | None = None) -> Observation:
        cls._check_canonical(spec, full_dim)
        k = int(spec[len(cls.prefix):])
        if train_states is None:
            raise VPIntegratorError(f"observe {spec!r}: a PSD basis is fitted on the training split; give a model "
                                    "trained with it (its recorded basis is used) or file:PATH", key="observe")
        try:
            basis = fit_psd(np.asarray(train_states, dtype=np.float64).reshape(-1, full_dim), k, cls.method)
        except VPIntegratorError as err:
            raise VPIntegratorError(f"observe {spec!r}: {err}", key="observe") from None
        record = {"kind": "psd", "method": basis.method, "linear": True, "n_sites": basis.n_sites,
                  "reduced_dim": k, "fitted_on": "the training split"}
        return cls(spec, basis.matrix().T, None, _names(k), system, reduction_record=record)


class BalancedPSDReduction(PSDReduction):
    """``psd_balanced:K``: ``psd:K`` with the balanced cotangent lift (``vpintegrator.reduction.psd``)."""

    prefix = "psd_balanced:"
    method = "balanced_cotangent_lift"


class ReductionFile(ReductionObservation):
    """``file:PATH``: a reduction file (``save_reduction``): a PSD basis (linear, as ``psd:K``) or a symplectic
    autoencoder (nonlinear: ``apply`` encodes by it, ``decode`` decodes; the record names the file and its
    sha256, and ``attach`` reloads it from there, refusing a file whose content changed)."""

    prefix = "file:"

    @classmethod
    def parse(cls, raw: str) -> str:
        text = raw.strip()
        if not text.startswith(cls.prefix):  # (spaced out inside the prefix)
            return super().parse(raw)
        if not text[len(cls.prefix):]:  # a path: spaces kept
            raise VPIntegratorError(f"observe {raw!r}: give file:PATH, a reduction file (save_reduction)",
                                    key="observe")
        return text

    @classmethod
    def fit(cls, spec: str, full_dim: int, names: Sequence[str] = (), system: str | None = None,
            train_states: np.ndarray | None = None) -> Observation:
        cls._check_canonical(spec, full_dim)
        path = spec[len(cls.prefix):]
        reduction = load_reduction(path, n_sites=full_dim // 2)
        from ..provenance import file_sha256

        linear = isinstance(reduction, PSDBasis)
        record = {"kind": "psd" if linear else "symplectic_autoencoder", "linear": linear,
                  "file": os.path.abspath(path), "sha256": file_sha256(path), "n_sites": int(reduction.n_sites),
                  "reduced_dim": int(reduction.reduced_dim)}
        k = int(reduction.reduced_dim)
        if linear:
            return cls(spec, reduction.matrix().T, None, _names(k), system, reduction_record=record)
        return cls(spec, _linear_part(reduction), None, _names(k), system, reduction=reduction,
                   reduction_record=record)

    def attach(self, where: str = "the model") -> Observation:
        """With its nonlinear reduction loaded from the recorded file, which must still hold what was recorded
        (its sha256), else one line; a linear one as it is."""
        record = self.reduction_record
        if self.reduction is not None or not record or record.get("linear", True):
            return self
        path = str(record.get("file") or "")
        from ..provenance import file_sha256

        if not os.path.isfile(path):
            raise VPIntegratorError(f"{where} was trained on the reduction file {path}, which is gone; put it back "
                                    "(or train again)", key="observe")
        if record.get("sha256") and file_sha256(path) != record["sha256"]:
            raise VPIntegratorError(f"{where} was trained on the reduction file {path}, which has changed since "
                                    "(another sha256); put the original back (or train again)", key="observe")
        return replace(self, reduction=load_reduction(path, n_sites=self.full_dim // 2))


def is_reduction_spec(observe: Any) -> bool:
    """Whether the ``observe`` value declares a reduction (``psd:K``, ``psd_balanced:K``, ``file:PATH``)."""
    return isinstance(observe, str) and issubclass(kind_of(observe), ReductionObservation)


def reduction_observation(spec: str, full_dim: int, system: str | None = None,
                          train_states: np.ndarray | None = None) -> Observation:
    """The ``Observation`` of a reduction spec (module docstring) for states of ``full_dim`` components.
    ``psd:K`` (``psd_balanced:K``) is fitted on ``train_states`` (the training split's states, (..., full_dim)). One-line errors (key
    ``observe``): an odd state dimension, K above twice the snapshots' rank, a file of another lattice size."""
    if not is_reduction_spec(spec):
        raise VPIntegratorError(f"observe {spec!r} is not a reduction (psd:K, psd_balanced:K, file:PATH)",
                                key="observe")
    return kind_of(spec).fit(spec, full_dim, (), system, train_states)


def attach_reduction(observation: Observation | None, where: str = "the model") -> Observation | None:
    """``observation`` (read from a record, ``observation_from_record``) with what its record leaves out loaded
    (``Observation.attach``: a nonlinear reduction from the recorded file). None for none."""
    if observation is None:
        return None
    kind = kind_of(observation.spec)
    if type(observation) is Observation and kind is not Observation:  # read before this module registered it
        observation = kind(**{f.name: getattr(observation, f.name) for f in fields(observation)})
    return observation.attach(where)
