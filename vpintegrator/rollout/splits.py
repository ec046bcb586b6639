"""Which conditions a comparison run rolls out and how they relate to the models' training: the ``split``
labels of ``vp-rollout`` and its held-out conditions (``heldout``).

A model trained by ``vp-train`` carries its trajectory split (``model.training_split``: ``{"train", "val",
"test"}`` trajectory indices, and ``model.training_split_data``: the number of trajectories and a digest of
their initial states; see ``vpintegrator.training.plan.split_record``). The split *applies* to a data
file whose initial conditions are those (same count, same first states in the same order; another horizon
is fine). Labels of the rolled-out conditions:

- relative to a model with an applicable split: ``train``, ``val`` or ``test``; ``test`` means held out of
  the model's training *and of every model it was fine-tuned from* (``init_from``, ``pretrained:NAME``: the
  checkpoint's ``ancestors``, ``vpintegrator.training.plan.ancestry``): a trajectory of the model's test split
  that an ancestor trained or validated on is ``ancestor_seen`` (an ancestor whose record does not apply to
  the file, or that recorded no split, is said in a note line);
- ``new``: conditions drawn by ``heldout`` (no model saw them);
- ``unknown``: a model without a split (pretrained, GML weights, a checkpoint written before splits were
  recorded, a module given from Python) or whose split does not apply to this data file.

An integrator's row (and the reference) is labelled relative to the models of the run: per trajectory the
least out-of-sample label over the models whose split applies (``train`` before ``val`` before ``test``),
``unknown`` when no model's split applies.

A split may hold out initial conditions (``vp-train``'s random split) or, for a data set whose parameters
vary per trajectory, **parameters** (``parameter_split``): ``interpolation`` holds out the trajectories
in a random cube inside the parameter box, ``extrapolation`` those at the box's ends (the outer shell).
Either is recorded like ``vp-train``'s (``split`` and ``split_data``, plus ``split_by`` saying how), so
``vp-rollout`` labels the rows of a model trained on it the same way. ``heldout`` conditions of a
parametric data set come with new parameters too (``vpintegrator.rollout.plan`` draws them from the
file's ``parameter_dists`` with the held-out seed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..data.summary import SPLIT_LABELS  # the values of the ``split`` column, in table order
from ..errors import VPIntegratorError

__all__ = ["SPLIT_LABELS", "ModelSplit", "model_split", "data_digest", "default_traj", "shrink_note", "labels_for",
           "run_labels", "heldout_seed", "draw_heldout", "label_rows", "split_rows", "parameter_split",
           "PARAMETER_SPLITS", "select", "select_traj", "horizon"]

#: how ``parameter_split`` holds out parameters
PARAMETER_SPLITS = ("interpolation", "extrapolation")

#: data-file labels, most in-sample first (the rule for a row relative to several models)
_RANK = {"train": 0, "val": 1, "ancestor_seen": 2, "test": 3}


class ModelSplit:
    """A model's split as it applies to the rolled-out data: ``label``, ``split`` (the three index lists, or
    None when it does not apply) and ``note`` (a line saying why not, or None)."""

    #: set by __init__ (declared for type checkers)
    label: str
    split: dict[str, Any] | None
    note: str | None
    shipped: str | None

    def __init__(self, label: str, split: dict[str, Any] | None, note: str | None,
                 seen: set[int] | frozenset[int] = frozenset(), shipped: str | None = None) -> None:
        self.label, self.split, self.note = label, split, note
        #: the name of a shipped model (``pretrained:NAME``): its split is fixed, it cannot be retrained
        self.shipped = shipped
        #: trajectories of the file an ancestor (``init_from``) trained or validated on
        self.seen = frozenset(int(i) for i in seen)

    def of(self, i: int) -> str:
        """The label of data-file trajectory ``i`` for this model (``ancestor_seen``: in its test split, but in
        the training or validation split of a model it was fine-tuned from)."""
        if self.split is None:
            return "unknown"
        for name in ("train", "val", "test"):
            if i in self._sets[name]:
                return "ancestor_seen" if name == "test" and i in self.seen else name
        return "unknown"

    def held_out(self) -> set[int]:
        """The model's test trajectories that no ancestor trained or validated on."""
        return set() if self.split is None else {int(i) for i in self.split["test"]} - self.seen

    @property
    def _sets(self) -> dict[str, set]:
        if not hasattr(self, "_cache"):
            split = self.split or {}
            self._cache = {k: {int(i) for i in split.get(k, [])} for k in ("train", "val", "test")}
        return self._cache


