"""Initial-condition samplers: the paper's sphere set, random on a sphere, random in a box, around a state, a list,
the lattices' bump family.

Every sampler returns float64 points of shape ``(n, dim)``. Use
[`sample_initial_conditions`][vpintegrator.systems.sample_initial_conditions] with a sampler name; [`list_samplers`][vpintegrator.systems.list_samplers] names them.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..errors import VPIntegratorError, finite_float
from .base import System

#: Number of points per family in the paper set: v = 0.10, 0.11, ..., 6.28 (< 2 pi).
PAPER_SPHERE_FAMILY_SIZE = 619
#: Number of points in the paper set (two families).
PAPER_SPHERE_SIZE = 2 * PAPER_SPHERE_FAMILY_SIZE  # 1238
#: Indices into ``paper_sphere_points`` of the paper's validation trajectories:
#: trajectory 1 = (sin 1.1, 0, cos 1.1), trajectory 4 = (0, sin 1.1, cos 1.1).
PAPER_TRAJECTORY_INDEX: dict[int, int] = {1: 100, 4: PAPER_SPHERE_FAMILY_SIZE + 100}


def paper_sphere_points() -> np.ndarray:
    """The paper's 1238 rigid-body initial conditions on the unit sphere.

    ``{(sin v, 0, cos v)} + {(0, sin v, cos v)}`` for ``v = (10 + k) / 100 < 2 pi`` (k = 0..618), all of
    the first family first, then all of the second. ``PAPER_TRAJECTORY_INDEX`` maps the paper's
    trajectory numbers 1 and 4 (v = 1.1) to row indices 100 and 719.

    Returns
    -------
    ndarray, shape (1238, 3)
    """
    k = np.arange(1000)
    v = (10 + k) / 100  # integer arithmetic first: v = 1.1 is exactly 110 / 100
    v = v[v < 2 * math.pi]
    zero = np.zeros_like(v)
    first = np.stack([np.sin(v), zero, np.cos(v)], axis=-1)
    second = np.stack([zero, np.sin(v), np.cos(v)], axis=-1)
    return np.concatenate([first, second], axis=0)


def paper_trajectory_index(number: int) -> int:
    """Row of [`paper_sphere_points`][vpintegrator.systems.paper_sphere_points] holding the paper's "trajectory <number>" (1 or 4)."""
    if number not in PAPER_TRAJECTORY_INDEX:
        valid = ", ".join(map(str, PAPER_TRAJECTORY_INDEX))
        raise VPIntegratorError(f"paper trajectory number must be one of {valid}; got {number!r}")
    return PAPER_TRAJECTORY_INDEX[number]


# --- samplers: (dim, n, rng, system, **kw) -> (n, dim) ------------------------------------------------
def _paper_sphere(dim: int, n: int | None, rng, system: System | None) -> np.ndarray:
    if dim != 3:
        raise VPIntegratorError(
            f"sampler 'paper_sphere' is the rigid body's 3-D set; system has dim={dim}. "
            "Use sampler 'sphere' or 'box' instead"
        )
    points = paper_sphere_points()
    if n is None or n == PAPER_SPHERE_SIZE:
        return points
    if not 1 <= n <= PAPER_SPHERE_SIZE:
        raise VPIntegratorError(
            f"sampler 'paper_sphere' has {PAPER_SPHERE_SIZE} points; n must be in 1..{PAPER_SPHERE_SIZE} "
            f"or None; got n={n}"
        )
    # a smaller, evenly spread subset of both families (quick runs); deterministic
    idx = np.round(np.linspace(0, PAPER_SPHERE_SIZE - 1, n)).astype(int)
    return points[idx]


def _sphere(dim: int, n: int | None, rng, system: System | None, radius: float = 1.0, center=None) -> np.ndarray:
    n = _require_n("sphere", n)
    rng = _require_rng("sphere", rng)
    radius = _finite_float("sphere", "radius", radius)
    if radius <= 0:
        raise VPIntegratorError(f"sampler 'sphere' argument 'radius' must be > 0; got {radius}")
    g = rng.standard_normal((n, dim))
    points = radius * g / np.linalg.norm(g, axis=-1, keepdims=True)  # uniform on the sphere
    if center is not None:
        points = points + _per_dim("sphere", "center", center, dim)
    return points


