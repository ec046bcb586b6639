"""Helpers of the kill -9 tests (tests/test_crash_*.py): start a command, wait until it writes its temporary
file, kill it outright, and look at what it left."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path


def sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def orphans(out: Path) -> list[Path]:
    """Temporary files of writers of ``out`` (``.<name>.<pid>.<random>.tmp``)."""
    return sorted(out.parent.glob(f".{out.name}.*.tmp"))


def start_writing(cmd: list[str], out: Path, env: dict, timeout: float = 60) -> subprocess.Popen:
    """Start ``cmd`` and return once it has opened its temporary file for ``out``."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while not orphans(out):
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        if time.monotonic() >= deadline:
            proc.kill()
            proc.wait()
            raise AssertionError("no temporary file appeared")
        time.sleep(0.05)
    return proc


def kill_9_while_writing(cmd: list[str], out: Path, env: dict, settle: float = 1.0) -> int:
    """Start ``cmd``, let it write for ``settle`` seconds, ``kill -9`` it; return its pid."""
    proc = start_writing(cmd, out, env)
    try:
        time.sleep(settle)  # let it write some chunks
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid
