"""What a reader meets first on three pages (issue 69): the README's Results are one headline line per finding,
each linked to the page (and heading) with its details; the GPU page opens with what was measured, how its
steps ended and the one command for one's own card, and is what ``scripts/gpu_report.py`` writes from its
logs; the training page's GPU command is one the script accepts. Repository files: skipped against the wheel."""

from __future__ import annotations

import re
import runpy
import subprocess
import unicodedata
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (CHECKOUT / "mkdocs.yml").is_file(), reason="repository files (not in the wheel)")
GPU_DIR = CHECKOUT / "docs" / "data" / "gpu_2026-11-26"


def _section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    following = re.search(r"^## ", text[start + len(heading):], re.M)
    return text[start:start + len(heading) + (following.start() if following else len(text))]


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page as GitHub makes them (lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2`` for repeats); code blocks hold no headings."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", unicodedata.normalize("NFC", heading.strip().lower())).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_the_readme_results_are_a_headline_table_linked_to_the_details():
    results = _section((CHECKOUT / "README.md").read_text(encoding="utf-8"), "## Results")
    rows = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith("| finding")]
    assert len(rows) >= 10
    for row in rows:
        assert len(row) <= 300, row  # a headline, not a paragraph
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 4 and all(cells), row  # finding, ours, against, details
        assert re.search(r"\d", cells[1]) or "inert" in cells[1], row  # a number (or the attention's verdict)
        links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", cells[3])
        assert links, row
        for target, anchor in links:
            assert (CHECKOUT / target).is_file(), row
            assert not anchor or anchor in _anchors(CHECKOUT / target), (row, anchor)
    # the long cells live on, whole, in docs/results.md
    full = _section((CHECKOUT / "docs" / "results.md").read_text(encoding="utf-8"), "## 7. Every finding in one table")
    assert "7-every-finding-in-one-table" in _anchors(CHECKOUT / "docs" / "results.md")
    for words in ("5 h 59 min", "its targets met by 5 of 5 seeds", "the network never pays for its training",
                  "attention adds nothing over the window here", "nothing learned wins", "1.7e-7 against seed 0's 2.7e-3"):
        assert words in full, words


def test_the_gpu_page_opens_with_what_was_measured_and_the_command_for_ones_own_card():
    page = (GPU_DIR / "gpu_report.md").read_text(encoding="utf-8")
    opening = page.split("\n## ", 1)[0]
    assert opening.index("What was measured") < opening.index("Written by")
    assert "FAILED (a check of the step did not hold" in opening and "pytest_gpu, parity" in opening
    assert "timed out (killed at the step's limit" in opening and "rollout" in opening
    report = runpy.run_path(str(CHECKOUT / "scripts" / "gpu_report.py"))
    assert f"On your own card: `{report['OWN_CARD']}`" in opening
    text, _ = report["report"](Path("docs/data/gpu_2026-11-26"))
    assert text == page  # the page is the script's, from the logs beside it


def test_the_gpu_commands_the_docs_name_are_accepted_by_the_script():
    """``bash scripts/gpu_check.sh`` alone is a usage error (exit 2); the docs name a mode. ``--dry-run`` runs
    nothing and needs no GPU."""
    docs = (CHECKOUT / "docs" / "training.md").read_text(encoding="utf-8")
    commands = set(re.findall(r"`(bash scripts/gpu_check\.sh[^`]*)`", docs))
    report = runpy.run_path(str(CHECKOUT / "scripts" / "gpu_report.py"))
    commands.add(report["OWN_CARD"])
    assert commands
    for command in commands:
        args = command.split()[2:]
        assert args, f"{command}: names no steps (exit 2)"
        proc = subprocess.run(["bash", str(CHECKOUT / "scripts" / "gpu_check.sh"), *args, "--dry-run"],
                              capture_output=True, text=True, timeout=60, cwd=CHECKOUT)
        assert proc.returncode == 0, (command, proc.stderr)
