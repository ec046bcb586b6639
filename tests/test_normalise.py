"""Normalisation that keeps the structure (issue 85, item 3): the conjugation y = A (x − b) of each model kind
keeps its structure to round-off, travels in the model file, is applied by every rollout runner, makes
training on offset coordinates work, and leaves everything else bit for bit as it was."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import vpintegrator as vp
from vpintegrator import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.data.trajectories import Trajectories
from vpintegrator.data.trajectory_files import write_trajectories
from vpintegrator.models import build_model, load_model, save_model
from vpintegrator.models.normalise import (Normalisation, coordinates_need, fit_normalisation, model_normalisation,
                                           resolve_normalisation, structure_rule)
from vpintegrator.rollout import ModelStep, rollout
from vpintegrator.testing import symplectic_form

pytestmark = pytest.mark.usefixtures("one_thread")

#: states far from the origin with very different spreads per component (q1, q2, p1, p2): a per-component
#: scale would break symplecticity, a shift the Casimir
_SPREAD = np.array([1.0, 10.0, 100.0, 0.1])


def _states(dim: int, offset: float = 1000.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spread = _SPREAD[:dim] if dim <= 4 else np.ones(dim)
    return offset + rng.normal(size=(5, 40, dim)) * spread


def _conjugated(model, norm: Normalisation):
    """The model as it acts on the data's states: one window (seq_len, dim) flattened -> the next, flattened."""
    T, d = int(model.seq_len), int(model.dim)

    def f(x):
        return norm.from_model(model(norm.to_model(x.reshape(1, T, d)))).reshape(-1)
    return f


def _jacobian(model, norm: Normalisation, x: torch.Tensor) -> torch.Tensor:
    return torch.func.jacrev(_conjugated(model, norm))(x.reshape(-1)).detach()


@pytest.mark.parametrize("name, extra", [("vpt", {"seq_len": 2, "n_blocks": 1, "L": 2}), ("vpff", {"n_blocks": 2}),
                                         ("vpt", {"seq_len": 2, "n_blocks": 1, "L": 2, "symmetric": True})])
def test_volume_preserving_model_conjugated_keeps_det_one(name, extra):
    torch.manual_seed(0)
    model = build_model(name, dim=3, **extra).double()
    norm, record = resolve_normalisation("auto", model, _states(3), name)
    assert record["applied"] and norm.rule == "affine" and norm.shift[0] == pytest.approx(1000.0, abs=1.0)
    x = torch.as_tensor(_states(3)[0, : model.seq_len])  # a window of the raw states, at ~1000
    det = torch.linalg.det(_jacobian(model, norm, x)).detach()
    assert abs(float(det) - 1.0) < 1e-12


@pytest.mark.parametrize("name, extra", [("la_sympnet", {}), ("g_sympnet", {}),
                                         ("symplectic_transformer", {"seq_len": 2})])
def test_symplectic_model_conjugated_is_symplectic(name, extra):
    torch.manual_seed(0)
    model = build_model(name, dim=4, **extra).double()
    norm, record = resolve_normalisation("on", model, _states(4), name)
    assert norm.rule == "symplectic"
    a, c = np.array(norm.scale[:2]), np.array(norm.scale[2:])
    assert np.allclose(a * c, a[0] * c[0], rtol=1e-14)  # a_i c_i the same for every pair
    assert not np.allclose(a, a[0])  # (and not one uniform scale: the test would not see a broken pairing)
    T = int(model.seq_len)
    x = torch.as_tensor(_states(4)[0, :T])
    M = _jacobian(model, norm, x)
    J = symplectic_form(4, T)
    err = float(torch.linalg.norm(M.T @ J @ M - J) / torch.linalg.norm(J))
    assert err < 1e-11  # measured 1.7e-12 (la_sympnet): M's entries span a_i/c_j ~ 1e3 at states ~1e3


def test_a_per_component_scale_would_break_symplecticity():
    """The negative case: the affine rule's scales on the same states are not conformally symplectic."""
    torch.manual_seed(0)
    model = build_model("la_sympnet", dim=4).double()
    norm = fit_normalisation(_states(4), "affine")
    M = _jacobian(model, norm, torch.as_tensor(_states(4)[0, :1]))
    J = symplectic_form(4, 1)
    assert float(torch.linalg.norm(M.T @ J @ M - J) / torch.linalg.norm(J)) > 1e-3


