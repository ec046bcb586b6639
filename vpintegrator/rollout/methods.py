"""The rows of a comparison run: the models (``models``: paths, ``pretrained:NAME``, ``gml:FILE``, ``(label,
path)`` pairs, ``PATH@METHOD`` for a learned vector field), their step maps, and the classical and registered rows
named in ``integrators`` (below), each checked against the data before anything runs.

``vpintegrator.rollout.methods.prepare_methods`` is called by the plan builder
(``vpintegrator.rollout.plan.build_plan``) with the values it resolved, never a configuration.

The rows a comparison run takes in its ``integrators`` key besides the classical integrators and
``exact_flow``: one registry of row kinds, ``ROW_KINDS``, which ``run_rollouts`` asks for every name.

| row | kind | what |
|---|---|---|
| ``fd+METHOD``, ``shooting+METHOD`` | identification | each row's parameters from its first ``context_len`` states, then METHOD with them ([`IdentifiedStep`][vpintegrator.rollout.identify.IdentifiedStep]) |
| ``sindy+METHOD`` | fitted | sparse regression on the training trajectories, integrated by METHOD ([`SindyStep`][vpintegrator.rollout.sindy.SindyStep]; the ``sindy`` extra) |
| ``parrot`` | fitted | context parroting: the nearest training window's continuation, copied ([`ParrotStep`][vpintegrator.models.parrot.ParrotStep]) |
| ``arx``, ``delay_dmd``, ``narx`` | fitted | linear memory of the last ``context_len`` states, its delay DMD, and the window plus polynomial terms of the newest state ([`ARXStep`][vpintegrator.models.memory.ARXStep], [`DelayDMDStep`][vpintegrator.models.memory.DelayDMDStep], [`NARXStep`][vpintegrator.models.memory.NARXStep]) |
| ``delay_sindy+METHOD`` | fitted | SINDy on the delay vectors of ``context_len`` states, integrated by METHOD ([`DelaySindyStep`][vpintegrator.rollout.delay_sindy.DelaySindyStep]; the ``sindy`` extra) |

A **fitted** row learns from training trajectories (``FitSplit``) of the file ``fit_data`` and is scored on
the run's data file (``fitted_rows_split``); it fits on the data file it is scored on only when asked
(``fit_on_data``: a run without either is a one-line error), from that file's training trajectories:
the split of the first model of the run whose recorded split applies to the data file (the same trajectories
the models learnt from), else ``vp-train``'s default split of the file
(``vpintegrator.data.windows.default_split``: val_fraction 0.1, test_fraction 0.1, split_seed 0, the one rule
``vp-train`` splits by with its defaults, so a run without a model fits on the trajectories a default
``vp-train`` run trains on). Its rows are labelled by that split (``train``/``val``/``test``, ``new`` for
held-out conditions), and a run that names no trajectory rolls out its test split, as for a trained model
(``vpintegrator.rollout.splits``). A row kind's ``build`` receives a ``RowRequest``
(no configuration) and returns the row's step map; nothing is computed before the row runs (a fit runs in
its step map's ``start``). The fitted kinds are those of the fitted-model registry
(``vpintegrator.models.fitted``: ``list_fitted``), each built by one builder from its class's limits and
``for_row``; the identification and particle rows' modules are imported only when a row of theirs is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..data.windows import DEFAULT_SPLIT, default_split
from ..errors import VPIntegratorError
from .config import IDENTIFY_METHODS, use_device_engine
from .context import ContextStep, oracle_theta
from .engine import StepMap
from .field import field_step
from .family import step_for
from ..models.fitted import FittedModel, RowData, fitted_class, list_fitted
from . import delay_sindy, sindy  # noqa: F401  (register the SINDy rows: vpintegrator.models.fitted)
from .gle import BATH_SUMMARY, COARSE_SUMMARY, GLE_SUMMARY, bath_row, coarse_bath_row, gle_row
from .steps import ExactFlowStep, IntegratorStep, ModelStep, is_context_model

__all__ = ["Method", "StepSettings", "model_label", "parse_model_entry", "model_step", "prepare_methods",
           "check_trained_on", "split_method", "RowKind", "RowRequest", "FitSplit", "ROW_KINDS", "DEFAULT_SPLIT", "parse_row", "fitted_rows",
           "fit_split", "fitted_rows_split", "check_fit_finite", "MODEL_FORMS", "describe_rows"]




@dataclass(frozen=True)
class FitSplit:
    """The trajectories a fitted row learns from: indices into the data file (sorted) and where they come from.

    Attributes
    ----------
    train, val, test : ndarray of int64
    source : str
        E.g. ``"the split of model 'vpt'"``.
    data : Path or None
        The file the rows fit on (``fit_data``, or the run's data file with ``fit_on_data``).
    """

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    source: str
    #: the file the indices refer to and the rows fit on (None: the run's data file)
    data: Path | None = None

    def as_record(self) -> dict[str, list[int]]:
        """``{"train", "val", "test"}`` lists, the form of a model's ``training_split``."""
        return {k: [int(i) for i in getattr(self, k)] for k in ("train", "val", "test")}


@dataclass(frozen=True)
class RowRequest:
    """What a row kind's ``build`` is given: the row's name and integrator, the run's system (a
    ``SystemFamily`` for per-trajectory parameters), the data's step, the context the identification rows
    read, the data file and the fitted rows' split (None for the other rows)."""

    label: str
    integrator: str | None
    system: Any
    dt: float
    context_len: int = 3
    context_noise: float = 0.0
    data: Path | None = None
    split: FitSplit | None = None


@dataclass(frozen=True)
class RowKind:
    """A kind of row: its name (``sindy`` in ``sindy+rk4``), whether it takes ``+METHOD``, whether it is
    fitted to the data file's training trajectories, the function that builds its step map, its one-line
    ``summary`` and what it ``needs`` (both for ``describe_rows``: ``vp-rollout --list``)."""

    name: str
    takes_integrator: bool
    fitted: bool
    build: Callable[[RowRequest], StepMap]
    summary: str
    needs: str = "-"


def _trajectories(data: Path | None, idx: np.ndarray, max_states: int | None = None,
                  max_traj: int | None = None, n_steps: int | None = None) -> Callable[[], np.ndarray]:
    """A reader of the trajectories ``idx`` of ``data`` (n, T, dim), run when the row starts: the first of them
    only, at most ``max_traj`` and ``max_states`` states in all, each to at most step ``n_steps``."""
    def read() -> np.ndarray:
        from ..data import read_metadata, read_trajectories

        if data is None or idx.size == 0:
            raise VPIntegratorError("a fitted row needs training trajectories of a data file", key="data")
        n_states = int(read_metadata(data)["n_states"])
        T = n_states if n_steps is None else min(n_states, n_steps + 1)
        keep = idx.size if max_states is None else max(1, int(max_states) // T)
        keep = keep if max_traj is None else min(keep, int(max_traj))
        return read_trajectories(data, traj=idx[:keep], steps=None if T == n_states else np.arange(T)).y

    return read


def _seen(req: RowRequest, read: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """``read``, observed as the run observes (an observed run's fitted rows learn from the observed channels of
    the training trajectories: ``vpintegrator.rollout.observed``)."""
    observation = getattr(req.system, "observation", None)
    if observation is None:
        return read
    return lambda: observation.apply(read())


def _need_split(req: RowRequest) -> "FitSplit":
    if req.split is None or req.split.train.size == 0:
        raise VPIntegratorError(f"{req.label}: no training trajectory to fit on", key="integrators")
    return req.split


def _identified(how: str) -> Callable[[RowRequest], StepMap]:
    def build(req: RowRequest) -> StepMap:
        from .identify import IdentifiedStep

        return IdentifiedStep(req.system, how, str(req.integrator), req.dt, context_len=req.context_len,
                              noise=req.context_noise)

    return build


def _names(req: RowRequest, data: Path | None) -> tuple[str, ...]:
    """The state components' names of a fitted row's equations: the observation's, else the data file's."""
    from ..data.trajectory_reader import component_names

    observation = getattr(req.system, "observation", None)
    if observation is not None:
        return tuple(observation.names)
    return () if data is None else component_names(data, req.system)


def _row_data(req: RowRequest, cls: type[FittedModel]) -> RowData:
    """What a fitted row of the kind ``cls`` (``vpintegrator.models.fitted``) is built from
    (``RowData``): the training and validation trajectories of the split (a split without validation
    trajectories: the last tenth of train validates), read when the row starts, within the kind's limits; a
    window longer than the file's trajectories allow (the kind's ``reach``: the states one training sample needs
    beyond the window) is refused now, in one line naming ``context_len``."""
    from ..data import read_metadata

    split = _need_split(req)
    data = split.data or req.data
    train, val = split.train, split.val
    T = int(req.context_len)
    if cls.reach is not None and data is not None:
        n_states = int(read_metadata(data)["n_states"])
        if T + cls.reach > n_states:
            raise VPIntegratorError(
                f"{req.label}: context_len = {T} is longer than the trajectories of {data} allow "
                f"({n_states} states; this row needs context_len + {cls.reach}); give context_len <= "
                f"{n_states - cls.reach}", key="context_len")
    if cls.validates and val.size == 0:
        if train.size < 2:
            raise VPIntegratorError(f"{req.label}: one training trajectory and no validation one; give data "
                                    "with more trajectories", key="integrators")
        n_val = max(1, train.size // 10)
        train, val = train[:-n_val], train[-n_val:]
    held = f", {val.size} validation" if cls.validates else ""
    return RowData(_seen(req, _trajectories(data, train, cls.max_fit_states)),
                   _seen(req, _trajectories(data, val, max_traj=cls.max_val_traj, n_steps=cls.val_steps(T))),
                   T, int(req.system.dim), req.dt, req.integrator,
                   f"{split.source}: {train.size} training{held} trajectories of {data}", _names(req, data))


def _fitted(name: str) -> Callable[[RowRequest], StepMap]:
    """The builder of the fitted row ``name``: its registered class's ``for_row`` on ``_row_data``."""
    def build(req: RowRequest) -> StepMap:
        cls = fitted_class(name)
        return cls.for_row(_row_data(req, cls))

    return build


#: the rows of one observed state that ``estimate+ROW`` starts from a whole-window estimate (``WindowEstimatedStep``)
ONE_STATE_ROWS = ("gle", "bath", "coarse_bath")


def _estimated(req: RowRequest) -> StepMap:
    from .observed import EstimatedStep, ObservedSystem, WindowEstimatedStep

    if not isinstance(req.system, ObservedSystem) or req.system.observation is None:
        raise VPIntegratorError(f"integrators: {req.label} estimates the unobserved part of the state, but the run "
                                "observes the whole state; give observe (e.g. q), or the classical method itself",
                                key="integrators")
    inner = str(req.integrator)
    row = parse_row(inner) if inner.partition("+")[0] in ONE_STATE_ROWS else None
    if row is not None:  # estimate+gle, estimate+bath+METHOD: the row's first state over the whole window
        step = row[0].build(replace(req, label=inner, integrator=row[1]))
        return WindowEstimatedStep(step, req.context_len, label=req.label)
    return EstimatedStep(req.system.full, req.system.observation, inner, req.dt, req.context_len)


#: name -> row kind: every name ``run_rollouts`` accepts in ``integrators`` besides the classical integrators
ROW_KINDS: dict[str, RowKind] = {
    **{how: RowKind(how, True, False, _identified(how), "identification from the first context_len states, then "
                    "METHOD with the fitted parameters",
                    needs="a system linear in its parameters (System.parameter_features)")
       for how in IDENTIFY_METHODS},
    **{name: RowKind(name, cls.takes_integrator, True, _fitted(name), cls.summary, cls.needs)
       for name, cls in ((n, fitted_class(n)) for n in list_fitted())},
    "gle": RowKind("gle", False, False, gle_row, GLE_SUMMARY, needs="kac_zwanzig data (sampler 'particle') observed in "
                   "q0,p0"),
    "bath": RowKind("bath", True, False, bath_row, BATH_SUMMARY, needs="kac_zwanzig or particle_chain observed in "
                    "q0,p0; METHOD stormer_verlet[_suzuki4|_y6] or bath_splitting[_suzuki4|_y6]"),
    "coarse_bath": RowKind("coarse_bath", True, False, coarse_bath_row, COARSE_SUMMARY,
                           needs="kac_zwanzig observed in q0,p0"),
    "estimate": RowKind("estimate", True, False, _estimated, "observed runs: the full state estimated from the first "
                        "context_len observed states by least squares on the true flow, then METHOD; estimate+gle, "
                        "estimate+bath+METHOD: the particle's first state by least squares on the row's own flow over "
                        "the first context_len observed states, then the row"),
}


#: the spellings of an entry of ``models`` (``vp-rollout --model``): (form, what it is)
MODEL_FORMS: tuple[tuple[str, str], ...] = (
    ("RUN", "a vp-train run directory (its best.pt), labelled by the directory's name"),
    ("PATH.pt", "a checkpoint vp-train wrote (best.pt/last.pt labelled by their directory)"),
    ("pretrained:NAME", "a model shipped with the package (the list below; vpintegrator.list_pretrained())"),
    ("gml:FILE.h5", "a network trained by GeometricMachineLearning.jl, saved to HDF5"),
    ("PATH@METHOD", "a learned vector field (hnn, lphnn, divfree, node) integrated by the classical METHOD"),
    ("LABEL=ANY", "any of the above under the row label LABEL (Python: a (label, path) pair)"),
)


def describe_rows() -> str:
    """A text table of everything a comparison run names besides the classical integrators (those are
    [`describe_methods`][vpintegrator.integrators.describe_methods]): ``exact_flow``, the registered rows
    (``ROW_KINDS``: identification, SINDy, parrot), the oracle row of a context model, and the forms of a
    ``models`` entry; one line each saying what it is and what it needs (``vp-rollout --list``)."""
    rows = [("exact_flow", "the exact flow: SciPy DOP853 at tight tolerances, as a row next to the others",
             "a known system (not an unknown-form data file)")]
    for name, kind in ROW_KINDS.items():
        needs = kind.needs
        if kind.fitted:
            needs = "training trajectories of the data file" + ("" if needs == "-" else f"; {needs}")
        rows.append((f"{name}+METHOD" if kind.takes_integrator else name, kind.summary, needs))
    rows.append(("LABEL_oracle", "added for a context model with the finite-difference encoder: its step with the "
                 "true parameters' context", "a known system (the true parameters)"))
    head = ("row (integrators)", "what", "needs")
    width = [max(len(r[i]) for r in (head, *rows)) for i in range(2)]
    out = ["Other rows (--integrators; METHOD: a classical integrator above):"]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:2], width)) + "  " + r[2] for r in (head, *rows)]
    fw = max(len(f) for f, _ in MODEL_FORMS)
    out += ["", "Model forms (--model, repeatable; Python: run_rollouts(models=[...])):"]
    out += [f"  {form:<{fw}}  {what}" for form, what in MODEL_FORMS]
    return "\n".join(out)


