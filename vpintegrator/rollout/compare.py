"""Comparison runs (what ``vp-rollout`` does): models and classical integrators from a data set's initial
conditions, against its reference, to any horizon, streamed to one rollout file plus a metrics table.

[`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] holds the keys (the same names as TOML keys, ``--set`` keys and, spelled with
dashes, CLI flags); [`load_rollout_config`][vpintegrator.rollout.config.load_rollout_config] reads them from TOML with overrides; [`run_rollouts`][vpintegrator.rollout.compare.run_rollouts]
runs them: what to run and what to measure. The file (layout, writer, reader) is
``vpintegrator.data.rollouts``.

Library messages name keys (``t_end``, ``traj``, ``models``), never flags; each error carries its key so
that a CLI names its own flag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
import os
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..data.rollout_shards import RolloutParts
from ..errors import VPIntegratorError
from ..jobs.executors import default_workers, remove_orphan_parts
from ..systems.family import SystemFamily
from .engine import StepMap, initial_window, stream_rollout  # noqa: F401 (initial_window re-exported)
from .family import FamilyStep, family_initial_window, for_rows, step_for
from .config import RolloutConfig, load_rollout_config, model_entries, use_device_engine  # noqa: F401 (re-exported)
from .context import ContextStep, oracle_theta
from .rows import RowRequest, fit_split, fitted_rows, parse_row
from .steps import is_context_model
from .report import Failure, RolloutReport  # noqa: F401 (re-exported)
from .splits import split_rows
from .steps import SCALAR_MAX_BATCH, ExactFlowStep, IntegratorStep, ModelStep, reference_step_map
from .field import field_step, is_vector_field_model, split_method

__all__ = [
    "RolloutConfig", "RolloutReport", "Failure", "load_rollout_config", "run_rollouts", "parse_model_entry",
    "model_label", "estimate", "check_outputs", "check_trained_on", "describe_reference", "write_reference",
    "Blocks", "WorkerParts", "run_digest", "MIN_WORK", "remove_orphan_parts", "model_step",
]


# --------------------------------------------------------------------------- model and method specs

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
    if method is None:
        return model
    if not is_vector_field_model(model):
        raise VPIntegratorError(f"models: {spec}: '@{method}' names an integrator, but this model is a step map, not "
                                "a learned vector field (hnn, lphnn, divfree, node); leave out '@...'", key="models")
    model.rollout_method = method
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


def _integrator_names(integrators) -> list[str]:
    if isinstance(integrators, str):
        integrators = [integrators]
    return [str(n).strip() for n in integrators or [] if str(n).strip()]


# --------------------------------------------------------------------------- the run, in steps


@dataclass
class _Plan:
    """Everything checked and resolved before anything is computed."""

    config: RolloutConfig
    data: Path
    data_meta: dict[str, Any]
    system: Any
    dt: float
    t0: float
    idx: np.ndarray
    ref_file: Any  # Trajectories of the data file, the selected trajectories
    n_steps: int
    methods: list  # (label, step_map, source)
    say: Callable[[str], None]
    labels: dict = field(default_factory=dict)  # method label -> split label per rolled-out row
    run_labels: list = field(default_factory=list)  # split label per row relative to the run's models
    heldout_y0: Any = None  # (n_new, dim) new initial conditions, rows after the data file's
    heldout_seed: Any = None
    exact_from_ics: bool = False  # the reference is integrated by DOP853 from the initial conditions
    reference_desc: str = ""
    reference_attrs: dict[str, Any] = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # lines for the log once the plan stands
    blocks: Any = None  # issue 23: .blocks.Blocks (a shard's attributes, the workers), None: the whole run
    model_files: list = field(default_factory=list)  # every model file read (hashed into the provenance)

    @property
    def t(self) -> np.ndarray:
        return self.t0 + self.dt * np.arange(self.n_steps + 1)

    @property
    def n_data(self) -> int:
        return int(self.idx.size)

    @property
    def n_new(self) -> int:
        return 0 if self.heldout_y0 is None else int(self.heldout_y0.shape[0])

    @property
    def n_traj(self) -> int:
        return self.n_data + self.n_new

    @property
    def traj_index(self) -> np.ndarray:
        """``/traj_index`` of the rollout file: data-file rows, then -1 for each held-out condition."""
        return np.concatenate([self.idx, np.full(self.n_new, -1, dtype=np.int64)]).astype(np.int64)


def _select_traj(config: RolloutConfig, n_file: int, where) -> np.ndarray:
    if config.traj is not None:
        try:
            idx = np.array([int(i) for i in config.traj], dtype=np.int64)
        except (TypeError, ValueError):
            raise VPIntegratorError(f"traj must be integer indices; got {config.traj!r}", key="traj") from None
        if idx.size == 0:
            raise VPIntegratorError("traj is empty; give trajectory indices into the data file", key="traj")
        bad = idx[(idx < 0) | (idx >= n_file)]
        if bad.size:
            raise VPIntegratorError(
                f"traj index {int(bad[0])} is out of range: {where} has {n_file} trajectories (0 .. {n_file - 1})",
                key="traj",
            )
        if np.unique(idx).size != idx.size:
            raise VPIntegratorError(f"traj lists an index twice: {config.traj!r}", key="traj")
        return idx
    if config.n_traj is not None:
        n = config.n_traj
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= n_file:
            raise VPIntegratorError(
                f"n_traj must be an int in 1 .. {n_file} (trajectories in {where}); got {n!r}", key="n_traj"
            )
        return np.arange(int(n))
    return np.arange(n_file)


def _horizon(config: RolloutConfig, t0: float, dt: float, n_file: int) -> int:
    if config.t_end is None:
        return n_file - 1
    try:
        t_end = float(config.t_end)
    except (TypeError, ValueError):
        raise VPIntegratorError(f"t_end must be a number; got {config.t_end!r}", key="t_end") from None
    n_steps = int(round((t_end - t0) / dt)) if math.isfinite(t_end) else 0
    if not math.isfinite(t_end) or n_steps < 1:
        raise VPIntegratorError(
            f"t_end {config.t_end!r} gives {n_steps} steps of dt = {dt:g} from t0 = {t0:g}; give at least {t0 + dt:g}",
            key="t_end",
        )
    return n_steps


def _prepare_methods(config: RolloutConfig, system, dt: float, t0: float, n_steps: int, data: Path,
                     entries=None, split=None) -> list:
    """Every method's step map, every input checked, nothing computed (``entries``: the models'
    [`parse_model_entry`][vpintegrator.rollout.compare.parse_model_entry] results, when already loaded;
    ``split``: the fitted rows' ``FitSplit``)."""
    from ..integrators import list_integrators
    from ..systems.unknown import UnknownSystem
    from .rows import ROW_KINDS

    methods: list[tuple[str, StepMap, str]] = []
    seen: set = set()
    valid_int = (*list_integrators(), "exact_flow")
    for name in _integrator_names(config.integrators):
        row = parse_row(name)
        if row is not None:  # a registered row kind (rollout/rows.py): identification, SINDy, parrot
            _check_label(name, seen)
            request = RowRequest(name, row[1], system, dt, config.context_len, config.context_noise, data, split)
            step_map = row[0].build(request)
            if n_steps < step_map.seq_len:
                raise VPIntegratorError(
                    f"t_end: the horizon has {n_steps} steps, shorter than the {step_map.seq_len} states row {name!r} "
                    f"reads first (context_len); raise it to at least {t0 + step_map.seq_len * dt:g}", key="t_end")
            methods.append((name, step_map, name))
            continue
        if name not in valid_int:
            hint = " (integrators is a list of names, not a comma list)" if "," in name else ""
            rows = ", ".join(f"{k}+METHOD" if v.takes_integrator else k for k, v in ROW_KINDS.items())
            raise VPIntegratorError(
                f"integrators: unknown integrator {name!r}; valid: {', '.join(valid_int)}, and the rows {rows}{hint}",
                key="integrators"
            )
        _check_label(name, seen)
        def make(s, name=name) -> StepMap:
            return ExactFlowStep(s, dt) if name == "exact_flow" else IntegratorStep(s, name, dt)

        step_map = step_for(system, make)
        methods.append((name, step_map, name))
    if entries is None:
        entries = [parse_model_entry(entry) for entry in model_entries(config.models)]
    for label, model, source in entries:
        _check_label(label, seen)
        if int(getattr(model, "dim", -1)) != system.dim:
            raise VPIntegratorError(
                f"models: {source}: model dim {getattr(model, 'dim', None)} does not match the data's dim "
                f"{system.dim} ({system.name} in {data}); roll it out on data of its own system",
                key="models",
            )
        step_map = model_step(model, device=config.device, overlap=config.overlap, jit=config.fast_step,
                              **({"noise": config.context_noise} if is_context_model(model) else {}),
                              **({"dt": dt} if is_vector_field_model(model) else {}))
        use_device_engine(config.engine, step_map, system)  # an engine the model cannot use: refused now
        if n_steps < step_map.seq_len:
            raise VPIntegratorError(
                f"t_end: the horizon has {n_steps} steps, shorter than seq_len = {step_map.seq_len} of model "
                f"{label!r}; raise it to at least {t0 + step_map.seq_len * dt:g}",
                key="t_end",
            )
        methods.append((label, step_map, source))
        if is_context_model(model) and getattr(model, "oracle_ready", False) and not isinstance(system, UnknownSystem):
            # the same step and start, the true θ (none without a system)
            _check_label(f"{label}_oracle", seen)
            methods.append((f"{label}_oracle", ContextStep(model, device=config.device, context="oracle",
                                                           theta=oracle_theta(system), dt=dt,
                                                           noise=config.context_noise), source))
    if not methods:
        raise VPIntegratorError("nothing to roll out: give models and/or integrators", key="models")
    return methods


