"""Partial observation: what a model sees of the state, declared once.

An observation is a linear map ``y -> C y`` from the full state (``full_dim`` components) to ``dim``
observed channels, declared by a short spec (the ``observe`` key of ``vp-train`` and ``vp-rollout``):

- ``"q"`` / ``"p"``: the positions / momenta of a canonical system (its ``state_names`` starting with ``q`` /
  ``p``, e.g. ``q1, q2`` of the coupled oscillator);
- state names, ``"z1,z2"`` (the rigid body's first two angular momenta);
- component indices, ``"0,1"`` (or a TOML list ``[0, 1]``);
- ``"basis:K"``: a linear basis of K channels fitted on the training split: the K leading right singular
  vectors of the training trajectories' states (uncentred, orthonormal rows; ``fit_basis``). The fitted
  matrix is recorded with the model, and a rollout uses the recorded one;
- a **reduction** (``vpintegrator.reduction.observation``): ``"psd:K"``, the cotangent-lift PSD basis of K = 2n
  channels fitted on the training split (``"psd_balanced:K"``: the balanced cotangent lift), or ``"file:PATH"``, a reduction file (a PSD basis or a symplectic
  autoencoder, ``vpintegrator.reduction.files``). A reduction is an observation with an inverse, its
  decoder (``Observation.decode``); its ``reduction_record`` (kind, file, sha256) is recorded with the model.

Training and rollout see only the observed channels (``observe_trajectories``); files keep the full state
where they have it. Observed trajectories carry their observation in ``meta`` (``observation``,
``observation_matrix``, ``observed_system``, ``observation_full_dim``) and name no system: written to a file
they make a data-only file of the observed channels, which trains and rolls out like any data-only file and
refuses what needs the full state. A model records ``Observation.record()`` (``trained_on["observation"]``)
and a run on another observation refuses it in one line (``check_same``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import VPIntegratorError

if TYPE_CHECKING:  # pragma: no cover
    from .trajectories import Trajectories

__all__ = ["Observation", "check_observe_spec", "resolve_observation", "fit_basis", "observe_trajectories",
           "observation_of", "observation_from_record", "check_same", "OBSERVATION_KEYS", "BASIS_PREFIX",
           "PSD_PREFIXES", "REDUCTION_PREFIXES", "is_reduction_spec"]

#: the ``meta`` keys of observed trajectories (and the attributes of a file of observed channels)
OBSERVATION_KEYS = ("observation", "observation_matrix", "observed_system", "observation_full_dim")
#: the spec of a basis fitted on the training split: ``basis:K``
BASIS_PREFIX = "basis:"
#: the specs of a PSD basis fitted on the training split: ``psd:K`` (the cotangent lift), ``psd_balanced:K`` (the
#: balanced cotangent lift; ``vpintegrator.reduction.psd``)
PSD_PREFIXES = ("psd:", "psd_balanced:")
#: the specs of a reduction (``vpintegrator.reduction.observation``): a PSD basis fitted on the training split, a file
REDUCTION_PREFIXES = (*PSD_PREFIXES, "file:")
#: specs that mean "the whole state" (no observation)
_FULL = ("", "all", "full", "none")


@dataclass(frozen=True, eq=False)
class Observation:
    """A linear observation ``y -> matrix @ y`` of ``full_dim`` components into ``dim`` channels.

    Parameters
    ----------
    spec : str
        What was declared (``"q"``, ``"z1,z2"``, ``"0,1"``, ``"basis:2"``).
    matrix : ndarray, shape (dim, full_dim)
        The observation map; for a component observation the rows of the identity at ``indices``.
    indices : tuple of int or None
        The observed components (None for a fitted basis).
    names : tuple of str
        The observed channels' names (``q1, q2``; ``b1, b2`` for a basis).
    system : str or None
        The system whose state is observed (its registry name), when known.
    reduction : object, optional
        A nonlinear reduction (an object with ``encode`` and ``decode``, a ``SymplecticAutoencoder``): ``apply``
        encodes by it, and ``matrix`` is only its linear part (the encoder's PSD-like layer).
    reduction_record : dict, optional
        What a reduction is (``kind``, ``file``, ``sha256``, ...): set for ``psd:K`` and ``file:PATH``; then
        ``decode`` maps observed channels back to full states.
    """

    spec: str
    matrix: np.ndarray
    indices: tuple[int, ...] | None
    names: tuple[str, ...]
    system: str | None = None
    reduction: Any = None
    reduction_record: Mapping[str, Any] | None = None

    @property
    def dim(self) -> int:
        """Observed channels."""
        return int(self.matrix.shape[0])

    @property
    def full_dim(self) -> int:
        """Components of the full state."""
        return int(self.matrix.shape[1])

    @property
    def invertible(self) -> bool:
        """Whether the full state is recovered from one observed state (the matrix has rank ``full_dim``)."""
        return self.dim >= self.full_dim and int(np.linalg.matrix_rank(self.matrix)) == self.full_dim

    def apply(self, y: Any) -> Any:
        """The observed channels of states ``y`` (..., full_dim): NumPy arrays or torch tensors."""
        if int(y.shape[-1]) != self.full_dim:
            raise VPIntegratorError(f"observe {self.spec!r}: states of dim {int(y.shape[-1])} given, but the "
                                    f"observation maps states of dim {self.full_dim}", key="observe")
        if self.indices is not None:
            return y[..., list(self.indices)]
        if self.reduction is not None:
            return _encode_by(self.reduction, y)
        self._check_linear()
        if isinstance(y, np.ndarray):
            return y @ self.matrix.T
        import torch

        return y @ torch.as_tensor(self.matrix.T, dtype=y.dtype, device=y.device)

    def decode(self, z: Any) -> np.ndarray:
        """Full states (..., full_dim) of observed channels ``z`` (..., dim): the reduction's decoder (for a
        linear reduction, a basis with orthonormal rows, ``z @ matrix``). One line for an observation that is
        not a reduction."""
        if self.reduction_record is None:
            raise VPIntegratorError(f"observe {self.spec!r} is not a reduction: only psd:K and file:PATH decode "
                                    "observed channels to the full state", key="observe")
        z = np.asarray(z, dtype=np.float64)
        if self.reduction is not None:
            return np.asarray(self.reduction.decode(z), dtype=np.float64)
        self._check_linear()
        return z @ self.matrix

    def _check_linear(self) -> None:
        """Refuse to apply the linear part alone of a nonlinear reduction read from a record."""
        record = self.reduction_record or {}
        if record.get("linear") is False:
            raise VPIntegratorError(f"observe {self.spec!r}: a nonlinear reduction ({record.get('kind')}) "
                                    "read from a record without its file loaded; load it with "
                                    "vpintegrator.reduction.attach_reduction", key="observe")

    def describe(self) -> str:
        """One phrase: ``q (q1, q2 of coupled_oscillator)``."""
        of = f" of {self.system}" if self.system else ""
        return f"{self.spec} ({', '.join(self.names)}{of}; {self.dim} of {self.full_dim} components)"

    def record(self) -> dict[str, Any]:
        """Plain data (JSON and torch.save safe): what a checkpoint, ``summary.json`` and provenance record."""
        out = {"spec": self.spec, "matrix": self.matrix.tolist(),
               "indices": None if self.indices is None else list(self.indices), "names": list(self.names),
               "system": self.system, "dim": self.dim, "full_dim": self.full_dim}
        if self.reduction_record is not None:
            out["reduction"] = dict(self.reduction_record)
        return out

    def meta(self) -> dict[str, Any]:
        """The ``meta`` entries (file attributes) of trajectories observed by it."""
        out = {"observation": self.spec, "observation_matrix": np.array(self.matrix, dtype=np.float64),
               "observed_system": self.system or "", "observation_full_dim": self.full_dim}
        if self.reduction_record is not None:  # (JSON text: a file attribute)
            import json

            out["observation_reduction"] = json.dumps(dict(self.reduction_record), sort_keys=True)
        return out

    def same_as(self, other: "Observation") -> bool:
        """The same channels: the same map (shape and matrix to 1e-12; a reduction's file, by its sha256), however
        it was spelled (``q``, ``q1,q2`` and ``0,1`` of the coupled oscillator are one observation)."""
        digest = (self.reduction_record or {}).get("sha256"), (other.reduction_record or {}).get("sha256")
        return (self.matrix.shape == other.matrix.shape and digest[0] == digest[1]
                and bool(np.allclose(self.matrix, other.matrix, rtol=0, atol=1e-12)))

    def spelled_by(self, spec: str | Sequence[int] | None) -> bool:
        """Whether the ``observe`` value ``spec`` declares these channels: the same spec, or a component spec
        (names, indices, ``q``/``p``) that resolves to the same map on this observation's system."""
        text = check_observe_spec(spec)
        if text == self.spec:
            return True
        if text is None or is_reduction_spec(text) or text.startswith(BASIS_PREFIX) or self.indices is None:
            return False
        from .trajectories import state_names

        try:
            other = resolve_observation(text, self.full_dim, state_names(self.system, self.full_dim), self.system)
        except VPIntegratorError:
            return False
        return other is not None and self.same_as(other)


def _encode_by(reduction: Any, y: Any) -> Any:
    """``reduction.encode`` of NumPy states, or of torch tensors (through NumPy: no gradient)."""
    if isinstance(y, np.ndarray):
        return reduction.encode(y)
    import torch

    return torch.as_tensor(reduction.encode(y.detach().cpu().numpy()), dtype=y.dtype, device=y.device)


def is_reduction_spec(observe: Any) -> bool:
    """Whether the ``observe`` value declares a reduction (``psd:K``, ``psd_balanced:K``, ``file:PATH``)."""
    return isinstance(observe, str) and observe.startswith(REDUCTION_PREFIXES)


def check_observe_spec(value: Any) -> str | None:
    """The ``observe`` key's value, checked for its form only (what needs the system or the data is checked by
    ``resolve_observation``): None, a spec string or a list of component indices (made ``"0,1"``)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in value):
            raise VPIntegratorError(f"observe must be a spec (q, p, z1,z2, 0,1, basis:K) or a list of component "
                                    f"indices; got {value!r}", key="observe")
        value = ",".join(str(int(i)) for i in value)
    if not isinstance(value, str):
        raise VPIntegratorError(f"observe must be a spec string (q, p, z1,z2, 0,1, basis:K); got {value!r}",
                                key="observe")
    if value.strip().startswith("file:"):  # a path: spaces kept
        if not value.strip()[len("file:"):]:
            raise VPIntegratorError(f"observe {value!r}: give file:PATH, a reduction file (save_reduction)",
                                    key="observe")
        return value.strip()
    text = value.strip().replace(" ", "")
    if text.lower() in _FULL:
        return None
    if text.startswith(PSD_PREFIXES):
        prefix, k = text.split(":", 1)
        if not k.isdigit() or int(k) < 2 or int(k) % 2:
            raise VPIntegratorError(f"observe {value!r}: give {prefix}:K with an even K >= 2 reduced components "
                                    f"(e.g. {prefix}:32)", key="observe")
    elif text.startswith(BASIS_PREFIX):
        k = text[len(BASIS_PREFIX):]
        if not k.isdigit() or int(k) < 1:
            raise VPIntegratorError(f"observe {value!r}: give basis:K with K >= 1 channels (e.g. basis:2)",
                                    key="observe")
    elif not all(part for part in text.split(",")):
        raise VPIntegratorError(f"observe {value!r} has an empty item; give names or indices separated by commas "
                                "(e.g. 0,1 or z1,z2)", key="observe")
    return text


def fit_basis(states: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` leading right singular vectors of ``states`` (..., full_dim), uncentred, as rows (k, full_dim),
    each signed so that its largest component is positive (one basis for one data set)."""
    x = np.asarray(states, dtype=np.float64).reshape(-1, states.shape[-1])
    x = x[np.all(np.isfinite(x), axis=1)]
    if x.shape[0] < k:
        raise VPIntegratorError(f"observe basis:{k}: {x.shape[0]} finite training states cannot fit {k} channels",
                                key="observe")
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    basis = vt[:k].copy()
    sign = np.sign(basis[np.arange(k), np.argmax(np.abs(basis), axis=1)])
    return basis * np.where(sign == 0, 1.0, sign)[:, None]


def _components(text: str, names: Sequence[str], full_dim: int, system: str | None) -> tuple[int, ...]:
    """The component indices a component spec names: a comma list of tokens, each a group (``q``, ``p``), a
    state name (``z1``) or an index (``0``), in the order given. Names and indices are not mixed in one spec, and
    no component is named twice (a group and one of its members, or a name and its index): each is one line
    naming the token at fault."""
    where = f" of {system}" if system else ""
    valid = f"{', '.join(names) or 'indices 0 .. ' + str(full_dim - 1)}, q, p, basis:K"
    tokens = text.split(",")
    is_index = [t.lstrip("-").isdigit() for t in tokens]
    if any(is_index) and not all(is_index):
        index, name = tokens[is_index.index(True)], tokens[is_index.index(False)]
        raise VPIntegratorError(f"observe {text!r}: {index!r} is a component index but {name!r} a name; give indices "
                                f"only or names only (valid names: {valid})", key="observe")
    idx: list[int] = []
    given: dict[int, str] = {}  # component -> the token that gave it
    for token in tokens:
        if token.lstrip("-").isdigit():
            i = int(token)
            if not 0 <= i < full_dim:
                raise VPIntegratorError(f"observe {text!r}: index {i} is out of range: the state{where} has "
                                        f"{full_dim} components (0 .. {full_dim - 1})", key="observe")
            found: tuple[int, ...] = (i,)
        elif token in ("q", "p") and token not in names:
            found = tuple(i for i, n in enumerate(names) if n.startswith(token) and n[1:].isdigit())
            if not found:
                raise VPIntegratorError(
                    f"observe {text!r}: the state{where} ({', '.join(names) or f'{full_dim} unnamed components'}) has "
                    f"no {'positions' if token == 'q' else 'momenta'} named {token}1, {token}2, ...; give component "
                    "indices (e.g. 0,1) or names", key="observe")
        elif token in names:
            found = (list(names).index(token),)
        else:
            raise VPIntegratorError(f"observe {text!r}: {token!r} is not a state component{where}; valid: {valid}",
                                    key="observe")
        for i in found:
            if i in given:
                twice = f"{token!r} is given twice" if given[i] == token else \
                    f"{token!r} names {names[i] if names else i}, which {given[i]!r} already observes"
                raise VPIntegratorError(f"observe {text!r}: {twice}; give each component once", key="observe")
            given[i] = token
        idx += found
    return tuple(idx)


def resolve_observation(observe: Any, full_dim: int, names: Sequence[str] = (), system: str | None = None,
                        train_states: np.ndarray | None = None) -> Observation | None:
    """The ``Observation`` the ``observe`` value declares of a state of ``full_dim`` components named ``names``
    (the system's ``state_names``; ``y1 ..`` or none for data without a system); None for the full state.
    ``basis:K`` is fitted on ``train_states`` (the training split's states, (..., full_dim)). One-line errors
    (key ``observe``): an unknown name, an index out of range, no positions to observe, K above ``full_dim``."""
    text = check_observe_spec(observe)
    if text is None:
        return None
    names = tuple(str(n) for n in names) if len(names) == full_dim else ()
    if is_reduction_spec(text):
        raise VPIntegratorError(f"observe {text!r}: a reduction is resolved by vpintegrator.reduction."
                                "reduction_observation (vp-train and vp-rollout do); give a model trained with it",
                                key="observe")
    if text.startswith(BASIS_PREFIX):
        k = int(text[len(BASIS_PREFIX):])
        if k > full_dim:
            raise VPIntegratorError(f"observe {text!r}: {k} channels of a state of {full_dim} components; give "
                                    f"K <= {full_dim}", key="observe")
        if train_states is None:
            raise VPIntegratorError(f"observe {text!r}: a basis is fitted on the training split; give a model trained "
                                    "with it (its recorded basis is used) or observe components", key="observe")
        basis = fit_basis(train_states, k)
        return Observation(text, basis, None, tuple(f"b{i + 1}" for i in range(k)), system)
    idx = _components(text, names, full_dim, system)
    matrix = np.eye(full_dim)[list(idx)]
    shown = tuple(names[i] for i in idx) if names else tuple(f"y{i + 1}" for i in idx)
    return Observation(text, matrix, idx, shown, system)


def observation_from_record(record: Any, where: str = "the record") -> Observation | None:
    """The ``Observation`` of a checkpoint's or ``summary.json``'s record (``Observation.record``); None for none."""
    if record is None:
        return None
    if not isinstance(record, Mapping) or "matrix" not in record or "spec" not in record:
        raise VPIntegratorError(f"{where}: unreadable observation record {record!r}")
    matrix = np.asarray(record["matrix"], dtype=np.float64)
    if matrix.ndim != 2:
        raise VPIntegratorError(f"{where}: the observation matrix must be 2-d; got shape {matrix.shape}")
    idx = record.get("indices")
    names = tuple(str(n) for n in (record.get("names") or [f"c{i + 1}" for i in range(matrix.shape[0])]))
    system = record.get("system") or None
    reduction = record.get("reduction")
    return Observation(str(record["spec"]), matrix, None if idx is None else tuple(int(i) for i in idx), names,
                       None if system is None else str(system),
                       reduction_record=dict(reduction) if isinstance(reduction, Mapping) else None)


def observation_of(meta: Mapping[str, Any]) -> Observation | None:
    """The observation of trajectories (their ``meta``, a file's attributes) that hold observed channels only;
    None for a full state."""
    spec = meta.get("observation")
    if spec is None or (isinstance(spec, str) and not spec):
        return None
    matrix = np.atleast_2d(np.asarray(meta.get("observation_matrix"), dtype=np.float64))
    full_dim = int(meta.get("observation_full_dim", matrix.shape[1]))
    if matrix.shape[1] != full_dim:
        raise VPIntegratorError(f"{meta.get('source', 'the data')}: observation_matrix has {matrix.shape[1]} columns "
                                f"but observation_full_dim is {full_dim}")
    eye = np.eye(full_dim)
    rows = [int(np.argmax(r)) for r in matrix]
    idx = tuple(rows) if np.array_equal(matrix, eye[rows]) and not str(spec).startswith(BASIS_PREFIX) else None
    system = meta.get("observed_system") or None
    reduction = meta.get("observation_reduction")
    if reduction is not None:  # a reduction (its record: JSON text in a file, a dict in memory)
        import json

        record = json.loads(reduction) if isinstance(reduction, (str, bytes)) else dict(reduction)
        return Observation(str(spec), matrix, None, tuple(f"r{i + 1}" for i in range(matrix.shape[0])),
                           None if system is None else str(system), reduction_record=record)
    if idx is not None:
        from .trajectories import state_names

        names = state_names(system, full_dim)
        shown = tuple(names[i] for i in idx)
    else:
        shown = tuple(f"b{i + 1}" for i in range(matrix.shape[0]))
    return Observation(str(spec), matrix, idx, shown, None if system is None else str(system))


def observe_trajectories(data: "Trajectories", observation: Observation) -> "Trajectories":
    """``data`` observed: its states mapped to the observed channels, its ``meta`` naming no system but the
    observation (``OBSERVATION_KEYS``), so that what needs the full state refuses it in one line."""
    from .trajectories import Trajectories

    y = observation.apply(np.asarray(data.y))
    meta = {k: v for k, v in data.meta.items()
            if k not in ("system", "system_class", "invariant_names") and not k.startswith("max_rel_drift_")}
    meta.update(observation.meta())
    if "dim" in meta:
        meta["dim"] = observation.dim
    return Trajectories(y=y, t=data.t, meta=meta, failed_step=data.failed_step)


def check_same(observation: Observation | None, other: Observation | None, what: str, other_what: str,
               key: str = "observe") -> None:
    """Refuse, in one line naming both, two observations that differ (one of them None: the full state)."""
    def said(o: Observation | None) -> str:
        return "the full state" if o is None else f"observation {o.describe()}"

    if observation is None and other is None:
        return
    if observation is None or other is None or not observation.same_as(other):
        raise VPIntegratorError(f"{what} is on {said(observation)} but {other_what} is on {said(other)}; a model "
                                "rolls out on the observation it was trained on: give observe to match",
                                key=key)