@pytest.mark.parametrize("name", ["lpnet", "lp_transformer"])
def test_lie_poisson_model_conjugated_keeps_the_casimir(name):
    torch.manual_seed(0)
    model = build_model(name, dim=3).double()
    states = _states(3, offset=0.0) * 40.0  # far from unit scale: the uniform rule applies
    norm, record = resolve_normalisation("auto", model, states, name)
    assert record["applied"] and norm.rule == "uniform" and set(norm.shift) == {0.0} and len(set(norm.scale)) == 1
    x = torch.as_tensor(states[0, : model.seq_len])
    with torch.no_grad():
        y = _conjugated(model, norm)(x.reshape(-1)).reshape(x.shape)
        # the affine rule's shift would move the Casimir
        moved = _conjugated(model, fit_normalisation(states, "affine"))(x.reshape(-1)).reshape(x.shape)
    c0, c1 = (x ** 2).sum(-1), (y ** 2).sum(-1)
    assert torch.allclose(c1, c0, rtol=1e-13, atol=0)
    assert float(((moved ** 2).sum(-1) / c0 - 1).abs().max()) > 1e-3


def test_each_model_kind_gets_its_rule():
    assert structure_rule(build_model("vpt", dim=3))[0] == "affine"
    assert structure_rule(build_model("st", dim=3))[0] == "affine"
    assert structure_rule(build_model("g_sympnet", dim=4))[0] == "symplectic"
    assert structure_rule(build_model("lpnet", dim=3))[0] == "uniform"
    rule, why = structure_rule(torch.nn.Linear(3, 3))  # a module that does not say what it keeps
    assert rule == "uniform" and "safest" in why


def test_auto_leaves_unit_scale_arenas_alone(tiny_data):
    from vpintegrator.data.windows import load_trajectories

    y = load_trajectories(tiny_data).y
    assert coordinates_need(y) is None
    norm, record = resolve_normalisation("auto", build_model("vpt", dim=3), y)
    assert norm is None and not record["applied"] and "unit-scale" in record["reason"]
    assert coordinates_need(np.asarray(y) + 1000.0) is not None


# -- the file and the rollout ------------------------------------------------------------------------------


def _with_normalisation(model, norm: Normalisation):
    model.trained_on = {"dt": 0.2, "system": None, "normalisation": {"mode": "on", "applied": True, **norm.record()}}
    return model


def test_save_load_round_trip_rolls_out_the_same(tmp_path):
    torch.manual_seed(0)
    model = build_model("vpt", dim=3, seq_len=2, n_blocks=1, L=2).double()
    states = _states(3)
    norm = fit_normalisation(states, "affine")
    _with_normalisation(model, norm)
    save_model(model, tmp_path / "m.pt", extra={"dt": 0.2, "normalisation": model.trained_on["normalisation"]})
    loaded = load_model(tmp_path / "m.pt")
    assert model_normalisation(loaded) == norm
    window0 = states[:, :2]
    a = rollout(ModelStep(model, device="cpu"), window0, 0.2, 8).y
    b = rollout(ModelStep(loaded, device="cpu"), window0, 0.2, 8).y
    assert np.isfinite(a).all() and np.array_equal(a, b)
    # the rollout is the conjugated map: states back in the data's coordinates, next to the first window
    with torch.no_grad():
        first = norm.from_model(model(norm.to_model(torch.as_tensor(window0)))).numpy()
    np.testing.assert_allclose(a[:, 2:4], first, rtol=1e-13)


def test_every_runner_sees_the_normalisation():
    """The numba kernel (float64, CPU, few trajectories) and torch eager give the same conjugated rollout."""
    pytest.importorskip("numba")
    torch.manual_seed(0)
    model = _with_normalisation(build_model("vpt", dim=3, seq_len=2, n_blocks=1, L=2).double(),
                                fit_normalisation(_states(3), "affine"))
    window0 = _states(3)[:, :2]
    fast = ModelStep(model, device="cpu")
    eager = ModelStep(model, device="cpu", scalar_max_batch=0)
    a, b = rollout(fast, window0, 0.2, 5).y, rollout(eager, window0, 0.2, 5).y  # (a random VPT grows fast)
    assert fast.describe()["runner"] == "numba" and eager.describe()["runner"] == "eager"
    assert np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_volume_metric_of_a_normalised_model_is_the_maps():
    torch.manual_seed(0)
    model = _with_normalisation(build_model("vpff", dim=3, n_blocks=2).double(), fit_normalisation(_states(3), "affine"))
    logdet = ModelStep(model, device="cpu").log_abs_det_jacobian(_states(3)[:, :1])
    assert np.abs(logdet).max() < 1e-12


