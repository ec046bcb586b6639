"""The Cayley transform Cayley(C) = (I − C)(I + C)⁻¹ on batches of small matrices.

No ½ factor (GeometricMachineLearning's convention, seed 004): Cayley maps a skew-symmetric C to an
orthogonal matrix with determinant 1, it does not need the retraction property.

Three implementations, chosen by ``method``:

``"closed"``
    Closed form for skew-symmetric C with T ≤ 5 (``T = C.shape[-1]``). By Cayley–Hamilton the characteristic
    polynomial of a skew T×T matrix S is p(x) = x^T + a x^{T−2} + b x^{T−4}  (T ≤ 5), with
    a = Σ_{i>j} S_ij² and b = Σ (Pfaffians of the 4×4 principal minors)²; then
    (I + S)⁻¹ = q(S) / det(I + S),  q(x) = (p(x) − p(−1)) / (−(x + 1)),  det(I + S) = 1 + a + b,
    and Cayley(S) = 2 (I + S)⁻¹ − I.  Worked out:

    - T = 1: Cayley = 1
    - T = 2: (I + S)⁻¹ = (I − S) / (1 + a)
    - T = 3: (I + S)⁻¹ = (I − S + w wᵀ) / (1 + |w|²),  S v = w × v,  w = (S₂₁, S₀₂, S₁₀)
    - T = 4: (I + S)⁻¹ = (I − S)(S² + (1 + a) I) / (1 + a + b),  b = Pf(S)²
    - T = 5: (I + S)⁻¹ = (S⁴ − S³ + (1 + a) S² − (1 + a) S + (1 + a + b) I) / (1 + a + b)

    Only the strictly lower triangle of C is read (S = tril(C, −1) − tril(C, −1)ᵀ), so the result is
    orthogonal to rounding even when C is skew only up to rounding. Differentiated by autograd.
``"solve"``
    ``torch.linalg.solve(I + C, I − C)`` (I − C and (I + C)⁻¹ commute); any T, any invertible I + C.
``"inv"``
    ``(I − C) @ torch.linalg.inv(I + C)``: the slow, obviously correct reference and benchmark baseline.

``"auto"`` (the default) is ``"closed"`` for T ≤ 5 and ``"solve"`` above. The process-wide default can be
switched with [`cayley_method`][vpintegrator.nn.cayley_method] (a context manager), e.g. for benchmarks.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Iterator

import torch

from ..errors import VPIntegratorError

__all__ = ["CAYLEY_METHODS", "cayley", "cayley_method", "get_cayley_method", "resolve_cayley_method", "cayley3_transpose_apply"]

CAYLEY_METHODS = ("auto", "closed", "solve", "inv")
MAX_CLOSED_T = 5

_default_method = "auto"


def _check_method(method: str) -> str:
    if method not in CAYLEY_METHODS:
        raise VPIntegratorError(
            f"cayley method: expected one of {', '.join(CAYLEY_METHODS)}, got {method!r}"
        )
    return method


def get_cayley_method() -> str:
    """The process-wide default Cayley method (``"auto"`` unless changed by [`cayley_method`][vpintegrator.nn.cayley_method])."""
    return _default_method


@contextlib.contextmanager
def cayley_method(method: str) -> Iterator[None]:
    """Use ``method`` for every ``cayley`` call with ``method=None`` inside the block.

    Examples
    --------
    >>> with cayley_method("inv"):   # the torch.linalg.inv baseline
    ...     y = model(x)
    """
    global _default_method
    previous = _default_method
    _default_method = _check_method(method)
    try:
        yield
    finally:
        _default_method = previous


def resolve_cayley_method(method: str | None, T: int) -> str:
    """The concrete method (``"closed"``, ``"solve"`` or ``"inv"``) that ``cayley`` uses for size T."""
    method = _check_method(_default_method if method is None else method)
    if method == "auto":
        return "closed" if T <= MAX_CLOSED_T else "solve"
    return method


def cayley3_transpose_apply(w: torch.Tensor, xp: torch.Tensor) -> torch.Tensor:
    """Λᵀ X for Λ = Cayley(S), S the 3×3 skew matrix with S v = w × v, without an inverse.

    Λᵀ = 2 (I + S)⁻ᵀ − I and (I + S)⁻ᵀ = (I + S + w wᵀ) / (1 + |w|²). In the seeds' columns (Z = Xᵀ,
    output Z Λ) each row of Z — one component over the 3 time steps — maps as
    z ↦ 2 (z + w × z + w (w·z)) / (1 + |w|²) − z.

    Parameters
    ----------
    w : Tensor, shape (3, batch)
        (S₂₁, S₀₂, S₁₀) per sample.
    xp : Tensor, shape (dim, 3, batch)
        The windows in the planes layout (``to_planes``).

    Returns
    -------
    Tensor, shape (dim, 3, batch)
        Λᵀ X in the planes layout.
    """
    K = _cayley3_transpose_planes(w)  # (3, 3, batch): K z is the image of one row z
    # out[:, i] = Σ_j K_ij z_j, three broadcast passes over (dim, 3, batch); no (dim, 3, 3, batch) temporary
    return K[:, 0] * xp[:, 0:1] + K[:, 1] * xp[:, 1:2] + K[:, 2] * xp[:, 2:3]


def _cayley3_transpose_planes(w: torch.Tensor) -> torch.Tensor:
    """Λᵀ = 2 (I + [w]× + w wᵀ) / (1 + |w|²) − I for w of shape (3, batch), as (3, 3, batch).

    Built from 3-vectors per sample ([w]× v = w × v), so every entry is one length-batch vector: a few
    short kernels instead of the cross product and its backward on (dim, 3, batch) tensors.
    """
    w0, w1, w2 = w
    one = torch.ones_like(w0)
    cross = torch.stack((one, -w2, w1, w2, one, -w0, -w1, w0, one)).view(3, 3, -1)  # I + [w]×
    scale = 2 / (1 + w.square().sum(dim=0))  # (batch,)
    eye = torch.eye(3, dtype=w.dtype, device=w.device)[:, :, None]  # (3, 3, 1)
    return (cross + w[:, None] * w[None, :]) * scale - eye


def cayley(C: torch.Tensor, method: str | None = None) -> torch.Tensor:
    """Cayley(C) = (I − C)(I + C)⁻¹ for a batch of square matrices.

    Parameters
    ----------
    C : Tensor, shape (..., T, T)
        Skew-symmetric matrices (for ``"closed"``/``"auto"`` only the strictly lower triangle is read).
    method : {"auto", "closed", "solve", "inv"}, optional
        See the module docstring; ``None`` uses [`get_cayley_method`][vpintegrator.nn.get_cayley_method].

    Returns
    -------
    Tensor, shape (..., T, T)
        Orthogonal matrices Λ (for skew C), same dtype and device as ``C``.
    """
    if C.ndim < 2 or C.shape[-1] != C.shape[-2]:
        raise VPIntegratorError(f"cayley: C must have shape (..., T, T), got {tuple(C.shape)}")
    T = C.shape[-1]
    method = resolve_cayley_method(method, T)
    if method == "closed":
        if T > MAX_CLOSED_T:
            raise VPIntegratorError(
                f"cayley: the closed form covers T <= {MAX_CLOSED_T}, got T = {T}; use method='solve'"
            )
        return _cayley_closed(C)
    eye = torch.eye(T, dtype=C.dtype, device=C.device)
    if method == "solve":
        return torch.linalg.solve(eye + C, eye - C)
    return (eye - C) @ torch.linalg.inv(eye + C)


def _pfaffian4(S: torch.Tensor, idx: tuple[int, int, int, int]) -> torch.Tensor:
    """Pfaffian of the 4×4 principal minor of skew S (..., T, T) on rows/cols ``idx``, from lower entries."""
    i, j, k, l = idx  # i < j < k < l; Pf = s_ij s_kl − s_ik s_jl + s_il s_jk (upper = −lower, signs cancel)
    return S[..., j, i] * S[..., l, k] - S[..., k, i] * S[..., l, j] + S[..., l, i] * S[..., k, j]


def _cayley_closed(C: torch.Tensor) -> torch.Tensor:
    T = C.shape[-1]
    eye = torch.eye(T, dtype=C.dtype, device=C.device)
    if T == 1:
        return torch.ones_like(C)
    lower = torch.tril(C, diagonal=-1)
    S = lower - lower.mT  # (..., T, T), exactly skew
    a = lower.square().sum(dim=(-2, -1))[..., None, None]  # (..., 1, 1): Σ_{i>j} S_ij² = −tr(S²)/2
    if T == 2:
        inv = (eye - S) / (1 + a)
    elif T == 3:
        w = torch.stack((S[..., 2, 1], S[..., 0, 2], S[..., 1, 0]), dim=-1)  # (..., 3): S v = w × v
        inv = (eye - S + w[..., :, None] * w[..., None, :]) / (1 + a)
    else:
        S2 = S @ S
        b = sum(_pfaffian4(S, idx).square() for idx in itertools.combinations(range(T), 4))
        b = b[..., None, None]  # (..., 1, 1)
        if T == 4:
            inv = (eye - S) @ (S2 + (1 + a) * eye) / (1 + a + b)
        else:  # T == 5
            S3 = S2 @ S
            S4 = S2 @ S2
            inv = (S4 - S3 + (1 + a) * (S2 - S) + (1 + a + b) * eye) / (1 + a + b)
    return 2 * inv - eye
