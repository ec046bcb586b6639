"""Issue 36: a full disk (ENOSPC), an I/O error or a read-only file system while writing: one line, no
temporary file left, the earlier output intact, for the writers that wrap the OS error their own way
(torch's "file write failed", h5py's and matplotlib's OSError). The device errors are simulated."""

from __future__ import annotations

import errno
import hashlib

import click
import pytest
from click.testing import CliRunner

from vpintegrator._io import atomic_path
from vpintegrator.errors import VPIntegratorError


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EIO, "Input/output error"),
    RuntimeError("[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/0: "
                 "file write failed"),
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1536 vs 1430"),  # a short write
    OSError("Can't write data (file write failed: time = ..., errno = 28, error message = 'No space left on device')"),
])
def test_atomic_write_on_a_full_disk_is_one_line_and_keeps_the_earlier_file(tmp_path, failure):
    target = tmp_path / "out.bin"
    target.write_bytes(b"earlier")
    with pytest.raises(VPIntegratorError, match=r"out.bin: cannot write it: .*nothing was written .*earlier out.bin "
                                                r"is intact\): free space on"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise failure
    assert target.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(ValueError, match="mine"):
        with atomic_path(tmp_path / "x"):
            raise ValueError("mine")
    assert list(tmp_path.iterdir()) == []


def test_save_model_on_a_full_disk(tmp_path, monkeypatch):
    import torch

    from vpintegrator.models import build_model, save_model

    model = build_model("vpff", dim=3)
    path = save_model(model, tmp_path / "m.pt")
    before = _sha(path)

    def full(*args, **kwargs):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(VPIntegratorError, match=r"m.pt: cannot write it: write failed \(torch\)"):
        save_model(model, path, overwrite=True)
    assert _sha(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_a_figure_on_a_full_disk(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vpintegrator.plotting.style import save_figure

    fig = plt.figure()
    plt.plot([0, 1])

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fig, "savefig", full)
    with pytest.raises(VPIntegratorError, match=r"f.png: cannot write it: No space left on device"):
        save_figure(fig, tmp_path / "f", formats=["png"])
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_the_clis_turn_a_device_error_into_one_line():
    from vpintegrator.cli._common import cli_errors

    @click.command()
    @cli_errors
    def cmd():
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/log.csv")

    res = CliRunner().invoke(cmd, [])
    assert res.exit_code == 1 and res.output == (
        "Error: cannot write runs/x/log.csv: No space left on device; free space or write elsewhere (files written "
        "completely before are intact)\n"), res.output
