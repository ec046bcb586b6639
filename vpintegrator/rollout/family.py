"""Step maps of a parametric data set: a classical method (or the exact flow) with each trajectory's own
parameters.

A ``vpintegrator.systems.family.SystemFamily`` holds one system per rolled-out row;
``FamilyStep`` builds one step map per distinct system (``make(system)``: an
[`IntegratorStep`][vpintegrator.rollout.steps.IntegratorStep] or [`ExactFlowStep`][vpintegrator.rollout.steps.ExactFlowStep])
and runs each on its own rows, so row ``i`` is stepped exactly as a rollout of trajectory ``i``'s
system alone would step it. ``step_for`` is the one switch: a plain system gets ``make(system)``
itself (the same object, the same numbers as before families existed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import VPIntegratorError
from ..systems.family import SystemFamily
from .engine import StepMap

__all__ = ["FamilyStep", "step_for", "for_rows", "family_initial_window", "is_parametric", "run_family"]

#: the compiled single-trajectory runner for groups of any size
_ALWAYS = 2**62


class FamilyStep(StepMap):
    """One step map per distinct system of ``family``, each on its rows; the rows' states in row order.

    Parameters
    ----------
    family : SystemFamily
        One system per rolled-out row.
    make : callable
        ``make(system) -> StepMap`` (float64, ``seq_len = pred_window = 1``).
    """

    def __init__(self, family: SystemFamily, make: Callable[[Any], StepMap]) -> None:
        self.family = family
        self._make = make
        self._groups = family.groups()
        self._maps = [make(system) for system, _ in self._groups]
        for m in self._maps:  # compiled one trajectory after the other, whatever the group's size: every row is
            if hasattr(m, "compiled_max_batch"):  # stepped alike in any block of the selection (shards, workers)
                m.compiled_max_batch = _ALWAYS
        first = self._maps[0]
        self.kind: str = first.kind
        self.name: str = first.name
        self.dim: int = first.dim
        self.seq_len: int = first.seq_len
        self.pred_window: int = first.pred_window
        self.overlap: bool = first.overlap
        self.dt = getattr(first, "dt", None)
        self._row_group = np.empty(len(family), dtype=np.int64)
        self._pos = np.empty(len(family), dtype=np.int64)
        for g, (_, rows) in enumerate(self._groups):
            self._row_group[rows] = g
            self._pos[rows] = np.arange(rows.size)

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process (a worker's block of a plan) steps its rows; ``make`` (often a closure)
        stays here, so the copy is not cut again (``for_rows``)."""
        return {**self.__dict__, "_make": None}

    def for_rows(self, rows) -> "FamilyStep":
        """The same method on the rows ``rows`` (a slice or int array) of the family only."""
        return FamilyStep(self.family[rows], self._make)

    @property
    def compiled_max_batch(self) -> int:
        """Every row's map runs compiled where it can (one trajectory after the other, so a block of the
        rows is stepped as the whole selection would be); setting it changes nothing."""
        return _ALWAYS

    @compiled_max_batch.setter
    def compiled_max_batch(self, value: int) -> None:
        pass

    def start(self, window0: np.ndarray, limit: np.ndarray | None) -> None:
        window0 = np.asarray(window0, dtype=np.float64)
        limit = np.broadcast_to(np.asarray(limit, dtype=np.float64), (window0.shape[0],))
        if window0.shape[0] != len(self.family):
            from ..errors import VPIntegratorError

            raise VPIntegratorError(f"{self.name}: {window0.shape[0]} rows to roll out but the parameters of "
                                    f"{len(self.family)} trajectories; give one parameter set per trajectory")
        for m, (_, rows) in zip(self._maps, self._groups):
            m.start(window0[rows], limit[rows])

    def generate(self, n: int) -> np.ndarray:
        out = np.empty((len(self.family), n, self.dim))
        for m, (_, rows) in zip(self._maps, self._groups):
            out[rows] = m.generate(n)
        return out

    def reset(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        for g, m in enumerate(self._maps):
            mine = rows[self._row_group[rows] == g]
            if mine.size:
                m.reset(self._pos[mine])

    def log_abs_det_jacobian(self, windows: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """``log|det J|`` at windows (n, seq_len, dim), window ``j`` of row ``rows[j]`` (required: each row's
        map has its own parameters)."""
        if rows is None:
            from ..errors import VPIntegratorError

            raise VPIntegratorError(f"{self.name}: the volume of a parametric rollout needs each window's row")
        windows = np.asarray(windows, dtype=np.float64)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(windows.shape[0], np.nan)
        groups = self._row_group[rows]
        for g, m in enumerate(self._maps):
            sel = groups == g
            if sel.any():
                out[sel] = m.log_abs_det_jacobian(windows[sel])
        return out

    def describe(self) -> dict[str, Any]:
        info = dict(self._maps[0].describe())
        runners = sorted({str(m.describe().get("runner")) for m in self._maps if "runner" in m.describe()})
        if runners:
            info["runner"] = "+".join(runners)
        info["parameter_sets"] = len(self._maps)
        return info


def step_for(system, make: Callable[[Any], StepMap]) -> StepMap:
    """``make(system)``, or for a ``SystemFamily`` a ``FamilyStep`` of one ``make`` per distinct
    system."""
    if isinstance(system, SystemFamily):
        return FamilyStep(system, make)
    return make(system)


def for_rows(step_map: StepMap, rows) -> StepMap:
    """``step_map`` for the rows ``rows`` of a run: a ``FamilyStep`` restricted to them, any other
    step map itself (it steps whatever rows it is given alike)."""
    return step_map.for_rows(rows) if isinstance(step_map, FamilyStep) else step_map


def family_initial_window(system, y0: np.ndarray, dt: float, seq_len: int, method: str) -> np.ndarray:
    """[`initial_window`][vpintegrator.rollout.engine.initial_window] row by row with each row's own system."""
    from .engine import initial_window

    if not isinstance(system, SystemFamily):
        return initial_window(system, y0, dt, seq_len, method=method)
    y0 = np.atleast_2d(np.asarray(y0, dtype=np.float64))
    out = np.empty((y0.shape[0], seq_len, y0.shape[1]))
    for s, rows in system.groups():
        out[rows] = initial_window(s, y0[rows], dt, seq_len, method=method)
    return out


def solve_flow_rows(system, y0: np.ndarray, t: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """[`vpintegrator.data.solve_flow`][vpintegrator.data.flow.solve_flow] of ``y0`` (n, dim), row ``i`` with its own system for a
    ``SystemFamily``; shape (n, len(t), dim)."""
    from ..data import solve_flow

    if not isinstance(system, SystemFamily):
        return solve_flow(system, y0, t, rtol=rtol, atol=atol)
    y0 = np.asarray(y0, dtype=np.float64)
    out = np.empty((y0.shape[0], len(t), y0.shape[1]))
    for s, rows in system.groups():
        out[rows] = solve_flow(s, y0[rows], t, rtol=rtol, atol=atol)
    return out


def base_system(system):
    """The system of a plain run, the first row's of a ``SystemFamily`` (e.g. for a batch-1 timing)."""
    if isinstance(system, SystemFamily):
        return system.systems[0] if len(system) else system.base
    return system


def is_parametric(data: Path) -> bool:
    """Whether the data file holds per-trajectory parameters (``/params``; one row is read)."""
    from ..data import read_trajectories

    return read_trajectories(data, traj=[0], steps=[0]).params is not None


def run_family(ref_file: Any, meta: Mapping[str, Any], base: Any, n_new: int, seed: int | None, data: Path) -> SystemFamily:
    """The ``vpintegrator.systems.family.SystemFamily`` of a parametric run: the selected trajectories'
    systems, then the held-out conditions' (new parameters from the file's ``parameter_dists``, drawn with
    the held-out seed)."""
    import json

    from ..systems.family import systems_from_table

    systems = list(ref_file.systems())
    if n_new:
        from ..data.param_dists import draw_parameters

        dists = meta.get("parameter_dists")
        if not isinstance(dists, str) or not dists:
            raise VPIntegratorError(f"heldout: {data} has per-trajectory parameters but no 'parameter_dists' attribute "
                                    "(not written by vp-gen from a [parameters] spec), so no new ones can be drawn; "
                                    "give traj instead", key="heldout")
        assert seed is not None  # (the plan draws the held-out seed whenever n_new)
        fix = "regenerate the file with vp-gen, or give traj instead of heldout"
        try:
            table_of = json.loads(dists)
        except ValueError as err:
            raise VPIntegratorError(f"heldout: {data}: its 'parameter_dists' attribute is not JSON ({err}); {fix}",
                                    key="heldout") from None
        try:  # (its own message says which entry disagrees with the system, and how)
            cols, table = draw_parameters(base, table_of, n_new, int(seed), f"heldout: {data}: parameter_dists")
        except VPIntegratorError as err:
            raise VPIntegratorError(f"{err}; '/params' has {list(ref_file.param_names)}: {fix}", key="heldout") from None
        if tuple(cols) != tuple(ref_file.param_names):
            raise VPIntegratorError(f"heldout: {data}: its parameter_dists draw columns {list(cols)} but '/params' has "
                                    f"{list(ref_file.param_names)}; {fix}", key="heldout")
        systems += systems_from_table(base, cols, table)
    return SystemFamily(systems, ref_file.param_names, base)