def data_digest(path) -> tuple[int, str]:
    """``(n_traj, first-states digest)`` of a data file (only its first states are read)."""
    from ..data import read_trajectories
    from ..data.trajectories import first_states_digest

    first = read_trajectories(path, steps=[0])
    return first.n_traj, first_states_digest(first.y[:, 0])


def model_split(label: str, model: Any, digest: tuple[int, str] | None, data) -> ModelSplit:
    """The split of ``model`` (label ``label``) as it applies to the data file ``data`` whose
    ``data_digest`` is ``digest``."""
    split = getattr(model, "training_split", None)
    if not isinstance(split, dict) or not all(isinstance(split.get(k), list) for k in ("train", "val", "test")):
        return ModelSplit(label, None, f"model {label!r}: no trajectory split recorded (pretrained weights or a "
                                       "checkpoint from before splits were recorded); its rows are labelled 'unknown'")
    info = getattr(model, "training_split_data", None) or {}
    n, sha = digest if digest is not None else (None, None)
    if info.get("n_traj") != n or info.get("first_states_sha256") != sha:
        return ModelSplit(label, None, f"model {label!r} was trained on other trajectories than those of {data} "
                                       f"({info.get('n_traj', '?')} trajectories there, {n} here, or other initial "
                                       "conditions); its split does not apply, its rows are labelled 'unknown'")
    seen, notes = ancestors_seen(label, model, digest, data)
    return ModelSplit(label, split, "; ".join(notes) or None, seen, shipped=_shipped_name(model))


def _shipped_name(model: Any) -> str | None:
    """The name of a shipped pretrained model (read from ``vpintegrator/pretrained``), else None."""
    from .._shipped import PRETRAINED_DIR

    source = getattr(model, "source_file", None)
    if not isinstance(source, str) or Path(source).parent.resolve() != PRETRAINED_DIR:
        return None
    return Path(source).stem


def ancestors_seen(label: str, model: Any, digest: tuple[int, str] | None, data) -> tuple[set[int], list[str]]:
    """The trajectories of the data file (``digest``: its ``data_digest``) that the models ``model`` was
    fine-tuned from trained or validated on (``model.training_ancestors``), and a note per ancestor whose
    record cannot tell (no split recorded, or a split of other data)."""
    seen: set[int] = set()
    notes: list[str] = []
    n, sha = digest if digest is not None else (None, None)
    for anc in getattr(model, "training_ancestors", None) or []:
        source = anc.get("source", "?")
        split, info = anc.get("split"), anc.get("split_data") or {}
        if not isinstance(split, dict):
            notes.append(f"model {label!r} was fine-tuned from {source}, which records no trajectory split: its "
                         "'test' rows are held out of its own training only")
        elif info.get("n_traj") != n or info.get("first_states_sha256") != sha:
            notes.append(f"model {label!r} was fine-tuned from {source}, trained on other data than {data} "
                         f"({info.get('n_traj', '?')} trajectories): its 'test' rows are held out of its own training, "
                         "and of that ancestor's as far as the files differ")
        else:
            seen |= {int(i) for k in ("train", "val") for i in split.get(k, [])}
    return seen, notes


