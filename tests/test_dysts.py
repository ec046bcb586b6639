"""Systems from dysts (``vpintegrator.systems.dysts``): a small fake ``dysts`` package written into tmp_path runs the
adapter everywhere (CI has no dysts); the tests marked by ``pytest.importorskip("dysts")`` hold it to the real one."""

from __future__ import annotations

import json
import pickle
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator.cli.gen import main as vp_gen
from vpintegrator.data import read_trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.systems import dysts, get_system, sample_initial_conditions, system_from_meta, system_meta
from vpintegrator.systems.dysts import dysts_structure

FLOWS = '''
import numpy as np
from .base import DynSys, DynSysDelay, staticjit


class Lorenz(DynSys):
    @staticjit
    def _rhs(x, y, z, t, beta, rho, sigma):
        return sigma * y - sigma * x, rho * x - x * z - y, x * y - beta * z

    @staticjit
    def _jac(x, y, z, t, beta, rho, sigma):
        return [-sigma, sigma, 0], [rho - z, -1, -x], [y, x, -beta]


class WrongJac(Lorenz):  # Lorenz's _rhs with a _jac whose (0, 1) entry has the wrong sign
    @staticjit
    def _jac(x, y, z, t, beta, rho, sigma):
        return [-sigma, -sigma, 0], [rho - z, -1, -x], [y, x, -beta]


class HenonHeiles(DynSys):  # canonical Hamiltonian in (q, p) = (x, y, px, py); the metadata says it is not
    @staticjit
    def _rhs(x, y, px, py, t, lam):
        return px, py, -x - 2 * lam * x * y, -y - lam * x**2 + lam * y**2


class Forced(DynSys):
    @staticjit
    def _rhs(x, y, t, a):
        return y, -x + a * np.cos(t)


class Delayed(DynSysDelay):
    @staticjit
    def _rhs(x, xt, t, tau):
        return -x + xt


class Method(DynSys):
    def rhs(self, X, t):
        return -X
'''

BASE = '''
def staticjit(fn):
    return staticmethod(fn)


class BaseDyn:
    @staticmethod
    def _rhs(X, t):
        raise NotImplementedError

    @staticmethod
    def _jac(X, t, *args):
        raise NotImplementedError


class DynSys(BaseDyn):
    pass


class DynSysDelay(BaseDyn):
    pass
'''


def _meta(params, ic, hamiltonian=False):
    return {"parameters": params, "initial_conditions": ic, "period": 1.5, "dt": 1e-3, "hamiltonian": hamiltonian,
            "std": [1.0] * len(ic), "embedding_dimension": len(ic), "description": "a test flow"}


METADATA = {
    "Lorenz": _meta({"sigma": 10.0, "rho": 28.0, "beta": 2.667}, [-9.79, -15.04, 20.53]),
    "WrongJac": _meta({"sigma": 10.0, "rho": 28.0, "beta": 2.667}, [-9.79, -15.04, 20.53]),
    "HenonHeiles": _meta({"lam": 1.0}, [0.1, -0.2, 0.3, 0.1]),
    "Forced": _meta({"a": 0.5}, [1.0, 0.0]),
    "Delayed": _meta({"tau": 1.0}, [1.0, 1.0]),
    "Method": _meta({}, [1.0, 2.0, 3.0], hamiltonian=True),
}


def _lorenz(y, beta=2.667, rho=28.0, sigma=10.0):
    x, yy, z = y[..., 0], y[..., 1], y[..., 2]
    return np.stack([sigma * (yy - x), rho * x - x * z - yy, x * yy - beta * z], axis=-1)


