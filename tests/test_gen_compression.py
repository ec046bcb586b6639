"""/y's default compression (shuffle + deflate, the noise bytes in stored blocks) and vp-gen's exit.

``deflate_planes`` is held against zlib's own inflate (the reference decoder every HDF5 uses): every stream
decodes to the bytes it was given, the rows that look random are there verbatim (stored), the others are
smaller than they were. Files: the default file reads back bit for bit against the same run kept in memory
and against HDF5's own gzip filter; a file written by HDF5's filter (as before) still reads; every value of
``--compression`` sets its filter; a bad one is one line. The process: vp-gen run as a program (it ends with
``os._exit``) prints everything, writes a whole file, and never imports torch; ``--print-config`` imports no
numba.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.cli.gen import main as vp_gen
from vpintegrator.data import generate, load_spec, read_trajectories, write_trajectories
from vpintegrator.data._parallel import deflate_planes, encode_chunks, random_planes
from vpintegrator.data.trajectories import Trajectories

ROOT = Path(__file__).resolve().parents[1]


def _shuffled(y: np.ndarray) -> np.ndarray:
    """HDF5's shuffle filter written out: byte i of every float64 value, for i = 0 .. 7 (rows)."""
    raw = np.ascontiguousarray(y, dtype="<f8").view(np.uint8).reshape(-1, 8)
    return np.array([[value[i] for value in raw] for i in range(8)], dtype=np.uint8)


