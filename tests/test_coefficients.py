"""Each method's coefficients are written once (issue 59): in ``vpintegrator/integrators/coefficients.py``, read by
every path. The scan below finds a copy anywhere else in the package: a float literal equal to a coefficient, a
Gauss-Legendre tableau computed (``leggauss``), a cube root of 2 or 4 (the compositions' constants) or RK4's
weights written out (a division by 6)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import vpintegrator
from vpintegrator.integrators import coefficients as C

PACKAGE = Path(vpintegrator.__file__).resolve().parent
HOME = PACKAGE / "integrators" / "coefficients.py"


def _simple(v: float) -> bool:
    """0, 1/8, 1/4, 1/2, 1, 2, 6, ...: numbers too common to tell a copy of a coefficient from other code."""
    return abs(v * 8.0 - round(v * 8.0)) < 1e-12


def coefficient_values() -> list[float]:
    """Every coefficient of every method, the common numbers left out (RK4's weights 1/6, 1/3 too: DOP853's nodes
    hold 1/3; a division by 6 finds RK4 written out)."""
    values = [*C.TRIPLE_JUMP4, *C.SUZUKI4, *C.YOSHIDA6, C.MCLACHLAN2_A, *C.BLANES_MOAN4_A, *C.BLANES_MOAN4_B]
    for a, b, scale in (C.EULER, C.RK4):
        values += [*np.ravel(a), *b, scale]
    for s in range(1, 6):
        values += [float(v) for arr in C.gauss_legendre(s) for v in np.ravel(arr)]
    return sorted({abs(float(v)) for v in values if not _simple(abs(float(v)))})


def copies(source: str, values: list[float]) -> list[str]:
    """What in ``source`` (a module's text) writes a method's coefficients again."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and not _simple(node.value):
            hit = [v for v in values if math.isclose(node.value, v, rel_tol=1e-9)]
            if hit:
                found.append(f"line {node.lineno}: the literal {node.value!r} (a coefficient, {hit[0]!r})")
        elif isinstance(node, ast.Attribute) and node.attr == "leggauss":
            found.append(f"line {node.lineno}: a Gauss-Legendre tableau computed (leggauss)")
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.BinOp)
              and isinstance(node.right.right, ast.Constant) and node.right.right.value == 3.0):
            found.append(f"line {node.lineno}: a cube root (a composition's coefficient)")
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
              and node.right.value == 6.0):
            found.append(f"line {node.lineno}: a division by 6 (RK4's weights)")
    return found


def test_no_method_coefficient_is_written_twice():
    values = coefficient_values()
    assert len(values) > 40  # the scan has something to look for
    found = {str(p.relative_to(PACKAGE)): copies(p.read_text(), values) for p in sorted(PACKAGE.rglob("*.py"))
             if p.resolve() != HOME}
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("copy", [
    "W = (0.784513610477560, 0.235573213359357)",            # Yoshida 6 written out
    "c = (0.21132486540518713, 0.7886751345948129)",          # Gauss-Legendre 4's nodes
    "x, w = np.polynomial.legendre.leggauss(3)",             # a Gauss tableau computed again
    "g = 1.0 / (2.0 - 2.0 ** (1.0 / 3.0))",                   # the triple jump computed again
    "y1 = y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)",  # RK4 written out
    "a = -1.7024143839193153",                                # the triple jump's middle fraction
])
def test_the_scan_finds_a_copy(copy):
    assert copies(copy, coefficient_values())


def test_the_coefficients_module_is_what_the_methods_read():
    from vpintegrator.integrators import RK4, ExplicitEuler, GaussLegendre, SCHEMES
    from vpintegrator.integrators.lie_poisson import STRANG_ROTATIONS
    from vpintegrator.models.vector_field import gauss_legendre_tableau

    assert RK4.tableau is C.RK4 and ExplicitEuler.tableau is C.EULER
    assert SCHEMES["tj4"][0] is C.TRIPLE_JUMP4 and SCHEMES["y6"][0] is C.YOSHIDA6 and STRANG_ROTATIONS is C.STRANG_ROTATIONS
    for s in (1, 2, 3):
        assert all(x is y for x, y in zip(GaussLegendre(stages=s).tableau, C.gauss_legendre(s)))
        assert all(np.array_equal(x, y) for x, y in zip(gauss_legendre_tableau(s), C.gauss_legendre(s)))
