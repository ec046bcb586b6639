"""scripts/mutation_check.py: a method broken by 1e-6 at its definition must fail the parity tests (tests/test_parity.py).

The texts it breaks are where the script says (a code change that moves one fails here, not silently there); a real
run breaks the NumPy RK4 weight (caught) and rewrites a constant without changing its value (an equivalent mutant:
it must survive, so the script cannot call everything caught).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from vpintegrator.integrators import list_integrators

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mutation_check.py"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="repository files (not in the wheel)")


def _script():
    spec = importlib.util.spec_from_file_location("mutation_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_every_mutation_breaks_text_that_is_in_the_code():
    mc = _script()
    assert mc.misplaced(list(mc.MUTATIONS)) == []
    paths = {m.file.split("/")[1] for m in mc.MUTATIONS}
    assert paths == {"integrators", "compiled"}
    files = {m.file.rsplit("/", 1)[1] for m in mc.MUTATIONS if "/compiled/" in m.file}
    assert {"kernels.py", "newton.py", "lean.py", "lie_poisson.py"} <= files  # every compiled path is broken once
    for m in mc.MUTATIONS:
        assert m.old != m.new and set(m.methods) <= set(list_integrators()), m.name
    assert len({m.name for m in mc.MUTATIONS}) == len(mc.MUTATIONS)


def test_a_text_that_moved_is_a_one_line_error(tmp_path, capsys):
    mc = _script()
    gone = mc.Mutation("gone", "vpintegrator/integrators/explicit.py", "no such text", "x", ("rk4",))
    assert mc.misplaced([gone]) == [
        "mutation gone: 'no such text' occurs 0 times in vpintegrator/integrators/explicit.py (expected once): the code "
        "moved; update MUTATIONS in scripts/mutation_check.py"]
    assert mc.run([gone]) == 2
    assert "update MUTATIONS" in capsys.readouterr().err


@pytest.mark.slow
def test_a_broken_rk4_weight_is_caught_and_an_equivalent_rewrite_survives(capsys):
    """~40 s on a loaded 2-core machine: a baseline and two runs of the RK4 parity tests in a scratch copy."""
    mc = _script()
    same = mc.Mutation("numpy_rk4_same_value", "vpintegrator/integrators/explicit.py", "return y + (h / scale) * acc",
                       "return y + (h / (scale * 1.0)) * acc", ("rk4",))
    assert mc.run([mc.BY_NAME["numpy_rk4_weight"], same]) == 1
    out = capsys.readouterr().out
    assert "parity tests, pass" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("numpy_rk4")}
    assert "caught" in lines["numpy_rk4_weight"] and "SURVIVED" in lines["numpy_rk4_same_value"]
    assert "1 of 2 mutations caught" in out