def _planes(kind: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if kind == "float64 states":  # the six low bytes noise, the top two not
        return _shuffled(rng.normal(size=(40, 25, 3)))
    if kind == "noise, stored runs over 65535 bytes":
        return rng.integers(0, 256, size=(3, 70_000), dtype=np.uint8)
    if kind == "zeros":
        return np.zeros((8, 5000), dtype=np.uint8)
    if kind == "noise between constant rows":
        x = rng.integers(0, 256, size=(5, 9000), dtype=np.uint8)
        x[[0, 2, 4]] = 7
        return x
    if kind == "one byte":
        return np.array([[3]], dtype=np.uint8)
    raise AssertionError(kind)


KINDS = ["float64 states", "noise, stored runs over 65535 bytes", "zeros", "noise between constant rows", "one byte"]


@pytest.mark.parametrize("level", [1, 4, 9])
@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_inflates_to_its_bytes(kind, level):
    planes = _planes(kind)
    assert zlib.decompress(deflate_planes(planes, level)) == planes.tobytes()


@pytest.mark.parametrize("kind", KINDS)
def test_noise_rows_are_stored_verbatim_and_the_others_deflated(kind):
    planes = _planes(kind)
    stream = deflate_planes(planes, 4)
    noise = random_planes(planes)
    for row, is_noise in zip(planes, noise):
        # a stored row is in the stream as it is (its first 256 bytes: no 65535-byte block ends in them here)
        assert (row[:256].tobytes() in stream) == bool(is_noise) or row.size < 64
    deflated = planes[~noise]
    if deflated.size >= 64:  # rows that are not noise cost less than their size
        assert len(stream) < planes.size - deflated.size + deflated.size * 0.9


def test_the_six_low_bytes_of_float64_states_are_the_noise():
    noise = random_planes(_planes("float64 states"))
    assert noise.tolist() == [True] * 6 + [False] * 2


def test_encoded_chunks_are_no_larger_than_zlib_on_every_byte():
    """The saving is all in the bytes that are not noise: the file is no larger than HDF5's own gzip-4 one."""
    y = np.random.default_rng(2).normal(size=(128, 50, 3)).cumsum(axis=1)
    ours = sum(len(b) for _, b in encode_chunks(y, 0, 128, (64, 50, 3), 4))
    theirs = sum(len(zlib.compress(_shuffled(y[a : a + 64]), 4)) for a in (0, 64))
    assert ours <= theirs * 1.005


@pytest.mark.parametrize("workers", [1, 2])
def test_the_default_file_reads_back_bit_for_bit(tmp_path, workers):
    """A run written with the default compression (whole chunk rows: the writer's encoder; the short last
    rows: HDF5's filter) against the same run kept in memory, and against HDF5's own gzip of the same array."""
    spec = load_spec("rigid_body", n_traj=150, t_end=2.0, chunk_size=70)
    path = generate(spec, out=tmp_path / "d.h5", workers=workers)
    kept = generate(spec, workers=1)
    back = read_trajectories(path)
    assert back.y.tobytes() == kept.y.tobytes() and back.t.tobytes() == kept.t.tobytes()
    with h5py.File(path, "r") as f:
        assert (f["y"].compression, f["y"].compression_opts, f["y"].shuffle) == ("gzip", 4, True)
        with h5py.File(tmp_path / "h5.h5", "w") as g:
            g.create_dataset("y", data=kept.y, chunks=f["y"].chunks, compression="gzip", compression_opts=4,
                             shuffle=True)
            assert g["y"][:].tobytes() == f["y"][:].tobytes()


def test_a_file_written_by_hdf5s_own_filter_still_reads(tmp_path):
    """Files written before (every chunk through HDF5's shuffle + gzip filter) read as they did."""
    y = np.random.default_rng(3).normal(size=(70, 11, 3))
    t = np.arange(11) * 0.1
    write_trajectories(tmp_path / "new.h5", Trajectories(y=y, t=t, meta={"system": "rigid_body"}))
    with h5py.File(tmp_path / "new.h5", "r") as new, h5py.File(tmp_path / "old.h5", "w") as old:
        for key, value in new.attrs.items():
            old.attrs[key] = value
        old.create_dataset("t", data=t)
        old.create_dataset("y", data=y, chunks=new["y"].chunks, compression="gzip", compression_opts=4, shuffle=True)
    assert read_trajectories(tmp_path / "old.h5").y.tobytes() == y.tobytes()
    assert read_trajectories(tmp_path / "new.h5").y.tobytes() == y.tobytes()


ARGS = ["rigid_body", "--n-traj", "80", "--t-end", "1", "--chunk-size", "40", "--quiet", "--overwrite"]


@pytest.mark.parametrize("value, filter_name", [("gzip", "gzip"), ("lzf", "lzf"), ("none", None)])
def test_every_compression_value_sets_its_filter(tmp_path, value, filter_name):
    result = CliRunner().invoke(vp_gen, [*ARGS, "--out", str(tmp_path / "c.h5"), "--compression", value])
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert f["y"].compression == filter_name and f["y"].shuffle == (filter_name is not None)
    kept = generate(load_spec("rigid_body", n_traj=80, t_end=1.0, chunk_size=40), workers=1)
    assert read_trajectories(tmp_path / "c.h5").y.tobytes() == kept.y.tobytes()


def test_a_bad_compression_is_one_line(tmp_path):
    result = CliRunner().invoke(vp_gen, [*ARGS, "--out", str(tmp_path / "c.h5"), "--compression", "zip"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0] == "Error: --compression must be 'gzip' or 'lzf' or 'none'; got 'zip'"
    assert not (tmp_path / "c.h5").exists()


def _process(*args: str) -> subprocess.CompletedProcess:
    """vp-gen as a program, stdout a pipe and block-buffered (PYTHONUNBUFFERED off): what it prints must be
    flushed before its ``os._exit``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "vpintegrator.cli.gen", *args], env=env, capture_output=True,
                          text=True)


def test_the_process_prints_everything_and_writes_a_whole_file(tmp_path):
    out = tmp_path / "p.h5"
    done = _process(*ARGS[:-2], "--overwrite", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"wrote {out}" and "max relative invariant drift" in done.stdout
    kept = generate(load_spec("rigid_body", n_traj=80, t_end=1.0, chunk_size=40), workers=1)
    assert read_trajectories(out).y.tobytes() == kept.y.tobytes()
    bad = _process(*ARGS, "--out", str(tmp_path / "q.h5"), "--compression", "zip")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip() == "Error: --compression must be 'gzip' or 'lzf' or 'none'; got 'zip'"


def _modules_after(args: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after ``vp-gen ARGS`` (``main`` called in it)."""
    code = ("import sys; from vpintegrator.cli.gen import main; "
            f"main({args!r}, standalone_mode=False); "
            f"print(sorted(m for m in {modules!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_a_whole_run_never_imports_torch(tmp_path):
    assert _modules_after([*ARGS, "--out", str(tmp_path / "x.h5")], ("torch", "matplotlib", "scipy.integrate")) == []


def test_print_config_does_without_numba(tmp_path):
    args = [*ARGS, "--out", str(tmp_path / "x.h5"), "--print-config"]
    assert _modules_after(args, ("numba", "vpintegrator.data.generation")) == []
    assert not (tmp_path / "x.h5").exists()


def test_main_inside_another_program_exits_as_any_command(monkeypatch, tmp_path):
    """Only vp-gen itself ends with os._exit: ``main()`` from another program raises SystemExit as click does."""

    def _exit(code):
        raise AssertionError(f"os._exit({code}) called from inside another program")

    monkeypatch.setattr(os, "_exit", _exit)
    monkeypatch.setattr(sys, "argv", ["my_program.py", *ARGS, "--out", str(tmp_path / "x.h5"), "--print-config"])
    with pytest.raises(SystemExit) as stop:
        vp_gen()
    assert stop.value.code == 0
