"""A study's error: ``StudyError`` (bad input, a missing prerequisite or a failed step), reported by the driver as
one line (``vpintegrator.studies.driver.guarded``), and ``one_line``, a study's ``run`` whose library errors are
reported as their message."""

from __future__ import annotations

from typing import Any, Callable


class StudyError(Exception):
    """Bad input, a missing prerequisite or a failed step: reported as one line, no traceback."""


def one_line(run: Callable[[Any], int]) -> Callable[[Any], int]:
    """A study's ``run(plan)`` whose library error (``VPIntegratorError``) the driver reports as a one-line
    ``StudyError`` of its message (its key not renamed to a flag): ``run`` itself, marked (no wrapper)."""
    run.one_line = True  # type: ignore[attr-defined]
    return run
