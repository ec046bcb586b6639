"""Files shipped with the package, found by name: the generation specs, the training configs, the studies'
results files and the pretrained models' metadata (``vpintegrator/pretrained/provenance.json``).

A checkout (or an editable install) reads them from the repository's ``systems/``, ``configs/`` and
``docs/data/``; a wheel carries copies as ``vpintegrator/_specs``, ``vpintegrator/_configs`` and
``vpintegrator/_results`` (pyproject's force-include). The repository's copy wins where both exist. Imports
no torch.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import VPIntegratorError

__all__ = ["shipped_dirs", "shipped_file", "list_configs", "config_files", "config_path", "config_description",
           "results_files", "results_path", "ARCHIVE", "PRETRAINED_DIR", "pretrained_names", "pretrained_records"]

PACKAGE = Path(__file__).resolve().parent
#: (repository directory, its copy inside the wheel)
SPECS = ("systems", "_specs")
CONFIGS = ("configs", "_configs")
#: the studies' results files (``<name>.json``), from which their tables and figures redraw without a run
RESULTS = ("docs/data", "_results")
#: older or superseded results files, moved out of the wheel under the name they shipped as
#: (``docs/data/archive/<name>.json``): a clone keeps them for the pages that cite them, read by path
ARCHIVE = "docs/data/archive"
#: the shipped pretrained models (``<name>.pt``) and their metadata (``provenance.json``)
PRETRAINED_DIR = PACKAGE / "pretrained"


def shipped_dirs(repo_dir: str, packaged: str) -> list[Path]:
    """The existing directories among the repository's ``repo_dir`` and the package's ``packaged``."""
    dirs = [PACKAGE.parent / repo_dir, PACKAGE / packaged]
    return [d for d in dirs if d.is_dir()]


def config_files() -> dict[str, Path]:
    """Training config name (path below ``configs/`` without ``.toml``: ``study/rigid_body_vpt``) -> file."""
    files: dict[str, Path] = {}
    for d in reversed(shipped_dirs(*CONFIGS)):  # the repository's copy wins over the packaged one
        files.update({p.relative_to(d).with_suffix("").as_posix(): p for p in sorted(d.rglob("*.toml"))})
    return dict(sorted(files.items()))


def list_configs() -> list[str]:
    """Names of the shipped ``vp-train`` configs (``configs/*.toml``, ``study/...`` for ``configs/study``),
    usable with ``vp-train NAME`` and [`vpintegrator.training.TrainConfig.from_toml`][vpintegrator.training.TrainConfig.from_toml]."""
    return list(config_files())


def config_description(path: Path) -> str:
    """The one-line description of a config file: the first sentence of its leading comment (the comment
    lines up to a blank one, an indented command line or the first key, joined), whole; or ``""``."""
    import re

    lines: list[str] = []
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                if line.strip() or lines:
                    break
                continue
            text = line[1:]
            if not text.strip() or text.startswith(("   ", "\t")):  # a blank comment line or a command
                if lines:
                    break
                continue
            lines.append(text.strip())
    except (OSError, UnicodeDecodeError):
        return ""
    text = " ".join(lines)
    end = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!\bal)\.(?=\s+[A-Z(`]|\s*$)", text)
    return text[: end.start() + 1] if end else text


def config_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The file of a ``vp-train`` config given as a path (an existing file) or a shipped name.

    A missing file is a one-line error that names the shipped configs, and the shipped name to use when
    the path is the repository's ``configs/NAME.toml`` seen from outside the clone.
    """
    text = os.fsdecode(os.fspath(name_or_path))
    path = Path(text)
    if path.is_file():
        return path
    if path.is_dir():
        raise VPIntegratorError(f"config {text!r} is a directory; give a .toml file or a config name")
    files = config_files()
    if text in files:
        return files[text]
    names = ", ".join(files) or "(none found)"
    if path.suffix == ".toml" or "/" in text or os.sep in text:
        parts = path.with_suffix("").parts
        shipped = "/".join(parts[parts.index("configs") + 1:]) if "configs" in parts else None
        hint = f"; it ships with the package: give the name {shipped!r}" if shipped in files else ""
        raise VPIntegratorError(
            f"config file {text!r} not found{hint}; give an existing .toml file or a shipped config name ({names})"
        )
    raise VPIntegratorError(f"unknown config {text!r}; shipped configs: {names}; or give a path to a .toml file")


def results_files(archived: bool = False) -> dict[str, Path]:
    """Shipped results file name -> file, sorted by name. The name is the file's path below ``docs/data/``
    without ``.json``: ``rigid_body_study_plateau``, ``partial_observation/default_steps`` (a study with several
    sizes keeps them in its own folder). ``archived``: the archived files of a clone (``docs/data/archive/``)
    too, under the names they shipped as."""
    files: dict[str, Path] = {}
    archive = PACKAGE.parent / ARCHIVE
    for d in reversed(shipped_dirs(*RESULTS)):  # the repository's copy wins over the packaged one
        files.update({p.relative_to(d).with_suffix("").as_posix(): p for p in sorted(d.rglob("*.json"))
                      if not p.is_relative_to(archive)})
    if archived and archive.is_dir():
        files.update({p.relative_to(archive).with_suffix("").as_posix(): p for p in sorted(archive.rglob("*.json"))})
    return dict(sorted(files.items()))


def results_path(name_or_path: str | os.PathLike[str], key: str = "results") -> Path:
    """The results file given as a path (an existing file) or a shipped name (``coupled_oscillator_study``,
    ``partial_observation/default_steps``, with or without ``.json``); else a one-line error naming ``key`` and the shipped names."""
    text = os.fsdecode(os.fspath(name_or_path))
    path = Path(text)
    if path.is_file():
        return path
    files = results_files()
    name = text[:-5] if text.endswith(".json") else text
    if name in files:
        return files[name]
    parts = Path(name).parts  # docs/data/NAME.json seen from outside the clone: the name is below data/
    below = "/".join(parts[parts.index("data") + 1:]) if "data" in parts else Path(name).name
    hint = f"; it ships with the package: give the name {below!r}" if below != name and below in files else ""
    archived = next((n for n in (name, below) if n in results_files(archived=True)), None)
    if not hint and archived:
        hint = f"; {archived!r} is archived, not shipped: give the path {ARCHIVE}/{archived}.json in a clone"
    raise VPIntegratorError(f"{key}: {text!r} is neither a file nor a shipped results name{hint}; shipped: "
                            f"{', '.join(files) or '(none found)'}", key=key)


def shipped_file(relative: str | os.PathLike[str]) -> Path:
    """A repository path under ``configs/`` or ``systems/`` (``configs/study/rigid_body_vpt.toml``) as it
    is here: the checkout's file when there is one, else the wheel's copy (which may not exist either:
    callers check and say so)."""
    rel = Path(relative)
    for repo_dir, packaged in (CONFIGS, SPECS):
        if rel.parts and rel.parts[0] == repo_dir:
            inside = Path(*rel.parts[1:]) if len(rel.parts) > 1 else Path()
            for d in shipped_dirs(repo_dir, packaged):
                if (d / inside).exists():
                    return d / inside
            return PACKAGE.parent / rel
    return PACKAGE.parent / rel


def pretrained_names(directory: Path | None = None) -> list[str]:
    """Names of the shipped pretrained models (files ``vpintegrator/pretrained/<name>.pt``, or ``directory``'s),
    sorted."""
    directory = PRETRAINED_DIR if directory is None else Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.pt"))


def pretrained_records(directory: Path | None = None) -> dict[str, dict]:
    """The ``models`` table of ``vpintegrator/pretrained/provenance.json`` (or ``directory``'s; name -> its
    entry, ``{}`` when the file is missing): how each shipped model was trained and how well it does. Reads
    JSON only (no torch)."""
    import json

    path = (PRETRAINED_DIR if directory is None else Path(directory)) / "provenance.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8")).get("models", {})
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise VPIntegratorError(f"pretrained metadata {path.name}: unreadable ({err}); reinstall vpintegrator") from None
    return table if isinstance(table, dict) else {}
