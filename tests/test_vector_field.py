"""Learned vector fields (issue 43): the four families, their torch step against the classical integrators on the
NumPy field, what the field and the step keep, training by vp-train and rollout by any integrator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.errors import VPIntegratorError
from vpintegrator.integrators import get_integrator
from vpintegrator.models import build_model, load_model, model_preserves
from vpintegrator.rollout.field import LearnedField, field_step
from vpintegrator.rollout.methods import split_method
from vpintegrator.testing import assert_field_preserves, assert_preserves

FAMILIES = [("hnn", 4), ("lphnn", 3), ("divfree", 3), ("node", 3)]


def _model(name: str, dim: int, method: str | None = None, seed: int = 0, **kw):
    torch.manual_seed(seed)
    cfg = {"width": 8, **({"method": method} if method else {}), **kw}
    return build_model(name, dim=dim, dt=0.2, **cfg).double()


def _states(dim: int, n: int = 16, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)) * 0.7


@pytest.mark.parametrize("name,dim", FAMILIES)
def test_numpy_field_and_jacobian_match_torch(name, dim):
    model = _model(name, dim)
    system = LearnedField(model)
    z = _states(dim)
    zt = torch.tensor(z)
    f_torch = model.field(zt).detach().numpy()
    J_torch = torch.func.vmap(torch.func.jacrev(lambda v: model.field(v[None])[0]))(zt).detach().numpy()
    np.testing.assert_allclose(system.vector_field(z), f_torch, rtol=0, atol=1e-14)
    np.testing.assert_allclose(system.jacobian(z), J_torch, rtol=0, atol=1e-13)
    _, J_closed = model.field_and_jacobian(zt)  # the Newton Jacobian of the torch step
    np.testing.assert_allclose(J_closed.detach().numpy(), J_torch, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", ["rk4", "implicit_midpoint", "gauss_legendre4", "gauss_legendre6"])
@pytest.mark.parametrize("name,dim", FAMILIES)
def test_torch_step_is_the_integrators_step(name, dim, method):
    """The window map (torch, differentiable) is the registered integrator's step on the NumPy field."""
    model = _model(name, dim, method)
    z = _states(dim)
    with torch.no_grad():
        ours = model(torch.tensor(z)[:, None])[:, 0].numpy()
    theirs = get_integrator(method).step(LearnedField(model), z, model.dt)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,dim", FAMILIES)
def test_field_claims_hold(name, dim):
    model = _model(name, dim)
    errors = assert_field_preserves(model, atol=1e-12)
    assert set(errors) == set(model.field_preserves)


def test_divfree_divergence_is_zero_by_autograd():
    model = _model("divfree", 4, seed=3)
    z = torch.tensor(_states(4), requires_grad=True)
    f = model.field(z)
    div = sum(torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0][:, i] for i in range(4))
    assert float(div.detach().abs().max()) == 0.0
    # each component ignores its own coordinate: the field is shear splittable and `splitting` runs it
    assert LearnedField(model).shear_splittable
    step = get_integrator("splitting").step_jacobian(LearnedField(model), _states(4), 0.2)
    np.testing.assert_allclose(np.linalg.det(step), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,dim,method,claims", [
    ("hnn", 4, "gauss_legendre4", ("symplectic", "volume")),
    ("hnn", 4, "implicit_midpoint", ("symplectic", "volume")),
    ("hnn", 4, "rk4", ()),
    ("lphnn", 3, "implicit_midpoint", ("casimir",)),
    ("lphnn", 3, "gauss_legendre4", ("casimir",)),
    ("lphnn", 3, "rk4", ()),
    ("divfree", 3, "gauss_legendre4", ()),
    ("node", 3, "rk4", ()),
])
def test_window_map_claims_are_audited(name, dim, method, claims):
    model = _model(name, dim, method)
    assert model_preserves(model) == claims
    assert set(assert_preserves(model, atol=1e-11)) == set(claims)


def test_rk4_step_of_an_hnn_is_not_symplectic():
    from vpintegrator.testing import audit_symplectic

    model = _model("hnn", 4, "rk4", width=16)
    with torch.no_grad():
        model.net.C.mul_(20.0)  # a field of order 1 (the initial one is small)
    model.dt = 0.5
    assert audit_symplectic(model, n=8).max_error > 1e-6
    model.method = "implicit_midpoint"
    model._A, model._b = [[0.5]], [1.0]
    assert audit_symplectic(model, n=8).max_error < 1e-12


