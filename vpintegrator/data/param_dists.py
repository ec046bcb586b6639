"""Per-trajectory system parameters of a generation spec: the ``[parameters]`` section.

Each key names a parameter of the spec's system (a dataclass field; ``vpintegrator.systems.family.param_columns``)
and gives how it is drawn, per trajectory::

    [parameters]
    inertia = { dist = "uniform", low = 0.5, high = 3.0 }     # each of I1, I2, I3 ~ U[0.5, 3], independently
    k = { dist = "log_uniform", low = 0.1, high = 10.0 }
    k1 = { dist = "normal", mean = 1.5, std = 0.1 }
    m = { dist = "list", values = [[2.0, 1.0], [1.0, 1.0]] }  # one entry of the list, at random
    k2 = { dist = "grid", values = [0.2, 0.3, 0.4] }          # the grid's points in turn
    # { dist = "fixed", value = ... }: the same for all (still a column of /params)

For a vector parameter the bounds (``low``, ``high``, ``mean``, ``std``, ``value``) are a number (the
same for every component) or one per component, and each component is drawn independently; the entries
of ``list`` and ``grid`` are whole values (a number, or a vector of the parameter's length). ``grid``
parameters form one Cartesian product (the first listed varies slowest) and trajectory ``i`` takes its
point ``i mod (number of points)``. Parameters the section does not name keep the ``[system]`` value.

The draws come from ``numpy.random.default_rng(SeedSequence([seed, 2]))`` (``seed``: the spec's
``integration.seed``), a stream other than the initial conditions' ``default_rng(seed)``: adding a
``[parameters]`` section changes no initial condition.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..errors import VPIntegratorError
from ..resources import check_size

__all__ = ["DISTRIBUTIONS", "check_parameters", "draw_parameters", "parameter_rng"]

#: distribution name -> its keys (besides ``dist``)
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "log_uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "list": ("values",),
    "grid": ("values",),
}
#: the SeedSequence stream of the parameters (the initial conditions use default_rng(seed) itself)
PARAM_STREAM = 2


def parameter_rng(seed: int) -> np.random.Generator:
    """The generator of the parameters of a data set seeded ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), PARAM_STREAM]))


def _size(system, name: str) -> int:
    from ..systems.family import param_columns

    return len(param_columns(system, [name]))


def _vector(value: Any, k: int, what: str) -> list[float]:
    """A number or k numbers -> k finite floats."""
    arr = np.asarray(value, dtype=object)
    if arr.ndim == 0:
        arr = np.full(k, value, dtype=object)
    if arr.ndim != 1 or arr.size != k:
        raise VPIntegratorError(f"{what} must be a number or {k} numbers; got {value!r}")
    out = []
    for v in arr:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise VPIntegratorError(f"{what} must be finite numbers; got {value!r}")
        out.append(float(v))
    return out


