"""Comparison runs (what ``vp-rollout`` does): models and classical integrators from a data set's initial
conditions, against its reference, to any horizon, streamed to one rollout file plus a metrics table.

:class:`RolloutConfig` holds the keys (the same names as TOML keys, ``--set`` keys and, spelled with
dashes, CLI flags); :func:`load_rollout_config` reads them from TOML with overrides; :func:`run_rollouts`
runs them. The file layout and its reader are in :mod:`vpintegrator.data.rollouts`.

Library messages name keys (``t_end``, ``traj``, ``models``), never flags; each error carries its key so
that a CLI names its own flag.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError
from .engine import BLOWUP, CHUNK_STEPS, StepMap, initial_window, stream_rollout
from .steps import ExactFlowStep, IntegratorStep, ModelStep, reference_step_map

__all__ = ["RolloutConfig", "RolloutReport", "load_rollout_config", "run_rollouts", "parse_model_entry", "model_label"]

_INIT_CHOICES_EXTRA = ("reference", "exact_flow")


@dataclass
class RolloutConfig:
    """Everything a comparison run needs; the fields are the keys.

    Attributes
    ----------
    data : path
        A ``vp-gen`` HDF5 file: reference trajectories and their initial conditions.
    out : path
        The rollout HDF5 file; the metrics table goes beside it (same stem, ``.csv`` and ``.md``).
    models : list
        Each entry a run directory, checkpoint (``.pt``) or ``"pretrained:NAME"`` (label derived: the run
        directory's name, the file's stem, for ``best.pt``/``last.pt`` the directory's name, or NAME), or a
        ``(label, path_or_module)`` pair (a 2-element list in TOML); a dict ``{label: path}`` works too.
    integrators : list of str
        Classical integrator names (``vpintegrator.list_integrators()``), or ``"exact_flow"`` (DOP853).
    t_end : float or None
        Horizon (default: the data's). Beyond the data the reference is continued on the fly with the
        data's own generator (:func:`~vpintegrator.rollout.reference_step_map`), from the file's last state.
    traj : list of int or None
        Trajectory indices into the data file (rows of its ``/y``); ``n_traj``: its first ``n_traj``
        trajectories (default: all). Give at most one of the two.
    init : str
        Where a model's first window (``seq_len`` states) comes from: ``"reference"`` (the reference
        trajectory), a classical integrator name (the paper: ``"implicit_midpoint"``) or ``"exact_flow"``.
    overlap : bool
        Overlapping windows for models (advance by one state) instead of non-overlapping ones (not volume
        preserving even for a VPT; see :class:`~vpintegrator.rollout.ModelStep`).
    device : str
        ``auto``, ``cpu``, ``cuda``, ``cuda:N`` (models only; classical integrators run in NumPy).
    chunk_steps : int
        Steps per chunk streamed to the file.
    blowup : float
        A state with ‖z‖ > blowup × ‖z_0‖ counts as failed.
    volume : bool
        Compute ``log|det J|`` of every step/window map (an extra Jacobian per step).
    jit : bool
        Trace models with TorchScript for speed (see :class:`~vpintegrator.rollout.ModelStep`).
    """

    data: str | Any
    out: str | Any = "rollout.h5"
    models: list = field(default_factory=list)
    integrators: list = field(default_factory=list)
    t_end: float | None = None
    traj: list | None = None
    n_traj: int | None = None
    init: str = "reference"
    overlap: bool = False
    device: str = "auto"
    chunk_steps: int = CHUNK_STEPS
    blowup: float = BLOWUP
    volume: bool = True
    jit: bool = True

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def validate(self) -> None:
        """Check what can be checked without the data file; a one-line error naming the key."""
        from ..device import check_device_name
        from ..integrators import list_integrators

        cs = self.chunk_steps
        if isinstance(cs, bool) or not isinstance(cs, (int, np.integer)) or cs < 1:
            raise VPIntegratorError(f"chunk_steps must be an int >= 1; got {cs!r}", key="chunk_steps")
        b = self.blowup
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0:
            raise VPIntegratorError(f"blowup must be a number > 0; got {b!r}", key="blowup")
        valid_init = (*_INIT_CHOICES_EXTRA, *list_integrators())
        if self.init not in valid_init:
            raise VPIntegratorError(f"init {self.init!r} is unknown; valid: {', '.join(valid_init)}", key="init")
        if self.traj is not None and self.n_traj is not None:
            raise VPIntegratorError("traj and n_traj both given; give one of them", key="traj")
        check_device_name(self.device, "device")
        for key in ("overlap", "volume", "jit"):
            if not isinstance(getattr(self, key), (bool, np.bool_)):
                raise VPIntegratorError(f"{key} must be true or false; got {getattr(self, key)!r}", key=key)


def load_rollout_config(path=None, **overrides: Any) -> RolloutConfig:
    """A :class:`RolloutConfig` from a TOML file (its keys at the top level or in a ``[rollout]`` table)
    with ``overrides`` on top (None values are "not given": flags win only when given).

    Raises
    ------
    VPIntegratorError
        On an unreadable file, unknown keys (listing the valid ones) or no ``data``.
    """
    from ..config import check_keys, merge, read_toml

    valid = RolloutConfig.keys()
    values: dict[str, Any] = {}
    if path is not None:
        values = read_toml(path, table="rollout", what="rollout config")
        check_keys(values, valid, source=str(path))
    given = {k: v for k, v in overrides.items() if v is not None}
    check_keys(given, valid, source="rollout config")
    values = merge(values, given)
    if "data" not in values:
        where = f" (in {path} or as an override)" if path is not None else ""
        raise VPIntegratorError(f"give data, a vp-gen HDF5 file with the reference trajectories{where}", key="data")
    for key in ("models", "integrators"):
        if isinstance(values.get(key), str):
            values[key] = [values[key]]
    return RolloutConfig(**values)


@dataclass
class RolloutReport:
    """What :func:`run_rollouts` wrote: the HDF5 file, the metrics table (CSV, Markdown) and its rows.

    ``failures``: label -> (number failed, data-file index of the first failed trajectory, its step).
    """

    out: Any
    csv: Any
    markdown: Any
    rows: list
    failures: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- model and method specs


def model_label(spec: str) -> str:
    """The label of a model given by path or ``pretrained:NAME``: NAME, the run directory's name, the
    directory's name for ``best.pt``/``last.pt``, else the file's stem."""
    if spec.startswith("pretrained:"):
        return spec.split(":", 1)[1]
    p = Path(spec)
    if p.suffix == ".pt" and p.stem in ("best", "last") and p.parent.name:
        return p.parent.name
    return p.stem if p.suffix else p.name


def _load(spec: str):
    from ..models import load_model

    if not spec.startswith("pretrained:") and not Path(spec).exists():
        raise VPIntegratorError(
            f"models: {spec}: no such checkpoint file or run directory; give a vp-train run directory, a .pt "
            "file or pretrained:NAME",
            key="models",
        )
    return load_model(spec)


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


def _model_entries(models) -> list:
    if isinstance(models, dict):
        return list(models.items())
    return list(models or [])


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
    data_meta: dict
    system: Any
    dt: float
    t0: float
    idx: np.ndarray
    ref_file: Any  # Trajectories of the data file, the selected trajectories
    n_steps: int
    methods: list  # (label, step_map, source)
    say: Callable[[str], None]

    @property
    def t(self) -> np.ndarray:
        return self.t0 + self.dt * np.arange(self.n_steps + 1)

    @property
    def n_traj(self) -> int:
        return int(self.idx.size)

    @property
    def chunks(self) -> tuple[int, int]:
        return min(self.n_traj, 64), min(self.n_steps + 1, int(self.config.chunk_steps))


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


def _prepare_methods(config: RolloutConfig, system, dt: float, t0: float, n_steps: int, data: Path) -> list:
    """Every method's step map, every input checked, nothing computed."""
    from ..integrators import list_integrators

    methods: list[tuple[str, StepMap, str]] = []
    seen: set = set()
    valid_int = (*list_integrators(), "exact_flow")
    for name in _integrator_names(config.integrators):
        if name not in valid_int:
            hint = " (integrators is a list of names, not a comma list)" if "," in name else ""
            raise VPIntegratorError(
                f"integrators: unknown integrator {name!r}; valid: {', '.join(valid_int)}{hint}", key="integrators"
            )
        _check_label(name, seen)
        step_map = ExactFlowStep(system, dt) if name == "exact_flow" else IntegratorStep(system, name, dt)
        methods.append((name, step_map, name))
    for entry in _model_entries(config.models):
        label, model, source = parse_model_entry(entry)
        _check_label(label, seen)
        if int(getattr(model, "dim", -1)) != system.dim:
            raise VPIntegratorError(
                f"models: {source}: model dim {getattr(model, 'dim', None)} does not match the data's dim "
                f"{system.dim} ({system.name} in {data}); roll it out on data of its own system",
                key="models",
            )
        step_map = ModelStep(model, device=config.device, overlap=config.overlap, jit=config.jit)
        if n_steps < step_map.seq_len:
            raise VPIntegratorError(
                f"t_end: the horizon has {n_steps} steps, shorter than seq_len = {step_map.seq_len} of model "
                f"{label!r}; raise it to at least {t0 + step_map.seq_len * dt:g}",
                key="t_end",
            )
        methods.append((label, step_map, source))
    if not methods:
        raise VPIntegratorError("nothing to roll out: give models and/or integrators", key="models")
    return methods


def _plan(config: RolloutConfig, say: Callable[[str], None]) -> _Plan:
    from ..data import read_metadata, read_trajectories
    from ..systems import system_from_meta

    config.validate()
    data = Path(config.data)
    meta = read_metadata(data)
    system = system_from_meta(meta, data)
    dt = float(meta["dt"])
    idx = _select_traj(config, int(meta["n_traj"]), data)
    ref_file = read_trajectories(data, traj=idx)
    t0 = float(ref_file.t[0])
    n_steps = _horizon(config, t0, dt, ref_file.n_states)
    methods = _prepare_methods(config, system, dt, t0, n_steps, data)
    return _Plan(config, data, meta, system, dt, t0, idx, ref_file, n_steps, methods, say)


def _root_attrs(plan: _Plan, reference_gen: StepMap) -> dict:
    from .._version import __version__
    from ..data.rollouts import ROLLOUT_SCHEMA, ROLLOUT_SCHEMA_VERSION
    from ..systems import system_meta

    t, n_file, cfg = plan.t, plan.ref_file.n_states, plan.config
    beyond = f", continued with {getattr(reference_gen, 'name', '?')} beyond" if plan.n_steps + 1 > n_file else ""
    return {
        "schema": ROLLOUT_SCHEMA,
        "schema_version": ROLLOUT_SCHEMA_VERSION,
        **system_meta(plan.system),
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
        "data_file": str(plan.data),
        "data_method": str(plan.data_meta.get("method", "")),
        "data_n_states": n_file,
        "data_n_steps": n_file - 1,
        "reference": f"{plan.data} for t <= {plan.ref_file.t[-1]:g}{beyond}",
        "init": cfg.init,
        "overlap": bool(cfg.overlap),
        "blowup": float(cfg.blowup),
        "chunk_steps": int(cfg.chunk_steps),
        "vpintegrator_version": __version__,
    }


def _write_reference(f, plan: _Plan, reference_gen: StepMap):
    """``/reference``: the data file, then (beyond it) the data's own generator from its last state."""
    from ..data.rollouts import create_series, set_attrs
    from ..metrics import TrajectoryMetricsStream

    ref_file, n_steps, t = plan.ref_file, plan.n_steps, plan.t
    n_traj, dim, (ct, cs) = plan.n_traj, plan.system.dim, plan.chunks
    n_file = ref_file.n_states
    g = f.create_group("reference")
    yref = create_series(g, "y", (n_traj, n_steps + 1, dim), (ct, cs, dim))
    n_take = min(n_file, n_steps + 1)
    for k0 in range(0, n_take, cs):
        yref[:, k0 : min(n_take, k0 + cs)] = ref_file.y[:, k0 : min(n_take, k0 + cs)]
    ref_failed = np.full(n_traj, -1, dtype=np.int64)
    if n_steps + 1 > n_file:
        plan.say(
            f"reference: continuing {plan.data.name} from t = {ref_file.t[-1]:g} to {t[-1]:g} with {reference_gen.name}"
        )
        offset = n_file - 1

        def ref_sink(k0, chunk):
            yref[:, offset + k0 : offset + k0 + chunk.shape[1]] = chunk

        cont = stream_rollout(
            reference_gen, ref_file.y[:, -1], plan.dt, n_steps - offset, ref_sink, t0=float(ref_file.t[-1]),
            chunk_steps=plan.config.chunk_steps, blowup=plan.config.blowup,
        )
        ref_failed = np.where(cont.failed_step >= 0, cont.failed_step + offset, -1)
    g.create_dataset("failed_step", data=ref_failed)
    names = tuple(plan.system.invariant_names)
    stream = TrajectoryMetricsStream(plan.system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    inv = {name: create_series(g, f"invariants/{name}", (n_traj, n_steps + 1), (ct, cs)) for name in names}
    for k0 in range(0, n_steps + 1, cs):
        k1 = min(n_steps + 1, k0 + cs)
        per_step = stream.update(t[k0:k1], yref[:, k0:k1], None)
        for name in names:
            inv[name][:, k0:k1] = per_step[f"invariant/{name}"]
    summary = stream.summary()
    set_attrs(g, {"label": "reference", "kind": "reference", "source": str(plan.data),
                  **{f"max_rel_drift_{n}": float(np.max(summary[f"max_rel_drift_{n}"])) for n in names}})
    return yref


def _write_method(f, plan: _Plan, label: str, step_map: StepMap, source: str, yref) -> tuple[dict, Any]:
    """``/methods/<label>``: states, per-step metrics and volume streamed; returns (table row, failure)."""
    from ..data.rollouts import create_series, set_attrs
    from ..metrics import TrajectoryMetricsStream, VolumeStream, summary_row

    cfg, system, t, n_steps = plan.config, plan.system, plan.t, plan.n_steps
    n_traj, (ct, cs), names = plan.n_traj, plan.chunks, tuple(plan.system.invariant_names)
    T = step_map.seq_len
    if T == 1 or cfg.init == "reference":
        window0 = yref[:, :T]
        init = "reference" if T > 1 else "initial condition"
    else:
        window0 = initial_window(system, yref[:, 0], plan.dt, T, method=cfg.init)
        init = cfg.init
    g = f.create_group(f"methods/{label}")
    gy = create_series(g, "y", (n_traj, n_steps + 1, system.dim), (ct, cs, system.dim))
    err_ds = create_series(g, "rel_error", (n_traj, n_steps + 1), (ct, cs))
    inv_ds = {name: create_series(g, f"invariants/{name}", (n_traj, n_steps + 1), (ct, cs)) for name in names}
    stream = TrajectoryMetricsStream(system, n_traj, t_center=0.5 * (t[0] + t[-1]))
    vol = ld_ds = cum_ds = None
    if cfg.volume:
        vol = VolumeStream(step_map.log_abs_det_jacobian, n_traj, T, step_map.advance, n_steps)
        g.create_dataset("map_step", data=vol.map_step)
        ld_ds = create_series(g, "log_det_J", (n_traj, vol.n_maps), (ct, cs))
        cum_ds = create_series(g, "cum_log_det_J", (n_traj, vol.n_maps), (ct, cs))

    def callback(k0, chunk):
        k1 = k0 + chunk.shape[1]
        per_step = stream.update(t[k0:k1], chunk, yref[:, k0:k1])
        err_ds[:, k0:k1] = per_step["rel_error"]
        for name in names:
            inv_ds[name][:, k0:k1] = per_step[f"invariant/{name}"]
        if vol is not None:
            maps, logdet, cum = vol.update(chunk)
            if logdet.shape[1]:
                ld_ds[:, maps] = logdet
                cum_ds[:, maps] = cum

    plan.say(f"{label}: rolling out {n_traj} trajectories x {n_steps} steps ({step_map.kind}, init {init})")
    res = stream_rollout(
        step_map, window0, plan.dt, n_steps, gy, t0=plan.t0, callback=callback,
        chunk_steps=cfg.chunk_steps, blowup=cfg.blowup,
    )
    g.create_dataset("failed_step", data=res.failed_step)
    row = summary_row(
        label, stream.summary(), names,
        max_abs_cum_log_det_J=None if vol is None else vol.max_abs_cum,
        seconds_per_step=res.seconds_per_step, failed_step=res.failed_step,
    )
    failure = None
    if res.n_failed:
        first = int(np.argmax(res.failed_step >= 0))
        k = int(res.failed_step[first])
        failure = (res.n_failed, int(plan.idx[first]), k)
        plan.say(
            f"{label}: {res.n_failed} of {n_traj} trajectories failed (blow-up or non-finite); e.g. "
            f"trajectory {int(plan.idx[first])} at step {k} (t = {t[k]:g})"
        )
    set_attrs(g, {
        **{k: v for k, v in res.meta.items() if isinstance(v, (str, int, float, bool))},
        "label": label,
        "source": source,
        "init": init,
        "seconds": float(res.seconds),
        "seconds_per_step": float(res.seconds_per_step),
        "n_failed": res.n_failed,
        **{f"summary_{k}": v for k, v in row.items() if k != "method"},
    })
    return row, failure


def run_rollouts(config: RolloutConfig, log: Callable[[str], None] | None = None) -> RolloutReport:
    """Roll out models and classical integrators from a data set's initial conditions; write everything.

    Writes ``config.out`` (HDF5, atomically; layout in ``datasets/README.md``, reader
    :func:`vpintegrator.data.rollouts.read_rollout`) and the metrics table beside it (``<stem>.csv``,
    ``<stem>.md``; one row per method, columns in :func:`vpintegrator.metrics.summary_row`).
    Trajectories, per-step metrics and volume are streamed in chunks of ``config.chunk_steps`` steps.
    Every input is checked (and every model loaded) before anything is computed.

    Parameters
    ----------
    config : RolloutConfig
    log : callable, optional
        Receives one progress line per method.

    Returns
    -------
    RolloutReport
    """
    import json

    import h5py

    from .._io import atomic_path
    from ..data.rollouts import set_attrs
    from ..metrics import write_table

    plan = _plan(config, log or (lambda line: None))
    reference_gen = reference_step_map(plan.data_meta, plan.system, plan.dt)
    out = Path(config.out)
    rows: list[dict] = []
    failures: dict = {}
    ct, cs = plan.chunks
    # every dataset is written in whole chunks (the engine's blocks are chunk-aligned), so one chunk of
    # cache per dataset is enough; HDF5's default (8 MiB per open dataset) would only hold memory
    cache = max(1 << 16, 2 * ct * cs * plan.system.dim * 8)
    with atomic_path(out, suffix=".h5") as tmp, h5py.File(tmp, "w", rdcc_nbytes=cache, rdcc_w0=1.0) as f:
        set_attrs(f, _root_attrs(plan, reference_gen))
        f.create_dataset("t", data=plan.t)
        f.create_dataset("traj_index", data=plan.idx)
        yref = _write_reference(f, plan, reference_gen)
        plan.ref_file = None  # the file's states are in /reference now
        for label, step_map, source in plan.methods:
            row, failure = _write_method(f, plan, label, step_map, source, yref)
            rows.append(row)
            if failure is not None:
                failures[label] = failure
        f.attrs["summary_json"] = json.dumps(rows)
    csv_path, md_path = write_table(rows, out.with_suffix(""))
    return RolloutReport(out=out, csv=csv_path, markdown=md_path, rows=rows, failures=failures)