def _box(dim: int, n: int | None, rng, system: System | None, low=-1.0, high=1.0) -> np.ndarray:
    n = _require_n("box", n)
    rng = _require_rng("box", rng)
    lo = _per_dim("box", "low", low, dim)
    hi = _per_dim("box", "high", high, dim)
    if np.any(hi <= lo):
        raise VPIntegratorError(f"sampler 'box' needs low < high in every coordinate; got low={low}, high={high}")
    return rng.uniform(lo, hi, size=(n, dim))


def _around(dim: int, n: int | None, rng, system: System | None, spread=None, center=None) -> np.ndarray:
    n = _require_n("around", n)
    rng = _require_rng("around", rng)
    if spread is None:
        raise VPIntegratorError("sampler 'around' needs 'spread' (the standard deviation of the draws, a number or "
                                f"{dim} numbers); none given")
    scale = _per_dim("around", "spread", spread, dim)
    if np.any(scale < 0):
        raise VPIntegratorError(f"sampler 'around' argument 'spread' must be >= 0; got {spread!r}")
    if center is None:
        center = getattr(system, "default_y0", None)
        if center is None:
            raise VPIntegratorError("sampler 'around' needs 'center' (a state of length "
                                    f"{dim}); none given and the system has no default_y0")
    return _per_dim("around", "center", center, dim) + scale * rng.standard_normal((n, dim))