def check_parameters(system, table: Mapping[str, Any], where: str = "parameters") -> dict[str, dict[str, Any]]:
    """The ``[parameters]`` table checked against ``system`` and normalised (every bound a list of one
    float per component; ``list``/``grid`` entries lists of such lists), fit for JSON. One-line errors
    naming ``where`` and the key."""
    import dataclasses

    if not isinstance(table, Mapping):
        raise VPIntegratorError(f"{where}: must be a table of parameter = {{ dist = ..., ... }}; got {table!r}")
    fields = [f.name for f in dataclasses.fields(system)]
    out: dict[str, dict[str, Any]] = {}
    for name, entry in table.items():
        key = f"{where}.{name}"
        if name not in fields:
            raise VPIntegratorError(f"{key}: system {system.name!r} has no parameter {name!r}; valid parameters: "
                                    f"{', '.join(fields) or '(none)'}")
        if not isinstance(entry, Mapping) or "dist" not in entry:
            raise VPIntegratorError(f"{key}: give a table {{ dist = ..., ... }} with dist one of "
                                    f"{', '.join(DISTRIBUTIONS)}; got {entry!r}")
        dist = entry["dist"]
        if dist not in DISTRIBUTIONS:
            raise VPIntegratorError(f"{key}: unknown dist {dist!r}; valid: {', '.join(DISTRIBUTIONS)}")
        keys = DISTRIBUTIONS[dist]
        extra = sorted(set(entry) - {"dist", *keys})
        missing = [k for k in keys if k not in entry]
        if extra or missing:
            raise VPIntegratorError(f"{key}: dist {dist!r} takes the keys {', '.join(keys)}"
                                    + (f"; unknown {', '.join(extra)}" if extra else f"; missing {', '.join(missing)}"))
        k = _size(system, name)
        norm: dict[str, Any] = {"dist": dist}
        if dist in ("list", "grid"):
            values = entry["values"]
            if not isinstance(values, (list, tuple)) or not values:
                raise VPIntegratorError(f"{key}.values must be a non-empty list; got {values!r}")
            norm["values"] = [_vector(v, k, f"{key}.values entry") for v in values]
            if k > 1 and any(np.ndim(v) == 0 for v in values):
                raise VPIntegratorError(f"{key}.values: each entry is a whole value of {name!r} ({k} numbers); got {values!r}")
        else:
            for arg in keys:
                norm[arg] = _vector(entry[arg], k, f"{key}.{arg}")
        if dist in ("uniform", "log_uniform") and not all(a < b for a, b in zip(norm["low"], norm["high"])):
            raise VPIntegratorError(f"{key}: low must be < high; got low = {entry['low']!r}, high = {entry['high']!r}")
        if dist == "log_uniform" and not all(a > 0 for a in norm["low"]):
            raise VPIntegratorError(f"{key}: log_uniform needs low > 0; got {entry['low']!r}")
        if dist == "normal" and not all(s > 0 for s in norm["std"]):
            raise VPIntegratorError(f"{key}: std must be > 0; got {entry['std']!r}")
        out[name] = norm
    return out


def draw_parameters(system, table: Mapping[str, Any], n: int, seed: int,
                    where: str = "parameters") -> tuple[tuple[str, ...], np.ndarray]:
    """Draw ``n`` parameter sets of ``system`` as the ``[parameters]`` ``table`` says.

    Returns ``(columns, values)``: the column names (``vpintegrator.systems.family.param_columns`` of the
    named parameters, in the table's order) and a float64 array (n, p). Every row is checked to make a
    valid system (one-line error naming the first row that does not)."""
    from ..systems.family import param_columns, system_with

    table = check_parameters(system, table, where)
    rng = parameter_rng(seed)
    columns: list[str] = []
    blocks: list[np.ndarray] = []
    grid_names = [name for name, e in table.items() if e["dist"] == "grid"]
    grid_sizes = [len(table[g]["values"]) for g in grid_names]  # the product is never built: point i by its digits
    check_size("n_traj", n * sum(len(param_columns(system, [name])) for name in table), 8,
               f"{where}: the drawn parameters")
    for name, e in table.items():
        cols = param_columns(system, [name])
        k = len(cols)
        dist = e["dist"]
        if dist == "fixed":
            block = np.tile(np.array(e["value"]), (n, 1))
        elif dist == "uniform":
            block = rng.uniform(e["low"], e["high"], size=(n, k))
        elif dist == "log_uniform":
            block = np.exp(rng.uniform(np.log(e["low"]), np.log(e["high"]), size=(n, k)))
        elif dist == "normal":
            block = rng.normal(e["mean"], e["std"], size=(n, k))
        elif dist == "list":
            block = np.array(e["values"])[rng.integers(len(e["values"]), size=n)]
        else:  # grid: point i mod G of the product
            j = grid_names.index(name)
            period = math.prod(grid_sizes[j + 1:])  # the grids listed after this one vary faster
            block = np.array(e["values"])[(np.arange(n, dtype=np.int64) // period if period <= n else
                                           np.zeros(n, dtype=np.int64)) % grid_sizes[j]]
        columns.extend(cols)
        blocks.append(np.asarray(block, dtype=np.float64).reshape(n, k))
    values = np.concatenate(blocks, axis=1) if blocks else np.empty((n, 0))
    for i, row in enumerate(values):
        try:
            system_with(system, columns, row)
        except VPIntegratorError as err:
            raise VPIntegratorError(f"{where}: trajectory {i}'s draw is not a valid system: {err}; narrow the "
                                    "distribution") from None
    return tuple(columns), values