def default_traj(splits: Sequence[ModelSplit]) -> np.ndarray | None:
    """The trajectories rolled out when none are given: those in the test split of every model whose split
    applies and that none of its ancestors trained or validated on (``ModelSplit.held_out``; None when no
    model's split applies: then every trajectory, as before splits existed). An empty intersection is a
    one-line error."""
    known = [s for s in splits if s.split is not None]
    if not known:
        return None
    tests = [s.held_out() for s in known]
    common = set.intersection(*tests)
    if not common:
        names = ", ".join(repr(s.label) for s in known)
        seen = [s.label for s in known if s.seen and not s.held_out() and s.split is not None and s.split["test"]]
        if seen:
            what = ("ha" + ("s" if len(known) == 1 else "ve") + " no test trajectory that the models "
                    + ("it was" if len(known) == 1 else "they were") + " fine-tuned from did not train or validate on")
        elif len(known) == 1:
            what = "has an empty test split (test_fraction = 0)"
        else:
            what = "have no test trajectory in common"
        raise VPIntegratorError(
            f"traj: model(s) {names} {what}; give traj (trajectory indices) or heldout (new initial conditions)",
            key="traj",
        )
    return np.array(sorted(common), dtype=np.int64)


def shrink_note(splits: Sequence[ModelSplit], idx: np.ndarray) -> str | None:
    """The line to say when ``default_traj``'s trajectories ``idx`` are fewer than some model's test split (the
    models' test splits differ: other split seeds, fractions or split kinds), else None: a comparison on the
    trajectories every model holds out, and how many of each model's test trajectories that is."""
    known = [s for s in splits if s.split is not None]
    seen = [(s.label, len(s.split["test"]) - len(s.held_out()), len(s.split["test"])) for s in known
            if s.split is not None and len(s.held_out()) < len(s.split["test"])]
    ancestors = "; ".join(f"{n} of model {label!r}'s {m} test trajectories were trained or validated on by the "
                          f"model(s) it was fine-tuned from: left out" for label, n, m in seen)
    sizes = [(s.label, len(s.held_out())) for s in known if s.split is not None]
    if not sizes or all(n == idx.size for _, n in sizes):
        return f"Warning: {ancestors}" if ancestors else None
    each = ", ".join(f"{label!r} {n}" for label, n in sizes)
    return (f"Warning: the models' test splits differ (other split_seed or fractions); the comparison's sample "
            f"shrank to the {idx.size} of {max(n for _, n in sizes)} test trajectories that every model holds out "
            f"(test trajectories: {each}); {_shrink_fix(known)}" + (f"; {ancestors}" if ancestors else ""))


def _shrink_fix(known: Sequence[ModelSplit]) -> str:
    """What makes the models' test splits one: a shipped model's split is fixed, so the others are trained with
    its split settings (when one shipped split is among them), else with one split_seed."""
    shipped = {s.shipped for s in known if s.shipped}
    if not shipped:
        return "train them with one split_seed, or give traj or heldout"
    from ..models.files import pretrained_info

    settings = set()
    for name in sorted(shipped):
        rec = pretrained_info(name).get("split") or {}
        settings.add((rec.get("seed"), rec.get("val_fraction"), rec.get("test_fraction")))
    names = ", ".join(f"pretrained:{n}" for n in sorted(shipped))
    if len(settings) > 1 or len(shipped) == len(known):
        return (f"the shipped models ({names}) were trained on splits of their own and cannot be retrained: give traj "
                "(trajectory indices) or heldout (new initial conditions none of them saw)")
    seed, val, test = settings.pop()
    return (f"{names} is shipped: its split is fixed (split_seed {seed}, val_fraction {val}, test_fraction {test}), "
            f"so train the other model(s) on this file with vp-train --split-seed {seed} --val-fraction {val} "
            f"--test-fraction {test} to compare on its whole test split, or give traj or heldout")


def labels_for(split: ModelSplit, idx: np.ndarray, n_new: int) -> list[str]:
    """Per rolled-out row: ``split``'s label of each data-file trajectory in ``idx``, then ``new`` for the
    ``n_new`` held-out conditions."""
    return [split.of(int(i)) for i in idx] + ["new"] * n_new


def run_labels(splits: Sequence[ModelSplit], idx: np.ndarray, n_new: int) -> list[str]:
    """Per rolled-out row, the label relative to the run's models (integrator rows, the reference): the
    least out-of-sample label over the models whose split applies; ``unknown`` when none applies."""
    known = [s for s in splits if s.split is not None]
    out = []
    for i in idx:
        labels = [s.of(int(i)) for s in known]
        labels = [lab for lab in labels if lab in _RANK]
        out.append(min(labels, key=_RANK.__getitem__) if labels else "unknown")
    return out + ["new"] * n_new


