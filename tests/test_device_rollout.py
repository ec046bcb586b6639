"""The device rollout engine (vpintegrator.rollout.device): the host engine's rollout file, with the
states and metrics kept on the model's device (the CPU here; the CUDA graph path under -m gpu)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from ulp import assert_ulp_close, ulp_tolerance
from click.testing import CliRunner

from vpintegrator.data import generate, load_spec
from vpintegrator.errors import VPIntegratorError
from vpintegrator.metrics import TrajectoryMetricsStream, VolumeStream
from vpintegrator.models import build_model
from vpintegrator.rollout import (
    DeviceStepper,
    ModelStep,
    RolloutConfig,
    device_stream_rollout,
    initial_window,
    rollout,
    run_rollouts,
    use_device_engine,
)
from vpintegrator.systems import get_system

DT = 0.2


def paper_vpt(dtype=torch.float64, seed=0, scale=0.1):
    """The paper's VPT configuration, random init scaled by ``scale`` (0.1: bounded on the unit sphere)."""
    torch.manual_seed(seed)
    model = build_model("vpt", dim=3, seq_len=3, n_blocks=2, n_linear=1, L=3).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    # 10 trajectories: the host engine runs the numba kernel, the device engine torch (per call ~1e-14 apart)
    path = tmp_path_factory.mktemp("data") / "rb.h5"
    generate(load_spec("rigid_body", n_traj=10, t_end=2.0, dt=DT), out=path)
    return path


def _roll(tmp_path, data_file, engine, model, **kw):
    cfg = dict(data=data_file, out=tmp_path / f"{engine}.h5", models=[("vpt", model)], t_end=6.0, chunk_steps=7)
    return run_rollouts(RolloutConfig(engine=engine, **(cfg | kw)))


def _datasets(path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        out["attrs"] = dict(f["methods/vpt"].attrs)
    return out


def assert_same_files(host, device, rtol):
    """The two engines' files agree to ``rtol`` (tests/conftest.py TOL: "engines" for a float64 model)."""
    a, b = _datasets(host.out), _datasets(device.out)
    assert sorted(a) == sorted(b)
    for name in a:
        if name == "attrs":
            continue
        if a[name].dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a[name]), np.isnan(b[name]), err_msg=name)
            np.testing.assert_allclose(b[name], a[name], rtol=rtol, atol=rtol, err_msg=name)
        else:
            np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    assert a["attrs"]["engine"] == "host" and b["attrs"]["engine"] == "device"
    assert [list(r) for r in host.rows] == [list(r) for r in device.rows]  # the same table columns
    for rh, rd in zip(host.rows, device.rows):
        for key, value in rh.items():
            if key != "seconds_per_step":
                assert rd[key] == (value if isinstance(value, str) else pytest.approx(value, rel=rtol, abs=rtol, nan_ok=True)), key
    return a, b


@pytest.mark.parametrize("overlap", [False, True])
def test_device_engine_writes_the_host_engine_file(tmp_path, data_file, overlap, one_thread, tol):
    # t_end 6 beyond the data's 2: the reference is continued; chunk_steps 7 splits model calls (advance 3)
    host = _roll(tmp_path, data_file, "host", paper_vpt(), overlap=overlap)
    device = _roll(tmp_path, data_file, "device", paper_vpt(), overlap=overlap)
    a, b = assert_same_files(host, device, tol("engines"))
    assert np.isfinite(b["methods/vpt/y"]).all() and (b["methods/vpt/failed_step"] == -1).all()
    assert b["methods/vpt/log_det_J"].shape == (10, 28 if overlap else 10)
    assert b["attrs"]["runner"] == "eager" and b["attrs"]["n_failed"] == 0
    if not overlap:  # a VPT's window map preserves volume
        assert np.abs(b["methods/vpt/cum_log_det_J"]).max() < 1e-10


@pytest.mark.parametrize("blowup", [10.0, 0.5])
def test_blowups_fail_at_the_same_steps(tmp_path, data_file, blowup, one_thread, tol):
    # a larger random VPT leaves the sphere: rows fail at different steps, inside and across blocks (10),
    # or already in the first window (0.5: every state of the unit sphere is beyond 0.5 |z0|)
    model = paper_vpt(scale=0.3)
    t_end = 4.0 if blowup > 1 else 2.0  # beyond 2.0 the reference's own continuation would fail at 0.5
    host = _roll(tmp_path, data_file, "host", model, blowup=blowup, t_end=t_end, jit=False)
    device = _roll(tmp_path, data_file, "device", model, blowup=blowup, t_end=t_end, jit=False)
    a, b = assert_same_files(host, device, tol("engines"))
    failed = b["methods/vpt/failed_step"]
    if blowup == 10.0:
        assert (failed > 3).sum() >= 3 and (failed == -1).sum() >= 1 and len(set(failed.tolist())) >= 4
    else:
        assert (failed == 0).all()
    for i, k in enumerate(failed):
        if k >= 0:
            assert np.isnan(b["methods/vpt/y"][i, k:]).all() and np.isnan(b["methods/vpt/rel_error"][i, k:]).all()
    assert b["attrs"]["runner"] == "eager" and host.failures["vpt"] == device.failures["vpt"]