@pytest.fixture(autouse=True)
def _registry_and_modules_as_they_were():
    """The dysts classes and modules (fake or real) these tests make leave the registry and ``sys.modules`` as they
    found them: a later test builds its dysts systems from its own dysts."""
    from vpintegrator.systems import registry

    saved = dict(registry._REGISTRY), dict(registry._DEFAULT_INSTANCES), dict(dysts._CLASSES)
    modules = {k: v for k, v in sys.modules.items() if k == "dysts" or k.startswith("dysts.")}
    yield
    dysts._CLASSES.clear()
    dysts._CLASSES.update(saved[2])
    for table, kept in zip((registry._REGISTRY, registry._DEFAULT_INSTANCES), saved[:2]):
        table.clear()
        table.update(kept)
    for name in [k for k in sys.modules if k == "dysts" or k.startswith("dysts.")]:
        del sys.modules[name]
    sys.modules.update(modules)


def _forget_dysts():
    """No dysts module imported and no dysts class registered: the next use imports dysts afresh."""
    from vpintegrator.systems import registry

    for name in [m for m in sys.modules if m == "dysts" or m.startswith("dysts.")]:
        del sys.modules[name]
    for name in [n for n in registry._REGISTRY if n.startswith("dysts:")]:
        registry._REGISTRY.pop(name)
        registry._DEFAULT_INSTANCES.pop(name, None)
    dysts._CLASSES.clear()


@pytest.fixture
def fake_dysts(tmp_path, monkeypatch):
    """A fake ``dysts`` package (flows.py, base.py, data/chaotic_attractors.json) first on sys.path."""
    pkg = tmp_path / "fake" / "dysts"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text(textwrap.dedent(BASE))
    (pkg / "flows.py").write_text(textwrap.dedent(FLOWS))
    (pkg / "data" / "chaotic_attractors.json").write_text(json.dumps(METADATA))
    _forget_dysts()
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    return pkg


# --- the adapter ----------------------------------------------------------------------------------------
def test_a_dysts_flow_is_a_system_with_dysts_parameters_and_field(fake_dysts):
    system = get_system("dysts:Lorenz")
    assert (system.name, system.dim, system.state_names) == ("dysts:Lorenz", 3, ("x", "y", "z"))
    assert list(system.params()) == ["beta", "rho", "sigma"]  # the order dysts' _rhs takes them (sorted)
    np.testing.assert_array_equal(system.field_params(), [2.667, 28.0, 10.0])
    assert system.default_y0 == (-9.79, -15.04, 20.53)
    assert system.default_dt == pytest.approx(1.5 / 100)
    y = np.random.default_rng(0).normal(size=(5, 2, 3)) * 10
    np.testing.assert_allclose(system.vector_field(y), _lorenz(y), rtol=1e-15)
    jac = system.jacobian(y[0, 0])
    np.testing.assert_allclose(jac[0], [-10.0, 10.0, 0.0])
    changed = get_system("dysts:Lorenz", rho=20)
    np.testing.assert_allclose(changed.vector_field(y), _lorenz(y, rho=20.0), rtol=1e-15)
    assert pickle.loads(pickle.dumps(changed)) == changed
    assert get_system("dysts:Lorenz") is get_system("dysts:Lorenz")  # one class, one default instance


def test_the_field_compiles_with_numba(fake_dysts):
    numba = pytest.importorskip("numba")
    from numba.extending import register_jitable

    system = get_system("dysts:Lorenz")
    cls = type(system)
    for helper in cls.field_helpers:  # what the compiled path does with a system's helpers
        register_jitable(helper)
    y = (1.0, -2.0, 3.5)
    p = system.field_params()
    field, jacobian = numba.njit(cls.field), numba.njit(cls.field_jacobian)
    for params in (p, tuple(float(v) for v in p)):  # System's p (a float64 array), or a tuple of floats
        np.testing.assert_allclose(field(params, y), system.vector_field(np.array(y)), rtol=1e-15)
        np.testing.assert_allclose(np.array(jacobian(params, y)), system.jacobian(np.array(y)))


