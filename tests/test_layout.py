"""The package layout: imports point one way, modules stay small, the root namespace stays small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vpintegrator

PACKAGE = Path(vpintegrator.__file__).resolve().parent

# what each part may NOT import (lazy imports inside functions count too). The trajectory container
# (data.trajectories) is the bottom of the data flow and may be imported from anywhere.
FORBIDDEN = {
    "systems": {"integrators", "data", "nn", "models", "training", "rollout", "metrics", "plotting", "studies", "cli"},
    "integrators": {"nn", "models", "training", "rollout", "metrics", "plotting", "studies", "cli"},
    "data": {"nn", "models", "training", "rollout", "metrics", "plotting", "studies", "cli"},
    "nn": {"models", "training", "rollout", "metrics", "plotting", "studies", "cli", "data", "integrators"},
    "models": {"training", "rollout", "plotting", "studies", "cli"},
    "metrics": {"models", "training", "rollout", "plotting", "studies", "cli"},
    "rollout": {"training", "plotting", "studies", "cli"},
    "training": {"plotting", "studies", "cli"},
    "plotting": {"models", "training", "rollout", "studies", "cli"},
    "testing": {"training", "rollout", "plotting", "studies", "cli"},
    "studies": {"cli"},
    "compiled": {"training", "rollout", "plotting", "studies", "cli", "data"},
}
# compiled.models packs torch models (it reads their layers): it sits above models, the other compiled
# kernels (systems, integrators, DOP853) below data.
ABOVE_MODELS = {"compiled/models.py"}
ALWAYS_ALLOWED = {"data.trajectories"}


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _imports(path: Path) -> set[str]:
    """Dotted names (relative to the package) of every vpintegrator module ``path`` imports."""
    tree = ast.parse(path.read_text())
    here = list(path.relative_to(PACKAGE).with_suffix("").parts)
    pkg = here if path.name == "__init__.py" else here[:-1]
    if path.name == "__init__.py":
        pkg = here[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1] if node.level > 1 else pkg
                mod = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.startswith("vpintegrator"):
                mod = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                out.add(".".join([*mod, alias.name]) if not node.module else ".".join(mod))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("vpintegrator."):
                    out.add(".".join(alias.name.split(".")[1:]))
    return {m for m in out if m}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_one_way(path):
    part = _part(path)
    forbidden = FORBIDDEN.get(part, set())
    if str(path.relative_to(PACKAGE)) not in ABOVE_MODELS and part == "compiled":
        forbidden = forbidden | {"models", "nn", "metrics"}
    bad = [m for m in _imports(path) if m.split(".")[0] in forbidden and not any(m.startswith(a) for a in ALWAYS_ALLOWED)]
    assert not bad, f"{path.relative_to(PACKAGE)} ({part}) imports {bad}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_600_lines(path):
    assert len(path.read_text().splitlines()) <= 600


def test_one_trajectory_container():
    """Every class that holds states ``y`` is the one Trajectories (no second container)."""
    holders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                fields = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
                if "y" in fields:
                    holders.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert holders == ["data/trajectories.py:Trajectories"]


def test_small_root_namespace_and_py_typed():
    assert len(vpintegrator.__all__) <= 45
    assert (PACKAGE / "py.typed").is_file()
