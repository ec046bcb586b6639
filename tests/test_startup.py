"""vp-gen's start-up (issue 33, item 4): the compiled kernels' cached machine code loads without numba's
full target refresh (``vpintegrator.compiled._jit.lean_cache_load``), with the same numbers as the
ordinary load; the DOP853 path imports neither the classical integrators' driver nor numba's array
library. Timings are measured by scripts/bench_startup.py, not here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import json, sys
import numpy as np
full = sys.argv[1] == "full"
if full:  # numba's ordinary start-up: every typing and lowering registry, before the load
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()
from vpintegrator.data import generate, load_spec
traj = generate(load_spec(sys.argv[2], n_traj=4, t_end=2.0), workers=1)
print(json.dumps({"y": traj.y.tobytes().hex(), "arraymath": "numba.np.arraymath" in sys.modules,
                  "integration": "vpintegrator.data.integration" in sys.modules}))
"""


def _run(mode: str, system: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode, system], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("system", ["rigid_body", "coupled_oscillator_box"])
def test_lean_load_gives_the_numbers_of_the_full_start_up(system):
    full = _run("full", system)  # also fills numba's cache, so the next process loads it
    lean = _run("lean", system)
    assert lean["y"] == full["y"]  # the same machine code, to the bit
    assert full["arraymath"] and not lean["arraymath"]  # the registries were never loaded
    assert not lean["integration"]  # the DOP853 path leaves the fixed-step integrators alone


def test_a_cache_miss_still_compiles(tmp_path):
    """With an empty cache (a fresh NUMBA_CACHE_DIR) the lean loader finds nothing and numba compiles as
    usual (its compiler refreshes the target itself)."""
    (tmp_path / "kernel_mod.py").write_text(
        "import numpy as np\nfrom vpintegrator.compiled import _jit\n\n\n"
        "def _f(x):\n    return np.sum(np.zeros(3) + x)\n\n\nf = _jit.jit(_f)\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "OMP_NUM_THREADS": "1",
           "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    code = "import kernel_mod\nprint(kernel_mod.f(2.0))"
    for _ in range(2):  # a miss (compiled, then cached), then a hit (loaded lean)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "6.0"
    assert any((tmp_path / "cache").rglob("*.nbi"))


def test_every_kernel_cache_is_keyed_on_the_files_kernels_inline():
    """numba keys a cache on the function's own file; the package's kernels inline the systems' dispatchers
    and fields from other files, so their key also holds those files' stamps (vpintegrator._jitcache). A numba
    whose cache index has no ``_source_stamp`` fails here (the package then warns that caches may be stale)."""
    from vpintegrator import _jitcache
    from vpintegrator.compiled import kernels

    stamp = _jitcache.dependency_stamp()
    names = {path for path, _ in stamp}
    assert {"compiled/systems.py", "systems/rigid_body.py", "rollout/numba_kernel.py"} <= names
    dispatcher = next(v for v in vars(kernels).values() if hasattr(v, "_cache") and hasattr(v, "py_func"))
    assert dispatcher._cache._cache_file._source_stamp[1] == stamp


def test_a_new_dependency_stamp_makes_the_cached_kernel_stale(tmp_path, monkeypatch):
    import importlib.util

    from vpintegrator import _jitcache

    src = tmp_path / "kern.py"
    src.write_text("def f(x):\n    return x + 1.0\n")
    # every kernel kept alive: a module that is not in sys.modules is numba's "<dynamic>" one, and a cache hit
    # rebuilds its environment from the one still in memory; a garbage collection between two loads (when it
    # runs depends on what the session imported before) would otherwise make the hit an import error
    kernels = []

    def load():
        spec = importlib.util.spec_from_file_location("kern", src)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = _jitcache.njit(module.f)
        assert kernel(1.0) == 2.0
        kernels.append(kernel)
        return kernel.stats

    monkeypatch.setitem(_jitcache._state, "stamp", (("systems/a.py", 1, 1),))
    assert load().cache_misses and load().cache_hits  # compiled and cached, then loaded
    monkeypatch.setitem(_jitcache._state, "stamp", (("systems/a.py", 1, 1), ("systems/b.py", 2, 2)))
    stats = load()
    assert stats.cache_misses and not stats.cache_hits  # a file it can inline changed: compiled again


def test_the_lean_loader_sees_this_numba_as_supported():
    """The numba internals ``lean_cache_load`` relies on are there in the shape it reproduces. A numba upgrade
    that changes them fails here (the package then falls back to numba's own loader, with a warning)."""
    from vpintegrator.compiled import _jit

    assert _jit.lean_load_unsupported() is None
    kernel = _jit.jit(lambda x: x + 1.0)
    assert "load_overload" in vars(kernel._cache)  # the lean loader is in place on the dispatcher's cache
    assert kernel(1.0) == 2.0


class _OtherLoad:
    """The cache of a numba whose ``load_overload`` takes other arguments and no longer refreshes."""

    def load_overload(self, sig, target_context, *, refresh=True):
        return None

    def _load_overload(self, sig, target_context):
        return None

    def _guard_against_spurious_io_errors(self):
        return None


class _NoGuard(_OtherLoad):
    def load_overload(self, sig, target_context):
        target_context.refresh()
        return self._load_overload(sig, target_context)


class _Dispatcher:
    def __init__(self, cache):
        self._cache = cache


@pytest.mark.parametrize("cache_class, reason", [
    (_OtherLoad, r"Cache.load_overload\(self, sig, target_context, \*, refresh=True\), expected \(self, sig, target_context\)"),
    (_NoGuard, r"Cache.load_overload no longer calls _guard_against_spurious_io_errors"),
])
def test_an_unknown_numba_falls_back_to_its_own_loader(cache_class, reason, caplog, monkeypatch):
    from vpintegrator.compiled import _jit

    monkeypatch.setattr(_jit, "_warned", [])
    assert _jit.lean_load_unsupported(cache_class) is not None
    dispatcher = _Dispatcher(cache_class())
    with caplog.at_level("WARNING", logger="vpintegrator"):
        assert _jit.lean_cache_load(dispatcher) is dispatcher
        _jit.lean_cache_load(_Dispatcher(cache_class()))  # one warning per reason and process
    assert "load_overload" not in vars(dispatcher._cache)  # numba's own loader stays
    warned = [r.getMessage() for r in caplog.records if "numba's own cache loader" in r.getMessage()]
    assert len(warned) == 1 and re.search(reason, warned[0]), warned
