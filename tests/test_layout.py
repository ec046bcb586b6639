"""The package layout: imports point one way, modules stay small, the root namespace stays small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vpintegrator

PACKAGE = Path(vpintegrator.__file__).resolve().parent

# The layers, lowest first: a module may import its own part and the parts below it, never one above
# (lazy imports inside functions count too). Nothing is whitelisted. The root-level modules are parts of
# their own; ``__init__`` (the lazy root namespace) and ``__main__`` sit above everything.
LAYERS = [
    "errors", "plugins", "_version", "provenance", "_progress", "_lazy", "_toml", "_shipped", "_signals", "_io", "_outputs", "resources", "config", "device",  # no package imports
    "arrays", "rundir",  # NumPy/torch helpers and the dtype rule; run-directory text files (torch-free)
    "fastpath",  # verified(fast, eager, probe): every fast path checked against eager, else eager
    "stepping",  # the rollout core (window advance, failure rule, block loop): below data, for integrate
    "jobs",  # the job runtime (shards, part files and the index, executors: threads, processes, Dask) under vp-gen and vp-rollout
    "systems", "integrators", "compiled", "data",  # the NumPy side: equations, methods, kernels, files
    "jacobians", "nn", "models", "metrics", "poisson", "testing",  # the torch side and the shared measurements
    "rollout", "training", "plotting", "studies", "cli",
]
# further parts a part may not import although they are below it (independent branches of the tree)
ALSO_FORBIDDEN = {
    "nn": {"systems", "integrators", "compiled", "data", "rundir", "jobs"},
    "models": {"systems", "integrators", "compiled", "data", "rundir", "jobs"},
    "metrics": {"nn", "models", "rundir", "jobs"},
    "testing": {"data", "compiled", "metrics", "rundir", "jobs"},
    "poisson": {"data", "compiled", "metrics", "rundir", "nn", "models", "jobs"},
    "plotting": {"nn", "models", "jacobians", "testing", "rollout", "training"},
    "jacobians": {"systems", "integrators", "compiled", "data", "rundir", "jobs"},
}


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


def _layer(part: str) -> int:
    if part in ("__init__", "__main__"):
        return len(LAYERS)
    assert part in LAYERS, f"{part}: a new part of the package; add it to LAYERS in tests/test_layout.py"
    return LAYERS.index(part)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_one_way(path):
    part = _part(path)
    bad = [
        m for m in _imports(path)
        if _layer(m.split(".")[0]) > _layer(part) or m.split(".")[0] in ALSO_FORBIDDEN.get(part, set())
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} ({part}) imports {bad}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (a package stands for its ``__init__``)."""
    names = {_module_name(p): p for p in _modules()}

    def resolve(name: str) -> str:  # "a.b.c" -> the longest prefix that is a module ("a.b" if c is a name)
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name

    return {n: {resolve(m) for m in _imports(p)} - {n} for n, p in names.items()}


def test_no_import_circles():
    """No module reaches itself through imports (including those inside functions); a submodule that
    imports its own package's ``__init__`` (which imports it) is a circle too."""
    graph = _import_graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


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
