"""The notebooks on the docs site, rendered with their outputs (issue 33, item 8).

Every notebook of docs/notebooks/ has an executed copy in docs/notebooks/executed/ (scripts/execute_notebooks.py)
with the same code, its figures as ``image/png`` and no error; docs/hooks/notebooks.py turns each copy into a
page that holds the code, the printed output and the figures as image files; mkdocs.yml lists the pages.
Repository files, not in the wheel: skipped against an installed wheel."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "docs" / "notebooks"
pytestmark = pytest.mark.skipif(not (NOTEBOOKS / "executed").is_dir(), reason="docs/ (repository files)")
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def _hook():
    spec = importlib.util.spec_from_file_location("notebooks_hook", ROOT / "docs" / "hooks" / "notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", NAMES)
def test_executed_copy_is_the_notebook_with_its_outputs(name):
    source = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    text = (NOTEBOOKS / "executed" / name).read_text(encoding="utf-8")
    executed = json.loads(text)
    assert _code(executed) == _code(source), f"{name} changed: run python scripts/execute_notebooks.py {name}"
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1  # the figures, shown inline
    assert not re.search(r"(?<![\w.])/(tmp|root|home|work)/", text)  # nothing of the machine that ran it


@pytest.mark.parametrize("name", NAMES)
def test_page_holds_code_output_and_figures(name):
    nb = json.loads((NOTEBOOKS / "executed" / name).read_text(encoding="utf-8"))
    stem = Path(name).stem
    page, images = _hook().render(nb, stem)
    assert page.startswith("# ")  # the notebook's title heads the page
    assert f"({stem}.ipynb)" in page  # the notebook to download
    for code in _code(nb):
        if code.strip():
            assert code.rstrip("\n") in page
    printed = [("".join(o["text"])).strip() for c in nb["cells"] if c["cell_type"] == "code"
               for o in c["outputs"] if o["output_type"] == "stream"]
    assert printed and all(line in page for text in printed for line in text.splitlines())
    assert images and all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in images.values())
    for ref in images:
        assert f"]({ref})" in page
    assert f"notebooks/{stem}.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_hook_renders_each_output_kind():
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["# Title"]},
        {"cell_type": "code", "source": "print('x ```')", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": ["x ```\n"]},
            {"output_type": "execute_result", "data": {"text/plain": "42"}},
            {"output_type": "display_data", "data": {"text/html": "<b>b</b>", "text/plain": "b"}},
            {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}]}]}
    page, images = _hook().render(nb, "nb")
    assert page.index("# Title") < page.index("Executed notebook") < page.index("```python")
    assert "````text\nx ```\n````" in page and "```text\n42\n```" in page
    assert "<b>b</b>" in page and "ValueError: bad" in page and images == {}
