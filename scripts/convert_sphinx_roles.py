"""Convert Sphinx roles (``:func:`x```, ``:class:`~a.b.C```, ...) in the package's source to what the docs site renders.

The API reference is built by mkdocstrings, which reads docstrings as Markdown: a Sphinx role printed as literal
text. This script (run once; kept for branches that still carry roles) rewrites every role under ``vpintegrator/``:

- in a docstring, to an autorefs cross-reference ``[`name`][identifier]`` when the object is rendered on the site
  (``identifier`` is the anchor it is rendered under, read from the site's ``objects.inv``), else to plain code
  ````name```` (private helpers and modules the reference does not render);
- in a comment or any other string, to plain code ````name````.

A link shows the role's text (``~a.b.C`` shows ``C``); plain code the whole name. Short names are resolved as Sphinx would: in the
enclosing class, then the module's namespace, then ``vpintegrator``. Usage (a built site, then the package importable)::

    mkdocs build --site-dir /tmp/site && python scripts/convert_sphinx_roles.py /tmp/site/objects.inv

tests/test_docs_text.py holds the package to no role remaining.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import sys
import tokenize
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(?:py:)?(func|class|mod|meth|attr|data|exc|obj|const):`([^`]+)`")


def read_inventory(path: Path) -> dict[str, str]:
    """Sphinx inventory v2 (mkdocstrings writes it): name -> the anchor it is rendered under."""
    raw = path.read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    anchors = {}
    for line in body.splitlines():
        match = re.match(r"(\S+)\s+\S+:\S+\s+-?\d+\s+(\S+)", line)
        if match:
            name, uri = match.groups()
            anchor = uri.split("#", 1)[1] if "#" in uri else name
            anchors[name] = name if anchor == "$" else anchor
    return anchors


def load(path: str):
    """The object named by dotted ``path`` (modules imported as needed), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except Exception:
            return None
        return obj
    return None


class Resolver:
    def __init__(self, anchors: dict[str, str]):
        self.anchors = anchors
        self._by_id: dict[int, str] | None = None

    def by_id(self) -> dict[int, str]:
        if self._by_id is None:
            self._by_id = {}
            for name, anchor in self.anchors.items():
                obj = load(name)
                if obj is not None and (callable(obj) or isinstance(obj, type(sys))):
                    self._by_id.setdefault(id(obj), anchor)
        return self._by_id

    def anchor(self, candidates: list[str], role: str) -> str | None:
        for path in candidates:
            # a function named as its package (``rollout`` in vpintegrator.rollout) is not the package
            if path in self.anchors and (role == "mod") == isinstance(load(path), type(sys)):
                return self.anchors[path]
        for path in candidates:
            obj = load(path)
            if obj is None:
                continue
            if isinstance(obj, type(sys)):
                return self.anchors.get(obj.__name__)
            if callable(obj):
                canonical = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
                return self.anchors.get(canonical) or self.by_id().get(id(obj))
            return None  # data: only its literal path counts
        return None


def candidates(target: str, module: str, klass: str | None, is_package: bool) -> list[str]:
    if target.startswith("."):
        base = module.split(".") if is_package else module.split(".")[:-1]
        dots = len(target) - len(target.lstrip("."))
        base = base[: len(base) - dots + 1]
        return [".".join(base + [target.lstrip(".")])]
    if target.startswith("vpintegrator"):
        return [target]
    out = []
    if klass:
        out.append(f"{module}.{klass}.{target}")
    out.append(f"{module}.{target}")
    if not is_package:
        out.append(f"{module.rsplit('.', 1)[0]}.{target}")
    out.append(f"vpintegrator.{target}")
    return out


def docstring_positions(tree: ast.AST) -> set[tuple[int, int]]:
    """Where every string statement starts: docstrings of modules, classes and functions, and of attributes."""
    return {(node.value.lineno, node.value.col_offset) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def class_at(tree: ast.AST, line: int) -> str | None:
    """The dotted name of the innermost class whose body holds ``line``."""
    best = None

    def visit(node, prefix):
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                if child.lineno <= line <= (child.end_lineno or child.lineno):
                    best = name
                    visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.lineno <= line <= (child.end_lineno or child.lineno):
                    visit(child, prefix)
    visit(tree, "")
    return best


def convert_file(path: Path, resolver: Resolver, report: list[str]) -> bool:
    source = path.read_text(encoding="utf-8")
    if not ROLE.search(source):
        return False
    tree = ast.parse(source)
    docstrings = docstring_positions(tree)
    rel = path.relative_to(ROOT).with_suffix("")
    is_package = rel.name == "__init__"
    module = ".".join(rel.parent.parts if is_package else rel.parts)
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits = []  # (start, end, new text)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.STRING, tokenize.COMMENT) or not ROLE.search(tok.string):
            continue
        is_doc = tok.type == tokenize.STRING and tok.start in docstrings
        klass = class_at(tree, tok.start[0])

        def replace(match: re.Match) -> str:
            role, target = match.groups()
            target = target.strip()
            paths = candidates(target.lstrip("~"), module, klass, is_package)
            full = paths[0] if target.lstrip("~").startswith(".") else target.lstrip("~")
            short = full.rsplit(".", 1)[-1] if target.startswith("~") else full
            anchor = resolver.anchor(paths, role) if is_doc else None
            if is_doc:
                report.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: :{role}:`{target}` -> {anchor or 'plain'}")
            # a link shows the role's text; plain code keeps the whole name (no link says where it lives)
            return f"[`{short}`][{anchor}]" if anchor else f"``{full}``"

        new = ROLE.sub(replace, tok.string)
        start = starts[tok.start[0] - 1] + tok.start[1]
        end = starts[tok.end[0] - 1] + tok.end[1]
        edits.append((start, end, new))
    for start, end, new in reversed(edits):
        source = source[:start] + new + source[end:]
    path.write_text(source, encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    sys.path.insert(0, str(ROOT))
    resolver = Resolver(read_inventory(Path(argv[0])))
    report: list[str] = []
    changed = [p for p in sorted((ROOT / "vpintegrator").rglob("*.py")) if convert_file(p, resolver, report)]
    print("\n".join(report))
    print(f"{len(changed)} files rewritten, {len(report)} roles in docstrings "
          f"({sum('-> plain' in r for r in report)} as plain code)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
