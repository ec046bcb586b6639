"""Partial observation: what a model sees of the state, declared once, as a fitted object.

An observation maps the full state (``full_dim`` components) to ``dim`` observed channels. It is declared by a
short spec (the ``observe`` key of ``vp-train`` and ``vp-rollout``) whose prefix names its **kind**, a subclass
of ``Observation`` (the interface, as pysindy's feature libraries: one class per kind, fit / transform / names):

- no prefix: ``Components``, a selection of components: ``"q"`` / ``"p"`` (the positions / momenta of a
  canonical system: its ``state_names`` starting with ``q`` / ``p``), state names ``"z1,z2"``, indices ``"0,1"``
  (or a TOML list ``[0, 1]``);
- ``"basis:K"``: ``SVDBasis``, the K leading right singular vectors of the training split's states (uncentred,
  orthonormal rows; ``fit_basis``); the fitted matrix is recorded with the model, and a rollout uses it;
- the **reductions** of ``vpintegrator.reduction.observation`` (registered when ``vpintegrator.reduction`` is
  imported): ``"psd:K"`` / ``"psd_balanced:K"`` (a PSD basis fitted on the training split) and ``"file:PATH"``
  (a reduction file: a PSD basis or a symplectic autoencoder). A reduction has an inverse, its decoder
  (``Observation.decode``); its ``reduction_record`` (kind, file, sha256) is recorded with the model.

A kind is one subclass that sets ``prefix`` (the spec prefix it owns; subclassing registers it, ``kind_of``
finds it) and defines ``fit`` (and ``parse`` when its spec has a form to check; ``apply`` / ``decode`` when it
is not a linear map; ``attach`` when a record leaves something out). Every parser and call site asks the
registry (``check_observe_spec``, ``resolve_observation``, ``Observation.from_record``, ``observation_of``).

Training and rollout see only the observed channels (``observe_trajectories``); files keep the full state
where they have it. Observed trajectories carry their observation in ``meta`` (``observation``,
``observation_matrix``, ``observed_system``, ``observation_full_dim``) and name no system: written to a file
they make a data-only file of the observed channels, which trains and rolls out like any data-only file and
refuses what needs the full state. A model records ``Observation.record()`` (``trained_on["observation"]``)
and a run on another observation refuses it in one line (``check_same``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import numpy as np

from ..errors import VPIntegratorError

if TYPE_CHECKING:  # pragma: no cover
    from .trajectories import Trajectories

__all__ = ["Observation", "Components", "SVDBasis", "kind_of", "observation_kinds", "check_observe_spec",
           "resolve_observation", "fit_basis", "observe_trajectories", "observation_of", "observation_from_record",
           "check_same", "OBSERVATION_KEYS"]

#: the ``meta`` keys of observed trajectories (and the attributes of a file of observed channels)
OBSERVATION_KEYS = ("observation", "observation_matrix", "observed_system", "observation_full_dim")
#: specs that mean "the whole state" (no observation)
_FULL = ("", "all", "full", "none")
#: the registry: spec prefix -> its kind (``""``: the component selection, the spec without a prefix)
_KINDS: dict[str, type["Observation"]] = {}


@dataclass(frozen=True, eq=False)
class Observation:
    """A fitted observation ``y -> matrix @ y`` of ``full_dim`` components into ``dim`` channels, and the
    interface of its kinds (module docstring). ``Observation`` itself is what a record of an unknown kind
    reads as: its recorded linear map.

    A kind (a subclass) sets ``prefix`` and defines ``fit``:

    - ``prefix`` (class attribute): the spec prefix it owns (``"basis:"``), registered on subclassing;
    - ``parse(raw)`` (classmethod): the spec's form checked and normalised, without the system or the data
      (a one-line error, key ``observe``); the default strips it and drops spaces;
    - ``fit(spec, full_dim, names, system, train_states)`` (classmethod): the fitted observation of a state of
      ``full_dim`` components named ``names`` of ``system``; ``train_states`` (..., full_dim) are the training
      split's states when ``fits_on_training_split``, else None;
    - ``apply(y)`` (transform, NumPy or torch) and ``decode(z)`` (the inverse, for a reduction): a linear map
      and its transpose unless overridden; ``names``: the channels; ``record()`` / ``from_record(record)``:
      save and load (``attach(where)`` reloads what a record leaves out, a nonlinear reduction's file);
      ``same_as(other)``: equality by channels.

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

    #: the spec prefix this kind owns (None: not a kind of its own)
    prefix: ClassVar[str | None] = None
    #: whether ``fit`` takes the training split's states
    fits_on_training_split: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a kind that sets ``prefix``; one line if another class owns it (the same class defined
        again, a module reloaded, replaces itself)."""
        super().__init_subclass__(**kwargs)
        prefix = cls.__dict__.get("prefix")
        if prefix is None:
            return
        held = _KINDS.get(prefix)
        if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
            raise VPIntegratorError(f"observation kind {cls.__qualname__}: the prefix {prefix!r} is "
                                    f"{held.__qualname__}'s; give the kind another prefix")
        _KINDS[prefix] = cls

    @classmethod
    def parse(cls, raw: str) -> str:
        """The spec ``raw`` (as given) in its normal form: spaces dropped. A kind checks its form here."""
        return raw.strip().replace(" ", "")

    @classmethod
    def fit(cls, spec: str, full_dim: int, names: Sequence[str] = (), system: str | None = None,
            train_states: np.ndarray | None = None) -> "Observation":
        """The observation ``spec`` declares of states of ``full_dim`` components (class docstring)."""
        raise VPIntegratorError(f"observe {spec!r}: an observation read from a record is not fitted again; "
                                "give the spec of a kind", key="observe")

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

    def attach(self, where: str = "the model") -> "Observation":
        """This observation with what its record leaves out loaded again (a nonlinear reduction's file)."""
        return self

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

    @classmethod
    def from_record(cls, record: Any, where: str = "the record") -> "Observation | None":
        """The observation of a checkpoint's or ``summary.json``'s record (``record``), of the kind its spec
        names (``Observation`` for a kind not registered here); None for none."""
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
        return kind_of(str(record["spec"]))(
            str(record["spec"]), matrix, None if idx is None else tuple(int(i) for i in idx), names,
            None if system is None else str(system),
            reduction_record=dict(reduction) if isinstance(reduction, Mapping) else None)

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
        if text is None or not issubclass(kind_of(text), Components) or self.indices is None:
            return False
        from .trajectories import state_names

        try:
            other = resolve_observation(text, self.full_dim, state_names(self.system, self.full_dim), self.system)
        except VPIntegratorError:
            return False
        return other is not None and self.same_as(other)


def kind_of(spec: str) -> type[Observation]:
    """The kind whose prefix the spec starts with (the longest such prefix): ``Components`` for none."""
    for prefix in sorted(_KINDS, key=len, reverse=True):
        if prefix and spec.startswith(prefix):
            return _KINDS[prefix]
    return _KINDS[""]


def observation_kinds() -> dict[str, type[Observation]]:
    """The registered kinds by prefix (``""``: components); the reductions' once ``vpintegrator.reduction`` is
    imported."""
    return dict(_KINDS)


def _encode_by(reduction: Any, y: Any) -> Any:
    """``reduction.encode`` of NumPy states, or of torch tensors (through NumPy: no gradient)."""
    if isinstance(y, np.ndarray):
        return reduction.encode(y)
    import torch

    return torch.as_tensor(reduction.encode(y.detach().cpu().numpy()), dtype=y.dtype, device=y.device)


def check_observe_spec(value: Any) -> str | None:
    """The ``observe`` key's value, checked for its form only by its kind's ``parse`` (what needs the system or
    the data is checked by ``resolve_observation``): None, a spec string or a list of component indices (made
    ``"0,1"``)."""
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
    kind = kind_of(value.strip())  # by the spec as written (a path keeps its spaces), else without spaces
    if not kind.prefix:
        text = value.strip().replace(" ", "")
        if text.lower() in _FULL:
            return None
        kind = kind_of(text)
    return kind.parse(value)


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


class Components(Observation):
    """Selected components of the state: ``q`` / ``p``, state names (``z1,z2``), indices (``0,1``), in the order
    given; the matrix is the identity's rows at ``indices``, and ``fit`` fits nothing."""

    prefix = ""

    @classmethod
    def parse(cls, raw: str) -> str:
        text = super().parse(raw)
        if ":" in text:  # KIND:... of a kind not registered (no state name has a colon)
            known = ", ".join(f"{p}..." for p in sorted(_KINDS) if p)
            only_here = all(k.__module__ == __name__ for k in _KINDS.values())
            hint = ("; the reductions (psd:K, psd_balanced:K, file:PATH) are known once vpintegrator.reduction is "
                    "imported") if only_here else ""
            raise VPIntegratorError(f"observe {raw!r}: no kind of observation owns the prefix "
                                    f"{text.split(':')[0] + ':'!r}; known: {known} or components (q, p, names, "
                                    f"indices){hint}", key="observe")
        if not all(part for part in text.split(",")):
            raise VPIntegratorError(f"observe {raw!r} has an empty item; give names or indices separated by commas "
                                    "(e.g. 0,1 or z1,z2)", key="observe")
        return text

    @classmethod
    def fit(cls, spec: str, full_dim: int, names: Sequence[str] = (), system: str | None = None,
            train_states: np.ndarray | None = None) -> Observation:
        idx = _components(spec, names, full_dim, system)
        shown = tuple(names[i] for i in idx) if names else tuple(f"y{i + 1}" for i in idx)
        return cls(spec, np.eye(full_dim)[list(idx)], idx, shown, system)


class SVDBasis(Observation):
    """``basis:K``: the K leading right singular vectors of the training split's states (``fit_basis``),
    channels ``b1 .. bK``."""

    prefix = "basis:"
    fits_on_training_split = True

    @classmethod
    def parse(cls, raw: str) -> str:
        text = super().parse(raw)
        k = text[len(cls.prefix):]
        if not k.isdigit() or int(k) < 1:
            raise VPIntegratorError(f"observe {raw!r}: give basis:K with K >= 1 channels (e.g. basis:2)",
                                    key="observe")
        return text

    @classmethod
    def fit(cls, spec: str, full_dim: int, names: Sequence[str] = (), system: str | None = None,
            train_states: np.ndarray | None = None) -> Observation:
        k = int(spec[len(cls.prefix):])
        if k > full_dim:
            raise VPIntegratorError(f"observe {spec!r}: {k} channels of a state of {full_dim} components; give "
                                    f"K <= {full_dim}", key="observe")
        if train_states is None:
            raise VPIntegratorError(f"observe {spec!r}: a basis is fitted on the training split; give a model trained "
                                    "with it (its recorded basis is used) or observe components", key="observe")
        return cls(spec, fit_basis(train_states, k), None, tuple(f"b{i + 1}" for i in range(k)), system)


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
    (the system's ``state_names``; ``y1 ..`` or none for data without a system), fitted by its kind
    (``kind_of``); None for the full state. A kind that ``fits_on_training_split`` (``basis:K``, ``psd:K``) is
    fitted on ``train_states`` (the training split's states, (..., full_dim)). One-line errors (key
    ``observe``): an unknown name, an index out of range, no positions to observe, K above ``full_dim``."""
    text = check_observe_spec(observe)
    if text is None:
        return None
    names = tuple(str(n) for n in names) if len(names) == full_dim else ()
    return kind_of(text).fit(text, full_dim, names, system, train_states)


def observation_from_record(record: Any, where: str = "the record") -> Observation | None:
    """The ``Observation`` of a checkpoint's or ``summary.json``'s record (``Observation.from_record``); None for
    none."""
    return Observation.from_record(record, where)


def observation_of(meta: Mapping[str, Any]) -> Observation | None:
    """The observation of trajectories (their ``meta``, a file's attributes) that hold observed channels only,
    of the kind its spec names; None for a full state."""
    spec = meta.get("observation")
    if spec is None or (isinstance(spec, str) and not spec):
        return None
    matrix = meta.get("observation_matrix")
    if isinstance(matrix, (str, bytes)):  # (a rollout file keeps it as JSON text)
        import json

        matrix = json.loads(matrix)
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    full_dim = int(meta.get("observation_full_dim", matrix.shape[1]))
    if matrix.shape[1] != full_dim:
        raise VPIntegratorError(f"{meta.get('source', 'the data')}: observation_matrix has {matrix.shape[1]} columns "
                                f"but observation_full_dim is {full_dim}")
    kind = kind_of(str(spec))
    eye = np.eye(full_dim)
    rows = [int(np.argmax(r)) for r in matrix]
    idx = tuple(rows) if np.array_equal(matrix, eye[rows]) and issubclass(kind, Components) else None
    system = meta.get("observed_system") or None
    reduction = meta.get("observation_reduction")
    if reduction is not None:  # a reduction (its record: JSON text in a file, a dict in memory)
        import json

        record = json.loads(reduction) if isinstance(reduction, (str, bytes)) else dict(reduction)
        return kind(str(spec), matrix, None, tuple(f"r{i + 1}" for i in range(matrix.shape[0])),
                    None if system is None else str(system), reduction_record=record)
    if idx is not None:
        from .trajectories import state_names

        names = state_names(system, full_dim)
        shown = tuple(names[i] for i in idx)
    else:
        shown = tuple(f"b{i + 1}" for i in range(matrix.shape[0]))
    return kind(str(spec), matrix, idx, shown, None if system is None else str(system))


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