def select(config: RolloutConfig):
    """What a configuration selects of its data file, read from the metadata only: ``(data path, meta,
    system, dt, trajectory indices, t0, n_steps)`` (one-line errors for a bad ``traj``/``n_traj``/``t_end``)."""
    from ..data import read_metadata
    from ..systems.unknown import system_or_unknown

    data = Path(config.data)
    meta = read_metadata(data)
    system = system_or_unknown(meta, data)
    dt = float(meta["dt"])
    idx = _select_traj(config, int(meta["n_traj"]), data)
    t0 = float(meta.get("t0", 0.0))
    return data, meta, system, dt, idx, t0, _horizon(config, t0, dt, int(meta["n_states"]))


def select_planned(config: RolloutConfig):
    """``select`` with the trajectories a run rolls out when none are given: a trained model's test split
    (``vpintegrator.rollout.splits.default_traj``), as [`run_rollouts`][vpintegrator.rollout.compare.run_rollouts] would; what the shards of
    ``--shard``/``--scheduler`` cut into blocks."""
    chosen = select(config)
    fitted = fitted_rows(_integrator_names(config.integrators))  # rows with a training split of their own
    if config.traj is None and config.n_traj is None and (config.models or fitted):
        idx = _plan(config, lambda line: None, (), overwrite=True).idx  # outputs are checked by the caller
        chosen = (*chosen[:4], idx, *chosen[5:])
    return chosen


def _plan(config: RolloutConfig, say: Callable[[str], None], extra_inputs=(), overwrite: bool = False) -> _Plan:
    from ..data import read_metadata, read_trajectories
    from ..integrators import list_integrators
    from ..systems.unknown import UnknownSystem, system_or_unknown
    from . import splits as sp

    config.validate()
    check_outputs(config, extra_inputs, overwrite)
    data = Path(config.data)
    meta = read_metadata(data)
    system = system_or_unknown(meta, data)
    dt = float(meta["dt"])
    n_file_traj, n_file = int(meta["n_traj"]), int(meta["n_states"])
    explicit = config.traj is not None or config.n_traj is not None
    idx = _select_traj(config, n_file_traj, data) if explicit else None  # bad traj/n_traj: refused first
    t0 = float(meta.get("t0", 0.0))
    n_steps = _horizon(config, t0, dt, n_file)
    unknown = isinstance(system, UnknownSystem)
    if unknown:  # issue 43: trajectories from elsewhere; what needs the equations is refused, in one line
        _check_without_system(config, system, _integrator_names(config.integrators), n_steps, n_file, t0, dt)
    entries = [parse_model_entry(entry) for entry in model_entries(config.models)]
    trained_notes = [check_trained_on(label, src, model, meta, data, config.allow_dt_mismatch)
                     for label, model, src in entries]
    n_new = int(config.heldout or 0)
    has_split = any(getattr(m, "training_split", None) is not None for _, m, _ in entries)
    first = read_trajectories(data, steps=[0]) if (has_split or n_new) else None
    digest = None
    if first is not None:
        from ..data.trajectories import first_states_digest

        digest = (first.n_traj, first_states_digest(first.y[:, 0]))
    model_splits = [sp.model_split(label, model, digest, data) for label, model, _ in entries]
    notes = [ms.note for ms in model_splits if ms.note]  # said once the plan stands (errors stay one line)
    notes += [n for n in trained_notes if n]
    shrank = None
    # the fitted rows (sindy+METHOD, parrot; rollout/rows.py) learn from the models' split, else vp-train's default
    fitted = fitted_rows(_integrator_names(config.integrators))
    row_split = fit_split(model_splits, n_file_traj) if fitted else None
    if row_split is not None:
        split_splits = [sp.ModelSplit(name, row_split.as_record(), None) for name in fitted]
        model_splits, entries_labelled = [*model_splits, *split_splits], [*entries, *((n, None, n) for n in fitted)]
        notes.append(f"{', '.join(fitted)}: fitted on {row_split.source} ({row_split.train.size} training, "
                     f"{row_split.val.size} validation trajectories of {data.name})")
    else:
        entries_labelled = list(entries)
    if idx is None:
        idx = np.zeros(0, dtype=np.int64) if n_new else sp.default_traj(model_splits)
        if idx is None:
            idx = np.arange(n_file_traj)
        elif not n_new:
            notes.append(f"rolling out the test split: {idx.size} of {n_file_traj} trajectories of {data.name}")
            shrank = sp.shrink_note(model_splits, idx)  # the models' test splits differ: say so
            if shrank:
                notes.append(shrank)
    # the reference: the exact flow unless the data is (DOP853 at <= 1e-12) or reference = "data"
    method = str(meta.get("method", "")) if meta.get("method") is not None else ""
    tight = (method == "dop853" and meta.get("rtol") is not None and meta.get("atol") is not None
             and float(meta["rtol"]) <= 1e-12 and float(meta["atol"]) <= 1e-12)
    exact_from_ics = config.reference == "exact" and not tight and not unknown
    generator = None  # the data's generator as a row of its own
    names = _integrator_names(config.integrators)
    # the oracle: classical methods with each trajectory's true parameters (none without a system)
    if not names and not unknown and _is_parametric(data):
        from ..integrators import supported_integrators

        names = supported_integrators(ORACLE_INTEGRATORS, system)
        config = dataclasses.replace(config, integrators=names)
        notes.append(f"parametric data: the classical methods {', '.join(names)} with each trajectory's true "
                     "parameters are rows of the table (the oracle); give integrators to choose others")
    if exact_from_ics and method and method not in names and (method in list_integrators() or method == "dop853"):
        generator = method
    n_methods = len(names) + len(entries) + (generator is not None)
    _check_fits(config, int(idx.size) + n_new, n_steps + 1, system, max(1, n_methods), n_file, data)
    # the held-out conditions are drawn once the run is known to fit (issue 36: --heldout 1000000000 drew 24 GB)
    heldout_y0 = seed = None
    if n_new:
        seed = sp.heldout_seed(meta, config.heldout_seed)
        assert first is not None  # read above whenever n_new
        heldout_y0 = sp.draw_heldout(meta, system, n_new, seed, first.y[:, 0], data)
        notes.append(f"heldout: {n_new} new initial conditions from sampler {meta.get('sampler')!r}, seed {seed}")
    ref_file = read_trajectories(data, traj=idx)
    _check_reference(ref_file, idx, data)
    if unknown:
        notes.append(f"{data.name} names no system: errors against its own trajectories; no oracle, exact-flow or "
                     "classical rows (they need the equations), no invariants")
    elif ref_file.params is not None:  # a parametric data set: each row (and held-out condition) its own system
        system = _family(ref_file, meta, system, n_new, seed, data)
        notes.append(f"parameters per trajectory ({', '.join(ref_file.param_names)}): the reference, the classical "
                     "methods and the invariants use each trajectory's own"
                     + (f"; the {n_new} heldout conditions have new ones from the file's parameter_dists, seed {seed}"
                        if n_new else ""))
    if float(ref_file.t[0]) != t0:
        t0 = float(ref_file.t[0])
        n_steps = _horizon(config, t0, dt, ref_file.n_states)
    methods = _prepare_methods(config, system, dt, t0, n_steps, data, entries, row_split)
    if generator is not None:
        label = generator if generator not in {m[0] for m in methods} else "data_generator"
        def make_generator(s) -> StepMap:
            if generator in list_integrators():
                return IntegratorStep(s, generator, dt)
            return ExactFlowStep(s, dt, rtol=float(meta["rtol"]), atol=float(meta["atol"]))

        step_map = step_for(system, make_generator)
        methods.append((label, step_map, f"the generator of {data.name}"))
    plan = _Plan(config, data, meta, system, dt, t0, idx, ref_file, n_steps, methods, say,
                 heldout_y0=heldout_y0, heldout_seed=seed, exact_from_ics=exact_from_ics, notes=notes)
    plan.model_files = [Path(f) for f in dict.fromkeys(getattr(m, "source_file", None) for _, m, _ in entries)
                        if isinstance(f, str) and Path(f).is_file()]
    if shrank:
        plan.warnings.append(shrank)
    sp.label_rows(plan, model_splits, entries_labelled)
    describe_reference(plan, method, tight)
    return plan


