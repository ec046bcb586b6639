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


#: the epochs of the page's training (its vp-train command and vp.fit call)
EPOCHS = 30


def _bad_file_block() -> str:
    return next(b for b in _blocks("text") if b.startswith("mine.h5:"))


def _table_block() -> str:
    return next(b for b in _blocks("text") if b.startswith("method "))


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
        block = block.replace(f"epochs={EPOCHS}", "epochs=1")  # the training the page measures: test_..._measured
        exec(compile(block, f"{PAGE.name}, block {i + 1}", "exec"), namespace)
    assert not namespace["traj"].has_system and namespace["traj"].y.shape == (60, 41, 2)
    if has_xarray:
        np.testing.assert_array_equal(vp.read_trajectories("mine_xr.h5").y, namespace["traj"].y)
    assert vp.read_trajectories("known.h5").system.name == "rigid_body_exp"

    commands = [line.split() for block in _blocks("bash") for line in block.splitlines() if line.strip()]
    assert [c[0] for c in commands] == ["vp-train", "vp-rollout"]
    train = [a if a != str(EPOCHS) else "1" for a in commands[0][1:]]
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
    quoted = [line for line in _bad_file_block().splitlines() if line.strip()]
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


@pytest.mark.slow  # 30 Levenberg-Marquardt epochs: about 20 s of CPU
def test_the_page_measured_what_it_says(tmp_path, monkeypatch):
    """The page's commands as they stand (30 epochs) give the training it describes and its rollout table:
    the same rows, no failed trajectory, the errors as quoted (up to the last digits of another BLAS)."""
    from vpintegrator.cli.rollout import main as rollout_main
    from vpintegrator.cli.train import main as train_main

    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks("python")[0], PAGE.name, "exec"), {})
    commands = [line.split() for block in _blocks("bash") for line in block.splitlines() if line.strip()]
    assert commands[0][commands[0].index("--epochs") + 1] == str(EPOCHS)
    result = _invoke(train_main, [*commands[0][1:], "--device", "cpu"])
    assert result.exit_code == 0, result.output
    log = Path("runs/mine/log.csv").read_text().splitlines()
    first, last = (dict(zip(log[0].split(","), map(float, row.split(",")))) for row in (log[1], log[-1]))
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    said = re.search(r"goes from ([\d.]+) after the first epoch to ([\d.]+e-\d+) after the 30th, the validation loss "
                     r"to ([\d.]+e-\d+)", page)
    assert said, "the page's sentence on the training losses"
    for value, quoted in ((first["train_loss"], said.group(1)), (last["train_loss"], said.group(2)),
                          (last["val_loss"], said.group(3))):
        assert f"{value:.2g}" == f"{float(quoted):.2g}", (value, quoted)
    result = _invoke(rollout_main, [*commands[1][1:], "--device", "cpu"])
    assert result.exit_code == 0, result.output
    header, row = (line.split() for line in _table_block().splitlines()[:2])
    got = dict(zip(header, next(line.split() for line in result.output.splitlines() if line.startswith("vpt "))))
    want = dict(zip(header, row))
    assert {k: got[k] for k in ("split", "valid_time", "n_traj", "failed", "reference")} == {
        k: want[k] for k in ("split", "valid_time", "n_traj", "failed", "reference")}
    assert float(got["final_rel_error"]) == pytest.approx(float(want["final_rel_error"]), rel=0.02)
    assert float(got["max_abs_cum_log_det_J"]) < 1e-12
