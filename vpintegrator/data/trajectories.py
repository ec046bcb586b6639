"""The one trajectory container that flows from data generation to figures.

Generation, classical integration, neural rollout and rollout files all produce a
[`Trajectories`][vpintegrator.data.trajectories.Trajectories]; the HDF5 writer, the training windows, the metrics and the plots all consume one,
so classical and learned predictions compare with no reshaping.

Counts have one meaning everywhere: ``n_states`` states per trajectory, ``n_steps = n_states - 1``
steps between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import VPIntegratorError

if TYPE_CHECKING:  # pragma: no cover
    from ..systems import System
    from ..systems.family import SystemFamily
    from ..systems.unknown import UnknownSystem


@dataclass(frozen=True, eq=False)
class Trajectories:
    """A batch of trajectories sampled on a common time grid.

    Parameters
    ----------
    y : ndarray, shape (n_traj, n_states, dim)
        States; ``y[i, k]`` is trajectory ``i`` at time ``t[k]``.
    t : ndarray, shape (n_states,)
        Sample times, increasing.
    meta : dict
        Metadata (``system``, ``param_<name>``, method, dt, tolerances, seed, ...). Values are str, bool,
        int, float or lists/arrays of these, so they round-trip through HDF5 attributes.
    failed_step : ndarray of int, shape (n_traj,), optional
        For rollouts: the first step at which each trajectory failed (non-finite or blown up), −1 if
        never; its states from then on are NaN. None when not recorded.
    params : ndarray, shape (n_traj, p), optional
        Per-trajectory system parameters (a parametric data set, ``/params`` of the file): row ``i``
        holds trajectory ``i``'s values of the columns ``param_names``
        (``vpintegrator.systems.family.param_columns``: ``k1``, ``inertia[0]``, ...), overriding the
        ``param_<name>`` of ``meta``. None: one parameter set for all (every file written before
        parameters varied reads so).
    param_names : tuple of str
        The columns of ``params`` (empty when ``params`` is None).
    """

    y: np.ndarray
    t: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    failed_step: np.ndarray | None = None
    params: np.ndarray | None = None
    param_names: tuple[str, ...] = ()

    @classmethod
    def from_own_arrays(cls, y: np.ndarray, t: np.ndarray, meta: dict[str, Any]) -> "Trajectories":
        """The object ``Trajectories(y=y, t=t, meta=meta)`` makes, for a caller that made these itself: ``y`` float64
        (n_traj, n_states, dim), ``t`` float64 (n_states,), ``meta`` a dict it hands over (not copied), so the
        constructor's checks, which they pass, are skipped (~3 µs of a batch-1 ``vp.integrate`` call)."""
        made = object.__new__(cls)
        values = made.__dict__
        values["y"], values["t"], values["meta"] = y, t, meta
        values.update(_defaults(cls))
        return made

    def __post_init__(self) -> None:
        y = np.asarray(self.y)
        t = np.asarray(self.t)
        if y.dtype.kind not in "iuf":
            raise VPIntegratorError(f"Trajectories.y must be numbers (a float array); got dtype {y.dtype}")
        if t.dtype.kind not in "iuf":
            raise VPIntegratorError(f"Trajectories.t must be numbers (a float array); got dtype {t.dtype}")
        if not isinstance(self.meta, Mapping):
            raise VPIntegratorError(
                f"Trajectories.meta must be a dict of metadata; got {type(self.meta).__name__}"
            )
        if y.ndim != 3:
            raise VPIntegratorError(
                f"Trajectories.y must have shape (n_traj, n_states, dim); got shape {y.shape}"
            )
        if t.ndim != 1 or t.shape[0] != y.shape[1]:
            raise VPIntegratorError(
                f"Trajectories.t must have shape (n_states,) = ({y.shape[1]},); got shape {t.shape}"
            )
        failed = self.failed_step
        if failed is not None:
            failed = np.asarray(failed, dtype=np.int64)
            if failed.shape != (y.shape[0],):
                raise VPIntegratorError(
                    f"Trajectories.failed_step must have shape (n_traj,) = ({y.shape[0]},); got shape {failed.shape}"
                )
        params, names = self.params, tuple(str(n) for n in self.param_names)
        if params is not None:
            params = np.asarray(params, dtype=np.float64)
            if params.ndim != 2 or params.shape != (y.shape[0], len(names)):
                raise VPIntegratorError(
                    f"Trajectories.params must have shape (n_traj, len(param_names)) = ({y.shape[0]}, {len(names)}); "
                    f"got shape {params.shape}"
                )
        elif names:
            raise VPIntegratorError("Trajectories.param_names given without params; give both or neither")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "param_names", names)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "meta", dict(self.meta))
        object.__setattr__(self, "failed_step", failed)

    @property
    def n_traj(self) -> int:
        return int(self.y.shape[0])

    @property
    def n_states(self) -> int:
        """States per trajectory (``y.shape[1]``)."""
        return int(self.y.shape[1])

    @property
    def n_steps(self) -> int:
        """Steps per trajectory: ``n_states - 1``."""
        return int(self.y.shape[1]) - 1

    @property
    def dim(self) -> int:
        return int(self.y.shape[2])

    @property
    def dt(self) -> float:
        """The time step: ``meta['dt']`` if present, else the spacing of ``t``."""
        if "dt" in self.meta:
            return float(self.meta["dt"])
        if self.n_states < 2:
            raise VPIntegratorError("Trajectories has a single time and no meta['dt']; dt is undefined")
        return float(self.t[1] - self.t[0])

    @property
    def n_failed(self) -> int:
        """Trajectories that failed (0 when ``failed_step`` is not recorded)."""
        return 0 if self.failed_step is None else int(np.sum(self.failed_step >= 0))

    @property
    def parametric(self) -> bool:
        """Whether the parameters vary per trajectory (``params`` is set)."""
        return self.params is not None

    @property
    def has_system(self) -> bool:
        """Whether ``meta`` names a system (``system`` or ``system_class``): False for trajectories from
        elsewhere (a file of ``/t`` and ``/y`` only, ``meta["external"]``; or arrays given without one)."""
        from ..systems.unknown import has_system

        return has_system(self.meta)

    @property
    def base_system(self) -> "System":
        """The system of ``meta`` (name, class and ``param_<name>``): every trajectory's, unless ``params``
        overrides some of its parameters per trajectory. A one-line error when ``meta`` names none
        (``has_system``)."""
        from ..systems import system_from_meta

        where = self.meta.get("source", "Trajectories.meta")
        if not self.has_system:
            raise VPIntegratorError(
                f"{where}: these trajectories name no system (no 'system' in meta"
                + (": a file of /t and /y only" if self.meta.get("external") else "")
                + "); what needs their equations (invariants, classical methods, the exact flow) cannot run")
        return system_from_meta(self.meta, where=where)

    @property
    def system(self) -> "System | SystemFamily | UnknownSystem":
        """The system these trajectories belong to, rebuilt from ``meta``; for a parametric data set a
        ``vpintegrator.systems.family.SystemFamily``, one system per trajectory (row ``i`` of a
        batch is evaluated with trajectory ``i``'s parameters). Trajectories that name no system
        (``has_system`` False) give a ``vpintegrator.systems.unknown.UnknownSystem``: their ``dim``, no
        invariants, and a one-line refusal of anything that needs their equations."""
        if not self.has_system:
            from ..systems.unknown import UnknownSystem

            return UnknownSystem(dim=self.dim, source=str(self.meta.get("source", "Trajectories.meta")))
        if self.params is None:
            return self.base_system
        return self.systems()

    def systems(self) -> "SystemFamily":
        """One system per trajectory (also for constant parameters: then all rows share the one system)."""
        from ..systems.family import SystemFamily, systems_from_table

        base = self.base_system
        if self.params is None:
            return SystemFamily([base] * self.n_traj, (), base)
        return SystemFamily(systems_from_table(base, self.param_names, self.params), self.param_names, base)

    def system_for(self, i: int) -> "System":
        """Trajectory ``i``'s system, with its own parameters."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -self.n_traj <= i < self.n_traj:
            raise VPIntegratorError(f"system_for: i must be a trajectory index in 0 .. {self.n_traj - 1}; got {i!r}")
        base = self.base_system
        if self.params is None:
            return base
        from ..systems.family import system_with

        return system_with(base, self.param_names, self.params[int(i)])

    def param_table(self, columns: Sequence[str] | None = None) -> tuple[tuple[str, ...], np.ndarray]:
        """``(names, values)``: every trajectory's parameters, shape (n_traj, p); for constant parameters the
        file's repeated (columns: ``columns``, default ``param_names`` or every numeric parameter)."""
        from ..systems.family import param_columns, param_row

        if columns is None and self.params is not None:
            return self.param_names, self.params.copy()
        if columns is None:
            columns = param_columns(self.base_system)
        columns = tuple(columns)
        rows = [param_row(self.system_for(i), columns) for i in range(self.n_traj)] if self.params is not None \
            else [param_row(self.base_system, columns)] * self.n_traj
        return columns, np.array(rows, dtype=np.float64).reshape(self.n_traj, len(columns))

    def select(self, traj: Any = None, steps: Any = None) -> "Trajectories":
        """A subset: ``traj`` indexes trajectories, ``steps`` indexes states (ints, slices or arrays)."""
        traj = slice(None) if traj is None else traj
        steps = slice(None) if steps is None else steps
        # integer indices keep their axis, so the result is always (n_traj, n_states, dim)
        traj = [traj] if np.ndim(traj) == 0 and not isinstance(traj, slice) else traj
        steps = [steps] if np.ndim(steps) == 0 and not isinstance(steps, slice) else steps
        y = self.y[traj][:, steps]
        t = self.t[steps]
        failed = None if self.failed_step is None else self.failed_step[traj]
        params = None if self.params is None else self.params[traj]
        return Trajectories(y=y, t=np.atleast_1d(t), meta=self.meta, failed_step=failed, params=params,
                            param_names=self.param_names)

    def to_xarray(self) -> Any:
        """The trajectories as an ``xarray.Dataset``, laid out as ``xarray.open_dataset(file,
        engine="h5netcdf")`` reads the file they would be written to.

        Returns
        -------
        xarray.Dataset
            Data variable ``y`` (trajectory, t, state) (and ``failed_step`` (trajectory) when recorded);
            coordinates ``trajectory`` (row indices; a shard's start at its ``shard_traj_start``), ``t``
            (the sample times), ``state`` (the system's ``state_names``, else ``y1 .. y<dim>``) and, for a
            parametric data set, ``params`` (trajectory, param) with ``param`` the column names; attributes
            the scalar metadata (``system``, ``dt``, ...; a System object as its name). Units: ``"1"``
            (dimensionless) unless the system declares ``state_units``.

        Raises
        ------
        VPIntegratorError
            When xarray is not installed (``pip install "vpintegrator[xarray]"``).
        """
        try:
            import xarray as xr
        except ImportError:
            raise VPIntegratorError("Trajectories.to_xarray needs xarray, which is not installed; "
                                    "pip install 'vpintegrator[xarray]' (or pip install xarray)") from None

        system = self.meta.get("system_class") or self.meta.get("system")
        start = self.meta.get("shard_traj_start")
        stop = self.meta.get("shard_traj_stop")
        start = int(start) if isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer)) \
            and int(stop) - int(start) == self.n_traj else 0
        coords: dict[str, Any] = {
            "trajectory": ("trajectory", np.arange(start, start + self.n_traj, dtype=np.int64),
                           {"long_name": "trajectory index"}),
            "t": ("t", self.t, {"long_name": "time", "units": DIMENSIONLESS}),
            "state": ("state", np.array(state_names(system, self.dim)), {"long_name": "state component"}),
        }
        if self.params is not None:
            coords["param"] = ("param", np.array(self.param_names), {"long_name": "system parameter"})
            coords["params"] = (("trajectory", "param"), self.params,
                                {"long_name": "per-trajectory system parameters", "units": DIMENSIONLESS})
        data: dict[str, Any] = {
            "y": (("trajectory", "t", "state"), self.y, {"long_name": "state", "units": state_units(system)})}
        if self.failed_step is not None:
            data["failed_step"] = ("trajectory", self.failed_step,
                                   {"long_name": "first failed step (-1: never)"})
        attrs = {}
        for key, value in self.meta.items():
            if key == "system" and not isinstance(value, str):
                value = getattr(value, "name", None)
            if isinstance(value, (str, bool, int, float, np.integer, np.floating)):
                attrs[key] = value
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def __repr__(self) -> str:
        system = self.meta.get("system", "?")
        t = f"[{self.t[0]:g}, {self.t[-1]:g}]" if self.n_states else "[]"
        params = f", params={list(self.param_names)}" if self.params is not None else ""
        return (
            f"Trajectories(system={system!r}, n_traj={self.n_traj}, n_states={self.n_states}, "
            f"dim={self.dim}, t={t}{params})"
        )


