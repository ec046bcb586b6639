"""MkDocs hook: the example notebooks as pages, with their outputs.

``docs/notebooks/executed/<name>.ipynb`` (the notebooks executed at their stored sizes by
``scripts/execute_notebooks.py``) become the pages ``notebooks/<name>.md``: Markdown cells as they are,
code cells as Python blocks, and their outputs below them (printed text and plain results as text blocks,
Markdown and HTML results as they are, every ``image/png`` figure as an image file beside the page,
errors as text). The notebook JSON is read with the standard library: the docs build executes nothing and
needs neither Jupyter nor torch. The pages are listed in mkdocs.yml's nav.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "docs" / "notebooks" / "executed"


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _fence(text: str, lang: str = "text") -> str:
    text = text.rstrip("\n")
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def render(nb: dict, stem: str) -> tuple[str, dict[str, bytes]]:
    """The Markdown page of executed notebook ``nb`` (file stem ``stem``) and its images
    (path relative to the page's folder -> PNG bytes)."""
    note = (f'!!! note "Executed notebook"\n    This page is the notebook [`{stem}.ipynb`]({stem}.ipynb) run top to '
            "bottom at its stored sizes (`python scripts/execute_notebooks.py`), with its outputs. Download it to "
            "run it yourself; timings and trained numbers differ from machine to machine.")
    parts: list[str] = []
    images: dict[str, bytes] = {}
    for i, cell in enumerate(nb.get("cells", [])):
        source = _text(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            parts.append(source)
            continue
        if cell.get("cell_type") != "code" or not source.strip():
            continue
        parts.append(_fence(source, "python"))
        for j, out in enumerate(cell.get("outputs", [])):
            kind = out.get("output_type")
            if kind == "stream":
                parts.append(_fence(_text(out.get("text", ""))))
            elif kind == "error":
                parts.append(_fence(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"))
            elif kind in ("execute_result", "display_data"):
                data = out.get("data", {})
                if "image/png" in data:
                    name = f"{stem}/cell{i}_{j}.png"
                    images[name] = base64.b64decode(_text(data["image/png"]))
                    parts.append(f"![output of cell {i}]({name})")
                elif "text/markdown" in data:
                    parts.append(_text(data["text/markdown"]))
                elif "text/html" in data:
                    parts.append(_text(data["text/html"]))
                elif "text/plain" in data:
                    parts.append(_fence(_text(data["text/plain"])))
    first_is_title = bool(parts) and parts[0].lstrip().startswith("# ")
    parts.insert(1 if first_is_title else 0, note)
    return "\n\n".join(parts) + "\n", images


def on_files(files, config):
    from mkdocs.structure.files import File

    for path in sorted(EXECUTED.glob("*.ipynb")):
        page, images = render(json.loads(path.read_text(encoding="utf-8")), path.stem)
        files.append(File.generated(config, f"notebooks/{path.stem}.md", content=page))
        for name, png in images.items():
            files.append(File.generated(config, f"notebooks/{name}", content=png))
    return files
