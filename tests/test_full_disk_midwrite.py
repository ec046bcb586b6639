"""Issue 36: the disk filling *during* vp-gen or vp-rollout. HDF5, after a write failed inside its C code,
could neither flush nor close the file and crashed the process at exit (SIGSEGV, SIGBUS: exit -11, -7,
measured on main), leaving a one-line error half printed above h5py tracebacks. Now every HDF5 writer
stops with one line naming the output, removes its temporary files and keeps an earlier file intact.

A real mid-write failure inside HDF5's C code without root: a file size limit (``RLIMIT_FSIZE``, with
SIGXFSZ ignored) makes ``write(2)`` fail with EFBIG once the file passes it, which the package treats like
ENOSPC. An I/O error (EIO) is injected into the file object HDF5 writes through, at the k-th write."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

resource = pytest.importorskip("resource")  # POSIX
pytestmark = pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(os, "fork"),
                                reason="needs RLIMIT_FSIZE")

_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _run_limited(cmd: list[str], limit: int) -> subprocess.CompletedProcess:
    """``cmd`` with files limited to ``limit`` bytes (writes past it fail with EFBIG, SIGXFSZ ignored)."""
    import signal

    def limit_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(cmd, preexec_fn=limit_files, env=_ENV, capture_output=True, text=True, timeout=300)


def _one_line_about(res: subprocess.CompletedProcess, out: Path) -> None:
    assert res.returncode == 1, (res.returncode, res.stderr)  # not -11 (SIGSEGV) nor -7 (SIGBUS)
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"Error: {out}: cannot write it: File too large; nothing was written"), res.stderr


def _gen(out: Path, n_traj: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", str(n_traj), "--t-end", "10",
            "--out", str(out), "--quiet", *extra]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("limit", [5_000, 300_000], ids=["at-the-start", "in-the-middle"])
def test_vp_gen_stops_cleanly_when_the_disk_fills(tmp_path, workers, limit):
    out = tmp_path / "x.h5"
    subprocess.run(_gen(out, 3), check=True, env=_ENV, capture_output=True, timeout=300)  # an earlier file (and
    earlier = _sha(out)                                                                 # warm kernel caches)
    res = _run_limited([*_gen(out, 2000, "--workers", str(workers)), "--overwrite"], limit)
    _one_line_about(res, out)
    assert _sha(out) == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5"]  # no temporary file, no lock


def test_vp_gen_shards_stop_cleanly_when_the_disk_fills(tmp_path):
    out = tmp_path / "x.h5"
    subprocess.run(_gen(out, 2100, "--shard", "1/2"), check=True, env=_ENV, capture_output=True, timeout=300)
    first = _sha(tmp_path / "x.shard-1-of-2.h5")
    res = _run_limited(_gen(out, 2100, "--shard", "2/2"), 1_000)  # (the last shard writes the index too)
    _one_line_about(res, tmp_path / "x.shard-2-of-2.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.shard-1-of-2.h5"]  # no index of a missing shard
    assert _sha(tmp_path / "x.shard-1-of-2.h5") == first


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from vpintegrator.data import integrate, write_trajectories

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(40, 3))  # more than SCALAR_MAX_BATCH: --workers 2 cuts the work into blocks
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    path = tmp_path_factory.mktemp("data") / "data.h5"
    write_trajectories(path, integrate("rigid_body", y0, 0.2, 20, method="rk4"))
    return path


def _rollout(data: Path, out: Path, t_end: float, workers: int) -> list[str]:
    return [sys.executable, "-m", "vpintegrator.cli.rollout", "--data", str(data), "--integrators", "rk4,euler",
            "--t-end", str(t_end), "--no-volume", "--out", str(out), "--quiet", "--workers", str(workers)]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("limit", [20_000, 1_500_000], ids=["at-the-start", "in-the-middle"])
def test_vp_rollout_stops_cleanly_when_the_disk_fills(data, tmp_path, workers, limit):
    out = tmp_path / "r.h5"
    subprocess.run(_rollout(data, out, 2.0, workers), check=True, env=_ENV, capture_output=True, timeout=300)
    earlier = {p.name: _sha(p) for p in tmp_path.iterdir()}
    assert sorted(earlier) == ["r.csv", "r.h5", "r.md", "r.tex"]
    res = _run_limited([*_rollout(data, out, 400.0, workers), "--overwrite"], limit)
    _one_line_about(res, out)  # also with workers: the output is named, not a worker's part file
    assert {p.name: _sha(p) for p in tmp_path.iterdir()} == earlier  # no parts folder, no temporary file


# --------------------------------------------------------------------------- an I/O error, injected

_EIO_SCRIPT = textwrap.dedent("""
    import errno, sys
    import numpy as np
    import vpintegrator._io as io_
    from vpintegrator.data import TrajectoryWriter, read_trajectories, write_trajectories, Trajectories
    from vpintegrator.errors import VPIntegratorError

    fail_at, out = int(sys.argv[1]), sys.argv[2]
    calls = [0]
    class Failing:
        def __init__(self, raw):
            self._raw = raw
        def write(self, data):
            calls[0] += 1
            if calls[0] >= fail_at:
                raise OSError(errno.EIO, "Input/output error")
            return self._raw.write(data)
        def __getattr__(self, name):
            return getattr(self._raw, name)
    real_init = io_._GuardedFile.__init__
    def init(self, path):
        real_init(self, path)
        self.raw = Failing(self.raw)
    io_._GuardedFile.__init__ = init

    y = np.random.default_rng(1).normal(size=(500, 101, 3))
    t = np.arange(101) * 0.1
    try:
        with TrajectoryWriter(out, 500, 101, 3, t, {"system": "rigid_body"}, overwrite=True) as w:
            for i in range(0, 500, 50):
                w.write(i, y[i:i + 50])
    except VPIntegratorError as err:
        print("ERROR", err)
    io_._GuardedFile.__init__ = real_init
    # HDF5 is whole afterwards: this process writes and reads another file, and exits without a crash
    write_trajectories(out + ".next.h5", Trajectories(y=y[:2], t=t, meta={}))
    assert read_trajectories(out + ".next.h5").y.tobytes() == y[:2].tobytes()
    print("OK")
