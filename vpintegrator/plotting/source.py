"""What the figures draw, from a rollout file or from memory.

Every rollout figure takes a *source*: a [`RolloutResult`][vpintegrator.data.rollouts.RolloutResult], the path of a
rollout file (``vp-rollout`` output), or trajectories in memory — one
[`Trajectories`][vpintegrator.data.trajectories.Trajectories] or a dict ``{label: Trajectories}``, e.g. straight
from [`vpintegrator.integrate`][vpintegrator.data.integration.integrate] or [`vpintegrator.generate`][vpintegrator.data.generation.generate] — optionally with a ``reference``
[`Trajectories`][vpintegrator.data.trajectories.Trajectories]. [`plot_data`][vpintegrator.plotting.plot_data] turns any of them into one
[`RolloutResult`][vpintegrator.data.rollouts.RolloutResult]: states,
per-step metrics (invariants from ``traj.system``, relative errors against the reference when there is one)
and the trajectories' indices in the data file, which is what ``traj`` selects.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from ..data.rollouts import MethodMetrics, RolloutResult, is_paper_set
from ..data.trajectories import Trajectories
from ..errors import VPIntegratorError

__all__ = ["MAX_CURVES", "PlotSource", "TrajSelection", "plot_data", "check_max_points", "select", "methods_to_draw",
           "is_paper_set", "traj_names", "describe"]

#: what the ``plot_*`` functions draw: a rollout result, the path of a rollout (or trajectory) file, trajectories
#: in memory or a dict of them (label -> trajectories)
PlotSource = Union[RolloutResult, str, "os.PathLike[str]", Trajectories, Mapping[str, Trajectories]]
#: the trajectories to draw: an index in the data file, a list of them, or None (all, or a spread of many)
TrajSelection = Union[int, Sequence[int], None]

#: more trajectories than this are drawn as a median and a 10-90 % band instead of one curve each
MAX_CURVES = 5


# --------------------------------------------------------------------------- building


def check_max_points(max_points: Any) -> int | None:
    """``max_points`` as an int >= 2 (or None: every point), else a one-line error naming the key."""
    if max_points is None:
        return None
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)) or max_points < 2:
        raise VPIntegratorError(
            f"max_points must be a whole number >= 2 (time points per curve); got {max_points!r}", key="max_points"
        )
    return int(max_points)


def plot_data(source: PlotSource, reference: Trajectories | None = None, max_points: int | None = None) -> RolloutResult:
    """The [`RolloutResult`][vpintegrator.data.rollouts.RolloutResult] to draw of any accepted source (see the
    module docstring): a result itself (thinned to ``max_points``), a file read, or trajectories in memory."""
    max_points = check_max_points(max_points)
    if isinstance(source, RolloutResult):
        if reference is not None:
            raise VPIntegratorError("reference= is for trajectories in memory; " + (
                "a rollout file has its own reference" if source.path is not None
                else "this source already has its reference"))
        return _thin(source, max_points)
    if isinstance(source, (str, os.PathLike)):
        from ..data.rollouts import read_rollout

        return _from_rollout(read_rollout(Path(source), max_points=max_points), reference, max_points)
    if isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        from ..data.rollouts import read_rollout  # the shards of one rollout (vp-rollout --shard), read as one

        return _from_rollout(read_rollout([Path(p) for p in source], max_points=max_points), reference, max_points)
    if _is_rollout_result(source):
        return _from_rollout(source, reference, max_points)
    if isinstance(source, Trajectories):
        label = str(source.meta.get("label") or source.meta.get("method") or "trajectories")
        return _from_memory({label: source}, reference, max_points)
    if isinstance(source, Mapping) and source and all(isinstance(v, Trajectories) for v in source.values()):
        return _from_memory(dict(source), reference, max_points)
    if isinstance(source, (Mapping, list, tuple)) and not source:
        raise VPIntegratorError(f"plot source is an empty {type(source).__name__}: nothing to draw; give a dict "
                                "{label: Trajectories} with at least one entry, or rollout files")
    if isinstance(source, Mapping):
        label, value = next((k, v) for k, v in source.items() if not isinstance(v, Trajectories))
        raise VPIntegratorError(f"plot source: the entry {label!r} is a {type(value).__name__}, not a Trajectories; a "
                                "dict source maps labels to Trajectories")
    raise VPIntegratorError(
        "plot source must be a RolloutResult, the path of a rollout file, a Trajectories or a dict "
        f"{{label: Trajectories}}; got {type(source).__name__}"
    )


def _is_rollout_result(obj) -> bool:
    return all(hasattr(obj, a) for a in ("reference", "methods", "metrics", "traj_index", "meta", "t"))


def _from_rollout(res, reference, max_points) -> RolloutResult:
    """A rollout-like object (the attributes of a ``RolloutResult``) as a ``RolloutResult``."""
    if reference is not None:
        raise VPIntegratorError("reference= is for trajectories in memory; a rollout file has its own reference")
    if isinstance(res, RolloutResult):
        return _thin(res, max_points)
    data = RolloutResult(
        path=res.path, meta=dict(res.meta), t=np.asarray(res.t),
        traj_index=np.asarray(res.traj_index, dtype=np.int64), reference=res.reference,
        methods=dict(res.methods), metrics=dict(res.metrics), table=list(getattr(res, "table", [])),
    )
    return _thin(data, max_points)


def _kind_of(traj: Trajectories) -> str:
    kind = traj.meta.get("kind")
    if kind:
        return str(kind)
    method = str(traj.meta.get("method", ""))
    if method in ("dop853", "exact_flow"):
        return "flow"
    from .style import INTEGRATOR_COLORS

    return "integrator" if method in INTEGRATOR_COLORS else "model"


def _from_memory(methods: dict[str, Any], reference, max_points) -> RolloutResult:
    if reference is not None and not isinstance(reference, Trajectories):
        raise VPIntegratorError(f"reference must be a Trajectories; got {type(reference).__name__}")
    if "reference" in methods:
        if reference is not None:
            raise VPIntegratorError("a method is labelled 'reference' and reference= is given too; give one")
        reference = methods.pop("reference")
        if not methods:
            raise VPIntegratorError("nothing to plot but the reference; give at least one other Trajectories")
    first = reference if reference is not None else next(iter(methods.values()))
    for label, traj in methods.items():
        if traj.y.shape != first.y.shape:
            raise VPIntegratorError(
                f"trajectories {label!r} have shape {traj.y.shape} but "
                f"{'the reference' if reference is not None else 'the first'} has {first.y.shape}; "
                "plot trajectories of the same (n_traj, n_states, dim) on the same times"
            )
        if not np.allclose(traj.t, first.t, rtol=1e-9, atol=1e-12):
            raise VPIntegratorError(f"trajectories {label!r} are on other times than the others; use the same t")
    system = _system_or_none(first)
    names = tuple(system.invariant_names) if system is not None else ()
    metrics = {}
    from ..data.trajectories import state_periods

    period = state_periods(system, first.dim, first.meta)  # periodic components: errors wrapped (metrics)
    for label, traj in [("reference", reference), *methods.items()]:
        if traj is None:
            continue
        metrics[label] = MethodMetrics(invariants=_invariants(system, traj.y))
        if label != "reference" and reference is not None:
            from ..metrics import relative_error

            metrics[label].rel_error = relative_error(traj.y, reference.y, period)
    meta = dict(first.meta)
    paper = is_paper_set(meta)
    meta["invariant_names"] = names
    data = RolloutResult(
        path=None,
        meta=meta,
        t=np.asarray(first.t),
        traj_index=np.arange(first.n_traj, dtype=np.int64),
        reference=reference,
        methods=methods,
        metrics=metrics,
        kinds={label: _kind_of(traj) for label, traj in methods.items()},
        paper_set=paper,
        name="trajectories",
    )
    return _thin(data, max_points)


def _system_or_none(traj: Trajectories):
    if "system" not in traj.meta:
        return None
    return traj.system


def _invariants(system, y) -> dict[str, Any]:
    if system is None:
        return {}
    with np.errstate(all="ignore"):
        return {k: np.asarray(v, dtype=np.float64) for k, v in system.invariants(np.asarray(y, np.float64)).items()}


def _thin(data: RolloutResult, max_points: int | None) -> RolloutResult:
    """Every k-th time point so that at most about ``max_points`` remain (states and metrics alike)."""
    n = data.t.shape[0]
    if max_points is None or n <= max_points:
        return data
    stride = -(-n // max_points)
    cols = slice(0, None, stride)

    def thin_traj(tr):
        return None if tr is None else tr.select(steps=cols)

    def thin_metrics(m):
        ms = slice(None)
        if m.map_t is not None and m.map_t.shape[0] > max_points:
            ms = slice(0, None, -(-m.map_t.shape[0] // max_points))
        return MethodMetrics(
            invariants={k: v[:, cols] for k, v in m.invariants.items()},
            rel_error=None if m.rel_error is None else m.rel_error[:, cols],
            map_t=None if m.map_t is None else m.map_t[ms],
            log_det_J=None if m.log_det_J is None else m.log_det_J[:, ms],
            cum_log_det_J=None if m.cum_log_det_J is None else m.cum_log_det_J[:, ms],
        )

    return dataclasses.replace(
        data, t=data.t[cols], reference=thin_traj(data.reference),
        methods={k: thin_traj(v) for k, v in data.methods.items()},
        metrics={k: thin_metrics(v) for k, v in data.metrics.items()}, paper_set=data.paper_set,
    )


def select(data: RolloutResult, traj: Any) -> tuple[RolloutResult, bool]:
    """The trajectories with data-file indices ``traj`` (None: all), and whether ``traj`` was given.

    An index that is not in the source is a one-line error naming the key ``traj`` and listing the
    available indices.
    """
    if traj is None:
        return data, False
    wanted = [traj] if np.ndim(traj) == 0 else list(np.asarray(traj, dtype=object).ravel())
    pos = {int(k): i for i, k in enumerate(data.traj_index)}
    rows = []
    for k in wanted:
        ok = isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))
        if not ok or int(k) not in pos:
            raise VPIntegratorError(
                f"traj {k} is not in {data.name}; available trajectories (indices in the data file): "
                f"{_available(data.traj_index)}", key="traj",
            )
        if pos[int(k)] not in rows:
            rows.append(pos[int(k)])
    if not rows:
        raise VPIntegratorError(f"traj selects no trajectory; available: {_available(data.traj_index)}", key="traj")

    def pick_traj(tr):
        return None if tr is None else tr.select(traj=rows)

    def pick_metrics(m):
        def r(a):
            return None if a is None else a[rows]

        return MethodMetrics({k: v[rows] for k, v in m.invariants.items()}, r(m.rel_error), m.map_t,
                             r(m.log_det_J), r(m.cum_log_det_J))

    return dataclasses.replace(
        data, traj_index=data.traj_index[rows], reference=pick_traj(data.reference),
        methods={k: pick_traj(v) for k, v in data.methods.items()},
        metrics={k: pick_metrics(v) for k, v in data.metrics.items()}, paper_set=data.paper,
    ), True


def _available(index: np.ndarray, most: int = 20) -> str:
    idx = [str(int(i)) for i in index]
    if len(idx) <= most:
        return ", ".join(idx)
    return ", ".join(idx[: most // 2]) + f", ... ({len(idx)} in all), " + ", ".join(idx[-3:])


def methods_to_draw(data: RolloutResult, methods: Iterable[str] | None) -> list[str]:
    """The labels to draw (default all, in source order); an unknown label is a one-line error."""
    if methods is None:
        return list(data.methods)
    methods = [methods] if isinstance(methods, str) else list(methods)
    for label in methods:
        if label not in data.methods:
            raise VPIntegratorError(
                f"{data.name}: no method {label!r}; methods: {', '.join(data.methods)}", key="methods"
            )
    return list(dict.fromkeys(methods))


# --------------------------------------------------------------------------- the paper's set and titles


def traj_names(data: RolloutResult) -> list[str]:
    """The name of every trajectory: the paper's ("trajectory 1") or its index in the data file."""
    from ..systems import PAPER_TRAJECTORY_INDEX

    paper = {row: number for number, row in PAPER_TRAJECTORY_INDEX.items()} if data.paper else {}
    return [f"trajectory {paper[int(k)]}" if int(k) in paper else (f"data row {int(k)}" if data.paper else f"trajectory {int(k)}")
            for k in data.traj_index]


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def describe(data: RolloutResult, banded: bool) -> str:
    """What a figure of ``data`` shows, for its title: "median and 10–90 % band over 20 trajectories",
    "trajectories 1 and 4", "trajectory 100"."""
    n = data.n_traj
    if banded:
        return f"median and 10–90 % band over {n} trajectories"
    names = traj_names(data)
    if all(s.startswith("trajectory ") for s in names):
        nums = [s[len("trajectory "):] for s in names]
        return ("trajectory " if n == 1 else "trajectories ") + _join(nums)
    return _join(names)
