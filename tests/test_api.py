"""Python API conventions: what type checkers see of the root package, and short one-line reprs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import vpintegrator
from vpintegrator.data import generate, load_spec
from vpintegrator.data.rollouts import read_rollout
from vpintegrator.models import build_model
from vpintegrator.rollout import RolloutConfig, run_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT_INIT = Path(vpintegrator.__file__)


def _type_checking_imports() -> dict[str, str]:
    """name -> module (relative, as in _LAZY) of every import under ``if TYPE_CHECKING:`` in the root."""
    tree = ast.parse(ROOT_INIT.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
                for alias in stmt.names:
                    # "from .m import x as x": the explicit re-export form pyright wants in a py.typed package
                    assert alias.asname == alias.name, alias.name
                    found[alias.name] = "." * stmt.level + (stmt.module or "")
    return found


def test_every_root_name_is_importable():
    for name in vpintegrator.__all__:
        assert getattr(vpintegrator, name) is not None, name
    module = __import__("vpintegrator", fromlist=vpintegrator.__all__)  # what "from vpintegrator import *" does
    assert all(hasattr(module, name) for name in vpintegrator.__all__)


def test_type_checkers_see_every_lazy_name():
    seen = _type_checking_imports()
    lazy = vpintegrator._LAZY
    assert seen.keys() == lazy.keys(), sorted(set(seen) ^ set(lazy))
    for name, module in seen.items():  # from the module _LAZY resolves it from
        assert module == lazy[name], name
        assert getattr(importlib.import_module(module, "vpintegrator"), name) is getattr(vpintegrator, name)
    assert vpintegrator.__all__ == ["__version__", "VPIntegratorError", "Trajectories", *lazy]



@pytest.mark.parametrize("package", ["vpintegrator", "vpintegrator.training"])
def test_reexport_block_is_written_from_lazy(package):
    """Each package of ``vpintegrator._lazy.GENERATED`` writes its names once, in ``_LAZY``: its
    ``if TYPE_CHECKING:`` imports and its ``__all__`` are what ``scripts/write_exports.py`` writes from it
    (run that after editing ``_LAZY``)."""
    from vpintegrator._lazy import GENERATED, exports_block

    assert package in GENERATED
    source = Path(importlib.import_module(package).__file__).read_text(encoding="utf-8")
    start, end, block = exports_block(source)
    assert "".join(source.splitlines(keepends=True)[start - 1:end]) == block, "run python scripts/write_exports.py"


def test_the_written_block_follows_lazy(tmp_path):
    """A name added to ``_LAZY`` appears in both generated parts, in the forms type checkers read."""
    from vpintegrator._lazy import exports_block, write_exports

    init = tmp_path / "__init__.py"
    init.write_text('from typing import TYPE_CHECKING\nfrom ._lazy import lazy_exports\nfrom .errors import E\n'
                    '_LAZY: dict[str, str] = {"b": ".m", "a": "..up"}\nif TYPE_CHECKING:\n    pass\n__all__ = []\n'
                    'tail = 1\n')
    assert write_exports(str(init)) and not write_exports(str(init))
    text = init.read_text()
    assert "    from ..up import a as a\n    from .m import b as b\n" in text
    assert '__all__ = [\n    "E",\n    "b",\n    "a",\n]\ntail = 1\n' in text
    assert exports_block(text)[2] in text

def test_all_is_a_literal_list():
    tree = ast.parse(ROOT_INIT.read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"]
    assert isinstance(node.value, ast.List) and all(isinstance(e, ast.Constant) for e in node.value.elts)


def test_dir_shows_the_public_names_only():
    """dir(vpintegrator) lists __all__ (and subpackages), not the module's own helpers (issue 88)."""
    import vpintegrator
    import vpintegrator.training

    for module in (vpintegrator, vpintegrator.training):
        names = dir(module)
        assert set(module.__all__) <= set(names)
        assert not {"TYPE_CHECKING", "annotations", "lazy_exports", "importlib"} & set(names)
    assert "training" in dir(vpintegrator)  # a subpackage imported is an attribute a user can reach


def test_importing_the_root_stays_light():
    import subprocess
    import sys

    code = "import sys, vpintegrator; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT_INIT.parent.parent)
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- reprs


