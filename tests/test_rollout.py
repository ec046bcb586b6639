"""The rollout engine: classical integrators, the exact flow, models, failures, streaming, volume."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from ulp import assert_ulp_close

from vpintegrator.data import generate, load_spec
from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.integrators import get_integrator, list_integrators
from vpintegrator.systems import get_system
from vpintegrator.models import build_model
from vpintegrator.rollout import (
    ExactFlowStep,
    IntegratorStep,
    ModelStep,
    RolloutConfig,
    StepMap,
    RolloutStats,
    initial_window,
    read_rollout,
    rollout,
    run_rollouts,
    stream_rollout,
)

# tolerances: tests/conftest.py TOL, through the tol fixture
DET64 = 1e-10
DT = 0.2
Y0 = np.array([[np.sin(1.1), 0.0, np.cos(1.1)], [0.0, np.sin(1.1), np.cos(1.1)], [0.6, 0.0, 0.8]])
def _runs_on(method, system):
    from vpintegrator.errors import VPIntegratorError
    from vpintegrator.integrators import get_integrator
    from vpintegrator.systems import get_system

    try:
        get_integrator(method).supports(get_system(system))
    except VPIntegratorError:  # e.g. Störmer–Verlet and its compositions need a separable H
        return False
    return True


RIGID_METHODS = [m for m in list_integrators() if _runs_on(m, "rigid_body")]


def small_vpt(dtype=torch.float64, seed=0, scale=1.0, **kw):
    torch.manual_seed(seed)
    cfg = dict(dim=3, seq_len=3, n_blocks=1, n_linear=1, L=2) | kw
    model = build_model("vpt", **cfg).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def paper_vpt(dtype=torch.float64):
    """The paper's VPT configuration, randomly initialised; weights scaled by 0.1 so that rollouts on the
    unit sphere stay bounded (an unscaled random VPT blows up within a few windows, where the Jacobian is
    too ill-conditioned for a 1e-10 determinant check)."""
    return small_vpt(dtype, n_blocks=2, L=3, scale=0.1)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rb.h5"
    generate(load_spec("rigid_body", n_traj=3, t_end=2.0, dt=DT), out=path)
    return path


# --- classical integrators and the exact flow -----------------------------------------------------------


@pytest.mark.parametrize("method", RIGID_METHODS)
@pytest.mark.parametrize("chunk_steps", [1, 7, 1024])
def test_classical_rollout_equals_integrate_exactly(method, chunk_steps):
    got = rollout(IntegratorStep("rigid_body", method, DT), Y0, DT, 40, chunk_steps=chunk_steps)
    want = integrate("rigid_body", Y0, DT, 40, method=method, compiled=False)
    # two code paths (the compiled single-trajectory stepper against integrate's NumPy step): a few ulp per step
    assert_ulp_close(got.y, want.y, steps=40)
    assert_ulp_close(got.t, want.t)
    assert (got.failed_step == -1).all()


def _iterates(method: str) -> bool:
    """Whether ``method`` (or its base) solves implicit equations iteratively."""
    base = getattr(get_integrator(method), "base", None) or method
    return base == "implicit_midpoint" or base.startswith("gauss_legendre")


def test_coupled_oscillator_stormer_verlet_equals_integrate():
    y0 = np.array([[1.0, 0.0, 2.0, 0.0]])
    got = rollout(IntegratorStep("coupled_oscillator", "stormer_verlet", 0.4), y0, 0.4, 30)
    want = integrate("coupled_oscillator", y0, 0.4, 30, method="stormer_verlet", compiled=False)
    assert_ulp_close(got.y, want.y, steps=30)  # compiled stepper against NumPy: two code paths


def test_exact_flow_reproduces_reference(data_file):
    from vpintegrator.data import read_trajectories

    ref = read_trajectories(data_file)
    got = rollout(ExactFlowStep("rigid_body", DT), ref.y[:, 0], DT, ref.n_steps, chunk_steps=4)
    # the flow is restarted every chunk; both solves are accurate to ~1e-12
    np.testing.assert_allclose(got.y, ref.y, rtol=0, atol=1e-9)


def test_initial_window_by_implicit_midpoint_is_integrate():
    w = initial_window("rigid_body", Y0, DT, 3, method="implicit_midpoint")
    # bit for bit: initial_window calls integrate (the same code on the same data)
    assert np.array_equal(w, integrate("rigid_body", Y0, DT, 2, method="implicit_midpoint").y)
    assert initial_window("rigid_body", Y0, DT, 1).shape == (3, 1, 3)


# --- models ---------------------------------------------------------------------------------------------


class ShiftModel(torch.nn.Module):
    """A toy multi-step model with seq_len != pred_window: next states = last state + k * (0.01, 0, 0)."""

    def __init__(self, seq_len=2, pred_window=3):
        super().__init__()
        self.dim, self.seq_len, self.pred_window = 3, seq_len, pred_window
        self.scale = torch.nn.Parameter(torch.tensor(0.01, dtype=torch.float64))

    def forward(self, x):  # (batch, seq_len, dim) -> (batch, pred_window, dim)
        k = torch.arange(1, self.pred_window + 1, dtype=x.dtype)[None, :, None]
        step = torch.zeros(3, dtype=x.dtype)
        step[0] = 1.0
        return x[:, -1:, :] + self.scale * k * step + 0.1 * x[:, :1, :].sin()


def slow_rollout(model, window, n_steps, overlap):
    """Obviously correct window iteration, one list element per state."""
    states = [torch.as_tensor(window[:, i]) for i in range(window.shape[1])]
    T, P = model.seq_len, model.pred_window
    with torch.no_grad():
        while len(states) < n_steps + 1:
            x = torch.stack(states[-T:], dim=1).to(next(model.parameters()).dtype)
            pred = model(x).double()
            states += [pred[:, 0]] if overlap else [pred[:, i] for i in range(P)]
    return torch.stack(states[: n_steps + 1], dim=1).numpy()


RUNNERS = {  # ModelStep options -> the runner they give a float64 VPT at batch 3
    "eager": dict(jit=False, scalar_max_batch=0),
    "numba": dict(),
}


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    "make",
    [lambda: small_vpt(), lambda: small_vpt(scale=0.1), lambda: ShiftModel(2, 3), lambda: ShiftModel(3, 1)],
    ids=["vpt", "vpt_small_weights", "shift_2_3", "shift_3_1"],
)
def test_model_rollout_equals_slow_window_loop(make, overlap, runner):
    model = make()
    window = initial_window("rigid_body", Y0, DT, model.seq_len)
    step = ModelStep(model, "cpu", overlap=overlap, **RUNNERS[runner])
    got = rollout(step, window, DT, 23, chunk_steps=5, blowup=1e12)
    want = slow_rollout(model, window, 23, overlap)
    assert got.y.dtype == np.float64
    if got.meta["runner"] == "numba" and np.abs(want).max() > 1e3:
        # the unscaled random VPT's states grow to ~1e7 in 23 steps, and the per-call rounding differences
        # (~1e-16 relative) with them: 8e-9 relative at the end, measured
        np.testing.assert_allclose(got.y, want, rtol=1e-7, atol=1e-12)
    else:
        np.testing.assert_allclose(got.y, want, rtol=0, atol=1e-12)


def test_float32_model_runs_in_float32_and_stores_float64():
    model = small_vpt(torch.float32)
    window = initial_window("rigid_body", Y0, DT, 3)
    step = ModelStep(model, "cpu")
    got = rollout(step, window, DT, 30)
    assert step.dtype == torch.float32 and got.y.dtype == np.float64
    predicted = got.y[:, 3:]  # the first window is given in float64
    assert np.array_equal(predicted, predicted.astype(np.float32).astype(np.float64), equal_nan=True)
    assert got.meta["dtype"] == "float32"


# --- the compiled (numba) runner for small batches ---------------------------------------------


def _scaled(name, **cfg):
    torch.manual_seed(0)
    model = build_model(name, **cfg).double()
    with torch.no_grad():  # bounded rollouts on the unit sphere (see paper_vpt)
        for p in model.parameters():
            p.mul_(0.1)
    return model


SCALAR_MODELS = {
    "small_vpt": lambda: small_vpt(scale=0.1),
    "paper_vpt": lambda: paper_vpt(),
    "paper_vpt_arbitrary": lambda: small_vpt(n_blocks=2, L=3, scale=0.1, skew_sym=False),
    "paper_vpff": lambda: _scaled("vpff", dim=3, n_blocks=6),
    "paper_st": lambda: _scaled("st", dim=3, seq_len=3, n_blocks=2, L=3),
}


def _eager(model, **kw):
    return ModelStep(model, "cpu", jit=False, scalar_max_batch=0, **kw)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("key", SCALAR_MODELS)
def test_scalar_runner_rollout_equals_eager(key, overlap):
    # short: random models are no integrators, their rollouts leave the sphere and amplify rounding (the
    # kernel's tanh and torch.tanh differ in the last bit for many arguments) to O(1) within 300 steps; the trained
    # models' rollouts are compared over 300 steps below
    model = SCALAR_MODELS[key]()
    window = initial_window("rigid_body", Y0, DT, model.seq_len)
    step = ModelStep(model, "cpu", overlap=overlap)
    got = rollout(step, window, DT, 30, chunk_steps=8)
    want = rollout(_eager(model, overlap=overlap), window, DT, 30, chunk_steps=8)
    assert got.meta["runner"] == "numba" and want.meta["runner"] == "eager"
    np.testing.assert_allclose(got.y, want.y, rtol=0, atol=1e-12)
    assert (got.failed_step == -1).all()


@pytest.mark.parametrize("name", ["rigid_body_vpt", "rigid_body_vpff", "rigid_body_st"])
def test_scalar_runner_rollout_of_shipped_models(name):
    from vpintegrator.models import list_pretrained, load_model
    from vpintegrator.systems import paper_sphere_points, paper_trajectory_index

    if name not in list_pretrained():
        pytest.skip(f"{name} not shipped")
    model = load_model(f"pretrained:{name}")
    y0 = paper_sphere_points()[[paper_trajectory_index(1), paper_trajectory_index(4)]]
    window = initial_window("rigid_body", y0, DT, model.seq_len)
    got = rollout(ModelStep(model, "cpu"), window, DT, 300)
    want = rollout(_eager(model), window, DT, 300)
    assert got.meta["runner"] == "numba"
    # per call the two agree to ~4e-14 (the trained VPT has inner values ~260); 100 calls amplify that to
    # a few 1e-12 (3.6e-12 measured)
    np.testing.assert_allclose(got.y, want.y, rtol=0, atol=1e-11)


@pytest.mark.parametrize(
    "make, n_traj, runner",
    [
        (lambda: ModelStep(small_vpt(), "cpu"), 128, "numba"),  # MODEL_MAX_BATCH
        (lambda: ModelStep(small_vpt(), "cpu"), 129, "eager"),  # above it: torch
        (lambda: ModelStep(small_vpt(), "cpu", scalar_max_batch=0), 1, "eager"),
        (lambda: ModelStep(small_vpt(), "cpu", jit=False, scalar_max_batch=0), 1, "eager"),
        (lambda: ModelStep(small_vpt(torch.float32), "cpu"), 1, "eager"),  # float32: torch
        (lambda: ModelStep(small_vpt(seq_len=4), "cpu"), 1, "numba"),  # any seq_len (Cayley by elimination)
        (lambda: ModelStep(ShiftModel(2, 3), "cpu", jit=False), 1, "eager"),  # not a registry model
    ],
)
def test_runner_choice(make, n_traj, runner):
    step = make()
    y0 = np.tile(Y0, (-(-n_traj // len(Y0)), 1))[:n_traj]
    res = rollout(step, initial_window("rigid_body", y0, DT, step.seq_len), DT, 12)
    assert res.meta["runner"] == runner


def test_scalar_max_batch_is_validated():
    with pytest.raises(VPIntegratorError, match="scalar_max_batch"):
        ModelStep(small_vpt(), "cpu", scalar_max_batch=-1)


def test_scalar_runner_failures_and_restarts_equal_eager():
    model = small_vpt(scale=3.0)  # blows up within a few windows, so rows fail and restart
    window = initial_window("rigid_body", Y0, DT, 3)
    got = rollout(ModelStep(model, "cpu"), window, DT, 120, chunk_steps=16)
    want = rollout(_eager(model), window, DT, 120, chunk_steps=16)
    assert got.meta["runner"] == "numba"
    assert (want.failed_step >= 0).any()
    assert got.failed_step.tolist() == want.failed_step.tolist()
    np.testing.assert_allclose(got.y, want.y, rtol=1e-12, atol=1e-12)


def test_compiled_runner_falls_back_to_torch_without_numba(monkeypatch):
    import vpintegrator.rollout.numba_model as cm

    monkeypatch.setattr(cm, "pack", lambda model: None)  # what pack gives without numba
    model = small_vpt(scale=0.1)
    window = initial_window("rigid_body", Y0[:1], DT, 3)
    got = rollout(ModelStep(model, "cpu"), window, DT, 45, chunk_steps=6)
    want = rollout(_eager(model), window, DT, 45, chunk_steps=6)
    assert got.meta["runner"] == "eager"
    np.testing.assert_allclose(got.y, want.y, rtol=1e-12, atol=1e-12)


def test_compiled_runner_reset_and_chunks_share_the_context():
    # restarts go through the tensor view of the kernel's NumPy context
    model = small_vpt(scale=0.1)
    window = initial_window("rigid_body", np.tile(Y0[:1], (3, 1)), DT, 3)
    step = ModelStep(model, "cpu")
    step.start(window, np.full(3, 1e3))
    a = step.generate(9)
    step.reset(np.array([1]))
    b = step.generate(9)
    np.testing.assert_array_equal(b[1], a[1])  # row 1 restarted from its first window
    assert not np.array_equal(b[0], a[0])  # row 0 went on
    assert step.describe()["runner"] == "numba"


# --- failures -------------------------------------------------------------------------------------------


class NaNAt(StepMap):
    """A step map that copies its state and yields NaN for row ``row`` from step ``k`` on."""

    kind = "integrator"

    def __init__(self, row, k, dim=3):
        self.row, self.k, self.dim = row, k, dim

    def start(self, window0, limit):
        self.y0 = window0[:, -1].copy()
        self.step = 0

    def generate(self, n):
        out = np.repeat(self.y0[:, None], n, axis=1)
        steps = self.step + 1 + np.arange(n)
        out[self.row, steps >= self.k] = np.nan
        self.step += n
        return out

    def reset(self, rows):
        pass

    def log_abs_det_jacobian(self, windows):
        return np.zeros(len(windows))


@pytest.mark.parametrize("chunk_steps", [1, 4, 100])
def test_nan_detection_records_failure_step(chunk_steps):
    res = rollout(NaNAt(row=1, k=13), Y0, DT, 30, chunk_steps=chunk_steps)
    assert res.failed_step.tolist() == [-1, 13, -1]
    assert np.isnan(res.y[1, 13:]).all() and np.isfinite(res.y[1, :13]).all()
    assert np.isfinite(res.y[[0, 2]]).all()
    assert res.n_failed == 1


def test_blowup_is_a_failure_and_the_trajectory_stays_frozen():
    y0 = Y0 * 3.0
    res = rollout(IntegratorStep("rigid_body", "euler", 1.0), y0, 1.0, 400, blowup=10.0, chunk_steps=16)
    assert (res.failed_step > 0).all()
    for i, k in enumerate(res.failed_step):
        assert np.isnan(res.y[i, k:]).all()
        assert (np.linalg.norm(res.y[i, :k], axis=-1) <= 10.0 * np.linalg.norm(y0[i])).all()


def test_model_nan_is_detected():
    model = ShiftModel(2, 2)
    with torch.no_grad():
        model.scale.fill_(float("nan"))
    window = initial_window("rigid_body", Y0, DT, 2)
    res = rollout(ModelStep(model, "cpu", jit=False), window, DT, 10)
    assert res.failed_step.tolist() == [2, 2, 2]


# --- streaming ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: IntegratorStep("rigid_body", "rk4", DT), lambda: ModelStep(small_vpt(torch.float32), "cpu")])
def test_streaming_to_hdf5_equals_in_memory(tmp_path, make):
    n_steps = 3000
    window = initial_window("rigid_body", Y0, DT, make().seq_len)
    mem = rollout(make(), window, DT, n_steps)
    with h5py.File(tmp_path / "s.h5", "w") as f:
        ds = f.create_dataset("y", shape=(3, n_steps + 1, 3), dtype="f8", chunks=(3, 128, 3))
        blocks = []
        res = stream_rollout(make(), window, DT, n_steps, ds, chunk_steps=128, callback=lambda k0, c: blocks.append((k0, c.shape[1])))
        assert isinstance(res, RolloutStats) and res.failed_step.tolist() == mem.failed_step.tolist()
        # one block of at most chunk_steps at a time, aligned with the dataset's chunks
        assert [k0 for k0, _ in blocks] == list(range(0, n_steps + 1, 128))
        assert sum(n for _, n in blocks) == n_steps + 1
        np.testing.assert_array_equal(ds[:], mem.y, strict=False)


def test_engine_input_errors():
    step = ModelStep(small_vpt(), "cpu")
    window = initial_window("rigid_body", Y0, DT, 3)
    with pytest.raises(VPIntegratorError, match="n_steps"):
        rollout(step, window, DT, 2)
    with pytest.raises(VPIntegratorError, match="window0 must have shape"):
        rollout(step, Y0, DT, 10)
    with pytest.raises(VPIntegratorError, match="valid methods"):
        IntegratorStep("rigid_body", "leapfrog", DT)


# --- volume ---------------------------------------------------------------------------------------------


def _cum_log_det(step, window, n_steps):
    from vpintegrator.metrics import VolumeStream

    vol = VolumeStream(step.log_abs_det_jacobian, window.shape[0], step.seq_len, step.advance, n_steps)
    rollout(step, window, DT, n_steps, callback=lambda k0, c: vol.update(c), chunk_steps=17)
    return vol


@pytest.mark.parametrize(
    "make, preserves",
    [
        (lambda: IntegratorStep("rigid_body", "splitting", DT), True),
        (lambda: ModelStep(paper_vpt(), "cpu"), True),
        (lambda: IntegratorStep("rigid_body", "rk4", DT), False),
        (lambda: IntegratorStep("rigid_body", "implicit_midpoint", DT), False),
        # overlapping windows X -> [X[1:], f(X)[0]] are not volume preserving even when f is
        (lambda: ModelStep(paper_vpt(), "cpu", overlap=True), False),
    ],
)
def test_volume_metric(make, preserves):
    step = make()
    window = initial_window("rigid_body", Y0, DT, step.seq_len)
    vol = _cum_log_det(step, window, 60)
    assert vol._next_map == vol.n_maps  # every map was measured
    assert np.isfinite(vol.max_abs_cum).all()
    if preserves:
        assert vol.max_abs_cum.max() <= DET64
    else:
        assert vol.max_abs_cum.min() > 1e-6


def test_volume_of_float32_model_is_measured_in_float64():
    step = ModelStep(paper_vpt(torch.float32), "cpu")
    window = initial_window("rigid_body", Y0, DT, 3)
    vol = _cum_log_det(step, window, 30)
    assert vol.max_abs_cum.max() <= DET64


# --- run_rollouts / read_rollout ------------------------------------------------------------------------


def test_run_rollouts_writes_everything_and_reads_back(tmp_path, data_file):
    from vpintegrator.models import save_model

    save_model(small_vpt(torch.float32), tmp_path / "run" / "best.pt")
    cfg = RolloutConfig(
        data=data_file, out=tmp_path / "ro.h5", models=[str(tmp_path / "run")],
        integrators=["implicit_midpoint", "rk4", "splitting"], t_end=6.0, chunk_steps=8,
    )
    report = run_rollouts(cfg)
    assert [r["method"] for r in report.rows] == ["implicit_midpoint", "rk4", "splitting", "run"]
    assert report.csv.exists() and report.markdown.exists()
    res = read_rollout(report.out)
    assert res.t.shape == (31,) and res.reference.y.shape == (3, 31, 3)
    # inside the data the reference is the file; beyond it, the DOP853 flow continued
    from vpintegrator.data import read_trajectories, solve_flow

    ref = read_trajectories(data_file)
    np.testing.assert_array_equal(res.reference.y[:, :11], ref.y)
    exact = solve_flow("rigid_body", ref.y[:, 0], res.t)
    np.testing.assert_allclose(res.reference.y, exact, atol=1e-9)
    # every method equals an independent computation: here the integrator's step applied by hand
    im = res.methods["implicit_midpoint"]
    midpoint, system = get_integrator("implicit_midpoint"), get_system("rigid_body")
    by_hand = [ref.y[:, 0]]
    for _ in range(30):
        by_hand.append(midpoint.step(system, by_hand[-1], DT))
    # the rollout runs the compiled stepper for 3 trajectories, by hand is NumPy: two code paths
    assert_ulp_close(im.y, np.stack(by_hand, axis=1), steps=30)
    np.testing.assert_allclose(res.metrics["implicit_midpoint"].rel_error, np.linalg.norm(im.y - res.reference.y, axis=-1) / np.linalg.norm(res.reference.y, axis=-1))
    assert im.meta["kind"] == "integrator" and res.methods["run"].meta["kind"] == "model"
    assert res.methods["run"].meta["init"] == "reference"
    np.testing.assert_array_equal(res.methods["run"].y[:, :3], ref.y[:, :3])
    assert res.metrics["splitting"].cum_log_det_J.shape == (3, 30)
    assert np.abs(res.metrics["splitting"].cum_log_det_J).max() <= DET64
    assert res.metrics["run"].map_t.tolist() == pytest.approx(DT * np.array([5, 8, 11, 14, 17, 20, 23, 26, 29, 30]))
    row = {r["method"]: r for r in report.rows}
    assert set(row["rk4"]) >= {"final_rel_error", "valid_time", "max_rel_drift_energy", "max_rel_drift_casimir",
                               "max_abs_cum_log_det_J", "seconds_per_step", "failed"}
    assert row["implicit_midpoint"]["max_rel_drift_casimir"] < 1e-12


def test_run_rollouts_init_by_implicit_midpoint(tmp_path, data_file):
    cfg = RolloutConfig(
        data=data_file, out=tmp_path / "ro.h5", models=[("vpt", small_vpt(torch.float32))], init="implicit_midpoint",
        traj=[2, 0], volume=False,
    )
    run_rollouts(cfg)
    res = read_rollout(tmp_path / "ro.h5")
    assert res.traj_index.tolist() == [2, 0]
    w = initial_window("rigid_body", res.reference.y[:, 0], DT, 3)
    np.testing.assert_array_equal(res.methods["vpt"].y[:, :3], w)
    assert res.metrics["vpt"].log_det_J is None


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(integrators=["rk4", "leapfrog"]), "valid: euler, rk4"),
        (dict(models=[("m", build_model("vpt", dim=4, seq_len=3))]), "model dim 4 does not match"),
        (dict(models=[("m", small_vpt())], t_end=0.4), "shorter than seq_len = 3"),
        (dict(models=["/no/such/run"]), "no such checkpoint"),
        (dict(integrators=["rk4"], traj=[0, 3]), "traj index 3 is out of range"),
        (dict(integrators=["rk4"], n_traj=9), "n_traj must be an int in 1 .. 3"),
        (dict(integrators=["rk4"], init="magic"), "init 'magic' is unknown"),
        (dict(integrators=["rk4", "rk4"]), "used twice"),
        (dict(), "nothing to roll out"),
    ],
)
def test_run_rollouts_bad_inputs(tmp_path, data_file, kw, match):
    with pytest.raises(VPIntegratorError, match=match) as info:
        run_rollouts(RolloutConfig(data=data_file, out=tmp_path / "x.h5", **kw))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.gpu
def test_cuda_rollout_matches_cpu():
    model = paper_vpt(torch.float32)
    window = initial_window("rigid_body", Y0, DT, 3)
    cpu = rollout(ModelStep(model, "cpu"), window, DT, 60)
    step = ModelStep(paper_vpt(torch.float32), "cuda")
    gpu = rollout(step, window, DT, 60)
    assert step.device.type == "cuda" and gpu.y.dtype == np.float64
    # float32 model, 60 steps: cuBLAS and the CPU's float32 kernels (oneDNN/MKL, FMA or not) round each call
    # differently, ~1e-7 relative, and the rollout carries the difference along (no contraction on the sphere):
    # 1e-4 relative leaves room for that growth and is still 1e4 below a wrong state; TF32 stays off (torch's
    # default), otherwise a step would be off by ~1e-3. The volume is measured in float64 (DET64)
    np.testing.assert_allclose(gpu.y, cpu.y, rtol=1e-4, atol=1e-5)
    assert np.abs(_cum_log_det(step, window, 30).max_abs_cum).max() <= DET64
