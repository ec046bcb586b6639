"""Checks a comparison run makes before it starts: no output over an input, work that fits in memory
and on disk (estimated from the sizes), a finite reference.

Written in ``vpintegrator.rollout.compare`` (the comparison run, their only user); importable here too.
"""

from __future__ import annotations

from .compare import check_outputs, check_trained_on, estimate

__all__ = ["check_outputs", "check_trained_on", "estimate"]
