"""Fast paths checked against eager: one rule for every "fast path, checked, else fall back".

The compiled rollout kernel and the ``torch.compile`` runner of ``ModelStep`` (``vpintegrator.rollout.steps``),
the CUDA graph of a device rollout's step (``vpintegrator.rollout.device``) and the graph or compiled
training step (``vpintegrator.training.fast_step``) are each taken through
[`verified`][vpintegrator.fastpath.verified]: the fast path is built, run beside the eager path on probe
inputs and kept only when the two agree (same shape, within a tolerance, NaN where the eager path gives
NaN); when building or running either raises, or they differ, the eager path runs and the reason is
logged once (or handed to the caller, which says it its own way).

Never imports torch itself: a tensor cannot exist without it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Any, Callable, Iterable

#: the values of the ``fast_step`` key, one type in ``vp-train`` and ``vp-rollout`` (a TOML of one loads in the
#: other): ``off`` is the eager path; a rollout runs ``auto``, ``graph`` and ``compile`` alike (its compiled step)
FAST_STEPS = ("auto", "off", "graph", "compile")


def check_fast_step(value: Any) -> str:
    """A ``fast_step`` value as its name: one of ``FAST_STEPS``; ``True``/``False`` (older rollout configs)
    are ``"auto"``/``"off"``. Else a one-line error naming ``fast_step``."""
    from .errors import VPIntegratorError

    if isinstance(value, bool):
        return "auto" if value else "off"
    if not isinstance(value, str) or value not in FAST_STEPS:
        raise VPIntegratorError(f"fast_step must be {', '.join(FAST_STEPS)}; got {value!r}", key="fast_step")
    return value


import numpy as np

from .arrays import array_namespace

__all__ = ["Verified", "verified", "allclose", "first_line"]

_log = logging.getLogger(__name__)


def first_line(err: BaseException) -> str:
    """``"<type>: <first line of the message>"`` of an exception (the type alone without a message)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


@dataclasses.dataclass
class Verified:
    """What [`verified`][vpintegrator.fastpath.verified] decided.

    ``fn`` is the path that runs: the fast one when ``fast``, else the eager one; ``reason`` says why the
    eager one runs (None when the fast one does), ``error`` is the exception behind it (if any);
    ``outputs`` are the fast path's results on the probes, in order (empty unless ``fast``).
    """

    fn: Callable[[Any], Any]
    fast: bool
    reason: str | None = None
    error: BaseException | None = None
    outputs: list[Any] = dataclasses.field(default_factory=list)


def allclose(got: Any, want: Any, rtol: float, atol: float) -> bool:
    """Same shape and ``|got − want| <= atol + rtol |want|`` everywhere, NaN where ``want`` is NaN; NumPy
    arrays or torch tensors (both of one kind, dtype and device)."""
    if tuple(got.shape) != tuple(want.shape):
        return False
    if array_namespace(want) is np:
        return bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
    return bool(sys.modules["torch"].allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))


def verified(make_fast: Callable[[], Callable[[Any], Any]], eager: Callable[[Any], Any] | None,
             probe: Iterable[Any], *, rtol: float = 0.0, atol: float = 0.0,
             agree: Callable[[Any, Any], str | None] | None = None, what: str = "the fast path",
             log: int | None = logging.INFO) -> Verified:
    """Build a fast path, check it against the eager path on ``probe``, and say which one runs.

    Parameters
    ----------
    make_fast : callable
        ``() -> fast``: builds the fast path, a callable of one input.
    eager : callable or None
        The eager path, a callable of one input (run before the fast path on each probe); None: nothing to
        check against (the fast path is only run on the probes, and kept unless it raises).
    probe : iterable
        The inputs both paths run on, in order.
    rtol, atol : float
        The agreement required (``allclose`` of the outputs, NaN where the eager output is NaN).
    agree : callable, optional
        ``(fast output, eager output) -> None`` when they agree, else a sentence saying how they differ
        (instead of ``rtol``, ``atol``).
    what : str
        The fast path's name in the reasons: ``"<what> raised <error>"``, ``"<what> differs from the eager
        path on probe <i> (rtol .., atol ..)"``.
    log : int or None
        The logging level of the one line that says why the eager path runs; None: not logged (the
        caller reports ``reason`` itself).

    Returns
    -------
    Verified
        ``fn`` the fast path or ``eager``, ``fast``, ``reason``, ``error`` and the fast path's ``outputs``.
    """
    outputs: list = []
    reason, error = None, None
    try:
        fast = make_fast()
        for i, x in enumerate(probe):
            want = None if eager is None else eager(x)
            got = fast(x)
            if eager is not None:
                reason = (agree(got, want) if agree is not None
                          else None if allclose(got, want, rtol, atol)
                          else f"{what} differs from the eager path on probe {i} (rtol {rtol:g}, atol {atol:g})")
                if reason is not None:
                    break
            outputs.append(got)
    except Exception as err:  # noqa: BLE001 -- whatever broke, the eager path decides
        reason, error = f"{what} raised {first_line(err)}", err
    if reason is None:
        return Verified(fn=fast, fast=True, outputs=outputs)
    if log is not None:
        _log.log(log, "%s; the eager path runs", reason)
    return Verified(fn=eager if eager is not None else _no_eager, fast=False, reason=reason, error=error)


def _no_eager(x: Any) -> Any:
    raise RuntimeError("verified: no eager path was given")
