"""The package layout: imports point one way with no whitelist, no private name crosses a package, no
module-private object is handed to another module, every plug-in surface has a typed contract (a base
class or a ``Protocol`` the drivers take) the shipped plug-ins satisfy, no module is a re-export shim, and
the root namespace stays small."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import vpintegrator

PACKAGE = Path(vpintegrator.__file__).resolve().parent

# The layers, lowest first: a module may import its own part and the parts below it, never one above
# (lazy imports inside functions count too). Nothing is whitelisted. The root-level modules are parts of
# their own; ``__init__`` (the lazy root namespace) and ``__main__`` sit above everything.
LAYERS = [
    "errors", "plugins", "protocols", "_version", "provenance", "_progress", "_logging", "_lazy", "_toml", "_shipped", "_signals", "_jitcache", "_io", "_outputs", "resources", "config", "device", "clock", "quantiles",  # no package imports
    "arrays", "rundir",  # NumPy/torch helpers and the dtype rule; run-directory text files (torch-free)
    "fastpath",  # verified(fast, eager, probe): every fast path checked against eager, else eager
    "stepping",  # the rollout core (window advance, failure rule, block loop): below data, for integrate
    "jobs",  # the job runtime (shards, part files and the index, executors: threads, processes, Dask) under vp-gen and vp-rollout
    "systems", "integrators", "compiled", "data",  # the NumPy side: equations, methods, kernels, files
    "jacobians", "nn", "models",  # the torch side
    "reduction",  # model reduction: PSD (NumPy) and the symplectic autoencoder (nn's SympNet layers)
    "metrics", "poisson", "testing",  # the shared measurements
    "rollout", "training", "plotting", "studies", "cli",
]
# further parts a part may not import although they are below it (independent branches of the tree)
ALSO_FORBIDDEN = {
    "nn": {"systems", "integrators", "compiled", "data", "reduction", "rundir", "jobs"},
    # models: systems (the finite-difference context encoder asks the system for its linear parameter form) and
    # integrators (the learned fields' training step reads the methods' coefficients and explicit step, issue 59)
    "models": {"compiled", "data", "reduction", "rundir", "jobs"},
    "metrics": {"nn", "models", "rundir", "jobs"},
    "testing": {"data", "compiled", "reduction", "metrics", "rundir", "jobs"},
    "poisson": {"data", "compiled", "reduction", "metrics", "rundir", "nn", "models", "jobs"},
    "plotting": {"nn", "models", "jacobians", "testing", "rollout", "training"},
    "jacobians": {"systems", "integrators", "compiled", "data", "reduction", "rundir", "jobs"},
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


# --------------------------------------------------------------------------- private names


def _imported_names(path: Path, source: str | None = None):
    """(target module parts, imported name, line) of every ``from vpintegrator... import name`` in ``path``
    (its text, or ``source``)."""
    here = list(path.relative_to(PACKAGE).with_suffix("").parts)
    pkg = here[:-1]
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg[: len(pkg) - node.level + 1]
            mod = [*base, *(node.module.split(".") if node.module else [])]
        elif node.module and node.module.startswith("vpintegrator"):
            mod = node.module.split(".")[1:]
        else:
            continue
        for alias in node.names:
            yield mod, alias.name, node.lineno


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# Imports of a private name across packages that are known and still to be removed: none left (the job
# runtime of issue 30 removed the last five); the test fails on an entry that no longer occurs.
KNOWN_PRIVATE_IMPORTS: set[str] = set()


def _private_imports(path: Path, source: str | None = None):
    """``"file: module.name"`` for each private module or name of another part that ``path`` imports."""
    part = _part(path)
    for mod, name, _line in _imported_names(path, source):
        full = [*mod, name]
        if full[0] != part and any(_is_private(c) for c in full[1:]):
            yield f"{path.relative_to(PACKAGE).as_posix()}: {'.'.join(full)}"


def test_the_private_import_rule_can_fail():
    source = ("from ..config import parse_set, _MISSING\nfrom .._io import atomic_path\nfrom ..nn._common import x\n"
              "from .registry import _MODELS\nfrom vpintegrator.data import _attrs\n")
    found = sorted(_private_imports(PACKAGE / "models" / "probe.py", source))
    assert found == ["models/probe.py: config._MISSING", "models/probe.py: data._attrs", "models/probe.py: nn._common.x"]


def test_no_private_name_imported_across_packages():
    """A name ``_x`` (a module or an object) is private to its part of the package (``data``, ``models``, a
    root module such as ``config``): another part may not import it (``models`` importing
    ``nn._common.x`` or ``config._parse_value`` is refused). Make it public (in the module's ``__all__``)
    or give the concept one public home. Inside one part (``models.gml`` importing
    ``models.registry._MODELS``) is fine, and so are the root's private modules (``_io``, ``_shipped``:
    the root holds every part)."""
    found = {hit for path in _modules() for hit in _private_imports(path)}
    assert not found - KNOWN_PRIVATE_IMPORTS, f"private names imported across packages: {sorted(found - KNOWN_PRIVATE_IMPORTS)}"
    assert not KNOWN_PRIVATE_IMPORTS - found, f"gone (remove from KNOWN_PRIVATE_IMPORTS): {sorted(KNOWN_PRIVATE_IMPORTS - found)}"


# --------------------------------------------------------------------------- module-private objects passed out


def _callee_params(target: list[str]) -> list[str] | None:
    """The parameter names (positional order) of the package function or class ``target`` (module parts +
    name), read from its source; None when it is not found."""
    *mod, name = target
    for candidate in (PACKAGE.joinpath(*mod).with_suffix(".py"), PACKAGE.joinpath(*mod, "__init__.py")):
        if candidate.is_file():
            break
    else:
        return None
    for node in ast.parse(candidate.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            fn = node
            break
        if (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
                and any(a.name == name and a.asname is None for a in node.names)):  # re-exported: its home's
            package = mod if candidate.name == "__init__.py" else mod[:-1]
            return _callee_params([*package, *node.module.split("."), name])
        if isinstance(node, ast.ClassDef) and node.name == name:
            inits = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            if not inits:
                return None
            fn = inits[0]
            break
    else:
        return None
    args = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    return [a for a in args if a not in ("self", "cls")]


# A declared hook: the parameter of another module's function that exists to take a caller's function (its
# type is a Callable in the signature and its docstring says what it is called with). A private function
# handed to one of these is the hook's use, not a way around an import.
DECLARED_HOOKS = {
    # a config key's own validator and its lazy list of choices, declared beside the key (fields of config.Key)
    "config.key": {"check", "choices"},
    "cli._common.Names": {"load"},  # the lazy list of an option's names (read only for --help / completion)
    "cli._options.set_option": {"help"},  # --set's help text, made only when --help shows it
    # the job runtime's executors run a command's own task; a file kind says how its shards are read
    "jobs.dask.ShardJob": {"task"},
    "jobs.executors.in_processes": {"task"},
    "studies.runner.in_pool": {"fn"},  # a study's pool runs the study's own task (its trainings)
    "studies.stats.merge_keyed": {"key"},  # a study's rows merged by the study's own key of a row
    "jobs.shards.ShardKind": {"head"},
}

# Module-private objects passed into another module's function that are known and still to be removed: none
# left (the job runtime of issue 30 removed run_shard(run, select, ...) and parts.method(..., Failure, ...));
# only shrinks.
KNOWN_PASSED: set[str] = set()


def _private_objects_passed_out(path: Path, source: str | None = None):
    """``"file: _obj -> module.callee"`` for each call in ``path`` (its text, or ``source``) that hands a
    module-level private function or class of ``path`` to a function or class imported from another
    package module (except a declared hook, ``DECLARED_HOOKS``)."""
    here = list(path.relative_to(PACKAGE).with_suffix("").parts)
    source = path.read_text() if source is None else source
    tree = ast.parse(source)
    private = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and _is_private(n.name)}
    imported = {}
    for mod, name, _line in _imported_names(path, source):
        imported[name] = [*mod, name]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):  # the aliases
            for alias in node.names:
                if alias.asname and alias.name in imported:
                    imported[alias.asname] = imported[alias.name]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        attrs, root = [], node.func
        while isinstance(root, ast.Attribute):  # module.function(...) of an imported package module
            attrs.insert(0, root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in imported):
            continue  # a local or third-party callee (click, numba, an executor, Dask): it cannot import us anyway
        target = [*imported[root.id], *attrs]
        if target[:-1] == here[: len(target) - 1] and len(target) - 1 == len(here):  # its own module
            continue
        params = _callee_params(target) or []
        hooks = DECLARED_HOOKS.get(".".join(target), set())
        passed = [(params[i] if i < len(params) else None, a) for i, a in enumerate(node.args)]
        passed += [(k.arg, k.value) for k in node.keywords]
        for param, arg in passed:
            if isinstance(arg, ast.Name) and arg.id in private and param not in hooks:
                yield f"{path.relative_to(PACKAGE).as_posix()}: {arg.id} -> {'.'.join(target)}"


def test_no_module_private_object_passed_to_another_module():
    """A module does not hand its private functions or classes to another module's function so that the
    other module need not import them (``run_shard(run, select, ...)``): the callee imports what it uses
    (or what is handed over is a public, typed plug-in). Declared hooks (``DECLARED_HOOKS``) are the
    exception: a parameter that exists to take a caller's function."""
    found = {hit for path in _modules() for hit in _private_objects_passed_out(path)}
    assert not found - KNOWN_PASSED, f"module-private objects passed out: {sorted(found - KNOWN_PASSED)}"
    assert not KNOWN_PASSED - found, f"gone (remove from KNOWN_PASSED): {sorted(KNOWN_PASSED - found)}"


