"""Coordinates as data (issue 85 items 2 and 4): periodic components declared by a system, a spec or a data file,
wrapped in every error (relative error, NRMSE, the valid-prediction horizon, the validation rollout's score), with the
NRMSE's circular spread; the dysts adapter measures a 2π-periodic field itself."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vpintegrator.arrays import wrap
from vpintegrator.cli.gen import main as vp_gen
from vpintegrator.data import integrate
from vpintegrator.data.spec import load_spec
from vpintegrator.data.trajectories import state_periods
from vpintegrator.data.trajectory_files import read_metadata, read_trajectories, write_trajectories
from vpintegrator.errors import VPIntegratorError
from vpintegrator.metrics import TrajectoryMetricsStream, nrmse, relative_error, spread
from vpintegrator.systems import get_system
from vpintegrator.systems.base import check_periods

TAU = 2 * math.pi
PERIOD = np.array([TAU, 0.0])


# --- the wrap and the circular spread, against hand computations -------------------------------------------------
@pytest.mark.parametrize("convert", [np.asarray, torch.as_tensor])
def test_a_difference_across_the_boundary_is_wrapped(convert):
    d = convert(np.array([[6.2 - 0.05, 6.2 - 0.05], [0.05 - 6.2, 0.05 - 6.2], [TAU / 2, 1.0], [-TAU / 2, 1.0],
                          [3 * TAU + 0.1, 1.0]]))
    got = np.asarray(wrap(d, PERIOD))
    np.testing.assert_allclose(got[:, 0], [6.15 - TAU, TAU - 6.15, TAU / 2, TAU / 2, 0.1], atol=1e-12)
    np.testing.assert_array_equal(got[:, 1], np.asarray(d)[:, 1])  # a component of period 0 is left as it is
    assert abs(got[1, 0]) == pytest.approx(0.1332, abs=1e-4)  # 6.2 vs 0.05: ~0.133, not 6.15


def test_errors_of_a_periodic_component_are_wrapped():
    pred, ref = np.array([[[6.2, 1.0]]]), np.array([[[0.05, 1.0]]])
    e = TAU - 6.15  # the error across the boundary
    # ‖z‖ is the norm of z's representative: (0.05, 1.0); unwrapped by 100 turns, the same
    for shift in (0.0, 100 * TAU):
        got = relative_error(pred + [shift, 0.0], ref, PERIOD)[0, 0]
        assert got == pytest.approx(e / math.hypot(0.05, 1.0), rel=1e-9)
    assert relative_error(pred, ref)[0, 0] == pytest.approx(6.15 / math.hypot(0.05, 1.0))  # without: 6.15
    assert nrmse(pred, ref, np.array([0.5, 2.0]), PERIOD)[0, 0] == pytest.approx(math.sqrt((e / 0.5) ** 2 / 2))


def test_the_circular_spread_is_sqrt_minus_two_log_r():
    rng = np.random.default_rng(1)
    theta = rng.vonmises(3.0, 2.0, 4000)  # clustered around the boundary at π
    turns = rng.integers(-300, 300, theta.size) * TAU  # stored unwrapped
    y = np.stack([theta + turns, theta], axis=-1)
    mean, std = spread([y[:1000], y[1000:]], PERIOD)
    r = abs(np.mean(np.exp(1j * theta)))
    assert std[0] == pytest.approx(math.sqrt(-2 * math.log(r)), rel=1e-9)  # P / 2π = 1
    assert mean[0] == pytest.approx(np.angle(np.mean(np.exp(1j * theta))), rel=1e-9)
    np.testing.assert_allclose([mean[1], std[1]], [theta.mean(), theta.std()], rtol=1e-9)  # the other: as before
    assert std[0] < 1.0 < np.std(theta + turns)  # the plain spread of unwrapped angles says nothing


def test_the_stream_wraps_the_table_columns():
    """A prediction a whole number of turns off the reference has no error; a turn off in the other component does."""
    system = get_system("abc_flow")
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(2, 5, 3))
    pred = ref + np.array([TAU, -2 * TAU, 0.0])
    period = np.array([TAU, TAU, 0.0])
    stream = TrajectoryMetricsStream(system, 2, scale=np.ones(3), period=period)
    out = stream.update(np.arange(5) * 0.1, pred, ref)
    np.testing.assert_allclose(out["rel_error"], 0.0, atol=1e-12)
    summary = stream.summary()
    np.testing.assert_allclose(summary["nrmse"], 0.0, atol=1e-12)
    np.testing.assert_array_equal(summary["vpt"], [0.4, 0.4])  # never exceeded: t_end
    moved = TrajectoryMetricsStream(system, 2, scale=np.ones(3), period=np.array([TAU, 0.0, 0.0]))
    assert (moved.update(np.arange(5) * 0.1, pred, ref)["rel_error"] > 1.0).all()


# --- declarations: checked, from a system, a spec and a file -------------------------------------------------------
@pytest.mark.parametrize("declared, words", [
    ({3: TAU}, "periodic component 3 does not exist (the state has 3 components, 0..2)"),
    ({"0": -1.0}, "periodic component 0 has period -1.0, which is not a finite number > 0"),
    ({1: math.inf}, "periodic component 1 has period inf"),
    ({"x": TAU}, "periodic component 'x' is not an index"),
    ([TAU, 0.0], "periodic must give 3 periods (0 where not periodic)"),
])
def test_bad_declarations_are_one_line_errors_naming_the_key_and_the_fix(declared, words):
    with pytest.raises(VPIntegratorError) as err:
        check_periods(declared, 3, "spec.toml: key 'system.periodic'")
    msg = str(err.value)
    assert msg.startswith("spec.toml: key 'system.periodic': ") and words in msg and "\n" not in msg
    assert "give {index = period} with index in 0..2 and period > 0" in msg


def test_declarations_as_a_table_or_a_list_agree():
    table = check_periods({"0": TAU, 2: 1.5}, 3, "k")
    np.testing.assert_array_equal(table, [TAU, 0.0, 1.5])
    np.testing.assert_array_equal(check_periods([TAU, math.nan, 1.5], 3, "k"), table)
    np.testing.assert_array_equal(check_periods(None, 3, "k"), np.zeros(3))


SPEC = """
[system]
name = "abc_flow"
periodic = {PERIODIC}
[initial_conditions]
sampler = "box"
n_traj = 2
low = 100.0
high = 101.0
[integration]
dt = 0.1
t_end = 0.3
method = "rk4"
"""


def test_a_spec_declaration_is_recorded_in_the_file_and_read_back(tmp_path):
    spec = tmp_path / "abc.toml"
    spec.write_text(SPEC.replace("{PERIODIC}", "{0 = 6.283185307179586, 2 = 6.283185307179586}"))
    out = tmp_path / "abc.h5"
    result = CliRunner().invoke(vp_gen, [str(spec), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["y"].attrs["periodic"], [TAU, 0.0, TAU])
    meta = read_metadata(out)
    np.testing.assert_array_equal(state_periods(get_system("abc_flow"), 3, meta), [TAU, 0.0, TAU])
    assert load_spec(spec).periodic == {"0": TAU, "2": TAU}
    again = tmp_path / "again.toml"  # the spec's TOML keeps the declaration
    again.write_text(load_spec(spec).to_toml())
    np.testing.assert_array_equal(check_periods(load_spec(again).periodic, 3, "k"), [TAU, 0.0, TAU])


def test_a_bad_spec_declaration_is_one_line_from_vp_gen(tmp_path):
    spec = tmp_path / "abc.toml"
    spec.write_text(SPEC.replace("{PERIODIC}", "{5 = 6.283185307179586}"))
    result = CliRunner().invoke(vp_gen, [str(spec), "--out", str(tmp_path / "x.h5"), "-q"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "key 'system.periodic': periodic component 5 does not exist" in errors[0]


def test_a_data_only_file_declares_it_on_y(tmp_path):
    path = tmp_path / "mine.h5"
    with h5py.File(path, "w") as f:
        f["t"] = np.arange(4) * 0.1
        f["y"] = np.zeros((2, 4, 2))
        f["y"].attrs["periodic"] = [0.0, TAU]
    np.testing.assert_array_equal(state_periods(None, 2, read_metadata(path)), [0.0, TAU])
    with h5py.File(path, "a") as f:
        f["y"].attrs["periodic"] = [0.0, -1.0]
    with pytest.raises(VPIntegratorError, match=r"mine.h5: /y attribute 'periodic': periodic component 1 has period"):
        state_periods(None, 2, read_metadata(path))


# --- a rollout whose table is wrapped -------------------------------------------------------------------------------
def test_a_rollout_of_a_periodic_system_wraps_its_errors(tmp_path):
    """The ABC flow far from the origin (100 turns out), declared periodic by its file: the rollout file's errors and
    the table's mean_nrmse are the wrapped ones, the note names the wrapped components, the states stay unwrapped."""
    from vpintegrator.rollout import run_rollouts
    from vpintegrator.rollout.config import RolloutConfig

    system = get_system("abc_flow")
    y0 = 100 * TAU + np.array([[1.0, 2.0, 3.0], [3.0, 0.1, -2.0]])  # 2: the spread over both
    traj = integrate(system, y0, 0.5, 40, method="rk4")
    traj.meta["periodic"] = [TAU, TAU, TAU]
    data = write_trajectories(tmp_path / "abc.h5", traj)
    report = run_rollouts(RolloutConfig(data=str(data), out=str(tmp_path / "r.h5"), integrators=["euler"],
                                        reference="data"))
    assert any(n.startswith("wrapped: x (period 6.28319), y (period 6.28319), z (period 6.28319)") for n in report.notes)
    assert "wrapped: x" in report.markdown.read_text()
    with h5py.File(tmp_path / "r.h5", "r") as f:
        ref, pred = f["reference/y"][()], f["methods/euler/y"][()]
        stored = f["methods/euler/rel_error"][()]
    np.testing.assert_array_equal(ref, read_trajectories(data).y)  # unwrapped, as given
    period = np.full(3, TAU)
    np.testing.assert_allclose(stored, relative_error(pred, ref, period), rtol=1e-12)
    assert np.nanmax(stored) > 10 * np.nanmax(relative_error(pred, ref))  # unwrapped, ‖z‖ ≈ 1090 hid the error
    mean, std = spread([ref], period)
    want = nrmse(pred, ref, std, period)[:, 1:].mean(1).mean()
    assert report.rows[0]["mean_nrmse"] == pytest.approx(want, rel=1e-9)


