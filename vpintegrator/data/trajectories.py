"""The one trajectory container that flows from data generation to figures.

Generation, classical integration, neural rollout and rollout files all produce a
[`Trajectories`][vpintegrator.data.trajectories.Trajectories]; the HDF5 writer, the training windows, the metrics and the plots all consume one,
so classical and learned predictions compare with no reshaping.

Counts have one meaning everywhere: ``n_states`` states per trajectory, ``n_steps = n_states - 1``
steps between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import VPIntegratorError

if TYPE_CHECKING:  # pragma: no cover
    from ..systems import System


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
    """

    y: np.ndarray
    t: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    failed_step: np.ndarray | None = None

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
    def system(self) -> "System":
        """The system these trajectories belong to, rebuilt from ``meta`` (name, class and parameters)."""
        from ..systems import system_from_meta

        return system_from_meta(self.meta, where=self.meta.get("source", "Trajectories.meta"))

    def select(self, traj=None, steps=None) -> "Trajectories":
        """A subset: ``traj`` indexes trajectories, ``steps`` indexes states (ints, slices or arrays)."""
        traj = slice(None) if traj is None else traj
        steps = slice(None) if steps is None else steps
        # integer indices keep their axis, so the result is always (n_traj, n_states, dim)
        traj = [traj] if np.ndim(traj) == 0 and not isinstance(traj, slice) else traj
        steps = [steps] if np.ndim(steps) == 0 and not isinstance(steps, slice) else steps
        y = self.y[traj][:, steps]
        t = self.t[steps]
        failed = None if self.failed_step is None else self.failed_step[traj]
        return Trajectories(y=y, t=np.atleast_1d(t), meta=self.meta, failed_step=failed)

    def __repr__(self) -> str:
        system = self.meta.get("system", "?")
        t = f"[{self.t[0]:g}, {self.t[-1]:g}]" if self.n_states else "[]"
        return (
            f"Trajectories(system={system!r}, n_traj={self.n_traj}, n_states={self.n_states}, "
            f"dim={self.dim}, t={t})"
        )
