"""Every docs page leads with its answer: its first screen (the first 20 lines, title included) holds a number
(what wins, by how much, at what cost) and the one command that re-makes it (a ``vp-...`` or ``python ...``
command, in backticks or in a code block); and no line of a page is over 300 characters (verdicts as tables or
short bullets), but for the lines ``LONG_LINES`` names with the reason they stay. Repository files: skipped
against the wheel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
DOCS = CHECKOUT / "docs"
pytestmark = pytest.mark.skipif(not (CHECKOUT / "mkdocs.yml").is_file(), reason="repository files (not in the wheel)")
PAGES = sorted(DOCS.glob("*.md"))
LEAD = 20
WIDTH = 300

#: (page, how the line starts) -> why it stays over WIDTH characters
LONG_LINES: dict[tuple[str, str], str] = {}

COMMAND = re.compile(r"`(?:[A-Z_]+=\S+ )*(?:vp-[a-z]+|python3?) [^`]+`")
BLOCK_COMMAND = re.compile(r"^\s*(?:[A-Z_]+=\S+\s+)*(?:vp-[a-z]+|python3?)\s")


def lead_problems(text: str) -> list[str]:
    """What the page's first LEAD lines lack: a number in its prose (inline code and code blocks aside) and a
    command."""
    lead = text.splitlines()[:LEAD]
    prose, commands, fenced = [], [], False
    for line in lead:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            commands += [line] if BLOCK_COMMAND.match(line) else []
            continue
        commands += COMMAND.findall(line)
        prose.append(re.sub(r"`[^`]*`", "", line))
    problems = []
    if not any(re.search(r"\d", line) for line in prose[1:]):  # the title aside
        problems.append(f"no number in the first {LEAD} lines")
    if not commands:
        problems.append(f"no `vp-...` or `python ...` command in the first {LEAD} lines")
    return problems


def long_lines(name: str, text: str) -> list[str]:
    """The page's lines over WIDTH characters that LONG_LINES does not name."""
    return [f"{name}:{n}: {len(line)} characters: {line[:80]}" for n, line in enumerate(text.splitlines(), 1)
            if len(line) > WIDTH and not any(page == name and line.startswith(start) for page, start in LONG_LINES)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_first_screen_says_the_answer_and_its_command(page):
    assert not lead_problems(page.read_text(encoding="utf-8")), (page.name, lead_problems(page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_line_is_over_300_characters(page):
    assert not long_lines(page.name, page.read_text(encoding="utf-8"))


def test_every_allowed_long_line_is_still_there():
    """An allow-list entry that no line needs any more is removed, not kept."""
    texts = {p.name: p.read_text(encoding="utf-8").splitlines() for p in PAGES}
    stale = [key for key in LONG_LINES
             if not any(len(line) > WIDTH and line.startswith(key[1]) for line in texts.get(key[0], []))]
    assert not stale, stale


def test_the_checks_catch_a_long_line_and_a_lead_moved_down():
    page = (DOCS / "memory.md").read_text(encoding="utf-8")
    assert not lead_problems(page) and not long_lines("memory.md", page)
    title, rest = page.split("\n", 1)
    assert lead_problems(title + "\n" * LEAD + rest)  # the lead pushed below the first screen
    assert long_lines("memory.md", page + "\n" + "word " * 70 + "\n")  # a paragraph on one line
