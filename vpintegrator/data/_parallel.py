"""Chunks of a data set compressed on the worker threads (the thread executor itself, ``run_chunks``, is
``vpintegrator.jobs.executors``; its names are re-exported here).

``encode_chunks`` compresses a block of ``/y`` into HDF5 chunks exactly as the file's filters would
(shuffle, then deflate at the writer's level), so that the worker threads compress in parallel and the
writing thread only stores the bytes (``write_direct_chunk``); HDF5 decompresses them like its own.
"""

from __future__ import annotations

import zlib

import numpy as np

from ..jobs.executors import check_workers, default_workers, run_chunks

__all__ = ["default_workers", "check_workers", "encode_chunks", "run_chunks"]


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
