"""docs/ecosystem.md runs as it stands (issue 33, item 11): its Python blocks, in order, in one namespace, on a
small data set in a temporary folder: xarray on the file and ``to_xarray`` (skipped without xarray), the
window datasets in a DataLoader and a plain training step, the Lightning recipe (skipped without Lightning:
not a dependency) and its checkpoint, which vp-rollout reads. Repository files: skipped against a wheel."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

PAGE = Path(__file__).resolve().parents[1] / "docs" / "ecosystem.md"
pytestmark = pytest.mark.skipif(not PAGE.is_file(), reason="docs/ecosystem.md (repository file, not in the wheel)")


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def _needs(block: str) -> list[str]:
    return [m for m in ("xarray", "lightning") if re.search(rf"^import {m}\b", block, re.M)]


@pytest.fixture
def data(tmp_path, monkeypatch):
    from vpintegrator.data import generate, load_spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # the page's `vp-gen rigid_body --n-traj 100 --t-end 20`, smaller
    generate(load_spec("rigid_body", n_traj=20, t_end=20.0), tmp_path / "rigid_body.h5", workers=1)
    return tmp_path


def test_the_page_has_the_sections_it_promises():
    blocks = _blocks()
    assert len(blocks) == 5
    assert "xr.open_dataset" in blocks[0] and "to_xarray" in blocks[1]
    assert "DataLoader(train" in blocks[2] and "loss.backward()" in blocks[3]
    assert "class WindowModule(L.LightningModule)" in blocks[4] and "trainer.fit" in blocks[4]


def test_the_code_on_the_page_runs(data):
    import torch

    namespace: dict = {}
    ran = []
    for block in _blocks():
        missing = [m for m in _needs(block) if importlib.util.find_spec(m) is None]
        if "xarray" in missing:  # the xarray blocks only read; the rest of the page does without them
            continue
        if missing:
            pytest.skip(f"{missing[0]} is not installed (the page's first {len(ran)} blocks ran)")
        code = block.replace("max_epochs=20", "max_epochs=1")
        if "import vpintegrator as vp" not in code and "vp" not in namespace:
            code = "import vpintegrator as vp\n" + code
        exec(compile(code, f"{PAGE.name}, block {len(ran) + 1}", "exec"), namespace)
        ran.append(block)
    x, target = namespace["x"], namespace["target"]
    assert x.shape == target.shape and x.shape[1:] == (3, 3)  # the last batch of the epoch
    assert torch.isfinite(namespace["loss"]).item()
    if "module" in namespace:  # the Lightning recipe ran: its checkpoint is a vpintegrator model
        import vpintegrator as vp

        model = vp.load_model(data / "vpt_lightning.pt")
        assert model.trained_on["dt"] == pytest.approx(0.1) and model.trained_on["system"] == "rigid_body"
        from vpintegrator.cli.rollout import main as rollout_main

        result = CliRunner().invoke(rollout_main, ["--model", "vpt_lightning.pt", "--data", "rigid_body.h5",
                                                   "--integrators", "rk4", "--t-end", "2", "--out", "r.h5", "-q"])
        assert result.exit_code == 0, result.output