def heldout_seed(meta: dict[str, Any], seed: int | None) -> int:
    """The seed of the held-out conditions: ``seed`` if given, else one derived from the data's own seed
    (``SeedSequence([data seed, 1]).generate_state(1)``: a stream other than the data's
    ``default_rng(data seed)``, the same on every run)."""
    if seed is not None:
        return int(seed)
    base = meta.get("seed", 0)
    base = int(base[0] if isinstance(base, (list, tuple, np.ndarray)) else base)
    return int(np.random.SeedSequence([base, 1]).generate_state(1, dtype=np.uint64)[0] >> 1)


def draw_heldout(meta: Mapping[str, Any], system, n: int, seed: int, data_y0: np.ndarray, data) -> np.ndarray:
    """``n`` new initial conditions from the data file's own sampler (its ``sampler``/``sampler_args``
    attributes) with ``numpy.random.default_rng(seed)``; a one-line error (key ``heldout``) when the file
    names no sampler, the sampler is deterministic (it would draw the data's own conditions) or a drawn
    condition equals one of the data's."""
    from ..systems.initial_conditions import sample_initial_conditions

    sampler = meta.get("sampler")
    if not isinstance(sampler, str) or not sampler:
        raise VPIntegratorError(f"heldout: {data} does not name the sampler of its initial conditions (no 'sampler' "
                                "attribute; not written by vp-gen); give traj instead", key="heldout")
    if sampler in ("paper_sphere", "list"):
        raise VPIntegratorError(f"heldout: the sampler of {data}, {sampler!r}, is deterministic and draws no new "
                                "initial conditions; give traj, or data made with a random sampler (sphere, box)",
                                key="heldout")
    args = meta.get("sampler_args") or "{}"
    try:
        args = json.loads(args) if isinstance(args, str) else dict(args)
    except (ValueError, TypeError):
        raise VPIntegratorError(f"heldout: {data} has unreadable sampler_args {args!r}", key="heldout") from None
    try:
        y0 = sample_initial_conditions(system, sampler, int(n), np.random.default_rng(int(seed)), **args)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"heldout: drawing from the sampler of {data}: {err}", key="heldout") from None
    y0 = np.asarray(y0, dtype=np.float64)
    if data_y0.size:
        d = np.min(np.linalg.norm(y0[:, None, :] - data_y0[None, :, :], axis=-1), axis=1) if len(data_y0) * n <= 4e7 \
            else np.array([np.min(np.linalg.norm(data_y0 - p, axis=-1)) for p in y0])
        if np.any(d == 0):
            raise VPIntegratorError(f"heldout: seed {seed} draws an initial condition of {data} itself; give another "
                                    "heldout_seed", key="heldout_seed")
    return y0


def label_rows(idx: np.ndarray, n_new: int, model_splits: Sequence[ModelSplit], entries: Sequence[tuple[str, Any, str]],
               methods: Sequence[str]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], str | None]:
    """The ``split`` labels of a run rolling out the data file's trajectories ``idx`` and ``n_new`` held-out
    conditions: ``(the run's labels per row, method label -> its labels per row, the one warning line for
    trajectories a model trained on or None)``; ``model_splits`` are those of ``entries`` (label, model,
    source), in order, and ``methods`` every method's label."""
    labels_run = tuple(run_labels(model_splits, idx, n_new))
    by_label = {label: ms for (label, _, _), ms in zip(entries, model_splits)}
    labels = {label: (tuple(labels_for(by_label[label], idx, n_new)) if label in by_label else labels_run)
              for label in methods}
    lines = []
    for label, phrase in (("train", "in the training split of model(s)"),
                          ("ancestor_seen", "trained or validated on by a model that model(s)")):
        who = [ms.label for ms in model_splits if ms.split is not None and any(ms.of(int(i)) == label for i in idx)]
        if not who:
            continue
        rows = sorted({int(i) for ms in model_splits if ms.split is not None for i in idx if ms.of(int(i)) == label})
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        where = (f"{phrase} {', '.join(map(repr, who))}" if label == "train"
                 else f"{phrase} {', '.join(map(repr, who))} {'was' if len(who) == 1 else 'were'} fine-tuned from")
        lines.append(f"{len(rows)} of the {idx.size} rolled-out trajectories ({shown}) are {where}; their rows are "
                     f"labelled '{label}' (not out of sample)")
    return labels_run, labels, ("Warning: " + "; ".join(lines)) if lines else None


