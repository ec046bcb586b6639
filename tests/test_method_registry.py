"""The method registry: metadata of every registered method, and each claimed property checked.

Everything here is parametrised over ``list_methods()``: a newly registered method is tested for what
its metadata claims (volume, quadratic invariants, symmetry, symplecticity) with no edit here. The
convergence order and the step Jacobian against finite differences are in ``test_integrators.py``,
driven by the same registry.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.integrators import (
    Composition,
    MethodInfo,
    describe_methods,
    gauss_legendre_tableau,
    get_integrator,
    list_integrators,
    list_methods,
)
from vpintegrator.integrators.base import NEEDS
from vpintegrator.integrators.splitting import (
    MCLACHLAN2_A,
    LieTrotterComposition,
    ShearSplitting,
    shear_sequence,
)
from vpintegrator.systems import get_system, list_systems, sample_initial_conditions

SYSTEMS = list_systems()
#: the lattices at a size the dense Jacobians of these tests afford (their own tests: tests/test_lattices.py)
SMALL = {"toda": {"N": 4}, "fpu_beta": {"N": 4}, "kac_zwanzig": {"N": 4}, "particle_chain": {"N": 4}}


def _system(name: str):
    return get_system(name, **SMALL.get(name, {}))

INFOS = {info.name: info for info in list_methods()}
DET64 = 1e-12


def _supports(method: str, system_name: str) -> bool:
    try:
        get_integrator(method).supports(_system(system_name))
    except VPIntegratorError:
        return False
    return True


def _pairs(predicate=lambda info, system: True):
    return [
        (name, s)
        for name, info in INFOS.items()
        for s in SYSTEMS
        if _supports(name, s) and predicate(info, _system(s))
    ]


def _states(system_name: str, n: int, seed: int = 0) -> np.ndarray:
    system = _system(system_name)
    low = 0.3 if system_name == "volterra" else -2.0  # Volterra: positive orthant
    # the exponential rigid body near its data (the unit sphere): exp(z1) on [-3, 3] makes the implicit
    # compositions' Newton fail at h = 0.4
    bound = 1.0 if system_name == "rigid_body_exp" else 2.0
    if system_name in SMALL:  # bonds of O(1) (exp(4) bonds stiffen Toda past every step size here)
        bound = 0.5
    return sample_initial_conditions(system, "box", n, seed, low=max(low, -bound), high=bound)


def _canonical(system) -> bool:
    """Canonical Hamiltonian systems among the shipped ones (separable H(q, p), state (q, p))."""
    return bool(getattr(system, "separable", False))


# --- metadata ----------------------------------------------------------------------------------------
def test_every_registered_method_has_complete_metadata():
    assert [i.name for i in list_methods()] == list_integrators()
    assert list_integrators()[:6] == ["euler", "rk4", "implicit_midpoint", "gauss_legendre4", "stormer_verlet", "splitting"]
    for name, info in INFOS.items():
        assert isinstance(info, MethodInfo)
        method = get_integrator(name)
        assert method.name == name and method.info == info
        assert isinstance(info.order, int) and info.order >= 1
        assert info.explicit is (not info.implicit)
        assert set(info.needs) <= set(NEEDS), info.needs
        assert info.description and "\n" not in info.description
        assert info.family
        # every method runs on at least one shipped system
        assert any(_supports(name, s) for s in SYSTEMS), name
        d = info.as_dict()
        assert d["name"] == name and d["explicit"] == info.explicit and isinstance(d["needs"], list)


def test_metadata_of_the_classical_methods():
    rows = {n: (i.order, i.implicit, i.symplectic, i.symmetric, i.preserves_volume, i.preserves_quadratic_invariants,
                i.needs) for n, i in INFOS.items()}
    assert rows["euler"] == (1, False, False, False, False, False, ())
    assert rows["rk4"] == (4, False, False, False, False, False, ())
    assert rows["implicit_midpoint"] == (2, True, True, True, False, True, ())
    for s in (1, 2, 3, 4):
        assert rows[f"gauss_legendre{2 * s}"] == (2 * s, True, True, True, False, True, ())
    assert rows["stormer_verlet"] == (2, False, True, True, True, False, ("separable",))
    for name in ("splitting", "splitting_mclachlan2"):
        assert rows[name] == (2, False, False, True, True, False, ("shear_splittable",))
    assert rows["splitting_blanes_moan4"] == (4, False, False, True, True, False, ("shear_splittable",))
    for base in ("implicit_midpoint", "splitting", "stormer_verlet"):
        for scheme, order in (("tj4", 4), ("suzuki4", 4), ("y6", 6)):
            info = INFOS[f"{base}_{scheme}"]
            b = INFOS[base]
            assert (info.order, info.symmetric) == (order, True)
            assert (info.implicit, info.symplectic, info.preserves_volume, info.preserves_quadratic_invariants,
                    info.needs) == (b.implicit, b.symplectic, b.preserves_volume, b.preserves_quadratic_invariants,
                                    b.needs)


def test_describe_methods_and_cli_list_methods():
    from vpintegrator.cli.rollout import main

    text = describe_methods()
    for name in list_integrators():
        assert any(line.split()[0] == name for line in text.splitlines() if line.strip())
    result = CliRunner().invoke(main, ["--list-methods"])
    assert result.exit_code == 0, result.output
    assert text.strip() in result.output  # the method table, then the other rows, then the pretrained models
    assert "Pretrained models" in result.output and "rigid_body_lpnet" in result.output.split(text.strip())[1]


def test_list_names_every_row_and_model_form_that_a_run_accepts():
    """vp-rollout --list names everything ``integrators`` and ``models`` accept besides the classical methods:
    exact_flow, every registered row (fd+, shooting+, sindy+METHOD, parrot) with what it needs (the sindy extra),
    the oracle row and every model form; each row it lists parses as a row (``parse_row``)."""
    from vpintegrator.cli.rollout import main
    from vpintegrator.rollout import describe_rows
    from vpintegrator.rollout.methods import MODEL_FORMS, ROW_KINDS, parse_row

    text = describe_rows()
    output = CliRunner().invoke(main, ["--list"]).output
    assert text in output
    listed = {line.split()[0] for line in text.splitlines() if line.startswith("  ")}
    for name, kind in ROW_KINDS.items():
        row = f"{name}+METHOD" if kind.takes_integrator else name
        assert row in listed
        spelled = row.replace("METHOD", "rk4")
        assert parse_row(spelled)[0] is kind
    assert {"exact_flow", "LABEL_oracle"} <= listed
    assert {form for form, _ in MODEL_FORMS} <= listed
    sindy_line = next(line for line in text.splitlines() if line.split()[:1] == ["sindy+METHOD"])
    assert "vpintegrator[sindy]" in sindy_line
    with pytest.raises(VPIntegratorError, match="sindy\\+METHOD"):  # the name a user is told to give
        parse_row("sindy")


# --- composition data interface --------------------------------------------------------------------
COMPOSITIONS = [name for name in INFOS if isinstance(get_integrator(name), Composition)]


def test_compositions_are_registered_for_every_symmetric_base():
    assert len(COMPOSITIONS) >= 9
    for name in COMPOSITIONS:
        comp = get_integrator(name)
        assert comp.base in list_integrators() and INFOS[comp.base].symmetric
        assert isinstance(comp.gammas, tuple) and all(isinstance(g, float) for g in comp.gammas)
        assert sum(comp.gammas) == pytest.approx(1.0, abs=1e-14)
        np.testing.assert_allclose(comp.gammas, comp.gammas[::-1], rtol=0, atol=1e-15)
    with pytest.raises(VPIntegratorError, match="symmetric base method of order 2"):
        Composition(base="rk4")
    with pytest.raises(VPIntegratorError, match="sum to 1"):
        Composition(base="implicit_midpoint", gammas=(0.5, 0.4, 0.5))


@pytest.mark.parametrize("name", COMPOSITIONS)
def test_composition_is_its_base_and_gammas(name):
    """What a compiled backend builds from ``base`` and ``gammas`` gives the same numbers."""
    comp = get_integrator(name)
    system_name = next(s for s in SYSTEMS if _supports(name, s))
    system, y, h = _system(system_name), _states(system_name, 4), 0.1
    base = get_integrator(comp.base)
    want = y
    for g in comp.gammas:
        want = base.signed_step(system, want, g * h)
    np.testing.assert_array_equal(comp.step(system, y, h), want)


def test_composition_order_conditions():
    for name in COMPOSITIONS:
        g = np.array(get_integrator(name).gammas)
        order = INFOS[name].order
        for k in range(3, order, 2):  # symmetric compositions of an order-2 symmetric base: sum g^k = 0
            assert abs(np.sum(g**k)) <= 1e-13, (name, k)


def test_shear_splittings_as_lie_trotter_compositions():
    # Strang = X(h/2) X*(h/2)
    assert shear_sequence((0.5, 0.5), 3) == ShearSplitting._sequence(3, 1.0)
    # McLachlan: A(a) B(1/2) A(1 - 2a) B(1/2) A(a) for two parts
    seq = shear_sequence(get_integrator("splitting_mclachlan2").gammas, 2)
    assert [i for i, _ in seq] == [0, 1, 0, 1, 0]
    np.testing.assert_allclose([c for _, c in seq], [MCLACHLAN2_A, 0.5, 1 - 2 * MCLACHLAN2_A, 0.5, MCLACHLAN2_A],
                               rtol=0, atol=1e-15)
    with pytest.raises(VPIntegratorError, match="palindromic"):
        LieTrotterComposition(label="bad", gammas=(0.2, 0.8))


# --- Gauss-Legendre of any stage count ---------------------------------------------------------------
@pytest.mark.parametrize("s", [1, 2, 3, 4, 5, 6])
def test_gauss_legendre_tableau_satisfies_the_simplifying_assumptions(s):
    a, b, c = gauss_legendre_tableau(s)
    for k in range(1, 2 * s + 1):  # B(2s): quadrature of order 2s
        assert abs(b @ c ** (k - 1) - 1.0 / k) <= 1e-14, k
    for k in range(1, s + 1):  # C(s): collocation
        np.testing.assert_allclose(a @ c ** (k - 1), c**k / k, rtol=0, atol=1e-14)


def test_gauss_legendre_names_and_stage_option():
    assert get_integrator("gauss_legendre", stages=3).name == "gauss_legendre6"
    assert get_integrator("gauss_legendre", stages=3) == get_integrator("gauss_legendre6")
    ten = get_integrator("gauss_legendre10")
    assert (ten.order, ten.stages, ten.info.symplectic) == (10, 5, True)
    assert "gauss_legendre10" not in list_integrators()
    assert get_integrator("gauss_legendre4", stages=3).order == 6
    with pytest.raises(VPIntegratorError, match="orders are even"):
        get_integrator("gauss_legendre5")
    with pytest.raises(VPIntegratorError, match="stages = an int >= 1"):
        get_integrator("gauss_legendre", stages=0)
    # a 5-stage step on the rigid body agrees with DOP853 to rounding
    from scipy.integrate import solve_ivp

    system = get_system("rigid_body")
    y = _states("rigid_body", 3)
    got = integrate(system, y, 0.25, 4, "gauss_legendre10").y[:, -1]
    want = np.array([solve_ivp(system, (0, 1), v, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1] for v in y])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11)


def test_gauss_legendre2_is_implicit_midpoint():
    for system_name in SYSTEMS:
        system, y = _system(system_name), _states(system_name, 16)
        np.testing.assert_allclose(
            get_integrator("gauss_legendre2").step(system, y, 0.2),
            get_integrator("implicit_midpoint").step(system, y, 0.2), rtol=0, atol=1e-14,
        )


# --- claimed properties, checked for every registered method ----------------------------------------
@pytest.mark.parametrize("method, system_name", _pairs(lambda info, system: info.preserves_volume))
def test_det_j_is_one_for_volume_preserving_methods(method, system_name):
    system, y = _system(system_name), _states(system_name, 200, seed=3)
    det = np.linalg.det(get_integrator(method).step_jacobian(system, y, 0.2))
    assert np.max(np.abs(det - 1.0)) <= DET64


@pytest.mark.parametrize("method, system_name", _pairs(lambda info, system: info.symplectic and _canonical(system)))
def test_symplectic_methods_preserve_volume_on_canonical_systems(method, system_name):
    system, y = _system(system_name), _states(system_name, 200, seed=3)
    det = np.linalg.det(get_integrator(method).step_jacobian(system, y, 0.2))
    assert np.max(np.abs(det - 1.0)) <= DET64


@pytest.mark.parametrize("method", [n for n, i in INFOS.items() if not i.preserves_volume])
def test_det_j_is_not_one_where_volume_is_not_claimed(method):
    """On a non-canonical system (Lie-Poisson rigid body, Volterra, ABC flow) det J visibly differs from 1."""
    deviations = {}
    for system_name in SYSTEMS:
        system = _system(system_name)
        if _canonical(system) or not _supports(method, system_name):
            continue
        y = 1.5 * _states(system_name, 200, seed=4)
        det = np.linalg.det(get_integrator(method).step_jacobian(system, y, 0.4))
        deviations[system_name] = float(np.max(np.abs(det - 1.0)))
    assert max(deviations.values()) >= 1e-8, deviations


@pytest.mark.parametrize("method, system_name", _pairs(lambda info, system: info.symplectic and _canonical(system)))
def test_symplectic_methods_on_canonical_systems(method, system_name):
    system, y = _system(system_name), _states(system_name, 50, seed=5)
    jac = get_integrator(method).step_jacobian(system, y, 0.3)
    n = system.dim // 2
    omega = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    np.testing.assert_allclose(jac.transpose(0, 2, 1) @ omega @ jac, np.broadcast_to(omega, jac.shape), rtol=0,
                               atol=1e-12)


QUADRATIC = {"rigid_body": ("energy", "casimir")}  # shipped systems with quadratic first integrals


@pytest.mark.parametrize("method, system_name", _pairs(lambda info, system: system.name in QUADRATIC))
def test_quadratic_invariants(method, system_name):
    """Conserved to rounding by every method that claims it; visibly drifting for the others."""
    system = _system(system_name)
    y0 = sample_initial_conditions(system, "sphere", 20, np.random.default_rng(0))
    traj = integrate(system, y0, 0.2, 100, method)
    drift = max(
        float(np.max(np.abs(system.invariant(name, traj.y) / system.invariant(name, traj.y[:, :1]) - 1.0)))
        for name in QUADRATIC[system_name]
    )
    if INFOS[method].preserves_quadratic_invariants:
        assert drift <= 1e-12
    else:  # 1e-10: far above rounding; the centred rotation splitting's Yoshida 6 drifts only 7e-10 here
        assert drift >= 1e-10


@pytest.mark.parametrize("method, system_name", _pairs())
def test_symmetric_methods_are_their_own_adjoint(method, system_name):
    """step(-h) o step(h) = id to rounding for symmetric methods, visibly not for the others."""
    integrator = get_integrator(method)
    system, y, h = _system(system_name), _states(system_name, 20, seed=6), 0.2
    back = integrator.signed_step(system, integrator.signed_step(system, y, h), -h)
    error = np.max(np.abs(back - y))
    if INFOS[method].symmetric:
        assert error <= 1e-12
    else:
        assert error >= 1e-8


def test_signed_step_validates_h():
    with pytest.raises(VPIntegratorError, match="h must be a finite nonzero number"):
        get_integrator("rk4").signed_step(get_system("rigid_body"), np.ones((1, 3)), 0.0)
    with pytest.raises(VPIntegratorError, match="h must be a finite number"):
        get_integrator("rk4").signed_step(get_system("rigid_body"), np.ones((1, 3)), float("nan"))