def test_declared_hooks_exist():
    """Each declared hook names a real parameter of a real package function (the list cannot go stale)."""
    import dataclasses
    import importlib

    for callee, params in DECLARED_HOOKS.items():
        module, _, name = callee.rpartition(".")
        obj = getattr(importlib.import_module(f"vpintegrator.{module}"), name)
        names = set(inspect.signature(obj).parameters)
        if callee == "config.key":  # key(default, **info): info are the fields of Key
            names |= {f.name for f in dataclasses.fields(importlib.import_module("vpintegrator.config").Key)}
        assert params <= names, (callee, params - names)


def test_the_private_pass_rule_can_fail():
    """The rule finds a private function handed to another module (by name or through the module), and not
    one handed to a declared hook or kept in its own module."""
    source = ("from ..config import key\nfrom . import shards\nfrom .shards import ShardKind\n\n"
              "def _helper(x):\n    return x\n\ndef own(f):\n    return f\n\n"
              "A = ShardKind(_helper)\nB = key(1, check=_helper)\nC = shards.ShardKind(_helper)\nD = own(_helper)\n")
    found = sorted(_private_objects_passed_out(PACKAGE / "data" / "probe.py", source))
    assert found == ["data/probe.py: _helper -> data.shards.ShardKind"] * 2