def _defaults(cls: Any) -> dict[str, Any]:
    """The fields of ``cls`` (a [`Trajectories`][vpintegrator.data.trajectories.Trajectories]) but ``y``, ``t`` and
    ``meta``, each at its default (none has a factory), in field order: what ``from_own_arrays`` fills in (made
    once per class)."""
    values = _DEFAULTS.get(cls)
    if values is None:
        values = _DEFAULTS[cls] = {f.name: f.default for f in fields(cls) if f.name not in ("y", "t", "meta")}
    return values


_DEFAULTS: dict[Any, dict[str, Any]] = {}


def first_states_digest(y0: np.ndarray) -> str:
    """sha256 (hex) of the initial states ``y0`` (n_traj, dim) as little-endian float64: what identifies
    the trajectories a split's indices refer to (the same initial conditions in the same order, at any
    horizon)."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(np.asarray(y0, dtype="<f8")).tobytes()).hexdigest()


# --------------------------------------------------------------------------- naming the states (the files' and xarray's labels)

#: the ``units`` of a dimensionless quantity (CF conventions / UDUNITS)
DIMENSIONLESS = "1"


def _system_class(system: Any) -> Any:
    """The System class behind a System (or family) object or a registry name; None if unknown."""
    if system is None:
        return None
    if isinstance(system, str):
        from ..errors import VPIntegratorError
        from ..systems.registry import system_class

        try:
            return system_class(system)
        except VPIntegratorError:
            return None
    base = getattr(system, "base", None)  # a SystemFamily: its rows' class
    return type(base) if base is not None else type(system)


def state_names(system: Any, dim: int) -> tuple[str, ...]:
    """The names of the ``dim`` state components: a system object's own ``state_names`` (a system whose size is a
    parameter, such as a lattice or a bath, names its components per instance), else its class's, when they are
    ``dim`` names; else ``("y1", ..., "y<dim>")``."""
    own = None if system is None or isinstance(system, str) else getattr(system, "state_names", None)
    names = tuple(own) if isinstance(own, (tuple, list)) else tuple(getattr(_system_class(system), "state_names", ()) or ())
    if len(names) == dim and all(isinstance(n, str) and n for n in names):
        return names
    return tuple(f"y{i + 1}" for i in range(dim))


def state_units(system: Any) -> str:
    """The ``units`` of the states: the system class's ``state_units``, else ``"1"`` (dimensionless)."""
    units = getattr(_system_class(system), "state_units", None)
    return units if isinstance(units, str) and units else DIMENSIONLESS


def state_periods(system: Any, dim: int, meta: Mapping[str, Any] | None = None,
                  key: str = "/y attribute 'periodic'") -> np.ndarray:
    """Each state component's period, 0 where not periodic: (dim,) float64. The data's declaration (``meta``'s
    ``periodic``: a file's ``/y`` attribute, which ``vp-gen`` writes from the spec or the system) wins over the
    system's (the object's ``periods``, else its class's); both checked by ``vpintegrator.systems.base.check_periods``.
    A declaration of another size (the full state of an observed run's channels) wraps nothing. ``key`` names the
    declaration in a message (a spec's ``key 'system.periodic'``, its ``source`` the spec file)."""
    from ..systems.base import check_periods

    declared = None if meta is None else meta.get("periodic")
    where = f"{meta.get('source') or 'the data file'}: {key}" if meta is not None and declared is not None else ""
    if declared is None:
        own = None if system is None or isinstance(system, str) else getattr(system, "periods", None)
        declared = own if own is not None else getattr(_system_class(system), "periods", None)
        where = f"system {getattr(system, 'name', system)!r}: periods"
    if declared is not None and not isinstance(declared, dict) and np.size(declared) not in (0, dim):
        return np.zeros(dim)
    return check_periods(declared, dim, where)
