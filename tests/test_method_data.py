"""A method is its data (issue 66): an explicit Runge-Kutta method registered as its tableau alone runs compiled (the
one explicit loop reads the tableau; no name is looked up), held against a reference written here: a plain Python
loop of Heun's method on the rigid body, component by component."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import vpintegrator as vp
import vpintegrator.compiled as compiled
from vpintegrator.compiled import compiled_stepper
from vpintegrator.integrators import ExplicitRungeKutta, get_integrator, register_integrator, registry
from vpintegrator.systems import get_system

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


@dataclass(frozen=True)
class Heun(ExplicitRungeKutta):
    """Heun's method, y1 = y + h/2 (f(y) + f(y + h f(y))): its tableau and nothing else."""

    name: ClassVar[str] = "heun_test"
    order: ClassVar[int] = 2
    description: ClassVar[str] = "Heun (a test's tableau)"
    tableau: ClassVar = (((0.0, 0.0), (1.0, 0.0)), (1.0, 1.0), 2.0)


@dataclass(frozen=True)
class NotItsTableau(Heun):
    """A subclass whose step is not its tableau's: never compiled from the tableau."""

    name: ClassVar[str] = "heun_test_own_step"

    def _step(self, system, y, h):
        return y + h * system.vector_field(y)


def heun_reference(y0, h, n, inertia=(2.0, 1.0, 2.0 / 3.0)):
    """Heun's method on the free rigid body z' = z x (I^-1 z), written out: a list of (n + 1) states."""
    i1, i2, i3 = inertia
    a, b, c = (i2 - i3) / (i2 * i3), (i3 - i1) / (i3 * i1), (i1 - i2) / (i1 * i2)

    def f(z):
        return [a * z[1] * z[2], b * z[0] * z[2], c * z[0] * z[1]]

    z, out = list(map(float, y0)), [list(map(float, y0))]
    for _ in range(n):
        k1 = f(z)
        k2 = f([z[i] + h * k1[i] for i in range(3)])
        z = [z[i] + (h / 2.0) * (k1[i] + k2[i]) for i in range(3)]
        out.append(z)
    return np.array(out)