def test_a_dysts_flow_runs_on_the_compiled_loops(fake_dysts):
    """Issue 91 item 4: a dysts flow goes through the user's compiled path (no warning, a lean loop), its states those
    of the NumPy path."""
    pytest.importorskip("numba")
    import vpintegrator as vp
    from vpintegrator.compiled import compiled_stepper
    from vpintegrator.compiled.systems import why_not_compiled

    system = get_system("dysts:Lorenz")
    assert why_not_compiled(system) is None
    y0 = np.array([[1.0, -2.0, 3.5]])
    for method in ("rk4", "implicit_midpoint"):
        stepper = compiled_stepper(system, method, 0.001)
        assert stepper is not None and stepper.engine == "lean" and not isinstance(stepper.kid, int)
        np.testing.assert_allclose(vp.integrate(system, y0, 0.001, 300, method=method).y,
                                   vp.integrate(system, y0, 0.001, 300, method=method, compiled=False).y,
                                   rtol=0, atol=1e-11)


def test_a_jacobian_that_disagrees_with_the_field_is_not_used(fake_dysts):
    system = get_system("dysts:WrongJac")
    assert type(system).field_jacobian is None
    assert "differs from differences of _rhs" in type(system).jacobian_note
    with pytest.raises(VPIntegratorError, match=r"has none \(dysts' _jac differs"):
        vp.integrate(system, np.array(system.default_y0), dt=0.01, n_steps=2, method="implicit_midpoint")
    traj = vp.integrate(system, np.array(system.default_y0), dt=0.01, n_steps=2, method="rk4", compiled=False)
    assert np.isfinite(traj.y).all()  # an explicit method runs


