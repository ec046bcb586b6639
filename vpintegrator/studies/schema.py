"""The results files of the studies, checked in one place before any table is drawn from them.

Every study's results file (``OUT/<study>.json`` or ``OUT/results.json``, and what ``--table-only --results FILE``
names) is a JSON object whose top-level keys and rows a ``ResultsSchema`` declares beside the study: a key's
*kind* is one of the names below, ``Obj`` (an object with required and optional keys), ``Each`` (a list of one
kind), ``Values`` (an object whose values are of one kind), ``Either`` (one of several) or a function
``x -> ""`` (fits) / ``"what was expected"``. ``check_results`` walks a document against its schema and refuses
the first thing that does not fit in one line naming the file, the row and the key: another study's file, a row
without a key, a string where a number goes (``read_results``: a ``results.json`` read and checked). The tables
are drawn only from a file that fits, so none of them raises on one that does not. A study whose rows are its
results says so once as a ``ResultsFile``: the file read and checked, merged into, redrawn and drawn at the end.

Kinds by name (``?`` at the end: or ``null``, a NaN the study wrote): ``number`` (a number, or ``"inf"`` /
``"-inf"`` as ``stats.plain`` writes them), ``int``, ``str``, ``bool``, ``list``, ``object``, ``any``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Union

from .runner import StudyError
from .stats import read_json, redraw_from, unplain, write_tables

__all__ = ["Obj", "Each", "Values", "Either", "ResultsSchema", "check_results", "read_results", "is_number", "numbers",
           "INTERVAL", "STAT", "ResultsFile"]

Kind = Union[str, "Obj", "Each", "Values", "Either", Callable[[Any], str]]


@dataclass(frozen=True)
class Obj:
    """An object with every key of ``required`` and any of ``optional``, each of its kind (other keys allowed)."""

    required: Mapping[str, Kind] = field(default_factory=dict)
    optional: Mapping[str, Kind] = field(default_factory=dict)
    null: bool = False


@dataclass(frozen=True)
class Each:
    """A list whose items are all of ``kind``."""

    kind: Kind
    null: bool = False


@dataclass(frozen=True)
class Values:
    """An object whose values are all of ``kind`` (any keys)."""

    kind: Kind
    null: bool = False


@dataclass(frozen=True)
class Either:
    """A value of any one of ``kinds`` (the first's message when it is none of them)."""

    kinds: tuple[Kind, ...]


def numbers(*required: str, optional: tuple[str, ...] = (), **more: Kind) -> Obj:
    """An object whose keys ``required`` (and ``optional``) hold a number or null, and the keys of ``more`` their
    kinds (optional)."""
    return Obj(required={k: "number?" for k in required}, optional={**{k: "number?" for k in optional}, **more})


#: a median with its interval (``stats.median_interval``): what the studies write per horizon
INTERVAL = Obj(optional={"median": "number?", "lo": "number?", "hi": "number?", "n": "int?"}, null=True)
#: a mean over seeds with its spread and values (``stats.mean_std``)
STAT = Obj(optional={"mean": "number?", "std": "number?", "n": "int?", "values": Each("number?")}, null=True)


def is_number(x: Any, null: bool = False) -> bool:
    """A number as the studies write them: int or float (not bool), ``"inf"``/``"-inf"``, or None with ``null``."""
    if x is None:
        return null
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or x in ("inf", "-inf")


_NAMED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "number": (lambda x: is_number(x), "a number"),
    "int": (lambda x: isinstance(x, int) and not isinstance(x, bool), "an integer"),
    "str": (lambda x: isinstance(x, str), "a string"),
    "bool": (lambda x: isinstance(x, bool), "true or false"),
    "list": (lambda x: isinstance(x, list), "a list"),
    "object": (lambda x: isinstance(x, dict), "an object"),
    "any": (lambda x: True, "anything"),
}


def _problem(x: Any, kind: Kind) -> tuple[str, str]:
    """``(where inside x, what was expected)`` for the first part of ``x`` that is not of ``kind``; ``("", "")``
    when it all fits."""
    if isinstance(kind, str):
        null = kind.endswith("?")
        if x is None and null:
            return "", ""
        test, what = _NAMED[kind.rstrip("?")]
        return ("", "") if test(x) else ("", what + (" (or null)" if null else ""))
    if callable(kind) and not isinstance(kind, (Obj, Each, Values, Either)):
        why = kind(x)
        return ("", why) if why else ("", "")
    if isinstance(kind, Either):
        found = [_problem(x, k) for k in kind.kinds]
        return ("", "") if any(not why for _, why in found) else found[0]
    if x is None and kind.null:
        return "", ""
    if isinstance(kind, Each):
        if not isinstance(x, list):
            return "", "a list"
        for i, item in enumerate(x):
            inner, why = _problem(item, kind.kind)
            if why:
                return f"[{i}]{inner}", why
        return "", ""
    if isinstance(kind, Values):
        if not isinstance(x, dict):
            return "", "an object"
        for k, v in x.items():
            inner, why = _problem(v, kind.kind)
            if why:
                return f".{k}{inner}", why
        return "", ""
    if not isinstance(x, dict):
        return "", "an object with " + ", ".join(kind.required or kind.optional)
    for k in kind.required:
        if k not in x:
            return f".{k}", "present"
    for k, sub in {**kind.required, **kind.optional}.items():
        if k in x:
            inner, why = _problem(x[k], sub)
            if why:
                return f".{k}{inner}", why
    return "", ""


