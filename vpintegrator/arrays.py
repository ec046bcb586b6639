"""NumPy or torch: the helpers that let one formula run on either (``xp = array_namespace(y)``; NumPy and
torch share most function names, the few whose spelling differs are here), and the one dtype rule.

Never imports torch itself: a tensor cannot exist without it, and ``resolve_dtype`` imports it when called.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .errors import VPIntegratorError

__all__ = ["array_namespace", "to_numpy", "as_like", "copy_array", "first_true", "row_max", "DTYPES", "resolve_dtype"]

#: the floating dtypes the package trains and runs models in, by name
DTYPES = ("float32", "float64")


def array_namespace(y: Any):
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