def _check_without_system(config: RolloutConfig, system, names: list[str], n_steps: int, n_file: int, t0: float,
                          dt: float) -> None:
    """Refuse, in one line each and before anything runs, what a run on trajectories without a system
    (``vpintegrator.systems.unknown.UnknownSystem``) cannot do: rows that integrate the system's equations
    (classical integrators, ``exact_flow``, identification rows ``METHOD+INTEGRATOR``; all of them named in
    one line), new held-out conditions, a horizon beyond the file (the reference is the file itself) and a
    first window made by an integrator. Rows that learn their equations from the data are not refused here."""
    from ..integrators import list_integrators

    # the rows that integrate the system's equations (other names: their own rules, e.g. "unknown integrator")
    def integrates_equations(name: str) -> bool:
        row = parse_row(name)
        return (name == "exact_flow" or name in list_integrators()) if row is None else not row[0].fitted

    names = [n for n in names if integrates_equations(n)]
    if names:
        raise VPIntegratorError(
            f"integrators: {', '.join(names)}: {system.source} names no system (a file of /t and /y only), so no row "
            "can integrate its equations (no oracle, exact_flow or classical rows); give models only (their errors "
            "are against the file's own trajectories), or write the file with vp-gen", key="integrators")
    if config.heldout:
        raise VPIntegratorError(
            f"heldout: {system.source} names no system, so new initial conditions cannot be integrated; roll out "
            "trajectories of the file itself (a trained model's test split by default, or traj)", key="heldout")
    if n_steps + 1 > n_file:
        raise VPIntegratorError(
            f"t_end: {config.t_end!r} is beyond the last time {t0 + (n_file - 1) * dt:g} of {system.source}, which names "
            f"no system: the reference (the file itself) cannot be continued past it; give t_end <= "
            f"{t0 + (n_file - 1) * dt:g}", key="t_end")
    if config.init != "reference":
        raise VPIntegratorError(
            f"init: {config.init!r} integrates the first window, but {system.source} names no system; use init = "
            "'reference' (the file's own first states)", key="init")


#: the classical rows of a parametric run that names no integrator (those the system supports)
ORACLE_INTEGRATORS = ("rk4", "implicit_midpoint", "gauss_legendre4")


def _is_parametric(data: Path) -> bool:
    """Whether the data file holds per-trajectory parameters (``/params``; one row is read)."""
    from ..data import read_trajectories

    return read_trajectories(data, traj=[0], steps=[0]).params is not None


def _family(ref_file, meta: dict, base, n_new: int, seed, data: Path):
    """The ``vpintegrator.systems.family.SystemFamily`` of a parametric run: the selected trajectories'
    systems, then the held-out conditions' (new parameters from the file's ``parameter_dists``, drawn with
    the held-out seed)."""
    import json

    from ..systems.family import SystemFamily, systems_from_table

    systems = list(ref_file.systems())
    if n_new:
        from ..data.param_dists import draw_parameters

        dists = meta.get("parameter_dists")
        if not isinstance(dists, str) or not dists:
            raise VPIntegratorError(f"heldout: {data} has per-trajectory parameters but no 'parameter_dists' attribute "
                                    "(not written by vp-gen from a [parameters] spec), so no new ones can be drawn; "
                                    "give traj instead", key="heldout")
        try:
            cols, table = draw_parameters(base, json.loads(dists), n_new, int(seed), f"heldout: {data}: parameter_dists")
        except ValueError:
            raise VPIntegratorError(f"heldout: {data} has an unreadable 'parameter_dists' attribute", key="heldout") from None
        if tuple(cols) != tuple(ref_file.param_names):
            raise VPIntegratorError(f"heldout: {data}: its parameter_dists draw columns {list(cols)} but '/params' has "
                                    f"{list(ref_file.param_names)}", key="heldout")
        systems += systems_from_table(base, cols, table)
    return SystemFamily(systems, ref_file.param_names, base)


def _shown(source: str) -> str:
    """A path as the rollout file records it: as given, an absolute one relative to the working directory
    ([`vpintegrator.provenance.redact_path`][vpintegrator.provenance.redact_path]: no absolute path of this machine); ``pretrained:``/``gml:``
    names and ``<object>`` labels as they are."""
    from ..provenance import redact_path

    if not isinstance(source, str) or source.startswith(("pretrained:", "gml:", "<")) or not os.path.isabs(source):
        return source
    return redact_path(source)