def as_points(values: Any, dim: int, name: str, rows: str = "n", point: str = "point",
              context: str = "") -> np.ndarray:
    """``values`` as float64 points of shape (n, dim), one point (dim,) read as (1, dim).

    One-line errors name the argument (``name``) for values that are not numbers, have another shape or no
    rows (the expected shape ``(rows, dim)``, then ``context``), and name the first point that is not finite
    (``point`` and its row).
    """
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        shown = repr(values) if len(repr(values)) <= 80 else type(values).__name__
        raise VPIntegratorError(f"{name} must be numbers of shape ({rows}, {dim}); got {shown}") from None
    if arr.ndim == 1 and arr.shape[0] == dim:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != dim or arr.shape[0] == 0:
        raise VPIntegratorError(f"{name} must have shape ({rows}, {dim}){context}; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        i = int(np.argmax(~np.all(np.isfinite(arr), axis=1)))
        raise VPIntegratorError(f"{point} {i} is not finite: {arr[i].tolist()}; give finite numbers")
    return arr


def _list(dim: int, n: int | None, rng, system: System | None, points=None) -> np.ndarray:
    if points is None:
        default = getattr(system, "default_y0", None)
        if default is None:
            raise VPIntegratorError(
                "sampler 'list' needs 'points' (a list of initial conditions, shape (n, dim)); none given "
                "and the system has no default_y0"
            )
        points = [default]
    arr = as_points(points, dim, "sampler 'list' argument 'points'", point="sampler 'list' point",
                    context=" with n >= 1")
    if n is not None and n != arr.shape[0]:
        raise VPIntegratorError(
            f"sampler 'list' got {arr.shape[0]} points but n={n}; drop n or make it match"
        )
    return arr


def _bump(dim: int, n: int | None, rng, system: System | None, mu=None) -> np.ndarray:
    from .lattice import Lattice, bump

    if not isinstance(system, Lattice):
        raise VPIntegratorError(
            f"sampler 'bump' is the lattices' bump family (toda, fpu_beta); system {getattr(system, 'name', system)!r} "
            "is not a lattice: use 'box', 'sphere' or 'list'")
    if mu is None:
        raise VPIntegratorError("sampler 'bump' needs 'mu' (the bump parameter of each trajectory, e.g. "
                                "mu = [0.30, 0.33, 0.36]); none given")
    values = np.atleast_1d(np.asarray(mu, dtype=object))
    if values.ndim != 1 or values.size == 0:
        raise VPIntegratorError(f"sampler 'bump' argument 'mu' must be a number or a list of numbers; got {mu!r}")
    mus = [_finite_float("bump", "mu", v) for v in values]
    bad = [v for v in mus if v <= 0]
    if bad:
        raise VPIntegratorError(f"sampler 'bump' argument 'mu' must be > 0 (the bump's width is 0.2 / mu); got {bad[0]}")
    if n is not None and n != len(mus):
        raise VPIntegratorError(f"sampler 'bump' got {len(mus)} values of mu but n={n}; drop n or make it match")
    sites = dim // 2
    return np.stack([np.concatenate([bump(m, sites), np.zeros(sites)]) for m in mus])


_SAMPLERS: dict[str, Callable[..., np.ndarray]] = {
    "paper_sphere": _paper_sphere,
    "bump": _bump,
    "sphere": _sphere,
    "box": _box,
    "around": _around,
    "list": _list,
}


def list_samplers() -> list[str]:
    """Names accepted by [`sample_initial_conditions`][vpintegrator.systems.sample_initial_conditions]."""
    return sorted(_SAMPLERS)


def sample_initial_conditions(
    system: System | str,
    sampler: str,
    n: int | None = None,
    rng: np.random.Generator | int | None = None,
    **kw: Any,
) -> np.ndarray:
    """Initial conditions for ``system``.

    Parameters
    ----------
    system : System or str
        The system (or its registry name); gives ``dim``.
    sampler : str
        ``"paper_sphere"``: the paper's 1238 unit-sphere points (rigid body; n None or 1238 gives all,
        a smaller n an evenly spread deterministic subset). ``"sphere"``: uniform on the sphere of
        ``radius`` (default 1) around ``center`` (default 0), any dim. ``"box"``: uniform in
        ``[low, high]`` per coordinate (scalars or length-dim lists; default [-1, 1]). ``"around"``: normal
        draws ``center + spread * N(0, 1)`` per coordinate (``spread`` required; ``center`` default the
        system's ``default_y0``, e.g. dysts' initial condition). ``"list"``:
        explicit ``points`` of shape (n, dim) (default: the system's ``default_y0``). ``"bump"`` (the
        lattices ``toda`` and ``fpu_beta``): one trajectory per value of ``mu`` (a number or a list),
        GeometricProblems' bump ``q0 = h(20 mu |x + mu / 2|)`` on the N points of [-0.5, 0.5] and ``p0 = 0``
        (``vpintegrator.systems.lattice.bump``).
    n : int, optional
        Number of points (required for "sphere", "box" and "around").
    rng : numpy.random.Generator or int, optional
        Randomness for "sphere", "box" and "around" (an int is used as a seed).
    **kw
        Sampler arguments as above.

    Returns
    -------
    ndarray, shape (n, dim), float64
    """
    from .registry import get_system

    if isinstance(system, str):
        system = get_system(system)
    if sampler not in _SAMPLERS:
        raise VPIntegratorError(
            f"unknown initial-condition sampler {sampler!r}; valid samplers: {', '.join(list_samplers())}"
        )
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise VPIntegratorError(f"n (number of initial conditions) must be an int >= 1; got {n!r}")
        n = int(n)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        rng = np.random.default_rng(int(rng))
    try:
        return _SAMPLERS[sampler](system.dim, n, rng, system, **kw)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        import inspect

        accepted = [p for p in inspect.signature(_SAMPLERS[sampler]).parameters][4:]
        given = ", ".join(sorted(kw))
        raise VPIntegratorError(
            f"sampler {sampler!r} got unknown arguments ({given}); it accepts: {', '.join(accepted) or '(none)'}"
        ) from None


# --- helpers -------------------------------------------------------------------------------------------
def _require_n(sampler: str, n: int | None) -> int:
    if n is None:
        raise VPIntegratorError(f"sampler {sampler!r} needs n (the number of initial conditions); got None")
    return n


def _require_rng(sampler: str, rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise VPIntegratorError(
            f"sampler {sampler!r} is random and needs rng (a numpy.random.Generator or an int seed); "
            f"got {rng!r}"
        )
    return rng


def _finite_float(sampler: str, name: str, value) -> float:
    return finite_float(value, f"sampler {sampler!r} argument {name!r}")


def _per_dim(sampler: str, name: str, value, dim: int) -> np.ndarray:
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (dim,)).copy()
    except (TypeError, ValueError):
        raise VPIntegratorError(
            f"sampler {sampler!r} argument {name!r} must be a number or {dim} numbers; got {value!r}"
        ) from None
    if not np.all(np.isfinite(arr)):
        raise VPIntegratorError(f"sampler {sampler!r} argument {name!r} must be finite; got {value!r}")
    return arr
