"""A study's results file as one object: the rows it holds, and the tables and figures drawn from them.

A study that keeps its rows in ``OUT/NAME.json`` (checked against its ``ResultsSchema``), its tables in
``OUT/NAME.md`` and its figures beside them says so once, as a ``ResultsFile`` of its own summary, tables and
figures; the parts every such study wrote alike are here: reading the rows (a missing file, another study's
JSON, a bad row: one line), reading the earlier file a run merges into, merging rows by key, redrawing a results
file into a new OUT (``--table-only --results``, ``stats.redraw_from``) and drawing the tables and figures at
the end of a run. The partial-observation and reduction studies are made of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from .runner import StudyError
from .schema import ResultsSchema, check_results
from .stats import read_json, redraw_from, unplain, write_text

__all__ = ["ResultsFile", "merge_keyed"]


def merge_keyed(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]],
                key: Callable[[dict[str, Any]], Hashable]) -> list[dict[str, Any]]:
    """``old`` with each row whose ``key`` a row of ``new`` has replaced by that row (in its place), then the new
    rows of new keys, in their order."""
    keyed = {key(r): r for r in old}
    keyed.update({key(r): r for r in new})
    return list(keyed.values())


@dataclass(frozen=True)
class ResultsFile:
    """The results of study ``name``: ``OUT/<name>.json`` (``{"commands": [...], ..., "rows": [...]}``, the rows
    checked against ``schema``), ``OUT/<name>.md`` (``tables(summarize(rows))``) and the figures
    (``figures(rows, summary, out)``, files named ``<figure_prefix>...``)."""

    name: str
    schema: ResultsSchema
    summarize: Callable[[list[dict[str, Any]]], Any]
    tables: Callable[[Any], str]
    figures: Callable[[list[dict[str, Any]], Any, Path], Any]
    figure_prefix: str

    def path(self, out: Path) -> Path:
        """``OUT/<name>.json``."""
        return Path(out) / f"{self.name}.json"

    def read_rows(self, path: Path) -> list[dict[str, Any]]:
        """The rows of the results file at ``path``, checked against the schema before any table is drawn; a
        missing file, another study's JSON, a row without a key or with a string for a number is one line naming
        the file, row and key."""
        data = read_json(path)
        if data is None:
            raise StudyError(f"--table-only: {path} not found; give the --out of an earlier {self.name} study or "
                             f"--results FILE (a {self.name}.json)")
        return unplain(check_results(data, path, self.schema)["rows"])

    def earlier(self, path: Path) -> dict[str, Any]:
        """What a run merges its rows into: the file at ``path``, checked first (a foreign file is never written
        over); ``{}`` where there is none."""
        data = read_json(path)
        return {} if data is None else unplain(check_results(data, path, self.schema))

    def redraw(self, out: Path, results: str) -> int:
        """``--table-only --results FILE``: the tables and figures of a results file (a shipped one by name, or a
        path) drawn into a new ``out`` (``stats.redraw_from``), no run; the tables printed."""
        summaries: list[Any] = []

        def draw(rows: list[dict[str, Any]]) -> str:
            summaries.append(self.summarize(rows))
            return self.tables(summaries[-1])

        _, rows, text = redraw_from(out, str(results), self.read_rows, draw, figures=self.figure_prefix)
        self.figures(rows, summaries[-1], out)
        print(text)
        return 0

    def finish(self, out: Path, rows: list[dict[str, Any]]) -> int:
        """The end of a run (or of ``--table-only`` on its OUT): ``OUT/<name>.md`` and the figures drawn from
        ``rows``; the tables printed."""
        summary = self.summarize(rows)
        text = self.tables(summary)
        write_text(Path(out) / f"{self.name}.md", text)
        self.figures(rows, summary, out)
        print(text)
        return 0