# --------------------------------------------------------------------------- plug-in surfaces


def _shipped_plugins():
    """(Protocol, plug-in, what) for every shipped plug-in of the surfaces that have a Protocol."""
    from vpintegrator import protocols as P
    from vpintegrator.models import build_model, list_models, model_class
    from vpintegrator.rollout.numba_model import packer_for
    from vpintegrator.training.sinks import MLflowSink, TensorBoardSink

    out = []
    for name in list_models():
        dim = 4 if "symp" in name or name in ("g_sympnet_ctx",) else getattr(model_class(name), "example_dim", 3)
        try:
            model = build_model(name, dim=dim)
        except Exception:  # a family with other required arguments: its paper configuration
            from vpintegrator.models import default_model_config

            model = build_model(name, **{"dim": dim, **default_model_config(name)})
        for module in model.modules():
            fn = packer_for(module)
            if fn is not None:
                out.append((P.PackerProtocol, fn, f"packer of {type(module).__name__}"))
    for cls in (TensorBoardSink, MLflowSink):  # classes: their instances need the optional extras
        out.append((P.SinkProtocol, cls, f"sink {cls.__name__}"))
    return out


def _protocol_members(proto) -> list[str]:
    """The Protocol's own attributes (annotated) and methods (``__call__`` included)."""
    names = set(proto.__dict__.get("__annotations__", {}))
    names |= {n for n, v in vars(proto).items() if (callable(v) or isinstance(v, property))
              and (not n.startswith("_") or n == "__call__")}
    return sorted(names)