@pytest.mark.parametrize("name, words", [
    ("dysts:Lorenx", "unknown dysts system 'dysts:Lorenx'; did you mean dysts:Lorenz"),
    ("dysts:Forced", "non-autonomous: its _rhs depends on t"),
    ("dysts:Delayed", "a delay equation"),
    ("dysts:Method", "no static _rhs"),
])
def test_bad_dysts_names_are_one_line_errors(fake_dysts, name, words):
    with pytest.raises(VPIntegratorError) as err:
        get_system(name)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_without_dysts_the_error_says_how_to_install_it(monkeypatch):
    _forget_dysts()
    monkeypatch.setitem(sys.modules, "dysts", None)  # import dysts -> ModuleNotFoundError
    with pytest.raises(VPIntegratorError, match=r"not installed; pip install 'vpintegrator\[dysts\]'"):
        get_system("dysts:Lorenz")
    result = CliRunner().invoke(vp_gen, ["--list", "dysts"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [
        "Error: the dysts systems need dysts, which is not installed; pip install 'vpintegrator[dysts]'"]


def test_bad_parameters_are_refused(fake_dysts):
    with pytest.raises(VPIntegratorError, match="no parameter.*omega; valid parameters: beta, rho, sigma"):
        get_system("dysts:Lorenz", omega=1.0)
    with pytest.raises(VPIntegratorError, match="rho"):
        get_system("dysts:Lorenz", rho=float("nan"))


def test_structure_is_measured_not_read_from_dysts(fake_dysts):
    rows = {r.name: r for r in dysts_structure()}
    henon, lorenz = rows["dysts:HenonHeiles"], rows["dysts:Lorenz"]
    assert henon.hamiltonian == "(q, p)" and henon.volume_preserving and henon.dysts_hamiltonian is False
    assert henon.divergence < 1e-12
    assert not lorenz.volume_preserving and lorenz.hamiltonian == ""
    assert lorenz.divergence > 0.5  # |div| = 13.667 against max |J| = |y| ~ 15 at the samples
    assert (lorenz.dysts_jacobian, rows["dysts:WrongJac"].dysts_jacobian) == ("agrees", "differs")
    assert {n for n, r in rows.items() if r.refusal} == {"dysts:Forced", "dysts:Delayed", "dysts:Method"}


def test_vp_gen_lists_dysts_with_its_flag_beside_ours(fake_dysts):
    result = CliRunner().invoke(vp_gen, ["--list", "dysts"])
    assert result.exit_code == 0, result.output
    henon = next(line for line in result.output.splitlines() if line.startswith("dysts:HenonHeiles"))
    assert henon.split()[3:] == ["yes", "yes", "(q,", "p)", "no", "none"]
    assert "3 autonomous flows; not adapted (3):" in result.output
    assert "dysts:Forced: non-autonomous" in result.output


# --- files and generation ---------------------------------------------------------------------------------
def test_the_system_round_trips_through_file_metadata(fake_dysts):
    system = get_system("dysts:Lorenz", rho=20.0)
    meta = system_meta(system)
    assert meta["system"] == "dysts:Lorenz" and "system_class" not in meta
    _forget_dysts()  # a fresh process: the name alone rebuilds it
    back = system_from_meta(meta)
    assert back.name == "dysts:Lorenz" and back.rho == 20.0 and type(back) is not type(system)


def test_vp_gen_dysts_name_writes_a_file_that_reads_back_the_system(fake_dysts, tmp_path):
    out = tmp_path / "lorenz.h5"
    result = CliRunner().invoke(vp_gen, ["dysts:Lorenz", "--n-traj", "3", "--t-end", "0.06", "--method", "rk4",
                                         "--set", "system.rho=20", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    traj = read_trajectories(out)
    assert traj.system == get_system("dysts:Lorenz", rho=20.0)
    assert traj.y.shape == (3, 5, 3)
    # the initial conditions are drawn around dysts' initial condition, with a tenth of its spread
    assert np.max(np.abs(traj.y[:, 0] - np.array(METADATA["Lorenz"]["initial_conditions"]))) < 1.0
    step = vp.integrate(traj.system, traj.y[:, 0], dt=traj.system.default_dt, n_steps=1, method="rk4")
    np.testing.assert_allclose(step.y[:, -1], traj.y[:, 1], rtol=1e-12)


def test_vp_gen_unknown_dysts_name_is_one_line(fake_dysts):
    result = CliRunner().invoke(vp_gen, ["dysts:Lorenx", "--n-traj", "1"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [
        "Error: unknown dysts system 'dysts:Lorenx'; did you mean dysts:Lorenz? `vp-gen --list dysts` lists them"]


def test_the_around_sampler_draws_around_the_default_state(fake_dysts):
    system = get_system("dysts:Lorenz")
    points = sample_initial_conditions(system, "around", n=4000, rng=0, spread=[0.1, 1.0, 0.0])
    np.testing.assert_allclose(points.mean(axis=0), system.default_y0, atol=0.05)
    np.testing.assert_allclose(points.std(axis=0), [0.1, 1.0, 0.0], rtol=0.05, atol=1e-9)
    with pytest.raises(VPIntegratorError, match="needs 'spread'"):
        sample_initial_conditions(system, "around", n=2, rng=0)


# --- the real dysts ---------------------------------------------------------------------------------------
def test_real_dysts_lorenz_is_dysts_own_field(monkeypatch):
    _forget_dysts()
    pytest.importorskip("dysts")
    from dysts.flows import Lorenz

    system, theirs = get_system("dysts:Lorenz"), Lorenz()
    y = np.array(theirs.ic) + np.random.default_rng(1).normal(size=(4, 3))
    np.testing.assert_allclose(system.vector_field(y), np.array(theirs.rhs(y, 0.0)).T, rtol=1e-15)
    np.testing.assert_array_equal(system.default_y0, theirs.ic)
    np.testing.assert_allclose(system.jacobian(y[0]), np.array(theirs.jac(y[0], 0.0), dtype=float))


def test_real_dysts_flags_disagree_with_what_is_measured(monkeypatch):
    _forget_dysts()
    pytest.importorskip("dysts")
    rows = {r.name: r for r in dysts_structure(["HenonHeiles", "DoublePendulum", "Torus", "MackeyGlass"])}
    henon, pendulum = rows["dysts:HenonHeiles"], rows["dysts:DoublePendulum"]
    assert henon.hamiltonian == "(q, p)" and henon.dysts_hamiltonian is False  # canonical, marked as not
    assert not pendulum.volume_preserving and pendulum.dysts_hamiltonian is True  # divergence, marked Hamiltonian
    assert "non-autonomous" in rows["dysts:Torus"].refusal and "delay" in rows["dysts:MackeyGlass"].refusal
