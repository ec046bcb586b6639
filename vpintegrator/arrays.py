"""NumPy or torch: the helpers that let one formula run on either (``xp = array_namespace(y)``; NumPy and
torch share most function names, the few whose spelling differs are here), and the one dtype rule.

Never imports torch itself: a tensor cannot exist without it, and ``resolve_dtype`` imports it when called.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .errors import VPIntegratorError

__all__ = ["array_namespace", "to_numpy", "as_like", "copy_array", "first_true", "row_max", "squared_norm",
           "relative_error", "relative_loss", "relative_drift", "wrap", "DTYPES", "resolve_dtype"]

#: the floating dtypes the package trains and runs models in, by name
DTYPES = ("float32", "float64")


def array_namespace(y: Any) -> Any:
    """The module whose functions evaluate formulas on ``y``: ``torch`` for a torch tensor, else ``numpy``.

    Never imports torch (a tensor cannot exist without it).
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(y, torch.Tensor):
        return torch
    return np


def to_numpy(a: Any) -> np.ndarray:
    """A NumPy array of ``a`` (a torch tensor is copied to the host)."""
    return np.asarray(a) if array_namespace(a) is np else a.detach().cpu().numpy()


def as_like(a: np.ndarray, like: Any) -> Any:  # NumPy ``a`` in like's namespace, on its device
    return a if array_namespace(like) is np else array_namespace(like).as_tensor(a, device=like.device)


def copy_array(a: Any) -> Any:
    return a.copy() if array_namespace(a) is np else a.clone()


def first_true(mask: Any) -> Any:  # index of the first True in each row of (rows, n), 0 where none
    return np.argmax(mask, axis=1) if array_namespace(mask) is np else mask.byte().argmax(dim=1)


def row_max(a: Any) -> Any:  # the maximum of each row of (rows, n), NaN-propagating
    return a.max(axis=1) if array_namespace(a) is np else a.amax(dim=1)


# --------------------------------------------------------------------------- the relative measures
# One formula each, NumPy or torch, in the inputs' dtype (callers convert). Here, the lowest module every
# user can import (data, poisson, metrics, training, rollout, studies); the float64 checked entries for
# rollouts are vpintegrator.metrics.relative_error and relative_drift.


def squared_norm(x: Any, start: int = 0) -> Any:
    """``Σ x²`` over the axes from ``start`` on: (d0, .., dk) -> (d0, .., d(start-1)); 0 sums everything.

    torch: ``x.square()`` summed (the whole tensor at ``start = 0``, else ``flatten(start).sum(-1)``).
    """
    if array_namespace(x) is np:
        return (x * x).sum(axis=tuple(range(x.ndim))[start:])
    sq = x.square()
    return sq.sum() if start == 0 else sq.flatten(start).sum(-1)


def wrap(d: Any, period: Any) -> Any:
    """Each periodic component of ``d`` (..., dim) taken to its representative in (−P/2, P/2]:
    ``d − P·ceil(d/P − 1/2)``; components with period 0 are left as they are (``period`` None: all are).

    Parameters
    ----------
    d : array, shape (..., dim)
        Differences of states (or states), NumPy or torch.
    period : ndarray, shape (dim,), or None
        Each component's period, 0 where not periodic (``vpintegrator.systems.base.check_periods``).
    """
    if period is None:
        return d
    p = np.asarray(period, dtype=np.float64)
    if not p.any():
        return d
    xp = array_namespace(d)
    q = as_like(np.where(p > 0, p, 1.0), d)
    if xp is not np:
        q = q.to(d.dtype)
    return xp.where(as_like(p > 0, d), d - q * xp.ceil(d / q - 0.5), d)


def relative_error(pred: Any, target: Any, period: Any = None) -> Any:
    """The relative error ``‖pred − target‖ / ‖target‖`` along the last axis: (..., dim) -> (...).

    The Euclidean norms as ``np.linalg.norm`` computes them (the square root of the sum of squares), each
    taken on its own; NaN or inf where the target is 0 or a state is not finite, without warnings. With
    ``period`` (dim,) (0 where not periodic) the difference and the target are wrapped first (``wrap``).
    """
    xp = array_namespace(pred)
    d = wrap(pred - target, period)
    target = wrap(target, period)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return xp.sqrt((d * d).sum(-1)) / xp.sqrt((target * target).sum(-1))


def relative_loss(pred: Any, target: Any, start: int = 0) -> Any:
    """The reference loss ``‖pred − target‖_F / ‖target‖_F`` over the axes from ``start`` on, as
    ``sqrt(Σ(pred − target)² / Σ target²)`` (``squared_norm`` of each).

    Parameters
    ----------
    pred, target : Tensor (or ndarray), shape (..., batch, pred_window, dim)
    start : int
        The first axis summed: 0 for one loss over the whole batch (a scalar), 1 for one per member of
        an ensemble's (n_members, batch, pred_window, dim).
    """
    return array_namespace(pred).sqrt(squared_norm(pred - target, start) / squared_norm(target, start))


def relative_drift(values: Any, initial: Any, floor: float | None = None) -> Any:
    """The relative drift ``(I − I₀) / |I₀|`` of an invariant (signed; its modulus is the drift's size).

    Parameters
    ----------
    values : array, shape (...)
        The invariant along trajectories.
    initial : array, broadcastable to ``values``
        ``I₀`` (e.g. ``values[:, :1]``).
    floor : float, optional
        None: where ``I₀ = 0`` the absolute drift ``I − I₀``; a number: ``|I₀|`` held at least ``floor``
        (0.0: no guard, a zero ``I₀`` gives inf or NaN).

    Returns
    -------
    array, shape of ``values``
    """
    xp = array_namespace(values)
    scale = xp.abs(initial)
    scale = xp.where(initial == 0.0, 1.0, scale) if floor is None else xp.where(scale < floor, floor, scale)
    return (values - initial) / scale


def resolve_dtype(dtype: Any) -> Any:
    """``"float32"``/``"float64"`` (or that torch dtype itself) -> the torch dtype; anything else is a one-line
    error naming ``dtype``."""
    import torch

    table = {name: getattr(torch, name) for name in DTYPES}
    if isinstance(dtype, torch.dtype):
        if dtype in table.values():
            return dtype
        raise VPIntegratorError(f"dtype must be float32 or float64; got {dtype}", key="dtype")
    try:
        return table[str(dtype)]
    except KeyError:
        raise VPIntegratorError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}", key="dtype") from None