def parse_row(name: str) -> tuple[RowKind, str | None] | None:
    """``"sindy+rk4"`` -> (the ``sindy`` kind, ``"rk4"``); ``"parrot"`` -> (its kind, None); None when ``name``
    is no registered row (a classical integrator, or unknown). A kind that takes ``+METHOD`` given without it is
    a one-line error; the method itself is checked by the kind's step map."""
    head, plus, method = name.partition("+")
    kind = ROW_KINDS.get(head)
    if kind is None:
        return None
    if kind.takes_integrator and not (plus and method):
        raise VPIntegratorError(f"integrators: {name!r} needs a classical method: {head}+METHOD (e.g. {head}+rk4)",
                                key="integrators")
    if not kind.takes_integrator and plus:
        raise VPIntegratorError(f"integrators: {head!r} takes no method; give {head}", key="integrators")
    return kind, (method or None)


def fitted_rows(names) -> list[str]:
    """The names among ``names`` that are fitted rows (``sindy+METHOD``, ``parrot``)."""
    out = []
    for name in names:
        row = parse_row(str(name))
        if row is not None and row[0].fitted:
            out.append(str(name))
    return out


def fitted_rows_split(fitted: Sequence[str], entries: Sequence[tuple[str, Any, str]], model_splits, data: Path,
                      meta: dict[str, Any], fit_data: str | Path | None, fit_on_data: bool,
                      scores_file: bool = True) -> FitSplit:
    """The trajectories the fitted rows ``fitted`` learn from: of the file ``fit_data`` (its split: that of the
    first model of ``entries`` whose recorded split applies to it, else vp-train's default split), scored on
    the run's ``data``; without ``fit_data`` of ``data`` itself (``model_splits``: the models' splits as they
    apply to it), which is refused (one line, key ``fit_data``) unless ``fit_on_data``; so is a ``fit_data``
    holding ``data``'s trajectories (the same file, or the same initial conditions). ``fit_data`` must have
    ``data``'s state dimension and step. A run that scores none of ``data``'s trajectories (``scores_file``
    false: only ``heldout`` conditions, drawn anew) may fit on ``data`` without asking."""
    import dataclasses

    from ..data import read_metadata
    from . import splits as sp

    names = ", ".join(fitted)
    if fit_data is None:
        if not fit_on_data and scores_file:
            raise VPIntegratorError(
                f"integrators: {names} would be fitted on {data}, the file they are scored on; give fit_data "
                "(--fit-data FILE: the training file) to score them on another file, or fit_on_data = true "
                "(--fit-on-data) to fit on its training split and score the rest", key="fit_data")
        return dataclasses.replace(fit_split(model_splits, int(meta["n_traj"])), data=Path(data))
    fit = Path(fit_data)
    fmeta = read_metadata(fit)
    for k, what in (("dim", "state dimension"), ("dt", "step dt")):
        if k in fmeta and k in meta and float(fmeta[k]) != float(meta[k]):
            raise VPIntegratorError(f"fit_data {fit}: its {what} is {fmeta[k]}, the data's ({data}) {meta[k]}; "
                                    "fit on trajectories of the scored file's system and step", key="fit_data")
    digest = sp.data_digest(fit)
    if not fit_on_data and (fit.resolve() == Path(data).resolve() or digest == sp.data_digest(data)):
        raise VPIntegratorError(
            f"fit_data {fit} holds the trajectories of {data}, the file {names} are scored on; give a separate "
            "training file, or fit_on_data = true (--fit-on-data) to fit on its training split", key="fit_data")
    splits = [sp.model_split(label, model, digest, fit) for label, model, _ in entries]
    return dataclasses.replace(fit_split(splits, digest[0]), data=fit)


