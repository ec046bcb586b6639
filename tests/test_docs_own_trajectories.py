"""docs/own_trajectories.md runs as it stands (issue 43, item 4): its Python blocks in order in one namespace
in a temporary folder (the xarray block skipped without xarray/h5netcdf), then its vp-train and vp-rollout
commands (one epoch), and every line the page quotes is what the package says. Repository file: skipped
against a wheel."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

PAGE = Path(__file__).resolve().parents[1] / "docs" / "own_trajectories.md"
pytestmark = [pytest.mark.skipif(not PAGE.is_file(), reason="docs/own_trajectories.md (repository file)"),
              pytest.mark.usefixtures("one_thread")]


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def _invoke(main, args):
    return CliRunner().invoke(main, args)


def test_the_page_runs(tmp_path, monkeypatch):
    import vpintegrator as vp
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    has_xarray = all(importlib.util.find_spec(m) for m in ("xarray", "h5netcdf"))
    for i, block in enumerate(_blocks("python")):
        if "import xarray" in block and not has_xarray:
            continue
        exec(compile(block, f"{PAGE.name}, block {i + 1}", "exec"), namespace)
    assert not namespace["traj"].has_system and namespace["traj"].y.shape == (60, 41, 2)
    if has_xarray:
        np.testing.assert_array_equal(vp.read_trajectories("mine_xr.h5").y, namespace["traj"].y)
    assert vp.read_trajectories("known.h5").system.name == "rigid_body_exp"

    commands = [line.split() for block in _blocks("bash") for line in block.splitlines() if line.strip()]
    assert [c[0] for c in commands] == ["vp-train", "vp-rollout"]
    train = [a if a != "50" else "1" for a in commands[0][1:]]
    result = _invoke(train_main, [*train, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    result = _invoke(rollout_main, [*commands[1][1:], "--device", "cpu"])
    assert result.exit_code == 0, result.output
    caption = re.search(r"\(`(Errors against the data: .*?)`\)", PAGE.read_text(encoding="utf-8"), re.S).group(1)
    assert Path("mine_roll.md").read_text().splitlines()[0] == " ".join(caption.split())

    # the refusals the page quotes, each the start of the real line
    quoted = re.findall(r"^\| `(--[a-z-]+) ?([^`]*)`.*?\| `(--[a-z-]+: [^`]*?)(?:\(\.\.\.\)|\.\.\.)?`",
                        PAGE.read_text(), re.M)
    asked = {"--integrators": "rk4,exact_flow", "--heldout": "3", "--t-end": "9", "--init": "rk4"}
    assert sorted(q[0] for q in quoted) == sorted(asked)
    for flag, _, said in quoted:
        result = _invoke(rollout_main, ["--data", "mine.h5", "--model", "vpt=runs/mine", flag, asked[flag],
                                        "--out", "refused.h5"])
        assert result.exit_code == 1 and not Path("refused.h5").exists()
        line = result.output.strip()
        assert "\n" not in line
        first, *rest = said.split(" ... ")
        assert line.startswith("Error: " + first.rstrip(". ")), (line, said)
        assert all(part.strip(" .") in line for part in rest), (line, said)


def test_the_quoted_bad_file_lines_are_the_real_ones(tmp_path, monkeypatch):
    import vpintegrator as vp

    monkeypatch.chdir(tmp_path)
    quoted = [line for line in _blocks("text")[0].splitlines() if line.strip()]
    t = np.arange(5) * 0.1
    nan = np.zeros((2, 5, 3))
    nan[1, 2, 0] = np.nan
    files = [dict(t=t), dict(t=t[::-1], y=np.zeros((2, 5, 3))), dict(t=t, y=np.zeros((5, 3))), dict(t=t, y=nan)]
    assert len(quoted) == len(files)
    for want, arrays in zip(quoted, files):
        with h5py.File("mine.h5", "w") as f:
            for key, value in arrays.items():
                f[key] = value
        with pytest.raises(vp.VPIntegratorError) as err:
            vp.read_trajectories("mine.h5")
        assert str(err.value) == want
