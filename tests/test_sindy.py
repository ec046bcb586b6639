"""Sparse regression as a rollout row (issue 43, item 2): the library's analytic derivatives, the fit on the rigid
body, ``sindy+METHOD`` in run_rollouts and vp-rollout, a row without a model, and pysindy missing."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from vpintegrator.data import generate, load_spec, read_rollout, solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.rollout import RolloutConfig, run_rollouts
from vpintegrator.rollout.methods import DEFAULT_SPLIT, parse_row
from vpintegrator.systems import RigidBody

H = 0.2


def _rigid_body(n=24, n_states=61, seed=0):
    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return solve_flow(RigidBody(), y0, H * np.arange(n_states))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("sindy") / "rb.h5"
    generate(load_spec("rigid_body", n_traj=20, t_end=12.0, dt=H), out=path)
    return path


def test_default_split_is_vp_trains():
    import dataclasses

    from vpintegrator.training import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert DEFAULT_SPLIT == (defaults["val_fraction"], defaults["test_fraction"], defaults["split_seed"])


@pytest.mark.parametrize("name", ["poly3", "trig", "exp", "poly2+trig+exp"])
def test_library_gradient_is_the_derivative_of_its_features(name):
    from vpintegrator.rollout.sindy import library

    lib = library(name, 3)
    z = np.random.default_rng(1).normal(size=(5, 3))
    eps = 1e-6
    num = np.stack([(lib.transform(z + eps * e) - lib.transform(z - eps * e)) / (2 * eps) for e in np.eye(3)], -1)
    np.testing.assert_allclose(lib.gradient(z), num, atol=1e-7)
    assert len(lib.names()) == lib.n_features == lib.transform(z).shape[1]


def test_bad_library_name_is_one_line():
    from vpintegrator.rollout.sindy import library

    with pytest.raises(VPIntegratorError, match="polyD"):
        library("poly2+cubic", 3)


def test_degree_two_library_recovers_the_euler_equations():
    pytest.importorskip("pysindy")
    from vpintegrator.rollout.sindy import derivatives, fit_sindy, select_sindy

    y = _rigid_body()
    fit = fit_sindy(*derivatives(y[:20], H), "poly2", 1e-3)
    a, b, c = RigidBody().coefficients  # ż = (a z₂z₃, b z₁z₃, c z₁z₂)
    field = fit.field
    assert field is not None and fit.n_terms == 3
    assert field.library.names() == ["x0 x1", "x0 x2", "x1 x2"]
    np.testing.assert_allclose(field.coefficients, [[0, 0, c], [0, b, 0], [a, 0, 0]], rtol=0, atol=1e-6)
    z = np.random.default_rng(2).normal(size=(4, 3))
    np.testing.assert_allclose(field.vector_field(z), RigidBody().vector_field(z), atol=1e-6)
    np.testing.assert_allclose(field.jacobian(z), RigidBody().jacobian(z), atol=1e-6)
    assert field.equations(3) == ["x0' = 0.500 x1 x2", "x1' = -1.000 x0 x2", "x2' = 0.500 x0 x1"]
    # the validation grid picks the sparse quadratic model
    chosen, candidates = select_sindy(y[:20], y[20:], H, "rk4", libraries=("poly1", "poly2", "poly3"),
                                      thresholds=(1e-3, 1e-2))
    assert chosen is not None and chosen.n_terms == 3 and len(candidates) == 6
    assert chosen.score == min(f.score for f in candidates)


def test_sindy_gauss_legendre4_held_out_error_at_t10(data, tmp_path):
    pytest.importorskip("pysindy")
    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(data), out=str(tmp_path / "r.h5"), heldout=5, t_end=10.0,
                                        integrators=["sindy+gauss_legendre4"]))
    assert not report.failures
    result = read_rollout(report.out)
    err = result.metrics["sindy+gauss_legendre4"].rel_error
    assert err.shape[0] == 5 and np.max(err[:, -1]) <= 1e-5
    attrs = result.methods["sindy+gauss_legendre4"].meta
    assert attrs["kind"] == "fitted" and attrs["sindy_library"] == "poly2"
    assert attrs["sindy_equations"].splitlines()[0] == "z1' = 0.500000 z2 z3"  # the file's /state names
    assert len(json.loads(attrs["sindy_candidates"])) > 10
    assert "default split" in attrs["fit_source"]


def test_the_test_split_is_rolled_out_and_labelled(data, tmp_path):
    pytest.importorskip("pysindy")
    from vpintegrator.data.windows import split_train_val_test

    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(data), out=str(tmp_path / "r.h5"), integrators=["sindy+rk4", "rk4"]))
    test = split_train_val_test(20, *DEFAULT_SPLIT)[2]
    assert sorted(read_rollout(report.out).traj_index) == sorted(test.tolist())
    assert {r["split"] for r in report.rows} == {"test"}
    # a training trajectory asked for by name is labelled so, with one warning
    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(data), out=str(tmp_path / "t.h5"),
                                        integrators=["sindy+rk4"], traj=[int(split_train_val_test(20, *DEFAULT_SPLIT)[0][0])]))
    assert [r["split"] for r in report.rows] == ["train"] and "training split" in report.warnings[0]


def test_a_row_without_a_model_fails_alone(data, tmp_path, monkeypatch):
    pytest.importorskip("pysindy")
    import vpintegrator.rollout.sindy as sindy

    monkeypatch.setattr(sindy, "THRESHOLDS", (1e3,))  # every candidate all-zero: nothing fits
    lines = []
    report = run_rollouts(RolloutConfig(fit_on_data=True, data=str(data), out=str(tmp_path / "r.h5"), integrators=["sindy+rk4", "rk4"]),
                          log=lines.append)
    assert set(report.failures) == {"sindy+rk4"}
    line = report.failures["sindy+rk4"].line()
    assert "no SINDy candidate has skill" in line and "\n" not in line and line in lines
    result = read_rollout(report.out)
    assert np.isnan(result.metrics["sindy+rk4"].rel_error[:, 1:]).all()
    assert np.isfinite(result.metrics["rk4"].rel_error).all()
    assert "no SINDy candidate" in result.methods["sindy+rk4"].meta["fit_failure"]


def test_without_pysindy_one_line_says_how_to_install(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pysindy", None)  # import pysindy raises ImportError
    with pytest.raises(VPIntegratorError, match=r'pip install "vpintegrator\[sindy\]"') as err:
        run_rollouts(RolloutConfig(fit_on_data=True, data=str(data), out=str(tmp_path / "r.h5"), integrators=["sindy+rk4"]))
    assert "\n" not in str(err.value) and not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("name, message", [("sindy", "sindy\\+METHOD"), ("parrot+rk4", "takes no method"),
                                           ("sindy+nope", "nope")])
def test_bad_row_names_are_one_line(data, tmp_path, name, message):
    with pytest.raises(VPIntegratorError, match=message):
        run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=[name]))


def test_row_registry_parses_every_kind():
    assert parse_row("rk4") is None and parse_row("exact_flow") is None
    kind, method = parse_row("sindy+gauss_legendre4")
    assert (kind.name, kind.fitted, method) == ("sindy", True, "gauss_legendre4")
    kind, method = parse_row("shooting+rk4")
    assert (kind.name, kind.fitted, method) == ("shooting", False, "rk4")
    kind, method = parse_row("parrot")
    assert (kind.name, kind.fitted, method) == ("parrot", True, None)


def test_vp_rollout_cli_runs_a_sindy_row(data, tmp_path):
    pytest.importorskip("pysindy")
    from vpintegrator.cli.rollout import main

    out = tmp_path / "cli.h5"
    res = CliRunner().invoke(main, ["--data", str(data), "--fit-on-data", "--integrators", "sindy+implicit_midpoint", "--t-end", "4",
                                    "--out", str(out), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "z2' = -1.000000 z1 z3" in read_rollout(out).methods["sindy+implicit_midpoint"].meta["sindy_equations"]


# --- issue 57: a user's own pysindy objects and the file's state names ---------------------------------------------


@pytest.mark.parametrize("make", [
    lambda ps: ps.PolynomialLibrary(degree=3),
    lambda ps: ps.PolynomialLibrary(degree=3, include_bias=False),
    lambda ps: ps.PolynomialLibrary(degree=3, include_interaction=False),
    lambda ps: ps.PolynomialLibrary(degree=3, interaction_only=True),
    lambda ps: ps.IdentityLibrary(),
    lambda ps: ps.FourierLibrary(),
    lambda ps: ps.FourierLibrary(include_cos=False),
    lambda ps: ps.PolynomialLibrary(degree=2) + ps.FourierLibrary(),
], ids=["poly3", "no-bias", "no-interaction", "interaction-only", "identity", "fourier", "sin-only", "sum"])
def test_a_pysindy_library_becomes_the_same_features(make):
    """The features built here from a pysindy library object are pysindy's own columns (as a set: the order is ours)."""
    ps = pytest.importorskip("pysindy")
    from vpintegrator.rollout.sindy import _library_of

    lib = make(ps)
    z = np.random.default_rng(4).normal(size=(7, 3))
    ours = _library_of(lib, 3).transform(z)
    theirs = np.asarray(lib.fit_transform(z))
    assert ours.shape == theirs.shape
    key = lambda cols: sorted(map(tuple, np.round(cols.T, 10)))  # noqa: E731
    assert key(ours) == key(theirs)


