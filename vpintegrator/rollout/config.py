"""The configuration of a comparison run (``vp-rollout``): [`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig], whose fields are the
keys (TOML keys, ``--set`` keys and, spelled with dashes, CLI flags), and [`load_rollout_config`][vpintegrator.rollout.config.load_rollout_config].

Each key is declared once (``vpintegrator.config.key``); its check and its ``vp-rollout`` flag derive
from the declaration. A config is checked when it is built; what needs the data file or the models (the
trajectory indices in range, the horizon in steps, model files and their dim) is checked when
[`run_rollouts`][vpintegrator.rollout.run.run_rollouts] plans the run, before anything is written.

Library messages name keys, never flags; each error carries its key so that a CLI names its own flag.
"""

from __future__ import annotations

import os
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Config, key
from ..device import check_device_name
from ..errors import VPIntegratorError
from ..fastpath import FAST_STEPS, check_fast_step
from ..metrics import VPT_THRESHOLD
from .engine import BLOWUP, CHUNK_STEPS

#: first-window sources besides the classical integrators
INIT_CHOICES_EXTRA = ("reference", "exact_flow")
#: what the errors are measured against (the ``reference`` key)
REFERENCES = ("exact", "data")
#: rollout engines for models (the ``engine`` key): see ``use_device_engine``
ENGINES = ("auto", "host", "device")


