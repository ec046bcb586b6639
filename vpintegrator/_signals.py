"""The one signal policy: handlers are installed for a block and the previous ones come back afterwards.

Three users: the CLIs (SIGTERM, and SIGINT where Python's default handler is in place, raise
``KeyboardInterrupt`` so that ``kill`` cleans up like Ctrl-C: ``interrupts_raise``), training (a flag
checked between optimiser steps: ``vpintegrator.training.loop.StopRequest``) and the studies
(SIGTERM stops the children). All go through ``handling``, so an in-process call (a notebook, a test
driving a CLI through click's runner) leaves the process's handlers as it found them. Outside the main
thread Python cannot install handlers; the block then runs with the handlers as they are.

Stopping means stopping: a SIGTERM or SIGINT that arrives while the process is watching (inside
``interrupts_raise``, or in a worker of the package's pool: ``pool_worker``) is remembered even when a block's
own handler took it (a training that stopped as ``interrupted`` and returned), so ``check_terminated`` between
tasks starts no further one. A worker of the pool takes a stop from its parent as ``STOP_NOTICE``, which
becomes one SIGTERM unless a stop has already arrived (so a signal to the whole process group and the
parent's notice stop a training once, not twice: a second SIGTERM aborts a training at once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterable, Iterator

__all__ = ["handling", "interrupts_raise", "check_terminated", "die_with_parent", "child_options", "stop_children",
           "run_child", "STOP_NOTICE", "pool_worker", "in_pool_task"]

_terminated: int | None = None  # the signal number once SIGTERM or SIGINT has arrived while watching
_watching = False  # remember SIGTERM/SIGINT in _terminated, also when a block's own handler takes them
_STOPS = (signal.SIGTERM, signal.SIGINT)
#: what a pool's parent sends its workers to stop them (``pool_worker``): one SIGTERM there unless one came
STOP_NOTICE: int = getattr(signal, "SIGUSR1", signal.SIGTERM)


@contextlib.contextmanager
def handling(signals: Iterable[int], handler: Callable[[int, Any], Any]) -> Iterator[None]:
    """Within the block ``handler`` handles each of ``signals``; afterwards (also after an exception) every
    previous handler is back."""
    previous: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, _remembered(handler) if _watching and sig in _STOPS else handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _remembered(handler: Any) -> Any:
    """``handler`` (a function) that first remembers a SIGTERM or SIGINT for ``check_terminated``."""
    if not callable(handler):
        return handler

    def remember(signum, frame):
        global _terminated
        _terminated = signum
        return handler(signum, frame)

    return remember


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
    global _terminated, _watching
    sigs = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        sigs.append(signal.SIGINT)
    (before, watching), _terminated, _watching = (_terminated, _watching), None, True
    hook = sys.unraisablehook
    _quiet_interrupts.previous = hook  # type: ignore[attr-defined]
    sys.unraisablehook = _quiet_interrupts
    try:
        with handling(sigs, _raise_keyboard_interrupt):
            yield
    finally:
        sys.unraisablehook = hook
        _terminated, _watching = before, watching


def check_terminated() -> None:
    """Raise ``KeyboardInterrupt`` if SIGTERM (or SIGINT) arrived earlier in ``interrupts_raise``.

    The handler raises where the signal lands; if that was inside a finaliser or a weakref callback,
    Python prints "Exception ignored" and goes on. Long loops call this between chunks so that such a
    swallowed signal still stops the work (and its cleanup runs).
    """
    if _terminated is not None:
        raise KeyboardInterrupt(f"terminated by signal {_terminated}")


# --------------------------------------------------------------------------- the workers of the package's pool

_in_task = False  # a pool worker is running a task (a stop then raises KeyboardInterrupt in it)


def _worker_stop(signum, frame):  # pragma: no cover - runs in a pool worker
    global _terminated
    _terminated = signum
    if _in_task:
        raise KeyboardInterrupt(f"terminated by signal {signum}")


def _worker_notice(signum, frame):  # pragma: no cover - runs in a pool worker
    """The parent's ``STOP_NOTICE``: one SIGTERM unless a stop has arrived. Raised here, a SIGTERM already
    pending (a signal to the whole group not yet handled) is the same one, and runs once."""
    if _terminated is None:
        signal.raise_signal(signal.SIGTERM)


def pool_worker() -> None:
    """Set up a worker of the package's pool (``jobs.executors.worker_pool``'s initializer): SIGTERM and SIGINT
    are remembered (``check_terminated``) and raise ``KeyboardInterrupt`` in a task (a training's own handler,
    installed through ``handling``, takes them there instead and stops it as ``interrupted``), and the parent's
    ``STOP_NOTICE`` is one SIGTERM (module docstring); a worker that was told to stop starts no further task
    (``in_pool_task``)."""
    global _watching, _terminated
    _watching, _terminated = True, None
    for sig in _STOPS:
        signal.signal(sig, _worker_stop)
    if STOP_NOTICE not in _STOPS:
        signal.signal(STOP_NOTICE, _worker_notice)


def in_pool_task(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - in a worker
    """``fn(*args, **kwargs)`` in a pool worker, refused (``KeyboardInterrupt``, as a plain one the parent can
    unpickle) once the worker was told to stop; a stop that arrives during it (and that ``fn`` swallowed: a
    training that returned) is raised after it."""
    global _in_task
    try:
        _in_task = True
        try:
            check_terminated()
            result = fn(*args, **kwargs)
        finally:
            _in_task = False
        check_terminated()
        return result
    except KeyboardInterrupt as err:
        raise KeyboardInterrupt(str(err) or "terminated") from None


# --------------------------------------------------------------------------- children die with their parents

#: Linux's ``prctl`` option that sets the signal a process gets when its parent dies
_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's ``prctl`` (Linux), or None; looked up in the parent, so that a freshly forked child only calls it
    (no ``dlopen`` between fork and exec, which could wait on a lock another thread of the parent held)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return None


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None, prctl: Any = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux's parent-death signal,
    ``prctl(PR_SET_PDEATHSIG)`` through ctypes; elsewhere nothing can be asked); if the parent ``parent``
    (a process id) is already gone, exit at once.

    The one way every process the package starts is tied to its parent: ``child_options`` runs it in the
    child before ``exec`` (``subprocess``, with ``prctl`` looked up in the parent: ``_prctl``), the worker
    pools as their initializer. A ``kill -9`` of a command thus leaves no child training, integrating or
    holding an output's lock."""
    prctl = prctl if prctl is not None else _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # died before the signal was set
        os._exit(1)


