"""Chunks of a data set compressed on the worker threads (the thread executor itself, ``run_chunks``, is
``vpintegrator.jobs.executors``; its names are re-exported here).

``encode_chunks`` compresses a block of ``/y`` into HDF5 chunks for the file's filters (shuffle, then
deflate), so that the worker threads compress in parallel and the writing thread only stores the bytes
(``write_direct_chunk``); HDF5's deflate filter (any zlib) decompresses them like its own.

Each chunk is one zlib stream (``deflate_planes``) of the shuffled bytes in which the byte planes that look
random are kept in *stored* deflate blocks, and the others are deflated at the writer's level. On float64
trajectories the six low bytes of every value are noise (deflate saves nothing there: 1.001 of their size)
and all of the saving is in the sign/exponent bytes; storing the noise costs a copy where deflating it costs
~5x the CPU of the whole rest, for a file no larger (docs/benchmarks.md, ``scripts/bench_gen_compression.py``).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ..jobs.executors import check_workers, default_workers, run_chunks

__all__ = ["default_workers", "check_workers", "deflate_planes", "encode_chunks", "run_chunks"]

#: A byte plane whose sampled bytes carry at least this many bits each (of 8) is stored, not deflated:
#: Huffman coding could save at most (8 - H) / 8 of it, under 2.5 %, and LZ77 finds nothing in noise.
RANDOM_BITS = 7.8
# Bytes of a plane sampled for its entropy (every k-th byte): enough that the estimate of a uniform
# plane (biased low by about 255 / (2 n ln 2) bits) stays above RANDOM_BITS.
_SAMPLE = 4096
_STORED_MAX = 65535  # the longest stored deflate block


def encode_chunks(y: np.ndarray, start: int, n_traj: int, chunks: tuple[int, int, int],
                  level: int) -> list[tuple[tuple[int, int, int], bytes]] | None:
    """HDF5 chunks (offset, shuffled + deflated bytes: ``deflate_planes``) of rows ``start : start + len(y)``
    of ``/y``.

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
            out.append(((start + a, s, 0), deflate_planes(shuffled, level)))
    return out


def random_planes(planes: np.ndarray) -> np.ndarray:
    """Which rows of ``planes`` (n_planes, n) uint8 look random: order-0 entropy of every k-th byte (about
    ``_SAMPLE`` of them) at least ``RANDOM_BITS`` bits per byte. Shape (n_planes,) bool."""
    n_planes, n = planes.shape
    sample = planes[:, :: max(1, n // _SAMPLE)]  # (n_planes, m)
    m = sample.shape[1]
    offsets = np.arange(n_planes, dtype=np.intp)[:, None] * 256  # plane i counts in bins 256 i .. 256 i + 255
    counts = np.bincount((sample + offsets).ravel(), minlength=256 * n_planes).reshape(n_planes, 256)
    p = counts / m
    bits = -(p * np.log2(np.where(p > 0, p, 1.0))).sum(axis=1)
    return bits >= RANDOM_BITS


def _zlib_header(level: int) -> bytes:
    """RFC 1950's two bytes as zlib itself writes them for ``level`` (a 32 KiB window, its FLEVEL)."""
    return zlib.compress(b"", level)[:2]


def deflate_planes(planes: np.ndarray, level: int) -> bytes:
    """One zlib stream (RFC 1950/1951, what ``zlib.decompress`` and HDF5's deflate filter read) of
    ``planes`` (n_planes, n) uint8, C-contiguous, row after row: runs of rows that look random
    (``random_planes``) as stored blocks, the other runs deflated at ``level``, each run ending on a byte
    boundary (a sync flush) so that the next starts a block of its own; the Adler-32 of all the bytes last."""
    planes = np.ascontiguousarray(planes, dtype=np.uint8)
    stored = random_planes(planes)
    n_planes, n = planes.shape
    flat = planes.reshape(-1).data  # the bytes, row after row (a memoryview of format "B")
    out = [_zlib_header(level)]
    a = 0
    while a < n_planes:
        b = a + 1
        while b < n_planes and stored[b] == stored[a]:
            b += 1
        last = b == n_planes
        data = flat[a * n : b * n]
        if stored[a]:
            for i in range(0, len(data), _STORED_MAX):
                piece = data[i : i + _STORED_MAX]
                final = last and i + _STORED_MAX >= len(data)
                # BFINAL, BTYPE 00 and the padding to the byte: one byte; then LEN and its one's complement
                out += [struct.pack("<BHH", 1 if final else 0, len(piece), len(piece) ^ 0xFFFF), piece]
        else:
            deflate = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw deflate: the header is ours
            out += [deflate.compress(data), deflate.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)]
        a = b
    out.append(struct.pack(">I", zlib.adler32(flat)))
    return b"".join(out)
