"""Families of systems: one parameter set per trajectory.

A data set may hold trajectories of one system *class* whose parameters differ from trajectory to
trajectory (``vp-gen`` with a ``[parameters]`` spec section). The parameters are then a float64 table
``params`` of shape ``(n_traj, p)`` whose columns are named by ``param_columns``:

- a scalar parameter is one column under its own name (``k1``);
- a vector parameter is one column per component, named ``name[i]`` with ``i`` 0-based
  (the rigid body's ``inertia`` is ``inertia[0]``, ``inertia[1]``, ``inertia[2]``: I1, I2, I3).

A table need not name every parameter: the columns it has override a *base* system's (the file's
``param_<name>`` attributes), the others keep the base's values. ``system_with`` builds trajectory
``i``'s system from the base and row ``i``; ``SystemFamily`` holds one system per row and evaluates
the vector field and the invariants of a batch row by row, each with its own parameters.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterator, Sequence

import numpy as np

from ..arrays import array_namespace
from ..errors import VPIntegratorError
from .base import System

__all__ = ["SystemFamily", "param_columns", "param_row", "system_with", "systems_from_table"]

_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")


def _numeric(value: Any) -> bool:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return arr.ndim <= 1


def param_columns(system: System, fields: Sequence[str] | None = None) -> list[str]:
    """Column names of ``system``'s numeric parameters (its dataclass fields, not derived ones): ``name``
    for a scalar, ``name[i]`` (0-based) for each component of a vector. ``fields``: only these parameters
    (in this order)."""
    names = [f.name for f in dataclasses.fields(system)] if fields is None else list(fields)  # type: ignore[arg-type]
    out: list[str] = []
    for name in names:
        value = getattr(system, name)
        if not _numeric(value):
            raise VPIntegratorError(
                f"system {system.name!r}: parameter {name!r} is not a number or a vector of numbers ({value!r}); "
                "only numeric parameters can vary per trajectory"
            )
        arr = np.asarray(value, dtype=np.float64)
        out.extend([name] if arr.ndim == 0 else [f"{name}[{i}]" for i in range(arr.size)])
    return out


def param_row(system: System, columns: Sequence[str]) -> np.ndarray:
    """The values of ``columns`` (``param_columns`` names) of ``system``; shape (p,)."""
    out = np.empty(len(columns))
    for j, col in enumerate(columns):
        name, index = _split(system, col)
        value = np.asarray(getattr(system, name), dtype=np.float64)
        out[j] = value if index is None else value[index]
    return out


def _split(system: System, column: str) -> tuple[str, int | None]:
    m = _COLUMN.match(str(column))
    fields = {f.name: getattr(system, f.name) for f in dataclasses.fields(system)}  # type: ignore[arg-type]
    if m is None or m.group(1) not in fields:
        raise VPIntegratorError(
            f"system {system.name!r} has no parameter column {column!r}; valid columns: "
            f"{', '.join(param_columns(system))}"
        )
    name, index = m.group(1), m.group(2)
    size = np.asarray(fields[name]).size if _numeric(fields[name]) else -1
    shape = np.asarray(fields[name]).ndim if size >= 0 else -1
    if (index is None) != (shape == 0):
        raise VPIntegratorError(
            f"system {system.name!r}: column {column!r} does not match parameter {name!r} (a "
            f"{'scalar: name it ' + repr(name) if shape == 0 else 'vector: name its components ' + name + '[0], ...'})"
        )
    if index is not None and int(index) >= size:
        raise VPIntegratorError(f"system {system.name!r}: column {column!r} is out of range ({name} has {size} components)")
    return name, None if index is None else int(index)


def system_with(base: System, columns: Sequence[str], row: Any) -> System:
    """``base`` with the parameters of ``columns`` set to ``row`` (shape (p,)); the others kept."""
    row = np.asarray(row, dtype=np.float64)
    changes: dict[str, Any] = {}
    for col, value in zip(columns, row):
        name, index = _split(base, col)
        if index is None:
            changes[name] = float(value)
        else:
            current = changes.get(name)
            if current is None:
                current = [float(v) for v in np.asarray(getattr(base, name), dtype=np.float64)]
            current[index] = float(value)
            changes[name] = current
    changes = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
    try:
        return dataclasses.replace(base, **changes)  # type: ignore[type-var]
    except VPIntegratorError as err:
        raise VPIntegratorError(f"parameters {dict(zip(columns, row.tolist()))}: {err}") from None


def systems_from_table(base: System, columns: Sequence[str], table: np.ndarray) -> list[System]:
    """One system per row of ``table`` (n, p): ``system_with`` of each row (equal rows share one
    object)."""
    table = np.asarray(table, dtype=np.float64)
    cache: dict[bytes, System] = {}
    out = []
    for row in table:
        key = row.tobytes()
        if key not in cache:
            cache[key] = system_with(base, columns, row)
        out.append(cache[key])
    return out


class SystemFamily:
    """One system per trajectory row: what a batch ``(n_traj, ..., dim)`` of a parametric data set is.

    It offers what the metrics and the rollout need of a system, evaluated row by row with each row's own
    parameters: ``name``, ``dim``, ``invariant_names``, ``invariants``, ``invariant``,
    ``vector_field``, ``divergence``. Index it (``family[i]``: trajectory ``i``'s system;
    ``family[rows]``: the family of those rows). Rows with equal parameters are evaluated together.

    Parameters
    ----------
    systems : sequence of System
        One per row, all of one class.
    columns : sequence of str
        The parameter columns that vary (``param_columns`` names); for the record.
    base : System, optional
        The system the rows' parameters override (default the first row's; needed for no rows).
    """

    def __init__(self, systems: Sequence[System], columns: Sequence[str] = (), base: System | None = None) -> None:
        systems = list(systems)
        if not systems and base is None:
            raise VPIntegratorError("SystemFamily needs at least one system (or a base system for an empty family)")
        first = systems[0] if systems else base
        assert first is not None  # (checked above)
        cls = type(first)
        if any(type(s) is not cls for s in systems):
            raise VPIntegratorError("SystemFamily: every row's system must be of one class")
        self.systems = systems
        self.columns: tuple[str, ...] = tuple(columns)
        self.name: str = first.name
        self.dim: int = first.dim
        self.invariant_names: tuple[str, ...] = tuple(first.invariant_names)
        self.torch_invariants: bool = bool(first.torch_invariants)
        self.base: System = first if base is None else base
        self._groups: list[tuple[System, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.systems)

    def __iter__(self) -> Iterator[System]:
        return iter(self.systems)

    def __getitem__(self, rows: Any) -> Any:
        if isinstance(rows, (int, np.integer)):
            return self.systems[int(rows)]
        idx = np.arange(len(self.systems))[rows]
        return SystemFamily([self.systems[int(i)] for i in np.atleast_1d(idx)], self.columns, self.base)

    def __repr__(self) -> str:
        return f"SystemFamily({self.name!r}, n={len(self)}, columns={list(self.columns)})"

    def groups(self) -> list[tuple[System, np.ndarray]]:
        """``(system, rows)`` for each distinct system, in order of first appearance."""
        if self._groups is None:
            self._groups = self._find_groups()
        return self._groups

    def _find_groups(self) -> list[tuple[System, np.ndarray]]:
        order: dict[Any, list[int]] = {}
        first: dict[Any, System] = {}
        for i, s in enumerate(self.systems):
            try:
                key: Any = (hash(s), s)  # equal parameters: one group
            except TypeError:  # a system with unhashable fields: by object
                key = id(s)
            order.setdefault(key, []).append(i)
            first.setdefault(key, s)
        return [(first[k], np.array(v, dtype=np.int64)) for k, v in order.items()]

    def _check_rows(self, y: Any) -> None:
        if getattr(y, "ndim", 0) < 2 or y.shape[0] != len(self.systems) or y.shape[-1] != self.dim:
            raise VPIntegratorError(
                f"SystemFamily of {len(self.systems)} trajectories of {self.name!r}: states must have shape "
                f"({len(self.systems)}, ..., {self.dim}) (one row per trajectory); got {tuple(getattr(y, 'shape', ()))}"
            )

    def _by_rows(self, fn, y: Any) -> Any:
        self._check_rows(y)
        xp = array_namespace(y)
        groups = self.groups()
        if len(groups) == 1:
            return fn(groups[0][0], y)
        parts = [(rows, fn(system, y[_rows(xp, rows, y)])) for system, rows in groups]
        return _assemble(xp, parts, len(self.systems), y)

    def vector_field(self, y: np.ndarray) -> np.ndarray:
        """``f_i(y_i)`` row by row; y (n_traj, ..., dim) -> (n_traj, ..., dim)."""
        return self._by_rows(lambda s, part: s.vector_field(part), y)

    def divergence(self, y: np.ndarray) -> np.ndarray:
        """y (n_traj, ..., dim) -> (n_traj, ...)."""
        return self._by_rows(lambda s, part: s.divergence(part), y)

    def invariant(self, name: str, y: Any) -> Any:
        """One invariant, row by row; y (n_traj, ..., dim) -> (n_traj, ...)."""
        return self._by_rows(lambda s, part: s.invariant(name, part), y)

    def invariants(self, y: Any) -> dict[str, Any]:
        """All invariants, row by row; y (n_traj, ..., dim) -> {name: (n_traj, ...)}."""
        return {name: self.invariant(name, y) for name in self.invariant_names}


def _rows(xp, rows: np.ndarray, like: Any):
    if xp is np:
        return rows
    return xp.as_tensor(rows, device=like.device)


def _assemble(xp, parts, n: int, like: Any):
    shape = (n, *tuple(parts[0][1].shape[1:]))
    if xp is np:
        out = np.empty(shape, dtype=np.result_type(*[p[1].dtype for p in parts]))
        for rows, values in parts:
            out[rows] = values
        return out
    out = xp.empty(shape, dtype=parts[0][1].dtype, device=like.device)
    for rows, values in parts:
        out[_rows(xp, rows, like)] = values
    return out
