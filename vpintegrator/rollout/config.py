"""The configuration of a comparison run (``vp-rollout``): :class:`RolloutConfig`, whose fields are the
keys (TOML keys, ``--set`` keys and, spelled with dashes, CLI flags), and :func:`load_rollout_config`.

Library messages name keys, never flags; each error carries its key so that a CLI names its own flag.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import VPIntegratorError
from .engine import BLOWUP, CHUNK_STEPS

#: first-window sources besides the classical integrators
INIT_CHOICES_EXTRA = ("reference", "exact_flow")
#: rollout engines for models (the ``engine`` key): see :func:`vpintegrator.rollout.device.use_device_engine`
ENGINES = ("auto", "host", "device")


def check_engine(engine: Any) -> str:
    """``engine`` if it is one of :data:`ENGINES`, else a one-line error naming the key."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise VPIntegratorError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}", key="engine")
    return engine


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
    engine : str
        Where a model's rollout keeps its states and metrics: ``"device"`` on the model's device
        (:mod:`vpintegrator.rollout.device`: states, relative error, invariants, failures and volume
        computed there, in float64, each block copied to the host once), ``"host"`` in NumPy
        (:func:`~vpintegrator.rollout.stream_rollout`, every block brought back as float64 first), or
        ``"auto"`` (the default): the device engine for models on CUDA, the host engine otherwise. The
        same datasets and table either way; classical integrators always run on the host.
    chunk_steps : int
        Steps per chunk streamed to the file.
    blowup : float
        A state with ‖z‖ > blowup × ‖z_0‖ counts as failed.
    volume : bool
        Compute ``log|det J|`` of every step/window map (an extra Jacobian per step).
    jit : bool
        Compile model steps for speed: a TorchScript trace (see :class:`~vpintegrator.rollout.ModelStep`),
        and with the device engine on CUDA a CUDA graph of one model step (eager where capture fails).
        False: eager everywhere.
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
    engine: str = "auto"
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

        if not isinstance(self.data, (str, Path)) or not str(self.data):
            raise VPIntegratorError(f"data must be the path of a vp-gen HDF5 file; got {self.data!r}", key="data")
        if not isinstance(self.integrators, (str, list, tuple)) or not all(
                isinstance(n, str) for n in ([self.integrators] if isinstance(self.integrators, str) else self.integrators)):
            raise VPIntegratorError(
                f"integrators must be a list of integrator names; got {self.integrators!r}", key="integrators"
            )
        if not isinstance(self.models, (list, tuple, dict, str, Path)):
            raise VPIntegratorError(
                f"models must be a list of run directories, checkpoints or pretrained:NAME; got {self.models!r}",
                key="models",
            )
        if not isinstance(self.init, str):
            raise VPIntegratorError(f"init must be a name; got {self.init!r}", key="init")
        cs = self.chunk_steps
        if isinstance(cs, bool) or not isinstance(cs, (int, np.integer)) or cs < 1:
            raise VPIntegratorError(f"chunk_steps must be an int >= 1; got {cs!r}", key="chunk_steps")
        b = self.blowup
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0:
            raise VPIntegratorError(f"blowup must be a number > 0; got {b!r}", key="blowup")
        valid_init = (*INIT_CHOICES_EXTRA, *list_integrators())
        if self.init not in valid_init:
            raise VPIntegratorError(f"init {self.init!r} is unknown; valid: {', '.join(valid_init)}", key="init")
        if self.traj is not None and self.n_traj is not None:
            raise VPIntegratorError("traj and n_traj both given; give one of them", key="traj")
        check_device_name(self.device, "device")
        check_engine(self.engine)
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
        if not values:
            raise VPIntegratorError(
                f"rollout config file {path} sets no keys (it is empty); give a TOML file with RolloutConfig "
                f"keys ({', '.join(valid)}) or leave config out",
                key="config",
            )
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


def model_entries(models) -> list:
    """The ``models`` key as a list of entries (paths, ``pretrained:NAME``, ``(label, model)`` pairs)."""
    if isinstance(models, dict):
        return list(models.items())
    if isinstance(models, (str, Path)):
        return [models]
    return list(models or [])