def _registries() -> dict[str, Path]:
    """Every public ``register_*`` function of the package (a plug-in surface) -> its file."""
    found = {}
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("register_") and not _is_private(node.name):
                found[node.name] = path
    for name in ("register_fused_buffers", "register_compositions"):  # buffers of a layer; compositions are integrators
        found.pop(name)
    return found


def test_every_registry_takes_its_contract_as_a_type():
    """Every ``register_*`` function (a plug-in surface) has its row in ``vpintegrator.protocols``' table, and
    the contract that row names is the annotation of the plug-in parameter (so mypy checks every
    registration); every Protocol of the module is the type of some driver's parameter or attribute."""
    from vpintegrator import protocols

    rows = [line for line in (protocols.__doc__ or "").splitlines() if line.startswith("| ") and "register" in line]
    contracts = {"register_system": "type[System]", "register_integrator": "Integrator",
                 "register_model": "M", "register_packer": "PackerProtocol | None"}
    assert set(_registries()) == set(contracts), "a new plug-in surface: give it a contract and a row"
    for name, path in _registries().items():
        assert any(f"``{name}" in row for row in rows), f"{name}: a plug-in surface without a row in protocols"
        fn = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name)
        args = [*fn.args.posonlyargs, *fn.args.args]
        plugin = args[1] if name == "register_packer" else args[0]  # register_packer(cls, fn)
        assert plugin.annotation is not None and ast.unparse(plugin.annotation) == contracts[name], name
    used = set()
    for path in _modules():
        if path.name != "protocols.py":
            used |= {name for name in protocols.__all__ if name in path.read_text()}
    assert used == set(protocols.__all__), f"Protocols no module uses as a type: {set(protocols.__all__) - used}"


def test_shipped_plugins_satisfy_their_protocols():
    """isinstance against the runtime-checkable Protocol, and each Protocol method accepts the Protocol's
    arguments (its signature binds them), so a rename or a dropped parameter fails here."""
    for proto, plugin, what in _shipped_plugins():
        if isinstance(plugin, type):
            missing = [m for m in _protocol_members(proto) if not hasattr(plugin, m)]
            assert not missing, f"{what}: lacks {missing}"
        else:
            assert isinstance(plugin, proto), f"{what} is not a {proto.__name__}"
        for member in _protocol_members(proto):
            want = vars(proto).get(member)
            if not callable(want):  # a data attribute or a property: its presence is checked above
                continue
            have = plugin if member == "__call__" and inspect.isfunction(plugin) else getattr(plugin, member)
            params = list(inspect.signature(want).parameters.values())[1:]  # without self
            args = [object()] * sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
                                    for p in params)
            sig = inspect.signature(have)
            if isinstance(plugin, type) and member != "__call__":
                args = [object(), *args]  # an unbound method takes self
            sig.bind(*args)  # raises TypeError: the plug-in's member does not take the Protocol's arguments


def test_a_non_conforming_plugin_is_refused():
    from vpintegrator import protocols as P

    class NoClose:
        def log(self, row):
            return None

    assert not isinstance(NoClose(), P.SinkProtocol)
    assert not isinstance(object(), P.PackerProtocol)


