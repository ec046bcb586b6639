"""What stops a training run early: a non-finite loss or weights (``Diverged``), and SIGINT/SIGTERM
(``StopRequest``: a flag checked between optimiser steps, so that ``last.pt`` is saved)."""

from __future__ import annotations

import math
import signal
from typing import Any

from .._signals import handling


class Diverged(Exception):
    """A non-finite loss or weights: training stops (every rank at the same point)."""

    #: set by __init__ (declared for type checkers)
    what: str
    value: float
    epoch: int
    step: int

    def __init__(self, what: str, value: float, epoch: int, step: int) -> None:
        super().__init__(what)
        self.what, self.value, self.epoch, self.step = what, value, epoch, step

    @property
    def value_text(self) -> str:
        return "nan" if math.isnan(self.value) else ("inf" if self.value > 0 else "-inf")


class StopRequest:
    """SIGINT/SIGTERM set a flag checked between optimiser steps; a second signal aborts at once."""

    #: set by __init__ (declared for type checkers)
    requested: bool

    def __init__(self) -> None:
        self.requested = False
        self._handling = handling((signal.SIGINT, signal.SIGTERM), self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt(f"signal {signum} received twice")
        self.requested = True

    def __enter__(self) -> "StopRequest":
        self._handling.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handling.__exit__(*exc)
