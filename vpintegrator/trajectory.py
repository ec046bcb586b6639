"""The trajectory container that flows from data generation to figures.

Generation, classical integration and neural rollout all produce a :class:`Trajectories`; the HDF5
writer, the metrics and the plots all consume one, so classical and learned predictions compare with no
reshaping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import VPIntegratorError


@dataclass(frozen=True, eq=False)
class Trajectories:
    """A batch of trajectories sampled on a common time grid.

    Parameters
    ----------
    y : ndarray, shape (n_traj, n_steps, dim)
        States; ``y[i, k]`` is trajectory ``i`` at time ``t[k]``.
    t : ndarray, shape (n_steps,)
        Sample times, increasing.
    meta : dict
        Metadata (system name and parameters, method, dt, tolerances, seed, ...). Values are str, bool,
        int, float or lists/arrays of these, so they round-trip through HDF5 attributes.
    """

    y: np.ndarray
    t: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        y = np.asarray(self.y)
        t = np.asarray(self.t)
        if y.ndim != 3:
            raise VPIntegratorError(
                f"Trajectories.y must have shape (n_traj, n_steps, dim); got shape {y.shape}"
            )
        if t.ndim != 1 or t.shape[0] != y.shape[1]:
            raise VPIntegratorError(
                f"Trajectories.t must have shape (n_steps,) = ({y.shape[1]},); got shape {t.shape}"
            )
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "meta", dict(self.meta))

    @property
    def n_traj(self) -> int:
        return int(self.y.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.y.shape[1])

    @property
    def dim(self) -> int:
        return int(self.y.shape[2])

    @property
    def dt(self) -> float:
        """The time step: ``meta['dt']`` if present, else the spacing of ``t``."""
        if "dt" in self.meta:
            return float(self.meta["dt"])
        if self.n_steps < 2:
            raise VPIntegratorError("Trajectories has a single time and no meta['dt']; dt is undefined")
        return float(self.t[1] - self.t[0])

    def select(self, traj=None, steps=None) -> "Trajectories":
        """A view on a subset: ``traj`` indexes trajectories, ``steps`` indexes time (ints, slices or arrays)."""
        traj = slice(None) if traj is None else traj
        steps = slice(None) if steps is None else steps
        # integer indices keep their axis, so the result is always (n_traj, n_steps, dim)
        traj = [traj] if np.ndim(traj) == 0 and not isinstance(traj, slice) else traj
        steps = [steps] if np.ndim(steps) == 0 and not isinstance(steps, slice) else steps
        y = self.y[traj][:, steps]
        t = self.t[steps]
        return Trajectories(y=y, t=np.atleast_1d(t), meta=self.meta)

    def __repr__(self) -> str:
        system = self.meta.get("system", "?")
        return (
            f"Trajectories(system={system!r}, n_traj={self.n_traj}, n_steps={self.n_steps}, "
            f"dim={self.dim}, t=[{self.t[0]:g}, {self.t[-1]:g}])"
        )
