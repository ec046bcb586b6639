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
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError
from ..systems.family import SystemFamily
from .engine import StepMap, initial_window, stream_rollout  # noqa: F401 (initial_window re-exported)
from .family import FamilyStep, family_initial_window, step_for
from .checks import _check_fits, _check_reference, check_outputs, check_trained_on, estimate  # noqa: F401 (estimate re-exported)
from .config import RolloutConfig, load_rollout_config, model_entries  # noqa: F401 (re-exported)
from .context import ContextStep, is_context_model, model_step, oracle_theta
from .identify import IdentifiedStep, parse_identified
from .report import Failure, RolloutReport  # noqa: F401 (re-exported)
from .reference import describe_reference, write_reference
from .splits import split_rows
from .steps import ExactFlowStep, IntegratorStep, reference_step_map

__all__ = [
    "RolloutConfig", "RolloutReport", "Failure", "load_rollout_config", "run_rollouts", "parse_model_entry",
    "model_label", "estimate", "check_outputs",
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
            return str(label), _load(str(model)), str(model)
        return str(label), model, f"<{type(model).__name__} object>"
    if isinstance(entry, (str, Path)):
        text = str(entry)
        return model_label(text), _load(text), text
    raise VPIntegratorError(
        f"models: entry of type {type(entry).__name__} is not a path, pretrained:NAME or (label, path) pair",
        key="models",
    )


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
                     entries=None) -> list:
    """Every method's step map, every input checked, nothing computed (``entries``: the models'
    [`parse_model_entry`][vpintegrator.rollout.compare.parse_model_entry] results, when already loaded)."""
    from ..integrators import list_integrators
    from .device import use_device_engine

    methods: list[tuple[str, StepMap, str]] = []
    seen: set = set()
    valid_int = (*list_integrators(), "exact_flow")
    for name in _integrator_names(config.integrators):
        ident = parse_identified(name)
        if ident is not None:  # issue 34: fit each row's parameters from its prefix, then integrate
            _check_label(name, seen)
            methods.append((name, IdentifiedStep(system, ident[0], ident[1], dt, context_len=config.context_len,
                                                 noise=config.context_noise), name))
            continue
        if name not in valid_int:
            hint = " (integrators is a list of names, not a comma list)" if "," in name else ""
            raise VPIntegratorError(
                f"integrators: unknown integrator {name!r}; valid: {', '.join(valid_int)}{hint}", key="integrators"
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
                              **({"noise": config.context_noise} if is_context_model(model) else {}))
        use_device_engine(config.engine, step_map, system)  # an engine the model cannot use: refused now
        if n_steps < step_map.seq_len:
            raise VPIntegratorError(
                f"t_end: the horizon has {n_steps} steps, shorter than seq_len = {step_map.seq_len} of model "
                f"{label!r}; raise it to at least {t0 + step_map.seq_len * dt:g}",
                key="t_end",
            )
        methods.append((label, step_map, source))
        if is_context_model(model) and getattr(model, "oracle_ready", False):  # the same step and start, the true θ
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
    from ..systems import system_from_meta

    data = Path(config.data)
    meta = read_metadata(data)
    system = system_from_meta(meta, data)
    dt = float(meta["dt"])
    idx = _select_traj(config, int(meta["n_traj"]), data)
    t0 = float(meta.get("t0", 0.0))
    return data, meta, system, dt, idx, t0, _horizon(config, t0, dt, int(meta["n_states"]))


def select_planned(config: RolloutConfig):
    """``select`` with the trajectories a run rolls out when none are given: a trained model's test split
    (``vpintegrator.rollout.splits.default_traj``), as [`run_rollouts`][vpintegrator.rollout.compare.run_rollouts] would; what the shards of
    ``--shard``/``--scheduler`` cut into blocks."""
    chosen = select(config)
    if config.traj is None and config.n_traj is None and config.models:
        idx = _plan(config, lambda line: None, (), overwrite=True).idx  # outputs are checked by the caller
        chosen = (*chosen[:4], idx, *chosen[5:])
    return chosen