def test_own_library_optimizer_and_names_from_python():
    ps = pytest.importorskip("pysindy")
    from vpintegrator.rollout import SindyStep

    y = _rigid_body()
    step = SindyStep(y[:20], y[20:], "gauss_legendre4", H, libraries=[ps.PolynomialLibrary(degree=2)],
                     optimizer=ps.STLSQ(threshold=0.01, alpha=1e-8), component_names=("p", "q", "r"))
    fit = step.fit_now()
    assert fit is not None and fit.n_terms == 3 and len(step.candidates) == 1 and np.isnan(fit.threshold)
    assert [line.split(" = ")[0] for line in fit.field.equations()] == ["p'", "q'", "r'"]
    assert fit.field.equations(3)[0] == "p' = 0.500 q r"
    z = np.random.default_rng(2).normal(size=(4, 3))
    np.testing.assert_allclose(fit.field.vector_field(z), RigidBody().vector_field(z), atol=1e-6)
    info = step.describe()
    assert sorted(json.loads(info["sindy_features"])) == ["p q", "p r", "q r"]
    assert json.loads(info["sindy_candidates"])[0]["threshold"] is None
    # with thresholds, each is set on (a clone of) the optimizer; the user's object is not changed
    opt = ps.STLSQ(threshold=0.5)
    from vpintegrator.rollout.sindy import select_sindy

    chosen, candidates = select_sindy(y[:20], y[20:], H, "rk4", libraries=["poly2"], thresholds=[1e-3, 1e-2],
                                      optimizer=opt)
    assert [c.threshold for c in candidates] == [1e-3, 1e-2] and opt.threshold == 0.5 and chosen.n_terms == 3


