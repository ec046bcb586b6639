"""Newton helpers shared by the implicit methods, and the exception a failed step raises."""

from __future__ import annotations

import numpy as np


class NotConverged(Exception):
    """Newton failed inside a step (turned into a VPIntegratorError naming the step)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def newton_solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Batched solve (batch, n, n) x (batch, n, k); a singular Newton matrix becomes NotConverged."""
    try:
        return np.linalg.solve(matrix, rhs)
    except np.linalg.LinAlgError:
        bad = int(np.argmin(np.abs(np.linalg.det(matrix))))
        raise NotConverged(
            f"the Newton matrix I - h df/dy is singular for batch item {bad}; reduce dt"
        ) from None


def eye_like(y: np.ndarray) -> np.ndarray:
    """Identity matrices (batch, dim, dim) for states y (batch, dim)."""
    return np.broadcast_to(np.eye(y.shape[1]), (y.shape[0], y.shape[1], y.shape[1])).copy()