def test_engine_choice(tmp_path, data_file):
    vpt = ModelStep(paper_vpt(), "cpu")
    rb = get_system("rigid_body")
    assert use_device_engine("device", vpt, rb) and not use_device_engine("auto", vpt, rb)
    assert not use_device_engine("host", vpt, rb)
    from vpintegrator.rollout import IntegratorStep

    assert not use_device_engine("device", IntegratorStep(rb, "rk4", DT), rb)  # integrators: the host

    class NumpyOnly:  # a user's system whose invariants take NumPy arrays only
        name, invariant_names, torch_invariants = "mine", ("energy",), False

    assert not use_device_engine("auto", vpt, NumpyOnly())
    with pytest.raises(VPIntegratorError, match="engine device: system 'mine' evaluates its invariants on NumPy") as info:
        use_device_engine("device", vpt, NumpyOnly())
    assert info.value.key == "engine"
    # auto on the CPU: the host engine, recorded as such
    report = _roll(tmp_path, data_file, "auto", paper_vpt(), t_end=1.0, volume=False)
    with h5py.File(report.out) as f:
        assert f["methods/vpt"].attrs["engine"] == "host"


@pytest.mark.parametrize("engine", ["tpu", 1, None])  # not "gpu": a test id is a marker keyword
def test_bad_engine_is_a_one_line_error_naming_the_key(tmp_path, data_file, engine):
    with pytest.raises(VPIntegratorError, match=r"engine must be one of auto, host, device; got") as info:
        run_rollouts(RolloutConfig(data=data_file, out=tmp_path / "x.h5", integrators=["rk4"], engine=engine))
    assert info.value.key == "engine" and "\n" not in str(info.value)
    assert not (tmp_path / "x.h5").exists()


def test_cli_engine_flag(tmp_path, data_file):
    from vpintegrator.cli.rollout import main
    from vpintegrator.models import save_model

    save_model(paper_vpt(torch.float32), tmp_path / "vpt.pt")
    base = ["--data", str(data_file), "--model", f"vpt={tmp_path / 'vpt.pt'}", "--integrators", "rk4", "--t-end", "3",
            "--n-traj", "4", "--device", "cpu", "--quiet"]
    res = CliRunner().invoke(main, [*base, "--engine", "device", "--out", str(tmp_path / "d.h5")])
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.output.splitlines()[2:4]] == ["rk4", "vpt"]  # after the reference line, header
    with h5py.File(tmp_path / "d.h5") as f:
        assert f["methods/vpt"].attrs["engine"] == "device" and f["methods/rk4"].attrs["engine"] == "host"
    res = CliRunner().invoke(main, [*base, "--engine", "tpu", "--out", str(tmp_path / "e.h5")])
    assert res.exit_code == 1 and res.output.strip() == "Error: --engine must be one of auto, host, device; got 'tpu'"
    assert not (tmp_path / "e.h5").exists()


def test_metric_streams_on_tensors_equal_numpy():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(4, 23, 3))
    ref = y + 0.05 * rng.normal(size=y.shape)
    y[1, 9:] = np.nan  # a failed trajectory
    t = 0.2 * np.arange(23)
    rb = get_system("rigid_body")
    jac = lambda w: (w[:, -1] ** 2).sum(-1) - 1.0  # noqa: E731 (any per-window function: both namespaces)
    outs = []
    for to in (np.asarray, torch.as_tensor):
        stream, vol = TrajectoryMetricsStream(rb, 4, t_center=2.0), VolumeStream(jac, 4, 3, 3, 22)
        blocks = []
        for k0 in range(0, 23, 5):
            per = stream.update(to(t[k0 : k0 + 5]), to(y[:, k0 : k0 + 5]), to(ref[:, k0 : k0 + 5]))
            maps, ld, cum = vol.update(to(y[:, k0 : k0 + 5]))
            blocks.append({**per, "maps": (maps.start, maps.stop), "ld": ld, "cum": cum})
        outs.append((stream.summary(), vol.max_abs_cum, blocks))
    (s_np, v_np, b_np), (s_t, v_t, b_t) = outs
    assert isinstance(b_t[0]["rel_error"], torch.Tensor) and all(isinstance(v, np.ndarray) for v in s_t.values())
    for key in s_np:
        # torch against NumPy: two code paths (reductions may round apart), a few ulp of the values' scale
        np.testing.assert_allclose(s_t[key], s_np[key], rtol=1e-14, atol=ulp_tolerance(s_np[key], 8), err_msg=key)
    np.testing.assert_allclose(v_t.numpy(), v_np, rtol=1e-14)
    for bn, bt in zip(b_np, b_t):
        assert bn["maps"] == bt["maps"]
        for key in ("rel_error", "invariant/energy", "invariant/casimir", "ld", "cum"):
            np.testing.assert_allclose(np.asarray(bt[key]), bn[key], rtol=1e-14, atol=ulp_tolerance(bn[key], 8), err_msg=key)