def _root_attrs(plan: _Plan, reference_gen: StepMap | None) -> dict[str, Any]:
    """What the rollout file says about the run (its root attributes; the schema is the writer's)."""
    from .._version import __version__
    from ..systems import system_meta

    t, n_file, cfg = plan.t, plan.ref_file.n_states, plan.config
    family = isinstance(plan.system, SystemFamily)
    params = {}
    if family:  # every rolled-out row's parameters (data rows, then held-out conditions)
        from ..systems.family import param_row

        params = {"parameter_columns": list(plan.system.columns),
                  "traj_params": [param_row(s, plan.system.columns).tolist() for s in plan.system]}
    from ..systems.unknown import UnknownSystem

    return {
        **({} if isinstance(plan.system, UnknownSystem) else system_meta(plan.system.base if family else plan.system)),
        **params,
        "dim": plan.system.dim,
        "dt": plan.dt,
        "t0": plan.t0,
        "t_end": float(t[-1]),
        "n_traj": plan.n_traj,
        "n_states": plan.n_steps + 1,
        "n_steps": plan.n_steps,
        "invariant_names": list(plan.system.invariant_names),
        "methods": [m[0] for m in plan.methods],
        "method_kinds": [m[1].kind for m in plan.methods],
        "data_file": _shown(str(plan.data)),
        "data_method": str(plan.data_meta.get("method", "")),
        "data_n_states": n_file,
        "data_n_steps": n_file - 1,
        "reference": plan.reference_desc,
        **plan.reference_attrs,
        "traj_split": list(plan.run_labels),
        "heldout": plan.n_new,
        "heldout_seed": plan.heldout_seed,
        "init": cfg.init,
        "overlap": bool(cfg.overlap),
        "blowup": float(cfg.blowup),
        "chunk_steps": int(cfg.chunk_steps),
        "engine": str(cfg.engine),
        "vpintegrator_version": __version__,
    }