""")


@pytest.mark.parametrize("fail_at", [1, 3, 12])
def test_an_io_error_at_the_kth_write_is_one_line_and_hdf5_stays_whole(tmp_path, fail_at):
    out = tmp_path / "x.h5"
    from vpintegrator.data import Trajectories, write_trajectories

    write_trajectories(out, Trajectories(y=np.zeros((1, 101, 3)), t=np.arange(101) * 0.1, meta={}))
    earlier = _sha(out)
    res = subprocess.run([sys.executable, "-c", _EIO_SCRIPT, str(fail_at), str(out)], env=_ENV, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"ERROR {out}: cannot write it: Input/output error; nothing was written (the temporary file is removed, an "
        f"earlier x.h5 is intact): free space on {tmp_path} or write elsewhere", "OK"], res.stdout + res.stderr
    assert _sha(out) == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.h5", "x.h5.next.h5"]


def test_the_guarded_writer_writes_what_hdf5s_own_driver_does(tmp_path):
    """h5_writing (h5py's fileobj driver) stores the same datasets, chunks and attributes as h5py.File(path);
    only where HDF5 places small blocks in the file may differ (the drivers' aggregation features)."""
    import h5py

    from vpintegrator._io import h5_writing

    y = np.random.default_rng(0).normal(size=(300, 51, 3))

    def fill(f):
        f.attrs["a"] = "text"
        f.create_dataset("t", data=np.arange(51.0))
        f.create_dataset("y", data=y, chunks=(64, 51, 3), compression="gzip", compression_opts=4, shuffle=True)

    with h5py.File(tmp_path / "plain.h5", "w") as f:
        fill(f)
    with h5_writing(tmp_path / "guarded.h5") as f:
        fill(f)
    with h5py.File(tmp_path / "plain.h5", "r") as a, h5py.File(tmp_path / "guarded.h5", "r") as b:
        assert dict(a.attrs) == dict(b.attrs) and list(a) == list(b) == ["t", "y"]
        for k in ("t", "y"):
            assert a[k][()].tobytes() == b[k][()].tobytes() and a[k].chunks == b[k].chunks
        for i in range(b["y"].id.get_num_chunks()):  # the compressed chunks themselves
            ca, cb = a["y"].id.get_chunk_info(i), b["y"].id.get_chunk_info(i)
            assert ca.chunk_offset == cb.chunk_offset and ca.size == cb.size
            assert a["y"].id.read_direct_chunk(ca.chunk_offset)[1] == b["y"].id.read_direct_chunk(cb.chunk_offset)[1]


class _Full:
    """A file whose writes fail with ENOSPC (what the guarded file object writes to)."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._raw, name)


def test_h5_writing_raises_the_first_failed_write_naming_the_file(tmp_path):
    from vpintegrator._io import check_h5_write, h5_writing

    path = tmp_path / "f.h5"
    with pytest.raises(OSError) as info:
        with h5_writing(path) as f:
            f.create_dataset("t", data=np.zeros(10))
            f.flush()
            check_h5_write(f)  # nothing failed yet
            f._vpintegrator_guard.raw = _Full(f._vpintegrator_guard.raw)
            f.create_dataset("y", data=np.zeros((1000, 100)))
            f.flush()
            check_h5_write(f)
            raise AssertionError("check_h5_write did not raise")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