def test_the_step_strategy_is_as_wide_as_the_loop_needs():
    """Every member of ``StepStrategy`` is read by the training loop (``self.steps.X`` or ``s.X``): a member
    the loop does not use is not part of the contract."""
    import re

    from vpintegrator.training.strategy import StepStrategy

    loop = (PACKAGE / "training" / "loop.py").read_text()
    unused = [m for m in _protocol_members(StepStrategy) if not re.search(rf"(self\.steps|\bs)\.{m}\b", loop)]
    assert not unused, f"StepStrategy members the loop never uses: {unused}"


# --------------------------------------------------------------------------- no doorways


def _is_package_import(node: ast.stmt) -> bool:
    """``from . import x``, ``from ..mod import x``, ``from vpintegrator.mod import x``, ``import vpintegrator.mod``."""
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == "vpintegrator"
    return isinstance(node, ast.Import) and all(a.name.split(".")[0] == "vpintegrator" for a in node.names)


def _is_shim(source: str) -> bool:
    """Whether a module (not a package's ``__init__``) is a doorway: apart from its docstring, ``from
    __future__`` imports and an ``__all__`` assignment, its body is only imports from the package itself
    (at least one), so it defines nothing and exists to keep another module's names importable under a
    second path. A module that chooses between imports (``_toml``: tomllib or tomli) or defines anything is
    not one."""
    body = [n for n in ast.parse(source).body
            if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))]
    body = [n for n in body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    body = [n for n in body if not (isinstance(n, (ast.Assign, ast.AnnAssign)) and all(
        isinstance(t, ast.Name) and t.id == "__all__" for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))]
    return bool(body) and all(_is_package_import(n) for n in body)


# Doorway modules still to be removed: the three rollout ones go with the split of rollout/compare.py (issue
# 44, item 1). Only shrinks; empty it when they are gone.
KNOWN_SHIMS: set[str] = set()


def test_the_shim_rule_can_fail():
    assert _is_shim('"""Moved."""\nfrom __future__ import annotations\nfrom .loop import a, b\n__all__ = ["a", "b"]\n')
    assert _is_shim("from vpintegrator.models.registry import x  # noqa: F401\n")
    assert not _is_shim('"""Reader."""\nimport sys\nif sys.version_info >= (3, 11):\n    import tomllib\n')
    assert not _is_shim("from .loop import a\n\ndef b():\n    return a\n")
    assert not _is_shim("from .loop import a\nB = a\n")
    assert not _is_shim('"""Only a docstring."""\n')


def test_no_shim_modules():
    """No module exists only to re-export another module's names (a doorway for an old import path): when a
    name moves, its users move with it. Objects pickled under a gone module path load through the one table
    ``vpintegrator.models.MOVED_MODULES`` (``load_pickled``) instead."""
    found = {path.relative_to(PACKAGE).as_posix() for path in _modules()
             if path.name not in ("__init__.py", "__main__.py") and _is_shim(path.read_text())}
    assert not found - KNOWN_SHIMS, f"re-export shims (move their users, remove them): {sorted(found - KNOWN_SHIMS)}"


_SOURCE_LINE = re.compile(r"^\s*(def \w+|class \w+[(:]|@jit\b|import \w|from [\w.]+ import )", re.M)


def _writes_source(text: str) -> list[str]:
    """What in a module runs or writes Python source: calls of ``exec``/``eval``/``compile``, and string literals
    (f-strings too, docstrings not) with a line of code in them (``def f(``, ``import x``, ``@jit``)."""
    tree = ast.parse(text)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval", "compile"):
            found.append(f"{node.func.id}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if _SOURCE_LINE.search(node.value):
                found.append(f"line {node.lineno}: {node.value.strip().splitlines()[0][:40]!r}")
    return found


def test_the_source_rule_can_fail():
    assert _writes_source("exec('x = 1')") == ["exec()"]
    assert _writes_source('step = [f"def _step_{name}(p, h):"]\n')
    assert _writes_source('HEADER = """Generated.\n\nimport math\nfrom ._jit import jit\n"""\n')
    assert not _writes_source('"""A docstring that shows code:\n\n    from vpintegrator import x\n"""\n'
                              'import re\nre.compile("x")\nmodel.eval()\nmsg = "use import_class"\n')


def test_no_python_written_as_strings():
    """No module runs or writes Python source (the lean loops of ``compiled/lean.py`` are numba's
    specialisations of one function per method, not a generated file)."""
    found = {path.relative_to(PACKAGE).as_posix(): hits for path in _modules()
             if (hits := _writes_source(path.read_text()))}
    assert not found, f"modules that write or run source text: {found}"


def test_moved_modules_are_gone_and_their_targets_exist():
    """Each row of the moved-module table names a module (or a module's class) that no longer exists and
    one that does."""
    import importlib
    import importlib.util

    from vpintegrator.models import MOVED_MODULES

    for old, new in MOVED_MODULES.items():
        old_module, _, old_name = old.partition(":")
        if old_name:
            assert not hasattr(importlib.import_module(old_module), old_name), f"{old}: still there; remove its row"
        else:
            assert importlib.util.find_spec(old_module) is None, f"{old}: still importable; remove its row or the module"
        new_module, _, new_name = new.partition(":")
        assert getattr(importlib.import_module(new_module), new_name) if new_name else importlib.import_module(new_module)


# --------------------------------------------------------------------------- one plan per command


#: the library functions (outside vpintegrator/cli/) that take a command's options: a parameter typed by a
#: ``vpintegrator.config.Config`` subclass, ``argparse.Namespace`` or ``SimpleNamespace``, or an untyped (or
#: ``Any``) parameter named like an options object (``OPTIONS_NAMES``). Each command's Python entry point and its
#: one plan builder, one reason each; everything below a builder takes the plan (or a piece of it).
ALLOWED_CONFIG_TAKERS = {
    "training/run.py:fit": "vp-train's Python entry point: a config, a dict, a TOML path or a shipped name",
    "training/plan.py:build_plan": "vp-train's plan builder: TrainConfig -> TrainPlan (every check there)",
    "training/plan.py:_objects_config": "vp-train's plan builder's first step: whatever fit was given as a TrainConfig",
    "rollout/run.py:run_rollouts": "vp-rollout's Python entry point",
    "rollout/plan.py:build_plan": "vp-rollout's plan builder: RolloutConfig -> RolloutPlan",
    "rollout/precision.py:run_work_precision": "the work-precision ladder's Python entry point (builds its plan)",
    "studies/options.py:config_toml": "the study driver's --print-config: the parsed options as TOML",
    "studies/options.py:_build": "the study parser: the checked values as the study's options (Config)",
    "studies/plan.py:StudyPlan.shared": "the plan builders' common part: the shared keys of StudyOptions",
    "studies/plan.py:StudyPlan.build": "the plan builder of a study with no keys of its own",
    "studies/attention.py:build_plan": "the attention step's plan builder: AttentionOptions -> AttentionPlan",
    "studies/compare.py:build_plan": "the comparison engine's plan builder: CompareOptions -> ComparePlan",
    "studies/context/design.py:build_plan": "the context study's plan builder: ContextOptions -> ContextPlan",
    "studies/rigid_body.py:build_plan": "the rigid-body study's plan builder: RigidBodyOptions -> RigidBodyPlan",
    "studies/rigid_body_results/cost.py:build_plan": "the rigid-body cost step's plan builder: CostOptions -> CostPlan",
    "studies/rigid_body_quality.py:build_plan": "the quality study's plan builder: QualityOptions -> QualityPlan",
    "studies/rigid_body_structure/design.py:build_plan": "the structure study's plan builder -> StructurePlan",
    "studies/unknown_form/design.py:build_plan": "the unknown-form study's plan builder -> UnknownFormPlan",
    "studies/reduction/plan.py:build_plan": "the reduction study's plan builder: ReductionOptions -> ReductionPlan",
    "studies/partial_observation/plan.py:build_plan": "the partial-observation study's plan builder -> "
                                                      "PartialObservationPlan",
    "studies/memory/plan.py:build_plan": "the memory study's plan builder: MemoryOptions -> MemoryPlan",
    "data/generation.py:generate": "vp-gen's Python entry point (builds its plan)",
    "data/generation_plan.py:build_plan": "vp-gen's plan builder: GenerationSpec -> GenerationPlan",
    "data/spec.py:_check_names": "GenerationSpec's own construction (the config being checked)",
    "data/spec.py:_apply_overrides": "GenerationSpec's own construction (--set applied to the config)",
}
#: untyped (or ``Any``) parameters with these names are options objects too
OPTIONS_NAMES = {"config", "cfg", "options", "opts", "namespace", "ns", "settings", "spec"}
#: annotations that are options objects whatever the parameter is called (with the Config subclasses)
OPTIONS_TYPES = {"Namespace", "SimpleNamespace"}


def _config_types() -> set[str]:
    """The names of ``Config`` and of every subclass of it the package defines (each module imported)."""
    import importlib

    from vpintegrator.config import Config

    for path in _modules():
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] != "__main__":
            importlib.import_module(".".join(("vpintegrator", *parts[: -1 if parts[-1] == "__init__" else None])))
    found, todo = {"Config"}, [Config]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub.__name__)
            todo.append(sub)
    return found