def test_invariants_on_tensors():
    rng = np.random.default_rng(1)
    for name in ("rigid_body", "coupled_oscillator", "volterra", "abc_flow", "rigid_body_exp"):
        system = get_system(name)
        y = rng.normal(size=(3, 5, system.dim))
        want = system.invariants(y)
        got = system.invariants(torch.as_tensor(y))
        assert sorted(got) == sorted(want)
        for key in want:
            assert isinstance(got[key], torch.Tensor)
            assert_ulp_close(got[key].numpy(), want[key], ulps=8, err_msg=key)  # torch against NumPy: two code paths
    with pytest.raises(VPIntegratorError, match=r"shape \(\.\.\., 3\)"):
        get_system("rigid_body").invariants(torch.zeros(2, 4))


def test_user_system_with_numpy_invariants_refuses_tensors():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from user_systems import HarmonicOscillator

    with pytest.raises(VPIntegratorError, match="NumPy arrays only"):
        HarmonicOscillator().invariants(torch.zeros(2, 2))


def test_stepper_blocks_of_any_length_continue_the_rollout(one_thread):
    model = paper_vpt()
    window = initial_window("rigid_body", np.eye(3) * 0.8 + 0.1, DT, 3)
    want = rollout(ModelStep(model, "cpu", jit=False, scalar_max_batch=0), window, DT, 20).y
    stepper = DeviceStepper(ModelStep(model, "cpu"), window, jit=False)
    got = []
    for n in (1, 5, 2, 7, 6):  # 21 states: the window, then calls of 3 states cut anywhere
        out = torch.empty((3, n, 3), dtype=torch.float64)
        stepper.produce_into(out)
        got.append(out.numpy())
    np.testing.assert_array_equal(np.concatenate(got, axis=1), want)
    # a failed row restarts from its first window (the host engine's rule); the others go on
    stepper.restart(torch.tensor([False, True, False]))
    out = torch.empty((3, 3, 3), dtype=torch.float64)
    stepper.produce_into(out)
    np.testing.assert_array_equal(out[1].numpy(), want[1, 3:6])
    np.testing.assert_array_equal(out[[0, 2]].numpy(), rollout(ModelStep(model, "cpu", jit=False, scalar_max_batch=0),
                                                                window[[0, 2]], DT, 23).y[:, 21:24])


def test_device_stream_rollout_input_errors():
    from vpintegrator.rollout import IntegratorStep

    window = initial_window("rigid_body", np.eye(3), DT, 3)
    with pytest.raises(VPIntegratorError, match="the device engine runs models"):
        device_stream_rollout(IntegratorStep("rigid_body", "rk4", DT), window[:, -1], DT, 5, lambda k0, b: None)
    step = ModelStep(paper_vpt(), "cpu")
    with pytest.raises(VPIntegratorError, match=r"reference has shape \(3, 4, 3\); expected"):
        device_stream_rollout(step, window, DT, 5, lambda k0, b: None, reference=np.zeros((3, 4, 3)))
    with pytest.raises(VPIntegratorError, match="n_steps"):
        device_stream_rollout(step, window, DT, 2, lambda k0, b: None)
    blocks = []
    res = device_stream_rollout(step, window, DT, 9, lambda k0, b: blocks.append((k0, sorted(b))), chunk_steps=4)
    assert blocks == [(0, ["y"]), (4, ["y"]), (8, ["y"])] and res.meta["engine"] == "device"


# --- CUDA ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_graph_equals_eager_and_host(tmp_path, data_file):
    model = paper_vpt(torch.float32)
    y0 = np.random.default_rng(0).normal(size=(64, 3))
    window = initial_window("rigid_body", y0 / np.linalg.norm(y0, axis=1, keepdims=True), DT, 3)
    runs = {}
    for jit in (True, False):
        step = ModelStep(model, "cuda")
        ys = []
        res = device_stream_rollout(step, window, DT, 60, lambda k0, b: ys.append(b["y"].copy()), jit=jit, chunk_steps=16)
        runs[jit] = (np.concatenate(ys, axis=1), res.meta["runner"])
    assert runs[True][1] == "cuda_graph" and runs[False][1] == "eager"
    # float32 over 60 steps: the graph replays the eager kernels, so both are usually bitwise equal; cuBLAS
    # may still pick another algorithm (split-K, another reduction order) for a captured call, ~1e-7 relative
    # a step, carried along the rollout: 1e-5 relative is ~100 float32 ulps, far below a wrong state (O(1))
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-5, atol=1e-6)
    host = rollout(ModelStep(model, "cuda", jit=False), window, DT, 60).y
    np.testing.assert_allclose(runs[True][0], host, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_cuda_run_rollouts_auto_is_the_device_engine(tmp_path, data_file):
    model = paper_vpt(torch.float32)
    host = _roll(tmp_path, data_file, "host", model, device="cuda", jit=False)  # eager: the graph's kernels
    device = _roll(tmp_path, data_file, "auto", model, device="cuda")
    # float32 kernels of the same model, graph-captured or not: same tolerance and reason as above
    a, b = assert_same_files(host, device, rtol=1e-5)
    assert b["attrs"]["runner"] == "cuda_graph" and b["attrs"]["device"].startswith("cuda")