def test_the_validation_rollout_score_is_wrapped():
    from vpintegrator.training.validation import RolloutValidator

    system = get_system("abc_flow")
    traj = integrate(system, np.array([[1.0, 2.0, 3.0]]), 0.1, 6, method="rk4")
    traj.meta["periodic"] = [TAU, TAU, TAU]
    validator = RolloutValidator(traj, 6, 1, 1)
    turned = validator.ref[:, 1:] + torch.tensor([TAU, -TAU, 3 * TAU], dtype=torch.float64)
    assert float(validator.score(turned, validator.ref)) == pytest.approx(0.0, abs=1e-12)


# --- the dysts adapter measures the period ----------------------------------------------------------------------------
FLOWS = '''
import numpy as np
from .base import DynSys, staticjit


class ArnoldBeltramiChildress(DynSys):
    @staticjit
    def _rhs(x, y, z, t, a, b, c):
        return a * np.sin(z) + c * np.cos(y), b * np.sin(x) + a * np.cos(z), c * np.sin(y) + b * np.cos(x)


class Lorenz(DynSys):
    @staticjit
    def _rhs(x, y, z, t, beta, rho, sigma):
        return sigma * y - sigma * x, rho * x - x * z - y, x * y - beta * z


class Drift(DynSys):  # periodic in x; its field ignores z (no period there)
    @staticjit
    def _rhs(x, y, z, t, a):
        return a + 0 * x, np.sin(x) + 0 * y, y + 0 * z
'''