@pytest.fixture(scope="module")
def rollout_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    data = root / "data.h5"
    generate(load_spec("rigid_body", n_traj=60, t_end=20.0, dt=0.1), out=data)
    torch.manual_seed(0)
    vpt = build_model("vpt", dim=3, seq_len=3, n_blocks=1, L=1)
    with torch.no_grad():
        for p in vpt.parameters():
            p.mul_(0.1)
    report = run_rollouts(RolloutConfig(data=data, out=root / "ro.h5", integrators=["rk4", "implicit_midpoint"],
                                        models=[("vpt", vpt)], t_end=30.0))
    return data, report


def _one_line(obj, most: int = 300) -> str:
    text = repr(obj)
    assert "\n" not in text and len(text) <= most, (len(text), text[:400])
    return text


def test_rollout_result_repr_is_one_short_line(rollout_files):
    _, report = rollout_files
    res = read_rollout(report.out)
    assert res.reference.y.size > 10_000  # big enough that printing the arrays would be long
    text = _one_line(res)
    assert text.startswith("RolloutResult(") and "n_traj=60" in text and "'rk4'" in text and "'vpt'" in text
    assert "n_states=301" in text and "t=[0, 30]" in text
    _one_line(res.metrics["rk4"])
    text = _one_line(report)
    assert "methods=['rk4', 'implicit_midpoint', 'vpt']" in text


def test_trajectories_and_plot_data_reprs(rollout_files):
    from vpintegrator.data.trajectory_files import read_trajectories
    from vpintegrator.plotting import plot_data

    data, report = rollout_files
    traj = read_trajectories(data)
    assert _one_line(traj) == "Trajectories(system='rigid_body', n_traj=60, n_states=201, dim=3, t=[0, 20])"
    assert "methods=['rk4', 'implicit_midpoint', 'vpt']" in _one_line(plot_data(report.out))


def test_rollout_stats_and_fit_result_reprs(tmp_path):
    from vpintegrator.rollout.engine import RolloutStats
    from vpintegrator.training.results import FitResult

    stats = RolloutStats(failed_step=np.full(5000, -1), seconds=1.5, setup_seconds=0.1, n_steps=100)
    assert _one_line(stats) == "RolloutStats(n_traj=5000, n_steps=100, n_failed=0, seconds=1.5, seconds_per_step=0.015)"
    model = build_model("vpt", dim=3)
    result = FitResult(run_dir=tmp_path, model=model, epochs=3, steps=30, train_loss=1.0, val_loss=2.0,
                       best_loss=0.5, best_epoch=2, wall_time=1.0, n_params=162, device="cpu", dtype="float32",
                       stopped="epochs", history=[{"epoch": float(k), "train_loss": 1.0} for k in range(1000)])
    text = _one_line(result)
    assert "model='vpt'" in text and "n_params=162" in text and "best_epoch=2" in text


def test_no_lazy_name_is_also_a_submodule():
    """A package's lazy export must not share its name with one of the package's submodules: importing the
    submodule (``python -m`` a CLI, ``import vpintegrator.data.x``) would replace the function with the module
    (the package attribute is set to the module), so ``from vpintegrator.data import generate`` gave a module."""
    import importlib
    import pkgutil

    import vpintegrator

    clashes = []
    for info in pkgutil.walk_packages(vpintegrator.__path__, "vpintegrator."):
        if not info.ispkg:
            continue
        pkg = importlib.import_module(info.name)
        lazy = getattr(pkg, "_LAZY", {})
        subs = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
        clashes += [f"{info.name}.{name}" for name in lazy if name in subs]
    assert not clashes, clashes


def test_generate_stays_the_function_after_its_module_is_imported():
    import importlib

    importlib.import_module("vpintegrator.data.generation")
    from vpintegrator.data import generate

    assert callable(generate) and generate.__name__ == "generate"


@pytest.mark.parametrize("package", ["vpintegrator.data", "vpintegrator.rollout", "vpintegrator.training"])
def test_type_checkers_see_every_lazy_name_of_the_subpackages(package):
    """pyright reads neither ``__getattr__`` nor a computed ``__all__``: each lazy name is re-exported under
    ``if TYPE_CHECKING:`` as ``from .m import x as x`` (its known type, not Unknown), and ``__all__`` is a
    literal list of the same names."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        assert alias.asname == alias.name, alias.name
                        seen[alias.name] = "." * stmt.level + (stmt.module or "")
    assert seen == module._LAZY
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"]
    assert isinstance(node.value, ast.List) and {e.value for e in node.value.elts} == set(module._LAZY)
    for name, where in seen.items():
        assert getattr(importlib.import_module(where, package), name) is getattr(module, name)