def check_fit_finite(split: FitSplit) -> None:
    """The fitted rows' training and validation trajectories of ``split.data``, read block by block (at most
    128 MB at a time): a NaN or Inf there is refused now, in one line naming the file and its first bad index
    (``read_trajectories``), before any row runs, never a table row of ``inf``."""
    from ..data import read_metadata, read_trajectories

    data = split.data
    if data is None:  # nothing fitted on a file
        return
    idx = np.union1d(split.train, split.val).astype(np.int64)
    meta = read_metadata(data)
    per = max(1, (1 << 27) // max(1, int(meta.get("n_states", 1)) * int(meta.get("dim", 1)) * 8))
    for a in range(0, idx.size, per):
        read_trajectories(data, traj=idx[a : a + per])


def fit_split(model_splits, n_traj: int) -> FitSplit:
    """The fitted rows' split: that of the first model whose recorded split applies (``model_splits``:
    ``vpintegrator.rollout.splits.ModelSplit`` per model of the run), else vp-train's default split of the
    file's ``n_traj`` trajectories (``vpintegrator.data.windows.default_split``)."""
    for ms in model_splits:
        if ms.split is not None:
            train, val, test = (np.array(sorted(int(i) for i in ms.split[k]), dtype=np.int64)
                                for k in ("train", "val", "test"))
            return FitSplit(train, val, test, source=f"the split of model {ms.label!r}")
    val_fraction, test_fraction, seed = DEFAULT_SPLIT
    if n_traj < 3:
        raise VPIntegratorError(f"fitted rows (sindy+METHOD, parrot) hold out validation and test trajectories: the "
                                f"data file has {n_traj}; give one with at least 3", key="integrators")
    train, val, test = default_split(n_traj)
    return FitSplit(train, val, test, source=f"vp-train's default split (val_fraction {val_fraction}, test_fraction "
                    f"{test_fraction}, split_seed {seed})")


class Method(NamedTuple):
    """One row of a run: its label, its step map and where it comes from (a path, a name)."""

    label: str
    step_map: StepMap
    source: str

def split_method(spec: str) -> tuple[str, str | None]:
    """``"runs/hnn@gauss_legendre4"`` -> ``("runs/hnn", "gauss_legendre4")``; a spec without a registered
    integrator after its last ``@`` is returned whole, with None."""
    from ..integrators import list_integrators

    path, at, method = str(spec).rpartition("@")
    if at and path and method in list_integrators():
        return path, method
    return str(spec), None


def model_label(spec: str) -> str:
    """The label of a model given by path, ``pretrained:NAME`` or ``gml:FILE.h5``: NAME, FILE's stem, the run directory's name, the
    directory's name for ``best.pt``/``last.pt``, else the file's stem."""
    if spec.startswith("pretrained:"):
        return spec.split(":", 1)[1]
    if spec.startswith("gml:"):
        return Path(spec[4:].partition("?")[0]).stem
    p = Path(spec)
    if p.suffix == ".pt" and p.stem in ("best", "last") and p.parent.name:
        return p.parent.name
    return p.stem if p.suffix else p.name


def _load(spec: str):
    from ..models import load_model

    if not spec.startswith(("pretrained:", "gml:")) and not Path(spec).exists():
        head, at, method = spec.rpartition("@")
        if at and head and (head.startswith(("pretrained:", "gml:")) or Path(head).exists()):  # RUN@METHOD: say which part
            from ..config import did_you_mean
            from ..integrators import list_integrators

            raise VPIntegratorError(
                f"models: {spec}: the run {head} exists, but {method!r} after '@' is no integrator a learned vector "
                f"field can be rolled out by{did_you_mean(method, list_integrators())}; give {head}@METHOD with a "
                f"classical method (list_integrators(), vp-rollout --list), e.g. {head}@gauss_legendre4, or {head} "
                "alone", key="models")
        if Path(spec).is_symlink():  # a link loop is not "no such file": say which
            from .._io import resolve_path

            resolve_path(spec, "models")
        raise VPIntegratorError(
            f"models: {spec}: no such checkpoint file or run directory; give a vp-train run directory, a .pt "
            "file or pretrained:NAME",
            key="models",
        )
    try:
        return load_model(spec)
    except VPIntegratorError:
        raise
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as err:  # whatever a damaged or foreign file raises: one line naming it
        raise VPIntegratorError(
            f"models: {spec}: not a loadable vpintegrator checkpoint ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]}); give a vp-train run directory, a .pt checkpoint it wrote or "
            "pretrained:NAME",
            key="models",
        ) from None


def parse_model_entry(entry) -> tuple[str, Any, str]:
    """One entry of ``models`` -> (label, model, source): a path / ``pretrained:NAME`` (label derived), or
    a ``(label, path_or_module)`` pair."""
    if isinstance(entry, (tuple, list)):
        if len(entry) != 2:
            raise VPIntegratorError(
                f"models: entry {entry!r} is not a (label, path) pair or a path", key="models"
            )
        label, model = entry
        if isinstance(model, (str, Path)):
            path, method = split_method(str(model))  # a vector-field model's integrator: PATH@METHOD
            return str(label), _with_method(_load(path), method, str(model)), str(model)
        return str(label), model, f"<{type(model).__name__} object>"
    if isinstance(entry, (str, Path)):
        text, method = split_method(str(entry))
        label = model_label(text) + (f"+{method}" if method else "")
        return label, _with_method(_load(text), method, str(entry)), str(entry)
    raise VPIntegratorError(
        f"models: entry of type {type(entry).__name__} is not a path, pretrained:NAME or (label, path) pair",
        key="models",
    )


# -- learned vector fields (issue 43): PATH@METHOD names the integrator of a vector-field model's rollout


def _with_method(model, method: str | None, spec: str):
    """``model`` with the integrator of ``PATH@METHOD`` recorded (``rollout_method``); refused for a model that
    is not a vector field (its step is its own)."""
    from ..models.vector_field import VectorFieldModel
    if method is None:
        return model
    if not isinstance(model, VectorFieldModel):
        raise VPIntegratorError(f"models: {spec}: '@{method}' names an integrator, but this model is a step map, not "
                                "a learned vector field (hnn, lphnn, divfree, node); leave out '@...'", key="models")
    from ..integrators import get_integrator
    from .field import LearnedField

    try:  # a method the learned field lacks the structure for: say so now, naming the model and the method
        get_integrator(method).supports(LearnedField(model))
    except VPIntegratorError as err:
        raise VPIntegratorError(f"models: {spec}: the model loads, but '@{method}' cannot roll it out: {err}",
                                key="models") from None
    setattr(model, "rollout_method", method)
    return model


def _check_label(label: str, seen: set) -> None:
    if not label or "/" in label or label == "reference":
        raise VPIntegratorError(
            f"method label {label!r} is not usable; labels must be non-empty, contain no '/' and not be "
            "'reference' (give models as (label, path) pairs)",
            key="models",
        )
    if label in seen:
        raise VPIntegratorError(
            f"method label {label!r} is used twice; give models distinct labels as (label, path) pairs",
            key="models",
        )
    seen.add(label)


def model_step(model, device: str = "cpu", overlap: bool = False, jit: bool | str = True, dt: float | None = None,
               **context: Any) -> StepMap:
    """The step map of a trained model: [`ContextStep`][vpintegrator.rollout.context.ContextStep] (``context`` its keywords) for a context
    model, a learned vector field integrated at step ``dt`` (default its own) by its integrator
    (``vpintegrator.rollout.field.field_step``), [`ModelStep`][vpintegrator.rollout.steps.ModelStep] otherwise."""
    from ..models.normalise import model_normalisation
    from ..models.vector_field import VectorFieldModel
    if (isinstance(model, VectorFieldModel) or is_context_model(model)) and model_normalisation(model) is not None:
        raise VPIntegratorError(f"models: {type(model).__name__} records a normalisation, but its rollout steps (a "
                                "vector field's integrator, a context step) take none; train it with normalise = "
                                "'off'", key="models")
    if isinstance(model, VectorFieldModel):
        return field_step(model, model.dt if dt is None else dt)  # type: ignore[arg-type]  # (a model's own dt)
    if is_context_model(model):
        if overlap:
            raise VPIntegratorError("overlap: a context model steps one state at a time; set overlap false",
                                    key="overlap")
        return ContextStep(model, device=device, **context)
    return ModelStep(model, device=device, overlap=overlap, jit=jit)


@dataclass(frozen=True)
class StepSettings:
    """How the models' step maps run and what the identification and fitted rows read: the keys ``device``,
    ``overlap``, ``fast_step``, ``engine``, ``context_len`` and ``context_noise``, resolved."""

    device: str = "cpu"
    overlap: bool = False
    fast_step: str = "auto"  # a fast_step name (vpintegrator.fastpath.FAST_STEPS)
    engine: str = "auto"
    context_len: int = 3
    context_noise: float = 0.0


def prepare_methods(names: Sequence[str], entries: Sequence[tuple[str, Any, str]], system: Any, dt: float,
                    t0: float, n_steps: int, data: Path, settings: StepSettings,
                    split: FitSplit | None = None) -> list[Method]:
    """Every method's step map, every input checked, nothing computed: the rows ``names`` (classical
    integrators, ``exact_flow``, registered rows (``ROW_KINDS``)) and the models ``entries``
    ([`parse_model_entry`][vpintegrator.rollout.methods.parse_model_entry] results; a context model brings
    its oracle row); ``split``: the fitted rows' ``FitSplit``."""
    from ..models.vector_field import VectorFieldModel
    from ..integrators import list_integrators
    from ..systems.unknown import UnknownSystem

    methods: list[Method] = []
    seen: set = set()
    valid_int = (*list_integrators(), "exact_flow")
    for name in names:
        row = parse_row(name)
        if row is not None:  # a registered row kind (ROW_KINDS): identification, SINDy, parrot
            _check_label(name, seen)
            request = RowRequest(name, row[1], system, dt, settings.context_len, settings.context_noise, data, split)
            step_map = row[0].build(request)
            if n_steps < step_map.seq_len:
                raise VPIntegratorError(
                    f"t_end: the horizon has {n_steps} steps, shorter than the {step_map.seq_len} states row {name!r} "
                    f"reads first (context_len); raise it to at least {t0 + step_map.seq_len * dt:g}", key="t_end")
            methods.append(Method(name, step_map, name))
            continue
        if name not in valid_int:
            hint = " (integrators is a list of names, not a comma list)" if "," in name else ""
            rows = ", ".join(f"{k}+METHOD" if v.takes_integrator else k for k, v in ROW_KINDS.items())
            raise VPIntegratorError(
                f"integrators: unknown integrator {name!r}; valid: {', '.join(valid_int)}, and the rows {rows}{hint}",
                key="integrators"
            )
        _check_label(name, seen)
        make = partial(ExactFlowStep, dt=dt) if name == "exact_flow" else partial(IntegratorStep, integrator=name, dt=dt)
        methods.append(Method(name, step_for(system, make), name))
    for label, model, source in entries:
        _check_label(label, seen)
        if int(getattr(model, "dim", -1)) != system.dim:
            raise VPIntegratorError(
                f"models: {source}: model dim {getattr(model, 'dim', None)} does not match the data's dim "
                f"{system.dim} ({system.name} in {data}); roll it out on data of its own system",
                key="models",
            )
        step_map = model_step(model, device=settings.device, overlap=settings.overlap, jit=settings.fast_step,
                              **({"noise": settings.context_noise} if is_context_model(model) else {}),
                              **({"dt": dt} if isinstance(model, VectorFieldModel) else {}))
        use_device_engine(settings.engine, step_map, system)  # an engine the model cannot use: refused now
        if n_steps < step_map.seq_len:
            raise VPIntegratorError(
                f"t_end: the horizon has {n_steps} steps, shorter than seq_len = {step_map.seq_len} of model "
                f"{label!r}; raise it to at least {t0 + step_map.seq_len * dt:g}",
                key="t_end",
            )
        methods.append(Method(label, step_map, source))
        if is_context_model(model) and getattr(model, "oracle_ready", False) and not isinstance(system, UnknownSystem):
            # the same step and start, the true θ (none without a system)
            _check_label(f"{label}_oracle", seen)
            methods.append(Method(f"{label}_oracle", ContextStep(model, device=settings.device, context="oracle",
                                                                 theta=oracle_theta(system), dt=dt,
                                                                 noise=settings.context_noise), source))
    if not methods:
        raise VPIntegratorError("nothing to roll out: give models and/or integrators", key="models")
    return methods


def _has_params_dataset(data: Path) -> bool:
    """Whether the data file holds per-trajectory parameters (a ``/params`` dataset)."""
    import h5py

    try:
        with h5py.File(data, "r") as f:
            return "params" in f
    except OSError:
        return False


def check_trained_on(label: str, source: str, model, meta: dict, data: Path, allow_dt_mismatch: bool = False) -> str | None:
    """Refuse (one line naming both, key ``models``) a model trained on another system, other parameters or,
    unless ``allow_dt_mismatch``, another step than the data's (``meta``: the data file's metadata;
    ``model.trained_on``: what [`load_model`][vpintegrator.models.load_model] read from its checkpoint). Parameters
    are compared only where neither side is parametric (per-trajectory parameters). Returns a note to say
    (an allowed step mismatch), else None."""
    from ..systems.registry import system_params_from_meta

    record = getattr(model, "trained_on", None)
    source = source if str(source) != label else ""
    source = f" ({source})" if source else ""
    if not isinstance(record, dict):  # a model object, or a checkpoint of an older vpintegrator: not checked
        return None
    name, data_name = record.get("system"), meta.get("system")
    if name is not None and data_name is not None and str(name) != str(data_name):
        raise VPIntegratorError(
            f"models: {label}{source} was trained on system {name!r}, but data {data} holds {data_name!r}; "
            "roll it out on data of its own system", key="models")
    params = record.get("system_params") or {}
    if params and not record.get("parametric") and not _has_params_dataset(data):
        ours = system_params_from_meta(meta)
        for k, v in sorted(params.items()):
            if k not in ours:
                continue
            try:
                same = np.allclose(np.asarray(v, dtype=float), np.asarray(ours[k], dtype=float), rtol=1e-9, atol=0)
            except (TypeError, ValueError):
                same = v == ours[k]
            if not same:
                raise VPIntegratorError(
                    f"models: {label}{source} was trained on {name or 'a system'} with {k} = {v!r}, but data "
                    f"{data} has {k} = {_plain(ours[k])!r}; roll it out on data with the parameters it was "
                    "trained on", key="models")
    dt, data_dt = record.get("dt"), meta.get("dt")
    if dt is not None and data_dt is not None and not np.isclose(float(dt), float(data_dt), rtol=1e-9, atol=0):
        if not allow_dt_mismatch:
            raise VPIntegratorError(
                f"models: {label}{source} was trained at dt = {float(dt):g}, but data {data} has dt = "
                f"{float(data_dt):g}; roll it out on data with dt = {float(dt):g}, or set allow_dt_mismatch "
                "(vp-rollout --allow-dt-mismatch) to use it at this step", key="models")
        return (f"{label}: trained at dt = {float(dt):g}, rolled out at the data's dt = {float(data_dt):g} "
                "(allow_dt_mismatch)")
    return None


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value