def split_rows(label: str, plan, per_traj, names, cum, seconds_per_step: float, failed_step) -> list[dict]:
    """The table rows of one method: one per ``split`` label present among its rolled-out rows (in the
    order train, val, test, new, unknown), each aggregating only those trajectories
    (``vpintegrator.data.summary.split_summary_rows``), with the ``reference`` column (``exact`` or
    ``data``)."""
    from ..data.summary import split_summary_rows

    mode = plan.reference_attrs.get("reference_mode", plan.reference)
    return split_summary_rows(label, per_traj, names, list(plan.labels[label]), mode, max_abs_cum_log_det_J=cum,
                              seconds_per_step=seconds_per_step, failed_step=failed_step)


def parameter_split(traj, mode: str = "interpolation", test_fraction: float = 0.2, val_fraction: float = 0.1,
                    seed: int = 0) -> dict[str, Any]:
    """A train/val/test split of a parametric data set's trajectories that holds out **parameters**.

    Each varying column of ``traj.params`` is scaled to [0, 1] over the data's range (the parameter box);
    ``d_i`` is the sup-norm distance of trajectory ``i``'s parameters from a point ``c`` of the box:

    - ``"interpolation"``: ``c`` uniform in [0.25, 0.75]^p (``numpy.random.default_rng(seed)``); the
      ``round(test_fraction * n)`` trajectories nearest ``c`` (a cube inside the box) are ``test``;
    - ``"extrapolation"``: ``c`` the box's centre; the ``round(test_fraction * n)`` farthest (the box's
      ends, every face) are ``test``.

    ``round(val_fraction * n)`` of the others, at random, are ``val``; the rest ``train``.

    Parameters
    ----------
    traj : Trajectories
        With ``params`` (n_traj, p) (a parametric data set; only ``y[:, 0]`` and ``params`` are used).

    Returns
    -------
    dict
        ``{"split": {"train", "val", "test"}: sorted indices, "split_data": {"n_traj", "first_states_sha256"},
        "split_by": {"kind": "parameters", "mode", "test_fraction", "val_fraction", "seed", "columns",
        "low", "high", "center", "radius"}}``: the record ``vp-train`` writes (``split``, ``split_data``), so
        ``vp-rollout`` applies it to a model that carries it; ``radius`` is the sup-norm distance (in the
        scaled box) that separates ``test`` from the rest.
    """
    from ..data.trajectories import first_states_digest

    if getattr(traj, "params", None) is None:
        raise VPIntegratorError("parameter_split: the data set has one parameter set for all trajectories (no "
                                "/params); split its initial conditions instead (vp-train's split)", key="split")
    if mode not in PARAMETER_SPLITS:
        raise VPIntegratorError(f"parameter_split: mode must be one of {', '.join(PARAMETER_SPLITS)}; got {mode!r}",
                                key="split")
    for name, f in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
            raise VPIntegratorError(f"parameter_split: {name} must be a number in [0, 1); got {f!r}", key=name)
    params = np.asarray(traj.params, dtype=np.float64)
    n = params.shape[0]
    low, high = params.min(0), params.max(0)
    varying = high > low
    if not varying.any():
        raise VPIntegratorError("parameter_split: no parameter varies over the trajectories; nothing to hold out",
                                key="split")
    u = (params[:, varying] - low[varying]) / (high[varying] - low[varying])
    rng = np.random.default_rng(int(seed))
    center = rng.uniform(0.25, 0.75, size=u.shape[1]) if mode == "interpolation" else np.full(u.shape[1], 0.5)
    d = np.max(np.abs(u - center), axis=1)
    n_test, n_val = int(round(test_fraction * n)), int(round(val_fraction * n))
    if n_test + n_val >= n:
        raise VPIntegratorError(f"parameter_split: test_fraction + val_fraction leave no training trajectory of {n}",
                                key="test_fraction")
    order = np.argsort(d if mode == "interpolation" else -d, kind="stable")
    test = np.sort(order[:n_test])
    rest = np.sort(order[n_test:])
    val = np.sort(rng.permutation(rest)[:n_val])
    train = np.setdiff1d(rest, val)
    radius = float(d[order[n_test - 1]]) if n_test else None
    return {
        "split": {"train": [int(i) for i in train], "val": [int(i) for i in val], "test": [int(i) for i in test]},
        "split_data": {"n_traj": int(n), "first_states_sha256": first_states_digest(np.asarray(traj.y[:, 0]))},
        "split_by": {"kind": "parameters", "mode": mode, "test_fraction": float(test_fraction),
                     "val_fraction": float(val_fraction), "seed": int(seed),
                     "columns": [c for c, v in zip(traj.param_names, varying) if v],
                     "low": low[varying].tolist(), "high": high[varying].tolist(), "center": center.tolist(),
                     "radius": radius},
    }