@dataclass(frozen=True)
class ResultsSchema:
    """What a study's results file holds: ``top``, its required top-level keys (``rows``: ``Each(Obj(...))``)
    and their kinds; ``label``, the row keys that name a row in a message (``method``, ``label``)."""

    study: str
    top: Mapping[str, Kind]
    label: tuple[str, ...] = ("label", "method", "model")
    fix: str = ""

    def advice(self) -> str:
        return self.fix or (f"it was not written by this version of the {self.study} study: run the study again "
                            f"into this --out (without --table-only), or give the --out of a {self.study} run")


def check_results(doc: Any, path: str | Path, schema: ResultsSchema) -> Any:
    """``doc`` (the JSON read from ``path``) if it fits ``schema``; else a one-line ``StudyError`` naming the file,
    the row and the key (``path: row 3 (vpt_T4): 'T' is "four", expected an integer; <how to fix>``)."""
    fix = schema.advice()
    missing = [k for k, kind in schema.top.items() if not isinstance(doc, dict) or k not in doc
               or (isinstance(kind, Each) and not isinstance(doc[k], list))]
    if missing:
        other = f" (its top-level keys: {', '.join(sorted(map(str, doc))[:6])})" if isinstance(doc, dict) else \
            f" (it holds a JSON {type(doc).__name__})"
        what = "list " if isinstance(schema.top[missing[0]], Each) else ""
        article = "an" if schema.study[:1] in "aeiou" else "a"
        _fail(f"{path}: not {article} {schema.study} study's results: no {what}{missing[0]!r}{other}; {fix}")
    for top, kind in schema.top.items():
        value = doc[top]
        if isinstance(kind, Each) and isinstance(kind.kind, Obj) and isinstance(value, list):  # rows
            for i, row in enumerate(value):
                _check_row(row, f"{'row' if top == 'rows' else top + ' row'} {i}", kind.kind, path, schema)
            continue
        inner, why = _problem(value, kind)
        if why == "present":
            _fail(f"{path}: {top + inner!r} is missing; {fix}")
        if why:
            _fail(f"{path}: {top + inner!r} is {_shown(_dig(value, inner))}, expected {why}; {fix}")
    return doc


def read_results(path: str | Path, keys: Any, script: str, schema: ResultsSchema) -> dict[str, Any]:
    """A study's ``results.json`` (``stats.read_results_json``: the file, its top-level ``keys``, its numbers back),
    checked against ``schema`` (``check_results``; ``"inf"`` read back as inf is still a number)."""
    from .stats import read_results_json

    return check_results(read_results_json(path, keys, script), path, schema)


def _check_row(row: Any, where: str, kind: Obj, path: str | Path, schema: ResultsSchema) -> None:
    fix = schema.advice()
    if not isinstance(row, dict):
        _fail(f"{path}: {where} is {_shown(row)}, not an object; {fix}")
    name = next((row[k] for k in schema.label if isinstance(row.get(k), str)), None)
    where += f" ({name})" if name else ""
    inner, why = _problem(row, kind)
    if not why:
        return
    at = inner.lstrip(".")
    key = at.split(".")[0].split("[")[0]
    if why == "present":
        _fail(f"{path}: {where} has no key {at!r}; {fix}")
    deeper = "" if at == key else f" (at {at}: {_shown(_dig(row, inner))})"
    _fail(f"{path}: {where}: {key!r} is {_shown(row[key])}, expected {why}{deeper}; {fix}")


def _dig(value: Any, inner: str) -> Any:
    """The part of ``value`` at ``inner`` (``.key[3].other``), for the message."""
    import re

    for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", inner):
        try:
            value = value[int(index)] if index else value[name]
        except (KeyError, IndexError, TypeError):
            return value
    return value


def _shown(x: Any) -> str:
    try:
        text = json.dumps(x)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(message: str) -> Any:
    raise StudyError(message)


# --------------------------------------------------------------------------- a study's results file


@dataclass(frozen=True)
class ResultsFile:
    """The results of study ``name``: ``OUT/<name>.json`` (``{"commands": [...], ..., "rows": [...]}``, the rows
    checked against ``schema``), ``OUT/<name>.md`` (``tables(summarize(rows))``) and the figures
    (``figures(rows, summary, out)``, files named ``<figure_prefix>...``). What every such study did alike: read
    the rows, read the earlier file a run merges into, redraw a results file into a new OUT, draw the tables and
    figures at the end of a run."""

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
        path) drawn into a new ``out`` (``redraw_from``), no run; the tables printed."""
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
        write_tables(Path(out) / f"{self.name}.md", text)
        self.figures(rows, summary, out)
        print(text)
        return 0