def check_engine(engine: Any) -> str:
    """``engine`` if it is one of [`ENGINES`][vpintegrator.rollout.config.ENGINES], else a one-line error naming the key."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise VPIntegratorError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}", key="engine")
    return engine


def use_device_engine(engine: str, step_map, system) -> bool:
    """Whether ``run_rollouts`` rolls ``step_map`` out with the device engine (the ``engine`` key).

    ``"host"``: never; ``"device"``: for every model; ``"auto"``: for models on CUDA. Classical
    integrators and the exact flow always run on the host, and so do models of a system whose invariants
    are NumPy-only (``torch_invariants`` False) under ``"auto"``; under ``"device"`` that is a one-line
    error naming ``engine``.
    """
    from .steps import ModelStep

    if check_engine(engine) == "host" or not isinstance(step_map, ModelStep):
        return False
    if system.invariant_names and not getattr(system, "torch_invariants", False):
        if engine == "device":
            raise VPIntegratorError(
                f"engine device: system {system.name!r} evaluates its invariants on NumPy arrays only "
                "(torch_invariants is False); use engine host or auto",
                key="engine",
            )
        return False
    return engine == "device" or step_map.device.type == "cuda"


def _check_data(value: Any) -> Any:
    if not isinstance(value, (str, Path)) or not str(value):
        raise VPIntegratorError(f"data must be the path of a vp-gen HDF5 file; got {value!r}", key="data")
    return value


def _check_out(value: Any) -> Any:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise VPIntegratorError(f"out must be a file path; got {value!r}", key="out")
    return value


def _check_models(value: Any) -> Any:
    if not isinstance(value, (list, tuple, dict, str, Path)):
        raise VPIntegratorError(
            f"models must be a list of run directories, checkpoints or pretrained:NAME; got {value!r}", key="models"
        )
    return value


#: how an identification row (``METHOD+INTEGRATOR`` in ``integrators``) fits a trajectory's parameters from its
#: prefix: finite differences or shooting (``vpintegrator.rollout.identify``)
IDENTIFY_METHODS = ("fd", "shooting")


def _check_integrators(value: Any) -> list:
    if isinstance(value, str):
        value = [value]  # one name (a comma list is refused by name when the run starts)
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) for n in value):
        raise VPIntegratorError(f"integrators must be a list of integrator names; got {value!r}", key="integrators")
    return list(value)


def _check_traj(value: Any) -> list:
    if not isinstance(value, (list, tuple, np.ndarray)) or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in value):
        raise VPIntegratorError(f"traj must be integer indices; got {value!r}", key="traj")
    return value


def _check_device(value: Any) -> Any:
    check_device_name(value, "device")
    return value


def _check_observe(value: Any) -> str | None:
    from ..data.observation import check_observe_spec
    from ..reduction import observation as _reductions  # noqa: F401  (registers psd:K, psd_balanced:K, file:PATH)

    return check_observe_spec(value)


def _inits() -> list[str]:
    from ..integrators import list_integrators

    return ["reference", *list_integrators(), "exact_flow"]


def _check_init(value: Any) -> str:
    if not isinstance(value, str):
        raise VPIntegratorError(f"init must be a name; got {value!r}", key="init")
    valid = (*INIT_CHOICES_EXTRA, *_inits()[1:-1])
    if value not in valid:
        raise VPIntegratorError(f"init {value!r} is unknown; valid: {', '.join(valid)}", key="init")
    return value


@dataclass
class RolloutConfig(Config):
    """Everything a comparison run needs; the fields are the keys.

    Attributes
    ----------
    data : path
        A ``vp-gen`` HDF5 file: reference trajectories and their initial conditions.
    out : path
        The rollout HDF5 file; the metrics table goes beside it (same stem, ``.csv``, ``.md`` and ``.tex``).
    models : list
        Each entry a run directory, checkpoint (``.pt``) or ``"pretrained:NAME"`` (label derived: the run
        directory's name, the file's stem, for ``best.pt``/``last.pt`` the directory's name, or NAME), or a
        ``(label, path_or_module)`` pair (a 2-element list in TOML); a dict ``{label: path}`` works too.
    integrators : list of str
        Classical integrator names (``vpintegrator.list_integrators()``), or ``"exact_flow"`` (DOP853), or an
        identification row ``METHOD+INTEGRATOR`` (``fd+rk4``, ``shooting+gauss_legendre4``;
        ``vpintegrator.rollout.identify``): each row's parameters fitted from its first ``context_len`` states,
        then the integrator with them; ``sindy+INTEGRATOR`` (sparse regression on the training trajectories,
        ``vpintegrator.rollout.sindy``; the ``sindy`` extra) or ``parrot`` (context parroting,
        ``vpintegrator.models.parrot``). The rows besides the classical methods are those of
        ``vpintegrator.rollout.methods.ROW_KINDS``.
    context_len : int
        Prefix length of the identification rows and the window the ``parrot`` row matches (a context model
        reads its own ``context_len``).
    context_noise : float
        σ of the observation noise on the prefix that context models and identification rows read (one
        draw, seed 0, the same for every method).
    t_end : float or None
        Horizon (default: the data's). Beyond the data the reference is continued on the fly with the
        data's own generator ([`reference_step_map`][vpintegrator.rollout.steps.reference_step_map]), from the file's last state.
    traj : list of int or None
        Trajectory indices into the data file (rows of its ``/y``); ``n_traj``: its first ``n_traj``
        trajectories. Give at most one of the two. Default: with trained models whose recorded split applies
        to this data file, the trajectories in the test split of every such model (an empty intersection is
        an error); otherwise every trajectory of the file. Each row of the metrics table carries a ``split``
        column (``train``, ``val``, ``test``, ``new``, ``unknown``; ``vpintegrator.rollout.splits``), one
        row per method and label present; a trajectory in a model's training split is rolled out with one
        warning line.
    heldout : int or None
        Also roll out this many new initial conditions, drawn from the data file's own sampler (its
        ``sampler``/``sampler_args`` attributes) with a fresh seed (``heldout_seed``), their reference
        integrated as ``reference`` says (the exact flow, or the data's generator); labelled ``new``, with
        ``traj_index`` -1 in the rollout file. Without ``traj``/``n_traj`` only these are rolled out.
        0 or None: none.
    heldout_seed : int or None
        Seed of the held-out conditions (default: derived from the data's seed, a stream other than the
        data's own; ``vpintegrator.rollout.splits.heldout_seed``). Recorded in the rollout file.
    reference : "exact" or "data"
        What the errors are measured against. ``"exact"`` (default): the exact flow, DOP853 at rtol = atol
        = 1e-12 from the same initial conditions over the whole horizon (the data itself when it was made
        that way, DOP853 at tolerances <= 1e-12), whatever generated the data; the data's generator then
        appears as a row of its own (its label: its method name) with its true error, unless it is already
        among ``integrators``. ``"data"``: the data file, continued beyond its horizon with its generator
        (the behaviour before this key). The rollout file's ``reference*`` attributes and the table's
        ``reference`` column say which was used.
    init : str
        Where a model's first window (``seq_len`` states) comes from: ``"reference"`` (the reference
        trajectory), a classical integrator name (the paper: ``"implicit_midpoint"``) or ``"exact_flow"``.
    overlap : bool
        Overlapping windows for models (advance by one state) instead of non-overlapping ones (not volume
        preserving even for a VPT; see [`ModelStep`][vpintegrator.rollout.steps.ModelStep]).
    device : str
        ``auto``, ``cpu``, ``cuda``, ``cuda:N`` (models only; classical integrators run in NumPy).
    engine : str
        Where a model's rollout keeps its states and metrics: ``"device"`` on the model's device
        (``vpintegrator.rollout.device``: states, relative error, invariants, failures and volume
        computed there, in float64, each block copied to the host once), ``"host"`` in NumPy
        ([`stream_rollout`][vpintegrator.rollout.engine.stream_rollout], every block brought back as float64 first), or
        ``"auto"`` (the default): the device engine for models on CUDA, the host engine otherwise. The
        same datasets and table either way; classical integrators always run on the host.
    chunk_steps : int
        Steps per chunk streamed to the file.
    blowup : float
        A state with ‖z‖ > blowup × ‖z_0‖ counts as failed.
    vpt_threshold : float
        The NRMSE (against each component's spread over the training data, ``vpintegrator.metrics.nrmse``) above
        which a prediction stops being valid: the table's ``vpt`` (valid-prediction horizon). Default 0.4, dysts'.
    lyapunov : bool or None
        Estimate the largest Lyapunov exponent λ (``vpintegrator.metrics.lyapunov_max``: Benettin, on the data's
        generator, from up to 8 of the rolled-out initial conditions over the horizon, at least 1000 steps) and
        give the table's ``vpt_lyapunov``, ``(vpt − t0) · λ``: the horizon in Lyapunov times (a system with
        equations, not parametric or observed; a line gives λ with its spread over the initial conditions).
        Unset (None, the default): estimated wherever the equations are known, and the column given where the
        separation grows exponentially (by more than ``CHAOS_NATS`` over the estimate's second half: a regular
        motion's separation grows like t, at most log 2 there); a line says which. False: no estimate.
    volume : bool or None
        Compute ``log|det J|`` of every step/window map (an extra Jacobian per step). Unset (None), it is on
        up to ``vpintegrator.rollout.plan.VOLUME_MAX_DIM`` (64) state dimensions and off above, where the
        determinant of every step's dense Jacobian (O(dim³)) would cost more than the rollout (a lattice of
        hundreds of dimensions); the log line and the rollout file's ``volume_note`` say so.
    workers : int or None
        Processes the classical integrators, the exact flow and the reference's continuation run on, by
        contiguous blocks of trajectories (``vpintegrator.rollout.plan.Blocks``); models run in the calling
        process. Default: every core, when the work repays starting processes; 1: one process. The file
        is the same to the last bit whatever it is (the timings apart).
    fast_step : "auto", "off", "graph" or "compile"
        How torch runs model steps (see [`ModelStep`][vpintegrator.rollout.steps.ModelStep]; rollouts of at
        most 128 trajectories of a float64 model on the CPU run the compiled numba kernel whatever it is).
        auto (default) and graph: eager, and with the device engine on CUDA a CUDA graph of one model step
        (eager where capture fails); compile: ``torch.compile`` of the model for the rollout's batch shape
        (its first call costs seconds: for long rollouts of large batches), the CUDA graph on CUDA; off:
        eager everywhere. The names are ``vp-train``'s (a TOML of one command loads in the other);
        ``true``/``false`` (older configs) are auto/off. The key ``jit`` (its old name) is still accepted, in files, ``--set``
        and as ``RolloutConfig(jit=...)``.
    fit_data : str or None
        A vp-gen file the fitted rows (``sindy+INTEGRATOR``, ``parrot``) fit on: its training trajectories (the
        split of the first model whose recorded split applies to it, else vp-train's default split), with the
        data's state dimension and step. The rows are scored on ``data``; the output names the file each
        fitted row was fitted on (a log line, the rollout file's ``fit_source``).
    fit_on_data : bool
        Fit the fitted rows on ``data`` itself (its training trajectories: the models' split, else vp-train's
        default split) and score them on the rest. Without ``fit_data`` or this key a run with a fitted row that
        rolls out trajectories of ``data`` is refused: a fitted row never fits on the file it is scored on unless
        asked (a run of ``heldout`` conditions only, drawn anew, scores none of the file's).
    observe : str or None
        Score every row on observed channels only (``vpintegrator.rollout.observed``): q, p, state names
        (z1,z2), indices (0,1), or basis:K (the basis a model recorded). The reference is computed in the full
        state and observed; models roll out on observed windows; classical methods run as ``estimate+METHOD``
        (the full state estimated from the first ``context_len`` observed states by least squares on the true
        flow). Default: the observation the models were trained on (none: the whole state); a file of observed
        channels is its own observation. A model trained on another observation is refused.
    allow_dt_mismatch : bool
        Roll out a model whose checkpoint records another step ``dt`` than the data's (by default refused,
        as a model of another system or other parameters always is; checkpoints without a record are not
        checked).
    """

    data: str | Any = key(check=_check_data, metavar="FILE",
                          help="vp-gen HDF5: reference trajectories and initial conditions.")
    out: str | Any = key("rollout.h5", check=_check_out, path="file", help="Output HDF5.")
    models: list = key(default_factory=list, check=_check_models, flag="")
    integrators: list = key(default_factory=list, check=_check_integrators, flag="")
    t_end: float | None = key(None, type=float, low=0, open_low=True, optional=True, show_default="the data's",
                              help="Horizon; beyond the data the reference continues with its generator.")
    traj: list | None = key(None, optional=True, check=_check_traj, flag="")
    n_traj: int | None = key(None, type=int, low=1, optional=True, expected="an integer >= 1",
                             help="Use the first N trajectories of the data file.")
    heldout: int | None = key(None, type=int, low=0, optional=True, metavar="N", show_default="none",
                              expected="an integer >= 0 (new initial conditions to draw)",
                              help="Also roll out N new initial conditions from the data's own sampler (fresh seed); "
                              "their rows are labelled 'new'.")
    heldout_seed: int | None = key(None, type=int, low=0, high=2**63, open_high=True, optional=True,
                                   expected="an integer in [0, 2**63)", show_default="derived from the data's seed",
                                   help="Seed of the --heldout conditions.")
    reference: str = key("exact", choices=REFERENCES, expected="exact or data",
                         help="Errors against the exact flow (DOP853, rtol = atol = 1e-12; the data's generator "
                         "becomes a row of its own) or against the data file.")
    init: str = key("reference", choices=_inits, check=_check_init, help="First window of models.")
    overlap: bool = key(False, type=bool, help="Overlapping model windows (advance by one state).")
    device: str = key("auto", check=_check_device, metavar="DEVICE",
                      help="auto, cpu, cuda or cuda:N.")
    engine: str = key("auto", choices=ENGINES, check=check_engine,
                      help="Where model rollouts keep states and metrics: device (on the model's device, one copy per "
                      "block), host (NumPy) or auto (device for models on CUDA).")
    chunk_steps: int = key(CHUNK_STEPS, type=int, low=1, expected="an int >= 1",
                           help="Steps per chunk streamed to the file.")
    blowup: float = key(BLOWUP, type=float, low=0, open_low=True, expected="a number > 0",
                        help="Failure when |z| > BLOWUP x |z0|.")
    vpt_threshold: float = key(VPT_THRESHOLD, type=float, low=0, open_low=True, expected="a number > 0",
                               help="NRMSE above which a prediction stops being valid (the table's vpt).")
    lyapunov: bool | None = key(None, type=bool, optional=True, show_default="where the flow separates exponentially",
                                help="Estimate the largest Lyapunov exponent (Benettin) and give vpt in Lyapunov times.")
    volume: bool | None = key(None, type=bool, optional=True, show_default="on up to dim 64",
                              help="Compute log|det J| of every step/window map.")
    fast_step: str = key("auto", choices=FAST_STEPS, check=check_fast_step, flag="")
    observe: str | None = key(None, optional=True, check=_check_observe, metavar="SPEC",
                              show_default="the models' (else the whole state)",
                              help="Score every row on observed channels only: q, p, names (z1,z2), indices (0,1) or "
                              "basis:K; classical rows run as estimate+METHOD.")
    allow_dt_mismatch: bool = key(False, type=bool,
                                  help="Roll out models trained at another step dt than the data's (refused "
                                  "otherwise).")
    # issue 23: the classical integrators' blocks of trajectories on worker processes (rollout/blocks.py)
    workers: int | None = key(None, type=int, low=1, optional=True, expected="an integer >= 1",
                              show_default="every core",
                              help="Processes for the classical integrators and the exact flow (1: one; models run "
                              "in this process). The output does not depend on it.")

    # issue 34: the context a context model and the identification rows (fd+rk4, shooting+rk4, ...) read
    context_len: int = key(3, type=int, low=1, expected="an integer >= 1",
                           help="Prefix states the identification rows (fd+INTEGRATOR, shooting+INTEGRATOR) fit "
                           "the parameters from, the window the fitted memory rows (arx, delay_dmd, narx, "
                           "delay_sindy+INTEGRATOR) and the parrot row read (1: memoryless), and the observed states "
                           "estimate+INTEGRATOR estimates from; each row refuses a length it cannot use (a context "
                           "model reads its own context_len).")
    context_noise: float = key(0.0, type=float, low=0, expected="a number >= 0",
                               help="Observation noise sigma on the context prefix seen by context models and "
                               "identification rows (one draw, the same for all).")
    fit_data: str | None = key(None, optional=True, type=str, metavar="FILE", show_default="none",
                               help="Training file the fitted rows (sindy+INTEGRATOR, parrot) fit on; they are "
                               "scored on --data.")
    fit_on_data: bool = key(False, type=bool,
                            help="Let the fitted rows fit on --data itself (its training split; they score the "
                            "rest): refused unless asked.")

    #: the old name of ``fast_step``, still accepted: ``RolloutConfig(jit=False)``
    jit: InitVar[bool | None] = None

    _source_in_messages = False

    def __post_init__(self, jit: bool | None = None) -> None:  # type: ignore[override]
        if jit is not None:
            self.fast_step = check_fast_step(jit)
        super().__post_init__()

    def _check_together(self) -> None:
        if self.traj is not None and self.n_traj is not None:
            raise VPIntegratorError("traj and n_traj both given; give one of them", key="traj")


def load_rollout_config(path=None, **overrides: Any) -> RolloutConfig:
    """A [`RolloutConfig`][vpintegrator.rollout.config.RolloutConfig] from a TOML file (its keys at the top level or in a ``[rollout]`` table)
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
        values = renamed_keys(read_toml(path, table="rollout", what="rollout config"), str(path))
        if not values:
            raise VPIntegratorError(
                f"rollout config file {path} sets no keys (it is empty); give a TOML file with RolloutConfig "
                f"keys ({', '.join(valid)}) or leave config out",
                key="config",
            )
        check_keys(values, valid, source=str(path))
    given = renamed_keys({k: v for k, v in overrides.items() if v is not None}, "rollout config")
    check_keys(given, valid, source="rollout config")
    values = merge(values, given)
    if "data" not in values:
        where = f" (in {path} or as an override)" if path is not None else ""
        raise VPIntegratorError(f"give data, a vp-gen HDF5 file with the reference trajectories{where}", key="data")
    for name in ("models", "integrators"):
        if isinstance(values.get(name), str):
            values[name] = [values[name]]
    return RolloutConfig(**values)


#: old key names still accepted -> their names now
RENAMED_KEYS = {"jit": "fast_step"}


def renamed_keys(values: dict[str, Any], source: str = "rollout config") -> dict[str, Any]:
    """``values`` with the old key names (``RENAMED_KEYS``) under their new names; both given: refused."""
    out = dict(values)
    for old, new in RENAMED_KEYS.items():
        if old in out:
            if new in out:
                raise VPIntegratorError(f"{source}: {old} is the old name of {new}; give {new} only", key=new)
            out[new] = out.pop(old)
    return out


def model_entries(models) -> list:
    """The ``models`` key as a list of entries (paths, ``pretrained:NAME``, ``(label, model)`` pairs)."""
    if isinstance(models, dict):
        return list(models.items())
    if isinstance(models, (str, Path)):
        return [models]
    return list(models or [])


def integrator_names(integrators: Any) -> list[str]:
    """The names of the ``integrators`` key (a name or a list of them), stripped, empty ones left out."""
    if isinstance(integrators, str):
        integrators = [integrators]
    return [str(n).strip() for n in integrators or [] if str(n).strip()]