def test_hnn_gauss_legendre_step_is_symplectic_in_numpy():
    """JᵀΩJ = Ω for the Gauss–Legendre 4 step of the learned field (the rollout's NumPy integrator)."""
    model = _model("hnn", 4, width=16)
    J = get_integrator("gauss_legendre4").step_jacobian(LearnedField(model), _states(4), 0.3)
    omega = np.block([[np.zeros((2, 2)), np.eye(2)], [-np.eye(2), np.zeros((2, 2))]])
    np.testing.assert_allclose(np.einsum("nji,jk,nkl->nil", J, omega, J), np.broadcast_to(omega, J.shape),
                               rtol=0, atol=1e-13)


@pytest.mark.parametrize("compiled", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_lphnn_implicit_midpoint_keeps_the_casimir_over_ten_thousand_steps(compiled):
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.steps import IntegratorStep

    model = _model("lphnn", 3, "implicit_midpoint", width=16)
    y0 = _states(3, n=3, seed=5)
    step = IntegratorStep(LearnedField(model), "implicit_midpoint", 0.2, compiled_max_batch=8 if compiled else 0)
    tr = rollout(step, y0[:, None], 0.2, 10_000)
    c = np.sum(tr.y ** 2, axis=-1)
    assert np.isfinite(tr.y).all()
    assert float(np.max(np.abs(c - c[:, :1]) / c[:, :1])) <= 1e-12


@pytest.mark.parametrize("name,dim", FAMILIES)
def test_compiled_field_is_the_numpy_field(name, dim):
    pytest.importorskip("numba")
    from vpintegrator.compiled.systems import jacobian_rows, vector_field_rows

    system = LearnedField(_model(name, dim, depth=3))
    kid, p = system.compiled_kernel()
    z = _states(dim)
    f, J = np.empty_like(z), np.empty((len(z), dim, dim))
    vector_field_rows(kid, p, z, f)
    jacobian_rows(kid, p, z, J)
    np.testing.assert_allclose(f, system.vector_field(z), rtol=0, atol=1e-14)
    np.testing.assert_allclose(J, system.jacobian(z), rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["rk4", "gauss_legendre4", "splitting"])
def test_batch1_rollout_runs_compiled_with_the_numpy_numbers(method):
    pytest.importorskip("numba")
    from vpintegrator.rollout.engine import rollout
    from vpintegrator.rollout.steps import IntegratorStep

    model = _model("divfree", 3, width=16)
    y0 = _states(3, n=1, seed=2)[:, None]
    fast = IntegratorStep(LearnedField(model), method, 0.1)
    slow = IntegratorStep(LearnedField(model), method, 0.1, compiled_max_batch=0)
    a, b = rollout(fast, y0, 0.1, 200), rollout(slow, y0, 0.1, 200)
    assert fast.describe()["runner"] == "numba" and slow.describe()["runner"] == "numpy"
    np.testing.assert_allclose(a.y, b.y, rtol=0, atol=1e-12)


def test_bad_input_is_one_line():
    with pytest.raises(VPIntegratorError, match="dim must be even"):
        build_model("hnn", dim=3)
    with pytest.raises(VPIntegratorError, match="dim must be 3"):
        build_model("lphnn", dim=4)
    with pytest.raises(VPIntegratorError, match="method"):
        build_model("node", dim=3, method="dopri5")
    with pytest.raises(VPIntegratorError, match="no step dt"):
        build_model("node", dim=3, dt=None)(torch.zeros(2, 1, 3))
    assert split_method("runs/hnn@gauss_legendre4") == ("runs/hnn", "gauss_legendre4")
    assert split_method("runs/a@b") == ("runs/a@b", None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """vp-gen small rigid-body data (and held-out data), vp-train an lphnn for 3 epochs (its config: Levenberg–Marquardt)."""
    from vpintegrator.cli.gen import main as gen_main
    from vpintegrator.cli.train import main as train_main

    root = tmp_path_factory.mktemp("vf")
    runner = CliRunner()
    for name, seed in (("rb.h5", 0), ("heldout.h5", 7)):
        res = runner.invoke(gen_main, ["rigid_body", "--n-traj", "24", "--dt", "0.2", "--t-end", "4", "--seed",
                                       str(seed), "--out", str(root / name), "-q"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    res = runner.invoke(train_main, ["rigid_body_lphnn", "--data", str(root / "rb.h5"), "--out",
                                     str(root / "lphnn"), "--epochs", "3", "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return root


def test_trained_lphnn_beats_the_untrained_one_on_heldout_data(trained):
    from vpintegrator.data import read_trajectories

    model = load_model(trained / "lphnn").double()
    assert model.dt == pytest.approx(0.2) and model.method == "gauss_legendre4"
    torch.manual_seed(1234)  # vp-train's seed: the initial weights
    untrained = build_model(**{**model.config}).double()
    y = torch.tensor(read_trajectories(trained / "heldout.h5").y)
    x, target = y[:, :-1].reshape(-1, 1, 3), y[:, 1:].reshape(-1, 1, 3)
    with torch.no_grad():  # the median over held-out windows of the one-step relative error
        err = [float(((m(x) - target).norm(dim=-1) / target.norm(dim=-1)).median()) for m in (model, untrained)]
    assert err[0] < 0.1 * err[1]


def test_rollout_with_two_integrators_and_the_ladder(trained):
    import h5py

    from vpintegrator.cli.rollout import main as rollout_main

    out = trained / "ro.h5"
    res = CliRunner().invoke(rollout_main, [
        "--data", str(trained / "rb.h5"), "--model", f"{trained / 'lphnn'}@gauss_legendre4",
        "--model", f"mid={trained / 'lphnn'}@implicit_midpoint", "--model", f"{trained / 'lphnn'}@rk4",
        "--n-traj", "3", "--out", str(out), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    with h5py.File(out, "r") as f:
        labels = set(f["methods"]) if "methods" in f else set(f)
    assert {"lphnn+gauss_legendre4", "mid", "lphnn+rk4"} <= labels
    from vpintegrator.rollout.precision import work_precision

    model = load_model(trained / "lphnn").double()
    rows = work_precision("rigid_body", _states(3, n=2), 0.2, 0.8, methods=["rk4"], dop853_rtols=None,
                          models={"lphnn": model}, repeats=1, ladder=(1.0, 0.5, 0.25, 0.125))
    mine = [r for r in rows if r.method == "lphnn"]
    assert [r.h for r in mine] == pytest.approx([0.2, 0.1, 0.05, 0.025])
    assert all(math.isfinite(r.error_median) and r.error_median < 1 for r in mine)


def test_at_method_on_a_step_map_model_is_refused(tmp_path):
    from vpintegrator.models import save_model
    from vpintegrator.rollout.methods import parse_model_entry

    save_model(build_model("vpff", dim=3, n_blocks=1), tmp_path / "vpff.pt")
    with pytest.raises(VPIntegratorError, match="not a learned vector field"):
        parse_model_entry(f"{tmp_path / 'vpff.pt'}@rk4")


def test_at_method_the_field_cannot_use_names_the_method(tmp_path):
    """RUN@METHOD of a run that exists: a method the field lacks the structure for, or no integrator at all, is
    refused by naming the method (issue 58), not as a missing run."""
    from vpintegrator.models import save_model
    from vpintegrator.rollout.methods import parse_model_entry

    save_model(_model("node", 3, "rk4"), tmp_path / "node.pt")
    with pytest.raises(VPIntegratorError, match=r"node.pt@stormer_verlet: the model loads, but '@stormer_verlet' "
                                                r"cannot roll it out: method 'stormer_verlet' needs a separable") as err:
        parse_model_entry(f"{tmp_path / 'node.pt'}@stormer_verlet")
    assert err.value.key == "models"
    with pytest.raises(VPIntegratorError, match=r"node.pt exists, but 'dopri5' after '@' is no integrator"):
        parse_model_entry(f"{tmp_path / 'node.pt'}@dopri5")
    label, model, _ = parse_model_entry(f"{tmp_path / 'node.pt'}@gauss_legendre4")
    assert label == "node+gauss_legendre4" and model.rollout_method == "gauss_legendre4"


def test_a_window_of_seq_len_states_advances_each_by_seq_len_steps():
    model = _model("node", 3, "rk4")
    window = _model("node", 3, "rk4", seq_len=3)
    window.load_state_dict(model.state_dict())
    z = torch.tensor(_states(3, n=3))
    with torch.no_grad():
        out = window(z[None])[0]  # (3, 3): each state three steps on
        ref = model(model(model(z[:, None])))[:, 0]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-15)