def _plan(config: RolloutConfig, say: Callable[[str], None], extra_inputs=(), overwrite: bool = False) -> _Plan:
    from ..data import read_metadata, read_trajectories
    from ..integrators import list_integrators
    from ..systems import system_from_meta
    from . import splits as sp

    config.validate()
    check_outputs(config, extra_inputs, overwrite)
    data = Path(config.data)
    meta = read_metadata(data)
    system = system_from_meta(meta, data)
    dt = float(meta["dt"])
    n_file_traj, n_file = int(meta["n_traj"]), int(meta["n_states"])
    explicit = config.traj is not None or config.n_traj is not None
    idx = _select_traj(config, n_file_traj, data) if explicit else None  # bad traj/n_traj: refused first
    t0 = float(meta.get("t0", 0.0))
    n_steps = _horizon(config, t0, dt, n_file)
    entries = [parse_model_entry(entry) for entry in model_entries(config.models)]
    trained_notes = [check_trained_on(label, src, model, meta, data, config.allow_dt_mismatch)
                     for label, model, src in entries]
    n_new = int(config.heldout or 0)
    has_split = any(getattr(m, "training_split", None) is not None for _, m, _ in entries)
    first = read_trajectories(data, steps=[0]) if (has_split or n_new) else None
    digest = None
    if first is not None:
        from ..data.windows import first_states_digest

        digest = (first.n_traj, first_states_digest(first.y[:, 0]))
    model_splits = [sp.model_split(label, model, digest, data) for label, model, _ in entries]
    notes = [ms.note for ms in model_splits if ms.note]  # said once the plan stands (errors stay one line)
    notes += [n for n in trained_notes if n]
    if idx is None:
        idx = np.zeros(0, dtype=np.int64) if n_new else sp.default_traj(model_splits)
        if idx is None:
            idx = np.arange(n_file_traj)
        elif not n_new:
            notes.append(f"rolling out the test split: {idx.size} of {n_file_traj} trajectories of {data.name}")
    # the reference: the exact flow unless the data is (DOP853 at <= 1e-12) or reference = "data"
    method = str(meta.get("method", "")) if meta.get("method") is not None else ""
    tight = (method == "dop853" and meta.get("rtol") is not None and meta.get("atol") is not None
             and float(meta["rtol"]) <= 1e-12 and float(meta["atol"]) <= 1e-12)
    exact_from_ics = config.reference == "exact" and not tight
    generator = None  # the data's generator as a row of its own
    names = _integrator_names(config.integrators)
    if not names and _is_parametric(data):  # the oracle: classical methods with each trajectory's true parameters
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
    if ref_file.params is not None:  # a parametric data set: each row (and held-out condition) its own system
        system = _family(ref_file, meta, system, n_new, seed, data)
        notes.append(f"parameters per trajectory ({', '.join(ref_file.param_names)}): the reference, the classical "
                     "methods and the invariants use each trajectory's own"
                     + (f"; the {n_new} heldout conditions have new ones from the file's parameter_dists, seed {seed}"
                        if n_new else ""))
    if float(ref_file.t[0]) != t0:
        t0 = float(ref_file.t[0])
        n_steps = _horizon(config, t0, dt, ref_file.n_states)
    methods = _prepare_methods(config, system, dt, t0, n_steps, data, entries)
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
    sp.label_rows(plan, model_splits, entries)
    describe_reference(plan, method, tight)
    return plan


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


def _root_attrs(plan: _Plan, reference_gen: StepMap) -> dict[str, Any]:
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
    return {
        **system_meta(plan.system.base if family else plan.system),
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
    from .device import device_stream_rollout, use_device_engine

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
        failure = Failure(label, res.n_failed, n_traj, int(plan.idx[first]), k, float(t[k]))
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
    from .blocks import Blocks

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
    from .blocks import WorkerParts

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

    from .blocks import Blocks, remove_orphan_parts

    remove_orphan_parts(outs[0])  # worker folders of a run killed outright (we hold the lock)
    reference_gen = step_for(plan.system, lambda s: reference_step_map(plan.data_meta, s, plan.dt))
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
