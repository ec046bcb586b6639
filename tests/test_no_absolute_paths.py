"""No absolute path of the producing machine in any output or shipped file (issue 33, item 5): the
shipped pretrained files and their provenance.json, and every file of a fresh vp-gen / vp-train /
vp-rollout run made with absolute paths and a console script's absolute path as ``sys.argv[0]``."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import vpintegrator
from vpintegrator.cli import gen, rollout, train

PACKAGE = Path(vpintegrator.__file__).resolve().parent
#: absolute paths of the build machine that a file could carry (its home, its checkout, run directories)
_ABS = re.compile(rb"(?<![\w.])/(?:work|home|root|tmp|usr|opt|scratch|Users|var)/[\w.\-/]+")


def _blobs(path: Path):
    """The bytes of ``path`` to scan: a torch zip file's members (stored uncompressed), else the file."""
    if path.suffix == ".pt":
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                yield f"{path.name}:{name}", z.read(name)
    else:
        yield path.name, path.read_bytes()


def _found(paths, needles=()) -> list[str]:
    hits = []
    for p in paths:
        for where, blob in _blobs(p):
            hits += [f"{where}: {m[:80]!r}" for m in _ABS.findall(blob)]
            hits += [f"{where}: {n!r}" for n in needles if n.encode() in blob]
    return hits


def test_shipped_pretrained_files_hold_no_absolute_paths():
    shipped = sorted((PACKAGE / "pretrained").glob("*.pt")) + [PACKAGE / "pretrained" / "provenance.json"]
    assert len(shipped) >= 7
    assert _found(shipped) == []


def test_a_fresh_runs_outputs_hold_no_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    work = tmp_path.resolve()
    data, run, roll = work / "d.h5", work / "run", work / "r.h5"

    def invoke(command, script, *args):
        monkeypatch.setattr(sys, "argv", [f"/opt/venv/bin/{script}", *map(str, args)])
        result = runner.invoke(command.main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output

    invoke(gen, "vp-gen", "rigid_body_paper", "--n-traj", 8, "--t-end", 1.6, "--out", data, "-q")
    invoke(train, "vp-train", "--data", data, "--model", "vpt", "--seq-len", 2, "--epochs", 1, "--out", run,
           "--set", "model.n_blocks=1", "--set", "test_fraction=0.25", "-q")
    invoke(rollout, "vp-rollout", "--data", data, "--model", run, "--model", "pretrained:rigid_body_vpff",
           "--integrators", "rk4", "--out", roll, "--n-traj", 2, "-q")
    outputs = [p for p in work.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert {p.name for p in outputs} >= {"d.h5", "best.pt", "last.pt", "summary.json", "config.toml", "r.h5"}
    needles = [str(work), str(Path.cwd()), str(Path(vpintegrator.__file__).resolve().parent.parent), "/opt/venv"]
    assert _found(outputs, needles) == []
    import json

    command = json.loads((run / "summary.json").read_text())["provenance"]["command"]
    assert command[:3] == ["vp-train", "--data", "d.h5"]
