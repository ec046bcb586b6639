"""The compiled kernels work where numba cannot write its cache (issue 36): an installed read-only package
(``__pycache__`` not writable), no writable home and a NUMBA_CACHE_DIR that cannot be made. numba's
``cannot cache function`` is caught, one warning is logged, and the kernels compile into a temporary cache
directory (removed at exit), or without a cache where no temporary directory can be made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vpintegrator

pytestmark = pytest.mark.skipif(not vpintegrator.compiled.available if hasattr(vpintegrator, "compiled") else False,
                                reason="numba is not installed")


def _read_only_install(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the package whose ``__pycache__`` folders are files (nothing can be written there, also by
    root, whom permission bits do not stop), a HOME and NUMBA_CACHE_DIR below a regular file."""
    site = tmp_path / "site"
    shutil.copytree(Path(vpintegrator.__file__).parent, site / "vpintegrator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
    repo_specs = Path(vpintegrator.__file__).parent.parent / "systems"
    if repo_specs.is_dir() and not (site / "vpintegrator" / "_specs").is_dir():  # as a wheel ships them
        shutil.copytree(repo_specs, site / "vpintegrator" / "_specs")
    for d in [site / "vpintegrator", *(p for p in (site / "vpintegrator").rglob("*") if p.is_dir())]:
        (d / "__pycache__").write_text("not a directory\n")
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    env = {**os.environ, "PYTHONPATH": str(site), "HOME": str(blocker), "XDG_CACHE_HOME": str(blocker / "cache"),
           "NUMBA_CACHE_DIR": str(blocker / "numba"), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return site, env


SCRIPT = """
import logging, os, sys, numpy as np
import vpintegrator, vpintegrator.rollout.numba_kernel
from vpintegrator import _jitcache
from vpintegrator.compiled import compiled_stepper
from vpintegrator.data import integrate
assert vpintegrator.__file__.startswith(sys.argv[1]), vpintegrator.__file__
y0 = np.array([0.6, 0.0, 0.8])
ys = compiled_stepper("rigid_body", "rk4", 0.1).run(y0, 20)
ref = integrate("rigid_body", y0[None], 0.1, 20, method="rk4").y[0]
assert np.allclose(ys, ref, rtol=1e-13, atol=1e-15), abs(ys - ref).max()
where = _jitcache.fallback_dir()
print("fallback", where, os.path.isdir(where) if where else None)
"""


@pytest.mark.slow
def test_every_kernel_compiles_without_a_writable_cache(tmp_path):
    site, env = _read_only_install(tmp_path)
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(site)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "cannot cache function" not in res.stdout and "Traceback" not in res.stderr
    warnings = [line for line in res.stderr.splitlines() if "numba cannot write its cache" in line]
    assert len(warnings) == 1, res.stderr  # one warning, although many kernels were decorated
    fallback = res.stdout.split("fallback ", 1)[1].split()
    assert fallback[0].startswith(tempfile_root()) and fallback[1] == "True"
    assert not Path(fallback[0]).exists()  # removed at exit
    assert not list(site.rglob("*.nbi"))  # nothing was written into the package

    out = tmp_path / "tiny.h5"  # a command: vp-gen (the compiled DOP853), one warning line, then its output
    res = subprocess.run([sys.executable, "-m", "vpintegrator.cli.gen", "rigid_body", "--n-traj", "4", "--t-end",
                          "1", "--out", str(out)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("Warning: numba cannot write its cache") and len(
        [line for line in lines if "numba" in line]) == 1, res.stderr
    from vpintegrator.data import read_trajectories

    assert read_trajectories(out).y.shape == (4, 11, 3)


@pytest.mark.slow
def test_without_a_temporary_directory_the_kernels_compile_uncached(tmp_path):
    site, env = _read_only_install(tmp_path)
    script = ("import tempfile\n"
              "def refuse(*a, **k):\n    raise PermissionError(13, 'read-only')\n"
              "tempfile.mkdtemp = refuse\n" + SCRIPT)
    res = subprocess.run([sys.executable, "-c", script, str(site)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "fallback None None" in res.stdout
    assert len([line for line in res.stderr.splitlines() if "compiling the kernels without a cache" in line]) == 1


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_a_writable_cache_is_used_as_before():
    """Where numba can write its cache nothing changes: no fallback directory in this process."""
    from vpintegrator import _jitcache
    from vpintegrator.compiled import compiled_stepper

    stepper = compiled_stepper("rigid_body", "rk4", 0.1)
    if stepper is None:
        pytest.skip("numba is not installed")
    assert stepper.run(np.array([0.6, 0.0, 0.8]), 3).shape == (4, 3)
    assert _jitcache.fallback_dir() is None


PROBE = """
import json, sys
import vpintegrator
from vpintegrator import _probe_kernel
assert vpintegrator.__file__.startswith(sys.argv[1]), vpintegrator.__file__
k = _probe_kernel.f
assert k(1.0) == 3.0
print(json.dumps({"hits": sum(k.stats.cache_hits.values()), "misses": sum(k.stats.cache_misses.values())}))
"""


def _copy_with_probe(dest: Path) -> Path:
    """A copy of the package (as a wheel installs it elsewhere) with one small kernel of its own."""
    shutil.copytree(Path(vpintegrator.__file__).parent, dest / "vpintegrator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
    (dest / "vpintegrator" / "_probe_kernel.py").write_text(
        "from ._jitcache import njit\n\n\ndef _f(x):\n    return x + 2.0\n\n\nf = njit(_f)\n")
    return dest


def _probe(site: Path, cache: Path) -> dict:
    import json

    env = {**os.environ, "PYTHONPATH": str(site), "NUMBA_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(site)], env=env, capture_output=True, text=True,
                         cwd=site, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_installs_of_the_same_sources_share_one_cache(tmp_path):
    """Issue 90: with NUMBA_CACHE_DIR set, a kernel compiled by one copy of the package (a clone) is loaded by
    another copy of the same sources elsewhere (the wheel), whatever the files' times: the key is the content
    of every file kernels can inline, the place ``<NUMBA_CACHE_DIR>/vpintegrator/<folder>``. A changed
    dependency (a system's file) still compiles again."""
    cache = tmp_path / "cache"
    a, b = _copy_with_probe(tmp_path / "a"), _copy_with_probe(tmp_path / "b")
    for f in (b / "vpintegrator").rglob("*.py"):  # another install time
        os.utime(f, (1e9, 1e9))
    assert _probe(a, cache) == {"hits": 0, "misses": 1}
    assert _probe(b, cache) == {"hits": 1, "misses": 0}
    assert any((cache / "vpintegrator").glob("_probe_kernel.*.nbi"))
    with open(b / "vpintegrator" / "systems" / "rigid_body.py", "a") as f:  # a file kernels inline, edited
        f.write("\n# edited\n")
    assert _probe(b, cache) == {"hits": 0, "misses": 1}