BASE = '''
def staticjit(fn):
    return staticmethod(fn)


class DynSys:
    pass


class DynSysDelay:
    pass
'''


@pytest.fixture
def fake_dysts(tmp_path, monkeypatch):
    from vpintegrator.systems import dysts, registry

    pkg = tmp_path / "fake" / "dysts"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text(textwrap.dedent(BASE))
    (pkg / "flows.py").write_text(textwrap.dedent(FLOWS))
    meta = lambda params, ic: {"parameters": params, "initial_conditions": ic, "period": 1.5, "std": [1.0] * 3}  # noqa: E731
    (pkg / "data" / "chaotic_attractors.json").write_text(json.dumps({
        "ArnoldBeltramiChildress": meta({"a": 1.7, "b": 1.4, "c": 1.0}, [147.9, -1762.8, -647.4]),
        "Lorenz": meta({"sigma": 10.0, "rho": 28.0, "beta": 2.667}, [-9.79, -15.04, 20.53]),
        "Drift": meta({"a": 0.3}, [1.0, 0.5, 2.0])}))
    saved = dict(registry._REGISTRY), dict(registry._DEFAULT_INSTANCES), dict(dysts._CLASSES)
    modules = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "dysts" or k.startswith("dysts.")}
    dysts._CLASSES.clear()
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    yield pkg
    for name in [k for k in sys.modules if k == "dysts" or k.startswith("dysts.")]:
        del sys.modules[name]
    sys.modules.update(modules)
    dysts._CLASSES.clear()
    dysts._CLASSES.update(saved[2])
    for table, kept in zip((registry._REGISTRY, registry._DEFAULT_INSTANCES), saved[:2]):
        table.clear()
        table.update(kept)


@pytest.mark.parametrize("name, periodic", [("ArnoldBeltramiChildress", {0: TAU, 1: TAU, 2: TAU}),
                                            ("Lorenz", {}), ("Drift", {0: TAU})])
def test_the_dysts_adapter_measures_which_components_are_angles(fake_dysts, name, periodic):
    system = get_system(f"dysts:{name}")
    assert type(system).periods == periodic
    np.testing.assert_array_equal(state_periods(system, 3), [periodic.get(i, 0.0) for i in range(3)])


def test_vp_gen_lists_the_measured_angles(fake_dysts):
    result = CliRunner().invoke(vp_gen, ["--list", "dysts"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("components measured 2π-periodic"))
    assert line.endswith(": dysts:ArnoldBeltramiChildress (0, 1, 2); dysts:Drift (0)")
