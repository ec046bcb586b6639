"""What stops a training run early: a non-finite loss or weights (``Diverged``), and SIGINT/SIGTERM
(``StopRequest``). Written in ``vpintegrator.training.loop``, the loop that owns stop requests; importable here too."""

from __future__ import annotations

from .loop import Diverged, StopRequest

__all__ = ["Diverged", "StopRequest"]
