"""A process that compiles numba kernels rather than loading them from the cache says so in one INFO line (issue
88: a fresh install's first rollout compiled for minutes without a word); a process that loads them says nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")

SCRIPT = textwrap.dedent("""
    import logging, sys
    sys.path.insert(0, sys.argv[1])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    import kernels_here
    print(kernels_here.double(2.0) + kernels_here.triple(1.0))
""")

MODULE = textwrap.dedent("""
    from vpintegrator.compiled._jit import jit

    @jit
    def double(x):
        return 2.0 * x

    @jit
    def triple(x):
        return 3.0 * x
""")


def _run(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7.0"]
    return [line for line in out.stderr.splitlines() if "compiling the numba kernels" in line]


def test_one_line_when_compiling_and_none_when_loaded_from_the_cache(tmp_path):
    (tmp_path / "kernels_here.py").write_text(MODULE)
    first = _run(tmp_path)  # two kernels compiled: one line
    assert len(first) == 1 and first[0].startswith("INFO ") and "cached for the next run" in first[0]
    assert _run(tmp_path) == []  # both loaded from the cache