def test_a_file_without_normalisation_rolls_out_as_the_bare_model():
    """No record: nothing is mapped, the rollout is the model's own iteration, bit for bit (pretrained files)."""
    model = load_model("pretrained:rigid_body_vpt")
    assert model_normalisation(model) is None and ModelStep(model).normalisation is None
    rng = np.random.default_rng(1)
    window0 = rng.normal(size=(4, model.seq_len, 3))
    y = rollout(ModelStep(model, device="cpu", scalar_max_batch=0), window0, 0.1, 2 * model.seq_len).y
    with torch.no_grad():
        direct = model(torch.as_tensor(window0, dtype=next(model.parameters()).dtype))
    assert np.array_equal(y[:, model.seq_len : 2 * model.seq_len], direct.double().numpy())


# -- training ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def offset_rigid_body():
    """The rigid-body test data (12 trajectories, 16 states) moved by +1000 in every component."""
    rng = np.random.default_rng(0)
    y0 = rng.normal(size=(12, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    traj = integrate("rigid_body", y0, 0.2, 15, method="rk4")
    return Trajectories(y=np.asarray(traj.y) + 1000.0, t=traj.t, meta=dict(traj.meta))


def _raw_one_step_rmse(model, data: Trajectories, rows) -> float:
    """RMSE in the data's coordinates of one model call from each held-out trajectory's first window."""
    y = np.asarray(data.y)[rows]
    T, P = model.seq_len, model.pred_window
    pred = rollout(ModelStep(model, device="cpu"), y[:, :T], float(data.dt), T + P - 1).y[:, T:]
    return float(np.sqrt(np.mean((pred - y[:, T : T + P]) ** 2)))


def test_training_on_offset_coordinates_is_better_normalised(offset_rigid_body):
    common = dict(model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=4, batch_size=32,
                  dtype="float64", optimizer="lm", lm_windows=128, out=None)
    off = vp.fit(dict(common, normalise="off"), train=offset_rigid_body)
    auto = vp.fit(dict(common, normalise="auto"), train=offset_rigid_body)
    record = auto.model.trained_on["normalisation"]
    assert record["applied"] and record["rule"] == "affine" and "component" in record["reason"]
    assert off.model.trained_on["normalisation"] == {"mode": "off", "applied": False, "reason": "normalise = 'off'"}
    val = off.model.training_split["val"]
    e_off, e_auto = (_raw_one_step_rmse(r.model, offset_rigid_body, val) for r in (off, auto))
    assert e_auto * 10 < e_off, (e_auto, e_off)  # measured: 0.0026 against 1.15 (450x)


def test_off_and_auto_on_unit_scale_data_train_the_same_weights(tiny_data, tmp_path):
    cfg = dict(data=[tiny_data], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=2,
               batch_size=32, dtype="float64")
    a = vp.fit(dict(cfg, normalise="off", out=str(tmp_path / "off")))
    b = vp.fit(dict(cfg, out=str(tmp_path / "auto")))  # the default, auto: the arena is unit-scale
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert [(h["train_loss"], h["val_loss"]) for h in a.history] == [(h["train_loss"], h["val_loss"]) for h in b.history]
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["normalisation"]["applied"] is False and "unit-scale" in summary["normalisation"]["reason"]


def test_cli_records_what_it_applied(offset_rigid_body, tmp_path):
    from vpintegrator.cli import train as train_cli

    data = write_trajectories(tmp_path / "offset.h5", offset_rigid_body)
    result = CliRunner().invoke(train_cli.main, ["--data", str(data), "--model", "vpff", "--epochs", "1",
                                                 "--dtype", "float64", "--normalise", "on", "--out",
                                                 str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "normalise on: applied affine: b = [" in result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    norm = Normalisation.from_record(summary["normalisation"])
    assert norm.shift[0] == pytest.approx(1000.0, abs=1.0)
    assert model_normalisation(load_model(tmp_path / "run")) == norm  # best.pt carries it too


# -- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, mode, words", [
    ("lpnet", "affine", "would break model lpnet's structure"),
    ("g_sympnet", "affine", "use normalise = 'on' (the rule 'symplectic')"),
    ("node", "on", "learned vector field"),
])
def test_a_normalisation_that_breaks_the_structure_is_one_line(name, mode, words):
    model = build_model(name, dim=4 if name == "g_sympnet" else 3)
    with pytest.raises(VPIntegratorError, match=re.escape(words)) as err:
        resolve_normalisation(mode, model, _states(int(model.dim)), f"model {name}")
    assert "\n" not in str(err.value) and err.value.key == "normalise"


def test_bad_switch_and_records_are_one_line(tmp_path, tiny_data):
    with pytest.raises(VPIntegratorError, match="normalise must be"):
        vp.TrainConfig.from_dict({"data": [tiny_data], "model": {"name": "vpt"}, "normalise": "yes"})
    with pytest.raises(VPIntegratorError, match="scale finite and > 0"):
        Normalisation("affine", (0.0, 0.0), (1.0, -1.0))
    with pytest.raises(VPIntegratorError, match="malformed"):
        Normalisation.from_record({"rule": "affine", "shift": [0.0]}, "model file x.pt")
    model = build_model("vpt", dim=3, seq_len=2, n_blocks=1)
    save_model(model, tmp_path / "bad.pt", extra={"dt": 0.2, "normalisation": {"applied": True, "rule": "affine",
                                                                               "shift": [0.0], "scale": "x"}})
    with pytest.raises(VPIntegratorError, match="malformed"):
        load_model(tmp_path / "bad.pt")


def test_a_step_map_that_takes_no_conjugation_refuses_a_normalised_model():
    from vpintegrator.rollout.methods import model_step

    model = _with_normalisation(build_model("node", dim=3), fit_normalisation(_states(3), "affine"))
    with pytest.raises(VPIntegratorError, match="take none"):
        model_step(model)


def _device_engine_states(model, window0, n_steps: int, device: str) -> np.ndarray:
    from vpintegrator.rollout.device import device_stream_rollout

    ys: list = []
    device_stream_rollout(ModelStep(model, device), window0, 0.2, n_steps, lambda k0, b: ys.append(b["y"].copy()),
                          chunk_steps=4)
    return np.concatenate(ys, axis=1)


def test_the_device_engine_steps_a_normalised_model_as_the_host_engine():
    torch.manual_seed(0)
    model = _with_normalisation(build_model("vpt", dim=3, seq_len=2, n_blocks=1, L=2).double(),
                                fit_normalisation(_states(3), "affine"))
    window0 = _states(3)[:, :2]
    host = rollout(ModelStep(model, "cpu", scalar_max_batch=0), window0, 0.2, 5).y
    dev = _device_engine_states(model, window0, 5, "cpu")
    np.testing.assert_allclose(dev, host, rtol=1e-14, atol=0)  # the first window: mapped in and out, ~1 ulp
    np.testing.assert_array_equal(dev[:, 2:], host[:, 2:])


@pytest.mark.gpu
def test_the_cuda_graph_steps_a_normalised_model_as_the_host_engine():
    torch.manual_seed(0)
    model = _with_normalisation(build_model("vpt", dim=3, seq_len=2, n_blocks=1, L=2).double(),
                                fit_normalisation(_states(3), "affine"))
    window0 = _states(3)[:, :2]
    host = rollout(ModelStep(model, "cpu", scalar_max_batch=0), window0, 0.2, 5).y
    np.testing.assert_allclose(_device_engine_states(model, window0, 5, "cuda"), host, rtol=1e-12, atol=0)


def test_fine_tuning_keeps_the_coordinates_of_the_model_it_starts_from(offset_rigid_body, tmp_path):
    data = str(write_trajectories(tmp_path / "offset.h5", offset_rigid_body))
    cfg = dict(data=[data], model={"name": "vpff", "n_blocks": 2}, epochs=1, dtype="float64")
    first = vp.fit(dict(cfg, out=str(tmp_path / "first")))
    parent = model_normalisation(first.model)
    assert parent is not None
    tuned = vp.fit(dict(cfg, init_from=str(tmp_path / "first"), out=str(tmp_path / "tuned")))
    assert model_normalisation(tuned.model) == parent
    assert "from init_from" in tuned.model.trained_on["normalisation"]["reason"]
    with pytest.raises(VPIntegratorError, match="steps in normalised coordinates"):
        vp.fit(dict(cfg, init_from=str(tmp_path / "first"), normalise="off", out=str(tmp_path / "off")))


# -- periodic components: every call on its wrapped window ---------------------------------------------------------

TAU = 2 * np.pi


def _periodic_norm(states: np.ndarray) -> Normalisation:
    return fit_normalisation(states, "affine", [TAU, 0.0, TAU])


def test_window_shift_takes_the_last_state_into_one_period_and_is_the_same_in_numpy_and_torch():
    """K moves the raw last state into (−π, π] in the periodic components (0, 2), by whole periods, and moves
    nothing in the other; the moments are those of the wrapped states; the record carries the periods."""
    states = _states(3, offset=0.0) * 40.0 + 300.0  # ~48 turns out, spread over several periods
    norm = _periodic_norm(states)
    assert norm.wraps and norm.period == (TAU, 0.0, TAU)
    assert abs(norm.shift[0]) < np.pi and norm.shift[1] == pytest.approx(states[..., 1].mean())  # x, z wrapped
    last = norm.to_model(states.reshape(-1, 3))
    k = norm.window_shift(last)
    raw = (last - k) / np.asarray(norm.scale) + np.asarray(norm.shift)
    assert (np.abs(raw[:, [0, 2]]) <= np.pi + 1e-9).all() and np.array_equal(k[:, 1], np.zeros(len(k)))
    turns = k[:, [0, 2]] / (np.asarray(norm.scale)[[0, 2]] * TAU)
    np.testing.assert_allclose(turns, np.round(turns), atol=1e-9)
    np.testing.assert_array_equal(norm.window_shift(torch.as_tensor(last)).numpy(), k)
    assert Normalisation.from_record(norm.record()) == norm
    assert "period" not in fit_normalisation(states, "affine").record()


def test_a_wrapped_call_commutes_with_whole_turns_and_keeps_volume():
    """Φ̃(X + turns) = Φ̃(X) + turns (the flow of a periodic field does), and det DΦ̃ = 1 for a VPFF."""
    torch.manual_seed(0)
    model = build_model("vpff", dim=3, n_blocks=2).double()
    norm = _periodic_norm(_states(3, offset=0.0) * 3.0)
    call = norm.call(model)
    x = torch.as_tensor(norm.to_model(_states(3, offset=0.0)[:, :1]))
    turn = torch.tensor([5 * TAU, 0.0, -3 * TAU], dtype=torch.float64) * torch.tensor(norm.scale, dtype=torch.float64)
    with torch.no_grad():
        np.testing.assert_allclose(call(x + turn), call(x) + turn, rtol=0, atol=1e-12)
        assert not torch.allclose(model(x + turn), model(x) + turn)  # the bare model does not
    jac = torch.autograd.functional.jacobian(lambda w: call(w.view(1, 1, 3)).reshape(-1), (x[0] + 3 * turn).reshape(-1))
    assert abs(float(torch.linalg.det(jac)) - 1.0) < 1e-12


def test_training_and_every_runner_wrap_the_windows(tmp_path):
    """vp-train's windows on periodic data (normalise on) are wrapped (the model file says so), and the numba
    runner, torch eager, the device engine and the training loop's iterate_windows step the same wrapped map."""
    pytest.importorskip("numba")
    from vpintegrator.stepping import iterate_windows

    system = vp.get_system("abc_flow")
    y0 = 40 * TAU + np.random.default_rng(0).uniform(0, TAU, (6, 3))
    traj = integrate(system, y0, 0.1, 60, method="rk4")
    traj.meta["periodic"] = [TAU, TAU, TAU]
    data = write_trajectories(tmp_path / "abc.h5", traj)
    vp.fit(dict(data=[str(data)], model={"name": "vpt", "seq_len": 2, "L": 2, "n_blocks": 1}, epochs=2,
                batch_size=32, dtype="float64", normalise="on", out=str(tmp_path / "run")))
    model = load_model(tmp_path / "run")
    norm = model_normalisation(model)
    assert norm is not None and norm.period == (TAU, TAU, TAU)
    window0 = traj.y[:, :2]
    fast, eager = ModelStep(model, device="cpu"), ModelStep(model, device="cpu", scalar_max_batch=0)
    a, b = rollout(fast, window0, 0.1, 12).y, rollout(eager, window0, 0.1, 12).y
    assert fast.describe()["runner"] == "numba" and np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=0)  # (the kernel agrees with torch to ~1e-12 a call)
    np.testing.assert_allclose(_device_engine_states(model, window0, 12, "cpu"), b, rtol=1e-12, atol=0)
    with torch.no_grad():
        parts = iterate_windows(norm.call(model), torch.as_tensor(norm.to_model(window0)), 5)
    np.testing.assert_allclose(norm.from_model(torch.cat(parts, 1).numpy())[:, :10], b[:, 2:12], rtol=1e-12, atol=0)
    # the bare model on the unwrapped coordinates (40 turns out) is another map
    with torch.no_grad():
        bare = norm.from_model(model(torch.as_tensor(norm.to_model(window0))).numpy())
    assert np.abs(bare - b[:, 2:4]).max() > 1e-6


def test_a_lie_poisson_model_takes_no_wrapping():
    with pytest.raises(VPIntegratorError, match="rule 'uniform'"):
        Normalisation("uniform", (0.0,) * 3, (1.0,) * 3, (TAU, 0.0, 0.0))
    norm = fit_normalisation(_states(3), "uniform", [TAU, 0.0, 0.0])
    assert not norm.wraps
