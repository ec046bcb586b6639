"""The handler every command's and study's log lines go through: stderr as it is when a record comes."""

from __future__ import annotations

import logging
import sys

__all__ = ["StderrHandler"]


class StderrHandler(logging.StreamHandler):
    """A handler writing to ``sys.stderr`` as it is when a record comes (pytest and click's test runner swap
    it); each user (``vpintegrator.cli._common``, ``vpintegrator.studies.driver``) sets its own format."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler.__init__ assigns it
        pass
