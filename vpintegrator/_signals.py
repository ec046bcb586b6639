"""The one signal policy: handlers are installed for a block and the previous ones come back afterwards.

Three users: the CLIs (SIGTERM, and SIGINT where Python's default handler is in place, raise
``KeyboardInterrupt`` so that ``kill`` cleans up like Ctrl-C: ``interrupts_raise``), training (a flag
checked between optimiser steps: ``vpintegrator.training.loop.StopRequest``) and the studies
(SIGTERM stops the children). All go through ``handling``, so an in-process call (a notebook, a test
driving a CLI through click's runner) leaves the process's handlers as it found them. Outside the main
thread Python cannot install handlers; the block then runs with the handlers as they are.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Callable, Iterable, Iterator

__all__ = ["handling", "interrupts_raise", "check_terminated"]

_terminated: int | None = None  # the signal number once SIGTERM or SIGINT has arrived in interrupts_raise


@contextlib.contextmanager
def handling(signals: Iterable[int], handler: Callable[[int, Any], Any]) -> Iterator[None]:
    """Within the block ``handler`` handles each of ``signals``; afterwards (also after an exception) every
    previous handler is back."""
    previous: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _raise_keyboard_interrupt(signum, frame):  # pragma: no cover - exercised through a subprocess
    global _terminated
    _terminated = signum
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def _quiet_interrupts(unraisable) -> None:
    """An interrupt swallowed in a finaliser is not an error to print: ``check_terminated`` acts on it."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _terminated is not None:
        return
    _quiet_interrupts.previous(unraisable)  # type: ignore[attr-defined]


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within the block SIGTERM (and SIGINT, unless it is ignored or handled by someone else) raises
    ``KeyboardInterrupt`` and is remembered for ``check_terminated``; an interrupt swallowed in a
    finaliser is not printed. Everything (handlers, ``sys.unraisablehook``, the remembered signal) is
    restored afterwards."""
    global _terminated
    sigs = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        sigs.append(signal.SIGINT)
    before, _terminated = _terminated, None
    hook = sys.unraisablehook
    _quiet_interrupts.previous = hook  # type: ignore[attr-defined]
    sys.unraisablehook = _quiet_interrupts
    try:
        with handling(sigs, _raise_keyboard_interrupt):
            yield
    finally:
        sys.unraisablehook = hook
        _terminated = before


def check_terminated() -> None:
    """Raise ``KeyboardInterrupt`` if SIGTERM (or SIGINT) arrived earlier in ``interrupts_raise``.

    The handler raises where the signal lands; if that was inside a finaliser or a weakref callback,
    Python prints "Exception ignored" and goes on. Long loops call this between chunks so that such a
    swallowed signal still stops the work (and its cleanup runs).
    """
    if _terminated is not None:
        raise KeyboardInterrupt(f"terminated by signal {_terminated}")
