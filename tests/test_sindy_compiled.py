"""A fitted SINDy field runs in the compiled steppers (``vpintegrator.compiled.library_field``, kernel id 101): its
compiled field and Jacobian are the NumPy ones, a batch-1 rollout of ``sindy+METHOD`` runs compiled with the NumPy
path's numbers, and the row says which runner ran (so its cost is the method's, not the NumPy stepper's)."""

from __future__ import annotations

import numpy as np
import pytest

from vpintegrator.compiled import available
from vpintegrator.rollout.sindy import SindyField, library

pytestmark = pytest.mark.skipif(not available(), reason="numba is not installed")

LIBRARIES = ["poly1", "poly3", "trig", "exp", "poly3+trig+exp"]


def _field(name: str, dim: int, seed: int = 0, sparsity: float = 0.5) -> SindyField:
    rng = np.random.default_rng(seed)
    lib = library(name, dim)
    keep = rng.random(lib.n_features) < sparsity
    keep[0] = True
    lib = lib.select(keep)
    return SindyField(library=lib, coefficients=0.3 * rng.normal(size=(lib.n_features, dim)))


@pytest.mark.parametrize("name", LIBRARIES)
@pytest.mark.parametrize("dim", [3, 4])
def test_compiled_field_and_jacobian_are_the_numpy_ones(name, dim):
    from vpintegrator.compiled.systems import jacobian_rows, system_kernel, vector_field_rows

    field = _field(name, dim, seed=dim)
    kid, p = system_kernel(field)
    assert kid == 101
    z = np.random.default_rng(7).normal(size=(6, dim))
    f, J = np.empty((6, dim)), np.empty((6, dim, dim))
    vector_field_rows(kid, p, z, f)
    jacobian_rows(kid, p, z, J)
    np.testing.assert_allclose(f, field.vector_field(z), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(J, field.jacobian(z), rtol=1e-13, atol=1e-13)


def test_a_zero_state_and_zero_powers_give_finite_derivatives():
    from vpintegrator.compiled.systems import jacobian_rows, system_kernel

    field = _field("poly3", 3, sparsity=1.0)
    kid, p = system_kernel(field)
    J = np.empty((1, 3, 3))
    jacobian_rows(kid, p, np.zeros((1, 3)), J)
    np.testing.assert_allclose(J, field.jacobian(np.zeros((1, 3))), atol=1e-15)


@pytest.mark.parametrize("method", ["rk4", "implicit_midpoint", "gauss_legendre4"])
def test_batch1_rollout_runs_compiled_with_the_numpy_numbers(method):
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.steps import IntegratorStep

    # the rigid body's Euler equations as a library field (its three true terms)
    lib = library("poly2", 3)
    names = lib.names()
    keep = np.array([n in ("x0 x1", "x0 x2", "x1 x2") for n in names])
    lib = lib.select(keep)
    field = SindyField(library=lib, coefficients=np.array([[0, 0, 0.5], [0, -1.0, 0], [0.5, 0, 0]]))
    w0 = np.array([[[0.6, 0.3, 0.74]]])
    compiled = IntegratorStep(field, method, 0.2)
    numpy_path = IntegratorStep(field, method, 0.2, compiled_max_batch=0)
    a = rollout(compiled, w0, 0.2, 200)
    b = rollout(numpy_path, w0, 0.2, 200)
    assert compiled.describe()["runner"] == "numba" and numpy_path.describe()["runner"] == "numpy"
    np.testing.assert_allclose(a.y, b.y, rtol=0, atol=1e-12)


def test_the_sindy_row_runs_compiled_at_batch_one():
    pytest.importorskip("pysindy")
    from vpintegrator.data import solve_flow
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.sindy import SindyStep
    from vpintegrator.systems import RigidBody

    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(24, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    y = solve_flow(RigidBody(), y0, 0.2 * np.arange(61))
    one = SindyStep(y[:20], y[20:], "gauss_legendre4", 0.2)
    many = SindyStep(y[:20], y[20:], "gauss_legendre4", 0.2)
    a = rollout(one, y[:1, :1], 0.2, 50)
    assert one.describe()["runner"] == "numba" and a.meta["setup_seconds"] > 0
    b = rollout(many, y[:12, :1], 0.2, 50)  # any number of trajectories: compiled, each row as at batch 1
    assert many.describe()["runner"] == "numba"
    np.testing.assert_array_equal(a.y[0], b.y[0])
    np.testing.assert_allclose(a.y[0], y[0, :51], rtol=0, atol=1e-4)
