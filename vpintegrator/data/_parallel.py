"""Chunks of a data set on every core: a thread pool over chunks, results taken back in order.

``run_chunks`` runs ``task(start)`` for each chunk on ``workers`` threads (the compiled DOP853 and
zlib release the GIL, so the threads run on separate cores) and hands the results to ``sink`` on the
calling thread in chunk order, keeping at most ``workers + 1`` chunks in flight. Every trajectory is
computed by the same code on the same chunk as with one worker, so the output does not depend on
``workers``.

``encode_chunks`` compresses a block of ``/y`` into HDF5 chunks exactly as the file's filters would
(shuffle, then deflate at the writer's level), so that the worker threads compress in parallel and the
writing thread only stores the bytes (``write_direct_chunk``); HDF5 decompresses them like its own.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import VPIntegratorError

__all__ = ["default_workers", "check_workers", "encode_chunks", "run_chunks"]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: Any, key: str = "workers") -> int:
    """``workers`` as an int >= 1; None: ``default_workers``."""
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise VPIntegratorError(
            f"{key} must be an integer >= 1 (threads integrating at once; 1: one core; unset: every core, "
            f"{default_workers()} here); got {workers!r}", key=key)
    return int(workers)


def encode_chunks(y: np.ndarray, start: int, n_traj: int, chunks: tuple[int, int, int],
                  level: int) -> list[tuple[tuple[int, int, int], bytes]] | None:
    """HDF5 chunks (offset, shuffled + deflated bytes) of rows ``start : start + len(y)`` of ``/y``.

    None when the block does not cover whole chunk rows (it does not start on a chunk boundary, or ends
    inside a chunk row before the end of the data set): the caller writes it the ordinary way.
    """
    k, n_states, dim = y.shape
    c_traj, c_steps, c_dim = chunks
    stop = start + k
    if c_dim != dim or start % c_traj or (stop % c_traj and stop != n_traj):
        return None
    out = []
    for a in range(0, k, c_traj):
        for s in range(0, n_states, c_steps):
            block = y[a : a + c_traj, s : s + c_steps]
            if block.shape != (c_traj, c_steps, dim):  # an edge chunk: HDF5 stores it whole, zero-padded
                full = np.zeros((c_traj, c_steps, dim))
                full[: block.shape[0], : block.shape[1]] = block
                block = full
            raw = np.ascontiguousarray(block, dtype="<f8").view(np.uint8).reshape(-1, 8)
            shuffled = np.ascontiguousarray(raw.T)  # HDF5's shuffle filter: byte 0 of every value, then byte 1, ...
            out.append(((start + a, s, 0), zlib.compress(shuffled, level)))
    return out


def run_chunks(starts: Iterable[int], workers: int, task: Callable[[int], Any], sink: Callable[[int, Any], None]) -> None:
    """``sink(start, task(start))`` for every start, in order; ``task`` on ``workers`` threads.

    An error or interrupt cancels the chunks not yet started, waits for the running ones (a compiled
    chunk cannot be stopped half way) and propagates.
    """
    pending: deque[tuple[int, Future]] = deque()
    todo = iter(starts)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vp-gen-worker")
    try:
        for start in todo:
            pending.append((start, pool.submit(task, start)))
            if len(pending) > workers:
                break
        while pending:
            start, future = pending.popleft()
            result = future.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(task, nxt)))
            sink(start, result)
            del result
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