def _config_takers(source: str, where: str, types: set[str]) -> set[str]:
    """``where:function`` (``where:Class.method`` for a method) for every function in ``source`` with a
    parameter annotated by one of ``types`` or ``OPTIONS_TYPES`` (anywhere in the annotation: ``X | None``,
    ``tuple[X, Y]``), or untyped/``Any`` and named in ``OPTIONS_NAMES``; ``*args``/``**kwargs`` do not count."""
    found = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                    ann = arg.annotation
                    text = "" if ann is None else (ann.value if isinstance(ann, ast.Constant) and isinstance(
                        ann.value, str) else ast.unparse(ann))
                    names = {w.split(".")[-1] for w in re.findall(r"[A-Za-z_][\w.]*", text)}
                    if names & (types | OPTIONS_TYPES) or (names <= {"Any"} and arg.arg in OPTIONS_NAMES):
                        found.add(f"{where}:{prefix}{child.name}")
                visit(child, prefix)  # nested functions count as their own (same where)
                continue
            visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_config_rule_can_fail():
    snippet = ("import argparse\nfrom types import SimpleNamespace\n\n"
               "def build_plan(options: TrainOptions):\n    return run(plan)\n\n"
               "class Steps:\n    def __init__(self, settings, model):\n        self.lr = settings.lr\n\n"
               "def step(plan, *, a: 'argparse.Namespace | None' = None):\n    pass\n\n"
               "def inner(plan):\n    def go(x: tuple[int, SimpleNamespace]):\n        pass\n\n"
               "def fine(plan: TrainPlan, config_path: str, options: dict[str, int], *args, **config):\n    pass\n")
    assert _config_takers(snippet, "x.py", {"TrainOptions"}) == {"x.py:build_plan", "x.py:Steps.__init__",
                                                                "x.py:step", "x.py:go"}


def test_no_config_below_the_plan_builders():
    """A command's config is turned into a frozen, typed plan once, by its plan builder; below it every
    function takes the plan (or the piece it needs), never the config, a namespace or an untyped options object
    (STYLE.md "Plans, not configs")."""
    types = _config_types()
    found = set()
    for path in _modules():
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] != "cli":
            found |= _config_takers(path.read_text(), rel.as_posix(), types)
    assert found == set(ALLOWED_CONFIG_TAKERS), (
        f"new config takers (take the plan instead): {sorted(found - set(ALLOWED_CONFIG_TAKERS))}; "
        f"gone from the allowed set (remove them there): {sorted(set(ALLOWED_CONFIG_TAKERS) - found)}")
