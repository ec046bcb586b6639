"""/y's compression alone: CPU and file size of each filter on the same trajectories (vp-gen's array).

The array: ``vp-gen rigid_body --n-traj N --t-end 20 --dt 0.2 --rtol 1e-12 --atol 1e-12`` kept in memory
(``generate(..., workers=1)``; (N, 101, 3) float64, N = 2*10^4 by default), in vp-gen's HDF5 chunks. Each
candidate writes it to a file in the same way: HDF5's own filters (``ds[...] = y``: gzip at levels 4 (what
``--compression gzip`` wrote before 2026-11-27) and 1, with and without shuffle; lzf with and without
shuffle; none) and the writer's encoder (``encode_chunks``: shuffle, the byte planes that look random in
stored deflate blocks, the rest deflated at level 4; ``write_direct_chunk``), which is what
``--compression gzip`` writes now. Timed: this thread's CPU time (``time.thread_time``; one thread does all
of it) of the write, and of a read back, candidates interleaved, minimum over ``--repeat``; every file is
checked to read back bit for bit. Prints the size as a fraction of the raw array and the CPU relative to the
writer's encoder, with the load average before and after.

Run: ``python scripts/bench_gen_compression.py [--n-traj 20000] [--repeat 5]`` (a minute on 2 cores).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import click
import h5py
import numpy as np

from vpintegrator.data import generate, load_spec
from vpintegrator.data._parallel import encode_chunks
from vpintegrator.data.trajectory_files import _chunk_shape

#: name -> HDF5 filter arguments, or None for the writer's encoder
CANDIDATES: dict[str, dict | None] = {
    "none": {},
    "gzip-4 + shuffle, HDF5's filter (the default before)": dict(compression="gzip", compression_opts=4, shuffle=True),
    "gzip-1 + shuffle, HDF5's filter": dict(compression="gzip", compression_opts=1, shuffle=True),
    "gzip-4, HDF5's filter": dict(compression="gzip", compression_opts=4),
    "lzf": dict(compression="lzf"),
    "lzf + shuffle (--compression lzf)": dict(compression="lzf", shuffle=True),
    "gzip-4 + shuffle, noise planes stored (--compression gzip)": None,
}


def _write(path: Path, y: np.ndarray, chunks: tuple[int, int, int], filters: dict | None) -> None:
    with h5py.File(path, "w") as f:
        if filters is not None:
            f.create_dataset("y", data=y, chunks=chunks, **filters)
            return
        ds = f.create_dataset("y", shape=y.shape, dtype=np.float64, chunks=chunks, compression="gzip",
                              compression_opts=4, shuffle=True)
        for offset, data in encode_chunks(y, 0, y.shape[0], chunks, 4):
            ds.id.write_direct_chunk(offset, data)


@click.command()
@click.option("--n-traj", default=20000, show_default=True)
@click.option("--repeat", default=5, show_default=True)
def main(n_traj: int, repeat: int) -> None:
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"load average before: {load()}; {os.cpu_count()} CPUs")
    spec = load_spec("rigid_body", n_traj=n_traj, t_end=20.0, dt=0.2, rtol=1e-12, atol=1e-12)
    y = generate(spec, workers=1).y
    chunks = _chunk_shape(*y.shape)
    write: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    read: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    size: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            for i, (name, filters) in enumerate(CANDIDATES.items()):
                path = Path(tmp) / f"{i}.h5"
                start = time.thread_time()
                _write(path, y, chunks, filters)
                write[name].append(time.thread_time() - start)
                start = time.thread_time()
                with h5py.File(path, "r") as f:
                    back = f["y"][:]
                    size[name] = f["y"].id.get_storage_size()
                read[name].append(time.thread_time() - start)
                if back.tobytes() != y.tobytes():
                    raise SystemExit(f"{name}: the file does not read back bit for bit")
                path.unlink()
    ours = min(write["gzip-4 + shuffle, noise planes stored (--compression gzip)"])
    print(f"/y {y.shape} float64 ({y.nbytes / 2**20:.1f} MiB), HDF5 chunks {chunks}; CPU s of this thread, "
          f"min of {repeat}; every file read back bit for bit")
    for name in CANDIDATES:
        print(f"  {name:60s} write {min(write[name]):.3f} s ({min(write[name]) / ours:4.1f}x), "
              f"read {min(read[name]):.3f} s, size {size[name] / y.nbytes:.3f} of raw")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
