"""Progress on stderr that works in a terminal, in a notebook and in a batch-job log.

On a terminal (stderr is a TTY) a click progress bar redraws one line, as before. Elsewhere (a Jupyter
notebook, a batch job's log file, a pipe) a bar cannot redraw and click shows only its label, so
``ProgressLines`` writes a plain line instead: at the first update, then at most one per interval
(default ``DEFAULT_INTERVAL`` seconds; the environment variable ``INTERVAL_ENV`` sets it, 0 means
every update), and a last one at the end, each with done/total, the rate and the remaining time::

    vp-gen rigid_body_paper: 600/1238 (48%), 41.2 trajectories/s, 15 s left

In a Jupyter notebook with tqdm installed, progress is tqdm's notebook widget instead (``tqdm.auto``:
``notebook_widget``), with the same ``update``/``advance``/``close``.

Torch-free; the training loop (``vpintegrator.training.loop``), ``vp-gen`` and ``vp-rollout`` use it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable, TextIO

__all__ = ["DEFAULT_INTERVAL", "INTERVAL_ENV", "ProgressLines", "in_notebook", "notebook_widget", "progress_interval",
           "on_terminal", "progress"]

#: seconds between two plain progress lines (off a terminal)
DEFAULT_INTERVAL = 15.0
#: the environment variable that overrides ``DEFAULT_INTERVAL`` (seconds; 0: a line per update)
INTERVAL_ENV = "VPINTEGRATOR_PROGRESS_INTERVAL"


def progress_interval(value: float | str | None = None) -> float:
    """The interval between plain progress lines: ``value``, else ``$VPINTEGRATOR_PROGRESS_INTERVAL``, else
    ``DEFAULT_INTERVAL``; a value that is not a finite number ≥ 0 falls back to the default."""
    if value is None:
        value = os.environ.get(INTERVAL_ENV)
    try:
        seconds = float(value) if value is not None and str(value).strip() else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL
    return seconds if math.isfinite(seconds) and seconds >= 0 else DEFAULT_INTERVAL


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr now) is a terminal that a progress bar can redraw."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # a closed or foreign stream
        return False


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel; IPython is never imported
    here: only a running shell matters)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _singular(unit: str) -> str:
    if unit.endswith("ies"):
        return unit[:-3] + "y"
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit


def _duration(seconds: float) -> str:
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"


class _Reporter:
    """What both reporters share: a context manager that closes, and ``advance(n)`` by ``update``."""

    done: int

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def update(self, done: int, text: str = "") -> bool:
        raise NotImplementedError

    def advance(self, n: int = 1, text: str = "") -> bool:
        """``n`` more done (the rollout engine's ``progress(n)``); see ``update``."""
        return self.update(self.done + int(n), text)


class ProgressLines(_Reporter):
    """Throttled plain progress lines: the first update, then at most one per ``interval`` seconds, and the
    last state on ``close`` (when it was not written yet).

    Parameters
    ----------
    label : str
        Starts every line (``"training"``, ``"vp-gen rigid_body"``).
    total : int, optional
        What ``done`` counts up to (None: unknown; no percentage or time left).
    unit : str
        What is counted, plural (``"trajectories"``, ``"epochs"``, ``"steps"``): names the rate.
    interval : float, optional
        Seconds between lines (default ``progress_interval``).
    stream : file, optional
        Where lines go (default: ``sys.stderr`` at the time of writing).
    clock : callable
        Seconds, monotonic (tests pass a fake one).
    write : callable, optional
        Takes each line (without newline) instead of ``stream`` (e.g. ``vp-rollout``'s log).
    first : bool, default True
        Write a line at the first update. False: the first line comes one interval after the start, and
        the last one only when an earlier one was written (work shorter than an interval stays silent).
    time_limit : float, optional
        Seconds after which the work stops whatever is done (``vp-train --time-limit``): the time left is
        at most what remains of it (and is shown with no ``total``).
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "", interval: float | None = None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None, first: bool = True,
                 time_limit: float | None = None) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.time_limit = float(time_limit) if time_limit else None
        self.interval = progress_interval(interval)
        self.stream, self.clock, self.write = stream, clock, write
        self.start = clock()
        self.done, self.text = 0, ""
        self.last_line: float | None = None if first else self.start  # clock of the last line written
        self.written_done: int | None = None if first else 0  # done of the last line written
        self.first = first
        self.lines = 0

    def update(self, done: int, text: str = "") -> bool:
        """Now ``done`` of ``total``, with ``text`` (e.g. the loss) after the counts; write a line if it is
        the first, ``interval`` has passed since the last, or all is done. Returns whether one was written."""
        self.done, self.text = int(done), text
        now = self.clock()
        finished = self.total is not None and self.done >= self.total and (self.first or self.lines > 0)
        if self.last_line is None or now - self.last_line >= self.interval or (finished and self.written_done != self.done):
            self._write(now)
            return True
        return False

    def close(self) -> None:
        """Write the last state if the last line did not show it (with ``first=False``: and one was written)."""
        if self.written_done != self.done and (self.first or self.lines > 0):
            self._write(self.clock())

    def line(self, now: float | None = None) -> str:
        """The line for the current state (without a newline)."""
        now = self.clock() if now is None else now
        elapsed = now - self.start
        head = f"{self.label}: {self.done}"
        if self.total:
            head += f"/{self.total} ({100.0 * self.done / self.total:.0f}%)"
        elif self.unit:
            head += f" {self.unit}"
        parts = [head]
        left = None
        if elapsed > 0 and self.done > 0:
            rate = self.done / elapsed
            unit = self.unit or "done"
            parts.append(f"{rate:.3g} {unit}/s" if rate >= 1 else f"{1 / rate:.3g} s per {_singular(unit)}")
            if self.total and self.done < self.total:
                left = (self.total - self.done) / rate
        unfinished = not (self.total and self.done >= self.total)
        if self.time_limit is not None and unfinished:  # the limit ends the work first when it is sooner
            budget = max(self.time_limit - elapsed, 0.0)
            left = budget if left is None else min(left, budget)
        if left is not None:
            parts.append(f"{_duration(left)} left")
        parts.append(f"{_duration(elapsed)} elapsed")
        if self.text:
            parts.append(self.text)
        return ", ".join(parts)

    def _write(self, now: float) -> None:
        if self.write is not None:
            self.write(self.line(now))
        else:
            stream = sys.stderr if self.stream is None else self.stream
            stream.write(self.line(now) + "\n")
            stream.flush()
        self.last_line, self.written_done = now, self.done
        self.lines += 1


class _Bar(_Reporter):
    """A click progress bar with ``ProgressLines``' ``update``/``advance``/``close``."""

    def __init__(self, label: str, total: int, stream: TextIO | None) -> None:
        import click

        self.bar: Any = click.progressbar(length=max(int(total), 1), label=label,
                                     file=sys.stderr if stream is None else stream)
        self.bar.__enter__()
        self.done = 0

    def update(self, done: int, text: str = "") -> bool:
        self.bar.update(max(int(done) - self.done, 0))
        self.done = int(done)
        return True

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


class _Widget(_Reporter):
    """A tqdm bar (``tqdm.auto``: the notebook widget in Jupyter) with ``ProgressLines``' ``update``/
    ``advance``/``close``; ``text`` is its postfix."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.done = 0

    def update(self, done: int, text: str = "") -> bool:
        if text:
            self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(max(int(done) - self.done, 0))
        self.done = int(done)
        return True

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def notebook_widget(label: str, total: int | None, unit: str = "") -> "_Widget | None":
    """tqdm's notebook widget for ``label`` (``tqdm.auto.tqdm``) when this is a Jupyter kernel and tqdm is
    installed; else None (the caller writes lines)."""
    if not in_notebook():
        return None
    import importlib

    try:
        tqdm = importlib.import_module("tqdm.auto").tqdm  # optional (the notebook extra): no stubs needed
    except ImportError:
        return None
    return _Widget(tqdm(total=total, desc=label, unit=_singular(unit) if unit else "it", leave=True))


def progress(label: str, total: int, *, unit: str = "", stream: TextIO | None = None,
             interval: float | None = None) -> "ProgressLines | _Bar | _Widget":
    """done/total progress for ``label``: a click bar on a terminal, tqdm's widget in a notebook (with tqdm
    installed), ``ProgressLines`` elsewhere. All have ``update(done, text="")``, ``advance(n, text="")``
    and ``close()``, and are context managers."""
    widget = notebook_widget(label, total, unit) if stream is None else None
    if widget is not None:
        return widget
    if on_terminal(stream):
        return _Bar(label, total, stream)
    return ProgressLines(label, total, unit=unit, stream=stream, interval=interval)


def log_lines(log: Callable[[str], None] | None, logger: str) -> Callable[[str], None]:
    """A library function's ``log=`` callback that goes through ``logging`` too: each line is an INFO
    record of the logger ``logger`` (the CLIs show them unless ``--quiet``; a program sets them up with
    ``logging.basicConfig``), then goes to ``log`` when one is given."""
    import logging

    target = logging.getLogger(logger)

    def say(line: str) -> None:
        target.info("%s", line)
        if log is not None:
            log(line)

    return say