@pytest.fixture
def heun(monkeypatch):
    """Heun registered for one test (the registry restored after it)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return register_integrator(Heun())


def test_the_reference_is_the_rigid_body():
    system = get_system("rigid_body")
    y0 = np.array([0.3, -0.8, 0.5])
    ref = heun_reference(y0, 1e-4, 1)
    np.testing.assert_allclose((ref[1] - ref[0]) / 1e-4, system.vector_field(y0[None])[0], rtol=1e-3)


@needs_numba
def test_heun_registered_as_its_tableau_runs_compiled(heun):
    system = get_system("rigid_body")
    h, n = 0.05, 400
    y0 = np.array(system.default_y0, dtype=np.float64)
    stepper = compiled_stepper(system, "heun_test", h)
    assert stepper is not None and stepper.engine == "lean"  # the lean loop, read from the tableau
    assert stepper.etab == (((0.0, 0.0), (1.0, 0.0)), (1.0, 1.0), 2.0)
    ref = heun_reference(y0, h, n)
    np.testing.assert_allclose(stepper.run(y0, n), ref, rtol=0, atol=1e-13)
    traj = vp.integrate(system, y0, h, n, method="heun_test", compiled=True)  # raises unless compiled
    np.testing.assert_allclose(traj.y[0], ref, rtol=0, atol=1e-13)
    numpy = vp.integrate(system, y0, h, n, method="heun_test", compiled=False)
    np.testing.assert_allclose(numpy.y[0], ref, rtol=0, atol=1e-13)


@needs_numba
def test_heun_in_a_batch_is_each_row_of_batch_one(heun):
    system = get_system("rigid_body")
    y0s = np.array([system.default_y0, [0.3, -0.8, 0.5], [1.0, 0.2, -0.1]], dtype=np.float64)
    stepper = compiled_stepper(system, "heun_test", 0.1)
    ys = stepper.run_batch(y0s, 50)
    for r in range(3):
        np.testing.assert_array_equal(ys[r], stepper.run(y0s[r], 50))
        np.testing.assert_allclose(ys[r], heun_reference(y0s[r], 0.1, 50), rtol=0, atol=1e-13)


@needs_numba
def test_a_method_whose_step_is_not_its_tableau_is_not_compiled_from_it():
    assert compiled_stepper(get_system("rigid_body"), NotItsTableau(), 0.1) is None


@needs_numba
@pytest.mark.parametrize("name", ["euler", "rk4"])
def test_the_shipped_tableaus_take_the_same_loop(name):
    stepper = compiled_stepper(get_system("coupled_oscillator"), name, 0.1)
    assert stepper.engine == "lean" and stepper.etab[1] == tuple(get_integrator(name).tableau[1])


def test_a_tableau_tag_is_found_again_by_its_name():
    """numba's cache index pickles the loop's signature, the tableau's class by name: a new process makes it again
    from the name alone, with the same coefficients."""
    import pickle

    from vpintegrator.compiled import lean

    tableau = (((0.0, 0.0), (1.0, 0.0)), (1.0, 1.0), 2.0)
    tag = lean.explicit_tag(tableau)
    name = type(tag).__name__
    assert type(tag).tableau == tableau and lean.explicit_tag(tableau).__class__ is type(tag)
    pickled = pickle.dumps(type(tag))
    del lean.__dict__[name]  # as in a fresh process
    again = pickle.loads(pickled)
    assert again.__name__ == name and again.tableau == tableau


def test_a_stale_cache_index_naming_a_retired_class_reads_as_empty():
    from vpintegrator.compiled._jit import _stale_index_is_empty

    class Index:
        def _load_index(self):
            raise AttributeError("Can't get attribute 'RK4' on <module 'vpintegrator.compiled.lean'>")

    index = Index()
    _stale_index_is_empty(index)
    assert index._load_index() == {}


@needs_numba
@pytest.mark.parametrize("h", [0.4, 1.5, 4.0])
def test_separable_midpoint_is_numpys_midpoint(h):
    """Implicit midpoint on the separable oscillator iterates in the midpoint's q alone (2-d); its states are the
    NumPy path's 4-d Newton's to rounding, and where the 2-d iteration cannot do a step the exact rule decides (the
    same error as NumPy's)."""
    from vpintegrator.errors import VPIntegratorError

    system = get_system("coupled_oscillator")
    y0 = np.array([1.0, -0.5, 2.0, 0.3])
    try:
        ref = vp.integrate(system, y0, h, 200, method="implicit_midpoint", compiled=False).y[0]
    except VPIntegratorError as err:
        with pytest.raises(VPIntegratorError) as got:
            compiled_stepper(system, "implicit_midpoint", h).run(y0, 200)
        assert str(got.value) == str(err)
        return
    stepper = compiled_stepper(system, "implicit_midpoint", h)
    assert stepper.engine == "lean"
    np.testing.assert_allclose(stepper.run(y0, 200), ref, rtol=0, atol=1e-11 * max(1.0, np.abs(ref).max()))


@needs_numba
@pytest.mark.parametrize("n_sites", [7, 8])  # the partial sums' tail and no tail
def test_lattice_blow_up_check_stops_where_the_norm_crosses_the_limit(n_sites):
    """The lattice loops' norm check (partial sums, out of the bond loop) stops at the first state whose norm is
    above the limit, as a plain norm of the states written says."""
    from vpintegrator.systems import sample_initial_conditions

    system = get_system("fpu_beta", N=n_sites)
    y0 = np.asarray(sample_initial_conditions(system, "bump", mu=[0.45])[0], dtype=np.float64)
    stepper = compiled_stepper(system, "stormer_verlet", 0.5)
    free = np.empty((60, system.dim))
    assert stepper.step_block(y0.copy(), 60, free) == 60 and stepper.status == 0
    norms = np.sqrt(np.sum(free * free, axis=1))
    limit = float(np.sort(norms)[len(norms) // 2])  # crossed somewhere inside
    first = int(np.flatnonzero(norms > limit)[0])
    out = np.empty((60, system.dim))
    done = stepper.step_block(y0.copy(), 60, out, limit=limit)
    assert (done, stepper.failed_step, stepper.status) == (first + 1, first + 1, 4)
    np.testing.assert_array_equal(out[:done], free[:done])


@needs_numba
def test_heun_through_the_generic_loops_too(heun):
    """The generic loops (``compiled.kernels``: what a learned field runs) read the same tableau, as arrays."""
    system = get_system("rigid_body")
    y0 = np.array([0.3, -0.8, 0.5])
    stepper = compiled_stepper(system, "heun_test", 0.05)
    stepper._fast = ("", None, ())  # as tests/test_parity.py's "kernels" path: the generic loop of the method id
    np.testing.assert_allclose(stepper.run(y0, 300), heun_reference(y0, 0.05, 300), rtol=0, atol=1e-13)


@needs_numba
def test_stormer_verlet_has_no_generic_loop_and_says_so():
    """Störmer–Verlet runs its lean loop only: forced onto the generic loops it is refused, never stepped by the
    explicit tableau's loop (which would give other numbers)."""
    from vpintegrator.errors import VPIntegratorError

    stepper = compiled_stepper(get_system("coupled_oscillator"), "stormer_verlet", 0.1)
    y0 = np.array([0.3, -0.2, 0.1, 0.4])
    assert stepper.run(y0, 3).shape == (4, 4)  # its lean loop
    stepper._fast = ("", None, ())
    with pytest.raises(VPIntegratorError, match="no generic compiled loop"):
        stepper.run(y0, 3)


@needs_numba
def test_a_method_named_like_a_shipped_one_is_not_compiled_by_its_name():
    """The compiled loop is chosen by what the method is (its class, its tableau), not by its name: a user's method
    called ``implicit_midpoint`` with a step of its own runs NumPy only."""
    from vpintegrator.integrators import Integrator

    @dataclass(frozen=True)
    class Impostor(Integrator):
        name: ClassVar[str] = "implicit_midpoint"
        order: ClassVar[int] = 1

        def _step(self, system, y, h):
            return y + h * system.vector_field(y)

    assert compiled_stepper(get_system("rigid_body"), Impostor(), 0.1) is None
    assert compiled_stepper(get_system("rigid_body"), "implicit_midpoint", 0.1) is not None