def test_equations_name_the_components_of_a_data_only_file(tmp_path):
    """A file from elsewhere whose /state names its components: the row's equations use the names."""
    pytest.importorskip("pysindy")
    import h5py

    y = _rigid_body(n=20)
    path = tmp_path / "mine.h5"
    with h5py.File(path, "w") as f:
        f["time"] = H * np.arange(y.shape[1])
        f["y"] = y
        f["state"] = np.array(["wx", "wy", "wz"], dtype="S")
    report = run_rollouts(RolloutConfig(data=str(path), out=str(tmp_path / "r.h5"), integrators=["sindy+rk4"],
                                        fit_on_data=True))
    equations = read_rollout(report.out).methods["sindy+rk4"].meta["sindy_equations"].splitlines()
    assert equations == ["wx' = 0.500000 wy wz", "wy' = -1.000000 wx wz", "wz' = 0.500000 wx wy"]


def test_the_record_is_made_once_per_fit(monkeypatch):
    """A fitted row's ``describe`` builds its SINDy record (equations, JSON) once, not at every rollout; a new fit
    makes it again."""
    import dataclasses

    from vpintegrator.rollout import sindy as sindy_mod

    made = []
    real = sindy_mod.sindy_record
    monkeypatch.setattr(sindy_mod, "sindy_record", lambda *a, **k: made.append(1) or real(*a, **k))

    class _Step:
        integrator = "rk4"
        fit = sindy_mod.SindyFit("poly1", 1e-3, None, 0, 0.5)
        candidates = [fit]

    step = _Step()
    first = sindy_mod.kept_record(step, ("x",))
    assert sindy_mod.kept_record(step, ("x",)) is first and len(made) == 1
    step.fit = dataclasses.replace(step.fit, score=0.25)
    step.candidates = [step.fit]
    again = sindy_mod.kept_record(step, ("x",))
    assert len(made) == 2 and again is not first and '"validation_error": 0.25' in again["sindy_candidates"]
    assert sindy_mod.kept_record(step, ("y",)) is not again and len(made) == 3
