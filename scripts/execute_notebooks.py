"""Execute the example notebooks at their stored sizes and keep the executed copies for the docs site.

    python scripts/execute_notebooks.py [NAME ...]

Runs each ``docs/notebooks/<name>.ipynb`` (stored without outputs; tests/test_notebooks.py runs them at
small sizes) top to bottom in a fresh kernel (nbclient; the ``test`` extra), in a temporary working
directory, one thread, ``MPLBACKEND=Agg``, and writes the notebook with its outputs (text, tables, the
``image/png`` of every figure) to ``docs/notebooks/executed/<name>.ipynb``. The docs build renders those
copies as pages (docs/hooks/notebooks.py); it executes nothing itself (the ``docs`` extra has no torch).
Run it again after changing a notebook: tests/test_docs_notebooks.py checks that every executed copy has the
code of its notebook. Per-cell timing metadata is dropped, and so is any output line naming the temporary
directory (none is expected: the notebooks write under a relative ``WORKDIR``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "docs" / "notebooks"
EXECUTED = NOTEBOOKS / "executed"


def execute(name: str) -> Path:
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(OMP_NUM_THREADS="1", MPLBACKEND="Agg")
        start = time.perf_counter()
        nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                                resources={"metadata": {"path": tmp}}).execute()
        seconds = time.perf_counter() - start
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            for out in cell.get("outputs", []):
                if "text" in out and tmp in out["text"]:
                    out["text"] = "\n".join(line for line in out["text"].splitlines() if tmp not in line) + "\n"
    nb.metadata.pop("widgets", None)
    EXECUTED.mkdir(exist_ok=True)
    path = EXECUTED / name
    nbformat.write(nb, path)
    print(f"{name}: executed in {seconds:.0f} s -> {path.relative_to(ROOT)}", flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook file names (default: every docs/notebooks/*.ipynb)")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    for name in names:
        execute(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