def child_options() -> dict[str, Any]:
    """Keyword arguments for ``subprocess.Popen``/``subprocess.run`` that start a child which dies with this
    process: the parent-death signal SIGTERM (``die_with_parent``: the child cleans up as after ``kill``,
    e.g. ``vp-train`` saves ``last.pt``) and, on POSIX, a process group of its own, so that ``stop_children``
    reaches the child's own children and a Ctrl-C in the terminal reaches the parent only (which stops the
    children in order)."""
    if os.name != "posix":  # pragma: no cover - Windows: no parent-death signal
        return {}
    parent, prctl = os.getpid(), _prctl()
    if prctl is None:  # pragma: no cover - POSIX without prctl (macOS): the process group only
        return {"start_new_session": True}
    return {"preexec_fn": lambda: die_with_parent(signal.SIGTERM, parent, prctl), "start_new_session": True}


def stop_children(procs: Iterable[Any], timeout: float = 60.0) -> None:
    """Stop the children ``procs`` (``subprocess.Popen`` objects started with ``child_options``): SIGTERM to
    each child's process group, then wait up to ``timeout`` seconds in all, then SIGKILL to the group of each
    one still running."""
    import time

    procs = [p for p in procs if p.poll() is None]
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except Exception:  # subprocess.TimeoutExpired
            _signal_group(p, getattr(signal, "SIGKILL", signal.SIGTERM))
            p.wait()


def _signal_group(proc: Any, sig: int) -> None:
    try:
        if os.name == "posix" and os.getpgid(proc.pid) == proc.pid:  # its own group (child_options)
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def run_child(cmd: list[str], **kwargs: Any) -> Any:
    """``subprocess.run(cmd, **kwargs)`` with the child started by ``child_options``; an interrupt (Ctrl-C,
    SIGTERM through ``interrupts_raise``) or error here stops the child (``stop_children``) before it
    propagates. Returns the ``CompletedProcess``; ``check=True`` raises ``CalledProcessError`` as
    ``subprocess.run`` does."""
    import subprocess

    check = kwargs.pop("check", False)
    with subprocess.Popen(cmd, **child_options(), **kwargs) as proc:
        try:
            proc.wait()
        except BaseException:
            stop_children([proc])
            raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return subprocess.CompletedProcess(cmd, proc.returncode)