def select_traj(traj: Any, n_traj: Any, n_file: int, where: Path) -> np.ndarray:
    """The trajectories the keys ``traj`` / ``n_traj`` select of a file of ``n_file`` (all when neither)."""
    if traj is not None:
        try:
            idx = np.array([int(i) for i in traj], dtype=np.int64)
        except (TypeError, ValueError):
            raise VPIntegratorError(f"traj must be integer indices; got {traj!r}", key="traj") from None
        if idx.size == 0:
            raise VPIntegratorError("traj is empty; give trajectory indices into the data file", key="traj")
        bad = idx[(idx < 0) | (idx >= n_file)]
        if bad.size:
            raise VPIntegratorError(
                f"traj index {int(bad[0])} is out of range: {where} has {n_file} trajectories (0 .. {n_file - 1})",
                key="traj",
            )
        if np.unique(idx).size != idx.size:
            raise VPIntegratorError(f"traj lists an index twice: {traj!r}", key="traj")
        return idx
    if n_traj is not None:
        n = n_traj
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= n_file:
            raise VPIntegratorError(
                f"n_traj must be an int in 1 .. {n_file} (trajectories in {where}); got {n!r}", key="n_traj"
            )
        return np.arange(int(n))
    return np.arange(n_file)


def horizon(t_end_key: Any, t0: float, dt: float, n_file: int) -> int:
    """Steps of ``dt`` from ``t0`` to the key ``t_end`` (None: the file's last state)."""
    if t_end_key is None:
        return n_file - 1
    try:
        t_end = float(t_end_key)
    except (TypeError, ValueError):
        raise VPIntegratorError(f"t_end must be a number; got {t_end_key!r}", key="t_end") from None
    n_steps = int(round((t_end - t0) / dt)) if math.isfinite(t_end) else 0
    if not math.isfinite(t_end) or n_steps < 1:
        raise VPIntegratorError(
            f"t_end {t_end_key!r} gives {n_steps} steps of dt = {dt:g} from t0 = {t0:g}; give at least {t0 + dt:g}",
            key="t_end",
        )
    return n_steps


def select(data: Path, traj: Any, n_traj: Any, t_end: Any) -> tuple[dict[str, Any], Any, float, np.ndarray, float,
                                                                   int]:
    """What the keys ``traj``/``n_traj``/``t_end`` select of the data file ``data``, read from its metadata
    only: ``(meta, system, dt, trajectory indices, t0, n_steps)`` (one-line errors naming the key)."""
    from ..data import read_metadata
    from ..systems.unknown import system_or_unknown

    meta = read_metadata(data)
    system = system_or_unknown(meta, data)
    dt = float(meta["dt"])
    idx = select_traj(traj, n_traj, int(meta["n_traj"]), data)
    t0 = float(meta.get("t0", 0.0))
    return meta, system, dt, idx, t0, horizon(t_end, t0, dt, int(meta["n_states"]))