def _write_method(writer, plan: _Plan, label: str, step_map: StepMap, source: str, yref) -> tuple[list[dict], Any]:
    """``/methods/<label>``: states, per-step metrics and volume streamed; returns (table row, failure).

    By the host engine ([`stream_rollout`][vpintegrator.rollout.engine.stream_rollout], metrics in NumPy) or, for models when the ``engine`` key
    says so, the device engine ([`device_stream_rollout`][vpintegrator.rollout.device.device_stream_rollout], metrics on the
    model's device): the same metric streams, the same sink, the same datasets."""
    from ..metrics import TrajectoryMetricsStream, VolumeStream, block_metrics, summary_row
    from .._progress import ProgressLines
    from .device import device_stream_rollout

    cfg, system, t, n_steps = plan.config, plan.system, plan.t, plan.n_steps
    n_traj, names = plan.n_traj, tuple(plan.system.invariant_names)
    T = step_map.seq_len
    if T == 1 or cfg.init == "reference":
        window0 = yref[:, :T]
        init = "reference" if T > 1 else "initial condition"
    else:
        window0 = family_initial_window(system, yref[:, 0], plan.dt, T, method=cfg.init)
        init = cfg.init
    stream = TrajectoryMetricsStream(system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    vol = None
    if cfg.volume:
        vol = VolumeStream(step_map.log_abs_det_jacobian, n_traj, T, step_map.advance, n_steps,
                           by_rows=isinstance(step_map, FamilyStep) or bool(getattr(step_map, "by_rows", False)))
    series = writer.method(label, map_step=None if vol is None else vol.map_step)
    # progress within the method: a line per interval through the log, for methods longer than one
    lines = ProgressLines(f"{label}", n_steps + 1, unit="steps", write=plan.say, first=False)

    def sink(k0, block):  # block: the states and block_metrics' per-step metrics of steps k0 ..
        series.write(k0, block)
        lines.update(k0 + block["y"].shape[1])

    device = use_device_engine(cfg.engine, step_map, system)
    how = f"{step_map.kind}, init {init}" + (f", device engine on {step_map.device}" if device else "")
    plan.say(f"{label}: rolling out {n_traj} trajectories x {n_steps} steps ({how})")
    kw = dict(t0=plan.t0, chunk_steps=cfg.chunk_steps, blowup=cfg.blowup)
    if device:
        res = device_stream_rollout(step_map, window0, plan.dt, n_steps, sink, reference=yref, metrics=stream,
                                    volume=vol, jit=cfg.fast_step, **kw)
    else:
        def host_sink(k0, chunk):
            k1 = k0 + chunk.shape[1]
            sink(k0, {"y": chunk, **block_metrics(stream, vol, t[k0:k1], chunk, yref[:, k0:k1])})

        res = stream_rollout(step_map, window0, plan.dt, n_steps, host_sink, **kw)
    lines.close()
    per_traj = stream.summary()
    cum = None if vol is None else vol.max_abs_cum
    if plan.blocks is not None and plan.blocks.per_traj:  # a shard: the values its merged table is made of
        from ..data.rollout_shards import write_per_traj

        write_per_traj(series.group, per_traj, cum, labels=plan.labels[label])
    row = summary_row(label, per_traj, names, max_abs_cum_log_det_J=cum, seconds_per_step=res.seconds_per_step,
                      failed_step=res.failed_step)
    rows = split_rows(label, plan, per_traj, names, cum, res)
    failure = None
    if res.n_failed:
        # the earliest failure (the first trajectory to fail, by step)
        first = int(np.argmin(np.where(res.failed_step >= 0, res.failed_step, np.iinfo(np.int64).max)))
        k = int(res.failed_step[first])
        reason = getattr(step_map, "failure_reason", None)  # a fitted row without a model says why
        failure = Failure(label, res.n_failed, n_traj, int(plan.idx[first]) if first < plan.n_data else -1, k,
                          float(t[k]), reason=reason if isinstance(reason, str) else None)
    series.close(res.failed_step, {
        **{k: v for k, v in res.meta.items() if isinstance(v, (str, int, float, bool))},
        "engine": "device" if device else "host",
        "label": label,
        "source": _shown(source),
        "init": init,
        "seconds": float(res.seconds),
        "seconds_per_step": float(res.seconds_per_step),
        "n_failed": res.n_failed,
        "split": list(plan.labels[label]),
        **{f"summary_{k}": v for k, v in row.items() if k != "method"},
    })
    return rows, failure


def model_step(model, device: str = "cpu", overlap: bool = False, jit: bool = True, dt: float | None = None,
               **context: Any) -> StepMap:
    """The step map of a trained model: [`ContextStep`][vpintegrator.rollout.context.ContextStep] (``context`` its keywords) for a context
    model, a learned vector field integrated at step ``dt`` (default its own) by its integrator
    (``vpintegrator.rollout.field.field_step``), [`ModelStep`][vpintegrator.rollout.steps.ModelStep] otherwise."""
    if is_vector_field_model(model):
        return field_step(model, model.dt if dt is None else dt)
    if is_context_model(model):
        if overlap:
            raise VPIntegratorError("overlap: a context model steps one state at a time; set overlap false",
                                    key="overlap")
        return ContextStep(model, device=device, **context)
    return ModelStep(model, device=device, overlap=overlap, jit=jit)


def run_rollouts(config: RolloutConfig, log: Callable[[str], None] | None = None,
                 inputs=(), *, overwrite: bool = False, shard: str | tuple[int, int] | None = None,
                 write_index: bool = True) -> RolloutReport:
    """Roll out models and classical integrators from a data set's initial conditions; write everything.

    Writes ``config.out`` (HDF5, atomically; layout in ``datasets/README.md``, reader
    [`vpintegrator.data.rollouts.read_rollout`][vpintegrator.data.rollouts.read_rollout]) and the metrics table beside it (``<stem>.csv``,
    ``<stem>.md``; one row per method and ``split`` label present, columns ``method``, ``split``, those of
    ``vpintegrator.metrics.summary_row`` and ``reference``; the Markdown file says above the table what the
    errors are measured against). Which trajectories: ``config.traj``/``n_traj``, else the trained models'
    test split, plus ``config.heldout`` new conditions (``vpintegrator.rollout.splits``); the reference:
    ``config.reference`` (the exact flow by default, the data's generator then a row of its own).
    Trajectories, per-step metrics and volume are streamed in chunks of ``config.chunk_steps`` steps,
    computed in NumPy (the host engine) or, for models under ``config.engine`` (``auto``: models on CUDA),
    on the model's device (``vpintegrator.rollout.device``); the file and table are the same.
    Every input is checked (and every model loaded) before anything is computed.

    Parameters
    ----------
    config : RolloutConfig
    log : callable, optional
        Receives one progress line per method, and one line per failed method (blow-up or non-finite).
        The same lines are INFO records of the logger ``vpintegrator.rollout.compare`` (``logging``).
    inputs : paths, optional
        More files the run must not write over (e.g. its config file); the data file and the models'
        checkpoints are always protected.
    overwrite : bool, default False
        Replace an existing rollout file at ``config.out`` and its metrics table; without it an existing
        output is refused. Anything that is not a rollout file (a metrics table) is never replaced.
        The three outputs are locked against other writers while they are written.
    shard : "I/N" or (I, N), optional
        Roll out only the I-th of N contiguous blocks of the selected trajectories, into
        ``<out stem>.shard-I-of-N.h5`` (and its table); when the last shard is written (and
        ``write_index``), the index file appears at ``out`` with the whole run's table beside it, and
        [`read_rollout`][vpintegrator.data.rollouts.read_rollout] of it (or of the shards' list) equals the unsharded
        rollout to the last bit (``vpintegrator.rollout.blocks``).
    write_index : bool, default True

    Notes
    -----
    Before anything is computed: every input is checked, an ``out`` (or its table) that is an input is
    refused, and so is work whose estimated memory or disk (``estimate``) does not fit. A reference
    with NaN/Inf, in the data file or where the data's generator continues it, is an error.

    Returns
    -------
    RolloutReport
    """
    from .._progress import log_lines

    log = log_lines(log, __name__)  # every line an INFO record of vpintegrator.rollout.compare, then log's
    if shard is not None:  # issue 23: one block of the trajectories, into a file of its own
        return run_shard(config, log, inputs, overwrite=overwrite, shard=shard, write_index=write_index)
    return _run(config, log, inputs, overwrite)


def run_shard(config: RolloutConfig, log, inputs=(), *, overwrite: bool = False, shard: Any,
              write_index: bool = True, n_whole: int | None = None, run_key: str | None = None) -> RolloutReport:
    """Shard ``I/N`` of the selection of ``config`` into ``<out stem>.shard-I-of-N.h5`` (and its table); with
    ``write_index``, the index file at ``out`` and the whole run's table once every shard file is there
    (``vpintegrator.jobs.shards.index_when_complete``). ``n_whole``: the size of the selection the runners
    are chosen for (default: this one's); ``run_key``: ``run_digest`` of a cluster run, recorded in the shard."""
    from .._outputs import check_output
    from ..data.rollout_shards import rollout_bounds, selection_digest
    from ..jobs.shards import parse_shard, shard_path

    shard = parse_shard(shard)
    config.validate()
    if config.heldout:
        raise VPIntegratorError(f"shard {shard[0]}/{shard[1]} with heldout = {config.heldout}: each shard would draw "
                                "its own new conditions; roll out the held-out conditions without --shard",
                                key="shard")
    idx = select_planned(config)[4]
    a, b = rollout_bounds(int(idx.size), shard)
    out = Path(config.out)
    if write_index:  # the index and the table come at out at the end: the overwrite rule applies now
        for path, kind in ((out, "rollout"), (out.with_suffix(".csv"), "table"), (out.with_suffix(".md"), "table")):
            check_output(path, kind, overwrite, key="out")
    sub = dataclasses.replace(config, traj=[int(i) for i in idx[a:b]], n_traj=None, out=str(shard_path(out, shard)))
    attrs = dict(shard_index=shard[0], shard_count=shard[1], shard_traj_start=a, shard_traj_stop=b,
                 shard_n_traj=int(idx.size), shard_selection=selection_digest(idx))
    if run_key is not None:  # (a shard of a cluster run: run_digest of the whole run's configuration)
        attrs["shard_run"] = run_key
    blocks = Blocks(n_whole=int(idx.size) if n_whole is None else int(n_whole), attrs=attrs, workers=config.workers)
    report = _run(sub, log, inputs, overwrite, blocks)
    if write_index:
        write_index_if_complete(out, shard[1])
    return report


def write_index_if_complete(out: Path, count: int) -> list | None:
    """The index file at ``out`` and the whole run's table beside it, once every shard file exists; the
    whole run's table rows (None while shards are missing)."""
    from ..data.rollout_shards import write_rollout_index
    from ..jobs.shards import index_when_complete
    from ..metrics import write_table

    def write(path: Path, n: int) -> list[dict]:
        rows = write_rollout_index(path, n)
        write_table(rows, path.with_suffix(""), overwrite=True)
        return rows

    return index_when_complete(Path(out), count, "rollout", write)


def _part(config: RolloutConfig, shard: tuple[int, int], n_whole: int) -> str:
    """A block of the classical methods on a worker process (``workers``): its shard file."""
    return str(run_shard(config, None, overwrite=True, shard=shard, write_index=False, n_whole=n_whole).out)


@contextlib.contextmanager
def _worker_parts(blocks, plan: _Plan, out: Path):
    """The classical methods of ``plan`` (and its reference) computed on worker processes (``_part`` on
    each block, by the job runtime): a ``WorkerParts`` over their files (None when the run stays in this
    process); the files are removed on leaving."""
    from .._io import DeviceWriteError, device_write_error
    from ..data.rollout_shards import RolloutParts
    from ..jobs.executors import in_processes, parts_folder

    labels = blocks.part_labels(plan)
    n = blocks.n_parts(plan, labels)
    if n <= 1:
        yield None
        return
    with parts_folder(out) as tmp:
        sub = dataclasses.replace(plan.config, models=[], integrators=labels, traj=[int(i) for i in plan.idx],
                                  n_traj=None, out=str(tmp / "part.h5"), workers=1)
        plan.say(f"{', '.join(labels)}: rolling out {plan.n_traj} trajectories x {plan.n_steps} steps on "
                 f"{n} worker processes")
        try:
            paths = in_processes(_part, [(sub, (i, n), blocks.n_whole) for i in range(1, n + 1)], n)
        except DeviceWriteError as err:  # a worker's part file: the output could not be written
            raise device_write_error(out, err.reason) from None
        yield WorkerParts(RolloutParts([Path(p) for p in paths], blocks.per_traj), labels)


def _run(config: RolloutConfig, log, inputs, overwrite: bool, blocks=None) -> RolloutReport:
    """[`run_rollouts`][vpintegrator.rollout.compare.run_rollouts] of the whole selection of ``config``, cut as ``blocks`` says (None: no shard)."""
    from .._outputs import output_locks

    plan = _plan(config, log or (lambda line: None), inputs, overwrite)
    plan.blocks = blocks
    with output_locks(check_outputs(config, inputs, overwrite)):
        # again under the locks: a writer we raced may have finished meanwhile
        return _write_rollouts(plan, config, check_outputs(config, inputs, overwrite), overwrite)


def _write_rollouts(plan: _Plan, config: RolloutConfig, outs: list[Path], overwrite: bool) -> RolloutReport:
    """[`run_rollouts`][vpintegrator.rollout.compare.run_rollouts] once its outputs (``outs``: file, csv, md; links resolved) are locked."""
    from ..data.rollouts import RolloutWriter
    from ..metrics import write_table


    remove_orphan_parts(outs[0])  # worker folders of a run killed outright (we hold the lock)
    from ..systems.unknown import UnknownSystem

    # the data's generator continues the reference (none without a system: the data is the whole reference)
    reference_gen = (None if isinstance(plan.system, UnknownSystem)
                     else step_for(plan.system, lambda s: reference_step_map(plan.data_meta, s, plan.dt)))
    for line in plan.notes:
        plan.say(line)
    # issue 23: the runners of the whole selection, and the classical methods on worker processes
    blocks = plan.blocks or Blocks(n_whole=plan.n_traj, workers=config.workers)
    blocks.same_runners([reference_gen, *(m[1] for m in plan.methods)])
    out = Path(config.out)
    rows: list[dict] = []
    failures: dict[str, Any] = {}
    from ..provenance import provenance_attr

    # where the file came from: the data file and every model file, hashed (directories and pretrained: names
    # are named by their source in the methods' attributes)
    inputs = [plan.data, *dict.fromkeys([*(Path(src) for _, _, src in plan.methods if Path(src).is_file()),
                                         *plan.model_files])]
    provenance = provenance_attr(inputs, relative_to=Path(config.out).resolve().parent)
    with _worker_parts(blocks, plan, Path(outs[0])) as parts, \
            RolloutWriter(outs[0], _root_attrs(plan, reference_gen), plan.t, plan.traj_index, dim=plan.system.dim,
                          invariant_names=plan.system.invariant_names, chunk_steps=config.chunk_steps,
                          extra_attrs={"provenance": provenance, **blocks.attrs}) as writer:
        yref = write_reference(writer, plan, reference_gen) if parts is None else parts.reference(writer, plan)
        plan.ref_file = None  # the file's states are in /reference now
        for label, step_map, source in plan.methods:
            if parts is not None and label in parts:
                method_rows, failure = parts.method(writer, plan, label)
            else:
                method_rows, failure = _write_method(writer, plan, label, step_map, source, yref)
            rows.extend(method_rows)
            if failure is not None:
                failures[label] = failure
                plan.say(failure.line())
        writer.finish(rows)
    write_table(rows, out.with_suffix(""), overwrite=overwrite, caption=f"Errors against the {plan.reference_desc}.")
    stem = out.with_suffix("")
    return RolloutReport(out=out, csv=stem.with_suffix(".csv"), markdown=stem.with_suffix(".md"), rows=rows,
                         failures=failures, reference=plan.reference_desc, warnings=list(plan.warnings))


# --------------------------------------------------------------------------- checks before a run starts
#
# Checks a comparison run makes before it starts: no output over an input, work that fits in memory
# and on disk (estimated from the sizes), a finite reference.


def _input_files(config: RolloutConfig, extra=()) -> list[Path]:
    """Every file the run reads: the data file, model checkpoints (every ``.pt`` of a run directory) and
    ``extra`` (e.g. the config file)."""
    files: list[Path] = [Path(config.data)] if isinstance(config.data, (str, Path)) else []
    for entry in model_entries(config.models):
        spec = entry[1] if isinstance(entry, (tuple, list)) and len(entry) == 2 else entry
        if not isinstance(spec, (str, Path)) or str(spec).startswith("pretrained:"):
            continue
        p = Path(spec)
        files.append(p)
        if p.is_dir():
            files += sorted(p.glob("*.pt"))
    files += [Path(e) for e in extra if e is not None]
    return files


def check_outputs(config: RolloutConfig, extra_inputs=(), overwrite: bool = False) -> list[Path]:
    """Refuse (one-line error naming the key ``out``) an output — the rollout file or its metrics table —
    that is one of the run's inputs, or an ``out`` that is a directory; before anything is read. An output
    that exists is refused unless ``overwrite``, and then replaced only if it is a rollout file (its table
    a metrics table): ``vpintegrator._outputs.check_output``. Returns the three outputs, links
    resolved."""
    from .._io import check_not_input
    from .._outputs import check_output

    if not isinstance(config.out, (str, Path)) or not str(config.out):
        raise VPIntegratorError(f"out must be a file path; got {config.out!r}", key="out")
    out = Path(config.out)
    if out.is_dir():
        raise VPIntegratorError(f"out {out} is a directory; give the path of the rollout file (e.g. {out / 'rollout.h5'})",
                                key="out")
    inputs = _input_files(config, extra_inputs)
    paths = (out, out.with_suffix(".csv"), out.with_suffix(".md"))  # rollout.shard-1-of-2.csv: the dots kept
    for path in paths:
        check_not_input(path, inputs, key="out")
    return [check_output(path, kind, overwrite) for path, kind in zip(paths, ("rollout", "table", "table"))]


def estimate(n_traj: int, n_states: int, dim: int, n_invariants: int, n_methods: int, chunk_steps: int,
             data_states: int, volume: bool = True) -> tuple[int, int]:
    """(memory, disk) in bytes of a comparison run of these sizes.

    Memory: everything held at once — the reference as read from the data file (n_traj × data_states ×
    dim), the time grid and map index (a few × n_states), the engine's and the metric streams' per-chunk
    buffers (n_traj × chunk × (dim + invariants + 1), a few copies each) and the HDF5 chunk caches.
    Disk, per method: states, relative error, invariants (n_traj × n_states × (dim + 1 + n_invariants))
    and the volume (log det J and its running sum per map, the map index); plus the reference and ``/t``.
    """
    f = 8
    chunk = min(int(chunk_steps), n_states)
    per_chunk = n_traj * chunk * (dim + n_invariants + 1) * f
    memory = (
        n_traj * data_states * dim * f  # the reference's file part, read whole
        + 4 * n_states * f  # /t, the time grid of the metric streams, the volume's map index
        + 8 * per_chunk  # engine stage + copies, step map output, metric streams, reference chunk
        + 2 * (3 + n_invariants) * max(1 << 16, 2 * min(n_traj, 64) * chunk * dim * f)  # HDF5 chunk caches
        + (64 << 20)  # the interpreter, torch and h5py themselves
    )
    per_method = n_traj * n_states * (dim + 1 + n_invariants) * f
    if volume:
        per_method += 2 * n_traj * n_states * f + n_states * f
    disk = n_methods * per_method + n_traj * n_states * (dim + n_invariants) * f + n_states * f
    return memory, disk


def _check_fits(config: RolloutConfig, n_traj: int, n_states: int, system, n_methods: int, data_states: int,
                data: Path) -> None:
    """Refuse work that cannot fit in memory or on disk, before it starts, with the estimate and a way out."""
    from .. import resources
    from . import engine

    gib = resources.size_text

    memory, disk = estimate(n_traj, n_states, system.dim, len(system.invariant_names), n_methods,
                            int(config.chunk_steps), data_states, bool(config.volume))
    what = (f"t_end {config.t_end!r} ({n_states} states x {n_traj} trajectories x {n_methods} method(s), "
            f"dim {system.dim})")
    way_out = ("give a shorter t_end, fewer trajectories (n_traj or traj), a smaller chunk_steps, "
               "or volume = false")
    if config.t_end is None:
        what = f"{n_traj} trajectories x {n_states} states of {data} x {n_methods} method(s)"
    engine.check_memory(memory, what, way_out, key="t_end" if config.t_end is not None else "n_traj")
    free = resources.free_disk(Path(config.out).parent)
    if disk > free:
        raise VPIntegratorError(
            f"{what} needs about {gib(disk)} on disk for out {config.out}, but {gib(free)} are free "
            f"(refused before starting); {way_out}, or write out elsewhere",
            key="t_end" if config.t_end is not None else "out",
        )


def _check_reference(ref_file, idx: np.ndarray, data: Path) -> None:
    """A reference with NaN/Inf is an error (naming the file, trajectory and time), not an inf in the table."""
    finite = np.isfinite(ref_file.y).all(axis=-1)  # (n_traj, n_states)
    if finite.all():
        return
    i, k = (int(v) for v in np.argwhere(~finite)[0])
    raise VPIntegratorError(
        f"{data}: the reference is not finite (NaN/Inf) in trajectory {int(idx[i])} at t = {float(ref_file.t[k]):g} "
        f"(state {k}); the data file is damaged: regenerate it with vp-gen, or leave that trajectory out (traj)"
    )


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


# --------------------------------------------------------------------------- the reference
#
# The reference of a comparison run (``vp-rollout``'s ``reference`` key): what the errors are measured
# against, described (``describe_reference``: the line above the metrics table and the rollout file's
# ``reference*`` attributes) and written (``write_reference``: ``/reference`` of the rollout file).
#
# ``reference = "exact"`` (the default): the exact flow, DOP853 at rtol = atol = 1e-12 integrated from the
# initial conditions over the whole horizon, unless the data file was itself made by DOP853 at tolerances
# <= 1e-12 (then the data is the exact flow within its horizon, continued by the same DOP853 beyond).
# ``reference = "data"``: the data file, continued beyond its horizon with the data's own generator.
# Held-out conditions (``heldout``) are integrated from their initial conditions by the exact flow or, with
# ``"data"``, the data's generator. A parametric data set's rows (``plan.system`` a
# ``vpintegrator.systems.family.SystemFamily``) are each integrated with their own parameters.


def describe_reference(plan, method: str, tight: bool) -> None:
    """What the errors are measured against: the line above the table and the file's ``reference*``
    attributes."""
    from ..provenance import redact_path
    from ..systems.unknown import UnknownSystem

    data, cfg = plan.data, plan.config
    data = type(data)(redact_path(data))  # as shown and recorded: no absolute path of this machine
    end = float(plan.ref_file.t[-1])
    beyond = plan.n_steps + 1 > plan.ref_file.n_states
    gen = method or "dop853"
    if isinstance(plan.system, UnknownSystem):
        desc = (f"data: {data} (its own trajectories; the file names no system, so there is no exact flow) for "
                f"t <= {end:g}")
        attrs: dict[str, Any] = {"reference_mode": "data", "reference_method": "none (no system)"}
    elif plan.exact_from_ics:
        desc = (f"exact flow: DOP853 (rtol = atol = 1e-12) from the initial conditions of {data}, over the whole "
                f"horizon ({data.name} itself was made with {method or 'an unrecorded method'})")
        attrs = {"reference_mode": "exact", "reference_method": "dop853", "reference_rtol": 1e-12,
                 "reference_atol": 1e-12}
    else:
        kind = "exact flow" if tight else "data"
        how = (f"DOP853, rtol = {float(plan.data_meta['rtol']):g}, atol = {float(plan.data_meta['atol']):g}"
               if gen == "dop853" and plan.data_meta.get("rtol") is not None else gen)
        desc = f"{kind}: {data} ({how}) for t <= {end:g}" + (f", continued with {gen} beyond" if beyond else "")
        attrs = {"reference_mode": "exact" if (tight and cfg.reference == "exact") else "data", "reference_method": gen}
        if gen == "dop853" and plan.data_meta.get("rtol") is not None:
            attrs.update(reference_rtol=float(plan.data_meta["rtol"]), reference_atol=float(plan.data_meta["atol"]))
        if plan.n_new:
            desc += f"; the {plan.n_new} heldout conditions integrated with {gen}"
    plan.reference_desc, plan.reference_attrs = desc, attrs


def _relative(plan) -> str:
    """The data file as given, an absolute path relative to the working directory (no absolute path of this
    machine)."""
    from ..provenance import redact_path

    return redact_path(plan.data)


def write_reference(writer, plan, reference_gen: StepMap | None):
    """``/reference``: the exact flow from the initial conditions (``plan.exact_from_ics``), or the data file
    then (beyond it) the data's own generator from its last state; held-out conditions (rows after the data
    file's) integrated from their initial conditions by the exact flow or the generator."""
    from ..arrays import to_numpy
    from ..metrics import TrajectoryMetricsStream

    ref_file, n_steps, t = plan.ref_file, plan.n_steps, plan.t
    n_traj, cs = plan.n_traj, writer.chunks[1]  # whole chunks of the file along time
    n_data, n_file = plan.n_data, ref_file.n_states
    series = writer.reference()
    ref_failed = np.full(n_traj, -1, dtype=np.int64)
    kw = dict(chunk_steps=plan.config.chunk_steps, blowup=plan.config.blowup)

    def integrate(step_map, y0, rows: slice, k_first: int, t_first: float, what: str) -> None:
        """States ``k_first ..`` of ``rows`` by ``step_map`` from ``y0``; a failure is an error."""
        def sink(k0, chunk):
            series.y[rows, k_first + k0 : k_first + k0 + chunk.shape[1]] = chunk

        res = stream_rollout(for_rows(step_map, rows), y0, plan.dt, n_steps - k_first, sink, t0=t_first, **kw)
        failed = np.where(res.failed_step >= 0, res.failed_step + k_first, -1)
        ref_failed[rows] = failed
        if (failed >= 0).any():
            i = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
            k = int(failed[i])
            which = plan.traj_index[rows][i]
            name = f"trajectory {int(which)}" if which >= 0 else f"heldout condition {i}"
            raise VPIntegratorError(
                f"{plan.data}: {what} failed (blow-up or non-finite) in {name} at t = {t[k]:g}; give a shorter "
                f"t_end (before {t[k]:g}) or a larger blowup", key="t_end",
            )

    if plan.exact_from_ics:
        y0 = ref_file.y[:, 0] if plan.n_new == 0 else np.concatenate([ref_file.y[:, 0], plan.heldout_y0])
        plan.say(f"reference: exact flow (DOP853, rtol = atol = 1e-12) for {n_traj} trajectories x {n_steps} steps")
        integrate(step_for(plan.system, lambda s: ExactFlowStep(s, plan.dt)), y0, slice(0, n_traj), 0, plan.t0,
                  "integrating the exact-flow reference (DOP853)")
    else:
        n_take = min(n_file, n_steps + 1)
        # (no generator without a system: the plan refused a horizon past the file and held-out conditions)
        if n_data:
            for k0 in range(0, n_take, cs):
                series.y[:n_data, k0 : min(n_take, k0 + cs)] = ref_file.y[:, k0 : min(n_take, k0 + cs)]
        if n_steps + 1 > n_file and n_data:
            assert reference_gen is not None
            plan.say(
                f"reference: continuing {plan.data.name} from t = {ref_file.t[-1]:g} to {t[-1]:g} with {reference_gen.name}"
            )
            integrate(reference_gen, ref_file.y[:, -1], slice(0, n_data), n_file - 1, float(ref_file.t[-1]),
                      f"continuing the reference beyond t = {ref_file.t[-1]:g} with its generator {reference_gen.name}")
        if plan.n_new:
            assert reference_gen is not None
            integrate(reference_gen, plan.heldout_y0, slice(n_data, n_traj), 0, plan.t0,
                      f"integrating the heldout reference with {reference_gen.name}")
    names = tuple(plan.system.invariant_names)
    stream = TrajectoryMetricsStream(plan.system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    # the reference's invariants where the models' metrics are computed: on the device of the first model
    # that runs on the device engine (the same formulas), else in NumPy
    device = next((m[1].device for m in plan.methods if use_device_engine(plan.config.engine, m[1], plan.system)), None)
    if device is not None:
        import torch
    yref = series.y
    for k0 in range(0, n_steps + 1, cs):
        k1 = min(n_steps + 1, k0 + cs)
        block = yref[:, k0:k1] if device is None else torch.as_tensor(yref[:, k0:k1], device=device)
        per_step = stream.update(t[k0:k1], block, None)
        series.write(k0, {f"invariant/{name}": to_numpy(per_step[f"invariant/{name}"]) for name in names})
    summary = stream.summary()
    if getattr(plan, "blocks", None) is not None and plan.blocks.per_traj:  # a shard: its merged table's values
        from ..data.rollout_shards import write_per_traj

        write_per_traj(series.group, {k: v for k, v in summary.items() if k.startswith("max_rel_drift_")})
    series.close(ref_failed, {"label": "reference", "kind": "reference", "source": _relative(plan),
                              "description": plan.reference_desc, "split": list(plan.run_labels),
                              **{f"max_rel_drift_{n}": float(np.max(summary[f"max_rel_drift_{n}"])) for n in names}})
    return yref


# --------------------------------------------------------------------------- blocks of the selection (shards, workers)
#
# Blocks of a comparison run's trajectories: ``vp-rollout --shard I/N`` and ``--workers N``.
#
# Every method and metric of a rollout is computed trajectory by trajectory (checked bitwise by
# ``tests/test_rollout_shards.py``), so the selection can be cut into contiguous blocks, each computed alone,
# without changing a bit, provided every block runs the runner the whole selection would (the compiled
# single-trajectory runners serve selections of at most ``SCALAR_MAX_BATCH`` trajectories:
# ``Blocks.same_runners``).
#
# - ``run_shard`` (``vpintegrator.rollout.compare``): shard ``I/N`` of the selection (``vpintegrator.data.rollout_shards.rollout_bounds``)
#   into ``<out stem>.shard-I-of-N.h5`` with the per-trajectory values of the table; the last shard to finish
#   writes the index file at ``out`` and the whole run's table beside it
#   (``vpintegrator.data.rollout_shards``).
# - ``workers``: the classical integrators and the exact flow (and the reference, continued beyond the data
#   by its generator) run as shards of the selection on that many processes (the NumPy integrators hold the
#   GIL, and the compiled integrator kernels do not release it, so threads would not help), written to
#   files in a temporary folder beside ``out`` (``vpintegrator.jobs.executors``) and copied into the one rollout
#   file in order (``vpintegrator.data.rollout_shards.RolloutParts``, the rollout files' module); models run
#   after them in this process, on the whole selection (torch has its own threads). With one worker, a
#   selection of at most ``SCALAR_MAX_BATCH`` trajectories, no classical method, or a model on the device
#   engine (whose reference invariants are computed on the device), the run is today's single-process one.
#   Unset, ``workers`` is every core, used only when the work is large enough to repay starting processes
#   (``MIN_WORK`` trajectory-steps); given, it is used whenever there are two blocks.
#
# Worker processes die with the process that started them (Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``;
# elsewhere each worker checks its parent before every block), so a ``kill -9`` of vp-rollout leaves no
# worker holding the output's lock; their folder ``.<out>.parts-<pid>-*`` is removed by the next run of the
# same output (``remove_orphan_parts``, called under the output's lock). This section says how a run is cut;
# the job runtime (``vpintegrator.jobs``) runs the blocks.


#: trajectory-steps of classical methods below which unset ``workers`` runs in this process only
MIN_WORK = 20_000_000


@dataclasses.dataclass
class Blocks:
    """How a run is cut: ``n_whole`` trajectories in the whole selection (the runners' rule), the root
    attributes of a shard (``attrs``; with them the per-trajectory values are written), and ``workers``."""

    n_whole: int
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    workers: int | None = 1

    @property
    def per_traj(self) -> bool:
        return bool(self.attrs)

    def same_runners(self, step_maps) -> None:
        """The runner the whole selection would use: no compiled single-trajectory runner in a block of a
        selection too large for it."""
        if self.n_whole > SCALAR_MAX_BATCH:
            for step_map in step_maps:
                if isinstance(step_map, IntegratorStep):
                    step_map.compiled_max_batch = 0
                elif isinstance(step_map, ModelStep):
                    step_map.scalar_max_batch = 0

    def n_parts(self, plan, labels: list[str]) -> int:
        """Worker processes for the classical methods ``labels`` of ``plan`` (1: none)."""

        workers = self.workers if self.workers is not None else default_workers()
        n_traj = plan.n_traj
        if workers <= 1 or not labels or n_traj <= SCALAR_MAX_BATCH or plan.n_new:
            return 1  # (held-out conditions are drawn once, by this process: no blocks of them)
        if any(use_device_engine(plan.config.engine, m, plan.system) for _, m, _ in plan.methods if m.kind == "model"):
            return 1
        if self.workers is None and n_traj * plan.n_steps * len(labels) < MIN_WORK:
            return 1
        return min(workers, n_traj)

    def part_labels(self, plan) -> list[str]:
        """The methods of ``plan`` worker processes would run: the classical integrators and the exact flow."""
        return [label for label, m, _ in plan.methods if m.kind in ("integrator", "flow")]


class WorkerParts:
    """The worker processes' part files of the classical methods ``labels`` and the reference
    (``RolloutParts``), copied into the rollout file being written; the table rows and the failure of a
    method made from the whole run's per-trajectory values."""

    def __init__(self, files: RolloutParts, labels: list[str]) -> None:
        self.files = files
        self.labels = labels

    def __contains__(self, label: str) -> bool:
        return label in self.labels

    def reference(self, writer, plan):
        return self.files.reference(writer, plan.run_labels)

    def method(self, writer, plan, label: str) -> tuple[list[dict], Failure | None]:
        """Method ``label`` copied into ``writer``: (its table rows, its failure or None)."""
        per, cum, failed, attrs = self.files.method(writer, label, plan.labels[label])
        res = types.SimpleNamespace(seconds_per_step=float(attrs.get("seconds_per_step", float("nan"))),
                                    failed_step=failed)
        rows = split_rows(label, plan, per, tuple(plan.system.invariant_names), cum, res)
        n_failed = int(np.sum(failed >= 0))
        if not n_failed:
            return rows, None
        first = int(np.argmin(np.where(failed >= 0, failed, np.iinfo(np.int64).max)))
        k = int(failed[first])
        return rows, Failure(label, n_failed, plan.n_traj, int(plan.idx[first]), k, float(plan.t[k]))


def run_digest(config) -> str:
    """What tells a rollout run from any other: its configuration (the output and ``workers`` apart), the
    sha256 of its data file and model files (a run directory's ``config.toml`` and checkpoints) and this
    version; stored in each shard as ``shard_run`` so that a run continued after a lost cluster keeps the
    shards already written (same code, same inputs: the same bits)."""
    import hashlib
    import json

    from .._version import __version__
    from ..provenance import file_sha256

    def digest(path: Any) -> Any:
        p = Path(str(path))
        if p.is_dir():
            return {n: file_sha256(p / n) for n in ("config.toml", "best.pt", "last.pt") if (p / n).is_file()}
        return file_sha256(p) if p.is_file() else str(path)

    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("out", "workers")}
    models = config.models.items() if isinstance(config.models, dict) else enumerate(config.models or [])
    record = {"config": fields, "data": digest(config.data), "models": {str(k): digest(v) for k, v in models},
              "version": __version__}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]
